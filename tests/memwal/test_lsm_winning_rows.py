"""LSM scans read each newer source's winning rows from the runtime's cache
(``NewestRows.winning_rows``, kind ``lsm_winning_rows``; a pushed filter applied to them)
instead of filtering its rows batch by batch: the fast path is taken (cache misses then hits, the
``newer_rows_left_out`` metric), and every row equals the general path's (the winners
decided per batch, forced by turning the fast path off) as the sources change."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from test_lsm_hidden import SCHEMA, rows  # the same rows (nulls, strings, 7 categories)

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal, RoutingWriter
from lance_sql.memwal.read import nodes
from lance_sql.memwal.read.nodes import DeduplicateExec, ScanExec
from lance_sql.table.runtime.context import current_runtime

_names = itertools.count()
KIND = "lsm_winning_rows"


@pytest.fixture
def lsm() -> Iterator[tuple[MemWal, RoutingWriter]]:
    """A base of 600 rows in fragments of 200 (some deleted), 3 regions, two flushed
    generations (updates, new keys, deletes, a key put twice) and a MemTable holding
    updates, a key put twice and a delete."""
    name = f"lsm-winning{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    ds = lance_sql.write_dataset(rows(np.arange(600), "base"), uri, max_rows_per_file=200)
    ds.delete("id % 17 = 0")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(rows(np.arange(0, 120, 3), "g1"))
        writer.put(rows([5, 6, 700, 701], "g1b"))
        writer.delete(pa.table({"id": pa.array([9, 12, 702], pa.int64())}))
        writer.flush_memtable()
        writer.put(rows(np.arange(60, 200, 4), "g2"))
        writer.put(rows([5, 703], "g2b"))
        writer.flush_memtable()
        writer.put(rows([1, 2, 3, 60, 704, 5], "mem"))
        writer.put(rows([2, 705], "mem2"))
        writer.delete(pa.table({"id": pa.array([64, 4], pa.int64())}))
        yield MemWal(lance_sql.dataset(uri)), writer
    finally:
        writer.close()


def general(mw: MemWal, columns=None, filter=None) -> pa.Table:
    """The scan on the general path: each newer source read and its winners kept per
    batch (the fast path turned off)."""
    fast = nodes.NewestRows.winning_rows
    nodes.NewestRows.winning_rows = lambda self, source, names: None  # type: ignore
    try:
        return mw.scanner(columns, filter).to_table()
    finally:
        nodes.NewestRows.winning_rows = fast  # type: ignore


def by_key(table: pa.Table) -> list[dict]:
    assert len(set(table["id"].to_pylist())) == table.num_rows  # no key twice
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def stats():
    return current_runtime().cache.stats()[KIND]


CASES = [
    (None, None),
    (["id", "v"], None),
    (["v", "s"], None),  # the key not projected
    (["id", "s", "_gen", "_region", "_rowaddr"], None),
    (["id", "cat", "_gen"], "_gen >= 1"),  # on source columns only: nothing pushed
    (["id", "v", "_rowaddr"], "_gen = -1 OR _rowaddr < 40"),
]


@pytest.mark.parametrize("columns, filter", CASES)
def test_fast_path_is_taken_and_equals_the_general_path(lsm, columns, filter) -> None:
    mw, _ = lsm
    want = general(mw, columns, filter)
    before = stats()
    cold = mw.scanner(columns, filter).to_table()
    after_cold = stats()
    assert after_cold.misses > before.misses  # built on first use
    warm = mw.scanner(columns, filter).to_table()
    after_warm = stats()
    assert after_warm.misses == after_cold.misses and after_warm.hits > after_cold.hits
    for got in (cold, warm):
        assert got.schema == want.schema
        if columns is not None and "id" not in columns:  # compared as sorted rows
            key = [(n, "ascending") for n in got.column_names]
            assert got.sort_by(key).equals(want.sort_by(key))
        else:
            assert by_key(got) == by_key(want)


def test_the_newer_scans_read_winners_only(lsm) -> None:
    mw, _ = lsm
    plan = mw.scanner().plan
    out = plan.to_table()
    (dedup,) = [n for n in _walk(plan.root) if isinstance(n, DeduplicateExec)]
    newer = [n for n in _walk(plan.root)
             if isinstance(n, ScanExec) and not n.source.is_base]
    assert len(newer) >= 6  # 3 regions: two generations and a MemTable each (most)
    held = sum(s.source.held_rows().num_rows for s in newer)
    read = sum(s.metrics.output_rows for s in newer)
    left_out = dedup.metrics.get("newer_rows_left_out")
    # older versions (puts of a key twice, updates across generations) and tombstones
    assert left_out > 0 and read + left_out == held
    # no newer row is dropped after its scan: the base rows are all the dedup dropped
    base = next(n for n in _walk(plan.root) if isinstance(n, ScanExec) and n.source.is_base)
    assert dedup.metrics.get("rows_dropped") <= base.metrics.output_rows
    assert by_key(out) == by_key(general(mw))


FILTERED = [
    (None, "cat = 3"),
    (["id", "v"], "s LIKE 'g1%'"),  # the filter's column not projected
    (["v", "s"], "v IS NULL"),  # nulls; the key not projected
    (["id", "s", "_gen", "_rowaddr"], "s LIKE 'g%' AND cat > 1"),
    (None, "v > 100 OR s = 'mem-60'"),
    (["id", "cat", "_gen"], "cat = 2 AND _gen >= 1"),  # pushed and applied after
]


@pytest.mark.parametrize("columns, filter", FILTERED)
def test_a_filter_pushed_into_the_sources_filters_their_winners(lsm, columns, filter) -> None:
    """A newer source scanned with a pushed filter reads its cached winners and filters
    them (together with the other sources' of the same columns): the newest row of a key
    is decided before the filter, as on the general path, which filters the source's
    rows and keeps the winners among them."""
    mw, _ = lsm
    want = general(mw, columns, filter)
    before = stats()
    together = nodes.READ_TOGETHER[0]
    cold = mw.scanner(columns, filter).to_table()
    # the sources sharing a filter and columns read as one (not those applying a filter
    # on their own columns after it, _gen here)
    assert (nodes.READ_TOGETHER[0] > together) == ("_gen" not in filter)
    after_cold = stats()
    assert after_cold.misses > before.misses
    warm = mw.scanner(columns, filter).to_table()
    after_warm = stats()
    assert after_warm.misses == after_cold.misses and after_warm.hits > after_cold.hits
    assert want.num_rows
    for got in (cold, warm):
        assert got.schema == want.schema
        key = [(n, "ascending") for n in got.column_names]
        assert got.sort_by(key).equals(want.sort_by(key))


def test_a_key_whose_newest_row_fails_the_filter_is_not_read_from_an_older_one(lsm) -> None:
    mw, _ = lsm
    got = mw.scanner(["id", "s"], "s LIKE 'g1%'").to_table()
    found = {r["id"]: r["s"] for r in got.to_pylist()}
    assert found[15] == "g1-15" and found[6] == "g1b-6"  # newest in the first generation
    # 72: put again in the second generation; 60, 3: in the MemTable; 9: deleted in
    # the first generation after its put; 5: put again in the second generation
    assert not {72, 60, 3, 9, 5} & set(found)
    assert all(s.startswith("g1") for s in found.values())
    # with a limit: rows of the same answer
    limited = mw.scanner(["id", "s"], "s LIKE 'g1%'", limit=4).to_table()
    assert limited.num_rows == 4
    assert all(found[r["id"]] == r["s"] for r in limited.to_pylist())


def test_winners_follow_the_sources_as_they_change(lsm) -> None:
    mw, writer = lsm
    assert by_key(mw.scanner().to_table()) == by_key(general(mw))
    warm = stats()
    # one key put: only its region's MemTable changes; the other regions' winning rows
    # still come from the cache, its region's are worked out again
    writer.put(rows([3], "again"))
    got = mw.scanner().to_table()
    after = stats()
    assert after.misses > warm.misses and after.hits > warm.hits
    assert by_key(got) == by_key(general(mw))
    assert next(r for r in got.to_pylist() if r["id"] == 3)["s"] == "again-3"
    # a generation's rows hidden by later puts and deletes of the MemTable
    writer.put(rows([0, 66, 800], "late"))
    writer.delete(pa.table({"id": pa.array([6, 700], pa.int64())}))
    got = mw.scanner().to_table()
    assert by_key(got) == by_key(general(mw))
    ids = set(got["id"].to_pylist())
    assert {0, 66, 800} <= ids and not {6, 700} & ids
    writer.flush_memtable()  # the MemTable becomes a generation
    assert by_key(mw.scanner().to_table()) == by_key(general(mw))
    writer.put(rows([66, 801], "newest"))
    got = mw.scanner().to_table()
    assert by_key(got) == by_key(general(mw))
    assert next(r for r in got.to_pylist() if r["id"] == 66)["s"] == "newest-66"


def test_threads_scanning_at_once_see_the_same_rows(lsm) -> None:
    mw, _ = lsm
    want = by_key(general(mw))
    current_runtime().cache.clear(KIND)
    got: list[list[dict]] = []
    errors: list[BaseException] = []

    def scan() -> None:
        try:
            for _ in range(3):
                got.append(by_key(mw.scanner().to_table()))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 12 and all(g == want for g in got)


def _walk(node) -> Iterator:
    yield node
    for child in node.children:
        yield from _walk(child)


def test_conform_hands_back_a_batch_already_of_the_schema() -> None:
    from lance_sql.memwal.read.nodes import conform

    batch = rows([1, 2], "c").to_batches()[0]
    assert conform(batch, batch.schema) is batch  # no new batch made
    # field metadata, nullability, order, types and missing columns still conform
    plain = pa.schema([pa.field("id", pa.int64(), nullable=False), *list(SCHEMA)[1:]])
    out = conform(batch, plain)
    assert out is not batch and out.schema.equals(plain, check_metadata=True)
    wanted = pa.schema([pa.field("s", pa.string()), pa.field("id", pa.int32()),
                        pa.field("x", pa.float32())])
    out = conform(batch, wanted)
    assert out.schema == wanted and out.to_pydict() == {
        "s": ["c-1", "c-2"], "id": [1, 2], "x": [None, None]}
