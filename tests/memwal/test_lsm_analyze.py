"""EXPLAIN ANALYZE of LSM plans from Python: each node's metrics equal the real counts of
the run (rows per source, rows dropped as stale, keys resolved per source, candidates per
KNNExec), a lookup prints the path that answered it, and the metrics machinery itself
(own time, thread safety)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read.flat_search import table_knn_plan
from lance_sql.memwal.read.many import MANY_KEYS
from lance_sql.memwal.read.metrics import NodeMetrics, metered, not_own_work, own_work
from lance_sql.memwal.read.nodes import (
    BloomFilterGuardExec,
    CoalesceFirstExec,
    DeduplicateExec,
    ExecNode,
    GlobalLimitExec,
    ScanExec,
    TakeLastExec,
    UnionExec,
)
from lance_sql.memwal.read.search import FilterStaleExec, KNNExec
from lance_sql.memwal.read.sources import GenerationSource, MemTableSource, Source

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()),
                    pa.field("e", pa.list_(pa.float32(), 2))])


def rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids),
                     "e": [[float(i), float(v)] for i in ids]}, schema=SCHEMA)


@pytest.fixture(params=[False, True], ids=["no-index", "btree"])
def table(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MemWal]:
    """Base ids 0..9 (v=0); generation 1 flushed: 1, 2, 3 (v=1); a MemTable: 2, 11 (v=2)
    and 3 deleted. With a BTREE index on the key, the base scan leaves out the base rows
    newer keys hide (1, 2, 3) itself."""
    ds = lance_sql.write_dataset(rows(list(range(10)), 0), tmp_path / "t.lance")
    if request.param:
        ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(tmp_path / "t.lance"), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    w.put(rows([1, 2, 3], 1))
    w.flush_memtable()
    w.put(rows([2, 11], 2))
    w.delete(pa.table({"id": pa.array([3], pa.int64())}))
    try:
        yield mw
    finally:
        w.close()


def nodes(root: ExecNode, kind: type) -> list:
    found = [root] if isinstance(root, kind) else []
    for child in root.children:
        found += nodes(child, kind)
    return found


def source_rows(source: Source) -> int:
    """Every row a newer source holds (tombstones too), read apart from the plan."""
    if isinstance(source, GenerationSource):
        return source.rows().num_rows
    assert isinstance(source, MemTableSource)
    return source.table.num_rows


def holds(source: Source, key: int) -> bool:
    return key in source.key_rows().keys[0].to_pylist()


def test_full_scan_metrics_are_the_runs_counts(table: MemWal) -> None:
    view = table.scanner().view
    plan = view.scan_plan()
    out = plan.to_table()
    assert sorted(out["id"].to_pylist()) == [0, 1, 2, 4, 5, 6, 7, 8, 9, 11]
    (dedup,) = nodes(plan.root, DeduplicateExec)
    (union,) = nodes(plan.root, UnionExec)
    scans = nodes(plan.root, ScanExec)
    assert dedup.metrics.output_rows == out.num_rows
    newer = [s for s in scans if not s.source.is_base]
    # without a filter a newer source's scan reads its winning rows (cached): every row it
    # holds is read or counted as left out (older versions, tombstones)
    left_out = dedup.metrics.get("newer_rows_left_out")
    assert sum(s.metrics.output_rows for s in newer) + left_out == \
        sum(source_rows(s.source) for s in newer)
    for scan in newer:
        assert scan.metrics.output_rows <= source_rows(scan.source)
    hidden = dedup.metrics.get("base_rows_hidden_by_index")
    base = next(s for s in scans if s.source.is_base)
    assert base.metrics.output_rows == 10 - hidden
    # the BTREE index leaves out exactly the base rows of keys newer sources hold
    assert hidden == (3 if view.sources(view.regions(None))[0].key_index() else 0)
    rows_in = sum(s.metrics.output_rows for s in scans)
    assert union.metrics.output_rows == rows_in == dedup.metrics.get("rows_in")
    assert rows_in - dedup.metrics.get("rows_dropped") == out.num_rows
    # every older version and the tombstone are dropped, by the dedup, the index or the
    # newer sources' winners: base 1, 2, 3; generation 1's 2 and 3; the MemTable's
    # tombstone of 3 (the newer ones left out before their scans)
    total = 10 + sum(source_rows(s.source) for s in newer)
    assert dedup.metrics.get("rows_dropped") + hidden + left_out == total - out.num_rows == 6
    assert left_out == 3
    assert dedup.metrics.get("newer_keys") == sum(
        len(set(s.source.key_rows().keys[0].to_pylist())) for s in newer)
    text = plan.explain(analyze=True)
    assert "LsmSources: regions_kept=2, regions_pruned=0, sources_opened=5 (1 base" in text
    line = next(x for x in text.splitlines() if "DeduplicateExec" in x)
    assert f"output_rows={out.num_rows}," in line and "elapsed_compute=" in line
    assert text.count("metrics=[") == 3 + len(scans)  # projection, dedup, union, scans


def test_python_explain_analyze_runs_a_fresh_plan(table: MemWal) -> None:
    scanner = table.scanner(["id", "v"], filter="v >= 1")
    text = scanner.explain(analyze=True)
    want = scanner.to_table().num_rows  # 1 (v=1), 2 and 11 (v=2)
    assert want == 3
    line = next(x for x in text.splitlines() if x.lstrip().startswith("ProjectionExec"))
    assert f"output_rows={want}," in line
    assert "metrics=" not in scanner.explain()  # plain EXPLAIN: the plan alone


def test_a_filter_prunes_regions_and_the_metrics_say_so(table: MemWal) -> None:
    view = table.scanner().view
    plan = view.scan_plan(["id", "v"], "id = 4 AND v >= 0")
    out = plan.to_table()
    assert out.to_pylist() == [{"id": 4, "v": 0}]
    text = plan.explain(analyze=True)
    assert "RegionPruning: kept 1 of 2 regions" in text
    assert "regions_kept=1, regions_pruned=1" in text
    kept = [s for s in plan.sources if not s.is_base]
    assert all(s.region == kept[0].region for s in kept)
    (dedup,) = nodes(plan.root, DeduplicateExec)
    assert dedup.metrics.output_rows == 1


@pytest.mark.parametrize("key", [2, 1, 5, 3, 42])
def test_a_point_lookup_names_the_source_that_answered(table: MemWal, key: int) -> None:
    view = table.scanner().view
    plan = view.lookup_plan(pa.table({"id": pa.array([key], pa.int64())}), ["id", "v"])
    out = plan.to_table()
    assert plan.ran == "one" and plan.one_metrics is not None
    newer = sorted((s for s in plan.sources if not s.is_base and holds(s, key)),
                   key=lambda s: -s.gen)
    if newer:  # the newest source holding the key answers (a tombstone: deleted)
        want = newer[0].label
        if key == 3:
            want += " (a tombstone: deleted)"
    else:
        want = "base_table[gen=-1]" if key < 10 else "none (no source holds the key)"
    assert plan.one_metrics.notes["answered_by"] == want
    assert plan.one_metrics.output_rows == out.num_rows == (0 if key in (3, 42) else 1)
    text = plan.explain(analyze=True)
    assert f"OneKeyLookupExec: id = {key}, metrics=[output_rows={out.num_rows}," in text
    assert f"answered_by={want}" in text
    assert "CoalesceFirstExec" not in text  # the nodes did not run


def test_a_lookup_the_probe_does_not_answer_counts_keys_per_source(table: MemWal,
                                                                     monkeypatch) -> None:
    """(Every lookup of two or more integer keys takes the probe; held back here, the
    nodes run, as for string or composite keys.)"""
    from lance_sql.memwal.read import many

    monkeypatch.setattr(many, "MANY_KEYS", 10**9)
    view = table.scanner().view
    keys = [1, 2, 3, 5, 42]
    plan = view.lookup_plan(pa.table({"id": pa.array(keys, pa.int64())}), ["id", "v"])
    out = plan.to_table()
    assert plan.ran == "nodes" and out["id"].to_pylist() == [1, 2, 5]
    (coalesce,) = nodes(plan.root, CoalesceFirstExec)
    m = coalesce.metrics
    assert (m.get("keys"), m.get("keys_deleted"), m.get("keys_not_found")) == (5, 1, 1)
    assert m.output_rows == out.num_rows
    resolved = {c.describe(): c.metrics.get("keys_resolved") for c in coalesce.children}
    assert sum(resolved.values()) == 4  # 1, 2, 3 (deleted) and 5
    base = coalesce.children[-1]
    assert isinstance(base, TakeLastExec) and base.metrics.get("keys_resolved") == 1  # 5
    for guard in nodes(plan.root, BloomFilterGuardExec):
        take = guard.children[0]
        if guard.metrics.get("bloom_checks"):  # a bloom filter checked: what passed ran
            passed = guard.metrics.get("bloom_checks") - guard.metrics.get("keys_ruled_out")
            assert take.metrics.get("keys_asked") == passed
        assert guard.metrics.get("keys_resolved") <= take.metrics.output_rows
    assert "keys_resolved=" in plan.explain(analyze=True)


def test_a_lookup_of_many_keys_prints_the_probe_that_ran(table: MemWal) -> None:
    view = table.scanner().view
    keys = list(range(100))
    assert len(keys) >= MANY_KEYS
    plan = view.lookup_plan(pa.table({"id": pa.array(keys, pa.int64())}), ["id", "v"])
    out = plan.to_table()
    assert plan.ran == "many" and plan.many is not None
    assert out["id"].to_pylist() == [0, 1, 2, 4, 5, 6, 7, 8, 9, 11]
    m = plan.many.metrics
    assert m.get("keys") == 100 and m.output_rows == out.num_rows
    # 1 in generation 1; 2, 11 and 3 (a tombstone) in the MemTable; the rest the base's
    assert (m.get("keys_in_generations"), m.get("keys_in_memtables"),
            m.get("keys_asked_of_base"), m.get("keys_deleted")) == (1, 3, 96, 1)
    assert plan.many.base.metrics.get("keys_asked") == 96
    text = plan.explain(analyze=True)
    assert "ManyKeyProbeExec: id IN (100 keys)" in text
    assert "CoalesceFirstExec" not in text and "ManyKeyProbe:" not in text
    assert "CoalesceFirstExec" in plan.explain()  # plain EXPLAIN: as before


def test_search_metrics_count_candidates(table: MemWal) -> None:
    view = table.scanner().view
    plan = view.knn_plan("e", [0.0, 0.0], 3, columns=["id"])
    out = plan.to_table()
    knns = nodes(plan.root, KNNExec)
    (stale,) = nodes(plan.root, FilterStaleExec)
    (limit,) = nodes(plan.root, GlobalLimitExec)
    assert all(k.metrics.output_rows <= 3 for k in knns)
    assert sum(k.metrics.output_rows for k in knns) == stale.metrics.get("rows_in")
    assert stale.metrics.output_rows == (stale.metrics.get("rows_in")
                                         - stale.metrics.get("stale_dropped"))
    assert limit.metrics.output_rows == out.num_rows == 3
    for k in knns:  # every row with a vector is scanned (no filter; tombstones have none)
        want = 10 if k.source.is_base else int((~k.source.key_rows().tombstone).sum())
        assert k.metrics.get("rows_scanned") == want
    assert out.schema.field("_distance").type == pa.float32()
    assert "KNNExec: base_table[gen=-1], k=3, metric=l2, metrics=[output_rows=" in \
        plan.explain(analyze=True)


def test_plain_table_search_gives_pylances_float32_distances(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(500, 4)).astype(np.float32)
    data = pa.table({"id": np.arange(500),
                     "e": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4)})
    ours = lance_sql.write_dataset(data, tmp_path / "p.lance")
    query = [0.1, -0.2, 0.3, 0.0]
    for metric in ("l2", "cosine", "dot"):
        theirs = lance.dataset(str(tmp_path / "p.lance")).to_table(
            columns=["id"], nearest={"column": "e", "q": query, "k": 5, "metric": metric})
        plan = table_knn_plan(ours, "e", query, 5, metric=metric, columns=["id"])
        got = plan.to_table()
        assert got.schema.field("_distance").type == theirs.schema.field("_distance").type \
            == pa.float32()
        assert got["id"].to_pylist() == theirs["id"].to_pylist()
        assert np.allclose(got["_distance"].to_numpy(), theirs["_distance"].to_numpy(),
                           rtol=1e-5, atol=1e-6)
        (knn,) = nodes(plan.root, KNNExec)
        assert knn.metrics.get("rows_scanned") == 500 and knn.metrics.output_rows == 5
        assert ours.nearest("e", query, k=5, metric=metric).schema.field(
            "_distance").type == pa.float32()


def test_own_time_leaves_out_children_and_waiting() -> None:
    parent, child, waiter = NodeMetrics(), NodeMetrics(), NodeMetrics()
    batch = pa.record_batch({"a": [1, 2]})

    def slow_child() -> Iterator[pa.RecordBatch]:
        time.sleep(0.05)
        yield batch

    def parent_stream() -> Iterator[pa.RecordBatch]:
        yield from metered(child, slow_child())

    assert [b.num_rows for b in metered(parent, parent_stream())] == [2]
    assert child.elapsed_ns >= 45_000_000
    assert parent.elapsed_ns < 20_000_000  # the child's sleep is the child's
    assert (parent.output_rows, parent.output_batches, parent.runs) == (2, 1, 1)
    with own_work(waiter):
        with not_own_work():
            time.sleep(0.05)  # waiting for another thread: not the node's work
    assert waiter.elapsed_ns < 20_000_000


def test_metrics_updates_from_many_threads_all_count() -> None:
    m = NodeMetrics()

    def work() -> None:
        for _ in range(2000):
            m.add("n")
            m.output(3)
            m.record(None, 1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (m.get("n"), m.output_rows, m.output_batches, m.elapsed_ns) == \
        (16000, 48000, 16000, 16000)
