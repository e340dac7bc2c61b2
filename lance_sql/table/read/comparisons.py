"""Filters that are a conjunction of column-versus-constant comparisons, as masks.

A scan's filter is applied by pyarrow's Acero (:func:`~lance_sql.expr.filter_serially`),
whose fixed cost per call (a plan) dwarfs the work on a 128k-row slice. Most point and
range filters are ``col op constant`` comparisons joined by AND; for those the very same
compute kernels (``pc.equal``, ``pc.less``, ...) evaluated on the arrays give the same rows
without Acero, and tell which rows match before any other column (or row address) is
built. Only a tree known to *be* the filter may be turned into :class:`Comparison` s (the
SQL layer decodes the expression DataFusion pushed); anything else keeps the general path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr import Call, Column, Expr, Literal
from lance_sql.expr.arrow import filter_rows, to_pyarrow
from lance_sql.float_order import float_key, float_keys
from lance_sql.numpy_arrow import (
    array_from_python,
    array_of_scalars,
    numpy_of,
    scalar,
    true_mask,
)
from lance_sql.table.read.masks import bool_array

_KERNELS = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
            ">": "greater", ">=": "greater_equal"}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NULL_TESTS = ("is_null", "is_not_null")


@dataclass(frozen=True)
class Comparison:
    """``column op value`` (op one of ``= != < <= > >=``), a null test of ``column``
    (op ``is_null`` / ``is_not_null``, value None), or ``column IN values`` (op ``in``)."""

    column: str
    op: str
    value: pa.Scalar | None = None
    values: tuple[pa.Scalar, ...] = ()
    # op ``in``: ``values`` as one array (of the column's type once :func:`typed` made it)
    value_set: pa.Array | None = field(default=None, compare=False)


def conjunction(expr: Expr | None) -> tuple[Comparison, ...] | None:
    """The comparisons every kept row satisfies when ``expr`` is exactly their AND
    (``x BETWEEN a AND b`` is ``x >= a`` and ``x <= b``); None when ``expr`` has any other
    shape (OR, NOT, casts, functions, nested fields, NULL or untyped constants...)."""
    if expr is None:
        return None
    parts = expr.args if isinstance(expr, Call) and expr.op == "and" else (expr,)
    out: list[Comparison] = []
    for part in parts:
        if isinstance(part, Call) and part.op == "between" and len(part.args) == 3:
            x, low, high = part.args
            pair = (_comparison(Call(">=", (x, low))), _comparison(Call("<=", (x, high))))
            if pair[0] is None or pair[1] is None:
                return None
            out.extend(pair)  # type: ignore[arg-type]
            continue
        comparison = _in_list(part) if isinstance(part, Call) and part.op == "in" \
            else _comparison(part)
        if comparison is None:
            return None
        out.append(comparison)
    return tuple(out) if out else None


def _in_list(expr: Call) -> Comparison | None:
    """``column IN (constants...)`` with typed, non-NULL constants."""
    name = _column_name(expr.args[0]) if expr.args else None
    items = expr.args[1:]
    if name is None or not items or not all(
            isinstance(i, Literal) and i.type is not None and i.value is not None
            for i in items):
        return None
    types = {i.type for i in items}  # type: ignore[union-attr]
    if len(types) != 1:
        return None
    try:
        value_set = array_from_python([i.value for i in items],  # type: ignore[union-attr]
                                      types.pop())
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    return Comparison(name, "in", values=tuple(value_set), value_set=value_set)


def _comparison(expr: Expr) -> Comparison | None:
    if not isinstance(expr, Call):
        return None
    if expr.op in _NULL_TESTS and len(expr.args) == 1:
        name = _column_name(expr.args[0])
        return None if name is None else Comparison(name, expr.op)
    if expr.op not in _KERNELS or len(expr.args) != 2:
        return None
    left, right = expr.args
    op = expr.op
    if isinstance(left, Literal) and isinstance(right, Column):
        left, right, op = right, left, _FLIPPED[op]
    name = _column_name(left)
    if name is None or not isinstance(right, Literal) or right.type is None \
            or right.value is None:
        return None
    try:
        value = scalar(right.value, right.type)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    return Comparison(name, op, value)


def typed(comparisons: tuple[Comparison, ...], schema: pa.Schema
          ) -> tuple[Comparison, ...]:
    """``comparisons`` with each constant of another numeric type than its column made
    the column's type when that loses nothing (``cat = 7`` parsed as int64 against an
    int32 column): the comparison holds for the same rows, and :func:`mask` can then
    evaluate it instead of leaving it to the general path."""
    out = []
    for c in comparisons:
        index = schema.get_field_index(c.column)
        if index < 0:
            out.append(c)
            continue
        t = schema.field(index).type
        if c.op == "in":
            out.append(replace(c, value_set=_lossless_set(c, t)))
            continue
        value = c.value if c.value is None else _lossless(c.value, t)
        out.append(c if value is c.value else replace(c, value=value))
    return tuple(out)


def _lossless_set(c: Comparison, t: pa.DataType) -> pa.Array | None:
    """An IN list's values as one array of the column's integer type when that loses
    nothing (else of their own type, or None when they have several)."""
    values = c.value_set
    if values is None:
        if not c.values or any(not v.type.equals(c.values[0].type) for v in c.values):
            return None
        values = array_of_scalars(c.values, c.values[0].type)
    if not values.type.equals(t) and pa.types.is_integer(values.type) and \
            pa.types.is_integer(t):
        try:
            return values.cast(t)  # a safe cast: a value out of the column's range fails
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return values
    return values


def _lossless(value: pa.Scalar, t: pa.DataType) -> pa.Scalar:
    """``value`` as type ``t`` when both are integers or ``t`` is a float type that holds
    the integer exactly; else ``value`` itself."""
    if value.type.equals(t) or not pa.types.is_integer(value.type) or not value.is_valid:
        return value
    v = value.as_py()
    if pa.types.is_integer(t):
        try:
            return scalar(v, t)
        except (pa.ArrowException, OverflowError, ValueError):
            return value  # out of the column's range: the general path decides
    if (pa.types.is_float32(t) or pa.types.is_float64(t)) and abs(v) <= (
            1 << (24 if pa.types.is_float32(t) else 53)):
        return scalar(float(v), t)
    return value


def _column_name(expr: Expr) -> str | None:
    if isinstance(expr, Column) and len(expr.path) == 1:
        return expr.path[0]
    return None


def columns_of(comparisons: tuple[Comparison, ...]) -> frozenset[str]:
    """The column names the comparisons read."""
    return frozenset(c.column for c in comparisons)


def mask(comparisons: tuple[Comparison, ...], arrays: Mapping[str, pa.Array | pa.ChunkedArray]
         ) -> np.ndarray | None:
    """Rows of ``arrays`` where every comparison holds (a comparison with NULL does not);
    None when a comparison's constant is not of its column's type, so the general path
    (with its implicit casts) must decide. Floats are ordered as DataFusion orders them
    (:mod:`lance_sql.float_order`): a NaN equals a NaN of its sign and is above every
    number (so ``x > 74.0`` keeps NaN rows), a negative NaN below."""
    keep: np.ndarray | None = None
    for c in comparisons:
        array = arrays[c.column]
        if c.op in _NULL_TESTS:
            test = array.is_null() if c.op == "is_null" else array.is_valid()
        elif c.op == "in":
            value_set = c.value_set
            # floats keep the general path: a hash lookup tells -0.0 from 0.0, SQL does not
            if value_set is None or pa.types.is_floating(array.type) or \
                    not value_set.type.equals(array.type):
                return None
            test = pc.is_in(array, value_set=value_set, skip_nulls=True)
        elif c.value is None or not c.value.type.equals(array.type) or \
                pa.types.is_float16(array.type):
            return None
        elif _numeric(array.type):
            # numpy gives bytes, not bits to unpack
            keep = _and(keep, _numeric_test(c.op, array, c.value.as_py()))
            continue
        else:
            test = getattr(pc, _KERNELS[c.op])(array, c.value)
        keep = _and(keep, true_mask(test))
    return keep


def _numeric_test(op: str, array: pa.Array | pa.ChunkedArray, value: float
                  ) -> np.ndarray:
    """``array op value`` for an integer or float32/64 column, NULL as False."""
    floating = pa.types.is_floating(array.type)
    nulls = array.null_count
    filled = pc.fill_null(array, scalar(0.0 if floating else 0, array.type)) if nulls \
        else array
    x = numpy_of(filled)
    if floating and value != value:  # a NaN constant: on the SQL order keys
        keys = float_keys(x)
        out = _NUMPY[op](keys, float_key(value, keys.dtype.itemsize))
    else:
        out = _NUMPY[op](x, value)
        nan = np.isnan(x) if floating and op in ("<", "<=", ">", ">=") else None
        if nan is not None and nan.any():  # NaN above every number, negative NaN below
            below = nan & np.signbit(x)
            out |= below if op[0] == "<" else nan & ~below
    if nulls:
        out &= true_mask(array.is_valid())
    return out


_NUMPY = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
          ">": np.greater, ">=": np.greater_equal}


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) and not pa.types.is_float16(t)


def _and(keep: np.ndarray | None, bits: np.ndarray) -> np.ndarray:
    return bits if keep is None else np.logical_and(keep, bits, out=keep)


def filter_table(table: pa.Table, tree: Expr) -> pa.Table:
    """``table``'s rows where ``tree`` (resolved against its schema) holds. A conjunction
    of comparisons is evaluated as a mask; other trees go through pyarrow's expression
    filter, whose engine (Acero, with pyarrow's dataset module) imports pandas on first
    use (~0.4 s for a process's first filtered scan)."""
    comparisons = conjunction(tree)
    if comparisons is not None and columns_of(comparisons) <= set(table.column_names):
        keep = mask(typed(comparisons, table.schema), dict(zip(
            table.column_names, table.columns, strict=True)))
        if keep is not None:
            return table.filter(bool_array(keep))
    return filter_rows(table, to_pyarrow(tree, table.schema))
