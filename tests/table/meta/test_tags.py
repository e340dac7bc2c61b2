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
