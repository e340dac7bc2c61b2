"""SQL through LanceSession: time travel, system columns, pushdown, typed errors."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    QueryError,
)
from lance_sql.io import MemoryStore


def _events(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "kind": [["click", "view", "buy"][i % 3] for i in ids],
        "amount": [i * 0.5 for i in ids],
    })


@pytest.fixture
def root(tmp_path: Path) -> Path:
    uri = tmp_path / "events.lance"
    lance_sql.write_dataset(_events(0, 10), uri, max_rows_per_file=4)       # v1: 3 fragments
    lance_sql.write_dataset(_events(10, 5), uri, mode="append")             # v2
    ds = lance_sql.dataset(uri)
    ds.delete("kind = 'view'")                                              # v3
    ds.tags.create("loaded", 2)
    lance_sql.write_dataset(pa.table({"kind": ["click", "buy"], "weight": [1.0, 10.0]}),
                            tmp_path / "kinds.lance")
    return tmp_path


def _rows(session, query: str) -> list[dict]:
    return session.sql(query).to_arrow_table().to_pylist()


def test_select_star_hides_system_columns(root: Path) -> None:
    s = lance_sql.connect(root)
    assert sorted(s.tables()) == ["events", "kinds"]
    table = s.sql("SELECT * FROM events ORDER BY id").to_arrow_table()
    assert table.column_names == ["id", "kind", "amount"]
    assert table["id"].to_pylist() == [0, 2, 3, 5, 6, 8, 9, 11, 12, 14]
    named = s.sql("SELECT _rowaddr, _rowid, * FROM events WHERE id = 5").to_arrow_table()
    assert named.column_names == ["_rowaddr", "_rowid", "id", "kind", "amount"]
    assert named.to_pylist() == [{"_rowaddr": (1 << 32) | 1, "_rowid": (1 << 32) | 1,
                                  "id": 5, "kind": "buy", "amount": 2.5}]
    assert _rows(s, "SELECT * FROM events WHERE _rowaddr = 4294967297") == [
        {"id": 5, "kind": "buy", "amount": 2.5}
    ]
    joined = _rows(s, "SELECT a.id FROM events a JOIN events b ON a._rowid = b._rowid "
                      "WHERE b.id < 3 ORDER BY a.id")
    assert joined == [{"id": 0}, {"id": 2}]


def test_system_columns_match_the_table_api(root: Path) -> None:
    s = lance_sql.connect(root)
    sql = s.sql("SELECT id, _rowid, _rowaddr FROM events ORDER BY id").to_arrow_table()
    api = lance_sql.dataset(root / "events.lance").to_table(
        columns=["id"], with_row_id=True, with_row_address=True).sort_by("id")
    assert sql == api


@pytest.mark.parametrize(
    "clause, expected",
    [
        ("VERSION AS OF 1", 10),
        ("VERSION AS OF 2", 15),
        ("VERSION AS OF 'loaded'", 15),
        ("FOR SYSTEM_TIME AS OF '2999-01-01 00:00:00'", 10),
        ("TIMESTAMP AS OF '2999-01-01T00:00:00Z'", 10),
        ("AT (VERSION => 1)", 10),
        ("FOR VERSION AS OF 2", 15),
        ("", 10),
    ],
)
def test_time_travel_forms(root: Path, clause: str, expected: int) -> None:
    s = lance_sql.connect(root)
    assert _rows(s, f"SELECT count(*) AS n FROM events {clause}") == [{"n": expected}]


def test_quoted_version_names(root: Path) -> None:
    s = lance_sql.connect(root)
    assert _rows(s, 'SELECT count(*) AS n FROM "events@1"') == [{"n": 10}]
    assert _rows(s, 'SELECT count(*) AS n FROM "events@loaded"') == [{"n": 15}]


def test_timestamp_boundary(root: Path) -> None:
    s = lance_sql.connect(root)
    versions = s.versions("events").to_pylist()
    v2 = versions[1]["timestamp"]
    at = v2.strftime("%Y-%m-%d %H:%M:%S.%f")
    assert _rows(s, f"SELECT count(*) AS n FROM events TIMESTAMP AS OF '{at}'") == [{"n": 15}]
    before = (v2 - (v2 - versions[0]["timestamp"]) / 2).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert _rows(s, f"SELECT count(*) AS n FROM events TIMESTAMP AS OF '{before}'") == [{"n": 10}]
    with pytest.raises(NotFoundError, match="at or before"):
        s.sql("SELECT * FROM events TIMESTAMP AS OF '2000-01-01 00:00:00'")


def test_self_join_across_versions(root: Path) -> None:
    s = lance_sql.connect(root)
    gone = _rows(s, "SELECT old.id FROM events VERSION AS OF 2 old "
                    "LEFT JOIN events new ON old.id = new.id WHERE new.id IS NULL ORDER BY old.id")
    assert [r["id"] for r in gone] == [1, 4, 7, 10, 13]


def test_one_query_sees_one_version(root: Path) -> None:
    s = lance_sql.connect(root)
    df = s.sql("SELECT count(*) AS n FROM events")
    lance_sql.write_dataset(_events(100, 3), root / "events.lance", mode="append")
    assert df.to_arrow_table().to_pylist() == [{"n": 10}]  # pinned when planned
    assert _rows(s, "SELECT count(*) AS n FROM events") == [{"n": 13}]  # the next query sees it
    lance_sql.write_dataset(_events(0, 2), root / "fresh.lance")
    assert _rows(s, "SELECT count(*) AS n FROM fresh") == [{"n": 2}]


def test_table_versions_and_tags(root: Path) -> None:
    s = lance_sql.connect(root)
    rows = _rows(s, "SELECT version, operation, rows, rows_added, rows_removed, tag "
                    "FROM table_versions('events') ORDER BY version")
    assert rows == [
        {"version": 1, "operation": "overwrite", "rows": 10, "rows_added": 10,
         "rows_removed": 0, "tag": None},
        {"version": 2, "operation": "append", "rows": 15, "rows_added": 5, "rows_removed": 0,
         "tag": "loaded"},
        {"version": 3, "operation": "delete", "rows": 10, "rows_added": 0, "rows_removed": 5,
         "tag": None},
    ]
    s.create_tag("events", "first", 1)
    assert set(s.list_tags("events")) == {"first", "loaded"}
    s.delete_tag("events", "first")
    assert set(s.list_tags("events")) == {"loaded"}


def test_explain_shows_our_scan(root: Path) -> None:
    s = lance_sql.connect(root)
    text = s.explain("SELECT kind FROM events WHERE _rowaddr >= 8589934592")
    assert "DatasetExec" in text
    assert "ScanExec: events[v=3], filter=[(_rowaddr >= 8589934592)], projection=[kind]" in text
    assert "kept 2 of 4 fragments" in text  # fragments 2 and 3: 0 and 1 pruned by address


@pytest.mark.parametrize(
    "query, error, message",
    [
        ("SELECT * FROM nope", NotFoundError, "nope"),
        ("SELECT nope FROM events", NotFoundError, "nope"),
        ("SELECT * FROM events VERSION AS OF 9", NotFoundError, "versions: 1, 2, 3"),
        ("SELECT * FROM events VERSION AS OF 'missing'", NotFoundError, "missing"),
        ("SELEC 1", InvalidInputError, "SELEC"),
        ("WITH c AS (SELECT 1 AS x) SELECT * FROM c VERSION AS OF 2", InvalidInputError,
         "Lance"),
        ("SELECT * FROM (SELECT * FROM events) VERSION AS OF 1", InvalidInputError,
         "cannot be honoured"),
    ],
)
def test_typed_errors_and_the_session_survives(root: Path, query: str, error: type,
                                              message: str) -> None:
    s = lance_sql.connect(root)
    with pytest.raises(error, match=message):
        s.sql(query).to_arrow_table()
    assert _rows(s, "SELECT count(*) AS n FROM events") == [{"n": 10}]


def test_table_deleted_mid_session(root: Path) -> None:
    s = lance_sql.connect(root)
    assert _rows(s, "SELECT count(*) AS n FROM kinds") == [{"n": 2}]
    shutil.rmtree(root / "kinds.lance")
    with pytest.raises(NotFoundError, match="kinds"):
        s.sql("SELECT * FROM kinds").to_arrow_table()
    assert _rows(s, "SELECT count(*) AS n FROM events") == [{"n": 10}]


def test_strings_and_comments_are_not_rewritten(root: Path) -> None:
    s = lance_sql.connect(root)
    rows = _rows(s, "SELECT 'events VERSION AS OF 1' AS t -- FROM events VERSION AS OF 1\n"
                    "FROM events WHERE id = 0")
    assert rows == [{"t": "events VERSION AS OF 1"}]


def test_join_group_by_and_qualified_names(root: Path) -> None:
    s = lance_sql.connect(root)
    rows = _rows(s, "SELECT e.kind, sum(e.amount * k.weight) AS total "
                    "FROM lance.default.events e JOIN kinds k ON e.kind = k.kind "
                    "GROUP BY e.kind ORDER BY e.kind")
    assert rows == [{"kind": "buy", "total": 200.0}, {"kind": "click", "total": 15.0}]


def test_aggregates_over_a_table_with_schema_metadata(tmp_path: Path) -> None:
    """A table whose schema carries metadata (pyarrow's from_pandas adds some to every
    table) answers aggregates, filtered counts and DataFrame.count(): the scan's planned
    schema keeps the table's metadata, as DataFusion checks before running an aggregate."""
    import pandas
    frame = pandas.DataFrame({"id": range(6), "kind": list("abcabc"),
                              "amount": [0.5 * i for i in range(6)]})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    assert table.schema.metadata  # what this test is about
    lance_sql.write_dataset(table, tmp_path / "sales.lance")
    s = lance_sql.connect(tmp_path)
    assert _rows(s, "SELECT sum(amount) AS s FROM sales") == [{"s": 7.5}]
    assert _rows(s, "SELECT count(*) AS n FROM sales WHERE amount > 1") == [{"n": 3}]
    assert _rows(s, "SELECT kind, count(*) AS n FROM sales GROUP BY kind ORDER BY kind") == [
        {"kind": k, "n": 2} for k in "abc"]
    assert s.sql("SELECT * FROM sales WHERE kind = 'a'").count() == 2
    assert s.sql("SELECT id FROM sales").count() == 6
    # two tables whose metadata differs (pandas' lists each table's columns): DataFusion
    # refused an aggregate over their cross join while the scans declared it
    other = pandas.DataFrame({"kind": list("ab"), "weight": [1.0, 2.0]})
    lance_sql.write_dataset(pa.Table.from_pandas(other, preserve_index=False),
                            tmp_path / "kinds.lance")
    assert _rows(s, "SELECT count(*) AS n FROM sales, kinds") == [{"n": 12}]
    # SQL results carry the fields' metadata, not the table's (whatever the plan's shape)
    for query in ("SELECT * FROM sales", "SELECT amount, id FROM sales",
                  "SELECT * FROM sales WHERE id < 0"):
        assert not s.sql(query).to_arrow_table().schema.metadata, query


def _memory_table(name: str, fragments: int, rows: int) -> tuple[MemoryStore, list[str]]:
    MemoryStore.reset(name)
    store = MemoryStore(name)
    lance_sql.write_dataset(_events(0, fragments * rows), f"memory://{name}",
                            max_rows_per_file=rows)
    reads: list[str] = []
    store.add_hook(lambda op, key: reads.append(key) if op == "read" and
                   key.startswith("data/") else None)
    return store, reads


def test_count_star_reads_no_data_files() -> None:
    _, reads = _memory_table("sql-count", 4, 100)
    s = lance_sql.connect()
    s.register("t", "memory://sql-count")
    assert _rows(s, "SELECT count(*) AS n FROM t") == [{"n": 400}]
    assert reads == []


def test_limit_stops_after_the_first_fragment() -> None:
    _, reads = _memory_table("sql-limit", 4, 100)
    s = lance_sql.connect()
    s.register("t", "memory://sql-limit")
    assert len(_rows(s, "SELECT id FROM t LIMIT 5")) == 5
    assert len(set(reads)) == 1


def test_rowaddr_lookup_reads_one_fragment() -> None:
    _, reads = _memory_table("sql-addr", 4, 100)
    s = lance_sql.connect()
    s.register("t", "memory://sql-addr")
    assert _rows(s, f"SELECT id FROM t WHERE _rowaddr = {(2 << 32) | 7}") == [{"id": 207}]
    assert len(set(reads)) == 1


def test_concurrent_queries(root: Path) -> None:
    s = lance_sql.connect(root)
    results, errors = [], []

    def run() -> None:
        try:
            for _ in range(5):
                results.append(_rows(s, "SELECT sum(amount) AS a FROM events")[0]["a"])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20 and len(set(results)) == 1


def test_reads_pylance_tables(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    data = _events(0, 300)
    lance.write_dataset(data, tmp_path / "ref.lance", data_storage_version="2.0",
                        max_rows_per_file=100)
    ref = lance.dataset(tmp_path / "ref.lance")
    ref.delete("id % 7 = 0")
    s = lance_sql.connect(tmp_path)
    ours = s.sql("SELECT *, _rowid FROM ref ORDER BY id").to_arrow_table()
    theirs = ref.to_table(with_row_id=True).sort_by("id")
    assert ours == theirs
    time.sleep(0)  # keep the interpreter honest about thread switches


def test_engine_errors_are_typed(root: Path) -> None:
    s = lance_sql.connect(root)
    with pytest.raises(QueryError, match="[Dd]ivide by zero"):
        s.sql("SELECT 1 / 0 AS x").to_arrow_table()
    with pytest.raises(NotFoundError, match="unknown table 'nope'; tables: events, kinds"):
        s.sql("SELECT * FROM nope")
    with pytest.raises(NotFoundError, match="missing"):
        s.sql("SELECT * FROM table_versions('missing')").to_arrow_table()
    s.register("ghost", root / "no-such-dir")
    with pytest.raises(NotFoundError):
        s.versions("ghost")


def test_streamed_errors_are_typed(root: Path) -> None:
    s = lance_sql.connect(root)
    data_files = sorted((root / "kinds.lance" / "data").glob("*.lance"))
    data_files[0].write_bytes(data_files[0].read_bytes()[:100])
    with pytest.raises(FormatError):
        for _ in s.sql("SELECT * FROM kinds").execute_stream():
            pass


def test_filtered_scans_fetch_other_columns_only_for_matches(tmp_path: Path) -> None:
    data = pa.table({
        "id": pa.array(range(3000), pa.int64()),
        "grp": [i % 7 for i in range(3000)],
        "name": [f"name-{i}" for i in range(3000)],
        "nested": [{"a": i, "b": [i, i + 1]} for i in range(3000)],
    })
    uri = tmp_path / "wide.lance"
    ds = lance_sql.write_dataset(data, uri, max_rows_per_file=1000)
    ds.delete("id % 11 = 0")
    s = lance_sql.connect(tmp_path)
    for where in ("grp = 3", "id > 2500 OR grp = 0", "name = 'name-42'", "grp = 99"):
        got = s.sql(f"SELECT nested, name, id, _rowaddr FROM wide WHERE {where} ORDER BY id")
        expected = lance_sql.dataset(uri).to_table(
            columns=["nested", "name", "id"], filter=where, with_row_address=True
        ).sort_by("id")
        assert got.to_arrow_table() == expected


def test_queries_that_fail_while_planning_leave_nothing_behind(tmp_path: Path) -> None:
    """Each query registers its table providers while DataFusion plans it; a query that
    fails there (unknown column, function, join key) must not leave them registered."""
    lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]}),
                            tmp_path / "t.lance")
    session = lance_sql.connect(tmp_path)
    bad = ["SELECT nosuch FROM t", "SELECT no_such_function(id) FROM t",
           "SELECT t.id FROM t JOIN t AS u ON t.id = u.nosuch",
           "SELECT * FROM table_changes('t', 1, 1) WHERE nosuch = 1"]
    for query in bad * 3:
        with pytest.raises(LanceError):
            session.sql(query)
    assert session.schema_provider._planned == {}
    assert session.sql("SELECT count(*) AS n FROM t").to_pydict() == {"n": [3]}
    assert session.schema_provider._planned == {}


@pytest.mark.parametrize("query", ["SELECT 'caf\udce9'",
                                   "SELECT * FROM events WHERE kind = '\udce9'",
                                   "DELETE FROM events WHERE kind = '\udce9'"])
def test_sql_text_that_is_not_unicode_is_invalid_input(root: Path, query: str) -> None:
    """A lone surrogate (bytes that were not UTF-8, read from argv or a pipe) is an
    InvalidInputError saying where, before DataFusion's UnicodeEncodeError; nothing is
    committed."""
    session = lance_sql.connect(root)
    with pytest.raises(InvalidInputError, match=r"not valid Unicode: '\\udce9' at offset"):
        session.sql(query)
    assert lance_sql.dataset(root / "events.lance").version == 3
