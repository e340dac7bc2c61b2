"""Filters that are a conjunction of column-versus-constant comparisons, as masks.

A scan's filter is applied by pyarrow's Acero (``Table.filter(expression)``), whose fixed
cost per call (a plan, its threads) dwarfs the work on a 128k-row slice. Most point and
range filters are ``col op constant`` comparisons joined by AND; for those the very same
compute kernels (``pc.equal``, ``pc.less``, ...) evaluated on the arrays give the same rows
without Acero, and tell which rows match before any other column (or row address) is
built. Only a tree known to *be* the filter may be turned into :class:`Comparison` s (the
SQL layer decodes the expression DataFusion pushed); anything else keeps the general path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr import Call, Column, Expr, Literal

_KERNELS = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
            ">": "greater", ">=": "greater_equal"}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NULL_TESTS = ("is_null", "is_not_null")


@dataclass(frozen=True)
class Comparison:
    """``column op value`` (op one of ``= != < <= > >=``), or a null test of ``column``
    (op ``is_null`` / ``is_not_null``, value None)."""

    column: str
    op: str
    value: pa.Scalar | None = None


def conjunction(expr: Expr | None) -> tuple[Comparison, ...] | None:
    """The comparisons every kept row satisfies when ``expr`` is exactly their AND; None
    when ``expr`` has any other shape (OR, NOT, casts, functions, nested fields, NULL or
    untyped constants...)."""
    if expr is None:
        return None
    parts = expr.args if isinstance(expr, Call) and expr.op == "and" else (expr,)
    out = []
    for part in parts:
        comparison = _comparison(part)
        if comparison is None:
            return None
        out.append(comparison)
    return tuple(out) if out else None


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
        value = pa.scalar(right.value, right.type)
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
        value = c.value
        index = schema.get_field_index(c.column)
        if value is not None and index >= 0:
            value = _lossless(value, schema.field(index).type)
        out.append(c if value is c.value else Comparison(c.column, c.op, value))
    return tuple(out)


def _lossless(value: pa.Scalar, t: pa.DataType) -> pa.Scalar:
    """``value`` as type ``t`` when both are integers or ``t`` is a float type that holds
    the integer exactly; else ``value`` itself."""
    if value.type.equals(t) or not pa.types.is_integer(value.type) or not value.is_valid:
        return value
    v = value.as_py()
    if pa.types.is_integer(t):
        try:
            return pa.scalar(v, t)
        except (pa.ArrowException, OverflowError, ValueError):
            return value  # out of the column's range: the general path decides
    if (pa.types.is_float32(t) or pa.types.is_float64(t)) and abs(v) <= (
            1 << (24 if pa.types.is_float32(t) else 53)):
        return pa.scalar(float(v), t)
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
    (with its implicit casts) must decide."""
    keep: np.ndarray | None = None
    for c in comparisons:
        array = arrays[c.column]
        if c.op in _NULL_TESTS:
            test = array.is_null() if c.op == "is_null" else array.is_valid()
        elif c.value is None or not c.value.type.equals(array.type):
            return None
        elif not array.null_count and _numeric(array.type):
            # numpy compares ints and floats as Arrow does (IEEE: NaN equals nothing),
            # and gives bytes, not bits to unpack
            keep = _and(keep, _NUMPY[c.op](_values(array), c.value.as_py()))
            continue
        else:
            test = getattr(pc, _KERNELS[c.op])(array, c.value)
        if test.null_count:
            test = pc.fill_null(test, False)
        keep = _and(keep, _to_numpy(test))
    return keep


_NUMPY = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
          ">": np.greater, ">=": np.greater_equal}


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) and not pa.types.is_float16(t)


def _values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(array, pa.ChunkedArray):
        return array.to_numpy()
    return array.to_numpy(zero_copy_only=True)


def _and(keep: np.ndarray | None, bits: np.ndarray) -> np.ndarray:
    return bits if keep is None else np.logical_and(keep, bits, out=keep)


def _to_numpy(test: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(test, pa.ChunkedArray):
        if test.num_chunks == 0:
            return np.zeros(0, bool)
        test = test.combine_chunks() if test.num_chunks > 1 else test.chunk(0)
    return np.array(test.to_numpy(zero_copy_only=False), dtype=bool, copy=True)
