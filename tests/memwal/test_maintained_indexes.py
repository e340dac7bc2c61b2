"""Base-table BTREE indexes the MemWAL index lists as maintained are rebuilt in every
flushed generation (same name and column, generation row addresses), next to the
primary-key index; lance_sql and pylance both list and use them."""

from __future__ import annotations

import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, UnsupportedFeatureError
from lance_sql.format.index import decode_index_section
from lance_sql.memwal.naming import RegionPaths
from lance_sql.table.index.btree import BTreeIndex


def _base(path: Path, maintained: list[str] | None) -> lance_sql.LanceDataset:
    rows = pa.table({"id": pa.array(range(10), pa.int64()),
                     "v": pa.array([float(i % 4) for i in range(10)]),
                     "s": [f"s{i}" for i in range(10)]})
    ds = lance_sql.write_dataset(rows, str(path), primary_key=["id"])
    ds.create_scalar_index("v", "BTREE")
    ds.create_scalar_index("s", "BTREE", name="s_custom")
    ds.create_scalar_index("id", "BTREE")
    ds = lance_sql.dataset(str(path))
    ds.initialize_mem_wal(maintained_indexes=maintained)
    return lance_sql.dataset(str(path))


def _flush_generation(ds: lance_sql.LanceDataset) -> str:
    region = uuid.uuid4()
    with ds.mem_wal.writer(region=region, max_wal_flush_interval_ms=3_600_000) as w:
        w.put(pa.table({"id": pa.array([1, 2, 30, 31], pa.int64()),
                        "v": [7.0, None, 7.0, 8.0], "s": ["a", "b", "c", "d"]}))
        w.flush()
        w.put(pa.table({"id": pa.array([2, 40], pa.int64()), "v": [9.0, 7.0],
                        "s": ["b2", "e"]}))
        w.delete(pa.table({"id": pa.array([31], pa.int64())}))
        flushed = w.flush_memtable()
    assert flushed is not None
    return f"{ds.uri}/{RegionPaths(region).generation(flushed.path)}"


def _index_names(uri: str) -> set[str]:
    manifest = lance_sql.dataset(uri).manifest
    return {i.name for i in decode_index_section(manifest.index_section)}


def test_maintained_btrees_are_built_in_each_generation(tmp_path: Path) -> None:
    ds = _base(tmp_path / "t.lance", ["v_idx"])
    gen_uri = _flush_generation(ds)
    assert _index_names(gen_uri) == {"id_idx", "v_idx"}
    gen = lance_sql.dataset(gen_uri)
    (meta,) = [i for i in decode_index_section(gen.manifest.index_section)
               if i.name == "v_idx"]
    entries = BTreeIndex.open(gen.store, gen.manifest, meta, pa.float64()).entries()
    rows = gen.to_table(with_row_address=True)
    by_address = dict(zip(rows.column("_rowaddr").to_pylist(), rows.column("v").to_pylist(),
                          strict=True))
    indexed = list(zip(entries.column("values").to_pylist(),
                       entries.column("ids").to_pylist(), strict=True))
    assert sorted(a for _, a in indexed) == sorted(by_address)  # every row, tombstones too
    assert all(by_address[a] == v for v, a in indexed)
    # both libraries answer a filter on the column with the generation's index
    theirs = lance.dataset(gen_uri)
    assert {i.name for i in theirs.describe_indices()} == {"id_idx", "v_idx"}
    assert "ScalarIndexQuery" in theirs.scanner(filter="v = 7.0").explain_plan()
    want = sorted(theirs.to_table(filter="v = 7.0").column("id").to_pylist())
    assert want == [1, 30, 40]
    assert sorted(gen.to_table(filter="v = 7.0").column("id").to_pylist()) == want
    assert "v_idx" in gen.scanner(filter="v = 7.0").explain_plan()


def test_all_indexes_by_default_and_none_when_the_list_is_empty(tmp_path: Path) -> None:
    every = _base(tmp_path / "all.lance", None)
    assert _index_names(_flush_generation(every)) == {"id_idx", "v_idx", "s_custom"}
    none = _base(tmp_path / "none.lance", [])
    assert _index_names(_flush_generation(none)) == {"id_idx"}


def test_index_types_a_memtable_cannot_build(tmp_path: Path) -> None:
    """A bitmap index (made by pylance) named explicitly refuses the writer; under "all
    indexes" it is skipped."""
    path = tmp_path / "t.lance"
    _base(path, None)
    lance.dataset(str(path)).create_scalar_index("s", "BITMAP", name="s_bitmap")
    skipped = lance_sql.dataset(str(path))
    assert _index_names(_flush_generation(skipped)) == {"id_idx", "v_idx", "s_custom"}

    other = tmp_path / "u.lance"
    rows = pa.table({"id": pa.array([1], pa.int64()), "s": ["x"]})
    lance_sql.write_dataset(rows, str(other), primary_key=["id"])
    lance.dataset(str(other)).create_scalar_index("s", "BITMAP", name="s_bitmap")
    lance_sql.dataset(str(other)).initialize_mem_wal(maintained_indexes=["s_bitmap"])
    with pytest.raises(UnsupportedFeatureError, match="s_bitmap"):
        lance_sql.dataset(str(other)).mem_wal.writer(region=uuid.uuid4())


@pytest.mark.parametrize("maintained", [None, ["id_idx"]])
def test_an_index_named_as_the_key_index_is_not_maintained(tmp_path: Path,
                                                           maintained: list[str] | None
                                                           ) -> None:
    """A generation's key index is ``id_idx``: a base index of that name on another
    column gave the generation two ``id_idx``, and pylance answered ``id = 2`` from the
    wrong one. Under "all indexes" it is skipped; named, the writer refuses it."""
    path = tmp_path / "t.lance"
    rows = pa.table({"id": pa.array(range(10), pa.int64()),
                     "v": pa.array([float(i % 4) for i in range(10)]),
                     "s": [f"s{i}" for i in range(10)]})
    ds = lance_sql.write_dataset(rows, str(path), primary_key=["id"])
    ds.create_scalar_index("v", "BTREE", name="id_idx")
    lance_sql.dataset(str(path)).initialize_mem_wal(maintained_indexes=maintained)
    ds = lance_sql.dataset(str(path))
    if maintained is not None:
        with pytest.raises(InvalidInputError, match="another name"):
            ds.mem_wal.writer(region=uuid.uuid4())
        return
    gen_uri = _flush_generation(ds)
    gen = lance_sql.dataset(gen_uri)
    entries = [i for i in decode_index_section(gen.manifest.index_section)]
    assert [(i.name, list(i.fields)) for i in entries] == [
        ("id_idx", [gen.manifest.schema.field("id").id])]
    theirs = lance.dataset(gen_uri).to_table(filter="id = 2").to_pylist()
    assert {r["id"] for r in theirs} == {2}  # (both of its puts: the generation holds them)
