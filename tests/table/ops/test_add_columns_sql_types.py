"""add_columns with SQL expressions stores the type and nullability pylance stores: a
literal takes the type of the numeric column it meets (``i8 + 1`` is an int8 that wraps
around, ``f32 * 2.5`` a float32), is refused when that type cannot hold it, integers meet
float32 as float32, half floats stay half floats, an integer division that overflows
fails, and a value that can never be NULL (a constant, arithmetic of non-nullable
columns) is stored non-nullable. Expected values are pylance 14's."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

TABLE = pa.table({
    "a": pa.array([100, 1, None, -128], pa.int8()),
    "b": pa.array([100, 2, 3, -1], pa.int8()),
    "f": pa.array([1.5, 2.0, 3.0, 4.0], pa.float32()),
    "u": pa.array([250, 1, 2, 3], pa.uint8()),
    "i32": pa.array([2**31 - 1, 1, 2, 3], pa.int32()),
    "h": pa.array([1.5, 2.0, 3.0, 4.0], pa.float16()),
    "d": pa.array([1, 2, 3, 4], pa.decimal128(5, 2)),
    "s": pa.array([{"x": 120}, {"x": 1}, None, {"x": 3}], pa.struct([("x", pa.int8())])),
}, schema=pa.schema([
    pa.field("a", pa.int8()), pa.field("b", pa.int8(), False), pa.field("f", pa.float32()),
    pa.field("u", pa.uint8()), pa.field("i32", pa.int32()), pa.field("h", pa.float16()),
    pa.field("d", pa.decimal128(5, 2)), pa.field("s", pa.struct([("x", pa.int8())]))]))


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, path)
    return path


@pytest.mark.parametrize(("expr", "field", "values"), [
    ("a + 1", pa.field("c", pa.int8()), [101, 2, None, -127]),
    ("a + 127", pa.field("c", pa.int8()), [-29, -128, None, -1]),
    ("-1 + a", pa.field("c", pa.int8()), [99, 0, None, 127]),
    ("a * (2 - 1)", pa.field("c", pa.int8()), [100, 1, None, -128]),
    ("u - 5", pa.field("c", pa.uint8()), [245, 252, 253, 254]),
    ("5 - u", pa.field("c", pa.uint8()), [11, 4, 3, 2]),
    ("i32 * 3", pa.field("c", pa.int32()), [2147483645, 3, 6, 9]),
    ("s.x * 2", pa.field("c", pa.int8()), [-16, 2, None, 6]),
    ("f * 2.5", pa.field("c", pa.float32()), [3.75, 5.0, 7.5, 10.0]),
    ("f + 1e40", pa.field("c", pa.float32()), [float("inf")] * 4),
    ("a + f", pa.field("c", pa.float32()), [101.5, 3.0, None, -124.0]),
    ("h * 2.5", pa.field("c", pa.float16()), [3.75, 5.0, 7.5, 10.0]),
    ("h + a", pa.field("c", pa.float16()), [101.5, 3.0, None, -124.0]),
    ("d + 1", pa.field("c", pa.decimal128(6, 2)), [Decimal(n) for n in "2345"]),
    ("d * 2", pa.field("c", pa.decimal128(11, 4)), [Decimal(n) for n in "2468"]),
    # deeper arithmetic is typed as SQL types it, as in pylance
    ("a - 1 - 1", pa.field("c", pa.int64()), [98, -1, None, -130]),
    ("a + (b + 1)", pa.field("c", pa.int64()), [201, 4, None, -128]),
    # never NULL: stored non-nullable
    ("b + 1", pa.field("c", pa.int8(), False), [101, 3, 4, 0]),
    ("42", pa.field("c", pa.int64(), False), [42] * 4),
    ("'x'", pa.field("c", pa.string(), False), ["x"] * 4),
    ("a IS NULL", pa.field("c", pa.bool_(), False), [False, False, True, False]),
    ("coalesce(a, b)", pa.field("c", pa.int8(), False), [100, 1, 3, -128]),
    ("NULL", pa.field("c", pa.null()), [None] * 4),
    ("b > 1 AND a > 1", pa.field("c", pa.bool_()), [True, False, None, False]),
])
def test_stored_type_and_values_are_pylances(uri: str, expr: str, field: pa.Field,
                                             values: list) -> None:
    lance_sql.dataset(uri).add_columns({"c": expr})
    for read in (lance_sql.dataset(uri), lance.dataset(uri)):
        assert read.schema.field("c") == field
        assert read.to_table(columns=["c"]).column(0).to_pylist() == values


@pytest.mark.parametrize("expr", ["a + 1000", "a + 128", "a + 1.5", "u + -1", "d + 1.5",
                                  "a + (1 + 200)", "a + '1'"])
def test_a_literal_its_column_cannot_hold_is_refused(uri: str, expr: str) -> None:
    ds = lance_sql.dataset(uri)
    with pytest.raises(InvalidInputError, match="does not convert"):
        ds.add_columns({"c": expr})
    assert lance_sql.dataset(uri).version == 1


def test_an_integer_division_that_overflows_fails(uri: str) -> None:
    with pytest.raises(InvalidInputError, match="overflow"):
        lance_sql.dataset(uri).add_columns({"c": "a / -1"})  # -128 / -1
    assert lance_sql.dataset(uri).version == 1
