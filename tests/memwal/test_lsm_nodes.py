"""The LSM plan nodes, each on small hand-built sources."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import InvalidInputError
from lance_sql.expr.arrow import parse_predicate
from lance_sql.memwal.read.keys import Keys, KeySet, latest_positions
from lance_sql.memwal.read.nodes import (
    DISTANCE,
    GEN,
    REGION,
    BloomFilterGuardExec,
    CoalesceFirstExec,
    DeduplicateExec,
    GlobalLimitExec,
    ScanExec,
    SortExec,
    TakeLastExec,
    UnionExec,
    format_plan,
)
from lance_sql.memwal.read.search import FilterStaleExec, KNNExec, StaleCheck, distances
from lance_sql.memwal.read.sources import InMemorySource

A = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000000")
B = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000000")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()),
                    pa.field("_rowaddr", pa.uint64())])


def source(ids: list[int], vs: list[int | None], gen: int, region: uuid.UUID | None = None,
           tomb: list[bool] | None = None, key: str = "id") -> InMemorySource:
    table = pa.table({key: pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int64()),
                      "_tombstone": pa.array(tomb or [False] * len(ids))})
    return InMemorySource(table, gen, region, None, [key])


def base(ids: list[int], vs: list[int]) -> InMemorySource:
    return source(ids, vs, -1)


def dedup(sources: list[InMemorySource], predicate: str | None = None) -> dict[int, int]:
    pred = parse_predicate(predicate) if predicate else None
    union = UnionExec([ScanExec(s, SCHEMA, pred) for s in sources])
    table = DeduplicateExec(union, ["id"]).to_table()
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids))
    return dict(zip(ids, table.column("v").to_pylist(), strict=True))


def test_newest_generation_wins_and_tombstones_remove_keys() -> None:
    sources = [
        base([1, 2, 3, 4], [10, 20, 30, 40]),
        source([2, 3, 6, 6], [21, None, 60, 61], 1, A, [False, True, False, False]),
        source([2, 5], [22, 50], 2, A),
    ]
    assert dedup(sources) == {1: 10, 2: 22, 4: 40, 5: 50, 6: 61}


def test_the_winner_is_decided_before_the_filter() -> None:
    # key 2's newest version (v=1) fails v > 15: its older v=20 must not show instead
    sources = [base([1, 2], [10, 20]), source([2, 1], [1, 30], 1, A)]
    assert dedup(sources, "v > 15") == {1: 30}
    assert dedup(sources, "v < 15") == {2: 1}


def test_generations_of_different_regions_do_not_mask_each_other() -> None:
    sources = [base([10, 11], [0, 0]),
               source([10], [5], 5, A), source([10], [4], 4, A),
               source([11], [1], 1, B)]
    assert dedup(sources) == {10: 5, 11: 1}


def test_dedup_streams_and_refuses_inputs_without_keys() -> None:
    big = base(list(range(50_000)), list(range(50_000)))
    newer = source([7], [-7], 1, A)
    node = DeduplicateExec(UnionExec([ScanExec(big, SCHEMA), ScanExec(newer, SCHEMA)]),
                           ["id"])
    batches = list(node.execute())
    assert len(batches) > 1  # one per input batch: nothing collected whole
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 50_000
    assert table.filter(pa.compute.equal(table["id"], 7))["v"].to_pylist() == [-7]
    no_keys = pa.schema([pa.field("v", pa.int64())])
    with pytest.raises(InvalidInputError, match="id"):
        DeduplicateExec(ScanExec(big, no_keys), ["id"])


def test_scan_exec_adds_source_columns_and_filters_on_them() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field(GEN, pa.int64()),
                        pa.field(REGION, pa.string())])
    s = source([1, 2], [3, 4], 7, A)
    rows = ScanExec(s, schema, parse_predicate("_gen = 7 AND id > 1")).to_table()
    assert rows.to_pylist() == [{"id": 2, GEN: 7, REGION: str(A)}]
    assert ScanExec(s, schema, parse_predicate("_gen = 6")).to_table().num_rows == 0
    assert "ScanExec: region_aaaaaaaa[gen=7]" in ScanExec(s, schema).describe()


def test_key_sets_confirm_hash_matches() -> None:
    stored = [pa.array(["a", "b", "c"]), pa.array([1, 2, 3], pa.int32())]
    ks = KeySet(stored)
    query = [pa.array(["b", "b", "z", "c"]), pa.array([2, 3, 1, 3], pa.int32())]
    assert ks.find(query).tolist() == [1, -1, -1, 2]
    ints = KeySet([pa.array([5, -1, 9], pa.int64())])
    assert ints.contains([pa.array([9, 4, -1], pa.int64())]).tolist() == [True, False, True]
    pos = latest_positions([pa.array([1, 2, 1, 1])], np.array([1, 2, 9, 3], np.uint64))
    assert sorted(pos.tolist()) == [1, 2]


LOOKUP = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()),
                    pa.field("_rowaddr", pa.uint64()), pa.field("_tombstone", pa.bool_()),
                    pa.field(GEN, pa.int64()), pa.field(REGION, pa.string()),
                    pa.field("_key", pa.int64())])


def lookup_plan(keys: list[int]) -> tuple[CoalesceFirstExec, list]:
    gen2 = source([1, 4], [12, None], 2, A, [False, True])
    gen1 = source([1, 2, 4], [11, 21, 41], 1, A)
    b = base([1, 2, 3, 4], [10, 20, 30, 40])
    takes = [TakeLastExec(s, LOOKUP) for s in (gen2, gen1, b)]
    guards = [BloomFilterGuardExec(gen2, takes[0]), BloomFilterGuardExec(gen1, takes[1])]
    keys_table = Keys(pa.table({"id": pa.array(keys, pa.int64())}))
    return CoalesceFirstExec([*guards, takes[2]], keys_table), takes


def test_point_lookups_short_circuit_newest_first() -> None:
    plan, takes = lookup_plan([1])
    assert plan.to_table().select(["id", "v", GEN]).to_pylist() == [
        {"id": 1, "v": 12, GEN: 2}]
    assert [t.runs for t in takes] == [1, 0, 0] and plan.evaluated == 1
    plan, takes = lookup_plan([4])  # a tombstone in gen 2 resolves the key: deleted
    assert plan.to_table().num_rows == 0 and [t.runs for t in takes] == [1, 0, 0]
    plan, takes = lookup_plan([3, 2, 1, 99])
    got = plan.to_table().select(["id", "v"]).to_pylist()
    assert got == [{"id": 3, "v": 30}, {"id": 2, "v": 21}, {"id": 1, "v": 12}]


def test_bloom_guard_skips_a_generation_without_the_key() -> None:
    gen = source(list(range(100)), list(range(100)), 1, A)
    take = TakeLastExec(gen, LOOKUP)
    guard = BloomFilterGuardExec(gen, take)
    absent = Keys(pa.table({"id": pa.array([10_000_000], pa.int64())}))
    assert list(guard.execute(absent)) == [] and take.runs == 0 and guard.skipped == 1
    present = Keys(pa.table({"id": pa.array([5], pa.int64())}))
    assert pa.Table.from_batches(list(guard.execute(present)))["v"].to_pylist() == [5]
    assert guard.describe() == "BloomFilterGuardExec: bf[region_aaaaaaaa][gen=1]"


VEC = pa.list_(pa.float32(), 2)


def vec_source(ids: list[int], vecs: list, gen: int, region: uuid.UUID | None
               ) -> InMemorySource:
    table = pa.table({"id": pa.array(ids, pa.int64()), "e": pa.array(vecs, VEC),
                      "_tombstone": pa.array([v is None for v in vecs])})
    return InMemorySource(table, gen, region, None, ["id"])


KNN_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("e", VEC),
                        pa.field("_rowaddr", pa.uint64()), pa.field(GEN, pa.int64()),
                        pa.field(REGION, pa.string()), pa.field(DISTANCE, pa.float32())])


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_knn_is_exact_top_k(metric: str) -> None:
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(500, 2)).astype(np.float32)
    s = vec_source(list(range(500)), vecs.tolist(), -1, None)
    q = np.array([0.3, -0.2])
    node = KNNExec(s, KNN_SCHEMA, "e", q, 7, metric)
    got = node.to_table()
    want = np.argsort(distances(vecs.astype(np.float64), q, metric), kind="stable")[:7]
    assert sorted(got["id"].to_pylist()) == sorted(want.tolist())
    with pytest.raises(InvalidInputError, match="metric"):
        KNNExec(s, KNN_SCHEMA, "e", q, 7, "hamming")


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
@pytest.mark.parametrize("exact", [False, True])
def test_knn_checks_only_near_rows_for_staleness_with_the_same_result(
        metric: str, exact: bool) -> None:
    """Distances first: only rows that can still enter the top k are checked for
    staleness (nearest first, in growing chunks); the result equals checking every row
    and then taking the k nearest live ones."""
    rng = np.random.default_rng(5)
    n = 20_000
    vecs = rng.normal(size=(n, 2)).astype(np.float32)
    b = vec_source(list(range(n)), vecs.tolist(), -1, None)
    q = np.array([0.2, 0.1])
    # (the query is compared as the column stores it: rounded to float32)
    d = distances(vecs.astype(np.float64), q.astype(np.float32).astype(np.float64),
                  metric).astype(np.float32)
    # a newer generation holds the 40 keys nearest the query (stale in the base) and
    # 500 others, all moved far away
    moved = np.unique(np.concatenate([np.argsort(d, kind="stable")[:40],
                                      rng.choice(n, 500, replace=False)]))
    g1 = vec_source(moved.tolist(), (rng.normal(size=(moved.size, 2)) + 50).tolist(), 1, A)
    node = KNNExec(b, KNN_SCHEMA, "e", q, 10, metric,
                   stale=StaleCheck([b, g1], ["id"], [pa.int64()], exact=exact))
    got = node.to_table()
    every = ScanExec(b, pa.schema([f for f in KNN_SCHEMA if f.name != DISTANCE])).to_table()
    live = StaleCheck([b, g1], ["id"], [pa.int64()], exact=exact).keep(b, every)
    assert not live[np.argsort(d, kind="stable")[:40]].any()
    ids = every["id"].to_numpy()[live]
    want = ids[np.argsort(d[live], kind="stable")[:10]]
    assert sorted(got["id"].to_pylist()) == sorted(want.tolist())
    assert sorted(got[DISTANCE].to_pylist()) == sorted(d[want].tolist())
    assert node.rows_scanned == n and node.rows_checked < n // 20


def test_filter_stale_drops_candidates_a_newer_generation_holds() -> None:
    b = vec_source([1, 2, 3], [[0, 0], [0, 1], [5, 5]], -1, None)
    g1 = vec_source([2, 3], [[9, 9], None], 1, A)  # key 2 moved away, key 3 deleted
    knns = [KNNExec(s, KNN_SCHEMA, "e", np.zeros(2), 3) for s in (b, g1)]
    for exact in (False, True):
        check = StaleCheck([b, g1], ["id"], [pa.int64()], exact=exact)
        stale = FilterStaleExec(UnionExec(knns), check)
        top = GlobalLimitExec(SortExec(stale, DISTANCE), 2)
        assert top.to_table()["id"].to_pylist() == [1, 2]
        assert top.to_table()[GEN].to_pylist() == [-1, 1]
    check = StaleCheck([b, g1], ["id"], [pa.int64()])
    text = format_plan(GlobalLimitExec(SortExec(FilterStaleExec(UnionExec(knns), check),
                                                DISTANCE), 2))
    assert text.splitlines() == [
        "GlobalLimitExec: limit=2",
        "  SortExec: order_by=[_distance ASC]",
        "    FilterStaleExec: bloom_filters=[bf[region_aaaaaaaa][gen=1]]",
        "      UnionExec",
        "        KNNExec: base_table[gen=-1], k=3, metric=l2",
        "        KNNExec: region_aaaaaaaa[gen=1], k=3, metric=l2",
    ]


def test_global_limit_stops_reading_its_input() -> None:
    pulled = []

    class Counting(ScanExec):
        def execute(self):
            for batch in super().execute():
                pulled.append(batch.num_rows)
                yield batch

    table = pa.table({"id": pa.array(range(30_000), pa.int64()),
                      "v": pa.array(range(30_000), pa.int64())})
    s = InMemorySource(table, -1, None, None, ["id"])
    node = Counting(s, SCHEMA)
    node.source.table = node.source.table.combine_chunks()
    got = GlobalLimitExec(node, 5).to_table()
    assert got.num_rows == 5 and len(pulled) == 1


def test_stale_rows_never_crowd_live_ones_out_of_the_top_k() -> None:
    # the base's two nearest rows are both stale; with the check inside KNNExec the
    # next live ones still fill k
    b = vec_source([1, 2, 3, 4], [[0, 0], [0, 0.1], [3, 3], [4, 4]], -1, None)
    g1 = vec_source([1, 2], [[9, 9], [9, 9]], 1, A)
    for exact in (False, True):
        check = StaleCheck([b, g1], ["id"], [pa.int64()], exact=exact)
        knns = [KNNExec(s, KNN_SCHEMA, "e", np.zeros(2), 2, stale=check) for s in (b, g1)]
        top = GlobalLimitExec(SortExec(FilterStaleExec(UnionExec(knns), check), DISTANCE), 2)
        assert top.to_table()["id"].to_pylist() == [3, 4]


def test_a_key_put_again_or_deleted_in_its_own_generation_is_stale_in_search() -> None:
    # generation 1 holds key 1 put twice (the later row far away) and key 2 put then
    # deleted: only key 1's later row is live there, in both modes
    b = vec_source([3], [[5, 5]], -1, None)
    g1 = vec_source([1, 2, 1, 2], [[0, 0], [0, 0.1], [8, 8], None], 1, A)
    for exact in (False, True):
        check = StaleCheck([b, g1], ["id"], [pa.int64()], exact=exact)
        knns = [KNNExec(s, KNN_SCHEMA, "e", np.zeros(2), 3, stale=check) for s in (b, g1)]
        top = GlobalLimitExec(SortExec(FilterStaleExec(UnionExec(knns), check), DISTANCE), 3)
        got = top.to_table()
        assert got["id"].to_pylist() == [3, 1]
        assert got[DISTANCE].to_pylist() == [50.0, 128.0]


@pytest.mark.parametrize("span", [100, 2**40])  # a dense membership map, and a search
def test_key_set_membership_matches_a_python_set(span: int) -> None:
    rng = np.random.default_rng(span % 97)
    stored = rng.integers(-span, span, 500)
    probe = np.concatenate([rng.choice(stored, 300), rng.integers(-span, span, 300)])
    ks = KeySet([pa.array(stored, pa.int64())])
    want = np.isin(probe, stored)
    assert ks.contains([pa.array(probe, pa.int64())]).tolist() == want.tolist()
    found = ks.find([pa.array(probe, pa.int64())])
    assert (found >= 0).tolist() == want.tolist()
    assert np.array_equal(stored[found[found >= 0]], probe[found >= 0])
    words = [f"k{v}" for v in stored]
    sk = KeySet([pa.array(words)])
    assert sk.contains([pa.array([f"k{v}" for v in probe])]).tolist() == want.tolist()


def test_latest_positions_tell_null_keys_apart_unless_asked() -> None:
    keys = [pa.array(["a", None, "a", None, "b"]), pa.array([1, 2, 1, 2, None])]
    rowaddr = np.array([4, 1, 7, 3, 0], np.uint64)
    # SQL's =: every key holding a null is a key of its own
    assert sorted(latest_positions(keys, rowaddr).tolist()) == [1, 2, 3, 4]
    # nulls equal (the merger's rule): (None, 2) twice is one key, its newest row wins
    assert sorted(latest_positions(keys, rowaddr, nulls_equal=True).tolist()) == [2, 3, 4]
    floats = [pa.array([float("nan"), float("nan"), -0.0, 0.0])]  # told apart by their bits
    assert sorted(latest_positions(floats, np.array([1, 2, 3, 4], np.uint64)).tolist()) \
        == [1, 2, 3]
