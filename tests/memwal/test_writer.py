"""The region writer's state machine through the in-memory store, and its bad inputs."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest
from memwal_writer_helpers import (
    REGION,
    flushed_rows,
    memory_table,
    open_writer,
    quiet_config,
    region_state,
    rows,
)

import lance_sql
from lance_sql.errors import FormatError, InvalidInputError, SchemaError
from lance_sql.format.index import decode_index_section
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import writer as writer_module
from lance_sql.memwal.bloom import PrimaryKeyBloom
from lance_sql.memwal.naming import GenerationDir, RegionPaths
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.wal import WalLog
from lance_sql.memwal.writer import (
    BLOOM_FILE,
    RegionWriter,
    WriterConfig,
    open_memtables,
    open_writers,
)
from lance_sql.table.index.btree import BTreeIndex

PATHS = RegionPaths(REGION)


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_claim_put_wal_flush_and_memtable_flush() -> None:
    ds = memory_table()
    w = open_writer(ds)
    log = RegionLog(ds.store, REGION)
    claimed = log.latest()
    assert (claimed.version, claimed.writer_epoch, claimed.current_generation) == (1, 1, 1)
    w.put(rows([1, 2, 3]))                      # durable: one WAL entry per put
    w.put(rows([2], "y").to_batches()[0])
    w.delete(pa.table({"id": [3]}))
    wal = WalLog(ds.store, REGION)
    assert list(wal.ids_after(0)) == [1, 2, 3]
    assert [wal.read(i).writer_epoch for i in (1, 2, 3)] == [1, 1, 1]
    assert wal.read(3).rows.column("_tombstone").to_pylist() == [True]
    # readable at once, before any MemTable flush
    assert region_state(ds, w) == {1: (1.0, False), 2: (2.0, False), 3: (None, True)}
    assert w.memtables()[0].wal_mapping() == {0: (1, 0), 1: (2, 0), 2: (3, 0)}

    flushed = w.flush_memtable()
    manifest = log.latest()
    assert manifest.version == 2 and manifest.writer_epoch == 1
    assert (manifest.replay_after_wal_id, manifest.wal_id_last_seen,
            manifest.current_generation) == (3, 3, 2)
    assert manifest.flushed_generations == (flushed,)
    assert GenerationDir.parse(flushed.path).generation == 1
    assert (flushed.physical_rows, flushed.primary_key_bytes) == (5, 40)
    assert flushed.in_memory_bytes > 0
    gen = flushed_rows(ds)[0]
    assert gen.column("id").to_pylist() == [1, 2, 3, 2, 3]
    assert gen.column("_tombstone").to_pylist() == [False, False, False, False, True]
    # the generation's fragments are the WAL entries, reached through a base path
    gen_ds = lance_sql.dataset(f"{ds.store.uri}/{PATHS.generation(flushed.path)}")
    assert [f.files[0].path for f in gen_ds.manifest.fragments] == [
        WalLog.file_name(i) for i in (1, 2, 3)]
    assert gen_ds.manifest.base_paths[0].path.endswith(f"{PATHS.wal_dir}")
    assert not gen_ds.manifest.base_paths[0].is_dataset_root
    bloom = PrimaryKeyBloom.from_bytes(
        ds.store.read(f"{PATHS.generation(flushed.path)}/{BLOOM_FILE}"), "bloom")
    assert bloom.might_contain([pa.array([1, 2, 3])]).all()

    w.put(rows([4]))
    assert w.generation == 2 and region_state(ds, w)[4] == (4.0, False)
    w.close()
    assert list(wal.ids_after(3)) == [4]


def test_generation_reads_the_same_in_pylance(tmp_path) -> None:
    import lance

    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(rows([0]), uri)
    with RegionWriter.for_dataset(ds, REGION, config=quiet_config()) as w:
        w.put(rows(list(range(1, 200))))
        w.put(rows(list(range(100, 300)), "z"))
        w.delete(pa.table({"id": [5, 6]}))
        flushed = w.flush_memtable()
    gen_uri = f"{uri}/{PATHS.generation(flushed.path)}"
    ours = lance_sql.dataset(gen_uri).to_table()
    theirs = lance.dataset(gen_uri).to_table()
    assert ours.num_rows == 401
    assert ours.equals(theirs.cast(ours.schema))
    assert lance.dataset(gen_uri).schema.field("_tombstone").type == pa.bool_()


def test_replay_after_restart_is_one_fragment_per_entry() -> None:
    ds = memory_table()
    w = open_writer(ds)
    w.put(rows([1]))
    w.flush_memtable()
    w.put(rows([2, 3]))
    w.put(rows([3], "new"))
    w.abort()
    again = open_writer(ds)
    assert again.epoch == 2 and again.generation == 2
    memtable = again.memtables()[-1]
    assert memtable.wal_mapping() == {0: (2, 0), 1: (3, 0)}
    assert region_state(ds, again)[3] == (3.0, False)
    assert memtable.lookup(pa.table({"id": [3]})).tolist() == [1 << 32]
    again.put(rows([4]))                       # continues after the replayed entries
    assert list(WalLog(ds.store, REGION).ids_after(3)) == [4]
    flushed = again.flush_memtable()
    assert flushed.generation == 2 and flushed.physical_rows == 4
    assert RegionLog(ds.store, REGION).latest().replay_after_wal_id == 4
    again.close()


def test_non_durable_writes_flush_in_the_background() -> None:
    ds = memory_table()
    w = open_writer(ds, durable_write=False, max_wal_flush_interval_ms=20)
    wal = WalLog(ds.store, REGION)
    w.put(rows([1]))
    w.put(rows([2]))
    assert region_state(ds, w)[2] == (2.0, False)      # readable before the WAL has it
    _wait_for(lambda: wal.exists(1))
    w.put(rows([3]))
    w.close()                                          # close flushes what is left
    entries = [wal.read(i).rows.column("id").to_pylist() for i in wal.ids_after(0)]
    assert sorted(k for e in entries for k in e) == [1, 2, 3]
    assert not w._thread.is_alive()


def test_a_large_wal_flush_writes_several_bounded_entries(monkeypatch) -> None:
    """Pending rows beyond WAL_ENTRY_BYTES go into several entries (a larger put alone),
    in order; the mapping, replay and the flushed generation see every row once."""
    monkeypatch.setattr(writer_module, "WAL_ENTRY_BYTES", 2000)
    ds = memory_table()
    w = open_writer(ds, durable_write=False)
    puts = [list(range(i * 40, i * 40 + 40)) for i in range(6)] + [list(range(240, 600))]
    for ids in puts:
        w.put(rows(ids))
    sizes = [f.nbytes for f in w.memtables()[-1].fragments()]
    assert 2 * sizes[0] <= 2000 < 3 * sizes[0] and sizes[-1] > 2000
    w.flush()
    wal = WalLog(ds.store, REGION)
    entries = [wal.read(i).rows.column("id").to_pylist() for i in wal.ids_after(0)]
    assert len(entries) == 4  # 2+2+2 puts of 40 rows, then the 360-row put alone
    assert [k for e in entries for k in e] == list(range(600))
    assert w.memtables()[-1].wal_mapping() == {0: (1, 0), 1: (1, 1), 2: (2, 0), 3: (2, 1),
                                               4: (3, 0), 5: (3, 1), 6: (4, 0)}
    w.abort()
    again = open_writer(ds)
    assert again.memtables()[-1].num_rows == 600
    flushed = again.flush_memtable()
    assert flushed_rows(ds)[0].column("id").to_pylist() == list(range(600))
    assert flushed.physical_rows == 600
    again.close()


def test_memtable_thresholds_trigger_a_background_flush() -> None:
    ds = memory_table()
    w = open_writer(ds, max_memtable_rows=100, max_wal_flush_interval_ms=20)
    for start in range(0, 150, 50):
        w.put(rows(list(range(start, start + 50))))
    log = RegionLog(ds.store, REGION)
    _wait_for(lambda: log.latest().current_generation >= 2)
    assert log.latest().flushed_generations[0].physical_rows >= 100
    w.close()


def test_backpressure_bounds_unflushed_bytes() -> None:
    ds = memory_table()
    batch = rows(list(range(1000)))
    limit = 3 * batch.nbytes
    w = open_writer(ds, durable_write=False, max_unflushed_bytes=limit,
                    max_wal_flush_interval_ms=10)
    peak = 0
    for i in range(12):
        w.put(rows(list(range(i * 1000, (i + 1) * 1000))))
        peak = max(peak, sum(m.nbytes for m in w.memtables()))
    assert peak <= limit + 2 * batch.nbytes
    w.close()
    assert RegionLog(ds.store, REGION).latest().flushed_generations
    reopened = open_writer(ds)
    try:
        assert len(region_state(ds, reopened)) == 12000
    finally:
        reopened.close()


def test_registry_lists_open_writers_and_their_memtables() -> None:
    ds = memory_table()
    other = uuid.uuid4()
    w = open_writer(ds)
    v = open_writer(ds, other)
    w.put(rows([7]))
    assert {x.region_id for x in open_writers(ds.store.uri)} == {REGION, other}
    found = next(x for x in open_writers(ds.store.uri) if x.region_id == REGION)
    assert found.memtables()[-1].lookup(pa.table({"id": [7]})).tolist() == [0]
    memtables = open_memtables(ds.store.uri)
    assert set(memtables) == {REGION, other} and memtables[other][-1].num_rows == 0
    w.close()
    v.close()
    assert open_writers(ds.store.uri) == []


# ---------------------------------------------------------------------- bad input
def test_null_keys_are_refused_and_nothing_is_written() -> None:
    ds = memory_table()
    w = open_writer(ds)
    bad = pa.table({"id": pa.array([1, None], pa.int64()), "v": [1.0, 2.0], "s": ["a", "b"]})
    with pytest.raises(InvalidInputError, match="'id' has 1 null"):
        w.put(bad)
    with pytest.raises(InvalidInputError, match="null"):
        w.delete(pa.table({"id": pa.array([None], pa.int64())}))
    assert not WalLog(ds.store, REGION).exists(1)
    w.put(rows([1]))                                  # the writer is still usable
    w.close()


def test_wrong_schema_is_refused_and_safe_casts_are_taken() -> None:
    ds = memory_table()
    w = open_writer(ds)
    with pytest.raises(SchemaError, match="missing"):
        w.put(pa.table({"id": [1], "v": [1.0]}))
    with pytest.raises(SchemaError, match="unknown"):
        w.put(pa.table({"id": [1], "v": [1.0], "s": ["a"], "extra": [1]}))
    with pytest.raises(SchemaError, match="'v'"):
        w.put(pa.table({"id": [1], "v": ["not a number"], "s": ["a"]}))
    with pytest.raises(SchemaError, match="'id'"):
        w.put(pa.table({"id": [1.5], "v": [1.0], "s": ["a"]}))   # lossy: refused
    with pytest.raises(InvalidInputError):
        w.put([1, 2, 3])
    w.put(pa.table({"s": ["a"], "v": pa.array([1], pa.int32()), "id": pa.array([9], pa.int32())}))
    assert region_state(ds, w) == {9: (1.0, False)}
    w.close()


def test_table_without_primary_key_is_refused() -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), "memory://nokey_table")
    with pytest.raises(SchemaError, match="primary key"):
        RegionWriter.for_dataset(ds, REGION)


def test_rows_of_another_region_are_refused() -> None:
    ds = memory_table()
    spec = RegionSpec.identity("s").with_id(1)
    w = RegionWriter.for_dataset(ds, REGION, region_spec=spec, region={"identity_s": "a"},
                                 config=quiet_config())
    assert RegionLog(ds.store, REGION).latest().region_spec_id == 1
    w.put(pa.table({"id": [1, 2], "v": [1.0, 2.0], "s": ["a", "a"]}))
    with pytest.raises(InvalidInputError, match="1 row"):
        w.put(pa.table({"id": [3, 4], "v": [1.0, 2.0], "s": ["a", "b"]}))
    assert region_state(ds, w).keys() == {1, 2}
    with pytest.raises(InvalidInputError, match="must name the fields"):
        RegionWriter.for_dataset(ds, uuid.uuid4(), region_spec=spec, region={},
                                 config=quiet_config())
    w.close()


def test_bucket_region_checks_keys_of_deletes_too() -> None:
    ds = memory_table()
    spec = RegionSpec.bucket("id", 4).with_id(2)
    from lance_sql.memwal.transforms import region_values

    bound = spec.bind(ds.manifest.schema)
    ids = pa.array(list(range(40)), pa.int64())
    buckets = region_values(bound, [ids], 40).column(0).to_pylist()
    mine = [i for i, b in enumerate(buckets) if b == 1]
    others = [i for i, b in enumerate(buckets) if b != 1]
    w = RegionWriter.for_dataset(ds, REGION, region_spec=spec,
                                 region={spec.fields[0].field_id: 1}, config=quiet_config())
    w.put(rows(mine))
    w.delete(pa.table({"id": mine[:1]}))
    with pytest.raises(InvalidInputError, match="do not belong"):
        w.delete(pa.table({"id": others[:1]}))
    with pytest.raises(InvalidInputError, match="do not belong"):
        w.put(rows(others[:2]))
    w.close()


def test_corrupt_wal_entry_fails_the_new_writer_naming_the_file() -> None:
    ds = memory_table()
    w = open_writer(ds)
    w.put(rows([1]))
    w.put(rows([2]))
    w.abort()
    key = WalLog(ds.store, REGION).key(2)
    ds.store.put(key, ds.store.read(key)[:-7])
    with pytest.raises(FormatError, match=key):
        open_writer(ds)


def test_corrupt_region_manifest_is_a_format_error() -> None:
    ds = memory_table()
    w = open_writer(ds)
    w.put(rows([1]))
    w.flush_memtable()
    w.close()
    log = RegionLog(ds.store, REGION)
    ds.store.put(log.paths.manifest(log.latest_version()), b"\x08\xff\xff garbage")
    with pytest.raises(FormatError, match="region manifest|manifest"):
        open_writer(ds)


def test_config_is_validated() -> None:
    with pytest.raises(InvalidInputError, match="max_memtable_rows"):
        WriterConfig(max_memtable_rows=0)
    with pytest.raises(InvalidInputError, match="max_unflushed_bytes"):
        WriterConfig(max_unflushed_bytes=-5)



@pytest.mark.parametrize("durable", [True, False])
def test_concurrent_puts_from_threads_are_all_kept(durable: bool) -> None:
    import threading

    ds = memory_table()
    # small MemTables: background MemTable flushes race with the puts
    w = open_writer(ds, durable_write=durable, max_wal_flush_interval_ms=2,
                    max_memtable_rows=15)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(60):
                w.put(rows([t * 1000 + i]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    w.close()
    wal = WalLog(ds.store, REGION)
    ids = list(wal.ids_after(RegionLog(ds.store, REGION).latest().replay_after_wal_id))
    if durable:  # group commit: a put's flush may carry others along, never lose them
        assert len(ids) <= 240
    assert RegionLog(ds.store, REGION).latest().flushed_generations
    recovered = open_writer(ds)
    assert set(region_state(ds, recovered)) == {t * 1000 + i for t in range(4)
                                                for i in range(60)}
    recovered.close()


def test_region_values_are_recorded_and_checked_at_claim() -> None:
    from lance_sql.memwal.routing import decode_region_values

    ds = memory_table()
    spec = RegionSpec.identity("s").with_id(1)
    w = RegionWriter.for_dataset(ds, REGION, region_spec=spec, region={"identity_s": "a"},
                                 config=quiet_config())
    w.close()
    stored = RegionLog(ds.store, REGION).latest().region_values
    assert decode_region_values(stored, "m").to_pylist() == [{"identity_s": "a"}]
    with pytest.raises(InvalidInputError, match="region values"):
        RegionWriter.for_dataset(ds, REGION, region_spec=spec, region={"identity_s": "b"},
                                 config=quiet_config())
    with pytest.raises(InvalidInputError, match="region spec"):
        open_writer(ds)  # a manual writer (spec 0) on a spec's region


def test_writer_config_from_recorded_defaults() -> None:
    config = WriterConfig.from_defaults({"durable_write": "false", "max_memtable_rows": "77",
                                         "someone_elses": "x"}, max_unflushed_bytes=5)
    assert (config.durable_write, config.max_memtable_rows, config.max_unflushed_bytes) == (
        False, 77, 5)
    with pytest.raises(InvalidInputError):
        WriterConfig.from_defaults({"max_memtable_rows": "lots"})


def test_generations_written_by_the_writer_merge_into_the_base_table(tmp_path) -> None:
    import lance

    from lance_sql.memwal import index as mem_wal_index
    from lance_sql.memwal.merger import merge

    ds = mem_wal_index.initialize(lance_sql.write_dataset(rows([1, 2, 3]),
                                                          str(tmp_path / "t.lance")))
    with RegionWriter.for_dataset(ds, REGION, config=quiet_config()) as w:
        w.put(rows([3, 4], "new"))
        w.put(rows([4], "newer").set_column(1, "v", pa.array([40.0])))
        w.flush_memtable()
        w.delete(pa.table({"id": [1]}))
        w.put(rows([5]))
        w.flush_memtable()
    results = merge(lance_sql.dataset(ds.uri))
    assert [r.generation for r in results] == [1, 2]
    base = lance_sql.dataset(ds.uri).to_table().sort_by("id")
    assert base.column("id").to_pylist() == [2, 3, 4, 5]
    assert base.column("v").to_pylist() == [2.0, 3.0, 40.0, 5.0]
    assert base.column("s").to_pylist() == ["x2", "new3", "newer4", "x5"]
    theirs = lance.dataset(ds.uri).to_table().sort_by("id")
    assert theirs.column("s").to_pylist() == ["x2", "new3", "newer4", "x5"]


def test_flushed_addresses_remap_memtable_rows_to_the_generation() -> None:
    """The generation's primary-key index holds each row at its address in the
    generation (WAL entry i = fragment i), not its MemTable address."""
    ds = memory_table()
    w = open_writer(ds, durable_write=False)
    w.put(rows([1, 2]))
    w.put(rows([3]))
    w.flush()                      # one entry holding two fragments
    w.put(rows([4, 5, 6]))
    w.flush()
    flushed = w.flush_memtable()
    w.close()
    gen_ds = lance_sql.dataset(f"{ds.store.uri}/{PATHS.generation(flushed.path)}")
    (meta,) = decode_index_section(gen_ds.manifest.index_section)
    entries = BTreeIndex.open(gen_ds.store, gen_ds.manifest, meta, pa.int64()).entries()
    ids = entries.column("values").to_pylist()
    addresses = entries.column("ids").to_numpy()
    gen = gen_ds.to_table(with_row_address=True)
    by_address = dict(zip(gen.column("_rowaddr").to_pylist(), gen.column("id").to_pylist(),
                          strict=True))
    assert [by_address[int(a)] for a in addresses] == ids == [1, 2, 3, 4, 5, 6]
    assert addresses.tolist() == [0, 1, 2, 1 << 32, (1 << 32) + 1, (1 << 32) + 2]


def test_a_full_memtable_is_sealed_by_the_put_that_fills_it() -> None:
    """The MemTable never outgrows its threshold by more than one put, however far behind
    the background thread is (here: slowed down by the store); nothing is lost."""
    ds = memory_table()

    def slow_generations(op: str, key: str) -> None:
        if op == "put" and "_gen_" in key:
            time.sleep(0.05)

    ds.store.add_hook(slow_generations)
    w = open_writer(ds, durable_write=False, max_memtable_rows=50)
    for i in range(12):
        w.put(rows(list(range(i * 20, i * 20 + 20))))
        assert w.memtables()[-1].num_rows < 50
    w.flush_memtable()
    ds.store.clear_hooks()
    assert [m.generation for m in w.memtables()] == [w.generation]
    w.close()
    manifest = RegionLog(ds.store, REGION).latest()
    assert len(manifest.flushed_generations) >= 4
    assert sum(t.num_rows for t in flushed_rows(ds)) == 240
