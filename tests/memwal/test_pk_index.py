"""Each flushed generation carries a BTREE index of its primary key, remapped to the
generation's row addresses, that lance_sql and pylance both list and answer lookups with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from memwal_writer_helpers import REGION, SCHEMA, open_writer, rows

import lance_sql
from lance_sql.format.btree import KeySet, sort_entries
from lance_sql.format.index import decode_index_section
from lance_sql.memwal.naming import RegionPaths
from lance_sql.memwal.pk_index import _sorted_entries
from lance_sql.table.index.btree import BTreeIndex

PATHS = RegionPaths(REGION)


def _generation(ds: lance_sql.LanceDataset, path: str) -> lance_sql.LanceDataset:
    return lance_sql.dataset(f"{ds.store.uri}/{PATHS.generation(path)}")


def _latest_by_scan(gen: lance_sql.LanceDataset, key: str) -> dict:
    """key -> the row with the highest address, by a full scan without the index."""
    table = gen.to_table(with_row_address=True, use_scalar_index=False)
    table = table.sort_by([("_rowaddr", "ascending")])
    return {row[key]: row for row in table.to_pylist()}


def _write_generation(ds: lance_sql.LanceDataset, **config: object) -> str:
    # WAL entries only where the script flushes: no timed flush in between on a slow machine
    config.setdefault("max_wal_flush_interval_ms", 3_600_000)
    with open_writer(ds, durable_write=False, **config) as w:
        w.put(rows(list(range(1, 300))))
        w.flush()                                  # WAL entry 1
        w.put(rows(list(range(200, 500)), "z"))   # overwrites 200..299
        w.put(rows([7, 250], "again"))            # same entry: two MemTable fragments
        w.flush()                                  # WAL entry 2
        w.delete(pa.table({"id": [8, 400]}))
        flushed = w.flush_memtable()               # WAL entry 3 + the generation
    assert flushed is not None
    return flushed.path


def test_index_maps_every_key_to_its_rows_in_the_generation(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(rows([0]), str(tmp_path / "t.lance"))
    gen = _generation(ds, _write_generation(ds))
    (meta,) = decode_index_section(gen.manifest.index_section)
    assert meta.name == "id_idx" and meta.fields == (0,)
    assert meta.fragment_ids == {f.id for f in gen.manifest.fragments} == {0, 1, 2}
    assert gen.version == 2  # data first, then the index
    index = BTreeIndex.open(gen.store, gen.manifest, meta, pa.int64())
    table = gen.to_table(with_row_address=True, use_scalar_index=False)
    assert index.entries().num_rows == table.num_rows == 299 + 300 + 2 + 2
    # every key's index entries are exactly the addresses of its rows
    for key in (1, 7, 8, 199, 250, 400, 499):
        found = np.sort(index.search(KeySet(pa.array([key], pa.int64()))))
        expected = np.sort(table.filter(pc.equal(table.column("id"), key))
                           .column("_rowaddr").to_numpy())
        assert found.tolist() == expected.tolist() and len(found) >= 1
    assert len(index.search(KeySet(pa.array([0, 1000], pa.int64())))) == 0
    # a lookup through the index returns the key's latest row (highest address)
    latest = _latest_by_scan(gen, "id")
    for key, want in [(7, ("again7", False)), (250, ("again250", False)),
                      (8, (None, True)), (400, (None, True)), (300, ("z300", False)),
                      (1, ("x1", False))]:
        scanner = gen.scanner(filter=f"id = {key}", with_row_address=True,
                              use_scalar_index=True)
        assert "id_idx" in scanner.explain_plan()
        got = scanner.to_table().sort_by([("_rowaddr", "descending")]).to_pylist()[0]
        assert (got["s"], got["_tombstone"]) == want
        assert got == latest[key]


def test_composite_key_indexes_its_first_column(tmp_path: Path) -> None:
    pk = "lance-schema:unenforced-primary-key"
    schema = pa.schema([
        pa.field("a", pa.int32(), False, {pk: "true", f"{pk}:position": "2"}),
        pa.field("b", pa.string(), False, {pk: "true", f"{pk}:position": "1"}),
        pa.field("v", pa.float64())])
    ds = lance_sql.write_dataset(pa.table({"a": [0], "b": ["x"], "v": [0.0]}, schema=schema),
                                 str(tmp_path / "c.lance"))
    with open_writer(ds) as w:
        w.put(pa.table({"a": [1, 2, 1], "b": ["k", "k", "m"], "v": [1.0, 2.0, 3.0]},
                       schema=schema))
        w.put(pa.table({"a": [2], "b": ["k"], "v": [4.0]}, schema=schema))
        flushed = w.flush_memtable()
    assert flushed is not None
    gen = _generation(ds, flushed.path)
    (meta,) = decode_index_section(gen.manifest.index_section)
    b_id = next(f.id for f in gen.manifest.schema.fields if f.name == "b")
    assert meta.name == "b_idx" and meta.fields == (b_id,)  # key position 1 is "b"
    got = gen.to_table(filter="b = 'k' AND a = 2", with_row_address=True,
                       use_scalar_index=True).sort_by([("_rowaddr", "descending")])
    assert got.column("v").to_pylist() == [4.0, 2.0]


def test_pylance_lists_and_uses_the_index(tmp_path: Path) -> None:
    import lance

    ds = lance_sql.write_dataset(rows([0]), str(tmp_path / "t.lance"))
    gen = _generation(ds, _write_generation(ds))
    theirs = lance.dataset(gen.uri)
    (listed,) = theirs.describe_indices()
    assert listed.name == "id_idx" and listed.field_names == ["id"]
    assert listed.type_url.endswith("BTreeIndexDetails") and listed.num_rows_indexed == 603
    for key in (7, 8, 250, 499, 1000):
        scanner = theirs.scanner(filter=f"id = {key}", with_row_address=True)
        assert "ScalarIndexQuery" in scanner.explain_plan()
        expected = gen.to_table(filter=f"id = {key}", with_row_address=True,
                                use_scalar_index=False)
        assert scanner.to_table().sort_by("_rowaddr").equals(
            expected.sort_by("_rowaddr").cast(scanner.to_table().schema))
    assert theirs.count_rows() == gen.count_rows() == 603
    assert SCHEMA.names == theirs.schema.names[:3]


def test_a_large_generation_index_spans_several_pages(tmp_path: Path) -> None:
    """200k keys: page_data is written in 1 MiB pages; both readers still find every key."""
    import lance

    ds = lance_sql.write_dataset(rows([0]), str(tmp_path / "t.lance"))
    n = 200_000
    ids = np.random.default_rng(3).permutation(n).astype(np.int64)
    big = pa.table({"id": ids, "v": ids.astype(np.float64), "s": pa.nulls(n, pa.string())},
                   schema=SCHEMA)
    with open_writer(ds, durable_write=False, max_memtable_rows=10**6) as w:
        for start in range(0, n, 50_000):
            w.put(big.slice(start, 50_000))
        flushed = w.flush_memtable()
    assert flushed is not None
    gen = _generation(ds, flushed.path)
    (meta,) = decode_index_section(gen.manifest.index_section)
    index = BTreeIndex.open(gen.store, gen.manifest, meta, pa.int64())
    assert index.lookup.num_pages == -(-n // 4096)
    theirs = lance.dataset(gen.uri)
    for key in (0, 1, 4095, 4096, 123_457, n - 1):
        ours = gen.to_table(filter=f"id = {key}", use_scalar_index=True)
        assert ours.column("v").to_pylist() == [float(key)]
        assert theirs.to_table(filter=f"id = {key}").column("v").to_pylist() == [float(key)]


def test_integer_keys_sort_in_place_like_the_general_sort(tmp_path: Path) -> None:
    """The lean integer path (keys sorted in place, the permutation remapped in place)
    gives the general sort's entries: keys in order, each with its generation address."""
    ds = lance_sql.write_dataset(rows([0]), str(tmp_path / "t.lance"))
    rng = np.random.default_rng(8)
    with open_writer(ds, durable_write=False, max_wal_flush_interval_ms=3_600_000) as w:
        for i in range(6):
            w.put(rows(rng.integers(-500, 500, 200 + i).tolist()))
            if i % 2:
                w.flush()                       # entries of one and of two fragments
        w.delete(pa.table({"id": [3, -4]}))
        w.flush()
        memtable = w.memtables()[-1]
        lean = _sorted_entries(memtable, pa.int64())
        general = sort_entries(memtable.key_columns()[0], memtable.flushed_addresses())
        order = np.argsort(np.arange(memtable.num_rows)[::-1])  # any permutation
        assert np.array_equal(memtable.flushed_addresses(order.copy()),
                              memtable.flushed_addresses()[order])
        w.abort()
    keys = lean.column("values").to_numpy()
    assert np.all(keys[1:] >= keys[:-1])
    assert np.array_equal(keys, general.column("values").to_numpy())
    pairs = sorted(zip(keys.tolist(), lean.column("ids").to_pylist(), strict=True))
    assert pairs == sorted(zip(general.column("values").to_pylist(),
                               general.column("ids").to_pylist(), strict=True))
    assert lean.schema == general.schema
