"""``EXPLAIN ANALYZE`` (and ``session.explain(..., analyze=True)``) runs the query and
prints our operator trees beneath DataFusion's ``DatasetExec`` with each node's metrics
from that run: full and filtered LSM scans, point lookups (one key, a few, 64+), the
``nearest()`` search on MemWAL and plain tables, and the net change feed. The numbers
are checked against the query's own result."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from test_query_lifetime import threads_in_lance_sql

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()),
                    pa.field("e", pa.list_(pa.float32(), 2))])


def rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids),
                     "e": [[float(i), float(v)] for i in ids]}, schema=SCHEMA)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """``t``: a MemWAL table over 2 regions — base ids 0..19 (v=0), generation 1 flushed
    (1, 2, 3 at v=1), a MemTable (2, 11, 25 at v=2; 3 deleted); ``p``: a plain table with
    stable row ids and three versions (for the change feed)."""
    lance_sql.write_dataset(rows(list(range(20)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(lance_sql.dataset(tmp_path / "t.lance"),
                           RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    w.put(rows([1, 2, 3], 1))
    w.flush_memtable()
    w.put(rows([2, 11, 25], 2))
    w.delete(pa.table({"id": pa.array([3], pa.int64())}))
    p = lance_sql.write_dataset(rows(list(range(6)), 0), tmp_path / "p.lance",
                                enable_stable_row_ids=True)
    p.delete("id = 2")
    lance_sql.write_dataset(rows([6, 7], 0), tmp_path / "p.lance", mode="append")
    try:
        yield tmp_path
    finally:
        w.close()


def analyzed(session, sql: str) -> list[str]:
    """The lines of EXPLAIN ANALYZE's plan with metrics (through SQL)."""
    table = session.sql(f"EXPLAIN ANALYZE {sql}").to_arrow_table()
    types = table["plan_type"].to_pylist()
    assert "Plan with Metrics" in types
    return table["plan"][types.index("Plan with Metrics")].as_py().splitlines()


def metrics(lines: list[str], starts: str, nth: int = 0) -> dict[str, str]:
    """The metrics of the ``nth`` of our lines starting with ``starts``."""
    found = [line for line in lines if line.lstrip().startswith(starts)]
    text = found[nth].rsplit("metrics=[", 1)[1].removesuffix("]")
    return dict(re.findall(r"(\w+)=([^,]+?)(?:, |$)", text))


def count(session, sql: str) -> int:
    return session.sql(sql).to_arrow_table().num_rows


def test_full_scan(root: Path) -> None:
    session = connect(root)
    lines = analyzed(session, "SELECT id, v FROM t")
    want = count(session, "SELECT id, v FROM t")
    assert want == 20  # 0..19 less 3 (deleted), plus 25
    dedup = metrics(lines, "DeduplicateExec")
    assert int(dedup["output_rows"]) == want
    scans = [metrics(lines, "ScanExec", i) for i in range(5)]
    rows_in = sum(int(m["output_rows"]) for m in scans)
    assert int(dedup["rows_in"]) == rows_in == int(metrics(lines, "UnionExec")["output_rows"])
    # base 1, 2, 3 and 11 dropped by the dedup (no key index); generation 1's 2 and 3 and
    # the tombstone of 3 left out of the newer sources' scans (they read their winners)
    assert int(dedup["rows_dropped"]) == rows_in - want == 4
    assert int(dedup["newer_rows_left_out"]) == 3
    assert any("LsmSources: regions_kept=2, regions_pruned=0, sources_opened=5" in line
               for line in lines)
    assert int(metrics(lines, "ProjectionExec")["output_rows"]) == want


def test_filtered_scan_prunes_regions(tmp_path: Path) -> None:
    """A composite key (tenant, id), one region per tenant: a filter on the tenant alone
    scans (not every key column is pinned) and keeps one region of two."""
    schema = pa.schema([pa.field("tenant", pa.string(), nullable=False, metadata=PK),
                        pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    base = pa.table({"tenant": ["A"] * 5 + ["B"] * 5, "id": list(range(5)) * 2,
                     "v": [0] * 10}, schema=schema)
    ds = lance_sql.write_dataset(base, tmp_path / "c.lance")
    mw = MemWal.initialize(ds, RegionSpec.identity("tenant"), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(pa.table({"tenant": ["A", "B", "A"], "id": [1, 1, 7], "v": [5, 6, 7]},
                       schema=schema))
        session = connect(tmp_path)
        sql = "SELECT id, v FROM c WHERE tenant = 'A' AND v >= 0"
        lines = analyzed(session, sql)
        assert any("RegionPruning: kept 1 of 2 regions" in line for line in lines)
        assert any("LsmSources: regions_kept=1, regions_pruned=1" in line for line in lines)
        want = count(session, sql)
        assert want == 6  # A's 0..4 and 7
        dedup = metrics(lines, "DeduplicateExec")
        assert dedup["output_rows"] == str(want)
        # A's MemTable row of key 1 hides its base row: the one row dropped
        assert (dedup["rows_in"], dedup["rows_dropped"]) == ("7", "1")


@pytest.mark.parametrize("key, source", [(2, "gen=2"), (1, "gen=1"), (5, "gen=-1"),
                                         (3, "deleted"), (99, "none")])
def test_point_lookup_shows_what_answered(root: Path, key: int, source: str) -> None:
    session = connect(root)
    lines = analyzed(session, f"SELECT v FROM t WHERE id = {key}")
    m = metrics(lines, "OneKeyLookupExec")
    assert m["output_rows"] == str(count(session, f"SELECT v FROM t WHERE id = {key}"))
    if source == "deleted":
        assert m["answered_by"].endswith("[gen=2] (a tombstone: deleted)")
    elif source == "none":
        assert m["answered_by"] == "none (no source holds the key)"
    else:
        assert m["answered_by"].endswith(f"[{source}]")
    assert not any("CoalesceFirstExec" in line for line in lines)


def test_in_list_the_probe_does_not_answer_runs_the_nodes(root: Path, monkeypatch) -> None:
    """(Every lookup of two or more integer keys takes the probe; held back here, the
    nodes run, as for string or composite keys, and print their metrics.)"""
    from lance_sql.memwal.read import many

    monkeypatch.setattr(many, "MANY_KEYS", 10**9)
    session = connect(root)
    sql = "SELECT v FROM t WHERE id IN (1, 2, 3, 5, 99)"
    lines = analyzed(session, sql)
    coalesce = metrics(lines, "CoalesceFirstExec")
    assert coalesce["output_rows"] == str(count(session, sql)) == "3"
    assert (coalesce["keys"], coalesce["keys_deleted"], coalesce["keys_not_found"]) == \
        ("5", "1", "1")
    resolved = sum(int(m.group(1)) for line in lines
                   if (m := re.search(r"keys_resolved=(\d+)", line)))
    assert resolved == 4


def test_in_list_of_many_keys_prints_the_probe_it_ran(root: Path) -> None:
    session = connect(root)
    keys = ", ".join(map(str, range(100)))
    sql = f"SELECT id, v FROM t WHERE id IN ({keys})"
    lines = analyzed(session, sql)
    probe = metrics(lines, "ManyKeyProbeExec")
    assert probe["output_rows"] == str(count(session, sql))
    assert probe["keys"] == "100"
    parts = [int(probe[k]) for k in ("keys_in_generations", "keys_in_memtables",
                                     "keys_asked_of_base")]
    assert sum(parts) == 100 and parts[:2] == [1, 4]  # 1; 2, 3 (deleted), 11, 25
    assert metrics(lines, "TakeLastExec: base_table")["keys_asked"] == "95"
    assert not any("CoalesceFirstExec" in line for line in lines)
    plain = session.explain(sql)  # EXPLAIN alone: the plan's nodes, as before
    assert "CoalesceFirstExec" in plain and "metrics=" not in plain.split("physical_plan")[1]


@pytest.mark.parametrize("table", ["t", "p"])
def test_nearest(root: Path, table: str) -> None:
    session = connect(root)
    sql = f"SELECT id, _distance FROM nearest('{table}', 'e', [0.0, 0.0], 4)"
    got = session.sql(sql).to_arrow_table()
    assert got.schema.field("_distance").type == pa.float32() and got.num_rows == 4
    lines = analyzed(session, sql)
    knns = [line for line in lines if line.lstrip().startswith("KNNExec")]
    assert len(knns) == (5 if table == "t" else 1)
    candidates = [int(metrics(lines, "KNNExec", i)["output_rows"]) for i in range(len(knns))]
    assert all(c <= 4 for c in candidates)
    assert metrics(lines, "GlobalLimitExec")["output_rows"] == "4"
    if table == "t":
        stale = metrics(lines, "FilterStaleExec")
        assert int(stale["rows_in"]) == sum(candidates)
        assert int(stale["output_rows"]) == int(stale["rows_in"]) - int(stale["stale_dropped"])


def test_net_change_feed(root: Path) -> None:
    session = connect(root)
    sql = "SELECT * FROM table_changes('p', 1, 3, 'net')"
    want = count(session, sql)
    lines = analyzed(session, sql)
    line = next(x for x in lines if x.lstrip().startswith("ChangeFeedExec"))
    assert "mode=net" in line and "versions planned=3" in line
    assert f"netted to {want} rows" in line
    assert metrics(lines, "ChangeFeedExec")["output_rows"] == str(want)
    # plain EXPLAIN prints the feed's plan line without metrics
    plain = session.explain(sql)
    assert "ChangeFeedExec: p[v1..v3], mode=net" in plain and "metrics=[output" not in plain


def test_session_explain_analyze_and_no_threads_left(root: Path) -> None:
    session = connect(root)
    before = set(threads_in_lance_sql())  # (the fixture's writers)
    text = session.explain("SELECT v FROM t WHERE v > 0", analyze=True)
    assert text.startswith("Plan with Metrics:")
    assert "DeduplicateExec" in text and "elapsed_compute=" in text
    # the scan's reader thread (newer sources read beside the base) ended with the query
    assert set(threads_in_lance_sql()) <= before


def test_a_scan_explain_analyze_never_reads_is_let_go_at_once(root: Path) -> None:
    """A join whose build side is empty never reads its probe side: that scan's unit is
    released with the query (it held EXPLAIN ANALYZE for 30 s before), and its tree says
    it read nothing."""
    session = connect(root)
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        lines = analyzed(session, "SELECT a.v, b.v FROM t a JOIN t b ON a.id = b.id "
                                  "WHERE a.v > 5")
    assert time.monotonic() - start < 10
    scans = [metrics(lines, "DeduplicateExec", i) for i in range(2)]
    assert [m["output_rows"] for m in scans] == ["0", "0"]
