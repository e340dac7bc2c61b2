"""Fixtures for the table-level tests: a data generator covering every Arrow type the
table format lists, and helpers to compare tables and snapshot table directories.

The helpers are exposed as the ``tables`` fixture (a :class:`TableKit`) so that the test
modules need not import this file.
"""

from __future__ import annotations

import hashlib
import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

VECTOR_DIM = 128
_WORDS = ["", "a", "lance", "naïve", "日本語", "x" * 40, "tab\tand\nnewline", "zz"]
_DICT_VALUES = pa.array(["red", "green", "blue", "cyan", "magenta"])
_NY = "America/New_York"


def full_schema() -> pa.Schema:
    """Every type the table format lists (2.0 data files), ``id`` not nullable."""
    fields = [pa.field("id", pa.int64(), nullable=False)]
    for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
              pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()):
        fields.append(pa.field(f"c_{t}", t))
    fields += [
        pa.field("c_halffloat", pa.float16()),
        pa.field("c_float", pa.float32()),
        pa.field("c_double", pa.float64()),
        pa.field("c_bool", pa.bool_()),
        pa.field("c_string", pa.string()),
        pa.field("c_large_string", pa.large_string()),
        pa.field("c_binary", pa.binary()),
        pa.field("c_large_binary", pa.large_binary()),
        pa.field("c_date32", pa.date32()),
        pa.field("c_date64", pa.date64()),
        pa.field("c_time32_s", pa.time32("s")),
        pa.field("c_time32_ms", pa.time32("ms")),
        pa.field("c_time64_us", pa.time64("us")),
        pa.field("c_time64_ns", pa.time64("ns")),
        pa.field("c_ts", pa.timestamp("us")),
        pa.field("c_ts_utc", pa.timestamp("ns", tz="UTC")),
        pa.field("c_ts_ny", pa.timestamp("ms", tz=_NY)),
        pa.field("c_ts_offset", pa.timestamp("s", tz="+05:30")),
        pa.field("c_dur_s", pa.duration("s")),
        pa.field("c_dur_ms", pa.duration("ms")),
        pa.field("c_dur_us", pa.duration("us")),
        pa.field("c_dur_ns", pa.duration("ns")),
        pa.field("c_dec128", pa.decimal128(12, 2)),
        pa.field("c_dec256", pa.decimal256(40, 5)),
        pa.field("c_fsb", pa.binary(16)),
        pa.field("c_vector", pa.list_(pa.float32(), VECTOR_DIM)),
        pa.field("c_list", pa.list_(pa.int32())),
        pa.field("c_large_list", pa.large_list(pa.string())),
        pa.field("c_struct", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        pa.field("c_list_struct", pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())]))),
        pa.field("c_dict", pa.dictionary(pa.int32(), pa.string())),
    ]
    return pa.schema(fields)


def other_schema() -> pa.Schema:
    """The schema a later overwrite switches to (different names, types and shape)."""
    return pa.schema([
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.float64()),
        pa.field("labels", pa.list_(pa.string())),
        pa.field("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    ])  # fmt: skip


def _mask(rng: np.random.Generator, n: int, p: float = 0.1) -> np.ndarray:
    return rng.random(n) < p


def _lists(rng: np.random.Generator, n: int, make_item) -> list:
    """Python lists with ~10% null lists, ~10% empty lists, 1-5 items otherwise."""
    out: list = []
    kinds = rng.random(n)
    lengths = rng.integers(1, 6, n)
    for i in range(n):
        if kinds[i] < 0.1:
            out.append(None)
        elif kinds[i] < 0.2:
            out.append([])
        else:
            out.append([make_item(i, j) for j in range(lengths[i])])
    return out


def make_table(n: int, *, start: int = 0, seed: int = 0) -> pa.Table:
    """``n`` rows of :func:`full_schema` with ids ``start..start+n-1`` and nulls everywhere
    nullable (struct values themselves stay non-null: 2.0 cannot store their validity)."""
    rng = np.random.default_rng(seed)
    schema = full_schema()
    cols: dict[str, pa.Array] = {"id": pa.array(np.arange(start, start + n, dtype=np.int64))}

    def put(name: str, values, p: float = 0.1) -> None:
        cols[name] = pa.array(values, schema.field(name).type, mask=_mask(rng, n, p))

    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(t)
        name = f"c_{pa.from_numpy_dtype(t)}"
        put(name, rng.integers(info.min, info.max, n, dtype=t, endpoint=True))
    put("c_halffloat", rng.standard_normal(n).astype(np.float16))
    put("c_float", (rng.standard_normal(n) * 1e3).astype(np.float32))
    put("c_double", rng.standard_normal(n) * 1e6)
    put("c_bool", rng.random(n) < 0.5)
    put("c_string", [_WORDS[i] for i in rng.integers(0, len(_WORDS), n)])
    put("c_large_string", [_WORDS[i] * 2 for i in rng.integers(0, len(_WORDS), n)])
    put("c_binary", [bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in rng.integers(0, 9, n)])
    put("c_large_binary", [bytes([k]) * (k % 4) for k in rng.integers(0, 256, n)])
    put("c_date32", rng.integers(-20_000, 40_000, n).astype(np.int32))
    put("c_date64", rng.integers(-20_000, 40_000, n) * 86_400_000)
    put("c_time32_s", rng.integers(0, 86_400, n).astype(np.int32))
    put("c_time32_ms", rng.integers(0, 86_400_000, n).astype(np.int32))
    put("c_time64_us", rng.integers(0, 86_400 * 10**6, n))
    put("c_time64_ns", rng.integers(0, 86_400 * 10**9, n))
    put("c_ts", rng.integers(-(2**50), 2**50, n))
    put("c_ts_utc", rng.integers(0, 2**62, n))
    put("c_ts_ny", rng.integers(0, 2**42, n))
    put("c_ts_offset", rng.integers(0, 2**32, n))
    for unit in ("s", "ms", "us", "ns"):
        put(f"c_dur_{unit}", rng.integers(-(2**40), 2**40, n))
    put("c_dec128", [Decimal(int(v)).scaleb(-2) for v in rng.integers(-10**11, 10**11, n)])
    put("c_dec256", [Decimal(int(v) * 10**25 + int(v)).scaleb(-5)
                     for v in rng.integers(-10**9, 10**9, n)])
    put("c_fsb", [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(n)])
    vectors = rng.standard_normal(n * VECTOR_DIM).astype(np.float32)
    cols["c_vector"] = pa.FixedSizeListArray.from_arrays(
        pa.array(vectors), VECTOR_DIM, mask=pa.array(_mask(rng, n, 0.05))
    )
    ints = rng.integers(-1000, 1000, n * 5)
    item_null = rng.random(n * 5) < 0.1
    cols["c_list"] = pa.array(
        _lists(rng, n, lambda i, j: None if item_null[i * 5 + j] else int(ints[i * 5 + j])),
        pa.list_(pa.int32()),
    )
    cols["c_large_list"] = pa.array(
        _lists(rng, n, lambda i, j: None if item_null[-1 - i * 5 - j] else _WORDS[(i + j) % 8]),
        pa.large_list(pa.string()),
    )
    cols["c_struct"] = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=_mask(rng, n, 0.2)),
            pa.array([f"s{i}" for i in range(start, start + n)], mask=_mask(rng, n, 0.2)),
        ],
        fields=list(schema.field("c_struct").type),
    )
    cols["c_list_struct"] = pa.array(
        _lists(rng, n, lambda i, j: {"x": (i * 7 + j) % 11,
                                     "y": None if (i + j) % 5 == 0 else f"y{i}.{j}"}),
        schema.field("c_list_struct").type,
    )
    indices = pa.array(rng.integers(0, len(_DICT_VALUES), n).astype(np.int32),
                       mask=_mask(rng, n))
    cols["c_dict"] = pa.DictionaryArray.from_arrays(indices, _DICT_VALUES)
    return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def make_other(n: int, *, start: int = 0, seed: int = 0) -> pa.Table:
    """``n`` rows of :func:`other_schema`."""
    rng = np.random.default_rng(seed)
    schema = other_schema()
    keys = [f"k{i:06d}" for i in range(start, start + n)]
    xs, ys = rng.standard_normal(n), rng.standard_normal(n)
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array(rng.standard_normal(n), mask=_mask(rng, n)),
            pa.array(_lists(rng, n, lambda i, j: _WORDS[(i * j) % 8]), pa.list_(pa.string())),
            pa.StructArray.from_arrays(
                [pa.array(xs, mask=_mask(rng, n)), pa.array(ys)],
                fields=list(schema.field("point").type),
            ),
        ],
        schema=schema,
    )


def decode_dictionaries(table: pa.Table) -> pa.Table:
    """Dictionary columns as plain values (two writers may pick different dictionaries)."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type):  # chunk by chunk: dictionaries may differ
            column = pc.cast(column, field.type.value_type)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names).combine_chunks()


def assert_tables_equal(actual: pa.Table, expected: pa.Table, what: str = "") -> None:
    """Same schema (types, nullability, order) and the same values, row for row."""
    assert actual.schema.remove_metadata() == expected.schema.remove_metadata(), (
        f"{what}: schema differs\n{actual.schema}\n!=\n{expected.schema}"
    )
    assert actual.num_rows == expected.num_rows, (
        f"{what}: {actual.num_rows} rows != {expected.num_rows}"
    )
    a, b = decode_dictionaries(actual), decode_dictionaries(expected)
    for name in a.column_names:
        if not a[name].equals(b[name]):
            left, right = a[name].to_pylist(), b[name].to_pylist()
            bad = next((i for i, (x, y) in enumerate(zip(left, right, strict=True)) if x != y),
                       None)
            detail = "" if bad is None else f" first at row {bad}: {left[bad]!r} != {right[bad]!r}"
            raise AssertionError(f"{what}: column {name!r} differs{detail}")


def snapshot(root: str | os.PathLike[str]) -> dict[str, str]:
    """Every file below ``root`` (hidden temporaries too) -> sha256 of its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = digest
    return out


class TableKit:
    """What the ``tables`` fixture hands to tests."""

    VECTOR_DIM = VECTOR_DIM
    full_schema = staticmethod(full_schema)
    other_schema = staticmethod(other_schema)
    make = staticmethod(make_table)
    make_other = staticmethod(make_other)
    assert_equal = staticmethod(assert_tables_equal)
    decode_dictionaries = staticmethod(decode_dictionaries)
    snapshot = staticmethod(snapshot)


@pytest.fixture(scope="session")
def tables() -> TableKit:
    return TableKit()


@pytest.fixture
def when_committing():
    """``when_committing(store, winner)``: run ``winner`` just before the next manifest
    write to the MemoryStore ``store`` (the commit of the handle the test races), so the
    winner's commit lands between the loser's read and its commit."""
    def arrange(store, winner) -> None:
        started: list[bool] = []

        def hook(op: str, key: str) -> None:
            if op == "put_if_absent" and key.startswith("_versions/") and not started:
                started.append(True)
                winner()

        store.add_hook(hook)

    return arrange
