"""Time travel by number finds the version's manifest by probing its two possible names
(``versions.find_version``), not by listing ``_versions/``: opening version n costs the
same whatever the version count. The listing still decides when the probe finds no name
or both, so the errors read as before: a version cleanup removed, one that never
existed, and a mixture of naming schemes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, NotFoundError, VersionCleanedUpError
from lance_sql.format.naming import VERSIONS_DIR, ManifestNaming
from lance_sql.table.meta.versions import find_version

NAMINGS = [ManifestNaming.V1, ManifestNaming.V2]


def _table(tmp_path: Path, naming: ManifestNaming, versions: int) -> str:
    uri = str(tmp_path / "t.lance")
    for v in range(versions):
        lance_sql.write_dataset(pa.table({"id": pa.array([v], pa.int64())}), uri,
                                mode="create" if v == 0 else "append",
                                enable_v2_manifest_paths=naming is ManifestNaming.V2)
    return uri


@pytest.mark.parametrize("naming", NAMINGS)
def test_opening_a_version_does_not_list_versions(tmp_path: Path, naming: ManifestNaming,
                                                  request: pytest.FixtureRequest) -> None:
    uri = _table(tmp_path, naming, 6)
    ds = lance_sql.dataset(uri)
    listed = request.getfixturevalue("listings")  # counted from here on
    past = ds.checkout_version(3)
    again = lance_sql.dataset(uri, version=4)
    ref = find_version(ds.store, 2)
    assert VERSIONS_DIR not in listed
    assert (past.version, past.count_rows()) == (3, 3)
    assert (again.version, again.count_rows()) == (4, 4)
    assert (ref.version, ref.naming) == (2, naming)


@pytest.mark.parametrize("naming", NAMINGS)
def test_missing_versions_are_reported_as_before(tmp_path: Path,
                                                 naming: ManifestNaming) -> None:
    uri = _table(tmp_path, naming, 4)
    ds = lance_sql.dataset(uri)
    ds.cleanup_old_versions(older_than=timedelta(0))
    with pytest.raises(VersionCleanedUpError, match="cleanup_old_versions removed it; "
                                                    "versions: 4"):
        ds.checkout_version(2)
    with pytest.raises(NotFoundError, match=r"version 9 of .* does not exist; versions: 4"):
        lance_sql.dataset(uri, version=9)


@pytest.mark.parametrize("naming", NAMINGS)
def test_both_names_of_one_version_are_a_mixture(tmp_path: Path,
                                                 naming: ManifestNaming) -> None:
    uri = _table(tmp_path, naming, 3)
    store = lance_sql.dataset(uri).store
    other = ManifestNaming.V1 if naming is ManifestNaming.V2 else ManifestNaming.V2
    store.put(other.key(2), store.read(naming.key(2)))
    with pytest.raises(FormatError, match="V1 and V2"):
        find_version(store, 2)


@pytest.mark.parametrize("naming", NAMINGS)
def test_a_newer_manifest_of_the_other_scheme_is_a_mixture(tmp_path: Path,
                                                           naming: ManifestNaming) -> None:
    """A writer of the other scheme committed last: opening an old version reports the
    mixture, as opening the latest does."""
    uri = _table(tmp_path, naming, 3)
    store = lance_sql.dataset(uri).store
    other = ManifestNaming.V1 if naming is ManifestNaming.V2 else ManifestNaming.V2
    store.put(other.key(4), store.read(naming.key(3)))
    with pytest.raises(FormatError, match="V1 and V2"):
        lance_sql.dataset(uri, version=2)


@pytest.mark.parametrize("naming", NAMINGS)
def test_without_a_hint_the_listing_decides(tmp_path: Path, naming: ManifestNaming) -> None:
    uri = _table(tmp_path, naming, 3)
    (Path(uri) / VERSIONS_DIR / "latest_version_hint.json").unlink()
    assert lance_sql.dataset(uri, version=2).count_rows() == 2
