"""The LSM view through the MemWal handle: the spec's three example plans (scan, point
lookup, vector search) on the spec's setup, and what the reads return."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal, RoutingWriter
from lance_sql.table.runtime.workers import live_workers

PK = {"lance-schema:unenforced-primary-key": "true"}
VEC = pa.list_(pa.float32(), 2)
SCHEMA = pa.schema([pa.field("tenant", pa.string(), nullable=False, metadata=PK),
                    pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("e", VEC)])
_names = itertools.count()


def rows(tenant: str, ids: list[int], v: int) -> pa.Table:
    return pa.table({"tenant": [tenant] * len(ids), "id": ids, "v": [v] * len(ids),
                     "e": [[float(i), float(v)] for i in ids]}, schema=SCHEMA)


def writer_of(w: RoutingWriter, tenant: str):
    return next(x for x in w.writers if x.region["identity_tenant"] == tenant)


@pytest.fixture
def spec_setup():
    """Region A: gen 1 flushed, gen 2 in memory; region B: gens 1 and 2 flushed, gen 3
    in memory (the spec's "Query Execution" setup)."""
    name = f"lsm-plans{next(_names)}"
    MemoryStore.reset(name)
    base = pa.concat_tables([rows("A", list(range(10)), 0), rows("B", list(range(10)), 0)])
    ds = lance_sql.write_dataset(base, f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.identity("tenant"),
                           max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    w.put(pa.concat_tables([rows("A", [1, 2], 1), rows("B", [1, 2], 1)]))
    w.flush_memtable()                               # A gen 1, B gen 1
    w.put(rows("B", [2, 3], 2))
    writer_of(w, "B").flush_memtable()               # B gen 2
    w.put(pa.concat_tables([rows("A", [2, 4], 2), rows("B", [3, 5], 3)]))
    w.delete(pa.table({"tenant": ["B"], "id": pa.array([6], pa.int64())}))
    try:
        yield mw, w
    finally:
        w.close()


def labels(mw: MemWal, w: RoutingWriter) -> dict[str, str]:
    return {f"region_{writer_of(w, t).region_id.hex[:8]}": f"region_{t}" for t in "AB"}


def subtree(text: str, root: str, names: dict[str, str]) -> list[str]:
    """The plan lines from the first starting with ``root``, dedented, regions renamed
    and our extra annotations (source kinds, index use, base duplicate keys) dropped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(root))
    indent = len(lines[start]) - len(lines[start].lstrip())
    out = []
    for line in lines[start:]:
        line = line[indent:]
        for ours, spec in names.items():
            line = line.replace(ours, spec)
        line = re.sub(r", source=\w+", "", line)
        line = re.sub(r", (reverse_scan|index=\w+)$", "", line)
        line = re.sub(r", base_duplicate_keys=\[[^\]]*\]", "", line)
        out.append(line)
    return out


def test_scan_plan_has_the_spec_shape(spec_setup) -> None:
    mw, w = spec_setup
    text = mw.scanner(filter="v >= 0").explain()
    assert subtree(text, "DeduplicateExec", labels(mw, w)) == [
        "DeduplicateExec: partition_by=[tenant, id], order_by=[_gen DESC, _rowaddr DESC]",
        "  UnionExec",
        "    ScanExec: base_table[gen=-1], filter=[(v >= 0)]",
        "    ScanExec: region_A[gen=2], filter=[(v >= 0)]",
        "    ScanExec: region_A[gen=1], filter=[(v >= 0)]",
        "    ScanExec: region_B[gen=3], filter=[(v >= 0)]",
        "    ScanExec: region_B[gen=2], filter=[(v >= 0)]",
        "    ScanExec: region_B[gen=1], filter=[(v >= 0)]",
    ]
    got = {(r["tenant"], r["id"]): r["v"] for r in mw.scanner().to_table().to_pylist()}
    want = {(t, i): 0 for t in "AB" for i in range(10)}
    want.update({("A", 1): 1, ("A", 2): 2, ("A", 4): 2, ("B", 1): 1, ("B", 2): 2,
                 ("B", 3): 3, ("B", 5): 3})
    del want[("B", 6)]
    assert got == want
    assert mw.scanner(filter="v = 0 AND tenant = 'B'").to_table().num_rows == 5


def test_point_lookup_plan_has_the_spec_shape(spec_setup) -> None:
    mw, w = spec_setup
    keys = pa.table({"tenant": ["A"], "id": pa.array([4], pa.int64())})
    text = mw.view().lookup_plan(keys).explain()
    assert "kept 1 of 2 regions" in text
    assert subtree(text, "CoalesceFirstExec", labels(mw, w)) == [
        "CoalesceFirstExec: return_first_non_null",
        "  BloomFilterGuardExec: bf[region_A][gen=2]",
        "    TakeLastExec: region_A[gen=2], filter=[tenant = 'A' AND id = 4]",
        "  BloomFilterGuardExec: bf[region_A][gen=1]",
        "    TakeLastExec: region_A[gen=1], filter=[tenant = 'A' AND id = 4]",
        "  TakeLastExec: base_table[gen=-1], filter=[tenant = 'A' AND id = 4]",
    ]
    got = mw.get({"tenant": ["B", "A", "B", "A", "B"], "id": [3, 4, 6, 99, 9]},
                 columns=["id", "v"])
    assert got.to_pylist() == [{"id": 3, "v": 3}, {"id": 4, "v": 2}, {"id": 9, "v": 0}]


def test_a_key_the_memtable_answers_is_never_hashed(spec_setup) -> None:
    """The MemTable's exact key index answers first: bloom hashing waits for the keys
    that get past it (and the MemTable's rows are not assembled for a lookup)."""
    mw, _ = spec_setup
    view = mw.view()
    plan = view.lookup_plan(pa.table({"tenant": ["A"], "id": pa.array([4], pa.int64())}))
    assert plan.to_table().column("v").to_pylist() == [2]
    coalesce = plan.root.children[0]
    assert coalesce.keys._hashes is None
    memtables = [c.source for c in coalesce.children
                 if getattr(c, "source", None) is not None and c.source.kind == "memtable"]
    assert memtables and all(m._table is None for m in memtables)
    plan = view.lookup_plan(pa.table({"tenant": ["A"], "id": pa.array([1], pa.int64())}))
    assert plan.to_table().column("v").to_pylist() == [1]  # from gen 1, past the MemTable
    assert plan.root.children[0].keys._hashes is not None


def test_search_plan_has_the_spec_shape(spec_setup) -> None:
    mw, w = spec_setup
    text = mw.view().knn_plan("e", [0.0, 0.0], 3).explain()
    bf = ("bf[region_A][gen=2], bf[region_A][gen=1], bf[region_B][gen=3], "
          "bf[region_B][gen=2], bf[region_B][gen=1]")
    assert subtree(text, "GlobalLimitExec", labels(mw, w)) == [
        "GlobalLimitExec: limit=3",
        "  SortExec: order_by=[_distance ASC]",
        f"    FilterStaleExec: bloom_filters=[{bf}]",
        "      UnionExec",
        "        KNNExec: base_table[gen=-1], k=3, metric=l2",
        "        KNNExec: region_A[gen=2], k=3, metric=l2",
        "        KNNExec: region_A[gen=1], k=3, metric=l2",
        "        KNNExec: region_B[gen=3], k=3, metric=l2",
        "        KNNExec: region_B[gen=2], k=3, metric=l2",
        "        KNNExec: region_B[gen=1], k=3, metric=l2",
    ]


@pytest.mark.parametrize("exact", [False, True])
def test_nearest_returns_the_newest_rows(spec_setup, exact: bool) -> None:
    mw, _ = spec_setup
    # newest rows have e = [id, v]: the base's (A, 1) and (B, 1) at (1, 0) are stale
    got = mw.nearest("e", [1.0, 0.0], 4, columns=["tenant", "id", "v"], exact=exact)
    assert got.column("_distance").to_pylist() == [1.0] * 4
    assert {(r["tenant"], r["id"], r["v"]) for r in got.to_pylist()} == {
        ("A", 0, 0), ("B", 0, 0), ("A", 1, 1), ("B", 1, 1)}
    # (B, 6) at (6, 0) was deleted: the nearest live row is (B, 7)
    near = mw.nearest("e", [6.0, 0.0], 2, filter="tenant = 'B'", exact=exact,
                      columns=["tenant", "id"])
    assert near.to_pylist()[0] == {"tenant": "B", "id": 7, "_distance": 1.0}
    assert near.column("_distance").to_pylist()[1] == 4.0


def test_system_columns_limits_and_consistency(spec_setup) -> None:
    mw, w = spec_setup
    got = mw.scanner(["id", "_gen", "_region"], filter="tenant = 'A' AND id = 2").to_table()
    assert got.to_pylist() == [{"id": 2, "_gen": 2,
                                "_region": str(writer_of(w, "A").region_id)}]
    assert mw.scanner(["id"], filter="_gen = -1 AND tenant = 'A'").to_table().num_rows == 7
    assert mw.scanner(limit=3).to_table().num_rows == 3
    assert mw.scanner(filter="v > 0").count_rows() == 7
    # the index snapshot knows nothing yet: only the base table
    assert mw.scanner(consistency="snapshot").to_table().column("v").to_pylist() == [0] * 20
    w.flush_memtable()
    mw.refresh_index()
    snap = mw.scanner(consistency="snapshot").to_table()
    assert sorted(snap.column("v").to_pylist()) == sorted(
        mw.scanner().to_table().column("v").to_pylist())
    with pytest.raises(InvalidInputError, match="consistency"):
        mw.scanner(consistency="eventual")
    with pytest.raises(NotFoundError, match="nope"):
        mw.scanner(["nope"]).to_table()
    with pytest.raises(InvalidInputError, match="primary-key"):
        mw.get({"id": [1]})
    with pytest.raises(InvalidInputError, match="limit"):
        mw.scanner(limit=-1)


def test_reads_follow_merges_and_skip_merged_generations(spec_setup) -> None:
    mw, w = spec_setup
    before = mw.scanner().to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    mw.merge()
    text = mw.scanner().explain()
    assert "source=flushed" not in text  # merged generations are read from the base
    after = mw.scanner().to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    assert after.equals(before)
    assert np.all(np.asarray(mw.scanner(["_gen"]).to_table().column("_gen")) <= 3)


def test_a_memtable_flushed_while_planning_is_read_once(spec_setup) -> None:
    mw, w = spec_setup
    want = mw.scanner().to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    view = mw.view()             # MemTables taken here ...
    w.flush_memtable()           # ... flushed before the manifests are read
    plan = view.scan_plan()
    text = plan.explain()
    assert "source=memtable" not in text and text.count("source=flushed") == 5
    got = plan.to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    assert got.equals(want)


def test_no_worker_outlives_a_scan_stopped_early(spec_setup) -> None:
    mw, _ = spec_setup
    batches = mw.scanner().to_batches()
    next(batches)
    batches.close()
    assert mw.scanner(limit=1).to_table().num_rows == 1
    assert live_workers() == []


def test_a_stale_snapshot_still_reads_correctly(spec_setup) -> None:
    mw, w = spec_setup
    w.flush_memtable()
    mw.refresh_index()                     # the snapshot lists every generation ...
    want = mw.scanner().to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    mw.merge()                             # ... which are then merged
    lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
    assert mw.collect_garbage(grace=timedelta(0)).generations  # ... and removed
    got = mw.scanner(consistency="snapshot").to_table()
    assert got.sort_by([("tenant", "ascending"), ("id", "ascending")]).equals(want)
    assert "source=flushed" not in mw.scanner(consistency="snapshot").explain()


def test_an_older_version_reads_its_own_snapshot(spec_setup) -> None:
    mw, w = spec_setup
    w.flush_memtable()
    then = mw.refresh_index().version
    want = mw.scanner().to_table().sort_by([("tenant", "ascending"), ("id", "ascending")])
    w.put(rows("A", [0, 1, 2, 3], 9))
    w.delete(pa.table({"tenant": ["B"], "id": pa.array([0], pa.int64())}))
    w.flush_memtable()
    mw.merge()
    mw.refresh_index()
    assert mw.scanner(filter="v = 9").count_rows() == 4
    old = mw.scanner(version=then).to_table()
    assert old.sort_by([("tenant", "ascending"), ("id", "ascending")]).equals(want)
    assert f"base version={then}" in mw.scanner(version=then).explain()
    with pytest.raises(InvalidInputError, match="snapshot"):
        mw.view("eventual", version=then)


def test_a_closed_writer_publishes_its_memtable_and_a_wal_only_close_waits_for_replay(
        ) -> None:  # fmt: skip
    """Readers read no WAL (as the README says): ``close()`` flushes the MemTable as a
    generation, so its rows are read after it; rows a writer closed with
    ``flush_memtable=False`` left in its MemTable are unseen until a writer of their
    region replays the WAL and flushes them."""
    name = f"lsm-plans{next(_names)}"
    MemoryStore.reset(name)
    ds = lance_sql.write_dataset(rows("A", [1], 0), f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.identity("tenant"),
                           max_wal_flush_interval_ms=3_600_000)

    def read() -> list[dict]:
        return sorted(mw.scanner(["id", "v"]).to_table().to_pylist(), key=lambda r: r["id"])

    with mw.writer() as w:
        w.put(rows("A", [1, 2], 5))
        assert read() == [{"id": 1, "v": 5}, {"id": 2, "v": 5}]
    assert read() == [{"id": 1, "v": 5}, {"id": 2, "v": 5}]  # a generation now
    assert [g for g in mw.scanner(["id", "_gen"]).to_table().column("_gen").to_pylist()
            if g] == [1, 1]
    w = mw.writer()
    w.put(rows("A", [2, 4], 6))
    w.close(flush_memtable=False)
    assert read() == [{"id": 1, "v": 5}, {"id": 2, "v": 5}]  # in the WAL only
    with mw.writer() as w:
        w.put(rows("A", [3], 7))  # claims region A: its WAL is replayed first
    assert read() == [{"id": 1, "v": 5}, {"id": 2, "v": 6}, {"id": 3, "v": 7},
                      {"id": 4, "v": 6}]


def test_a_filter_failing_on_memtable_or_generation_values_is_invalid_input(tmp_path) -> None:
    """A filter that types but fails on the values it meets (a string compared with a
    number: 'y' does not parse) is an InvalidInputError from a MemTable and from a
    flushed generation, as it is from the base table, not pyarrow's ArrowInvalid."""
    key = pa.field("id", pa.int64(), nullable=False,
                   metadata={"lance-schema:unenforced-primary-key": "true"})
    schema = pa.schema([key, pa.field("s", pa.string())])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "s": ["1", "2"]}, schema=schema),
                                 tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"id": [3], "s": ["y"]}, schema=schema))
        with pytest.raises(InvalidInputError, match="fails on the table's values"):
            mw.scanner(filter="s > 1").to_table()
        writer.flush_memtable()
        with pytest.raises(InvalidInputError, match="fails on the table's values"):
            mw.scanner(filter="s > 1").to_table()
        # the rows are all still there
        assert sorted(mw.scanner(columns=["id"]).to_table().column("id").to_pylist()) == [1, 2, 3]
    finally:
        writer.close(flush_memtable=False)
