"""Writer fencing: the spec's Appendix 1 step by step, and lost WAL positions."""

from __future__ import annotations

import pyarrow as pa
import pytest
from memwal_writer_helpers import (
    REGION,
    memory_table,
    open_writer,
    region_state,
    rows,
)

from lance_sql.errors import WriterFencedError
from lance_sql.format.memwal import RegionManifest
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.wal import WalLog, encode_entry, memtable_schema
from lance_sql.memwal.writer import open_writers


def _seed_appendix_state(ds) -> None:
    """Region manifest v1: epoch 5, replay_after_wal_id 10, wal_id_last_seen 12, with WAL
    entries 11 and 12 (epoch 5) not yet in a generation."""
    log = RegionLog(ds.store, REGION)
    assert log.commit(RegionManifest(REGION, 1, writer_epoch=5, replay_after_wal_id=10,
                                     wal_id_last_seen=12))
    schema = memtable_schema(LanceSchema.from_arrow(rows([0]).schema))
    wal = WalLog(ds.store, REGION)
    for entry_id in (11, 12):
        t = rows([entry_id]).append_column("_tombstone", pa.array([False]))
        assert wal.append(entry_id, encode_entry(schema, t.cast(schema.to_arrow()),
                                                 writer_epoch=5, generation=1,
                                                 data_format="2.2"))


def test_appendix_1_writer_fencing_step_by_step() -> None:
    ds = memory_table()
    _seed_appendix_state(ds)
    log = RegionLog(ds.store, REGION)
    wal = WalLog(ds.store, REGION)

    # 1-2: writer A loads v1 (epoch 5) and claims epoch 6 with v2
    a = open_writer(ds)
    assert (a.epoch, log.latest().version) == (6, 2)
    # 3: A writes WAL entries 13, 14, 15
    for key in (13, 14, 15):
        a.put(rows([key], "a"))
    assert [wal.read(i).writer_epoch for i in (13, 14, 15)] == [6, 6, 6]
    # 4-5: writer B loads v2 (epoch 6) and claims epoch 7 with v3
    b = open_writer(ds)
    assert (b.epoch, log.latest().version, log.latest().writer_epoch) == (7, 3, 7)
    # B replayed 11..15: A's entries had a valid epoch (6 <= 7), nothing is lost
    assert b.memtables()[-1].wal_entries() == [11, 12, 13, 14, 15]
    # 6: B writes entries 16, 17
    b.put(rows([16], "b"))
    b.put(rows([17], "b"))
    assert [wal.read(i).writer_epoch for i in (16, 17)] == [7, 7]
    # 7-9: A tries to flush its MemTable, sees epoch 7 > 6: fenced, aborts everything
    registry = {(w.region_id, w.epoch) for w in open_writers()}
    with pytest.raises(WriterFencedError, match="epoch 6"):
        a.flush_memtable()
    assert a not in open_writers() and (REGION, 7) in registry
    with pytest.raises(WriterFencedError):
        a.put(rows([99], "a"))
    with pytest.raises(WriterFencedError):
        a.close()
    assert not a._thread.is_alive()
    assert log.latest().version == 3  # A committed nothing
    # 10: B continues normally
    b.put(rows([18], "b"))
    flushed = b.flush_memtable()
    latest = log.latest()
    assert (latest.version, latest.writer_epoch, latest.replay_after_wal_id,
            latest.current_generation) == (4, 7, 18, 2)
    assert flushed.physical_rows == 8  # entries 11..18
    assert set(region_state(ds, b)) == set(range(11, 19))
    b.close()


def test_losing_a_wal_position_fences_and_fails_the_pending_put() -> None:
    ds = memory_table()
    a = open_writer(ds)
    a.put(rows([1], "a"))
    b = open_writer(ds)          # replays entry 1
    b.put(rows([2], "b"))        # takes position 2 with epoch 2
    assert open_writers(ds.store.uri) == [b]   # B replaced A in this process's registry
    with pytest.raises(WriterFencedError, match="taken by writer epoch 2"):
        a.put(rows([3], "a"))    # durable: the put fails, it is not acknowledged
    with pytest.raises(WriterFencedError):
        a.put(rows([4], "a"))
    wal = WalLog(ds.store, REGION)
    assert list(wal.ids_after(0)) == [1, 2]
    assert wal.read(2).rows.column("id").to_pylist() == [2]
    a.abort()
    b.close()


def test_non_durable_pending_writes_of_a_fenced_writer_fail_loudly() -> None:
    ds = memory_table()
    a = open_writer(ds, durable_write=False)
    a.put(rows([1], "a"))        # buffered, not yet in the WAL
    b = open_writer(ds)
    b.put(rows([2], "b"))
    with pytest.raises(WriterFencedError):
        a.flush()
    with pytest.raises(WriterFencedError):
        a.close()
    b.close()


def test_a_fenced_writers_last_entry_is_adopted_not_lost() -> None:
    ds = memory_table()
    a = open_writer(ds)
    a.put(rows([1], "a"))
    b = open_writer(ds)          # epoch 2; replayed entry 1; next position 2
    a.put(rows([2], "a"))        # A does not know yet: its entry lands at 2 (epoch 1)
    b.put(rows([3], "b"))        # position 2 is taken by an older epoch: adopt it, use 3
    wal = WalLog(ds.store, REGION)
    assert [wal.read(i).writer_epoch for i in (1, 2, 3)] == [1, 1, 2]
    assert set(region_state(ds, b)) == {1, 2, 3}
    flushed = b.flush_memtable()
    assert flushed.physical_rows == 3
    with pytest.raises(WriterFencedError):
        a.flush_memtable()
    a.abort()
    b.close()


def test_entries_of_a_newer_epoch_fence_a_replaying_writer() -> None:
    ds = memory_table()
    a = open_writer(ds)
    a.abort()
    # a newer writer's entry shows up beyond the replay point (its claim raced ours)
    schema = memtable_schema(ds.manifest.schema)
    t = rows([5]).append_column("_tombstone", pa.array([False])).cast(schema.to_arrow())
    WalLog(ds.store, REGION).append(1, encode_entry(schema, t, writer_epoch=50,
                                                    generation=1, data_format="2.2"))
    with pytest.raises(WriterFencedError, match="epoch 50"):
        open_writer(ds)


def test_a_new_writer_skips_past_a_running_older_writer_and_adopts_its_entries() -> None:
    ds = memory_table()
    a = open_writer(ds)
    b = open_writer(ds)                    # epoch 2; nothing to replay; next position 1
    for key in (1, 2, 3):
        a.put(rows([key], "a"))            # A does not know yet: entries 1, 2, 3
    ops: list[str] = []
    ds.store.add_hook(lambda op, key: ops.append(op))
    b.put(rows([4], "b"))                  # lands at 4 (one lost put, then probes)
    ds.store.clear_hooks()
    assert ops.count("put_if_absent") == 2
    wal = WalLog(ds.store, REGION)
    assert [wal.read(i).writer_epoch for i in (1, 2, 3, 4)] == [1, 1, 1, 2]
    assert b.memtables()[-1].wal_entries() == [1, 2, 3, 4]
    with pytest.raises(WriterFencedError):
        a.put(rows([5], "a"))
    assert set(region_state(ds, b)) == {1, 2, 3, 4}
    a.abort()
    b.close()


def test_a_fenced_writer_cannot_land_a_put_in_a_collected_wal_position(tmp_path) -> None:
    """The newer writer used the position, flushed past it, its rows were merged and the
    garbage collector freed it: the fenced writer's put-if-absent succeeds there, but no
    writer replays an entry below the region's replay point. The put fails instead of
    being acknowledged and lost."""
    import datetime as dt

    import lance_sql
    from lance_sql.memwal import RegionSpec

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False,
                                 metadata={"lance-schema:unenforced-primary-key": "true"}),
                        pa.field("v", pa.string())])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1], "v": ["a"]}, schema=schema), uri)
    ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 1), durable_write=True)

    def one(key: int, value: str) -> pa.Table:
        return pa.table({"id": [key], "v": [value]}, schema=schema)

    old = lance_sql.dataset(uri).mem_wal.writer()
    old.put(one(10, "old"))  # WAL entry 1
    new = lance_sql.dataset(uri).mem_wal.writer()  # fences `old`, which does not know yet
    new.put(one(20, "new"))  # entries 2, 3
    new.put(one(21, "new"))
    new.close()
    mw = lance_sql.dataset(uri).mem_wal
    mw.merge()
    mw.refresh_index()
    lance_sql.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert mw.collect_garbage().wal_entries == 3
    with pytest.raises(WriterFencedError, match="will not be replayed"):
        old.put(one(30, "lost"))  # position 2 is free again
    for region_writer in old.writers:
        region_writer.abort()
    got = lance_sql.dataset(uri).mem_wal.scanner().to_table()
    assert sorted(got.column("id").to_pylist()) == [1, 10, 20, 21]
