"""``table_changes('t', start, end)`` in SQL: results, pushdown of projections and filters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.io import MemoryStore


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": [f"{tag}{i}" for i in ids]})


@pytest.fixture
def uri() -> Iterator[str]:
    """v1 create (2 files), v2 append, v3 delete, v4 update, v5 append."""
    name = f"changes-{uuid.uuid4().hex}"
    uri = f"memory://{name}"
    lance_sql.write_dataset(_rows(range(6), "a"), uri, max_rows_per_file=3,
                            enable_stable_row_ids=True)
    lance_sql.write_dataset(_rows(range(6, 9), "b"), uri, mode="append")
    ds = lance_sql.dataset(uri)
    ds.delete("id IN (1, 7)")
    ds.update({"v": "'x'"}, where="id IN (0, 4)")
    lance_sql.write_dataset(_rows(range(9, 10), "c"), uri, mode="append")
    yield uri
    MemoryStore.reset(name)


def _expected(uri: str, start: int, end: int) -> list[tuple]:
    """From full snapshots keyed by _rowid (independent of the fragment-level diff)."""
    def snap(v: int) -> dict[int, dict]:
        cols = ["id", "v", "_rowid", "_row_last_updated_at_version"]
        return {r["_rowid"]: r for r in lance_sql.dataset(uri, v).to_table(columns=cols)
                .to_pylist()} if v else {}

    out = []
    for v in range(start, end + 1):
        old, new = snap(v - 1), snap(v)
        out += [(v, "insert", i, new[i]["id"], new[i]["v"]) for i in new.keys() - old.keys()]
        out += [(v, "delete", i, old[i]["id"], old[i]["v"]) for i in old.keys() - new.keys()]
        for i in old.keys() & new.keys():
            if old[i]["_row_last_updated_at_version"] != new[i]["_row_last_updated_at_version"]:
                out += [(v, "update_preimage", i, old[i]["id"], old[i]["v"]),
                        (v, "update_postimage", i, new[i]["id"], new[i]["v"])]
    return sorted(out)


def _tuples(table: pa.Table) -> list[tuple]:
    return sorted((r["_commit_version"], r["_change_type"], r["_rowid"], r["id"], r["v"])
                  for r in table.to_pylist())


def _session(uri: str) -> lance_sql.LanceSession:
    s = lance_sql.connect()
    s.register("t", uri)
    return s


@pytest.fixture
def reads(uri: str) -> Iterator[list[str]]:
    """Data-file keys read from the store while the test runs (file cache emptied first)."""
    lance_sql.default_runtime().clear("data_files")
    seen: list[str] = []
    store = MemoryStore(uri.removeprefix("memory://"))
    store.add_hook(lambda op, key: seen.append(key) if key.startswith("data/") else None)
    yield seen
    store.clear_hooks()


def _data_keys(uri: str, version: int) -> set[str]:
    return {f"data/{d.path}" for f in lance_sql.dataset(uri, version).manifest.fragments
            for d in f.files}


def test_select_star_matches_snapshots(uri: str) -> None:
    s = _session(uri)
    table = s.sql("SELECT * FROM table_changes('t', 1, 5)").to_arrow_table()
    assert table.column_names == ["id", "v", "_change_type", "_commit_version",
                                  "_commit_timestamp", "_rowid"]
    assert _tuples(table) == _expected(uri, 1, 5)
    assert _tuples(s.sql("SELECT * FROM table_changes('t', 3, 4)").to_arrow_table()) == \
        _expected(uri, 3, 4)
    assert s.sql("SELECT count(*) AS n FROM table_changes('t', 2, 5)").to_pylist() == [
        {"n": len(_expected(uri, 2, 5))}]


def test_timestamps_as_strings(uri: str) -> None:
    s = _session(uri)
    stamps = {r["_commit_version"]: r["_commit_timestamp"] for r in s.sql(
        "SELECT DISTINCT _commit_version, _commit_timestamp FROM table_changes('t', 1, 5)"
    ).to_pylist()}
    query = (f"SELECT * FROM table_changes('t', '{stamps[3].isoformat()}', "
             f"'{stamps[4].isoformat()}')")
    assert _tuples(s.sql(query).to_arrow_table()) == _expected(uri, 3, 4)


def test_metadata_filter_reads_no_new_data_files(uri: str, reads: list[str]) -> None:
    before_deletes = _data_keys(uri, 2)
    written_later = _data_keys(uri, 5) - before_deletes
    got = _session(uri).sql("SELECT id, _commit_version FROM table_changes('t', 1, 5) "
                            "WHERE _change_type = 'delete'").to_pylist()
    # The deleted rows' values come from the files they lived in, nothing else is read.
    assert reads and set(reads) <= before_deletes
    assert not set(reads) & written_later
    assert sorted((r["_commit_version"], r["id"]) for r in got) == sorted(
        (c[0], c[3]) for c in _expected(uri, 1, 5) if c[1] == "delete")


def test_metadata_only_query_reads_no_data(uri: str, reads: list[str]) -> None:
    got = _session(uri).sql(
        "SELECT _rowid, _change_type FROM table_changes('t', 1, 5) "
        "WHERE _commit_version = 4 ORDER BY _rowid, _change_type").to_pylist()
    assert reads == []
    assert [(r["_rowid"], r["_change_type"]) for r in got] == sorted(
        (c[2], c[1]) for c in _expected(uri, 4, 4))


def test_mixed_filter_and_projection(uri: str) -> None:
    s = _session(uri)
    got = s.sql("SELECT v FROM table_changes('t', 1, 5) "
                "WHERE _commit_version >= 2 AND (v LIKE 'b%' OR _rowid = 0)").to_pylist()
    want = [c[4] for c in _expected(uri, 2, 5) if c[4].startswith("b") or c[2] == 0]
    assert sorted(r["v"] for r in got) == sorted(want)


def test_joins_with_the_table(uri: str) -> None:
    s = _session(uri)
    got = s.sql("SELECT c.id, t.v AS now FROM table_changes('t', 4, 4) c "
                "JOIN t ON c._rowid = t._rowid WHERE c._change_type = 'update_postimage' "
                "ORDER BY c.id").to_pylist()
    assert got == [{"id": 0, "now": "x"}, {"id": 4, "now": "x"}]


def test_errors_are_typed(uri: str, tmp_path) -> None:
    s = _session(uri)
    with pytest.raises(InvalidInputError, match="after end"):
        s.sql("SELECT * FROM table_changes('t', 4, 2)").to_arrow_table()
    with pytest.raises(NotFoundError, match="does not exist"):
        s.sql("SELECT * FROM table_changes('t', 1, 50)").to_arrow_table()
    with pytest.raises(InvalidInputError):
        s.sql("SELECT * FROM table_changes('t')").to_arrow_table()
    plain = tmp_path / "plain.lance"
    lance.write_dataset(_rows(range(2), "a"), plain)
    s.register("plain", plain)
    with pytest.raises(InvalidInputError, match="stable row ids"):
        s.sql("SELECT * FROM table_changes('plain', 1, 1)").to_arrow_table()


def test_net_mode_is_the_python_net_feed(uri: str) -> None:
    s = _session(uri)
    ds = lance_sql.dataset(uri)
    for start, end in ((1, 5), (2, 5), (3, 4)):
        got = s.sql(f"SELECT * FROM table_changes('t', {start}, {end}, 'net')").to_arrow_table()
        assert _tuples(got) == _tuples(ds.table_changes(start, end, mode="net"))
    # v2 appended 6..8, v3 deleted 7: row 7 came and went inside the window
    got = s.sql("SELECT id, _change_type FROM table_changes('t', 2, 5, 'net') "
                "WHERE _change_type <> 'update_preimage' ORDER BY id").to_pylist()
    assert got == [{"id": 0, "_change_type": "update_postimage"},
                   {"id": 1, "_change_type": "delete"},
                   {"id": 4, "_change_type": "update_postimage"},
                   {"id": 6, "_change_type": "insert"},
                   {"id": 8, "_change_type": "insert"},
                   {"id": 9, "_change_type": "insert"}]
    # a metadata filter applies to the net rows: rows 0 and 4, created in v1 and updated
    # in v4, are net inserts carrying v4 (every change of v4 would be two update pairs)
    assert s.sql("SELECT count(*) AS n FROM table_changes('t', 1, 5, 'net') "
                 "WHERE _commit_version = 4").to_pylist() == [{"n": 2}]
    assert s.sql("SELECT count(*) AS n FROM table_changes('t', 1, 5) "
                 "WHERE _commit_version = 4").to_pylist() == [{"n": 4}]
    assert _tuples(s.sql("SELECT * FROM table_changes('t', 1, 5, 'all')").to_arrow_table()) \
        == _expected(uri, 1, 5)
    with pytest.raises(InvalidInputError, match="change mode"):
        s.sql("SELECT * FROM table_changes('t', 1, 5, 'latest')").to_arrow_table()


@pytest.mark.parametrize("mode", ["all", "net"])
def test_tags_bound_the_window_like_versions(uri: str, mode: str) -> None:
    # a tag is read as VERSION AS OF reads it, for either bound and in either mode
    ds = lance_sql.dataset(uri)
    ds.tags.create("start", 2)
    ds.tags.create("end-4", 4)
    s = _session(uri)
    by_version = _tuples(s.sql(
        f"SELECT * FROM table_changes('t', 2, 4, '{mode}')").to_arrow_table())
    assert by_version  # the window holds changes: the comparisons below mean something
    for start, end in (("'start'", "'end-4'"), ("'start'", "4"), ("2", "'end-4'")):
        got = s.sql(f"SELECT * FROM table_changes('t', {start}, {end}, '{mode}')")
        assert _tuples(got.to_arrow_table()) == by_version, (start, end)
    # the Python API takes them too
    assert _tuples(ds.table_changes("start", "end-4", mode=mode)) == by_version
    if mode == "all":
        assert by_version == _expected(uri, 2, 4)
        assert _tuples(s.sql("SELECT * FROM table_changes('t', 'start')").to_arrow_table()) \
            == _expected(uri, 2, 5)


def test_an_unknown_tag_bound_is_not_found(uri: str) -> None:
    s = _session(uri)
    with pytest.raises(NotFoundError, match="nosuch"):
        s.sql("SELECT * FROM table_changes('t', 'nosuch', 3)").to_arrow_table()
    with pytest.raises(NotFoundError, match="neither a version number"):
        s.sql("SELECT * FROM table_changes('t', 1, 'yesterday')").to_arrow_table()
