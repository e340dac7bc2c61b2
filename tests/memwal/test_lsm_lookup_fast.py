"""Shortcuts of single-key point lookups, each held equal to the general path: the scalar
routing hash, the scalar bloom hash, the warm strong view (and everything that must
invalidate it: puts, flushes, other writers, merges, GC, base commits, new regions),
and the base table's direct BTREE index path."""

from __future__ import annotations

import gc
import threading
import uuid
import weakref
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.api import MemWal, RoutingWriter
from lance_sql.memwal.bloom import PrimaryKeyBloom, key_hash_one, key_hashes
from lance_sql.memwal.dataset import dataset as memwal_dataset
from lance_sql.memwal.murmur3 import murmur3_32, scalar_hash
from lance_sql.memwal.naming import RegionPaths
from lance_sql.memwal.read import unindexed
from lance_sql.memwal.read.keys import Keys
from lance_sql.memwal.read.planner import _keep
from lance_sql.memwal.read.sources import BaseSource
from lance_sql.memwal.read.warm import WarmState
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import region_id_for
from lance_sql.memwal.transforms import region_values, scalar_region_values
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _rows(ids, tag: str) -> pa.Table:
    ids = [int(i) for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def _value(mw: MemWal, key: int) -> str | None:
    got = mw.get({"id": [key]})
    assert got.num_rows <= 1
    return got.column("v")[0].as_py() if got.num_rows else None


def _cold(mw: MemWal, key: int) -> str | None:
    """The same lookup through a new (cold) view."""
    got = mw.view().lookup_plan(pa.table({"id": pa.array([key], pa.int64())})).to_table()
    return got.column("v")[0].as_py() if got.num_rows else None


def _int_values(t: pa.DataType) -> list[int]:
    info = np.iinfo(t.to_pandas_dtype())
    rng = np.random.default_rng(3)
    drawn = rng.integers(info.min, info.max, 64, dtype=t.to_pandas_dtype(), endpoint=True)
    return [int(info.min), int(info.max), 0, 1, *(int(x) for x in drawn)]


# ---------------------------------------------------------------------- scalar hashes

@pytest.mark.parametrize("t", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
                               pa.uint32(), pa.uint64()])
def test_scalar_murmur3_equals_the_vectorised_hash_for_integers(t: pa.DataType) -> None:
    values = _int_values(t)
    assert murmur3_32(pa.array(values, t)).to_pylist() == [scalar_hash(v, t) for v in values]


@pytest.mark.parametrize(("t", "values"), [
    (pa.string(), ["", "a", "abcd", "longer than one word", "ü" * 7, "\x00x"]),
    (pa.large_string(), ["", "key-12345"]),
    (pa.binary(), [b"", b"\x00\xff\x10", b"x" * 13]),
])
def test_scalar_murmur3_equals_the_vectorised_hash_for_bytes(t: pa.DataType,
                                                             values: list) -> None:
    assert murmur3_32(pa.array(values, t)).to_pylist() == [scalar_hash(v, t) for v in values]


def test_scalar_murmur3_declines_other_types() -> None:
    assert scalar_hash(1.5, pa.float64()) is None
    assert scalar_hash(1, pa.timestamp("us")) is None
    assert scalar_hash("1", pa.int64()) is None


@pytest.mark.parametrize("spec", [
    RegionSpec.bucket("id", 8),
    RegionSpec.bucket("id", 64),
    RegionSpec((RegionField("b", ("id",), "bucket", parameters={"num_buckets": "5"},
                            result_type="int32"),
                RegionField("i", ("id",), "identity")), spec_id=1),
])
def test_scalar_region_values_equal_region_values(spec: RegionSpec) -> None:
    bound = spec.bind(LanceSchema.from_arrow(SCHEMA))
    values = _int_values(pa.int64())
    width = len(bound.fields)
    rows = region_values(bound, [pa.array(values, pa.int64())] * width,
                         len(values)).to_pylist()
    for n, v in enumerate(values):
        one = scalar_region_values(bound, [v] * width, [pa.int64()] * width)
        assert one == tuple(rows[n][f.field_id] for f in bound.fields)


def test_scalar_region_values_decline_other_transforms() -> None:
    spec = RegionSpec((RegionField("t", ("id",), "truncate", parameters={"width": "10"}),),
                      spec_id=1)
    assert scalar_region_values(spec, [5], [pa.int64()]) is None
    assert scalar_region_values(RegionSpec.bucket("id", 4), [None], [pa.int64()]) is None


@pytest.mark.parametrize("t", [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.uint64()])
def test_scalar_bloom_hash_equals_key_hashes(t: pa.DataType) -> None:
    values = _int_values(t)
    assert key_hashes([pa.array(values, t)]).tolist() == [key_hash_one([v], [t])
                                                          for v in values]


def test_scalar_bloom_hash_equals_key_hashes_for_strings_and_composite_keys() -> None:
    for t, values in ((pa.string(), ["", "a", "eight by", "nine byte", "ü" * 9]),
                      (pa.binary(), [b"", b"\xff" * 8, b"abc"])):
        assert key_hashes([pa.array(values, t)]).tolist() == [key_hash_one([v], [t])
                                                              for v in values]
    a, b = [1, -2, 3], ["x", "", "longer string"]
    assert key_hashes([pa.array(a, pa.int32()), pa.array(b)]).tolist() == [
        key_hash_one([x, y], [pa.int32(), pa.string()]) for x, y in zip(a, b, strict=True)]
    assert key_hash_one([1.0], [pa.float64()]) is None
    assert key_hash_one([None], [pa.int64()]) is None


def test_scalar_bloom_hash_equals_key_hashes_for_every_message_length() -> None:
    """The one-key hash compresses 8-byte words and a last partial one: binaries of
    every length around several words, random bytes, hash as the vectorised hash."""
    rng = np.random.default_rng(23)
    values = [rng.bytes(n) for n in range(41) for _ in range(3)]
    assert key_hashes([pa.array(values, pa.binary())]).tolist() == [
        key_hash_one([v], [pa.binary()]) for v in values]
    ints = [int(v) for v in rng.integers(-(1 << 63), (1 << 63) - 1, 200, dtype=np.int64)]
    assert key_hashes([pa.array(ints, pa.int64())]).tolist() == [
        key_hash_one([v], [pa.int64()]) for v in ints]


def test_scalar_bloom_probe_equals_the_vectorised_probe() -> None:
    bloom = PrimaryKeyBloom()
    bloom.add([pa.array(np.arange(0, 4000, 2))])
    hashes = key_hashes([pa.array(np.arange(0, 8000))])
    want = bloom.might_contain_hashes(hashes).tolist()
    assert [bloom.might_contain_hash(int(h)) for h in hashes] == want
    assert not all(want) and any(want)


def test_one_key_is_hashed_like_many() -> None:
    table = pa.table({"id": pa.array([12345], pa.int64())})
    assert Keys(table).hashes.tolist() == key_hashes([table.column(0).chunk(0)]).tolist()


def test_a_one_key_table_routes_and_hashes_as_the_vectorised_paths(tmp_path: Path) -> None:
    """A one-key lookup reads its key once as a Python value (from one_key_table, or from
    the key table) for its routing and its bloom hash: each key's region and hash equal
    those the many-key paths (numpy buckets, Arrow region values) give it."""
    ds = lance_sql.write_dataset(_rows(range(4), "base"), str(tmp_path / "t.lance"))
    mw = MemWal.initialize(lance_sql.dataset(ds.uri), RegionSpec.bucket("id", 8),
                           durable_write=False)
    with mw.writer() as w:  # five of the eight buckets get a region
        w.put(_rows([k for k in range(40) if abs(scalar_hash(k, pa.int64())) % 8 < 5], "w"))
    keys = [int(k) for k in np.random.default_rng(5).integers(-(1 << 63), (1 << 63) - 1,
                                                              300, dtype=np.int64)]
    keys += [0, 1, -1, -(1 << 63), (1 << 63) - 1]
    view = mw.view()
    many = view._route(pa.table({"id": pa.array(keys, pa.int64())}))  # numpy buckets
    few = np.concatenate([view._route(pa.table({"id": pa.array(keys[i:i + 10], pa.int64())}))
                          for i in range(0, len(keys), 10)])  # Arrow region values
    assert many is not None and many.tolist() == few.tolist()
    assert len(set(many.tolist())) == 6 and -1 in many  # (keys of missing regions too)
    for n, key in enumerate(keys):
        one = view.fresh()
        table = one.one_key_table({"id": [key]})
        assert table is not None
        assert one._route(table).tolist() == [many[n]]  # its value as one_key_table read it
        plain = view.fresh()._route(pa.table({"id": pa.array([key], pa.int64())}))
        assert plain is not None and plain.tolist() == [many[n]]  # read from the table
        given = one._one_key(table)
        assert Keys(table, one=given).hashes.tolist() == key_hashes(
            [pa.array([key], pa.int64())]).tolist()


# ---------------------------------------------------------------------- warm view

@pytest.fixture
def mw(tmp_path: Path) -> MemWal:
    ds = lance_sql.write_dataset(_rows(range(100), "base"), str(tmp_path / "t.lance"))
    ds.create_scalar_index("id", "BTREE")
    return MemWal.initialize(lance_sql.dataset(ds.uri), RegionSpec.bucket("id", 4),
                             durable_write=False, max_wal_flush_interval_ms=3_600_000)


def test_a_put_just_before_the_lookup_is_seen(mw: MemWal) -> None:
    with mw.writer() as w:
        for n in range(5):
            w.put(_rows([7], f"p{n}-"))
            assert _value(mw, 7) == f"p{n}-7"
        w.delete(pa.table({"id": pa.array([7], pa.int64())}))
        assert _value(mw, 7) is None
        w.put(_rows([1000], "new"))
        assert _value(mw, 1000) == "new1000"


def test_flushes_merges_and_gc_between_lookups_are_seen(mw: MemWal) -> None:
    with mw.writer() as w:
        w.put(_rows(range(0, 200, 3), "g1-"))
        assert _value(mw, 3) == "g1-3" and _value(mw, 4) == "base4"
        w.flush_memtable()  # the MemTable's rows move to a generation on disk
        assert _value(mw, 3) == "g1-3" and _value(mw, 198) == "g1-198"
        w.put(_rows([3], "m-"))
        assert _value(mw, 3) == "m-3"
        w.flush_memtable()
        mw.merge()  # a new base version
        assert _value(mw, 3) == "m-3" and _value(mw, 198) == "g1-198"
        lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
        assert mw.collect_garbage(grace=timedelta(0)).generations  # generations deleted
        for key in (3, 4, 198, 199):
            assert _value(mw, key) == _cold(mw, key)
        assert _value(mw, 3) == "m-3"


def test_a_flush_by_another_handle_is_seen(mw: MemWal) -> None:
    key = 5
    with mw.writer() as w:
        w.put(_rows([key], "a"))
        w.flush_memtable()
    assert _value(mw, key) == "a5"  # warm, from generation 1
    other = MemWal(lance_sql.dataset(mw.dataset.uri))
    with other.writer() as w2:  # claims the region: a newer manifest
        w2.put(_rows([key], "b"))
        assert _value(mw, key) == "b5"
        w2.flush_memtable()  # gone from the registry: only the manifest says where
        assert _value(mw, key) == "b5"
    assert _value(mw, key) == "b5" == _cold(mw, key)


def test_a_base_commit_between_lookups_is_seen(mw: MemWal) -> None:
    assert _value(mw, 42) == "base42"
    lance_sql.dataset(mw.dataset.uri).delete("id = 42")
    assert _value(mw, 42) is None


def test_a_region_created_after_the_view_was_warmed_is_seen(mw: MemWal) -> None:
    spec = mw.region_spec
    assert spec is not None
    keys = list(range(100, 400))
    buckets = region_values(spec,
                            [pa.array(keys, pa.int64())], len(keys)).column(0).to_pylist()
    first = next(k for k, b in zip(keys, buckets, strict=True) if b == 0)
    later = next(k for k, b in zip(keys, buckets, strict=True) if b == 1)
    with mw.writer() as w:
        w.put(_rows([first], "r0-"))
        assert _value(mw, first) == "r0-" + str(first) and _value(mw, later) is None
        w.put(_rows([later], "r1-"))  # claims a second region
        assert _value(mw, later) == f"r1-{later}"


def test_a_region_listed_before_its_manifest_exists_is_found_once_claimed(
        mw: MemWal) -> None:
    spec = mw.region_spec
    assert spec is not None
    keys = list(range(100, 400))
    buckets = region_values(spec, [pa.array(keys, pa.int64())], len(keys))
    key = keys[buckets.column(0).to_pylist().index(2)]
    rid = region_id_for(spec, buckets.slice(buckets.column(0).to_pylist().index(2), 1))
    store = mw.dataset.store
    store.put(f"{RegionPaths(rid).root}/placeholder", b"")  # listed, not claimed yet
    assert _value(mw, key) is None
    with mw.writer() as w:
        w.put(_rows([key], "c"))
        assert isinstance(w, RoutingWriter) and w.writers[0].region_id == rid
        assert _value(mw, key) == f"c{key}"


def test_warm_manifests_follow_new_and_collected_versions(mw: MemWal) -> None:
    with mw.writer() as w:
        w.put(_rows([1], "x"))
        assert isinstance(w, RoutingWriter)
        rid = w.writers[0].region_id
    log = RegionLog(mw.dataset.store, rid)
    state = WarmState()
    assert state.latest_manifest(log) == log.latest()
    for _ in range(3):
        log.update(lambda m: m)
    assert state.latest_manifest(log) == log.latest()
    known = log.latest()
    assert known is not None
    for _ in range(2):
        log.update(lambda m: m)
    for version in range(1, known.version + 2):  # the one seen and the next are gone
        mw.dataset.store.delete(log.paths.manifest(version))
    assert state.latest_manifest(log) == log.latest()
    assert state.latest_manifest(log).version == known.version + 2  # type: ignore[union-attr]


def test_the_dataset_handle_keeps_its_memwal(mw: MemWal) -> None:
    ds = memwal_dataset(mw.dataset.uri)
    handle = ds.mem_wal
    assert handle is not None and ds.mem_wal is handle
    assert handle.get({"id": [3]}).column("v").to_pylist() == ["base3"]


# ---------------------------------------------------------------------- base index path

def _base_lookup(ds: lance_sql.LanceDataset, keys: list[int]) -> dict[int, str]:
    source = BaseSource(ds, ["id"])
    table = source.lookup(Keys(pa.table({"id": pa.array(keys, pa.int64())})), ["v"])
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(),
                    strict=True))


# (no tail: the fallback warns that the index lags, IndexFallbackWarning)
@pytest.mark.filterwarnings("ignore::lance_sql.errors.IndexFallbackWarning")
@pytest.mark.parametrize("indexed", [True, False])
def test_the_base_index_path_equals_a_scan(tmp_path: Path, indexed: bool,
                                            monkeypatch) -> None:
    uri = str(tmp_path / "b.lance")
    ds = lance_sql.write_dataset(_rows(range(3000), "b"), uri, max_rows_per_file=700)
    if indexed:
        ds.create_scalar_index("id", "BTREE")
    lance_sql.dataset(uri).delete("id % 7 = 0")  # deletion vectors in every fragment
    ds = lance_sql.dataset(uri)
    model = {i: f"b{i}" for i in range(3000) if i % 7}
    source = BaseSource(ds, ["id"])
    probe = [0, 1, 699, 700, 701, 2999, 3000, -5, 14, 15]
    keys = Keys(pa.table({"id": pa.array(probe, pa.int64())}))
    assert (source._indexed_take(keys, ["id"]) is not None) == indexed
    for key in probe:
        assert _base_lookup(ds, [key]) == ({key: model[key]} if key in model else {})
    assert _base_lookup(ds, probe) == {k: model[k] for k in probe if k in model}
    # rows appended after the index was built: not covered, found among the in-memory
    # keys of the unindexed fragments, or (without those) by the scanner
    lance_sql.write_dataset(_rows(range(5000, 5010), "n"), uri, mode="append")
    ds = lance_sql.dataset(uri)
    assert (BaseSource(ds, ["id"])._indexed_take(keys, ["id"]) is not None) == indexed
    assert _base_lookup(ds, [5003, 1]) == {5003: "n5003", 1: "b1"}
    monkeypatch.setattr(unindexed, "MAX_TAIL_ROWS", 0)
    current_runtime().cache.clear()
    assert BaseSource(ds, ["id"])._indexed_take(keys, ["id"]) is None
    assert _base_lookup(ds, [5003, 1]) == {5003: "n5003", 1: "b1"}


def test_the_base_index_path_skips_fragments_that_are_gone(tmp_path: Path) -> None:
    uri = str(tmp_path / "c.lance")
    ds = lance_sql.write_dataset(_rows(range(1000), "c"), uri, max_rows_per_file=100)
    ds.create_scalar_index("id", "BTREE")
    lance_sql.dataset(uri).delete("id < 100")  # the first fragment goes entirely
    ds = lance_sql.dataset(uri)
    assert 0 not in {f.id for f in ds.manifest.fragments}
    keys = Keys(pa.table({"id": pa.array([10, 150], pa.int64())}))
    assert BaseSource(ds, ["id"])._indexed_take(keys, ["id"]) is not None
    assert _base_lookup(ds, [10, 150]) == {150: "c150"}
    ds.compact_files(target_rows_per_fragment=1000)
    ds = lance_sql.dataset(uri)
    for key in (10, 60, 550, 999):
        assert _base_lookup(ds, [key]) == ({} if key < 100 else {key: f"c{key}"})


def test_region_ids_of_regions_are_uuids() -> None:  # the placeholder test's premise
    assert RegionPaths.parse_region_dir(str(uuid.uuid4())) is not None


class _CountedTakes:
    """A table whose ``select(...).take(...)`` records how many rows each take asked for."""

    def __init__(self, table: pa.Table, taken: list[int]) -> None:
        self._table, self._taken = table, taken

    def __getattr__(self, name: str):
        return getattr(self._table, name)

    def select(self, names: list[str]) -> _CountedTakes:
        return _CountedTakes(self._table.select(names), self._taken)

    def take(self, indices: pa.Array) -> pa.Table:
        self._taken.append(len(indices))
        return self._table.take(indices)


def test_a_generation_without_the_keys_answers_empty_and_its_take_yields_nothing(
        mw: MemWal, monkeypatch) -> None:
    """A flushed generation asked for keys it does not hold (what its bloom filter lets
    through as false positives) answers an empty table with the columns a hit gets,
    without taking rows; its TakeLastExec then yields nothing (not a batch of no rows),
    and lookups of many keys still equal a cold view's and the scan's."""
    from lance_sql.memwal.read import nodes
    from lance_sql.memwal.read.nodes import TakeLastExec
    from lance_sql.memwal.read.sources import GenerationSource

    with mw.writer() as w:
        w.put(_rows(range(0, 200, 3), "g1-"))
        w.flush_memtable()
        view = mw.view()
        plan = view.lookup_plan(pa.table({"id": pa.array([3, 4], pa.int64())}))
        assert plan.to_table().column("v").to_pylist() == ["g1-3", "base4"]
        gens = [s for s in view.sources(view.kept) if isinstance(s, GenerationSource)]
        assert gens
        taken: list[int] = []
        tagged: list[int] = []
        rows = GenerationSource.rows
        monkeypatch.setattr(GenerationSource, "rows",
                            lambda self: _CountedTakes(rows(self), taken))
        source_columns = nodes._source_columns
        monkeypatch.setattr(nodes, "_source_columns", lambda *a: (
            tagged.append(a[1]), source_columns(*a))[1])
        for gen in gens:
            held = gen.key_rows().keys[0].to_pylist()[:2]
            hit = gen.lookup(Keys(pa.table({"id": pa.array(held, pa.int64())})), ["v"])
            before = len(taken)
            miss = gen.lookup(Keys(pa.table({"id": pa.array([-1, 10**9], pa.int64())})),
                              ["v"])
            assert len(taken) == before  # nothing taken for no hits
            assert miss.num_rows == 0 and miss.schema == hit.schema and hit.num_rows == 2
            node = TakeLastExec(gen, plan.root.children[0].schema)
            absent = Keys(pa.table({"id": pa.array([-1], pa.int64())}))
            assert list(node.execute(absent)) == [] and node.runs == 1
            assert not tagged  # no columns made for no rows
            present = Keys(pa.table({"id": pa.array(held[:1], pa.int64())}))
            assert sum(b.num_rows for b in node.execute(present)) == 1 and tagged == [1]
            tagged.clear()
        assert taken and all(n > 0 for n in taken)
        # real tables again: a lookup of many keys joins the generations' rows
        monkeypatch.setattr(GenerationSource, "rows", rows)
        keys = list(range(-5, 210, 2))
        got = mw.get({"id": keys})
        cold = mw.view().lookup_plan(pa.table({"id": pa.array(keys, pa.int64())})).to_table()
        assert got.equals(cold)
        scan = mw.scanner(filter=f"id IN ({', '.join(map(str, keys))})").to_table()
        assert sorted(got.column("id").to_pylist()) == sorted(scan.column("id").to_pylist())
        assert dict(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True)) == dict(
            zip(scan["id"].to_pylist(), scan["v"].to_pylist(), strict=True))


def _generation_sources(mw: MemWal, key: int) -> list:
    view = mw._warm.view()
    table = view.one_key_table({"id": [key]})
    assert table is not None
    regions, _ = view._lookup_regions(table)
    return [s for s in view.sources(regions, lazy=True) if s.kind == "flushed"]


def test_a_lookups_generation_sources_are_kept_until_its_region_changes(mw: MemWal) -> None:
    """A warm handle's lookups reuse a region's generation sources while its manifest is
    the same object; a flush (a new manifest) brings the new generation at once."""
    with mw.writer() as w:
        w.put(_rows([5], "a"))
        w.flush_memtable()
        first = _generation_sources(mw, 5)
        assert len(first) == 1 and _generation_sources(mw, 5) == first  # the same objects
        assert all(a is b for a, b in zip(first, _generation_sources(mw, 5), strict=True))
        w.put(_rows([5], "b"))
        assert _value(mw, 5) == "b5"  # the MemTable (sources made per read)
        w.flush_memtable()
        second = _generation_sources(mw, 5)
        assert [s.gen for s in second] == [2, 1] and second[1] is not first[0]
        assert _value(mw, 5) == "b5" == _cold(mw, 5)


def _scan_generation_sources(mw: MemWal) -> list:
    view = mw._warm.view()
    return [s for s in view.sources(view.regions(None)) if s.kind == "flushed"]


def test_a_scans_generation_sources_are_kept_until_their_region_changes(mw: MemWal) -> None:
    """Scans, as lookups, reuse a region's opened generation sources while its manifest
    is the same object (apart from the lookups' lazy ones); a flush brings the new
    generation at once, and every scan sees what a cold view sees."""
    with mw.writer() as w:
        w.put(_rows(range(0, 40), "a"))
        w.flush_memtable()
        first = _scan_generation_sources(mw)
        assert len(first) == 4  # one generation in each region
        again = _scan_generation_sources(mw)
        assert all(a is b for a, b in zip(first, again, strict=True))
        assert not any(a is b for a in first for b in _generation_sources(mw, 5))
        bucket = {k: abs(scalar_hash(k, pa.int64())) % 4 for k in range(40)}
        changed = [k for k in range(40) if bucket[k] == bucket[0]]  # one region's keys
        w.put(_rows(changed, "b"))
        w.flush_memtable()
        second = _scan_generation_sources(mw)
        assert sorted(s.gen for s in second) == [1, 1, 1, 1, 2]
        (region,) = {s.region for s in second if s.gen == 2}
        assert {id(s) for s in second if s.region != region} == \
            {id(s) for s in first if s.region != region}  # the unchanged regions' kept
        assert not {id(s) for s in second if s.region == region} & {id(s) for s in first}
        scanned = mw.scanner().to_table().sort_by("id")
        assert scanned.equals(mw.view().scan_plan().to_table().sort_by("id"))
        assert scanned.column("v").to_pylist()[:40] == [
            f"{'b' if k in changed else 'a'}{k}" for k in range(40)]


def test_gets_of_many_threads_on_one_handle_see_every_write_before_them(mw: MemWal) -> None:
    """Threads get keys through one warm handle while a writer puts and flushes: each get
    answers a value written before it started, never an older one than the thread's
    previous get of that key saw, and after the writer stopped, the last one."""
    keys = list(range(0, 40))
    done = threading.Event()
    written: dict[int, int] = {}  # key -> the last round acknowledged (before any get)
    errors: list[str] = []

    def read() -> None:
        seen: dict[int, int] = {}
        rng = np.random.default_rng(threading.get_ident() % 1000)
        while not done.is_set() or len(seen) < len(keys):
            key = int(rng.choice(keys))
            before = written.get(key, -1)
            got = _value(mw, key)
            at = -1 if got == f"base{key}" else int(got.split("-")[0][1:]) if got else -2
            if at < before or at < seen.get(key, -1):
                errors.append(f"key {key}: got {got}, round {before} was written before")
            seen[key] = at

    with mw.writer() as w:
        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for round_ in range(8):
                part = keys[round_ % 4::2]
                w.put(_rows(part, f"r{round_}-"))
                for key in part:
                    written[key] = round_
                if round_ % 2:
                    w.flush_memtable()
        finally:
            done.set()
            for t in threads:
                t.join()
    assert not errors, errors[:5]
    for key in keys:
        assert _value(mw, key) == (f"r{written[key]}-{key}" if key in written
                                   else f"base{key}")


def test_kept_generation_sources_do_not_keep_a_closed_writers_memtables(mw: MemWal) -> None:
    """The generation sources a warm handle keeps between reads open their generation
    through state the reads share, not through the read that made them: that read's
    MemTables are freed once their writer is closed, whatever lookups follow."""
    first = {(abs(scalar_hash(k, pa.int64())) % 4): k for k in range(100)}
    a, b = first[0], first[1]  # keys of two regions
    w = mw.writer()
    w.put(_rows(range(1000, 1100), "g"))
    w.flush_memtable()  # a generation in every region
    w.put(_rows(range(2000, 6000), "m"))
    held = [weakref.ref(m) for x in w.writers for m in x.memtables()]
    assert held
    assert sorted(mw.get({"id": [a, b]}).column("id").to_pylist()) == sorted([a, b])
    assert _value(mw, a) == f"base{a}"  # (one-key reads keep sources too)
    w.flush_memtable()
    w.close()
    del w
    for _ in range(2):
        assert _value(mw, a) == f"base{a}" and _value(mw, b) == f"base{b}"
    gc.collect()
    assert [r for r in held if r() is not None] == []


def test_a_views_kept_entries_stay_bounded_and_replaceable() -> None:
    """A view's caches: a changed entry replaces the old one even when full, and a new
    key into a full cache starts it again (never more than the bound)."""
    kept: dict[int, str] = {}
    for key in range(3):
        _keep(kept, key, f"v{key}", 3)
    _keep(kept, 1, "new", 3)
    assert kept == {0: "v0", 1: "new", 2: "v2"}
    _keep(kept, 9, "v9", 3)
    assert kept == {9: "v9"}
