"""LSM scans that find the base rows newer sources hide through the base's key index and
leave them out inside the base scan (memwal/read/hidden.py), with their caches: checked
against the same writes on a table without the index (the key-comparing general path)
and against a last-write-wins model as the sources change (a MemTable grows, a
generation is flushed, merged, collected)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.expr.arrow import parse_predicate
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import hidden as hidden_module
from lance_sql.memwal.read import unindexed
from lance_sql.memwal.read.hidden import hidden_base_rows
from lance_sql.memwal.read.keys import Keys
from lance_sql.memwal.read.sources import (
    BaseSource,
    GenerationSource,
    _LanceSource,
    lance_scanner,
)
from lance_sql.table.read.scan import scan_fragment
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("cat", pa.int32()),
                    pa.field("s", pa.string())])
_names = itertools.count()
FILTERS = [None, "cat = 3", "v > 500", "s LIKE 'g1%'", "v IS NULL", "id < 300",
           "id IN (1, 2, 3, 400, 1005)", "cat = 3 AND id > 100",
           "_gen = -1 OR _rowaddr < 40", "_gen > 0 OR id < 30", "_gen = -1 AND id > 990"]


def rows(ids, tag: str) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": ids,
                     "v": pa.array([None if i % 10 == 0 else float(i) + len(tag)
                                    for i in ids.tolist()], pa.float64()),
                     "cat": pa.array((ids % 7).astype(np.int32)),
                     "s": pa.array([f"{tag}-{i}" for i in ids.tolist()])}, schema=SCHEMA)


def build(indexed: bool, partial_index: bool = False) -> tuple[MemWal, object]:
    """The same writes, with or without a BTREE index on the key: a base of several
    fragments with deletions, two flushed generations (updates, new keys, deletes) and
    a MemTable."""
    name = f"lsm-hidden{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    ds = lance_sql.write_dataset(rows(np.arange(1000), "base"), uri, max_rows_per_file=300)
    ds.delete("id % 13 = 0")
    if indexed:
        ds.create_scalar_index("id", "BTREE")
    if partial_index:  # a fragment the index does not cover
        ds = lance_sql.write_dataset(rows(np.arange(1000, 1100), "late"), uri, mode="append")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(rows([*range(0, 200, 3), *range(1200, 1230), 1050], "g1"))
    writer.delete(pa.table({"id": pa.array([5, 7, 1001, 1210], pa.int64())}))
    writer.flush_memtable()
    writer.put(rows([*range(0, 400, 5), 7, 1210], "g2"))
    writer.flush_memtable()
    writer.put(rows([*range(1, 300, 4), 2000], "mt"))
    writer.delete(pa.table({"id": pa.array([10, 11, 1002], pa.int64())}))
    return mw, writer


def sorted_table(table: pa.Table) -> pa.Table:
    return table.sort_by("id") if "id" in table.column_names else table


# (no tail: the fallback warns that the index lags, IndexFallbackWarning)
@pytest.mark.filterwarnings("ignore::lance_sql.errors.IndexFallbackWarning")
@pytest.mark.parametrize(("partial_index", "tail"), [(False, True), (True, True),
                                                     (True, False)])
def test_scans_through_the_key_index_equal_the_general_path(partial_index: bool, tail: bool,
                                                            monkeypatch) -> None:
    """A fragment the index misses is covered by the in-memory keys of the unindexed
    tail; without them (too many rows), the scan compares keys (the general path)."""
    if not tail:
        monkeypatch.setattr(unindexed, "MAX_TAIL_ROWS", 0)
    fast, fast_writer = build(True, partial_index)
    slow, slow_writer = build(False, partial_index)
    try:
        view = fast.view()
        sources = view.sources(view.regions(None))
        hidden = hidden_base_rows(sources[0], sources)
        assert hidden is not None and sum(len(r) for r in hidden.rows.values())
        fragments = {f.id for f in fast.dataset.manifest.fragments}
        assert (hidden.covered == fragments) == tail
        assert hidden_base_rows(BaseSource(slow.dataset, ["id"]), sources) is None
        for filter in FILTERS:
            for columns in (None, ["s", "id"], ["id", "_gen"], ["id", "_rowaddr"], ["cat"],
                            []):
                want = sorted_table(slow.scanner(columns=columns, filter=filter).to_table())
                got = sorted_table(fast.scanner(columns=columns, filter=filter).to_table())
                assert got.equals(want), (filter, columns)
                assert got.num_rows == want.num_rows
            assert (fast.scanner(filter=filter).count_rows()
                    == slow.scanner(filter=filter).count_rows())
        keys = pa.table({"id": pa.array([0, 1, 2, 5, 10, 13, 99, 1000, 1050, 1210, 2000,
                                         5000], pa.int64())})
        assert fast.get(keys).equals(slow.get(keys))
    finally:
        fast_writer.close()
        slow_writer.close()


def test_cached_results_follow_every_change_of_the_sources() -> None:
    mw, writer = build(True)
    cache = current_runtime().cache
    try:
        model = {}
        for row in mw.scanner().to_table().to_pylist():
            model[row["id"]] = row
        assert len(model) == mw.scanner().count_rows()

        def check() -> None:
            table = mw.scanner().to_table()
            assert table.num_rows == len(model)  # no key twice
            assert {r["id"]: r for r in table.to_pylist()} == model
            want = {k: r for k, r in model.items() if r["cat"] == 3}
            table = mw.scanner(filter="cat = 3").to_table()
            assert table.num_rows == len(want)
            assert {r["id"]: r for r in table.to_pylist()} == want

        def put(ids, tag: str) -> None:
            table = rows(ids, tag)
            writer.put(table)
            for r in table.to_pylist():
                model[r["id"]] = r

        def delete(ids) -> None:
            writer.delete(pa.table({"id": pa.array(ids, pa.int64())}))
            for i in ids:
                model.pop(i, None)

        check()
        before = cache.stats()["lsm_winners"]
        check()  # nothing changed: the winners come from the cache
        after = cache.stats()["lsm_winners"]
        assert after.hits > before.hits and after.misses == before.misses
        put([600, 601, 1], "grown")  # the MemTable grows: base rows 600, 601 now hidden
        delete([602, 3])
        check()
        assert cache.stats()["lsm_winners"].misses > after.misses
        writer.flush_memtable()  # the MemTable becomes a generation
        check()
        put([603, 604], "next")
        check()
        writer.flush_memtable()
        put([0, 6, 605], "held")  # keys of merged generations, held by the MemTable
        check()
        mw.merge()  # a new base version: hidden rows looked up again
        ds = lance_sql.dataset(mw.dataset.uri)
        ds.create_scalar_index("id", "BTREE", replace=True)  # covers the merged rows
        mw = MemWal(lance_sql.dataset(mw.dataset.uri))
        check()
        lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
        assert mw.collect_garbage(grace=timedelta(0)).generations
        mw = MemWal(lance_sql.dataset(mw.dataset.uri))
        check()
        put([605, 600], "after")
        check()
    finally:
        writer.close()


@pytest.mark.parametrize("filter", [None, "cat = 3", "v > 100", "v IS NULL",
                                    "s LIKE 'g1-1%'", "id IN (3, 6, 1210)", "_rowaddr < 20",
                                    "_rowid < 20"])  # _rowid: not in memory, scanned
def test_generations_read_from_memory_equal_their_lance_scan(filter) -> None:
    mw, writer = build(True)
    try:
        view = mw.view()
        sources = [s for s in view.sources(view.regions(None))
                   if isinstance(s, GenerationSource)]
        assert len(sources) >= 4
        predicate = parse_predicate(filter) if filter else None
        columns = ["id", "v", "s", "_rowaddr", "_tombstone"]
        for source in sources:
            got = [r for b in source.scan(columns, predicate) for r in b.to_pylist()]
            want = [r for b in _LanceSource.scan(source, columns, predicate)
                    for r in b.to_pylist()]
            assert got == want
            keys = Keys(pa.table({"id": pa.array([0, 3, 6, 7, 1210, 999999], pa.int64())}))
            found = source.lookup(keys, ["v", "s"])
            rows = source.key_rows()
            hit = rows.key_set().find(keys.columns) >= 0
            taken = source.dataset.take_addresses(
                rows.rowaddr[rows.latest()[rows.key_set().find(keys.columns)[hit]]],
                ["id", "v", "s", "_rowaddr", "_tombstone"])
            assert found.select(taken.column_names).equals(taken)
        assert current_runtime().cache.stats()["generation_rows"].entries >= len(sources)
    finally:
        writer.close()


@pytest.mark.parametrize("partial_index", [False, True])
def test_pushed_comparisons_in_the_base_scan_equal_the_general_path(partial_index: bool
                                                                    ) -> None:
    """A filter pushed into the base scan that is a conjunction of comparisons (``cat =
    3`` with an int64 constant against the int32 column) is evaluated as comparisons
    (column first, then the other columns of matching rows only), hidden and deleted
    rows left out: the same rows and columns as the general (Acero) path."""
    mw, writer = build(True, partial_index)
    try:
        view = mw.view()
        sources = view.sources(view.regions(None))
        base = sources[0]
        assert isinstance(base, BaseSource)
        hidden = hidden_base_rows(base, sources)
        assert hidden is not None and hidden.rows
        ds = base.dataset
        checked = 0
        for text in ["cat = 3", "v > 500", "id < 300", "cat = 3 AND id > 100",
                     "v IS NULL", "cat != 2 AND v <= 700.5", "id = 1050"]:
            predicate = view._predicate(text)  # resolved as a scan resolves it
            for columns in (["id", "v", "cat", "s", "_rowaddr"], ["s"], ["_rowid", "cat"],
                            []):
                fast = lance_scanner(ds, columns, predicate, drop_rows=hidden.rows,
                                     use_index=False)
                assert fast.plan.comparisons is not None, text
                assert all(c.value is None or c.value.type.equals(
                    ds.schema.field(c.column).type) for c in fast.plan.comparisons)
                general = replace(fast.plan, comparisons=None)
                for fragment in ds.manifest.fragments:
                    drop = hidden.rows.get(fragment.id)
                    want = scan_fragment(ds.store, ds.manifest, fragment, general, drop=drop)
                    got = scan_fragment(ds.store, ds.manifest, fragment, fast.plan,
                                        drop=drop)
                    assert got.num_rows == want.num_rows, (text, columns)
                    assert got.equals(want), (text, columns)
                    checked += want.num_rows
        assert checked
    finally:
        writer.close()


def test_warm_scans_see_every_change_between_scans() -> None:
    """``mw.scanner()`` starts from the handle's warm view (strong reads of the latest
    version): after each change — a put, a delete, a flush, another handle's flush, a
    merge, a commit to the base, garbage collection — it returns what a cold view and
    the last-write-wins model return."""
    mw, writer = build(True)
    model = {r["id"]: r for r in mw.view().scan_plan().to_table().to_pylist()}

    def check() -> None:
        for filter in (None, "cat = 3"):
            warm = mw.scanner(filter=filter)
            assert warm.view.warm is not None  # the warm path was taken
            got = sorted_table(warm.to_table())
            assert got.equals(sorted_table(mw.view().scan_plan(filter=filter).to_table()))
            want = {k: r for k, r in model.items() if filter is None or r["cat"] == 3}
            assert {r["id"]: r for r in got.to_pylist()} == want
        assert mw.scanner().count_rows() == len(model)

    def put(w, ids, tag: str) -> None:
        table = rows(ids, tag)
        w.put(table)
        model.update({r["id"]: r for r in table.to_pylist()})

    try:
        check()
        check()  # warm and unchanged
        put(writer, [600, 601, 1, 3000], "p")
        check()
        writer.delete(pa.table({"id": pa.array([602, 1], pa.int64())}))
        model.pop(602, None)
        model.pop(1, None)
        check()
        writer.flush_memtable()
        check()
    finally:
        writer.close()
    other = MemWal(lance_sql.dataset(mw.dataset.uri))
    with other.writer() as w2:  # a newer manifest for the regions it writes
        put(w2, [600, 4, 3001], "o")
        check()
        w2.flush_memtable()
        check()
    mw.merge()  # a new base version
    check()
    lance_sql.dataset(mw.dataset.uri).delete("id = 17")  # a commit to the base
    model.pop(17, None)
    check()
    lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
    assert mw.collect_garbage(grace=timedelta(0)).generations
    check()



def test_a_memtable_of_many_puts_is_joined_once_per_snapshot(monkeypatch) -> None:
    joins = []
    join = hidden_module._memtable_rows
    monkeypatch.setattr(hidden_module, "_memtable_rows",
                        lambda pieces, *rest: joins.append(len(pieces)) or join(pieces, *rest))
    mw, writer = build(True)
    cache = current_runtime().cache
    newer = {*range(0, 200, 3), *range(1200, 1230), 1050, 5, 7, 1001, 1210,
             *range(0, 400, 5), *range(1, 300, 4), 2000, 10, 11, 1002}  # build()'s keys
    base = mw.dataset.scanner(columns=["id", "_rowaddr"]).to_table()
    id_at = dict(zip(base.column("_rowaddr").to_pylist(), base.column("id").to_pylist(),
                     strict=True))  # live base rows only

    def hidden_ids() -> set[int]:
        view = mw.view()
        sources = view.sources(view.regions(None))
        hidden = hidden_base_rows(sources[0], sources)
        assert hidden is not None
        addresses = [(f << 32) | int(r) for f, rows_ in hidden.rows.items()
                     for r in np.asarray(rows_).tolist()]
        return {id_at[a] for a in addresses if a in id_at}

    try:
        for start in range(400, 700, 10):  # thirty more pieces in the MemTable
            writer.put(rows(np.arange(start, start + 4), "many"))
            newer.update(range(start, start + 4))
        first = hidden_ids()
        assert first == newer & set(id_at.values())
        assert len(joins) == 3 and sum(joins) > 30  # the MemTables of three regions
        before = cache.stats()["base_rows_hidden"]
        assert hidden_ids() == first
        after = cache.stats()["base_rows_hidden"]
        assert after.misses == before.misses and len(joins) == 3  # joined once
        writer.put(rows([900, 901], "grown"))  # a new snapshot: joined again
        assert hidden_ids() == first | {900, 901}
        assert cache.stats()["base_rows_hidden"].misses > after.misses
        assert len(joins) > 3
    finally:
        writer.close()
