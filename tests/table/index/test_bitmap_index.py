"""BITMAP scalar indices: built by either library, used by both, kept right through change.

Every query is checked three ways: lance_sql with the index, lance_sql scanning
(``use_scalar_index=False``) and pylance, every row compared; and the index is shown to
have answered (lance_sql's explain_plan, pylance's ScalarIndexQuery).
"""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_sql
from lance_sql.errors import FormatError, IndexFallbackWarning, InvalidInputError

N = 3000
SORT = [("payload", "ascending")]


def _table(n: int = N, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    nulls = i % 13 == 0
    return pa.table({
        "i32": pa.array(np.where(nulls, 0, i % 500), pa.int32(), mask=nulls),
        "f64": pa.array(np.where(i % 17 == 0, np.nan, (i % 300) / 4), pa.float64(), mask=nulls),
        "s": pa.array([f"k{v % 400:04d}" for v in i], pa.string(), mask=nulls),
        "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(v % 900)) for v in i],
                      pa.date32(), mask=nulls),
        "b": pa.array(i % 3 == 0, pa.bool_(), mask=nulls),
        "payload": pa.array([f"row-{v}" for v in i]),
    })


FILTERS = {
    "i32": ["i32 = 7", "i32 IN (1, 2, 499)", "i32 < 3", "i32 IS NULL", "i32 BETWEEN 10 AND 12",
            "i32 = 4 OR i32 > 497", "i32 = 5 AND payload != 'row-5'"],
    "f64": ["f64 = 2.5", "f64 < 0.5", "f64 IS NULL", "f64 IN (0.25, 3.0)"],
    "s": ["s = 'k0005'", "s IN ('k0001', 'k0399', 'zzz')", "s < 'k0002'", "s IS NULL",
          "s BETWEEN 'k0100' AND 'k0101'"],
    "d": ["d = DATE '2020-01-05'", "d < DATE '2020-01-03'", "d IS NULL"],
    "b": ["b = true AND i32 < 30", "b IS NULL"],
}


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (floats compared as their text)."""
    def text(t: pa.Table) -> pa.Table:
        return pa.table({n: c.cast(pa.string()) if pa.types.is_floating(c.type) else c
                         for n, c in zip(t.column_names, t.columns, strict=True)})
    return a.schema.equals(b.schema) and text(a).equals(text(b))


def _check(path: Path, flt: str, index: str) -> pa.Table:
    """lance_sql with the index == lance_sql scanning == pylance (every row); the
    index answered in lance_sql and in pylance."""
    ds = lance_sql.dataset(path)
    scanner = ds.scanner(filter=flt)
    assert f"@{index}(Bitmap)" in scanner.explain_plan(), flt
    got = scanner.to_table()
    assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
    assert _same(ds.to_table(filter=flt, use_scalar_index=True), got), flt
    theirs = lance.dataset(str(path))
    assert f"@{index}(Bitmap)" in theirs.scanner(filter=flt).explain_plan(), flt
    assert _same(got.sort_by(SORT), theirs.to_table(filter=flt).sort_by(SORT)), flt
    return got


def _bitmap_file(path: Path, name: str) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        uuid = next(i["uuid"] for i in lance.dataset(str(path)).list_indices()
                    if i["name"] == name)
    return LanceFileReader(str(path / "_indices" / uuid / "bitmap_page_lookup.lance")
                           ).read_all().to_table()


@pytest.mark.parametrize("key", sorted(FILTERS))
def test_pylance_bitmap_answers_lance_sql(tmp_path: Path, key: str) -> None:
    path = tmp_path / "t.lance"
    lance.write_dataset(_table(), str(path), max_rows_per_file=1000).create_scalar_index(
        key, "BITMAP")
    for flt in FILTERS[key]:
        _check(path, flt, f"{key}_idx")
    [info] = lance_sql.dataset(path).list_indices()
    assert (info["type"], info["fields"]) == ("Bitmap", [key])


@pytest.mark.parametrize("key", sorted(FILTERS))
def test_lance_sql_bitmap_answers_pylance_and_matches_its_file(tmp_path: Path,
                                                               key: str) -> None:
    ours, theirs = tmp_path / "ours.lance", tmp_path / "theirs.lance"
    lance_sql.write_dataset(_table(), ours, max_rows_per_file=1000).create_scalar_index(
        key, "BITMAP")
    lance.write_dataset(_table(), str(theirs), max_rows_per_file=1000).create_scalar_index(
        key, "BITMAP")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        [info] = lance.dataset(str(ours)).list_indices()
    assert (info["name"], info["type"], sorted(info["fragment_ids"])) == (
        f"{key}_idx", "Bitmap", [0, 1, 2])
    [described] = lance.dataset(str(ours)).describe_indices()
    assert (described.type_url, described.num_rows_indexed) == (
        "/lance.table.BitmapIndexDetails", N)
    mine, reference = _bitmap_file(ours, f"{key}_idx"), _bitmap_file(theirs, f"{key}_idx")
    assert mine.schema == reference.schema and mine.schema.metadata == reference.schema.metadata
    assert _same(mine, reference)  # the same keys and the same serialized row sets
    for flt in FILTERS[key]:
        _check(ours, flt, f"{key}_idx")


def test_appends_deletes_and_optimize(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds.create_scalar_index("s", "bitmap")  # pylance takes the name in any case
    ds.delete("payload IN ('row-5', 'row-405', 'row-1')")
    ds = lance_sql.write_dataset(_table(500, start=N), path, mode="append")
    flt = "s IN ('k0005', 'k0001')"
    plan = ds.scanner(filter=flt).explain_plan()
    assert "indexed 3 of 4 fragments" in plan  # the appended fragment is scanned
    got = _check(path, flt, "s_idx")
    assert "row-5" not in got.column("payload").to_pylist()  # deleted rows stay deleted
    assert {"row-3205", "row-3201"} <= set(got.column("payload").to_pylist())
    ds.optimize.optimize_indices()
    [info] = ds.list_indices()
    assert sorted(info["fragment_ids"]) == [0, 1, 2, 3]
    assert "indexed 4 of 4 fragments" in ds.scanner(filter=flt).explain_plan()
    _check(path, flt, "s_idx")
    # pylance appends, we read its unindexed fragment and then its optimized index
    lance.write_dataset(_table(200, start=N + 500), str(path), mode="append")
    _check(path, "s = 'k0099'", "s_idx")
    lance.dataset(str(path)).optimize.optimize_indices()
    assert "indexed 5 of 5 fragments" in lance_sql.dataset(path).scanner(
        filter="s = 'k0099'").explain_plan()
    _check(path, "s = 'k0099'", "s_idx")


def test_stable_row_ids_hold_row_ids(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.lance", tmp_path / "theirs.lance"
    for lib, path in ((lance_sql, ours), (lance, theirs)):
        ds = lib.write_dataset(_table(), str(path), max_rows_per_file=1000,
                               enable_stable_row_ids=True)
        ds.delete("i32 < 250")
        ds.optimize.compact_files()  # rows move: ids and addresses part
        ds = lib.dataset(str(path))
        ds.create_scalar_index("s", "BITMAP")
    assert _same(_bitmap_file(ours, "s_idx"), _bitmap_file(theirs, "s_idx"))
    for path in (ours, theirs):
        for flt in FILTERS["s"]:
            _check(path, flt, "s_idx")


def test_replace_and_names(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path)
    ds.create_scalar_index("i32", "BITMAP", name="by_i32")
    first = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("i32", "BITMAP", name="by_i32")  # replace=True by default
    assert [i["uuid"] for i in ds.list_indices()] != [first]
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.create_scalar_index("i32", "BITMAP", name="by_i32", replace=False)
    _check(path, "i32 = 9", "by_i32")


def test_corrupt_bitmap_file(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path)
    ds.create_scalar_index("s", "BITMAP")
    [file] = (path / "_indices").glob("*/bitmap_page_lookup.lance")
    file.write_bytes(file.read_bytes()[:40])
    ds = lance_sql.dataset(path)
    with pytest.raises(FormatError, match="bitmap_page_lookup.lance"):
        ds.to_table(filter="s = 'k0001'", use_scalar_index=True)
    with pytest.warns(IndexFallbackWarning):
        got = ds.to_table(filter="s = 'k0001'")
    assert got.equals(ds.to_table(filter="s = 'k0001'", use_scalar_index=False))


@pytest.mark.parametrize("lib", [lance_sql, lance], ids=["lance_sql", "pylance"])
def test_compaction_moves_the_index(tmp_path: Path, lib: object) -> None:
    """Compacting either library's table keeps the bitmap covering the moved rows, at
    their new addresses (pylance's Rewrite lists the rewritten index; so does ours)."""
    path = tmp_path / "t.lance"
    ds = lib.write_dataset(_table(), str(path), max_rows_per_file=500)  # type: ignore[attr-defined]
    ds.create_scalar_index("s", "BITMAP")
    ds.delete("i32 % 7 = 0")
    ds.optimize.compact_files(target_rows_per_fragment=10_000)
    [info] = lance_sql.dataset(path).list_indices()
    assert sorted(info["fragment_ids"]) == [6]
    for flt in FILTERS["s"]:
        _check(path, flt, "s_idx")
