"""Filters DataFusion folds to a NULL constant pushed into a Lance scan.

``s = NULL`` (or ``s = $1`` bound to None, ``x IN (NULL)``...) folds to ``NULL``, which
DataFusion keeps among the filters it pushes into the scan; datafusion-python then could
not build the scan's pyarrow filter when the constant came first (``BooleanScalar &
Expression``), and the query failed. Such a query now plans again with its filters above
the scans (:mod:`lance_sql.sql.unpushed`). Checked against DataFusion over the same rows
in memory; ordinary queries keep their plans, and threads sharing a session keep their
pushdown and their answers.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

import lance_sql
from lance_sql.errors import QueryError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.error_bridge import ErrorRegistry, translate

ROWS = 300
DATA = pa.table({
    "s": [None if i % 7 == 0 else f"s{i % 5}" for i in range(ROWS)],
    "x": pa.array(range(ROWS), pa.int64()),
    "k": pa.array([i % 10 for i in range(ROWS)], pa.int64()),
})
OTHER = pa.table({"k": pa.array(range(10), pa.int64()),
                  "s": [None if i % 4 == 0 else f"s{i % 5}" for i in range(10)]})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("null_constants")
    lance_sql.write_dataset(DATA, root / "t.lance", max_rows_per_file=100)
    lance_sql.write_dataset(OTHER, root / "o.lance")
    return root


@pytest.fixture(scope="module")
def oracle() -> SessionContext:
    ctx = SessionContext()
    ctx.from_arrow(DATA, "t")
    ctx.from_arrow(OTHER, "o")
    return ctx


def rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


# each failed before (a QueryError asking to write the constant last)
FAILED = [
    "SELECT * FROM t WHERE s = NULL AND x > 1",
    "SELECT * FROM t WHERE NULL AND x > 1",
    "SELECT * FROM t WHERE s IN (NULL) AND x > 1",
    "SELECT * FROM t WHERE x NOT IN (NULL) AND x > 1",
    "SELECT * FROM t WHERE NOT (s = NULL) AND x > 1",
    "SELECT * FROM t WHERE (s = NULL OR NULL) AND x > 1",
    "SELECT * FROM t WHERE NOT (s = NULL OR x > 1) AND x > 0",
    "SELECT * FROM t WHERE (x = NULL AND x > 1) OR (NULL AND x = 3)",
    "SELECT * FROM t WHERE NULL AND NULL AND x > 1",
    "SELECT * FROM t WHERE x >= 1e1 AND x != NULL AND x IN (NULL)",
    "SELECT * FROM t WHERE x BETWEEN NULL AND 2 AND x > 0",
    "SELECT * FROM t WHERE CAST(NULL AS BOOLEAN) AND x > 1",
    "SELECT * FROM t WHERE s = CAST(NULL AS VARCHAR) AND x > 1",
    "SELECT * FROM t WHERE s <> NULL AND x > 1",
    "SELECT * FROM t WHERE s LIKE NULL AND x > 1",
    "SELECT * FROM t WHERE x + NULL > 1 AND x > 1",
    "SELECT * FROM t WHERE x > NULL AND s = 's1'",
    "SELECT count(*) AS n FROM t WHERE s = NULL AND x > 1",
    # joins: the constant pushed into one side
    "SELECT t.x FROM t JOIN o ON t.k = o.k AND o.s = NULL AND o.k > 1",
    "SELECT t.x, o.s FROM t LEFT JOIN o ON t.k = o.k AND o.s = NULL AND o.k > 1",
    "SELECT t.x FROM t JOIN o ON t.k = o.k WHERE o.s = NULL AND o.k > 1",
    # HAVING on a grouping column reaches the scan
    "SELECT s, count(*) AS n FROM t GROUP BY s HAVING s = NULL AND s > 's1'",
    "SELECT k, count(*) AS n FROM t GROUP BY k HAVING k = NULL AND k > 1",
    "SELECT s, count(*) AS n FROM t GROUP BY s HAVING NULL AND s > 's1'",
    # subqueries, unions: the rest of the query still answers
    "SELECT * FROM t WHERE s = NULL AND x > 1 AND x IN (SELECT k FROM o)",
    "SELECT * FROM t WHERE s = NULL AND x > 1 AND EXISTS (SELECT 1 FROM o WHERE o.k = t.k)",
    "SELECT * FROM t WHERE s = NULL AND x > 1 UNION ALL SELECT * FROM t WHERE x = 250",
    "SELECT x FROM t WHERE x > 280 OR x IN (SELECT x FROM t WHERE s = NULL AND x > 1)",
    # a LIMIT the first plan handed to a scan below its (then pushed) filter
    "SELECT * FROM t WHERE s = NULL AND x > 1 UNION ALL SELECT * FROM t WHERE x = 250 LIMIT 1",
    "SELECT * FROM (SELECT * FROM t WHERE s = NULL AND x > 1 UNION ALL SELECT * FROM t) "
    "WHERE x = 250 LIMIT 1",
]

# worked before: they must keep working (and keep their answers)
WORKED = [
    "SELECT * FROM t WHERE x > 1 AND s = NULL",
    "SELECT * FROM t WHERE x > 1 AND NULL AND s = 's1'",
    "SELECT * FROM t WHERE (s = NULL OR x > 1) AND x > 0",
    "SELECT * FROM t WHERE (NULL OR s = 's1') AND x > 1",
    "SELECT * FROM t WHERE NULL OR x > 290",
    "SELECT * FROM t WHERE s = NULL",
    "SELECT * FROM t WHERE (s IS NOT DISTINCT FROM NULL) AND x > 1",
    "SELECT * FROM t WHERE (s IS DISTINCT FROM NULL) AND x > 280",
    "SELECT * FROM t WHERE s IS NULL AND x > 1",
    "SELECT * FROM t WHERE s IS NOT NULL AND x > 280",
    "SELECT x, NULL AS n, CASE WHEN x > 1 THEN NULL ELSE s END AS c FROM t WHERE x < 5",
]


@pytest.mark.parametrize("query", FAILED + WORKED)
def test_sql_matches_datafusion_in_memory(root: Path, oracle: SessionContext,
                                          query: str) -> None:
    want = rows(oracle.sql(query).to_arrow_table())
    got = rows(lance_sql.connect(root).sql(query).to_arrow_table())
    if "LIMIT 1" in query:  # (one row of the one that qualifies)
        assert got == want == [("s0", 250, 0)]
    else:
        assert got == want


@pytest.mark.parametrize(("query", "params", "spelled"), [
    ("SELECT * FROM t WHERE s = $1 AND x > $2", [None, 1],
     "SELECT * FROM t WHERE s = NULL AND x > 1"),
    ("SELECT * FROM t WHERE s = $s AND x > $x", {"s": None, "x": 1},
     "SELECT * FROM t WHERE s = NULL AND x > 1"),
    # an optional filter: applies when bound, matches nothing when bound to None
    ("SELECT * FROM t WHERE ($1 IS NULL OR s = $1) AND x > 280", [None],
     "SELECT * FROM t WHERE (NULL IS NULL OR s = NULL) AND x > 280"),
    ("SELECT * FROM t WHERE s = $1 AND x > 1 OR x = $2", [None, 7],
     "SELECT * FROM t WHERE s = NULL AND x > 1 OR x = 7"),
    ("SELECT * FROM t WHERE x IN ($1, $2) AND x > 1", [None, None],
     "SELECT * FROM t WHERE x IN (NULL, NULL) AND x > 1"),
])
def test_parameters_bound_to_none(root: Path, oracle: SessionContext, query: str,
                                  params: object, spelled: str) -> None:
    want = rows(oracle.sql(spelled).to_arrow_table())
    assert rows(lance_sql.connect(root).sql(query, params=params).to_arrow_table()) == want


def test_frames_streams_and_derived_frames(root: Path, oracle: SessionContext) -> None:
    session = lance_sql.connect(root)
    query = "SELECT * FROM t WHERE s = NULL AND x > 1 UNION ALL SELECT * FROM t WHERE k = 3"
    want = rows(oracle.sql(query).to_arrow_table())
    frame = session.sql(query)
    assert rows(frame.to_arrow_table()) == want
    assert rows(frame.to_arrow_table()) == want  # (again: it stays re-planned)
    assert frame.count() == len(want)
    with session.sql(query).execute_stream() as stream:
        got = pa.Table.from_batches([b.to_pyarrow() for b in stream])
    assert rows(got) == want
    assert rows(pa.table(session.sql(query))) == want
    derived = session.sql("SELECT * FROM t WHERE s = NULL AND x > 1").select("x")
    assert derived.to_arrow_table().num_rows == 0
    assert "FilterExec" in str(session.sql(query).execution_plan().display_indent())


def test_explain_shows_the_filter_above_the_scan(root: Path, capsys) -> None:
    session = lance_sql.connect(root)
    session.sql("SELECT * FROM t WHERE s = NULL AND x > 1").explain()
    printed = capsys.readouterr().out
    assert "physical_plan_error" not in printed and "FilterExec" in printed
    text = session.explain("SELECT * FROM t WHERE s = NULL AND x > 1")
    assert "physical_plan_error" not in text
    assert "FilterExec: NULL AND x@1 > 1" in text
    assert "full_filters" not in text
    analyzed = session.explain("SELECT * FROM t WHERE s = NULL AND x > 1", analyze=True)
    assert "output_rows=0" in analyzed


def _normalized(text: str) -> str:
    """EXPLAIN text without its query ids (``#q3.1``) and timings."""
    return re.sub(r"#q[\d.]+", "#q", text)


ORDINARY = "SELECT s, x FROM t WHERE x > 10 AND s = 's1' AND k IN (1, 2)"


def test_ordinary_plans_are_unchanged(root: Path) -> None:
    session = lance_sql.connect(root)
    before = session.explain(ORDINARY)
    assert "full_filters=[" in before and "filter_expr=" in before  # pushed into the scan
    session.sql("SELECT * FROM t WHERE s = NULL AND x > 1").to_arrow_table()  # re-planned
    assert _normalized(session.explain(ORDINARY)) == _normalized(before)
    assert _normalized(lance_sql.connect(root).explain(ORDINARY)) == _normalized(before)


def test_threads_sharing_a_session(root: Path, oracle: SessionContext) -> None:
    """Re-planning changes nothing other threads plan: each keeps its pushdown and its
    answer while the others fall back."""
    session = lance_sql.connect(root)
    cases = [
        ("SELECT * FROM t WHERE s = $1 AND x > $2", [None, 1],
         "SELECT * FROM t WHERE s = NULL AND x > 1"),
        ("SELECT * FROM t WHERE s = $1 AND x > $2", ["s1", 250],
         "SELECT * FROM t WHERE s = 's1' AND x > 250"),
        ("SELECT * FROM t WHERE s = $1 AND x > 1 UNION ALL SELECT * FROM t WHERE k = $2",
         [None, 4], "SELECT * FROM t WHERE s = NULL AND x > 1 UNION ALL "
                    "SELECT * FROM t WHERE k = 4"),
        ("SELECT * FROM t WHERE x > $1 LIMIT 3", [296],
         "SELECT * FROM t WHERE x > 296 LIMIT 3"),
    ]
    wants = [rows(oracle.sql(spelled).to_arrow_table()) for _, _, spelled in cases]
    plain = _normalized(session.explain(ORDINARY))
    failures: list[str] = []

    def work(seed: int) -> None:
        try:
            for i in range(12):
                query, params, _ = cases[(seed + i) % len(cases)]
                got = rows(session.sql(query, params=params).to_arrow_table())
                if got != wants[(seed + i) % len(cases)]:
                    failures.append(f"{query} {params}: {got}")
                if i % 4 == 0 and _normalized(session.explain(ORDINARY)) != plain:
                    failures.append("an ordinary query planned without its pushdown")
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_writes_whose_condition_folds_to_null(tmp_path: Path) -> None:
    lance_sql.write_dataset(DATA, tmp_path / "t.lance", max_rows_per_file=100)
    lance_sql.write_dataset(OTHER, tmp_path / "o.lance")
    session = lance_sql.connect(tmp_path, allow_external_files=True)

    def one(sql: str, params: object = None) -> int:
        return session.sql(sql, params=params).to_arrow_table().column(0)[0].as_py()

    assert one("DELETE FROM t WHERE s = NULL AND x > 1") == 0
    assert one("DELETE FROM t WHERE s = $1 AND x > 1", [None]) == 0
    assert one("DELETE FROM t WHERE s = NULL AND x IN (SELECT k FROM o WHERE k > 1)") == 0
    assert one("UPDATE t SET x = 9 WHERE s = NULL AND x > 1") == 0
    assert one("UPDATE t SET x = (SELECT max(k) FROM o) WHERE s = NULL AND x > 1") == 0
    assert one("UPDATE t SET x = (SELECT max(k) FROM o) WHERE s = $1 AND x > 1", [None]) == 0
    assert one("UPDATE t SET s = NULL WHERE x = 1") == 1  # (NULL as a value: stored)
    assert one("UPDATE t SET s = 'z' FROM o WHERE t.k = o.k AND o.s = NULL AND o.k > 1") == 0
    assert one("INSERT INTO t SELECT * FROM t WHERE s = NULL AND x > 1") == 0
    assert one("INSERT INTO t VALUES (NULL, 1000, 0)") == 1
    assert one("MERGE INTO t USING (SELECT * FROM t WHERE s = NULL AND x > 1) AS src "
               "ON t.x = src.x WHEN MATCHED THEN UPDATE SET s = 'm' "
               "WHEN NOT MATCHED THEN INSERT *") == 0
    out = tmp_path / "out.parquet"
    session.sql(f"COPY (SELECT * FROM t WHERE s = NULL AND x > 1) TO '{out}'").to_arrow_table()
    assert pq.read_table(out).num_rows == 0
    table = session.sql("SELECT * FROM t").to_arrow_table()
    assert table.num_rows == ROWS + 1
    assert table.filter(pa.compute.equal(table["x"], 1))["s"].to_pylist() == [None]
    assert session.sql("SELECT count(*) AS n FROM t WHERE s = 'm'").to_pylist() == [{"n": 0}]


def _vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 2))


@pytest.fixture
def lsm(tmp_path: Path):
    """A MemWAL table: a base of 100 rows, a MemTable updating 10 keys."""
    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk),
                        pa.field("s", pa.string()), pa.field("e", pa.list_(pa.float32(), 2))])

    def batch(ids: list[int], tag: str, seed: int) -> pa.Table:
        return pa.table({"id": ids, "s": [None if i % 3 == 0 else f"{tag}{i % 4}" for i in ids],
                         "e": _vectors(len(ids), seed).tolist()}, schema=schema)

    ds = lance_sql.write_dataset(batch(list(range(100)), "a", 1), tmp_path / "m.lance",
                                 enable_stable_row_ids=True)
    ds.update({"s": "'u'"}, where="id < 5")  # (a second version: table_changes' feed)
    mw = MemWal.initialize(lance_sql.dataset(tmp_path / "m.lance"), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(batch(list(range(0, 100, 10)), "b", 2))
    try:
        yield tmp_path
    finally:
        writer.close()


def test_lsm_views_and_table_functions(lsm: Path) -> None:
    session = lance_sql.connect(lsm)
    view = session.sql("SELECT id, s FROM m").to_arrow_table()
    oracle = SessionContext()
    oracle.from_arrow(view, "m")
    for query in ["SELECT id, s FROM m WHERE s = NULL AND id > 1",
                  "SELECT id, s FROM m WHERE s = NULL AND id > 1 OR id = 20",
                  "SELECT id, s FROM m WHERE s IN (NULL) AND id > 1 UNION ALL "
                  "SELECT id, s FROM m WHERE id = 30"]:
        want = rows(oracle.sql(query).to_arrow_table())
        assert rows(session.sql(query).to_arrow_table()) == want, query
    assert session.sql("SELECT id FROM m WHERE s = $1 AND id > 1",
                       params=[None]).to_arrow_table().num_rows == 0
    changes = ("SELECT id, _change_type FROM table_changes('m', 1, 2) "
               "WHERE s = NULL AND id > 1")
    assert session.sql(changes).to_arrow_table().num_rows == 0
    everything = session.sql("SELECT id FROM table_changes('m', 1, 2) WHERE id > 1")
    assert session.sql("SELECT id FROM table_changes('m', 1, 2) WHERE NULL AND id > 1 "
                       "OR id > 1").to_arrow_table().num_rows \
        == everything.to_arrow_table().num_rows
    near = "SELECT id FROM nearest('m', 'e', [0.0, 0.0], 5) WHERE s = NULL AND id > 1"
    assert session.sql(near).to_arrow_table().num_rows == 0
    nearest = session.sql("SELECT id FROM nearest('m', 'e', [0.0, 0.0], 5) "
                          "WHERE s = $1 AND id > 1 OR id >= 0", params=[None])
    assert nearest.to_arrow_table().num_rows == 5


def test_the_message_where_no_replanning_can_help() -> None:
    """Where the error still surfaces (nothing to plan again), it names the cause without
    the engine's dump and asks for no rewriting."""
    raw = Exception("DataFusion error: External error: Python error PyErr { type: <class "
                    "'TypeError'>, value: TypeError(\"unsupported operand type(s) for &: "
                    "'pyarrow.lib.BooleanScalar' and 'pyarrow._compute.Expression'\") }")
    error = translate(raw, ErrorRegistry())
    assert isinstance(error, QueryError)
    assert "PyErr" not in str(error) and "constant" in str(error)
    assert "write the constant last" not in str(error)  # (no rewriting helps any more)
