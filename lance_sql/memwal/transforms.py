"""Evaluate region specs over Arrow data: one region value per row and field, vectorised.

The writer routes every row it accepts by these values, and the reader prunes regions by
evaluating the same transforms on a predicate's literals, so both must agree exactly:
both go through :func:`region_values`.

Semantics (the spec's expressions, evaluated with pyarrow where it is exact and cheaper):

* ``identity``: the value itself, in the field's result type.
* ``year`` / ``month`` / ``day`` / ``hour``: ``date_part`` of a date or timestamp, int32
  (timestamps with a zone count in that zone's local time, as DataFusion does);
  ``month``, ``day`` and ``hour`` are the month of the year, day of the month and hour of
  the day — not a count since the epoch.
* ``bucket`` / ``multi_bucket``: ``abs(murmur3(bytes)) % N`` (see :mod:`.murmur3` for the
  bytes); ``multi_bucket`` hashes the concatenated bytes of its non-null columns in
  order (null only when all are null), so ``multi_bucket([c], N)`` equals ``bucket(c, N)``.
* ``truncate``: ``left(col0, W)`` for strings (W characters) and binaries (W bytes),
  ``col0 - (col0 % W)`` for numbers (``%`` keeps the dividend's sign, as in SQL).
* expressions: DataFusion SQL over ``col0, col1, …`` cast to the result type.

A source column missing from the data (dropped from the table) reads as NULL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.format.schema import LanceSchema, arrow_type_of
from lance_sql.memwal.murmur3 import (
    bucket,
    bucket_numbers_of,
    hash_input,
    murmur3_32,
    murmur3_32_concat,
    scalar_hash,
)
from lance_sql.numpy_arrow import array_from_numpy, numpy_of, scalar, true_mask

__all__ = ["bucket_numbers", "evaluate_field", "region_values", "scalar_region_values",
           "sql_on_own_thread"]

_local = threading.local()


def region_values(spec: RegionSpec, columns: Sequence[pa.Array | None],
                  num_rows: int) -> pa.Table:
    """One column per region field (named by field id) for ``num_rows`` rows.

    ``columns`` holds the source arrays of every field, in order (the flattened
    ``source_ids`` of the spec); None for a source column the data does not have.
    """
    out, at = [], 0
    for f in spec.fields:
        width = len(f.source_ids) or len(f.source_columns)
        out.append(evaluate_field(f, list(columns[at:at + width]), num_rows))
        at += width
    return pa.table(out, names=[f.field_id for f in spec.fields])


def bucket_numbers(spec: RegionSpec, columns: Sequence[pa.Array | None]) -> np.ndarray | None:
    """:func:`region_values` of a spec of one ``bucket`` field over one integer column
    without nulls, as int64 numbers computed in numpy alone (no Arrow array per step: a
    lookup of many keys routes them this way); None for any other spec or column."""
    if len(spec.fields) != 1 or len(columns) != 1 or columns[0] is None:
        return None
    f = spec.fields[0]
    if f.expression is not None or f.transform != "bucket" or \
            (len(f.source_ids) or len(f.source_columns)) != 1:
        return None
    result = arrow_type_of(f.result_type) if f.result_type else None
    if result is not None and not (result.equals(pa.int32()) or result.equals(pa.int64())):
        return None  # (a narrower type may refuse the values: region_values says how)
    column = _combined(columns[0])
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    return bucket_numbers_of(column, f.parameter("num_buckets"))


def scalar_region_values(spec: RegionSpec, values: Sequence[object],
                         types: Sequence[pa.DataType]) -> tuple | None:
    """The region values of one row given as Python ``values`` (of Arrow ``types``, the
    spec's source columns in order), as :func:`region_values` would compute them (then
    read back with ``as_py``), without building Arrow arrays: a single-key lookup routes
    itself this way. None when a field is not a ``bucket`` or ``identity`` of an integer,
    string or binary value (the caller then evaluates :func:`region_values`)."""
    out: list[object] = []
    at = 0
    for f in spec.fields:
        width = len(f.source_ids) or len(f.source_columns)
        if width != 1 or f.expression is not None or at >= len(values):
            return None
        value, t = values[at], types[at]
        at += 1
        if value is None:
            return None
        if f.transform == "bucket":
            h = scalar_hash(value, t)
            if h is None:
                return None
            out.append(abs(h) % f.parameter("num_buckets"))
        elif f.transform == "identity" and _plain_type(t):
            result = arrow_type_of(f.result_type) if f.result_type else t
            if not result.equals(t):
                return None
            out.append(value)
        else:
            return None
    return tuple(out)


def _plain_type(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def check_spec_types(spec: RegionSpec, schema: LanceSchema) -> None:
    """SchemaError when a field of ``spec`` (bound to ``schema``) cannot route its source
    columns' types: its transform takes no such values, or its region values cannot be
    hashed into a region id. Checked when the spec is set up, not at every put after."""
    by_id = {f.id: f for f in schema.fields}
    for f in spec.fields:
        sources = [pa.nulls(0, by_id[i].to_arrow().type) for i in f.source_ids]
        try:
            hash_input(evaluate_field(f, sources, 0))
        except (InvalidInputError, pa.ArrowException) as exc:
            types = ", ".join(str(a.type) for a in sources)
            raise SchemaError(f"region field {f.field_id!r}: {f.expression or f.transform} "
                              f"cannot route values of type {types}: {exc}") from exc


def evaluate_field(f: RegionField, sources: list[pa.Array | None], num_rows: int) -> pa.Array:
    """The region values of one field; ``sources`` in the field's source order."""
    result_type = arrow_type_of(f.result_type) if f.result_type else None
    arrays = [_combined(a) if a is not None else pa.nulls(num_rows) for a in sources]
    for a in arrays:
        if len(a) != num_rows:
            raise InvalidInputError(f"region field {f.field_id!r}: {len(a)} values for "
                                    f"{num_rows} rows")
    if f.expression is not None:
        values = _expression(f, arrays, num_rows)
    else:
        values = _TRANSFORMS[f.transform](f, arrays)  # type: ignore[index]
    if result_type is not None and not values.type.equals(result_type):
        try:
            values = values.cast(result_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(f"region field {f.field_id!r}: {values.type} values do not "
                              f"fit its result type {f.result_type}: {exc}") from exc
    return values


def _combined(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _identity(f: RegionField, arrays: list[pa.Array]) -> pa.Array:
    return arrays[0]


def _date_part(part: str):  # a transform of the table below
    fn = {"year": pc.year, "month": pc.month, "day": pc.day, "hour": pc.hour}[part]

    def transform(f: RegionField, arrays: list[pa.Array]) -> pa.Array:
        a = arrays[0]
        if pa.types.is_null(a.type):
            return pa.nulls(len(a), pa.int32())
        ok = pa.types.is_timestamp(a.type) or (part != "hour" and pa.types.is_date(a.type))
        if not ok:
            raise SchemaError(f"region field {f.field_id!r}: {part} needs a "
                              f"{'timestamp' if part == 'hour' else 'date or timestamp'} "
                              f"column, not {a.type}")
        return fn(a).cast(pa.int32())

    return transform


def _bucket(f: RegionField, arrays: list[pa.Array]) -> pa.Array:
    return bucket(murmur3_32(arrays[0]), f.parameter("num_buckets"))


def _multi_bucket(f: RegionField, arrays: list[pa.Array]) -> pa.Array:
    typed = [a if not pa.types.is_null(a.type) else a.cast(pa.binary()) for a in arrays]
    return bucket(murmur3_32_concat(typed), f.parameter("num_buckets"))


def _truncate(f: RegionField, arrays: list[pa.Array]) -> pa.Array:
    a = arrays[0]
    width = f.parameter("width")
    t = a.type
    if pa.types.is_null(t):
        return a
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.utf8_slice_codeunits(a, 0, width)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_slice(a, 0, width)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = np.asarray(numpy_of(pc.fill_null(a, scalar(0, t))))
        wide = values.dtype.type(width)
        with np.errstate(invalid="ignore"):  # (infinities: their own region value below)
            rest = np.fmod(values, wide)
        if pa.types.is_floating(t):  # an infinity or NaN is cut to itself
            rest = np.where(np.isfinite(values), rest, values.dtype.type(0))
        cut = values - rest
        return array_from_numpy(cut, t, mask=true_mask(pc.is_null(a)))
    if pa.types.is_decimal(t):
        return _run_sql(f"col0 - (col0 % {width})", [a], len(a)).cast(t)
    raise SchemaError(f"region field {f.field_id!r}: truncate needs a string, binary or "
                      f"numeric column, not {t}")


_TRANSFORMS = {
    "identity": _identity,
    "year": _date_part("year"),
    "month": _date_part("month"),
    "day": _date_part("day"),
    "hour": _date_part("hour"),
    "bucket": _bucket,
    "multi_bucket": _multi_bucket,
    "truncate": _truncate,
}


def _expression(f: RegionField, arrays: list[pa.Array], num_rows: int) -> pa.Array:
    return _run_sql(f.expression or "", arrays, num_rows)


@contextmanager
def sql_on_own_thread() -> Iterator[None]:
    """Within it, expressions this module hands to DataFusion run on a thread of their
    own, joined before they return. Readers need it: they may be called by DataFusion's
    runtime (a table provider planning a SQL query), and driving DataFusion again from a
    thread inside its runtime panics ("Cannot start a runtime from within a runtime")."""
    before = getattr(_local, "own_thread", False)
    _local.own_thread = True
    try:
        yield
    finally:
        _local.own_thread = before


def _run_sql(sql: str, arrays: list[pa.Array], num_rows: int) -> pa.Array:
    """``SELECT sql FROM (col0, col1, …)`` in DataFusion, one value per row, in row order."""
    if getattr(_local, "own_thread", False):
        return _run_sql_on_own_thread(sql, arrays, num_rows)
    ctx = getattr(_local, "ctx", None)
    if ctx is None:  # one context per thread: writers route on their own threads
        # loaded on first use: DataFusion (and the pandas it loads) costs ~0.2 s, which
        # `import lance_sql` (it returns MemWAL-capable datasets) must not pay
        import datafusion

        ctx = _local.ctx = datafusion.SessionContext()
    names = [f"col{i}" for i in range(len(arrays))]
    batch = pa.record_batch(arrays or [pa.nulls(num_rows)], names=names or ["col0"])
    table_name = f"region_rows_{threading.get_ident()}"
    ctx.register_record_batches(table_name, [[batch]])
    try:
        result = ctx.sql(f"SELECT ({sql}) AS v FROM {table_name}").to_arrow_table()
    except Exception as exc:  # DataFusion raises its own exception types
        raise InvalidInputError(f"region expression {sql!r} failed: {exc}") from exc
    finally:
        ctx.deregister_table(table_name)
    if result.num_rows != num_rows:
        raise InvalidInputError(f"region expression {sql!r} returned {result.num_rows} rows "
                                f"for {num_rows}")
    return result.column(0).combine_chunks()


def _run_sql_on_own_thread(sql: str, arrays: list[pa.Array], num_rows: int) -> pa.Array:
    """:func:`_run_sql` on a new thread (outside any runtime), joined before returning;
    its result or its exception comes back to the caller."""
    out: list[pa.Array] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            out.append(_run_sql(sql, arrays, num_rows))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=work, name="region-expression")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]
