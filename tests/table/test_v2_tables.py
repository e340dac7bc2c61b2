"""Tables pylance writes with its default data files (2.2) or 2.1, read through lance_sql.

Several fragments, deletions and appends; results must equal pylance's own reads. Mixed
2.0 + 2.2 tables (feature flag 256) read too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_sql

lance = pytest.importorskip("lance")

N = 6000


def _flat(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    i = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(i, pa.int64()),
        "x": pa.array(rng.random(n)),
        "small": pa.array(i % 100, pa.int32()),
        "s": pa.array([f"value-{v}-{rng.integers(10**6)}" for v in i]),
        "cat": pa.array([None if v % 11 == 0 else f"c{v % 7}" for v in i]),
        "long": pa.array(["L" * 300 + str(v) if v % 5 else None for v in i]),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 128).astype(np.float32)), 128),
    })  # fmt: skip


def _nested(start: int, n: int) -> pa.Table:
    i = np.arange(start, start + n)
    st = pa.struct([("a", pa.int64()), ("b", pa.string())])
    return pa.table({
        "id": pa.array(i, pa.int64()),
        "l": pa.array([None if v % 7 == 0 else list(range(v % 4)) for v in i],
                      pa.list_(pa.int32())),
        "st": pa.array([None if v % 5 == 0 else {"a": int(v), "b": str(v)} for v in i], st),
    })  # fmt: skip


def _same(sql_table: pa.Table, py_table: pa.Table) -> None:
    assert sql_table.column_names == py_table.column_names
    for name in py_table.column_names:
        a = sql_table.column(name).combine_chunks()
        b = py_table.column(name).combine_chunks()
        assert a.type == b.type, name
        assert a.equals(b) or a.to_pylist() == b.to_pylist(), name


@pytest.fixture(params=[None, "2.1"], ids=["default-2.2", "2.1"])
def flat_uri(request, tmp_path) -> str:
    uri = str(tmp_path / "flat.lance")
    kw = {} if request.param is None else {"data_storage_version": request.param}
    lance.write_dataset(_flat(0, N), uri, max_rows_per_file=2500, **kw)
    ds = lance.dataset(uri)
    ds.delete("id % 13 = 4 OR id BETWEEN 100 AND 180")
    lance.write_dataset(_flat(N, 1000), uri, mode="append")
    assert lance.dataset(uri).data_storage_version == (request.param or "2.2")
    return uri


def test_scan_matches_pylance(flat_uri: str) -> None:
    py, sql = lance.dataset(flat_uri), lance_sql.dataset(flat_uri)
    assert len(py.get_fragments()) == len(sql.get_fragments()) >= 4
    assert sql.count_rows() == py.count_rows()
    _same(sql.to_table(), py.to_table())
    _same(sql.to_table(columns=["s", "vec"]), py.to_table(columns=["s", "vec"]))


def test_take_matches_pylance(flat_uri: str) -> None:
    py, sql = lance.dataset(flat_uri), lance_sql.dataset(flat_uri)
    rows = np.random.default_rng(3).integers(0, py.count_rows(), 300)
    rows = np.unique(rows)
    _same(sql.take(rows), py.take(rows))


def test_filters_match_pylance(flat_uri: str) -> None:
    py, sql = lance.dataset(flat_uri), lance_sql.dataset(flat_uri)
    for expr in ("small < 10", "cat = 'c3'", "cat IS NULL"):
        assert sql.count_rows(expr) == py.count_rows(expr), expr
        _same(sql.to_table(filter=expr), py.to_table(filter=expr))


def test_nested_columns_match_pylance(tmp_path) -> None:
    uri = str(tmp_path / "nested.lance")
    lance.write_dataset(_nested(0, 3000), uri, max_rows_per_file=1000)
    lance.dataset(uri).delete("id % 9 = 2")
    py, sql = lance.dataset(uri), lance_sql.dataset(uri)
    _same(sql.to_table(), py.to_table())


def test_mixed_2_0_and_2_2_files(tmp_path) -> None:
    uri = str(tmp_path / "mixed.lance")
    lance.write_dataset(_flat(0, 500), uri, data_storage_version="2.0")
    lance.write_dataset(_flat(500, 500), uri, mode="append", data_storage_version="2.2")
    py = lance.dataset(uri)
    versions = {(f.file_major_version, f.file_minor_version)
                for frag in py.get_fragments() for f in frag.metadata.files}  # fmt: skip
    assert versions == {(2, 0), (2, 2)}
    sql = lance_sql.dataset(uri)
    _same(sql.to_table(), py.to_table())
    rows = np.array([3, 499, 500, 999])
    _same(sql.take(rows), py.take(rows))


def test_struct_layers_above_lists_read_in_pylance(tmp_path) -> None:
    """Two shapes pylance 14's reader is picky about: struct nulls that start only in a
    later page, and empty outer lists above a struct that holds a list."""
    n = 400_000  # several pages per column
    lists = pa.ListArray.from_arrays(pa.array(np.arange(0, n * 20 + 1, 20, dtype=np.int32)),
                                     pa.array(np.arange(n * 20, dtype=np.int64)))
    mask = np.zeros(n, bool)
    mask[n // 2 :: 3] = True
    st = pa.StructArray.from_arrays([lists, pa.array(np.arange(n))], names=["a", "b"],
                                    mask=pa.array(mask))
    item = pa.struct([("a", pa.list_(pa.int8())), ("b", pa.int8())])
    shapes = {
        "late_nulls": pa.table({"st": st}),
        "empty_outer": pa.table({"c": pa.array(
            [[], None, [{"a": None, "b": None}, None, {"a": [], "b": 1}], [{"a": [1], "b": 2}]],
            pa.list_(item))}),
    }
    for name, data in shapes.items():
        uri = str(tmp_path / f"{name}.lance")
        lance_sql.write_dataset(data, uri, max_rows_per_file=n)
        assert lance.dataset(uri).to_table() == data, name
        assert lance_sql.dataset(uri).to_table() == data, name
