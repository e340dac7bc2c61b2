"""Values a MemWAL holds under a column's older type, as the column's type now.

``alter_columns`` rewrites the base table's values with :func:`cast_like_datafusion`
(times cut toward zero to a coarser unit, integers rounded to the nearest float, ...).
Rows the MemWAL holds unmerged (flushed generations, MemTables, WAL entries) keep the
type their writer had and are cast when read, merged or replayed; with the same cast, so
a read gives the same values before and after the merge. A value that does not fit
(which ``alter_columns`` refuses to leave behind: see :mod:`.schema_changes`) is a
:class:`~lance_sql.errors.SchemaError` naming where it is, not pyarrow's exception.
"""

from __future__ import annotations

import pyarrow as pa

from lance_sql.errors import SchemaError
from lance_sql.expr.casts import cast_like_datafusion

__all__ = ["as_column_type"]


def as_column_type(values: pa.Array | pa.ChunkedArray, target: pa.DataType, what: str
                   ) -> pa.Array | pa.ChunkedArray:
    """``values`` as ``target`` (unchanged when of that type already); ``what`` names
    them in the error of a value that does not fit."""
    if values.type.equals(target):
        return values
    try:
        return cast_like_datafusion(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"{what} ({values.type}) does not fit the table's type {target}: "
                          f"{exc}") from exc
