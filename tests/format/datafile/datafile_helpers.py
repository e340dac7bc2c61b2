"""Shared helpers for the data-file tests: a catalogue of typed columns and round-trip utilities."""

from __future__ import annotations

import decimal
import io
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import any_pb2

from lance_sql.format.datafile import BytesSource, LanceFileReader, LanceFileWriter, WrittenFile
from lance_sql.format.datafile.container import FOOTER_SIZE
from lance_sql.format.pb import encodings_v2_0_pb2 as enc
from lance_sql.format.pb import file2_pb2
from lance_sql.format.schema import LanceSchema

NULL_MODES = ("none", "some", "all")


def _mask(n: int, mode: str, rng: np.random.Generator) -> np.ndarray | None:
    if mode == "none":
        return None
    if mode == "all":
        return np.ones(n, bool)
    return rng.random(n) < 0.3


def _strings(n: int, rng: np.random.Generator, card: int | None = None) -> list[str]:
    if card is not None:
        return [f"cat-{i}" for i in rng.integers(0, card, n)]
    lengths = rng.integers(0, 12, n)
    return [
        "".join(chr(97 + int(c)) for c in rng.integers(0, 26, k)) + "é" * (k % 3) for k in lengths
    ]


def _ints(n: int, rng: np.random.Generator, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def make_column(kind: str, n: int, mode: str, seed: int = 0) -> pa.Array:
    """A column of ``kind`` with ``n`` rows and nulls per ``mode`` (none / some / all)."""
    rng = np.random.default_rng(seed)
    mask = _mask(n, mode, rng)

    def arr(values, t):
        return pa.array(values, t, mask=mask)

    if kind == "bool":
        return arr(rng.random(n) < 0.5, pa.bool_())
    if kind in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return arr(_ints(n, rng, kind), pa.from_numpy_dtype(np.dtype(kind)))
    if kind == "float16":
        return arr(rng.standard_normal(n).astype(np.float16), pa.float16())
    if kind == "float32":
        return arr(rng.standard_normal(n).astype(np.float32), pa.float32())
    if kind == "float64":
        return arr(rng.standard_normal(n), pa.float64())
    if kind == "date32":
        return arr(rng.integers(-10000, 30000, n).astype(np.int32), pa.int32()).cast(pa.date32())
    if kind == "date64":
        days = rng.integers(-10000, 30000, n).astype(np.int64) * 86_400_000
        return arr(days, pa.int64()).cast(pa.date64())
    if kind.startswith("time32"):
        unit = kind.split(":")[1]
        top = 86_400 if unit == "s" else 86_400_000
        return arr(rng.integers(0, top, n).astype(np.int32), pa.int32()).cast(pa.time32(unit))
    if kind.startswith("time64"):
        unit = kind.split(":")[1]
        top = 86_400_000_000 if unit == "us" else 86_400_000_000_000
        return arr(rng.integers(0, top, n), pa.int64()).cast(pa.time64(unit))
    if kind.startswith("timestamp"):
        _, unit, tz = kind.split(":")
        return arr(rng.integers(-(2**40), 2**40, n), pa.int64()).cast(
            pa.timestamp(unit, None if tz == "-" else tz)
        )
    if kind.startswith("duration"):
        return arr(rng.integers(-(2**40), 2**40, n), pa.int64()).cast(pa.duration(kind[9:]))
    if kind == "decimal128":
        vals = [decimal.Decimal(int(v)) / 100 for v in rng.integers(-(10**12), 10**12, n)]
        return arr(vals, pa.decimal128(20, 2))
    if kind == "decimal256":
        vals = [decimal.Decimal(int(v)) * 10**30 / 1000 for v in rng.integers(-(10**6), 10**6, n)]
        return arr(vals, pa.decimal256(50, 3))
    if kind == "fixed_size_binary":
        return arr([bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(n)], pa.binary(5))
    if kind in ("string", "large_string"):
        return arr(_strings(n, rng), pa.string() if kind == "string" else pa.large_string())
    if kind in ("binary", "large_binary"):
        vals = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 9, n)]
        return arr(vals, pa.binary() if kind == "binary" else pa.large_binary())
    if kind == "string_lowcard":
        return arr(_strings(n, rng, card=7), pa.string())
    if kind == "string_fixedlen":
        return arr([f"{v:08d}" for v in rng.integers(0, 10**8, n)], pa.string())
    if kind == "dict_string":
        return arr(_strings(n, rng, card=5), pa.string()).dictionary_encode()
    if kind == "dict_int8_string":
        values = arr(_strings(n, rng, card=5), pa.string()).dictionary_encode()
        return pa.DictionaryArray.from_arrays(values.indices.cast(pa.int8()), values.dictionary)
    if kind == "dict_int64":
        return arr(rng.integers(0, 4, n), pa.int64()).dictionary_encode()
    if kind in ("fsl_f32", "fsl_i8", "fsl_bool"):
        inner, dim = {"fsl_f32": ("float32", 4), "fsl_i8": ("int8", 3), "fsl_bool": ("bool", 5)}[
            kind
        ]
        child = make_column(inner, n * dim, "some" if mode == "some" else "none", seed + 1)
        return pa.FixedSizeListArray.from_arrays(child, dim, mask=_pa_mask(mask))
    if kind == "fsl_nested":
        child = make_column("int16", n * 6, "none", seed + 1)
        inner = pa.FixedSizeListArray.from_arrays(child, 2)
        return pa.FixedSizeListArray.from_arrays(inner, 3, mask=_pa_mask(mask))
    if kind == "list_int32":
        return _list(
            make_column("int32", 4 * n, mode if mode != "all" else "none", seed + 1), n, mask, rng
        )
    if kind == "large_list_string":
        items = make_column("string", 4 * n, "some", seed + 1)
        return _list(items, n, mask, rng, large=True)
    if kind == "list_struct":
        items = make_column("struct", 4 * n, mode if mode != "all" else "none", seed + 1)
        return _list(items, n, mask, rng)
    if kind == "list_empty":  # every list empty or null: the items column holds nothing
        offsets = pa.array(np.zeros(n + 1, np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array([], pa.string()), mask=_pa_mask(mask))
    if kind == "list_list":
        inner = make_column("list_int32", 4 * n, "some", seed + 1)
        return _list(inner, n, mask, rng)
    if kind == "struct":
        child_mode = mode
        a = make_column("int32", n, child_mode, seed + 1)
        b = make_column("string", n, child_mode, seed + 2)
        inner = pa.StructArray.from_arrays([make_column("float64", n, child_mode, seed + 3)], ["d"])
        return pa.StructArray.from_arrays([a, b, inner], ["a", "b", "c"])
    if kind == "struct_with_list":
        lst = make_column("list_int32", n, mode, seed + 1)
        return pa.StructArray.from_arrays([lst, make_column("bool", n, mode, seed + 2)], ["l", "f"])
    raise ValueError(kind)


def _pa_mask(mask: np.ndarray | None) -> pa.Array | None:
    return None if mask is None else pa.array(mask)


def _list(
    items: pa.Array,
    n: int,
    mask: np.ndarray | None,
    rng: np.random.Generator,
    large: bool = False,
) -> pa.Array:
    """n lists over a prefix of ``items``, lengths 0..7, some empty, nulls per ``mask``."""
    lengths = rng.integers(0, 8, n)
    lengths[rng.random(n) < 0.15] = 0
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets = np.minimum(offsets, len(items))
    typ = pa.LargeListArray if large else pa.ListArray
    off = pa.array(offsets, pa.int64() if large else pa.int32())
    return typ.from_arrays(off, items.slice(0, int(offsets[-1])), mask=_pa_mask(mask))


ALL_KINDS = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 date32 date64 "
    "time32:s time32:ms time64:us time64:ns timestamp:s:- timestamp:ms:UTC timestamp:us:- "
    "timestamp:ns:America/New_York duration:s duration:ms duration:us duration:ns decimal128 "
    "decimal256 fixed_size_binary string large_string binary large_binary string_lowcard "
    "string_fixedlen dict_string dict_int8_string dict_int64 fsl_f32 fsl_i8 fsl_bool fsl_nested "
    "list_int32 large_list_string list_struct list_list list_empty struct struct_with_list"
).split()


def table_of(kinds, n: int, mode: str, seed: int = 0) -> pa.Table:
    cols = {
        k.replace(":", "_"): make_column(k, n, mode, seed + i * 10) for i, k in enumerate(kinds)
    }
    return pa.table(cols)


# --------------------------------------------------------------------------- round trips
def write_ours(table: pa.Table | pa.RecordBatch, schema: LanceSchema | None = None, **kw):
    schema = schema or LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, **kw)
    writer.write_batch(table)
    written = writer.finish()
    return sink.getvalue(), schema, written


def colmap(written: WrittenFile) -> dict[int, int]:
    return dict(zip(written.fields, written.column_indices, strict=True))


def read_ours(data: bytes, schema: LanceSchema, cmap=None, path: str = "<memory>") -> pa.Table:
    reader = LanceFileReader(BytesSource(data, path))
    cmap = cmap or {f.id: i for i, f in enumerate(schema.walk())}
    arrays = reader.read(schema.fields, cmap)
    return pa.table(arrays, schema=schema.to_arrow())


def values(arr) -> list:
    """Python values with dictionaries decoded (their item order/extra null items may differ)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = pc.cast(arr, arr.type.value_type)
    return arr.to_pylist()


def assert_same(actual, expected, what: str = "") -> None:
    if isinstance(actual, pa.ChunkedArray):
        actual = actual.combine_chunks()
    if isinstance(expected, pa.ChunkedArray):
        expected = expected.combine_chunks()
    assert actual.type == expected.type, f"{what}: type {actual.type} != {expected.type}"
    assert len(actual) == len(expected), f"{what}: length {len(actual)} != {len(expected)}"
    actual.validate(full=True)
    if pa.types.is_dictionary(actual.type):
        assert values(actual) == values(expected), what
        return
    if not actual.equals(expected):
        a, e = actual.to_pylist(), expected.to_pylist()
        bad = [i for i, (x, y) in enumerate(zip(a, e, strict=True)) if x != y][:5]
        raise AssertionError(
            f"{what}: rows {bad} differ: {[a[i] for i in bad]} != {[e[i] for i in bad]}"
        )


def assert_tables(actual: pa.Table, expected: pa.Table) -> None:
    assert actual.column_names == expected.column_names
    for name in expected.column_names:
        assert_same(actual[name], expected[name], name)


# --------------------------------------------------------------------------- editing files
def rewrite_metadata(data: bytes, mutate) -> bytes:
    """Rebuild the file after ``mutate(list_of_ColumnMetadata)`` edits the metadata."""
    cms, cmo, gbo, ngb, ncol, major, minor, magic = struct.unpack_from(
        "<QQQIIHH4s", data, len(data) - FOOTER_SIZE
    )
    metas = []
    for i in range(ncol):
        pos, size = struct.unpack_from("<QQ", data, cmo + 16 * i)
        meta = file2_pb2.ColumnMetadata()
        meta.ParseFromString(data[pos : pos + size])
        metas.append(meta)
    mutate(metas)
    out = bytearray(data[:cms])
    table = []
    for meta in metas:
        blob = meta.SerializeToString()
        table.append((len(out), len(blob)))
        out += blob
    new_cmo = len(out)
    for pos, size in table:
        out += struct.pack("<QQ", pos, size)
    new_gbo = len(out)
    out += data[gbo : gbo + 16 * ngb]
    out += struct.pack("<QQQIIHH4s", cms, new_cmo, new_gbo, ngb, ncol, major, minor, magic)
    return bytes(out)


def page_encoding(page) -> enc.ArrayEncoding:
    any_msg = any_pb2.Any()
    any_msg.ParseFromString(page.encoding.direct.encoding)
    out = enc.ArrayEncoding()
    out.ParseFromString(any_msg.value)
    return out


def set_page_encoding(page, encoding: enc.ArrayEncoding) -> None:
    any_msg = any_pb2.Any()
    any_msg.ParseFromString(page.encoding.direct.encoding)
    any_msg.value = encoding.SerializeToString()
    page.encoding.direct.encoding = any_msg.SerializeToString()


__all__ = [
    "ALL_KINDS",
    "NULL_MODES",
    "assert_same",
    "assert_tables",
    "colmap",
    "make_column",
    "page_encoding",
    "rewrite_metadata",
    "set_page_encoding",
    "read_ours",
    "table_of",
    "values",
    "write_ours",
]


def write_sorted_runs_file(table: pa.Table, version: str, tmp: Path) -> bytes:
    """``table`` as a data file of the search tests: pylance's 2.1 writer (its own choice
    of encodings; schema and field metadata left out, as it would ignore them), or
    lance_sql's 2.2 writer with small pages (16 KiB, at most 64 KiB), so runs cross page
    and chunk edges."""
    if version == "2.1":
        import lance.file

        path = tmp / "f.lance"
        plain = table.replace_schema_metadata(None)
        plain = pa.Table.from_arrays(plain.columns, names=plain.column_names)
        with lance.file.LanceFileWriter(str(path), plain.schema, version="2.1") as writer:
            writer.write_batch(plain)
        return path.read_bytes()
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2",
                             page_bytes=16 * 1024, max_page_bytes=64 * 1024)
    writer.write_batch(table)
    writer.finish()
    return sink.getvalue()
