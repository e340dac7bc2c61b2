"""Sets of key values as sorted, disjoint intervals, for combining the comparisons a filter
makes on one indexed column before the index is asked (pure: scalars in, queries out).

AND intersects, OR unions, NOT complements. Every set lies within the column's non-null
values: a comparison with NULL is never TRUE, nor is its negation, so complementing within
the non-null values is exact and NULL rows never enter a set.

Keys are ordered as SQL compares them (and as :func:`lance_sql.format.btree.matches`
tests them): numbers by value, -0.0 equal to 0.0, a NaN equal to a NaN of its sign, above
every other float or (sign bit set) below (DataFusion's order); strings and binaries
byte-wise; dates, times and timestamps by their integer value. Key types without such an
order (e.g. decimals) have no interval form (:func:`sort_key` gives None) and are left to
the index leaf by leaf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lance_sql.format.btree import KeyQuery, KeyRange, KeySet
from lance_sql.numpy_arrow import array_of_scalars

__all__ = ["Bound", "Interval", "KeyIntervals", "sort_key"]


def sort_key(value: pa.Scalar) -> Any | None:
    """A Python value ordering like ``value`` does in SQL among its type's values, or None
    when the type has no such form here."""
    t = value.type
    if not value.is_valid:
        return None
    if pa.types.is_floating(t):
        v = float(value.as_py())
        if math.isnan(v):  # as lance_sql.float_order: NaN on top, a negative NaN below all
            return (-1 if math.copysign(1.0, v) < 0 else 1, 0.0)
        return (0, v + 0.0)  # -0.0 == 0.0
    if pa.types.is_integer(t):
        return int(value.as_py())
    if pa.types.is_boolean(t):
        return bool(value.as_py())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str(value.as_py()).encode()  # UTF-8 bytes order as the index sorts
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes(value.as_py())
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t) or \
            pa.types.is_duration(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        return int(pa.array([value], t).view(width)[0].as_py())
    return None


@dataclass(frozen=True)
class Bound:
    """One end of an interval: the value, its sort key, whether it is included."""

    value: pa.Scalar
    key: Any
    inclusive: bool


def _low(b: Bound | None) -> tuple:
    """Order of lower bounds: unbounded first; at one key an inclusive bound first."""
    return (0,) if b is None else (1, b.key, 0 if b.inclusive else 1)


def _high(b: Bound | None) -> tuple:
    """Order of upper bounds: unbounded last; at one key an exclusive bound first."""
    return (2,) if b is None else (1, b.key, 1 if b.inclusive else 0)


@dataclass(frozen=True)
class Interval:
    """Keys between ``lower`` and ``upper`` (None: unbounded on that side)."""

    lower: Bound | None
    upper: Bound | None

    @property
    def empty(self) -> bool:
        lo, hi = self.lower, self.upper
        if lo is None or hi is None:
            return False
        return lo.key > hi.key or (lo.key == hi.key and not (lo.inclusive and hi.inclusive))

    @property
    def point(self) -> bool:
        lo, hi = self.lower, self.upper
        return lo is not None and hi is not None and lo.key == hi.key and \
            lo.inclusive and hi.inclusive


def _meets(a: Interval, b: Interval) -> bool:
    """Whether ``b`` (starting no earlier than ``a``) overlaps or touches ``a`` so the two
    are one interval."""
    if a.upper is None or b.lower is None:
        return True
    if b.lower.key != a.upper.key:
        return b.lower.key < a.upper.key
    return a.upper.inclusive or b.lower.inclusive


@dataclass(frozen=True)
class KeyIntervals:
    """A set of non-null keys: sorted, disjoint, non-touching intervals."""

    intervals: tuple[Interval, ...]

    @classmethod
    def of(cls, intervals: list[Interval]) -> KeyIntervals:
        """The union of any ``intervals`` (in any order, overlapping or empty)."""
        spans = sorted((i for i in intervals if not i.empty), key=lambda i: _low(i.lower))
        out: list[Interval] = []
        for span in spans:
            if out and _meets(out[-1], span):
                last = out[-1]
                upper = last.upper if _high(last.upper) >= _high(span.upper) else span.upper
                out[-1] = Interval(last.lower, upper)
            else:
                out.append(span)
        return cls(tuple(out))

    @classmethod
    def compare(cls, op: str, value: pa.Scalar) -> KeyIntervals | None:
        """Keys ``k`` with ``k <op> value`` (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``);
        None when ``value``'s type has no order here."""
        key = sort_key(value)
        if key is None:
            return None
        at, past = Bound(value, key, True), Bound(value, key, False)
        if op == "!=":
            return cls.of([Interval(None, past), Interval(past, None)])
        return cls.of([{"=": Interval(at, at), "<": Interval(None, past),
                        "<=": Interval(None, at), ">": Interval(past, None),
                        ">=": Interval(at, None)}[op]])

    @classmethod
    def of_query(cls, query: KeyRange | KeySet) -> KeyIntervals | None:
        """The keys an index query selects (None: a type without order here)."""
        if isinstance(query, KeySet):
            return cls.points([query.values[i] for i in range(len(query.values))])
        bounds: list[Bound | None] = []
        for value, inclusive in ((query.lower, query.lower_inclusive),
                                 (query.upper, query.upper_inclusive)):
            key = None if value is None else sort_key(value)
            if value is not None and key is None:
                return None
            bounds.append(None if value is None else Bound(value, key, inclusive))
        return cls.of([Interval(bounds[0], bounds[1])])

    @classmethod
    def points(cls, values: list[pa.Scalar]) -> KeyIntervals | None:
        """Keys equal to one of ``values`` (None: a type without order here)."""
        out = []
        for value in values:
            key = sort_key(value)
            if key is None:
                return None
            out.append(Interval(Bound(value, key, True), Bound(value, key, True)))
        return cls.of(out)

    @classmethod
    def numeric(cls, op: str, number: int | float, key_type: pa.DataType) -> KeyIntervals | None:
        """Keys ``k`` of integer type ``key_type`` with ``k <op> number`` as SQL compares
        them: exactly against an integer (any size: ``int8col < 1000`` holds everywhere),
        in float64 against a float (each key rounded to the nearest double, so beyond
        2**53 a float equals several keys). None: not an integer key, or a NaN."""
        if not pa.types.is_integer(key_type) or isinstance(number, bool):
            return None
        if isinstance(number, float):
            if math.isnan(number):
                return None
            as_compared: Any = float
        elif isinstance(number, int):
            as_compared = int
        else:
            return None
        signed = pa.types.is_signed_integer(key_type)
        width = key_type.bit_width
        low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else \
            (0, (1 << width) - 1)

        def first(strict: bool) -> int:
            """The least key whose compared value is above ``number`` (``strict``) or
            not below it; ``high + 1`` when none is (compared values never decrease)."""
            a, b = low, high + 1
            while a < b:
                m = (a + b) // 2
                v = as_compared(m)
                if v > number if strict else v >= number:
                    b = m
                else:
                    a = m + 1
            return a

        def span(lo: int, hi: int) -> KeyIntervals:
            if lo > hi:
                return cls(())
            ends = [None if k == edge else Bound(pa.scalar(k, key_type), k, True)
                    for k, edge in ((lo, low), (hi, high))]
            return cls((Interval(ends[0], ends[1]),))

        if op == "!=":
            return span(first(False), first(True) - 1).complement()
        lo, hi = {"=": (first(False), first(True) - 1), "<": (low, first(False) - 1),
                  "<=": (low, first(True) - 1), ">": (first(True), high),
                  ">=": (first(False), high)}[op]
        return span(lo, hi)

    @classmethod
    def everything(cls) -> KeyIntervals:
        """Every non-null key."""
        return cls((Interval(None, None),))

    def union(self, other: KeyIntervals) -> KeyIntervals:
        return KeyIntervals.of([*self.intervals, *other.intervals])

    def intersect(self, other: KeyIntervals) -> KeyIntervals:
        """Keys in both, in one merge pass over the two sorted lists."""
        a, b = self.intervals, other.intervals
        out: list[Interval] = []
        i = j = 0
        while i < len(a) and j < len(b):
            lower = a[i].lower if _low(a[i].lower) >= _low(b[j].lower) else b[j].lower
            upper = a[i].upper if _high(a[i].upper) <= _high(b[j].upper) else b[j].upper
            both = Interval(lower, upper)
            if not both.empty:
                out.append(both)
            if _high(a[i].upper) < _high(b[j].upper):
                i += 1
            else:
                j += 1
        return KeyIntervals(tuple(out))

    def complement(self) -> KeyIntervals:
        """Non-null keys not in the set."""
        out: list[Interval] = []
        lower: Bound | None = None
        start = True  # the gap before the first interval is open below
        for span in self.intervals:
            if span.lower is not None:
                gap_top = Bound(span.lower.value, span.lower.key, not span.lower.inclusive)
                out.append(Interval(lower if not start else None, gap_top))
            start = False
            if span.upper is None:
                return KeyIntervals.of(out)
            lower = Bound(span.upper.value, span.upper.key, not span.upper.inclusive)
        out.append(Interval(None if start else lower, None))
        return KeyIntervals.of(out)

    def queries(self, key_type: pa.DataType) -> list[KeyQuery]:
        """The set as index queries: a range per interval, all single keys in one set
        (an empty set: one empty key set)."""
        points = [i.lower.value for i in self.intervals if i.point]  # type: ignore[union-attr]
        out: list[KeyQuery] = []
        if points or not self.intervals:
            out.append(KeySet(array_of_scalars(points, key_type)))
        for span in self.intervals:
            if span.point:
                continue
            lo, hi = span.lower, span.upper
            out.append(KeyRange(None if lo is None else lo.value, None if hi is None else hi.value,
                                lo is None or lo.inclusive, hi is None or hi.inclusive))
        return out
