"""Reads of a MemWAL table whose base key index lags behind the merger (fragments merged
since the index was built): lookups and the LSM scan search those fragments' keys in
memory (memwal/read/unindexed.py) instead of scanning every base key, and answer as a
last-write-wins model does, as an index-free twin does, and as after ``optimize_indices``."""

from __future__ import annotations

import itertools
import threading
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import IndexFallbackWarning
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import sources, unindexed
from lance_sql.memwal.read.hidden import hidden_base_rows
from lance_sql.memwal.read.sources import BaseSource
from lance_sql.memwal.read.unindexed import UnindexedKeys, unindexed_keys

PK = {"lance-schema:unenforced-primary-key": "true"}
_names = itertools.count()


def schema(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("id", key_type, nullable=False, metadata=PK),
                      pa.field("v", pa.int64()), pa.field("s", pa.string())])


def key_of(key_type: pa.DataType, ids) -> pa.Array:
    ids = np.asarray(ids, np.int64)
    if pa.types.is_string(key_type):
        return pa.array([f"k{i:05d}" for i in ids.tolist()], key_type)
    return pa.array(ids, key_type)


def rows(key_type: pa.DataType, ids, tag: int) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": key_of(key_type, ids), "v": ids * 10 + tag,
                     "s": pa.array([f"t{tag}-{i}" for i in ids.tolist()])},
                    schema=schema(key_type))


def build(key_type: pa.DataType, indexed: bool = True):
    """A base of 600 keys with a key index, then rounds of puts (updates, new keys,
    deletes) flushed and merged (each merge a fragment the index misses, and deletions
    in indexed and merged fragments), then two flushed generations left unmerged and a
    MemTable. Returns the handle, its writer and the model (key -> v)."""
    name = f"lsm-unindexed{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    model: dict[int, int] = {}
    base = np.arange(600)
    ds = lance_sql.write_dataset(rows(key_type, base, 0), uri, max_rows_per_file=200)
    model.update({int(i): int(i) * 10 for i in base})
    if indexed:
        ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    rng = np.random.default_rng(7)
    fresh = 1000
    for tag in range(1, 7):
        ids = np.unique(np.concatenate([rng.choice(fresh, 40, replace=False),
                                        np.arange(fresh, fresh + 15)]))
        fresh += 15
        writer.put(rows(key_type, ids, tag))
        model.update({int(i): int(i) * 10 + tag for i in ids})
        gone = rng.choice(fresh, 5, replace=False)
        writer.delete(pa.table({"id": key_of(key_type, gone)}))
        for i in gone:
            model.pop(int(i), None)
        writer.flush_memtable()
        if tag <= 4:
            mw.merge()
    held = rng.choice(fresh, 30, replace=False)
    writer.put(rows(key_type, held, 9))
    model.update({int(i): int(i) * 10 + 9 for i in held})
    return mw, writer, model


def as_model(table: pa.Table) -> dict[int, int]:
    ids = [int(str(k).lstrip("k")) for k in table.column("id").to_pylist()]
    assert len(ids) == len(set(ids)), "a key read twice"
    return dict(zip(ids, table.column("v").to_pylist(), strict=True))


@pytest.mark.parametrize("key_type", [pa.int64(), pa.int32(), pa.string()])
def test_reads_with_a_lagging_index_equal_the_model(key_type: pa.DataType) -> None:
    mw, writer, model = build(key_type)
    try:
        ds = lance_sql.dataset(mw.dataset.uri)
        index_fragments = next(i for i in ds.list_indices() if i["type"] == "BTree")
        assert len(index_fragments["fragment_ids"]) < len(ds.get_fragments())
        builds = unindexed.BLOCK_BUILDS[0]
        assert as_model(mw.scanner().to_table()) == model
        assert unindexed.BLOCK_BUILDS[0] > builds
        view = mw.view()
        found = view.sources(view.regions(None))
        hidden = hidden_base_rows(found[0], found)
        assert hidden is not None
        assert hidden.covered == {f.id for f in ds.manifest.fragments}
        # every base row left is a winner: no key compared in the base scan
        assert "rows_dropped" not in mw.scanner().explain(analyze=True).split("ScanExec")[0]
        assert as_model(mw.scanner(filter="v % 3 = 0").to_table()) == {
            k: v for k, v in model.items() if v % 3 == 0}
        assert mw.scanner().count_rows() == len(model)
        rng = np.random.default_rng(3)
        asked = [0, 5, 599, 1000, 1010, 1089, 5000, *rng.choice(1100, 40).tolist()]
        takes = sources.UNINDEXED_TAKES[0]
        for n in (1, 3, len(asked)):
            keys = key_of(key_type, asked[:n])
            got = as_model(mw.get(pa.table({"id": keys})))
            assert got == {int(k): model[int(k)] for k in asked[:n] if int(k) in model}
        assert sources.UNINDEXED_TAKES[0] > takes
        session = lance_sql.connect()
        session.register("t", ds.uri)
        literal = (lambda k: f"'k{k:05d}'") if pa.types.is_string(key_type) else str
        for k in asked[:8]:
            got = as_model(session.sql(f"SELECT * FROM t WHERE id = {literal(k)}")
                           .to_arrow_table())
            assert got == ({k: model[k]} if k in model else {})
        listed = ", ".join(literal(k) for k in asked)
        got = as_model(session.sql(f"SELECT * FROM t WHERE id IN ({listed})").to_arrow_table())
        assert got == {k: model[k] for k in asked if k in model}
        # the index caught up: the same answers from the index alone
        ds.optimize.optimize_indices()
        caught_up = MemWal(lance_sql.dataset(ds.uri))
        builds = unindexed.BLOCK_BUILDS[0]
        assert as_model(caught_up.scanner().to_table()) == model
        keys = key_of(key_type, asked)
        assert as_model(caught_up.get(pa.table({"id": keys}))) == {
            k: model[k] for k in asked if k in model}
        assert unindexed.BLOCK_BUILDS[0] == builds
    finally:
        writer.close()


def test_a_key_held_twice_in_the_tail_reads_as_without_the_index() -> None:
    """An append that repeats base keys after the index was built (two rows of key 3 in
    one fragment, one more elsewhere): the tail finds every row of a key, and reads keep
    the key's newest, as on a table without the index."""
    answers = []
    for indexed in (True, False):
        mw, writer, model = build(pa.int64(), indexed)
        try:
            uri = mw.dataset.uri
            lance_sql.write_dataset(rows(pa.int64(), [3, 3, 1003], 50), uri, mode="append")
            lance_sql.write_dataset(rows(pa.int64(), [3, 4], 51), uri, mode="append")
            mw = MemWal(lance_sql.dataset(uri))
            keys = pa.table({"id": pa.array([3, 4, 1003], pa.int64())})
            answers.append((mw.scanner().to_table().sort_by("id"),
                            mw.get(keys).sort_by("id")))
            if indexed:
                view = mw.view()
                found = view.sources(view.regions(None))
                hidden = hidden_base_rows(found[0], found)
                assert hidden is not None
                assert hidden.covered == {f.id for f in mw.dataset.manifest.fragments}
        finally:
            writer.close()
    assert answers[0][0].equals(answers[1][0])
    assert answers[0][1].equals(answers[1][1])


def test_the_tail_finds_every_row_of_a_key_and_refuses_keys_of_another_range() -> None:
    name = f"lsm-unindexed{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    ds = lance_sql.write_dataset(rows(pa.int32(), np.arange(100), 0), uri)
    ds.create_scalar_index("id", "BTREE")
    ds = lance_sql.write_dataset(rows(pa.int32(), np.arange(100, 150), 1), uri, mode="append")
    ds.delete("id = 120 OR id = 5")
    ds = lance_sql.dataset(uri)
    indexed = frozenset({ds.manifest.fragments[0].id})
    tail = unindexed_keys(ds, "id", indexed)
    assert isinstance(tail, UnindexedKeys)
    late = ds.manifest.fragments[1].id
    assert tail.fragment_ids == {late}
    found = tail.rows(pa.array([101, 120, 149, 5, 7], pa.int64()))
    # deleted rows too (120): the callers leave them out as they do the index's
    assert found is not None and found[late].tolist() == [1, 20, 49]
    assert tail.addresses(pa.array([149, 149], pa.int64())).tolist() == [(late << 32) | 49]
    assert tail.rows(pa.array([2**40], pa.int64())) is None  # no int32 holds it
    assert unindexed_keys(ds, "id", frozenset(f.id for f in ds.manifest.fragments)) is None
    # blocks are kept: a second call, or one of a later version that changes nothing
    # of the tail's fragments, sorts nothing; a new fragment re-sorts its block only
    builds, reads = unindexed.BLOCK_BUILDS[0], unindexed.FRAGMENT_READS[0]
    assert unindexed_keys(ds, "id", indexed).blocks == tail.blocks
    ds.delete("id = 130")
    ds = lance_sql.dataset(uri)
    assert unindexed_keys(ds, "id", indexed).blocks == tail.blocks
    assert unindexed.BLOCK_BUILDS[0] == builds
    ds = lance_sql.write_dataset(rows(pa.int32(), [150, 151], 2), uri, mode="append")
    again = unindexed_keys(ds, "id", indexed)
    assert again is not None and len(again.blocks) == 1 and again.blocks != tail.blocks
    assert unindexed.BLOCK_BUILDS[0] == builds + 1
    assert unindexed.FRAGMENT_READS[0] == reads + 1  # the new fragment only
    assert again.rows(pa.array([151, 101], pa.int64())) == {
        late: [1], ds.manifest.fragments[-1].id: [1]}


def test_reads_while_the_merger_and_the_index_builder_run_see_one_answer() -> None:
    """Merges and index catch-ups change the base, never the LSM view: readers on other
    threads (scans, filtered scans, lookups of one and many keys) see the same rows all
    along, whichever mix of index and unindexed fragments each read finds."""
    mw, writer, model = build(pa.int64())
    writer.close()  # its MemTable flushed: every row is in a generation or the base
    for step in range(6):  # more generations: updates and new keys, each flushed
        ids = np.arange(2000 + 100 * step, 2000 + 100 * step + 40)
        writer = mw.writer()
        writer.put(rows(pa.int64(), np.concatenate([ids, np.arange(step * 7, 300, 11)]),
                        20 + step))
        writer.close()
    uri = mw.dataset.uri
    view = MemWal(lance_sql.dataset(uri))
    want = view.scanner().to_table().sort_by("id")
    filtered = view.scanner(filter="v % 4 = 1").to_table().sort_by("id")
    asked = np.random.default_rng(9).choice(2700, 60).tolist()
    keys = pa.table({"id": pa.array(asked, pa.int64())})
    looked_up = view.get(keys).sort_by("id")
    errors: list[BaseException] = []
    reads = [0]
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                current = MemWal(lance_sql.dataset(uri))
                assert current.scanner().to_table().sort_by("id").equals(want)
                assert current.scanner(filter="v % 4 = 1").to_table().sort_by("id") \
                    .equals(filtered)
                assert current.get(keys).sort_by("id").equals(looked_up)
                one = asked[reads[0] % len(asked)]
                assert current.get({"id": [one]}).equals(
                    looked_up.filter(pc.equal(looked_up["id"], one)))
                reads[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        merged = 0
        while True:
            done_now = MemWal(lance_sql.dataset(uri)).merge(max_generations=2)
            merged += len(done_now)
            if merged % 4 == 0:
                lance_sql.dataset(uri).optimize.optimize_indices()
            if not done_now:
                break
    finally:
        done.set()
        for t in readers:
            t.join()
    assert not errors, errors[0]
    assert merged >= 10 and reads[0] >= 2


def test_a_tail_too_large_warns_once_and_reads_as_without_it(monkeypatch) -> None:
    mw, writer, model = build(pa.int64())
    try:
        monkeypatch.setattr(unindexed, "MAX_TAIL_ROWS", 10)
        monkeypatch.setattr(unindexed, "_WARNED", set())
        with pytest.warns(IndexFallbackWarning, match="optimize_indices"):
            got = as_model(mw.scanner().to_table())
        assert got == model
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not again for this table
            assert as_model(mw.get({"id": [5, 1003]})) == {
                k: model[k] for k in (5, 1003) if k in model}
    finally:
        writer.close()


def test_a_merge_searches_the_new_block_only() -> None:
    """The hidden rows of a merge's new base version: the blocks of the fragments merged
    before keep their answers for each newer source; only the new fragment's is searched."""
    mw, writer, model = build(pa.int64())
    try:
        uri = mw.dataset.uri
        before = unindexed.BLOCK_SEARCHES[0]
        assert as_model(MemWal(lance_sql.dataset(uri)).scanner().to_table()) == model
        first = unindexed.BLOCK_SEARCHES[0] - before
        ds = lance_sql.dataset(uri)
        covered = next(i for i in ds.list_indices() if i["type"] == "BTree")["fragment_ids"]
        blocks = unindexed_keys(ds, "id", frozenset(covered)).blocks
        assert len(blocks) >= 2 and first >= 2
        assert MemWal(ds).merge(max_generations=1)
        before = unindexed.BLOCK_SEARCHES[0]
        assert as_model(MemWal(lance_sql.dataset(uri)).scanner().to_table()) == model
        again = unindexed.BLOCK_SEARCHES[0] - before
        assert 0 < again < first
    finally:
        writer.close()


def test_no_newer_keys_hide_nothing_without_reading_the_tail() -> None:
    mw, writer, _ = build(pa.int64())
    try:
        ds = lance_sql.dataset(mw.dataset.uri)
        base = BaseSource(ds, ["id"])
        reads = unindexed.FRAGMENT_READS[0]
        hidden = hidden_base_rows(base, [base])
        assert hidden is not None and not hidden.count()
        assert hidden.covered == {f.id for f in ds.manifest.fragments}
        assert unindexed.FRAGMENT_READS[0] == reads
    finally:
        writer.close()
