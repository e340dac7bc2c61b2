"""Write casts pyarrow refuses, or makes otherwise inside nested values, store what
DataFusion's CAST gives (each of these was refused, or spelled by pyarrow)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import datafusion
import pyarrow as pa
import pytest

from lance_sql.expr.casts import cast_like_datafusion, cast_table_like_datafusion
from lance_sql.expr.engine_cast import engine_cast, nested_needs_engine

F64 = pa.float64()
CASES = [
    (pa.array([Decimal("3.99"), Decimal("-3.99"), None], pa.decimal128(3, 2)), pa.int8()),
    (pa.array(["1.5", "2.5", "-1.5", None]), pa.decimal128(5, 0)),
    (pa.array([1_000_000, -1, None], pa.timestamp("us")), F64),
    (pa.array(["2024-05-05T01:02:03+02:00", "2024-05-05 01:02:03", None]),
     pa.timestamp("us")),
    (pa.array(["2024-05-05 01:02:03", "2024-05-05"]), pa.date32()),
    (pa.array([[1.5, -2.5, None], None, []], pa.list_(F64)), pa.list_(pa.int64())),
    (pa.array([1, 2], pa.int32()), pa.date32()),
    (pa.array([1, -1], pa.int64()), pa.timestamp("us")),
    (pa.array(["-0", "7"]), pa.uint8()),
    (pa.array([1, 2], pa.timestamp("us")), pa.uint64()),
    (pa.array([1, None], pa.date32()), pa.int64()),
    (pa.array([[1, 2], None], pa.list_(pa.int64())), pa.string()),
    (pa.array([[1.0, float("nan"), -0.0, 1e38, None]], pa.list_(F64)),
     pa.list_(pa.string())),
    (pa.array([[3.0, 0.5]], pa.list_(F64, 2)), pa.list_(pa.string())),
    (pa.array([{"y": "a", "x": 1}, None], pa.struct([("y", pa.string()), ("x", pa.int32())])),
     pa.struct([("x", pa.int32()), ("y", pa.string())])),
    (pa.array([{"f": 1.0}], pa.struct([("f", F64)])), pa.struct([("f", pa.string())])),
    (pa.array([dt.datetime(2024, 2, 29, 0, 0, 1, tzinfo=dt.UTC)],
              pa.timestamp("us", "America/New_York")), pa.date64()),
    (pa.array([-1, 1], pa.timestamp("us")), pa.date64()),
]


def _datafusion_cast(values: pa.Array, target: pa.DataType) -> list:
    ctx = datafusion.SessionContext()
    frame = ctx.from_arrow(pa.table({"v": values}))
    return frame.select(datafusion.col("v").cast(target)).to_arrow_table().column(0).to_pylist()


@pytest.mark.parametrize(("values", "target"), CASES, ids=lambda x: str(x)[:40])
def test_a_write_cast_stores_what_datafusion_casts(values: pa.Array,
                                                    target: pa.DataType) -> None:
    got = cast_like_datafusion(values, target)
    assert isinstance(got, pa.Array)
    assert got.type == target
    assert got.to_pylist() == _datafusion_cast(values, target)


def test_chunked_values_stay_chunked_and_typed() -> None:
    values = pa.chunked_array([pa.array(["-0"]), pa.array(["3", None])])
    got = cast_like_datafusion(values, pa.uint16())
    assert isinstance(got, pa.ChunkedArray)
    assert got.type == pa.uint16()
    assert got.to_pylist() == [0, 3, None]
    empty = engine_cast(pa.chunked_array([], pa.string()), pa.uint8())
    assert isinstance(empty, pa.ChunkedArray)
    assert empty.type == pa.uint8()
    assert len(empty) == 0


@pytest.mark.parametrize(("values", "target", "says"), [
    (pa.array(["abc"]), pa.int32(), "Cannot cast string 'abc'"),
    (pa.array([300]), pa.int8(), "300"),
    (pa.array([-1]), pa.uint64(), "-1 to type UInt64"),
])
def test_a_cast_datafusion_refuses_is_arrow_invalid_with_its_words(
        values: pa.Array, target: pa.DataType, says: str) -> None:
    with pytest.raises(pa.ArrowInvalid, match=says) as caught:
        cast_like_datafusion(values, target)
    assert not str(caught.value).startswith("DataFusion error")


def test_the_cast_pyarrow_makes_alike_does_not_go_to_the_engine() -> None:
    def leaf(source: pa.DataType, target: pa.DataType) -> bool:
        return pa.types.is_floating(source) and pa.types.is_string(target)

    assert not nested_needs_engine(pa.list_(pa.int32()), pa.list_(pa.int64()), leaf)
    assert nested_needs_engine(pa.list_(F64), pa.list_(pa.string()), leaf)
    assert nested_needs_engine(pa.large_list(pa.struct([("a", F64)])),
                               pa.large_list(pa.struct([("a", pa.string())])), leaf)
    reordered = (pa.struct([("b", pa.int8()), ("a", pa.int8())]),
                 pa.struct([("a", pa.int8()), ("b", pa.int8())]))
    assert not nested_needs_engine(*reordered, leaf)  # (pyarrow matches names too)
    assert nested_needs_engine(pa.struct([("b", F64), ("a", pa.int8())]),
                               pa.struct([("a", pa.int8()), ("b", pa.string())]), leaf)
    assert not nested_needs_engine(pa.int32(), pa.int64(), leaf)  # a leaf is not nested
    assert nested_needs_engine(pa.map_(pa.string(), F64), pa.map_(pa.string(), pa.string()),
                               leaf)


def test_a_table_cast_falls_back_per_column_and_checks_nulls() -> None:
    table = pa.table({"a": pa.array(["-0", "4"]), "b": pa.array([1.5, 2.5]),
                      "c": pa.array([dt.date(2024, 1, 2), None])})
    schema = pa.schema([pa.field("a", pa.uint8(), nullable=False),
                        pa.field("b", pa.decimal128(5, 0)),
                        pa.field("c", pa.int64())], metadata={b"k": b"v"})
    got = cast_table_like_datafusion(table, schema)
    assert got.schema == schema
    assert got.schema.metadata == {b"k": b"v"}
    assert got.to_pylist() == [{"a": 0, "b": Decimal(2), "c": 19724},
                               {"a": 4, "b": Decimal(3), "c": None}]
    with pytest.raises(pa.ArrowInvalid, match="not nullable"):
        cast_table_like_datafusion(table, schema.set(2, pa.field("c", pa.int64(),
                                                                 nullable=False)))
