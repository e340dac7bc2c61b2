"""Golden tests: Lance 2.1 / 2.2 files written by pylance, read by lance_sql.

Files are written at test time by the installed pylance (14.0.2). Every column is
compared with what pylance's own reader returns, for full reads, ``take`` of unsorted
rows with repeats, and row ranges that cut pages. A census asserts that the files really
contain the layouts and encodings these tests claim to cover.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, NULL_MODES, assert_same, table_of
from v2_helpers import (
    census,
    open_ours,
    pylance_read,
    pylance_write,
    random_rows,
)

pytest.importorskip("lance")

VERSIONS = ("2.1", "2.2")
ROWS = 1500


def _nulls(values: list, every: int = 3) -> list:
    return [None if i % every == 0 else v for i, v in enumerate(values)]


def _meta(name: str, arr: pa.Array, **kw: str) -> tuple[pa.Field, pa.Array]:
    meta = {f"lance-encoding:{k.replace('_', '-')}": v for k, v in kw.items()}
    return pa.field(name, arr.type, metadata=meta or None), arr


def special_table(n: int, version: str = "2.2") -> pa.Table:
    """The shapes the issue lists, plus the encodings pylance only uses when asked.

    Maps need file format 2.2 (pylance refuses them in 2.1).
    """
    rng = np.random.default_rng(7)
    st = pa.struct([("a", pa.int32()), ("b", pa.string())])
    cols = [
        _meta("const_int", pa.array(np.full(n, 7, np.int64))),
        _meta("const_str", pa.array(["same"] * n)),
        _meta("const_null_str", pa.array(_nulls(["same"] * n))),
        _meta("const_empty_str", pa.array([""] * n)),
        _meta("const_lstr", pa.array(_nulls(["abc"] * n), pa.large_string())),
        _meta("const_lbin", pa.array([b"xyz" * 100] * n, pa.large_binary())),
        _meta("const_bool", pa.array([True] * n)),
        _meta("all_null", pa.nulls(n, pa.int64())),
        _meta("null_type", pa.nulls(n)),
        _meta("seq", pa.array(np.arange(n, dtype=np.int64))),
        _meta("small_ints", pa.array(rng.integers(0, 100, n))),
        _meta("neg_ints", pa.array(rng.integers(-1000, 1000, n))),
        _meta("str_low", pa.array(_nulls([f"cat{i % 7}" for i in range(n)]))),
        _meta("str_high", pa.array([f"value-{i}-{rng.integers(10**9)}" for i in range(n)])),
        _meta("str_long", pa.array(_nulls(["x" * 300 + str(i) for i in range(n)]))),
        _meta("lstr", pa.array([f"L{i}" for i in range(n)], pa.large_string())),
        _meta("vec128", pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 128).astype(np.float32)), 128)),
        _meta("vec128_null", pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 128).astype(np.float32)), 128,
            mask=pa.array(np.arange(n) % 6 == 0))),
        _meta("vec4_item_null", pa.FixedSizeListArray.from_arrays(
            pa.array(_nulls(list(rng.random(n * 4).astype(np.float32)), 5), pa.float32()), 4)),
        _meta("empty_lists", pa.array([[]] * n, pa.list_(pa.int32()))),
        _meta("null_lists", pa.array([None] * n, pa.list_(pa.int32()))),
        _meta("lists", pa.array([None if i % 7 == 0 else ([] if i % 5 == 0 else
                                 _nulls(list(range(i % 4 + 1)), 2)) for i in range(n)],
                                pa.list_(pa.int64()))),
        _meta("large_lists", pa.array([list(range(i % 3)) for i in range(n)],
                                      pa.large_list(pa.int16()))),
        _meta("nested", pa.array([None if i % 13 == 0 else
                                  [None if j == 1 else list(range(j)) for j in range(i % 4)]
                                  for i in range(n)], pa.list_(pa.list_(pa.int32())))),
        _meta("list_struct", pa.array([[{"a": j, "b": None if j == 1 else f"y{j}"}
                                        for j in range(i % 3)] for i in range(n)],
                                      pa.list_(st))),
        _meta("null_struct", pa.array([None if i % 4 == 0 else
                                       {"a": None if i % 3 == 0 else i, "b": f"b{i}"}
                                       for i in range(n)], st)),
        _meta("struct_struct", pa.array([None if i % 5 == 0 else
                                         {"in": None if i % 3 == 0 else {"v": i}}
                                         for i in range(n)],
                                        pa.struct([("in", pa.struct([("v", pa.int64())]))]))),
        _meta("struct_list", pa.array([None if i % 6 == 0 else
                                       {"l": None if i % 4 == 0 else list(range(i % 3)), "z": i}
                                       for i in range(n)],
                                      pa.struct([("l", pa.list_(pa.int32())),
                                                 ("z", pa.int64())]))),
        _meta("map", pa.array([[(f"k{j}", j) for j in range(i % 3)] if i % 7 else None
                               for i in range(n)], pa.map_(pa.string(), pa.int64()))),
        _meta("list_vec", pa.array([[[1.0, 2.0]] * (i % 3) for i in range(n)],
                                   pa.list_(pa.list_(pa.float32(), 2)))),
        _meta("dec", pa.array([decimal.Decimal(i) / 100 for i in range(n)],
                              pa.decimal128(10, 2))),
        # encodings pylance applies only on request
        _meta("i_zstd", pa.array(rng.integers(0, 1 << 40, n)), compression="zstd"),
        _meta("s_lz4", pa.array(_nulls([f"s{rng.integers(10**9)}" for _ in range(n)])),
              compression="lz4"),
        _meta("f_bss", pa.array(np.round(rng.random(n), 3)), compression="zstd", bss="on"),
        _meta("rle", pa.array(np.repeat(np.arange(n // 50 + 1), 50)[:n].astype(np.int32)),
              rle_threshold="0.9"),
        _meta("fz_str", pa.array(_nulls([f"s{i}" for i in range(n)])),
              structural_encoding="fullzip"),
        _meta("fz_list", pa.array([None if i % 5 == 0 else list(range(i % 4)) for i in range(n)],
                                  pa.list_(pa.int32())), structural_encoding="fullzip"),
        _meta("packed", pa.array([None if i % 9 == 0 else {"a": i, "b": i / 2} for i in range(n)],
                                 pa.struct([("a", pa.int32()), ("b", pa.float64())])),
              packed="true"),
        _meta("blob", pa.array([bytes(rng.integers(0, 256, 100 + i % 50, dtype=np.uint8))
                                if i % 4 else None for i in range(n)], pa.large_binary()),
              blob="true"),
    ]  # fmt: skip
    if version == "2.1":
        cols = [c for c in cols if not pa.types.is_map(c[1].type)]
    return pa.table([c[1] for c in cols], schema=pa.schema([c[0] for c in cols]))


class Golden:
    def __init__(self, tmp, version: str, table: pa.Table, **kw) -> None:
        path = tmp / f"golden-{version}.lance"
        self.table = table
        self.data = pylance_write(path, table, version, **kw)
        self.expected = pylance_read(path)
        self.reader, self.cmap = open_ours(self.data, str(path))

    def field(self, name: str):
        return next(f for f in self.reader.schema.fields if f.name == name)


@pytest.fixture(scope="module")
def kinds_files(tmp_path_factory):
    cache: dict = {}

    def get(version: str, mode: str) -> Golden:
        if (version, mode) not in cache:
            tmp = tmp_path_factory.mktemp(f"kinds-{version}-{mode}")
            table = table_of(ALL_KINDS, ROWS, mode, seed=3)
            cache[version, mode] = Golden(tmp, version, table, batch_rows=300,
                                          data_cache_bytes=16 * 1024)
        return cache[version, mode]

    return get


@pytest.fixture(scope="module")
def special_files(tmp_path_factory):
    cache: dict = {}

    def get(version: str) -> Golden:
        if version not in cache:
            tmp = tmp_path_factory.mktemp(f"special-{version}")
            table = special_table(ROWS, version)
            cache[version] = Golden(tmp, version, table, batch_rows=500,
                                     data_cache_bytes=64 * 1024)
        return cache[version]

    return get


def _check(golden: Golden, name: str, seed: int) -> None:
    reader, cmap, expected = golden.reader, golden.cmap, golden.expected.column(name)
    field = golden.field(name)
    assert_same(reader.read([field], cmap)[0], expected, f"read {name}")
    rows = random_rows(reader.num_rows, 80, seed)
    assert_same(reader.take([field], cmap, rows)[0], expected.take(pa.array(rows)), f"take {name}")
    for start, stop in ((0, 1), (3, 700), (reader.num_rows - 5, reader.num_rows)):
        got = reader.read([field], cmap, offset=start, length=stop - start)[0]
        assert_same(got, expected.slice(start, stop - start), f"rows {start}..{stop} of {name}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", NULL_MODES)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_matches_pylance(kinds_files, version: str, mode: str, kind: str) -> None:
    golden = kinds_files(version, mode)
    _check(golden, kind.replace(":", "_"), seed=hash((version, mode, kind)) % 1000)


SPECIAL = special_table(10).column_names


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", SPECIAL)
def test_special_shapes_match_pylance(special_files, version: str, name: str) -> None:
    golden = special_files(version)
    if name not in golden.table.column_names:
        pytest.skip(f"pylance cannot write {name} in {version}")
    _check(golden, name, seed=len(name))


def test_pylance_reads_equal_the_input(special_files) -> None:
    """Sanity of the golden data itself: pylance returns what it was given."""
    golden = special_files("2.2")
    for name in ("lists", "nested", "null_struct", "vec128_null", "str_long", "map"):
        assert_same(golden.expected.column(name), golden.table.column(name), name)


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_files_cover_the_layouts(special_files, kinds_files, version: str) -> None:
    seen = census(special_files(version).data) + census(kinds_files(version, "some").data)
    layouts = {"mini_block_layout", "full_zip_layout", "constant_layout", "blob_layout"}
    encodings = {
        "flat", "variable", "inline_bitpacking", "out_of_line_bitpacking", "fsst", "rle",
        "byte_stream_split", "general", "fixed_size_list", "packed_struct", "page_dictionary",
    }  # fmt: skip
    missing = sorted((layouts | encodings) - set(seen))
    assert not missing, f"golden {version} files lack {missing}: {seen}"


def test_multi_page_columns(kinds_files) -> None:
    from v2_helpers import page_layouts

    pages = page_layouts(kinds_files("2.2", "some").data)
    assert max(len(p) for p in pages) > 2, "expected columns spanning several pages"


@pytest.mark.parametrize("version", VERSIONS)
def test_whole_file_and_empty_reads(special_files, version: str) -> None:
    golden = special_files(version)
    got = golden.reader.read(golden.reader.schema.fields, golden.cmap, offset=10, length=0)
    assert [len(a) for a in got] == [0] * len(got)
    rows = np.array([5, 1, 5, golden.reader.num_rows - 1])
    got = golden.reader.take(golden.reader.schema.fields, golden.cmap, rows)
    for field, arr in zip(golden.reader.schema.fields, got, strict=True):
        assert_same(arr, golden.expected.column(field.name).take(pa.array(rows)), field.name)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_file(tmp_path, version: str) -> None:
    table = special_table(3, version).slice(0, 0)
    data = pylance_write(tmp_path / "empty.lance", table, version)
    reader, cmap = open_ours(data)
    assert reader.num_rows == 0
    assert [len(a) for a in reader.read(reader.schema.fields, cmap)] == [0] * table.num_columns


def test_zero_width_binary_reads_as_empty_values(tmp_path) -> None:
    """pylance 2.2 stores ``fixed_size_binary(0)`` as values of no bits (a constant page
    of an empty value); they are empty values, not NULLs (all read as NULL before)."""
    table = pa.table({"f": pa.array([b"", b"", None, b""], pa.binary(0)),
                      "l": pa.array([[b""], None, [b"", None], []], pa.list_(pa.binary(0)))})
    data = pylance_write(tmp_path / "zero.lance", table, "2.2")
    reader, cmap = open_ours(data)
    for field in reader.schema.fields:
        assert_same(reader.read([field], cmap)[0], table.column(field.name), field.name)
        taken = reader.take([field], cmap, np.array([2, 0, 3]))[0]
        assert_same(taken, table.column(field.name).take([2, 0, 3]), field.name)
