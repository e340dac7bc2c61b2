"""Casts of written values to a decimal column, rounded as DataFusion rounds them.

A SQL write computes its values with one engine (DataFusion for INSERT and MERGE
sources, pyarrow for UPDATE's SET expressions) and stores them with a cast to the
column's type. DataFusion types ``1.005`` as a double and casts a double to
``decimal(p, s)`` as arrow-rs does: ``round(value * 10^s)``, half away from zero, on
the double (so ``2.675`` stores ``2.68`` and ``1.005`` stores ``1.00``: the product is
``100.49999999999999``), and a decimal of larger scale by rounding half away from zero.
pyarrow rounds the double's exact binary value instead (``2.675`` -> ``2.67``) and
refuses a decimal losing digits, so writes cast through :func:`cast_like_datafusion`,
which makes them store what ``SELECT CAST(... AS DECIMAL(p, s))`` returns. A value
that does not fit the precision (or a NaN / infinity) is ``pa.ArrowInvalid``, as a
failing cast is; the callers name the column.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr.engine_cast import engine_cast, nested_needs_engine
from lance_sql.expr.text import decimal_text, float_text, needs_own_text, timestamp_text
from lance_sql.expr.udfs import scalar_function
from lance_sql.numpy_arrow import array_from_numpy, numpy_of

_MANTISSA_BITS = 53  # a double's significand, hidden bit included


def cast_like_datafusion(values: pa.Array | pa.ChunkedArray, target: pa.DataType
                         ) -> pa.Array | pa.ChunkedArray:
    """``values`` cast to ``target`` as DataFusion casts them: to a decimal128 column
    with its rounding (see the module); integers to a decimal of any precision that
    holds the values (pyarrow asks for one holding every integer of the type); text
    without a zone offset to a zoned timestamp as wall-clock time in that zone; floats,
    timestamps and date64 to text spelled as DataFusion spells them (``1.0``, not
    pyarrow's ``1``); floats to integers truncated toward zero, as SQL's CAST (out of
    range still fails); integers to the nearest float; times to a coarser unit cut
    toward zero, text to a time of any unit rounded down. Any other cast as pyarrow
    makes it; where pyarrow refuses one, or would cast nested values otherwise (floats
    in a list to text), as DataFusion's own kernel makes it
    (:mod:`.engine_cast`)."""
    source = values.type
    if _is_text(target) and needs_own_text(source):
        return _as_text(values, target)
    if pa.types.is_floating(source) and pa.types.is_integer(target):
        return pc.trunc(values).cast(target)  # (the cast checks the range)
    if pa.types.is_decimal(source) and pa.types.is_floating(target):
        if isinstance(values, pa.ChunkedArray):
            return pa.chunked_array([decimal_doubles(c).cast(target) for c in values.chunks],
                                    type=target)
        return decimal_doubles(values).cast(target)
    if pa.types.is_integer(source) and pa.types.is_decimal(target):
        wide = (pa.decimal128(38, target.scale) if pa.types.is_decimal128(target)
                else pa.decimal256(76, target.scale))
        return values.cast(wide).cast(target)  # (the second cast checks the precision)
    if _is_text(source) and pa.types.is_timestamp(target):
        # parsed to the nanosecond, then cut to the column's unit (a time of finer
        # digits than the column is truncated, not refused)
        fine = pa.timestamp("ns", target.tz)
        try:
            parsed = values.cast(fine)
        except pa.ArrowInvalid:  # no offset in the text: the zone's wall-clock time
            if target.tz is None:  # (or, into a time without zone, one with an offset)
                return engine_cast(values, target)
            parsed = pc.assume_timezone(values.cast(pa.timestamp("ns")), target.tz)
        return _floored(parsed, target)
    if (pa.types.is_timestamp(source) and source.tz is None or pa.types.is_date(source)) \
            and pa.types.is_timestamp(target) and target.tz is not None:
        # a time without a zone is wall-clock time in the column's zone (arrow-rs's
        # cast; pyarrow's takes it as UTC)
        local = values.cast(pa.timestamp(target.unit), safe=False)
        return pc.assume_timezone(local, target.tz)
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target) or \
            pa.types.is_integer(source) and pa.types.is_floating(target):
        # a finer unit truncated toward zero; an integer to the nearest float (beyond
        # 2**24 for float32): DataFusion's casts, which pyarrow refuses as lossy
        return values.cast(target, safe=False)
    if not _rounds(source, target):
        if pa.types.is_timestamp(source) and pa.types.is_date64(target) or \
                nested_needs_engine(source, target, _own_cast):
            # (a time to date64: arrow-rs takes a zoned time's UTC date, cuts a time
            # before 1970 toward zero; pyarrow takes the local date, rounds down)
            return engine_cast(values, target)
        try:
            return values.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            # refused by pyarrow: DataFusion may make it (or words its own refusal)
            return engine_cast(values, target)
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([_to_decimal(chunk, target) for chunk in values.chunks],
                                type=target)
    return _to_decimal(values, target)


def decimal_doubles(values: pa.Array) -> pa.Array:
    """Decimals as float64 the way arrow-rs converts them: the unscaled integer divided
    by 10^scale (pyarrow's cast multiplies by 10^-scale, one unit in the last place off
    for 1.64 and many others)."""
    t = values.type
    unscaled = values.view((pa.decimal128 if t.byte_width == 16 else pa.decimal256)(
        t.precision, 0)).cast(pa.float64())
    return pc.divide(unscaled, 10.0 ** t.scale)


def _floored(values: pa.Array | pa.ChunkedArray, target: pa.TimestampType
             ) -> pa.Array | pa.ChunkedArray:
    """Nanosecond times in ``target``'s unit rounded down (arrow-rs parses text to a
    time of a coarser unit so; a time cast to one is cut toward zero instead)."""
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([_floored(c, target) for c in values.chunks], type=target)
    per = 10 ** (9 - {"s": 0, "ms": 3, "us": 6, "ns": 9}[target.unit])
    nanos = values.cast(pa.int64())
    mask = numpy_of(nanos.is_null()) if nanos.null_count else None
    down = numpy_of(nanos.fill_null(0)) // per
    return array_from_numpy(down, mask=mask).cast(target)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _as_text(values: pa.Array | pa.ChunkedArray, target: pa.DataType
             ) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([_as_text(c, target) for c in values.chunks], type=target)
    if pa.types.is_date64(values.type):
        values = values.cast(pa.timestamp("ms"))  # DataFusion spells it as its timestamp
    spelled = float_text(values) if pa.types.is_floating(values.type) else \
        decimal_text(values) if pa.types.is_decimal(values.type) else \
        timestamp_text(values)
    return spelled if spelled.type == target else spelled.cast(target)


def _own_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether :func:`cast_like_datafusion` casts ``source`` to ``target`` otherwise than
    pyarrow's cast does."""
    return (_rounds(source, target)
            or (pa.types.is_integer(source) and pa.types.is_decimal(target))
            or (_is_text(target) and needs_own_text(source))
            or (pa.types.is_floating(source) and pa.types.is_integer(target))
            or (_is_text(source) and pa.types.is_timestamp(target))
            or (pa.types.is_timestamp(source) and pa.types.is_timestamp(target)
                and source != target)
            or (pa.types.is_date(source) and pa.types.is_timestamp(target)
                and target.tz is not None)
            or (pa.types.is_decimal(source) and pa.types.is_floating(target))
            or (pa.types.is_integer(source) and pa.types.is_floating(target))
            or (pa.types.is_timestamp(source) and pa.types.is_date64(target)))


def cast_table_like_datafusion(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` column by column with :func:`cast_like_datafusion`.
    Only top-level NULLs are checked against a field (pyarrow's cast of a struct refuses
    NULLs in a non-nullable child even under NULL structs, where they are no values at
    all; nested fields' NULLs are the writer's to refuse)."""
    if table.schema.names != schema.names:
        return table.cast(schema)  # (pyarrow words the mismatch)
    columns = []
    for i, field in enumerate(table.schema):
        want = schema.field(i)
        values = table.column(i)
        if field.type != want.type:
            values = cast_like_datafusion(values, want.type)
        if not want.nullable and values.null_count:
            raise pa.ArrowInvalid(f"column {want.name!r} is not nullable but holds null "
                                  "values")
        columns.append(values)
    # one table of them all (a column set at a time copied the table's columns each time)
    return pa.Table.from_arrays(columns, schema=schema)


def _rounds(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``target`` rounds unlike pyarrow's."""
    if not pa.types.is_decimal128(target):
        return False
    if pa.types.is_floating(source):
        return True
    return pa.types.is_decimal(source) and source.scale > target.scale


def _to_decimal(values: pa.Array, target: pa.Decimal128Type) -> pa.Array:
    if pa.types.is_decimal(values.type):  # fewer digits: half away from zero, then exact
        t = values.type  # (a digit to spare for the carry: 9.999 rounds to 10.00)
        wide = (pa.decimal128 if t.precision < 38 else pa.decimal256)(
            min(t.precision + 1, 76), t.scale)
        return pc.round(values.cast(wide), ndigits=target.scale,
                        round_mode="half_towards_infinity").cast(target)
    return _float_to_decimal(values, target)


def _float_to_decimal(values: pa.Array, target: pa.Decimal128Type) -> pa.Array:
    """Doubles as decimal128: arrow-rs's ``(v * 10^scale).round()``, checked against the
    precision, built as 128-bit two's complement words without a per-row loop."""
    valid = np.ones(len(values), bool) if values.null_count == 0 else \
        np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
    x = np.asarray(values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False),
                   np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # infinities and NaNs fail below
        scaled = x * (10.0 ** target.scale)
        whole = np.trunc(scaled)
        rounded = whole + np.where(np.abs(scaled - whole) >= 0.5, np.sign(scaled), 0.0)
    bad = valid & ~(np.abs(rounded) < 10.0 ** target.precision)  # NaN fails too
    if bad.any():
        value = float(x[np.flatnonzero(bad)[0]])
        why = "not a number" if not np.isfinite(value) else \
            f"too large for precision {target.precision}"
        raise pa.ArrowInvalid(f"{value} does not fit {target}: {why} (DataFusion's cast "
                              "refuses it too)")
    rounded = np.where(valid, rounded, 0.0)
    words = _int128_words(rounded)
    buffers = [None if values.null_count == 0 else pa.array(valid).buffers()[1],
               pa.py_buffer(words.tobytes())]
    return pa.Array.from_buffers(target, len(values), buffers,
                                 null_count=int(len(values) - valid.sum()))


def _int128_words(whole: np.ndarray) -> np.ndarray:
    """Integer-valued doubles as little-endian 128-bit two's complement integers: an
    (n, 2) uint64 array of (low, high) words. Exact: a double is mantissa * 2^shift."""
    fraction, exponent = np.frexp(np.abs(whole))
    mantissa = (fraction * float(1 << _MANTISSA_BITS)).astype(np.uint64)
    shift = exponent.astype(np.int64) - _MANTISSA_BITS
    right = np.clip(-shift, 0, 63).astype(np.uint64)
    left = np.clip(shift, 0, 63).astype(np.uint64)
    high_left = np.clip(shift - 64, 0, 63).astype(np.uint64)
    into_high = np.clip(64 - shift, 1, 63).astype(np.uint64)
    low = np.where(shift < 0, mantissa >> right,
                   np.where(shift < 64, mantissa << left, np.uint64(0)))
    high = np.where(shift <= 0, np.uint64(0),
                    np.where(shift < 64, mantissa >> into_high, mantissa << high_left))
    negative = whole < 0
    neg_low = ~low + np.uint64(1)
    neg_high = ~high + (low == 0).astype(np.uint64)
    words = np.empty((len(whole), 2), np.uint64)
    words[:, 0] = np.where(negative, neg_low, low)
    words[:, 1] = np.where(negative, neg_high, high)
    return words


# ------------------------------------------------ the same casts inside expressions
def decimal_double_function(t: pa.DataType) -> str:
    """The function turning decimals of type ``t`` into float64 as DataFusion does: the
    unscaled integer divided by 10^scale (pyarrow's cast multiplies by 10^-scale, one
    unit in the last place off for 1.64 and many others)."""
    return scalar_function(f"lance_sql_decimal_double_{t.byte_width}_{t.precision}_{t.scale}",
                           decimal_doubles, {"values": t}, pa.float64(),
                           "decimal as float64, DataFusion's way")


def float_decimal_function(source: pa.DataType, target: pa.Decimal128Type) -> str:
    """The function casting floats to ``target`` as DataFusion (arrow-rs) does: rounded
    half away from zero on the double times 10^scale, NaN, infinities and values beyond
    the precision refused (see :func:`cast_like_datafusion`)."""
    return scalar_function(
        f"lance_sql_float_decimal_{source}_{target.precision}_{target.scale}",
        lambda values: cast_like_datafusion(values, target), {"values": source}, target,
        "float as decimal, DataFusion's way")
