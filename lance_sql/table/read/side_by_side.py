"""Whether reading a scan's fragments on several threads at once pays.

A read of a fragment's column costs a fixed amount of interpreter work (a few hundred
microseconds: page metadata, decode set-up, wrapping the arrays) plus work in proportion
to its bytes, which runs in numpy and Arrow without holding the interpreter lock. Two
threads only overlap the second part. When reads are small the first part dominates, and
two threads decoding at once spend their time handing the lock to each other: every
numpy call releases it and wakes the other thread. Measured on two cores, 1M rows of
five columns (int64, float64, int32, string, 16 x float32), wall ms, two threads -> one:

    fragments x rows    to_table()      columns=["id"]    SQL SELECT *
    1,000 x 1,000       1,946 -> 1,368  499 -> 315        2,888 -> 1,736
    100 x 10,000        349 -> 358      82 -> 53          459 -> 315
    10 x 100,000        48 -> 62        (read side by side: 10 MB a read)

so reads side by side pay once a read decodes some megabytes, and cost up to 1.7x
below that (``bench/bench_small_fragments.py`` measures both ways). :func:`reads_are_small`
says which side of that line a scan is on, from the columns' types (the decoded width of
a row) and the rows a read covers. Strings and other variable-width values count
:data:`VARIABLE_WIDTH` bytes, so a table holding a few very long strings a fragment is
taken for small and read on one thread: slower than it could be, never wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

__all__ = ["SIDE_BY_SIDE_MIN_BYTES", "VARIABLE_WIDTH", "reads_are_small", "row_width"]

# decoded bytes a read must reach on average before reads run side by side
SIDE_BY_SIDE_MIN_BYTES = 4 << 20
# bytes counted for a value of variable width (its offset and a short value)
VARIABLE_WIDTH = 16


def row_width(types: Iterable[pa.DataType]) -> int:
    """The decoded bytes of one row of columns of ``types`` (an estimate: see
    :data:`VARIABLE_WIDTH`)."""
    return sum(_width(t) for t in types)


def _width(t: pa.DataType) -> int:
    if pa.types.is_fixed_size_list(t):
        return t.list_size * _width(t.value_type)
    if pa.types.is_struct(t):
        return sum(_width(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_dictionary(t):
        return _width(t.index_type)
    if pa.types.is_null(t):
        return 0
    try:
        bits = t.bit_width
    except ValueError:  # variable width: strings, binaries, lists, maps
        return VARIABLE_WIDTH
    return max(1, bits // 8)


def reads_are_small(width: int, rows: int, reads: int) -> bool:
    """Whether ``reads`` reads of ``rows`` rows in all, each row ``width`` decoded bytes
    (:func:`row_width`), are too small on average to gain from running side by side."""
    if reads <= 0:
        return True
    return rows * max(width, 1) < SIDE_BY_SIDE_MIN_BYTES * reads
