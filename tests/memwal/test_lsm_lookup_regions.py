"""One-key lookups on a table of many regions touch only what the key's region needs: a
key its generation's bloom filter rules out reads that bloom filter, never the
generation's manifest or data (so a lookup pruned to one region of 64 costs, cold, about
what it costs warm); and the base table's reverse scan (no BTREE index) finds keys from
the newest fragment back, reading no fragment older than the one holding the key."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, VersionCleanedUpError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.transforms import region_values
from lance_sql.table.runtime.context import Runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
TABLE = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                   pa.field("v", pa.int64())])
REGIONS = 64
_names = itertools.count()


def _bucket(ids: np.ndarray) -> np.ndarray:
    spec = RegionSpec.bucket("id", REGIONS)
    return np.asarray(region_values(spec, [pa.array(ids, pa.int64())], len(ids))
                      .column(0).to_numpy())


@contextlib.contextmanager
def _touched(name: str) -> Iterator[list[tuple[str, str]]]:
    """(operation, key) of every access to the memory store ``name`` meanwhile, with a
    runtime of its own (nothing of the table cached yet: the reads are the cold ones)."""
    store = MemoryStore(name)
    touched: list[tuple[str, str]] = []
    store.add_hook(lambda op, key: touched.append((op, key)))
    try:
        with Runtime().activate():
            yield touched
    finally:
        store.clear_hooks()


def _generation_reads(touched: list[tuple[str, str]]) -> list[str]:
    """Keys read inside flushed generations' directories (``..._gen_<n>/...``)."""
    return [k for op, k in touched if op == "read" and "_gen_" in k]


def test_a_lookup_its_bloom_filter_rules_out_never_opens_the_generation() -> None:
    name = f"lsm-regions{next(_names)}"
    MemoryStore.reset(name)
    base_ids = np.arange(2000)
    ds = lance_sql.write_dataset(pa.table({"id": base_ids, "v": base_ids}, schema=TABLE),
                                 f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", REGIONS),
                           max_wal_flush_interval_ms=3_600_000)
    updated = np.arange(0, 2000, 7)  # updates of base keys, in every region
    with mw.writer() as writer:
        writer.put(pa.table({"id": updated, "v": -updated}, schema=TABLE))
        writer.flush_memtable()
    reader = MemWal(lance_sql.dataset(f"memory://{name}"))  # a fresh handle
    with _touched(name) as touched:
        only_base = np.setdiff1d(base_ids, updated)
        regions = _bucket(only_base)
        # one base-only key of every region (the first lookup also learns the regions)
        firsts = only_base[np.unique(regions, return_index=True)[1]]
        assert firsts.size == REGIONS
        for key in firsts.tolist():
            assert reader.get({"id": [key]}).to_pylist() == [{"id": key, "v": key}]
        reads = _generation_reads(touched)
        # each region's bloom filter once, and nothing else of any generation: no
        # manifest, no data (the reverse scan of the base answered every key)
        assert len(reads) == REGIONS
        assert all(k.endswith("/bloom_filter.bin") for k in reads)
        assert len(set(reads)) == REGIONS
        touched.clear()
        # a key of a generation opens that generation, and only that one
        key = int(updated[3])
        assert reader.get({"id": [key]}).to_pylist() == [{"id": key, "v": -key}]
        opened = {k.split("_gen_")[0] for k in _generation_reads(touched)}
        assert len(opened) == 1
        assert any("/_versions/" in k for k in _generation_reads(touched))
        # and through a lookup plan (two keys), the same rows
        both = reader.get({"id": [int(firsts[5]), key]}).to_pylist()
        assert both == [{"id": int(firsts[5]), "v": int(firsts[5])}, {"id": key, "v": -key}]


def test_a_generation_gone_before_its_first_use_is_a_typed_error() -> None:
    """A lookup opens a listed generation on first use. Its files gone while the view's
    base version, which has not merged it, is kept is damage (the garbage collector
    keeps them): a FormatError, not the base's older row. Gone with that base version
    too (merged into a newer one, both collected): VersionCleanedUpError."""
    name = f"lsm-regions{next(_names)}"
    MemoryStore.reset(name)
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "v": [1, 2]}, schema=TABLE),
                                 f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 4), max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as writer:
        writer.put(pa.table({"id": [1], "v": [10]}, schema=TABLE))
        writer.flush_memtable()
    view = MemWal(lance_sql.dataset(f"memory://{name}")).view("strong")
    regions, index = view._lookup_regions(pa.table({"id": pa.array([1], pa.int64())}))
    sources = view.sources(regions, lazy=True)
    assert [s.kind for s in sources] == ["base", "flushed"]
    store = MemoryStore(name)
    for key in store.keys():
        if "_gen_" in key:
            store.delete(key)
    generation = sources[1]
    with pytest.raises(FormatError, match="not merged into base version .* missing"):
        generation.bloom()
    store.delete(view.base.manifest_key)
    with pytest.raises(VersionCleanedUpError):
        generation.bloom()


def test_the_reverse_scan_stops_at_the_newest_fragment_holding_the_key() -> None:
    name = f"lsm-regions{next(_names)}"
    MemoryStore.reset(name)
    ids = np.arange(4000)
    ds = lance_sql.write_dataset(pa.table({"id": ids, "v": ids * 2}, schema=TABLE),
                                 f"memory://{name}", max_rows_per_file=1000)
    ds.delete("id = 3999")
    ds = lance_sql.dataset(f"memory://{name}")
    assert len(ds.manifest.fragments) == 4
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 4), max_wal_flush_interval_ms=3_600_000)
    reader = MemWal(lance_sql.dataset(f"memory://{name}"))
    assert reader.get({"id": [0]}).to_pylist() == [{"id": 0, "v": 0}]
    files = [f.files[0].path for f in reader.dataset.manifest.fragments]
    with _touched(name) as touched:
        assert reader.get({"id": [3500]}).to_pylist() == [{"id": 3500, "v": 7000}]
        read = [k for op, k in touched if op == "read" and k.endswith(".lance")]
        assert read and all(k.endswith(files[3]) for k in read)  # the newest fragment only
        assert reader.get({"id": [3999]}).to_pylist() == []  # deleted
        assert reader.get({"id": [17, 3500, 17, 4001, 2999]}).to_pylist() == [
            {"id": 17, "v": 34}, {"id": 3500, "v": 7000}, {"id": 17, "v": 34},
            {"id": 2999, "v": 5998}]
    assert mw is not None


def test_reverse_scans_of_each_key_kind_find_the_same_rows_as_a_model() -> None:
    """Keys of every kind the reverse scan handles (compared as filters: integers,
    strings, a composite key's one key; key sets: floats, a composite key's many keys),
    over a base of several fragments with a deleted row."""
    cases = {
        "string": (pa.field("k", pa.string(), nullable=False, metadata=PK),
                   [f"k{i:04d}" for i in range(300)]),
        "float": (pa.field("k", pa.float64(), nullable=False, metadata=PK),
                  [i / 4 - 20.0 for i in range(300)]),
    }
    for kind, (field, keys) in cases.items():
        name = f"lsm-regions{next(_names)}"
        MemoryStore.reset(name)
        schema = pa.schema([field, pa.field("v", pa.int64())])
        ds = lance_sql.write_dataset(pa.table({"k": keys, "v": range(300)}, schema=schema),
                                     f"memory://{name}", max_rows_per_file=100)
        ds.delete(f"v = {7}")
        MemWal.initialize(lance_sql.dataset(f"memory://{name}"), RegionSpec.bucket("k", 4))
        reader = MemWal(lance_sql.dataset(f"memory://{name}"))
        model = {k: v for v, k in enumerate(keys) if v != 7}
        for asked in ([keys[250]], [keys[3]], [keys[7]], [keys[299], keys[0], keys[299]],
                      [keys[7], keys[150]]):
            expected = [{"k": k, "v": model[k]} for k in asked if k in model]
            assert reader.get({"k": pa.array(asked, field.type)}).to_pylist() == expected, kind
    name = f"lsm-regions{next(_names)}"
    MemoryStore.reset(name)
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False, metadata=PK),
                        pa.field("b", pa.string(), nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    a = [i % 10 for i in range(300)]
    b = [f"b{i // 10}" for i in range(300)]
    ds = lance_sql.write_dataset(pa.table({"a": a, "b": b, "v": range(300)}, schema=schema),
                                 f"memory://{name}", max_rows_per_file=100)
    MemWal.initialize(ds, RegionSpec.bucket("a", 4))
    reader = MemWal(lance_sql.dataset(f"memory://{name}"))
    assert reader.get({"a": pa.array([5], pa.int32()), "b": ["b12"]}).to_pylist() == [
        {"a": 5, "b": "b12", "v": 125}]
    assert reader.get({"a": pa.array([5], pa.int32()), "b": ["b99"]}).to_pylist() == []
    assert reader.get({"a": pa.array([1, 9], pa.int32()), "b": ["b0", "b29"]}).to_pylist() == [
        {"a": 1, "b": "b0", "v": 1}, {"a": 9, "b": "b29", "v": 299}]
