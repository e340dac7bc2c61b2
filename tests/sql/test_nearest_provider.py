"""SQL ``nearest(...)``: the options struct (``filter`` before the top-k, ``exact``, metric
and version), equal to Python's ``mw.nearest`` / ``ds.nearest``; the search planned at
``sql()``, run with the query, and printed by EXPLAIN beneath DataFusion's plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.bloom import PrimaryKeyBloom, key_hashes
from lance_sql.memwal.read.flat_search import table_knn_plan
from lance_sql.memwal.read.search import KNNExec
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("e", pa.list_(pa.float32(), 2))])
METRICS = ("l2", "cosine", "dot")


def rows(ids: list[int], v: list[int], e: np.ndarray) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(v, pa.int64()),
                     "e": pa.FixedSizeListArray.from_arrays(
                         pa.array(np.asarray(e, np.float32).reshape(-1)), 2)}, schema=SCHEMA)


def q(session, sql: str) -> pa.Table:
    return session.sql(sql).to_arrow_table()


def same(got: pa.Table, want: pa.Table) -> None:
    """Every row equal, in ``_distance`` order (ties by id)."""
    def ordered(t: pa.Table) -> list[dict]:
        return sorted(t.to_pylist(), key=lambda r: (r["_distance"], r["id"]))
    assert got.column_names == want.column_names
    assert ordered(got) == ordered(want)


@pytest.fixture
def lsm(tmp_path: Path):
    """A MemWAL table over 2 regions: a 300-row base, a flushed generation updating 60
    keys (some moved next to the queries), a MemTable updating 20 more and deleting 5."""
    rng = np.random.default_rng(7)
    ds = lance_sql.write_dataset(rows(list(range(300)), list(rng.integers(0, 10, 300)),
                                      rng.normal(size=(300, 2))), tmp_path / "t.lance",
                                 max_rows_per_file=100)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    ids = list(range(0, 300, 5))
    w.put(rows(ids, list(rng.integers(0, 10, len(ids))), rng.normal(size=(len(ids), 2)) * 0.3))
    w.flush_memtable()
    ids = list(range(1, 300, 15))
    w.put(rows(ids, list(rng.integers(0, 10, len(ids))), rng.normal(size=(len(ids), 2)) * 0.3))
    w.delete(pa.table({"id": pa.array([10, 20, 30, 40, 50], pa.int64())}))
    try:
        yield tmp_path, mw
    finally:
        w.close()


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("exact", [False, True])
def test_sql_options_equal_python_nearest(lsm, metric: str, exact: bool) -> None:
    root, mw = lsm
    session = connect(root)
    query = [0.2, -0.1]
    flag = str(exact).lower()
    for condition in (None, "v >= 6", "v < 3 AND id > 100"):
        options = f"'exact': {flag}" + (f", 'filter': '{condition}'" if condition else "")
        want = mw.nearest("e", query, 8, metric=metric, columns=["id", "v"],
                          filter=condition, exact=exact)
        assert want.num_rows == 8
        got = q(session, f"SELECT id, v, _distance FROM nearest('t', 'e', {query}, 8, "
                         f"{{'metric': '{metric}', {options}}})")
        same(got, want)
        positional = q(session, f"SELECT id, v, _distance FROM nearest('t', 'e', {query}, 8, "
                                f"'{metric}', {{{options}}})")
        same(positional, want)


def test_the_filter_applies_before_the_top_k(lsm) -> None:
    """k rows matching the filter come back, where filtering the k nearest leaves fewer."""
    root, mw = lsm
    session = connect(root)
    before = q(session, "SELECT id, v, _distance FROM nearest('t', 'e', [0.0, 0.0], 10, "
                        "{'filter': 'v = 4'})")
    assert before.num_rows == 10 and set(before["v"].to_pylist()) == {4}
    same(before, mw.nearest("e", [0.0, 0.0], 10, columns=["id", "v"], filter="v = 4"))
    after = q(session, "SELECT id, v, _distance FROM nearest('t', 'e', [0.0, 0.0], 10) "
                       "WHERE v = 4")
    assert after.num_rows < 10 and set(after["v"].to_pylist()) <= {4}
    top = q(session, "SELECT id, v, _distance FROM nearest('t', 'e', [0.0, 0.0], 10)")
    same(after, top.filter(pa.compute.equal(top["v"], 4)))  # WHERE filters the k rows


def _false_positive(gen_ids: np.ndarray) -> int:
    """A key not in ``gen_ids`` that their bloom filter says it may hold."""
    bloom = PrimaryKeyBloom()
    bloom.add([pa.array(gen_ids)])
    candidates = np.setdiff1d(np.arange(200_000, dtype=np.int64), gen_ids)
    hits = candidates[bloom.might_contain_hashes(key_hashes([pa.array(candidates)]))]
    assert hits.size, "no false positive among the candidates"
    return int(hits[0])


def test_exact_keeps_a_candidate_a_bloom_false_positive_drops(tmp_path: Path) -> None:
    gen_ids = np.arange(1_000_000, 1_020_000, dtype=np.int64)  # fills the bloom filter
    fp = _false_positive(gen_ids)
    base_ids = [fp, *(i for i in range(1, 6) if i != fp)]
    vectors = np.array([[0.0, 0.0]] + [[float(i), 0.0] for i in range(1, len(base_ids))])
    ds = lance_sql.write_dataset(rows(base_ids, [0] * len(base_ids), vectors),
                                 tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 1), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:  # far from the query: none of them is a candidate
        w.put(rows(list(gen_ids), [1] * gen_ids.size, np.full((gen_ids.size, 2), 100.0)))
        w.flush_memtable()
    session = connect(tmp_path)
    sql = "SELECT id, v, _distance FROM nearest('t', 'e', [0.0, 0.0], 3{})"
    bloom = q(session, sql.format(""))
    exact = q(session, sql.format(", {'exact': true}"))
    assert fp not in bloom["id"].to_pylist()  # the bloom filter dropped a live row
    assert exact["id"].to_pylist()[0] == fp
    same(bloom, mw.nearest("e", [0.0, 0.0], 3, columns=["id", "v"]))
    same(exact, mw.nearest("e", [0.0, 0.0], 3, columns=["id", "v"], exact=True))


def test_positional_forms_and_versions(lsm) -> None:
    root, mw = lsm
    session = connect(root)
    version = mw.refresh_index().version
    want = mw.nearest("e", [0.1, 0.1], 5, metric="cosine", columns=["id"],
                      consistency="snapshot", version=version, filter="v > 2")
    for call in (f"'t', 'e', [0.1, 0.1], 5, 'cosine', {version}, {{'filter': 'v > 2'}}",
                 f"'t@{version}', 'e', [0.1, 0.1], 5, {{'metric': 'cosine', 'filter': 'v > 2'}}",
                 f"'t', 'e', [0.1, 0.1], 5, {{'version': {version}, 'metric': 'cosine', "
                 "'filter': 'v > 2', 'exact': null}"):
        same(q(session, f"SELECT id, _distance FROM nearest({call})"), want)
    plain = mw.nearest("e", [0.1, 0.1], 5, columns=["id", "v"])
    same(q(session, "SELECT id, v, _distance FROM nearest('t', 'e', [0.1, 0.1], 5)"), plain)


def test_plain_tables_and_base_sessions_take_the_filter(lsm, tmp_path: Path) -> None:
    root, _ = lsm
    base = lance_sql.dataset(root / "t.lance")  # the base table alone
    want = table_knn_plan(base, "e", [0.0, 0.0], 6, columns=["id", "v"],
                          filter="v > 5").to_table()
    sql = "SELECT id, v, _distance FROM nearest('t', 'e', [0.0, 0.0], 6, {'filter': 'v > 5'})"
    same(q(connect(root, consistency="base"), sql), want)
    plain = tmp_path / "plain"
    plain.mkdir()
    lance_sql.write_dataset(base.to_table(), plain / "t.lance", max_rows_per_file=70)
    same(q(connect(plain), sql), want)
    assert set(want["v"].to_pylist()) <= {6, 7, 8, 9} and want.num_rows == 6


def test_explain_prints_the_search_tree(lsm) -> None:
    root, _ = lsm
    session = connect(root)
    text = session.explain("SELECT id FROM nearest('t', 'e', [0.0, 0.0], 4, "
                           "{'filter': 'v > 2', 'exact': true}) WHERE id < 200")
    physical = text.split("physical_plan:")[1]
    lines = [line.strip() for line in physical.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("NearestExec"))
    assert lines[start - 1].startswith("DatasetExec")
    assert lines[start].startswith("NearestExec: t[v=")
    assert "k=4, metric=l2, exact=true, filter=[v > 2]" in lines[start]
    assert "filter on the result=[(id < 200)]" in lines[start]
    tree = [line.split(":")[0] for line in lines[start + 1:] if line]
    assert tree[:7] == ["LsmSearch", "RegionPruning", "ProjectionExec", "GlobalLimitExec",
                        "SortExec", "FilterStaleExec", "UnionExec"]
    knn = [line for line in lines if line.startswith("KNNExec")]
    assert len(knn) == 5 and knn[0].startswith("KNNExec: base_table[gen=-1], k=4")
    assert "FilterStaleExec: exact_keys=[4 generations]" in physical
    through_sql = q(session, "EXPLAIN SELECT id FROM nearest('t', 'e', [0.0, 0.0], 4)")
    plan = through_sql.column("plan").to_pylist()[1]
    assert "NearestExec" in plan and "FilterStaleExec: bloom_filters=[bf[" in plan


def test_explain_tells_a_search_from_a_table_scan_in_a_join(lsm) -> None:
    root, _ = lsm
    session = connect(root)
    for sql in ("SELECT a.id FROM nearest('t', 'e', [0.0, 0.0], 3) a JOIN t b ON a.id = b.id",
                "SELECT b.id FROM t b JOIN nearest('t', 'e', [0.0, 0.0], 3) a ON a.id = b.id"):
        physical = session.explain(sql).split("physical_plan:")[1].splitlines()
        under = [physical[i + 1].strip().split(":")[0]
                 for i, line in enumerate(physical) if "DatasetExec" in line]
        want = ["NearestExec", "LsmViewExec"] if sql.index("nearest") < sql.index(" t b") \
            else ["LsmViewExec", "NearestExec"]
        assert under == want


def test_explain_plans_without_searching_and_a_query_searches_once(lsm, monkeypatch) -> None:
    root, _ = lsm
    session = connect(root)
    searched: list[str] = []
    original = KNNExec.execute

    def counted(self: KNNExec):
        searched.append(self.source.label)
        return original(self)

    monkeypatch.setattr(KNNExec, "execute", counted)
    session.explain("SELECT id FROM nearest('t', 'e', [0.0, 0.0], 3)")
    assert searched == []
    got = q(session, "SELECT id, _distance FROM nearest('t', 'e', [0.0, 0.0], 3)")
    assert got.num_rows == 3
    assert len(searched) == 5 and len(set(searched)) == 5  # each source once


def test_the_query_reads_only_the_columns_it_needs(lsm) -> None:
    root, mw = lsm
    session = connect(root)
    sql = "SELECT id FROM nearest('t', 'e', [0.0, 0.0], 5) WHERE v > 4"
    top = mw.nearest("e", [0.0, 0.0], 5, columns=["id", "v"])
    want = top.filter(pa.compute.greater(top["v"], 4))["id"].to_pylist()
    assert sorted(q(session, sql)["id"].to_pylist()) == sorted(want)
    # the search returns the selected column and the WHERE's, not the vector
    assert "ProjectionExec: columns=[id, v, _distance]" in session.explain(sql)


@pytest.mark.parametrize("options", [
    "{'bogus': 1}",                 # unknown option
    "{'exact': 'yes'}",             # wrong types
    "{'exact': 1}",
    "{'filter': 5}",
    "{'version': -1}",
    "{'metric': 'hamming'}",
    "{'filter': 'v >'}",            # a filter that does not parse
    "{'filter': 'nope > 1'}",       # or names no column of the table
    "'l2', {'metric': 'dot'}",      # given twice
    "{'exact': true}, 'l2'",        # options not last
    "map {'exact': true}",          # not a struct
    "'l2', 1, {}, 2",               # too many arguments
])
def test_bad_options_are_typed_errors(lsm, options: str) -> None:
    root, _ = lsm
    session = connect(root)
    with pytest.raises(InvalidInputError):
        q(session, f"SELECT id FROM nearest('t', 'e', [0.0, 0.0], 3, {options})")


@pytest.mark.parametrize("condition", [
    "e > 1",                 # a vector compared with a number
    "v = ''x''",             # an integer column with a string that is no number
    "v LIKE ''a%''",         # a string match on an integer
    "id IN (''a'', ''b'')",
])
@pytest.mark.parametrize("table", ["t", "p"])
def test_a_filter_of_the_wrong_type_fails_typed_at_sql(lsm, monkeypatch, condition: str,
                                                       table: str) -> None:
    """On a MemWAL table and on a plain one: InvalidInputError when ``sql()`` plans the
    query, before any search runs (the Python searches likewise, before reading)."""
    root, mw = lsm
    plain = lance_sql.write_dataset(mw.dataset.to_table(), root / "p.lance")
    searched = []
    monkeypatch.setattr(KNNExec, "execute", lambda self: searched.append(self) or iter(()))
    session = connect(root)
    with pytest.raises(InvalidInputError, match="does not fit the table's columns"):
        session.sql(f"SELECT id FROM nearest('{table}', 'e', [0.0, 0.0], 3, "
                    f"{{'filter': '{condition}'}})")
    python_filter = condition.replace("''", "'")
    with pytest.raises(InvalidInputError, match="does not fit the table's columns"):
        if table == "t":
            mw.nearest("e", [0.0, 0.0], 3, filter=python_filter)
        else:
            plain.nearest("e", [0.0, 0.0], k=3, filter=python_filter)
    assert searched == []
    # a filter that fits plans, and the search runs with the query
    q(session, f"SELECT id FROM nearest('{table}', 'e', [0.0, 0.0], 3, {{'filter': 'v >= 0'}})")
    assert searched


@pytest.mark.parametrize("column", ["v", "id"])
@pytest.mark.parametrize("table", ["t", "p"])
def test_a_column_that_holds_no_vectors_fails_typed_at_sql(lsm, monkeypatch, column: str,
                                                           table: str) -> None:
    """Searching a number column is an InvalidInputError when the search is planned (it
    was an untyped ArrowNotImplementedError from the search's first batch), in SQL and
    from Python, on MemWAL and plain tables, before any search runs."""
    root, mw = lsm
    plain = lance_sql.write_dataset(mw.dataset.to_table(), root / "p.lance")
    searched = []
    monkeypatch.setattr(KNNExec, "execute", lambda self: searched.append(self) or iter(()))
    session = connect(root)
    with pytest.raises(InvalidInputError, match=f"column '{column}' holds int64, not vectors"):
        session.sql(f"SELECT id FROM nearest('{table}', '{column}', [0.0], 3)")
    with pytest.raises(InvalidInputError, match="not vectors"):
        if table == "t":
            mw.nearest(column, [0.0], 3)
        else:
            plain.nearest(column, [0.0], k=3)
    assert searched == []


@pytest.mark.parametrize("query", ["ab", ["a", "b"], [[0.0], [0.0, 1.0]], None,
                                   [[0.0, 1.0], [2.0, 3.0]], 5.0])
def test_a_query_that_is_not_numbers_is_a_typed_error(lsm, query: object) -> None:
    """From Python (SQL checks its literal already): InvalidInputError, not numpy's
    ValueError or TypeError."""
    root, mw = lsm
    plain = lance_sql.write_dataset(mw.dataset.to_table(), root / "p.lance")
    with pytest.raises(InvalidInputError, match="query vector"):
        mw.nearest("e", query, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="query vector"):
        plain.nearest("e", query, k=3)  # type: ignore[arg-type]


def test_system_columns_of_the_rows_found_equal_python(lsm, tmp_path: Path) -> None:
    """A query naming ``_rowid`` / ``_rowaddr`` / ``_gen`` / ``_region`` gets them on the
    rows found, as Python's search gives them; ``*`` still hides them."""
    root, mw = lsm
    session = connect(root)
    system = ["_rowid", "_rowaddr", "_gen", "_region"]
    want = mw.nearest("e", [0.2, -0.1], 12, columns=["id", *system])
    assert set(want["_gen"].to_pylist()) >= {-1, 1, 2}  # base, generation and MemTable rows
    got = q(session, "SELECT id, _rowid, _rowaddr, _gen, _region, _distance "
                     "FROM nearest('t', 'e', [0.2, -0.1], 12)")
    same(got, want)
    starred = q(session, "SELECT *, _rowaddr FROM nearest('t', 'e', [0.2, -0.1], 12)")
    assert starred.column_names == ["id", "v", "e", "_distance", "_rowaddr"]
    filtered = q(session, "SELECT id, _gen, _distance FROM nearest('t', 'e', [0.2, -0.1], "
                          "12) WHERE _gen = -1")
    same(filtered, want.select(["id", "_gen", "_distance"]).filter(
        pa.compute.equal(want["_gen"], -1)))
    # a plain table: its own addresses; it is the search's one base source
    plain = lance_sql.write_dataset(rows(list(range(50)), [0] * 50,
                                         np.random.default_rng(3).normal(size=(50, 2))),
                                    root / "p.lance", max_rows_per_file=20)
    plain.delete("id < 5")
    got = q(session, "SELECT n.id, n._rowid, n._rowaddr, n._gen, n._region, p._rowaddr AS a "
                     "FROM nearest('p', 'e', [0.0, 0.0], 6) AS n JOIN p ON n.id = p.id")
    assert got.num_rows == 6
    assert got["_rowaddr"].to_pylist() == got["a"].to_pylist()
    assert set(got["_gen"].to_pylist()) == {-1} and set(got["_region"].to_pylist()) == {None}
    assert min(got["_rowaddr"].to_pylist()) >= 5  # deleted rows are not found
    same(q(session, "SELECT id, _rowid, _distance FROM nearest('p', 'e', [0.0, 0.0], 6)"),
         lance_sql.dataset(root / "p.lance").nearest("e", [0.0, 0.0], 6,
                                                     columns=["id", "_rowid"]))
