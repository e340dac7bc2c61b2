"""``ds.tags``: the same answers as pylance 14.0.2's, on tags either library wrote."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, InvalidInputError, NotFoundError
from lance_sql.table.meta.versions import tag_time

lance = pytest.importorskip("lance")


@pytest.fixture()
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    for i in range(3):
        lance.write_dataset(pa.table({"a": [i]}), path, mode="append" if i else "create")
    return path


def test_tag_times_parse_as_pylance_writes_them() -> None:
    utc = dt.UTC
    assert tag_time("2026-11-30T14:10:49.314674535Z", "t") == dt.datetime(
        2026, 11, 30, 14, 10, 49, 314674, tzinfo=utc)
    assert tag_time("2026-11-30T14:10:49Z", "t") == dt.datetime(2026, 11, 30, 14, 10, 49,
                                                               tzinfo=utc)
    assert tag_time("2026-11-30T16:10:49.5+02:00", "t") == dt.datetime(
        2026, 11, 30, 14, 10, 49, 500000, tzinfo=utc)
    assert tag_time(None, "t") is None
    for bad in ("yesterday", "2026-13-01T00:00:00Z", 17):
        with pytest.raises(FormatError, match="tag 't'"):
            tag_time(bad, "t")


def test_list_matches_pylance_on_either_librarys_tags(uri: str) -> None:
    lance.dataset(uri).tags.create("theirs", 1)
    lance_sql.dataset(uri).tags.create("ours", 2)
    mine, theirs = lance_sql.dataset(uri).tags.list(), lance.dataset(uri).tags.list()
    assert mine == theirs
    for info in mine.values():
        assert isinstance(info["created_at"], dt.datetime)
        assert info["created_at"].tzinfo is not None
    # ours are written to the nanosecond, as pylance's are
    raw = json.loads(Path(uri, "_refs", "tags", "ours.json").read_text())
    assert len(raw["createdAt"].split(".")[1]) == len("123456789Z")


def test_update_keeps_creation_time_and_metadata(uri: str) -> None:
    tags = lance_sql.dataset(uri).tags
    tags.create("t", 1)
    tags.replace_metadata("t", {"owner": "etl"})
    before = tags.list()["t"]
    assert before["metadata"] == {"owner": "etl"}
    assert before["updated_at"] == before["created_at"]  # replace_metadata leaves it
    time.sleep(0.002)
    tags.update("t", 3)
    after = tags.list()["t"]
    assert after["version"] == 3 and after["metadata"] == {"owner": "etl"}
    assert after["created_at"] == before["created_at"] < after["updated_at"]
    assert lance.dataset(uri).tags.list()["t"] == after
    with pytest.raises(NotFoundError):
        tags.update("missing", 1)
    with pytest.raises(NotFoundError):
        tags.replace_metadata("missing", {})
    with pytest.raises(InvalidInputError):
        tags.replace_metadata("t", {"n": 1})


def test_references_name_versions_as_pylance_does(uri: str) -> None:
    ours, theirs = lance_sql.dataset(uri).tags, lance.dataset(uri).tags
    for name, reference in [("latest", None), ("one", (None, 1)), ("two", ("main", 2)),
                            ("newest", (None, None)), ("copy", "{}-one")]:
        ours.create(f"o-{name}", reference if name != "copy" else reference.format("o"))
        theirs.create(f"p-{name}", reference if name != "copy" else reference.format("p"))
        assert ours.get_version(f"o-{name}") == theirs.get_version(f"p-{name}")
    with pytest.raises(NotFoundError, match="branch 'dev'"):
        ours.create("x", ("dev", 1))
    with pytest.raises(NotFoundError):
        ours.create("x", 9)
    with pytest.raises(InvalidInputError):
        ours.create("x", 1.5)


def test_list_ordered_matches_pylance(uri: str) -> None:
    tags = lance_sql.dataset(uri).tags
    for name, version in [("b", 1), ("a", 3), ("c", 2), ("d", 2)]:
        tags.create(name, version)
    theirs = lance.dataset(uri).tags
    for order in (None, "asc", "desc"):
        assert [n for n, _ in tags.list_ordered(order)] == [
            n for n, _ in theirs.list_ordered(order)]
    assert [n for n, _ in tags.list_ordered()] == ["a", "c", "d", "b"]
    with pytest.raises(InvalidInputError, match="sideways"):
        tags.list_ordered("sideways")


def test_a_bad_tag_time_is_a_format_error(uri: str) -> None:
    lance_sql.dataset(uri).tags.create("t", 1)
    path = Path(uri, "_refs", "tags", "t.json")
    body = json.loads(path.read_text())
    body["createdAt"] = "noon"
    path.write_text(json.dumps(body))
    ds = lance_sql.dataset(uri)
    with pytest.raises(FormatError, match="'t'"):
        ds.tags.list()
    assert ds.tags.get_version("t") == 1  # the version it names still reads
    assert lance_sql.dataset(uri, "t").version == 1


def test_tags_pylance_names_so_are_read(uri: str, tmp_path: Path) -> None:
    """pylance makes tags named all in digits, or longer than lance_sql writes: they broke
    every listing (tags, cleanup, table_versions, the CLI's log) and could not be deleted;
    a string naming one opens the tag, as in pylance (else it is a version number)."""
    long_name = "t" * 205  # (pylance makes up to ~210: its temporary name adds ~45 bytes)
    lance.dataset(uri).tags.create("2", 1)
    lance.dataset(uri).tags.create(long_name, 3)
    ours = lance_sql.dataset(uri)
    assert ours.tags.list()["2"]["version"] == 1 and long_name in ours.tags.list()
    assert lance_sql.dataset(uri, version="2").version == 1  # the tag, as pylance opens it
    assert lance_sql.dataset(uri, version="3").version == 3  # no such tag: version 3
    ours.cleanup_old_versions(older_than=dt.timedelta(0),
        error_if_tagged_old_versions=False)
    rows = lance_sql.connect(str(tmp_path)).sql(
        "SELECT count(*) AS n FROM table_versions('t')").to_pylist()
    assert rows == [{"n": 2}]
    ours.tags.delete("2")
    with pytest.raises(InvalidInputError, match="version number"):
        ours.tags.create("5", 3)  # (lance_sql itself still makes none: see check_tag_name)
    assert list(lance_sql.dataset(uri).tags.list()) == [long_name]


def test_a_tag_whose_name_starts_as_a_date_is_named_after_an_at(uri: str,
                                                                tmp_path: Path) -> None:
    lance_sql.dataset(uri).tags.create("2026-release", 2)
    got = lance_sql.connect(str(tmp_path)).sql('SELECT a FROM "t@2026-release"').to_pylist()
    assert sorted(r["a"] for r in got) == [0, 1]


def test_error_if_tagged_old_versions_refuses_and_removes_nothing(uri: str) -> None:
    """pylance's flag was accepted and ignored: untagged versions were removed."""
    ds = lance_sql.dataset(uri)
    ds.tags.create("keep", 1)
    with pytest.raises(InvalidInputError, match="version 1 is tagged"):
        ds.cleanup_old_versions(older_than=dt.timedelta(0), error_if_tagged_old_versions=True)
    assert [v["version"] for v in ds.versions()] == [1, 2, 3]
    ds.cleanup_old_versions(older_than=dt.timedelta(0), error_if_tagged_old_versions=False)
    assert [v["version"] for v in ds.versions()] == [1, 3]


def test_no_reference_tags_the_version_the_object_is_at(uri: str) -> None:
    # pylance's reference=None is the handle's own version, however old or stale; only
    # (branch, None) names the newest. Tagging the newest instead pointed the tag at
    # another version than the one the caller was looking at.
    for lib, prefix in ((lance_sql, "o"), (lance, "p")):
        stale = lib.dataset(uri)  # the newest when opened
        old = lib.dataset(uri, version=1)
        checked_out = lib.dataset(uri).checkout_version(2)
        lib.write_dataset(pa.table({"a": [9]}), uri, mode="append")
        stale.tags.create(f"{prefix}-stale")
        old.tags.create(f"{prefix}-old")
        checked_out.tags.create(f"{prefix}-moved", 3)
        checked_out.tags.update(f"{prefix}-moved")
        checked_out.tags.create(f"{prefix}-newest", (None, None))
    versions = {name: info["version"] for name, info in lance.dataset(uri).tags.list().items()}
    # (pylance's handles open after lance_sql's append: its stale one is at 4)
    assert versions == {"o-stale": 3, "o-old": 1, "o-moved": 2, "o-newest": 4,
                        "p-stale": 4, "p-old": 1, "p-moved": 2, "p-newest": 5}
