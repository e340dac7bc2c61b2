"""What the writer refuses, and how it says so."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from datafile_helpers import assert_tables, read_ours

from lance_sql.errors import SchemaError, UnsupportedFeatureError
from lance_sql.format.datafile import LanceFileWriter
from lance_sql.format.schema import LanceSchema


def _writer(schema: pa.Schema) -> LanceFileWriter:
    return LanceFileWriter(io.BytesIO(), LanceSchema.from_arrow(schema), path="t/data.lance")


def test_null_struct_values_are_rejected() -> None:
    st = pa.StructArray.from_arrays(
        [pa.array([1, 2]), pa.array(["a", "b"])], ["a", "b"], mask=pa.array([False, True])
    )
    table = pa.table({"st": st})
    with pytest.raises(UnsupportedFeatureError) as info:
        _writer(table.schema).write_batch(table)
    message = str(info.value)
    assert "column 'st' has null struct values" in message
    assert "2.0 cannot store struct validity (use format 2.2)" in message


def test_null_struct_inside_list_is_rejected() -> None:
    items = pa.StructArray.from_arrays([pa.array([1, 2])], ["x"], mask=pa.array([True, False]))
    lst = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), items)
    table = pa.table({"ls": lst})
    with pytest.raises(UnsupportedFeatureError, match="column 'ls.item' has null struct values"):
        _writer(table.schema).write_batch(table)


def test_sliced_struct_without_nulls_in_the_slice_is_fine() -> None:
    st = pa.StructArray.from_arrays(
        [pa.array([1, 2, 3])], ["a"], mask=pa.array([True, False, False])
    )
    table = pa.table({"st": st.slice(1)})
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema)
    writer.write_batch(table)
    writer.finish()
    assert_tables(
        read_ours(sink.getvalue(), schema), pa.table({"st": st.slice(1)}).cast(table.schema)
    )


def test_missing_column() -> None:
    writer = _writer(pa.schema([("a", pa.int64()), ("b", pa.string())]))
    with pytest.raises(SchemaError, match="no column 'b'"):
        writer.write_batch(pa.table({"a": [1]}))


def test_wrong_type() -> None:
    writer = _writer(pa.schema([("a", pa.int64())]))
    with pytest.raises(SchemaError, match="column 'a' has type int32"):
        writer.write_batch(pa.table({"a": pa.array([1], pa.int32())}))


def test_nulls_in_non_nullable_column() -> None:
    writer = _writer(pa.schema([pa.field("a", pa.int64(), nullable=False)]))
    with pytest.raises(SchemaError, match="'a' is not nullable"):
        writer.write_batch(pa.table({"a": pa.array([1, None], pa.int64())}))


def test_renamed_list_item_and_view_types_are_accepted() -> None:
    schema = pa.schema([("l", pa.list_(pa.int32())), ("s", pa.string())])
    data = pa.table(
        {
            "l": pa.array([[1], None], pa.list_(pa.field("element", pa.int32()))),
            "s": pa.array(["x", None], pa.string_view()),
        }
    )
    lance_schema = LanceSchema.from_arrow(schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, lance_schema)
    writer.write_batch(data)
    writer.finish()
    assert_tables(read_ours(sink.getvalue(), lance_schema), data.cast(schema))


@pytest.mark.parametrize(
    "arrow_type",
    [pa.map_(pa.string(), pa.int32()), pa.list_(pa.string(), 2), pa.month_day_nano_interval()],
)
def test_unsupported_types(arrow_type) -> None:
    schema = pa.schema([("c", arrow_type)])
    try:
        lance_schema = LanceSchema.from_arrow(schema)
    except SchemaError:
        return  # the schema layer refuses it already
    with pytest.raises(UnsupportedFeatureError, match="'c'"):
        LanceFileWriter(io.BytesIO(), lance_schema)


def test_write_after_finish() -> None:
    writer = _writer(pa.schema([("a", pa.int64())]))
    writer.finish()
    with pytest.raises(ValueError, match="finished"):
        writer.write_batch(pa.table({"a": [1]}))
