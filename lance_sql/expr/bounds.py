"""Ranges a filter confines a numeric column to, for pruning by row address.

The one place lance_sql intersects, unions and complements sorted half-open ranges.
"""

from __future__ import annotations

import math
from decimal import Decimal
from functools import reduce
from typing import Any, TypeAlias

from lance_sql.expr.model import COMPARISONS, Call, Column, Expr, Literal

FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

_MAX = 2**64
_Ranges: TypeAlias = list[tuple[int, int]]


def rowaddr_bounds(expr: Expr, column: str = "_rowaddr") -> _Ranges | None:
    """Sorted, disjoint half-open ``[lo, hi)`` ranges of ``column`` (a uint64) outside of
    which ``expr`` cannot be TRUE; None when every value might match.

    Understands AND/OR/NOT over comparisons, IN and BETWEEN of the bare column with numeric
    literals; anything else counts as "might match", so the answer is always safe to prune by.
    """
    ranges = _bounds(expr, (column,), False)
    return None if ranges is None or ranges == [(0, _MAX)] else ranges


def _bounds(e: Expr, path: tuple[str, ...], negated: bool) -> _Ranges | None:
    if isinstance(e, Literal):
        if e.value is None:
            return []
        if isinstance(e.value, bool):
            return None if e.value != negated else []
        return None
    if not isinstance(e, Call):
        return None
    op, args = e.op, e.args
    if op in ("and", "or"):
        parts = [_bounds(a, path, negated) for a in args]
        if (op == "and") != negated:  # a conjunction (after De Morgan)
            known = [p for p in parts if p is not None]
            return reduce(intersect_ranges, known) if known else None
        if any(p is None for p in parts):
            return None
        return _normalize([r for p in parts for r in p])  # type: ignore[union-attr]
    if op == "not":
        return _bounds(args[0], path, not negated)
    if op in COMPARISONS:
        a, b = args
        if isinstance(b, Column) and isinstance(a, Literal):
            a, b, op = b, a, FLIP[op]
        if a == Column(path) and isinstance(b, Literal):
            return _compare_range(NEGATE[op] if negated else op, b.value)
        return None
    if args[0] != Column(path):
        return None
    if op == "between" and all(isinstance(a, Literal) for a in args[1:]):
        low, high = args[1].value, args[2].value  # type: ignore[union-attr]
        if negated:
            return _union_known(_compare_range("<", low), _compare_range(">", high))
        return _intersect_known(_compare_range(">=", low), _compare_range("<=", high))
    if op == "in" and all(isinstance(a, Literal) for a in args[1:]):
        values = [a.value for a in args[1:]]  # type: ignore[union-attr]
        if negated and None in values:  # x NOT IN (..., NULL) is never TRUE
            return []
        points = [_compare_range("=", v) for v in values if v is not None]
        if not negated:
            return _union_known(*points)
        return _complement(_normalize([r for p in points if p is not None for r in p]))
    return None


def _union_known(*parts: _Ranges | None) -> _Ranges | None:
    if any(p is None for p in parts):
        return None
    return _normalize([r for p in parts for r in p])  # type: ignore[union-attr]


def _intersect_known(a: _Ranges | None, b: _Ranges | None) -> _Ranges | None:
    if a is None or b is None:
        return b if a is None else a
    return intersect_ranges(a, b)


def _compare_range(op: str, v: Any) -> _Ranges | None:
    """Values of an unsigned 64-bit column where ``column <op> v`` can be TRUE."""
    if v is None:
        return []
    if isinstance(v, bool) or not isinstance(v, int | float | Decimal):
        return None
    if isinstance(v, float | Decimal) and not math.isfinite(v):
        if math.isnan(v):
            return None
        v = 2 * _MAX if v > 0 else -2 * _MAX
    whole = v == math.floor(v)
    if op == "=":
        ranges = [(int(v), int(v) + 1)] if whole else []
    elif op == "!=":
        ranges = [(0, int(v)), (int(v) + 1, _MAX)] if whole else [(0, _MAX)]
    elif op in ("<", "<="):
        ranges = [(0, math.ceil(v) if op == "<" else math.floor(v) + 1)]
    else:
        ranges = [(math.floor(v) + 1 if op == ">" else math.ceil(v), _MAX)]
    return _normalize(ranges)


def _normalize(ranges: _Ranges) -> _Ranges:
    """Clip to [0, 2**64), drop empty ranges, sort and merge touching ones."""
    out: _Ranges = []
    for lo, hi in sorted((max(lo, 0), min(hi, _MAX)) for lo, hi in ranges):
        if lo >= hi:
            continue
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def intersect_ranges(a: _Ranges, b: _Ranges) -> _Ranges:
    """Intersection of two sorted lists of disjoint half-open ranges, in one merge pass."""
    out: _Ranges = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _complement(ranges: _Ranges) -> _Ranges:
    """[0, 2**64) minus a normalized range list."""
    out: _Ranges = []
    start = 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo))
        start = hi
    return out + [(start, _MAX)] if start < _MAX else out
