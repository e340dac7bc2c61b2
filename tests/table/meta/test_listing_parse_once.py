"""Listing ``_versions/`` parses each manifest name once per process: an append lists
the directory twice (to open the table, and after writing its transaction file, which
the commit protocol needs), and both listings still happen, but only the names new
since the last listing are parsed. The listing's answers are unchanged: ascending,
and a mixture of naming schemes is an error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.naming import ManifestNaming
from lance_sql.io import LocalStore
from lance_sql.table.meta import versions


def _append(uri: str, v: int) -> None:
    lance_sql.write_dataset(pa.table({"id": pa.array([v], pa.int64())}), uri,
                            mode="create" if v == 0 else "append")


def test_appends_parse_only_new_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      request: pytest.FixtureRequest) -> None:
    uri = str(tmp_path / "t.lance")
    for v in range(30):
        _append(uri, v)
    store = LocalStore(uri)
    versions.list_versions(store)
    parsed: list[str] = []
    real = versions.parse_manifest_name

    def parse(name: str) -> tuple[int, ManifestNaming] | None:
        parsed.append(name)
        return real(name)

    monkeypatch.setattr(versions, "parse_manifest_name", parse)
    listed = request.getfixturevalue("listings")
    for v in range(30, 33):
        _append(uri, v)
    assert listed.count("_versions") == 6  # both listings of each append still happen
    assert len(parsed) <= 3  # each new version's name, at most
    assert [r.version for r in versions.list_versions(store)] == list(range(1, 34))


def test_a_listing_still_reports_a_mixture(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "t.lance"))
    for v in (1, 2, 3):
        store.put(ManifestNaming.V1.key(v), b"m")
    assert [r.version for r in versions.list_versions(store)] == [1, 2, 3]
    store.put(ManifestNaming.V2.key(4), b"m")
    with pytest.raises(FormatError, match="V1 and V2"):
        versions.list_versions(store)
