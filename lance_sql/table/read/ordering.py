"""``order_by`` of a Python-API scan, as pylance's scanner takes it: the rows sorted by
columns before ``limit`` / ``offset`` apply (a scan otherwise returns rows in their order
in the table). The sort needs every matching row, so it reads them all first."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.float_order import total_order
from lance_sql.format.schema import split_path

__all__ = ["OrderedScanner", "sort_keys"]

_DIRECTIONS = {"asc": "ascending", "ascending": "ascending", "desc": "descending",
               "descending": "descending"}


def sort_keys(order_by: Sequence[Any]) -> list[tuple[str, str, str]]:
    """``order_by`` as (column, "ascending" | "descending", "at_start" | "at_end")
    triples. Each item is a column name (ascending, NULLs last), a ``(name, direction)``
    pair, or an object with pylance's ``ColumnOrdering`` attributes (``column_name``,
    ``ascending``, ``nulls_first``)."""
    if isinstance(order_by, str) or not isinstance(order_by, Sequence):
        raise InvalidInputError("order_by must be a list of columns (names, (name, "
                                "'ascending' | 'descending') pairs or column orderings)")
    keys = []
    for item in order_by:
        if isinstance(item, str):
            keys.append((item, "ascending", "at_end"))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) \
                and str(item[1]).lower() in _DIRECTIONS:
            keys.append((item[0], _DIRECTIONS[str(item[1]).lower()], "at_end"))
        elif isinstance(getattr(item, "column_name", None), str):
            ascending = getattr(item, "ascending", True)
            first = getattr(item, "nulls_first", False)
            keys.append((item.column_name, "ascending" if ascending else "descending",
                         "at_start" if first else "at_end"))
        else:
            raise InvalidInputError(f"order_by: cannot read {item!r} as a column ordering")
    return keys


class OrderedScanner:
    """``scanner`` (reading every matching row, with the sort columns) sorted by ``keys``,
    then ``offset`` / ``limit`` applied and the sort columns nobody asked for dropped.
    NULLs sort where each key says (last by default, as pylance's ordering puts them)."""

    def __init__(self, scanner: Any, keys: list[tuple[str, str, str]], output: Sequence[str],
                 limit: int | None, offset: int | None, batch_size: int | None) -> None:
        self.scanner = scanner
        self.keys = keys
        self.output = list(output)
        self.limit = limit
        self.offset = offset or 0
        self.batch_size = batch_size
        schema = scanner.projected_schema
        self.projected_schema = pa.schema([schema.field(n) for n in self.output],
                                          metadata=schema.metadata)

    def to_table(self) -> pa.Table:
        table = self.scanner.to_table()
        keys = pa.table({str(i): _sort_column(table, name)
                         for i, (name, _, _) in enumerate(self.keys)})
        table = table.take(pc.sort_indices(keys, sort_keys=[
            (str(i), order, nulls) for i, (_, order, nulls) in enumerate(self.keys)]))
        stop = None if self.limit is None else self.offset + self.limit
        table = table.slice(self.offset, None if stop is None else stop - self.offset)
        return table.select(self.output)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.to_table().to_batches(max_chunksize=self.batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        return self.to_table().num_rows

    def __getattr__(self, name: str) -> object:
        """The rest of the scan's API (``explain_plan``...) is the underlying scanner's."""
        if name.startswith("__") or name == "scanner":
            raise AttributeError(name)
        return getattr(self.scanner, name)


def _sort_column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """The values ``table`` is sorted by for the key ``name`` (a column, or a struct's field
    as ``st.x``), floats as integers in IEEE total order: pylance (DataFusion) sorts
    floats so (-0.0 before 0.0, NaN above +inf whichever the direction), where pyarrow's
    sort ties the zeros and keeps NaN beside the NULLs (last in a descending sort)."""
    if name in table.column_names:
        column = table.column(name)
    else:
        path = split_path(name)
        if path[0] not in table.column_names:
            raise NotFoundError(f"order_by column {name!r} does not exist; columns: "
                                f"{', '.join(table.column_names)}")
        column = table.column(path[0])
        for part in path[1:]:
            if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
                raise NotFoundError(f"order_by column {name!r} does not exist")
            column = pc.struct_field(column, part)
    if not pa.types.is_floating(column.type):
        return column
    chunks = []
    for chunk in column.chunks:
        values = chunk.fill_null(0).to_numpy(zero_copy_only=False)
        mask = chunk.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
        chunks.append(pa.array(total_order(np.ascontiguousarray(values)), mask=mask))
    return pa.chunked_array(chunks, pa.from_numpy_dtype(
        np.dtype(f"int{8 * column.type.byte_width}")))
