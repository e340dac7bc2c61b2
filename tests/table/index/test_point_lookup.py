"""Point lookups through BTREE indices: the lean paths give what scanning gives.

Index search decodes only the values of the pages it visits and takes the ids it finds;
the rows are taken on the point path of the data files; a scan that the index answers in
full never translates its filter to pyarrow. Each is compared with the same query
scanned without the index, over tables of several fragments and pages with nulls,
deletions and appended (unindexed) fragments, in data formats 2.0, 2.1 and 2.2, for
integer, float, string, binary, boolean and timestamp columns.
"""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.datafile import point, point_pages
from lance_sql.table.read import scan

ROWS = 30_000


def _data(rows: int, seed: int, base: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.int64) + base
    some_null = rng.random(rows) < 0.15
    words = [f"key-{i:06d}" for i in ids]
    return pa.table({
        "id": pa.array(ids),
        "s": pa.array(words),
        "f": pa.array(rng.standard_normal(rows), mask=some_null),
        "i32": pa.array(rng.integers(-1000, 1000, rows).astype(np.int32), mask=some_null),
        "b": pa.array([w.encode() for w in words], pa.binary(), mask=some_null),
        "flag": pa.array(rng.random(rows) < 0.5, mask=some_null),
        "ts": pa.array(ids * 1000, pa.timestamp("us")),
        "name": pa.array([f"n{i % 97}" for i in ids], mask=some_null),
    })


def _same(a: pa.Table, b: pa.Table) -> bool:
    return a.schema.equals(b.schema) and a.sort_by("id").equals(b.sort_by("id"))


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def table(request, tmp_path_factory) -> tuple[Path, pa.Table]:
    """A table of 3 fragments, indexed on ``id`` and ``s``, then rows deleted and a
    fragment appended that the indices do not cover."""
    path = tmp_path_factory.mktemp(f"t{request.param.replace('.', '')}") / "t.lance"
    data = _data(ROWS, 0)
    if request.param == "2.1":  # lance_sql writes 2.0 and 2.2; pylance writes 2.1
        lance.write_dataset(data, str(path), max_rows_per_file=10_000,
                            data_storage_version="2.1")
    else:
        lance_sql.write_dataset(data, path, max_rows_per_file=10_000,
                                data_storage_version=request.param)
    ds = lance_sql.dataset(path)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("s", "BTREE")
    ds.delete("id % 13 = 5")
    extra = _data(2_000, 1, base=ROWS)
    if request.param == "2.1":
        lance.write_dataset(extra, str(path), mode="append")
    else:
        lance_sql.write_dataset(extra, path, mode="append")
    return path, pa.concat_tables([data, extra])


def _keys(data: pa.Table, count: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    ids = data.column("id").to_numpy()
    return [int(ids[i]) for i in rng.integers(0, len(ids), count)] + [-1, 10**9]


def test_point_lookups_match_scans(table) -> None:
    path, data = table
    ds = lance_sql.dataset(path)
    for k in _keys(data, 25, 1):
        for flt in (f"id = {k}", f"s = 'key-{k:06d}'", f"id = {k} AND i32 IS NOT NULL",
                    f"{k} = id"):
            got = ds.to_table(filter=flt)
            assert "ScalarIndexQuery" in ds.scanner(filter=flt).explain_plan()
            assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
            assert got.num_rows <= 1
        deleted = k % 13 == 5 and 0 <= k < ROWS
        assert ds.to_table(filter=f"id = {k}").num_rows == int(
            k in set(data.column("id").to_pylist()) and not deleted)


def test_sets_and_ranges_match_scans(table) -> None:
    path, data = table
    ds = lance_sql.dataset(path)
    keys = _keys(data, 100, 2)
    words = ", ".join(f"'key-{k:06d}'" for k in keys[:60])
    filters = [f"id IN ({', '.join(map(str, keys))})", f"s IN ({words})",
               "id >= 1000 AND id < 1030", "s >= 'key-002000' AND s < 'key-002040'",
               "s BETWEEN 'key-029990' AND 'key-030010'", "id < 5 OR id > 31995"]
    for flt in filters:
        got = ds.to_table(filter=flt)
        assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
        assert got.num_rows


def test_only_index_answered_scans_skip_the_pyarrow_filter(tmp_path, monkeypatch) -> None:
    """With every fragment answered by the index, no pyarrow filter is made; with a
    fragment to scan it is, and both give the scanned rows."""
    calls: list[str] = []
    to_pyarrow = scan.to_pyarrow

    def counted(expr, schema):
        calls.append(str(expr))
        return to_pyarrow(expr, schema)

    monkeypatch.setattr(scan, "to_pyarrow", counted)
    path = tmp_path / "t"
    ds = lance_sql.write_dataset(_data(5_000, 0), path, max_rows_per_file=2_000)
    ds.create_scalar_index("id", "BTREE")
    ds = lance_sql.dataset(path)
    got = ds.to_table(filter="id = 77")
    assert got.num_rows == 1 and not calls
    assert ds.count_rows("id = 77") == 1 and not calls
    assert _same(got, ds.to_table(filter="id = 77", use_scalar_index=False)) and calls
    calls.clear()
    lance_sql.write_dataset(_data(100, 9, base=5_000), path, mode="append")
    ds = lance_sql.dataset(path)
    assert _same(ds.to_table(filter="id = 77"),
                 ds.to_table(filter="id = 77", use_scalar_index=False))
    assert calls  # the appended fragment is scanned with the filter
    with pytest.raises(lance_sql.errors.InvalidInputError):
        ds.scanner(filter="id = 'abc'")


def test_lookups_use_the_point_paths(table, monkeypatch) -> None:
    """A lookup takes its rows and the index ids on the point path (2.1+), and the same
    lookups with the point path off give the same rows."""
    path, data = table
    version = lance_sql.dataset(path).data_storage_version
    taken: list[str] = []
    take_leaf = point.take_leaf

    def counted(column, rows, **kw):
        out = take_leaf(column, rows, **kw)
        if out is not None:
            taken.append(column.where)
        return out

    ints_at = point.ints_at

    def counted_ints(column, start, stop):  # one key's index ids, read one by one
        out = ints_at(column, start, stop)
        if out is not None:
            taken.append(column.where)
        return out

    monkeypatch.setattr(point, "take_leaf", counted)
    monkeypatch.setattr(point, "ints_at", counted_ints)
    lance_sql.default_runtime().cache.clear()
    ds = lance_sql.dataset(path)
    keys = _keys(data, 10, 3)
    fast = [ds.to_table(filter=f"id = {k}") for k in keys]
    assert any("page_data.lance" in w for w in taken)  # the ids of the index
    assert any("page_data.lance" not in w for w in taken) == (version != "2.0")
    monkeypatch.setattr(point, "take_leaf", lambda *a, **k: None)  # the general path
    monkeypatch.setattr(point_pages, "take_pages", lambda parts: None)
    monkeypatch.setattr(point, "ints_at", lambda *a, **k: None)
    monkeypatch.setattr(point, "search_sorted", lambda *a, **k: None)
    lance_sql.default_runtime().cache.clear()
    slow = [lance_sql.dataset(path).to_table(filter=f"id = {k}") for k in keys]
    for a, b in zip(fast, slow, strict=True):
        assert a.equals(b)
