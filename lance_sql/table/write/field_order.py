"""Struct fields of written data matched to the table's by name, as pylance matches them.

Data appended or merged into a table may name a struct's fields in another order than
the table (``struct<y, x>`` into ``struct<x, y>``): pylance stores it by name. Columns
are matched by name already; this does the same one level down, at any depth (structs
inside structs and lists). Only a reordering is made here: a struct whose field names
differ from the table's is left as it is, for the schema check to name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["array_in_table_order", "reader_in_table_order", "table_in_table_order",
           "type_in_table_order"]


def type_in_table_order(source: pa.DataType, target: pa.DataType) -> pa.DataType:
    """``source`` with each struct's fields in the order of ``target``'s matching struct
    (``source`` itself when nothing is to be reordered)."""
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        order = _order(source, target)
        if order is None:
            return source
        fields = []
        for i, name in zip(order, target.names, strict=True):
            field = source.field(i)
            fields.append(field.with_type(type_in_table_order(
                field.type, target.field(name).type)))
        return pa.struct(fields)
    if _same_list_kind(source, target):
        item = source.value_field
        inner = type_in_table_order(item.type, target.value_type)
        if inner == item.type:
            return source
        field = item.with_type(inner)
        if pa.types.is_fixed_size_list(source):
            return pa.list_(field, source.list_size)
        return pa.large_list(field) if pa.types.is_large_list(source) else pa.list_(field)
    return source


def array_in_table_order(values: pa.Array, target: pa.DataType) -> pa.Array:
    """``values`` with its structs' fields in ``target``'s order (see
    :func:`type_in_table_order`); the same array when nothing moves."""
    want = type_in_table_order(values.type, target)
    if want == values.type:
        return values
    if pa.types.is_struct(values.type):
        names = [f.name for f in want]
        children = [array_in_table_order(values.field(n), target.field(n).type)
                    for n in names]
        mask = values.is_null() if values.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(want), mask=mask)
    # a list of something reordered: its items reordered, under offsets from 0 (pyarrow
    # builds no list of sliced offsets with NULLs)
    mask = values.is_null() if values.null_count else None
    if pa.types.is_fixed_size_list(values.type):
        size = values.type.list_size
        items = values.values.slice(values.offset * size, len(values) * size)
        return pa.FixedSizeListArray.from_arrays(
            array_in_table_order(items, target.value_type), type=want, mask=mask)
    offsets = values.offsets
    start = offsets[0].as_py()
    items = values.values.slice(start, offsets[-1].as_py() - start)
    kind = pa.LargeListArray if pa.types.is_large_list(values.type) else pa.ListArray
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))  # (a new array)
    return kind.from_arrays(rebased, array_in_table_order(items, target.value_type),
                            type=want, mask=mask)


def _chunks_in_table_order(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    want = type_in_table_order(column.type, target)
    if want == column.type:
        return column
    return pa.chunked_array([array_in_table_order(c, target) for c in column.chunks],
                            type=want)


def _schema_in_table_order(schema: pa.Schema, table: pa.Schema) -> pa.Schema:
    names = set(table.names)  # (once: ``names`` is a new list each time it is read)
    return pa.schema([f.with_type(type_in_table_order(f.type, table.field(f.name).type))
                      if f.name in names else f for f in schema],
                     metadata=schema.metadata)


def table_in_table_order(data: pa.Table, table: pa.Schema) -> pa.Table:
    """``data`` with its struct columns' fields in the order of ``table``'s columns of
    the same name."""
    names = set(table.names)  # (once: ``names`` is a new list each time it is read)
    for i, field in enumerate(data.schema):
        if field.name in names:
            column = _chunks_in_table_order(data.column(i), table.field(field.name).type)
            if column.type != field.type:
                data = data.set_column(i, field.with_type(column.type), column)
    return data


def reader_in_table_order(reader: pa.RecordBatchReader, table: pa.Schema
                          ) -> pa.RecordBatchReader:
    """:func:`table_in_table_order` for a stream of batches."""
    out = _schema_in_table_order(reader.schema, table)
    if out == reader.schema:
        return reader

    names = set(table.names)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            columns = [array_in_table_order(c, table.field(f.name).type)
                       if f.name in names else c
                       for f, c in zip(batch.schema, batch.columns, strict=True)]
            yield pa.RecordBatch.from_arrays(columns, schema=out)

    return pa.RecordBatchReader.from_batches(out, batches())


def _order(source: pa.StructType, target: pa.StructType) -> list[int] | None:
    """For each of ``target``'s fields, the index of ``source``'s field of its name;
    None when their names are not the same set of distinct names."""
    names = source.names
    wanted = target.names
    if len(set(names)) != len(names) or sorted(names) != sorted(wanted):
        return None
    return [names.index(n) for n in wanted]


def _same_list_kind(source: pa.DataType, target: pa.DataType) -> bool:
    return (pa.types.is_list(source) and pa.types.is_list(target)
            or pa.types.is_large_list(source) and pa.types.is_large_list(target)
            or pa.types.is_fixed_size_list(source) and pa.types.is_fixed_size_list(target)
            and source.list_size == target.list_size)
