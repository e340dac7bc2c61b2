"""Batches as DataFusion can take them over the Arrow C interface.

arrow-rs (DataFusion 55) imports a sliced struct array whose children include a struct
(directly, or below fixed-size lists, whose slices also shift their child) with a wrong
child length and panics (``end <= self.len()``), a ``PanicException`` that escapes
``except Exception`` and ends the query. Plain slices of such columns are what
``to_batches(max_chunksize=...)`` and ``slice`` give, so every batch handed to
DataFusion goes through :func:`exportable`: those columns, when sliced, are copied to
arrays of their own (a copy of that column's rows only; other columns pass untouched).
"""

from __future__ import annotations

import functools

import pyarrow as pa

__all__ = ["exportable"]


def exportable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every sliced column DataFusion would misread copied unsliced."""
    columns = batch.columns
    if not any(c.offset and _shifts_nested_struct(c.type) for c in columns):
        return batch
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays([c]) if c.offset and _shifts_nested_struct(c.type) else c
         for c in columns], schema=batch.schema)


@functools.lru_cache(maxsize=256)
def _shifts_nested_struct(t: pa.DataType, inside_struct: bool = False) -> bool:
    """Whether a slice of type ``t`` reaches, through structs and fixed-size lists (which
    pass their offset on), a struct inside a struct."""
    if pa.types.is_struct(t):
        if inside_struct:
            return True
        return any(_shifts_nested_struct(t.field(i).type, True) for i in range(t.num_fields))
    if pa.types.is_fixed_size_list(t):
        return _shifts_nested_struct(t.value_type, inside_struct)
    return False
