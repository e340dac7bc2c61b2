"""Casts pyarrow cannot make as DataFusion makes them, made by DataFusion itself.

Written values are cast to their column's type as DataFusion's ``CAST`` would cast them
(see :mod:`.casts`). Most casts pyarrow makes alike, or :mod:`.casts` rounds and spells
as arrow-rs does. The rest of arrow-rs's cast matrix is large: a decimal to an integer
truncated, ``'1.5'`` to ``decimal(5,0)`` rounded, text with a zone offset to a time
without zone, integers to dates and times, a value to a one-element list, a list to
text, floats inside lists spelled as DataFusion spells them... pyarrow refuses most of
those, or spells them its own way. Reimplementing each would be a second, drifting copy
of arrow-rs's kernel; DataFusion is in the process already, so those casts are made by
its kernel, over the values alone (a fresh session per cast: it registers the values as
a table). A cast DataFusion refuses too is ``pa.ArrowInvalid`` with its message, as any
failing cast here is.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pyarrow as pa

from lance_sql.expr.lists import is_list

__all__ = ["engine_cast", "nested_needs_engine"]

_PREFIXES = re.compile(r"^(DataFusion error: )?(Arrow error: )?(Cast error: )?")


def engine_cast(values: pa.Array | pa.ChunkedArray, target: pa.DataType
                ) -> pa.Array | pa.ChunkedArray:
    """``values`` cast to ``target`` by DataFusion's cast kernel; an array stays an array
    and a chunked array a chunked array. ``pa.ArrowInvalid`` when DataFusion refuses.

    The cast runs on a thread of its own, joined before this returns: the caller may be
    running inside a DataFusion query (a table provider reading the change feed), whose
    runtime refuses to start another query on its threads."""
    column = values if isinstance(values, pa.ChunkedArray) else \
        pa.chunked_array([values], type=values.type)
    if column.num_chunks == 0:
        column = pa.chunked_array([pa.array([], column.type)], type=column.type)
    outcome: list[pa.ChunkedArray | BaseException] = []

    def run() -> None:
        try:
            outcome.append(_datafusion_cast(column, target))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name="lance_sql-engine-cast")
    worker.start()
    worker.join()
    out = outcome[0]
    if isinstance(out, BaseException):
        message = _PREFIXES.sub("", str(out).strip())
        raise pa.ArrowInvalid(f"{message} (DataFusion's cast to {target})") from None
    if out.type != target:  # field names or nullability of nested types: same values
        out = out.cast(target)
    if out.num_chunks == 0:
        out = pa.chunked_array([pa.array([], target)], type=target)
    if isinstance(values, pa.ChunkedArray):
        return out
    return out.combine_chunks() if out.num_chunks != 1 else out.chunk(0)


def _datafusion_cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    import datafusion  # (imported on first use: plain reads never need it here)

    # one partition: the plan spawns no tasks on the runtime (whose threads may all be
    # busy with the query that asked for this cast)
    ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    frame = ctx.from_arrow(pa.table({"v": column}))
    return frame.select(datafusion.col("v").cast(target)).to_arrow_table().column(0)


def nested_needs_engine(source: pa.DataType, target: pa.DataType,
                        leaf_differs: Callable[[pa.DataType, pa.DataType], bool]) -> bool:
    """Whether a cast between nested types ``source`` and ``target`` needs DataFusion's
    kernel though pyarrow would make it: a pair of their leaves (walked in step, struct
    fields by name) that ``leaf_differs`` says pyarrow casts otherwise."""
    if is_list(source) and is_list(target):
        return nested_needs_engine(source.value_type, target.value_type, leaf_differs)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        # (pyarrow matches struct fields by name, as DataFusion does)
        return any(nested_needs_engine(source.field(f.name).type, f.type, leaf_differs)
                   for f in target if source.get_field_index(f.name) >= 0)
    if pa.types.is_map(source) and pa.types.is_map(target):
        return (nested_needs_engine(source.key_type, target.key_type, leaf_differs)
                or nested_needs_engine(source.item_type, target.item_type, leaf_differs))
    if _nested(source) or _nested(target):
        return False
    return source != target and leaf_differs(source, target)


def _nested(t: pa.DataType) -> bool:
    return is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t)
