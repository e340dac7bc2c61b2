"""Region pruning: which regions can hold rows a filter may select, from the literals alone.

A region is kept unless the filter rules it out. For every region field, the filter's
constraints on the field's source columns are turned into the region values they allow,
by evaluating the field's transform (or custom expression) on the literals with the same
code the writer routes rows with (:func:`~lance_sql.memwal.transforms.evaluate_field`):

* ``=`` and ``IN`` on every source column of a field (all columns of a ``multi_bucket`` or
  an expression): the values of every combination of the literals;
* ranges (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``) on the source of an order-preserving
  transform (identity, truncate, year): the region value must lie between the transformed
  bounds; on ``month`` / ``day`` / ``hour`` with both bounds: the values of points every
  half unit across the range (at most :data:`MAX_POINTS`), which meets every calendar
  unit in it, DST days included.

AND intersects what its parts allow, OR unites it; anything else (NOT, functions,
comparisons between columns) allows every region, so pruning is always safe. A literal
that does not convert exactly to the column's type prunes nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import LanceError
from lance_sql.expr.arrow import COMPARISONS, Call, Column, Expr, Literal, exact_literal
from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.memwal.murmur3 import hash_input
from lance_sql.memwal.transforms import evaluate_field, sql_on_own_thread
from lance_sql.numpy_arrow import array_of_scalars, true_mask

__all__ = ["MAX_COMBINATIONS", "MAX_POINTS", "prune_regions"]

MAX_COMBINATIONS = 4096
MAX_POINTS = 20_000
_FLIP = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_HALF_UNIT_SECONDS = {"hour": 1800, "day": 43200, "month": 43200}
_TICKS = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass
class _Bounds:
    lo: pa.Scalar | None = None
    hi: pa.Scalar | None = None
    lo_strict: bool = False
    hi_strict: bool = False


@dataclass
class _Constraints:
    """What a conjunction of simple predicates says about each column."""

    types: dict[str, pa.DataType]
    values: dict[str, list[pa.Scalar]] = field(default_factory=dict)
    bounds: dict[str, _Bounds] = field(default_factory=dict)
    impossible: bool = False

    def add(self, e: Expr) -> bool:
        """Record ``e`` if it is a simple predicate on a source column; False otherwise."""
        if not isinstance(e, Call):
            return False
        if e.op in COMPARISONS and e.op != "!=":
            a, b = e.args
            op = e.op
            if isinstance(a, Literal) and isinstance(b, Column):
                a, b, op = b, a, _FLIP[op]
            if not (isinstance(a, Column) and isinstance(b, Literal)):
                return False
            name = self._name(a)
            if name is None:
                return False
            if b.value is None:
                self.impossible = True  # a comparison with NULL is never true
                return True
            s = exact_literal(b, self.types[name])
            if s is None:
                return False
            if op == "=":
                self._values(name, [s])
            else:
                self._bound(name, s, op in (">", ">="), op in ("<", ">"))
            return True
        if e.op == "in" and isinstance(e.args[0], Column):
            name = self._name(e.args[0])
            items = e.args[1:]
            if name is None or not all(isinstance(i, Literal) for i in items):
                return False
            scalars = []
            for item in items:
                assert isinstance(item, Literal)
                if item.value is None:
                    continue  # x IN (..., NULL) is true only for the other items
                s = exact_literal(item, self.types[name])
                if s is None:
                    return False
                scalars.append(s)
            self._values(name, scalars)
            return True
        if e.op == "between" and isinstance(e.args[0], Column):
            name = self._name(e.args[0])
            low, high = e.args[1], e.args[2]
            if name is None or not isinstance(low, Literal) or not isinstance(high, Literal):
                return False
            lo = exact_literal(low, self.types[name]) if low.value is not None else None
            hi = exact_literal(high, self.types[name]) if high.value is not None else None
            if low.value is None or high.value is None:
                self.impossible = True
                return True
            if lo is not None:
                self._bound(name, lo, True)
            if hi is not None:
                self._bound(name, hi, False)
            return True
        return False

    def _name(self, c: Column) -> str | None:
        return c.path[0] if len(c.path) == 1 and c.path[0] in self.types else None

    def _values(self, name: str, scalars: list[pa.Scalar]) -> None:
        if name in self.values:
            keep = {s.as_py() for s in scalars}
            scalars = [s for s in self.values[name] if s.as_py() in keep]
        self.values[name] = scalars

    def _bound(self, name: str, s: pa.Scalar, lower: bool, strict: bool = False) -> None:
        b = self.bounds.setdefault(name, _Bounds())
        if lower:
            if b.lo is None or pc.greater(s, b.lo).as_py():
                b.lo, b.lo_strict = s, strict
            elif pc.equal(s, b.lo).as_py():
                b.lo_strict = b.lo_strict or strict
        else:
            if b.hi is None or pc.less(s, b.hi).as_py():
                b.hi, b.hi_strict = s, strict
            elif pc.equal(s, b.hi).as_py():
                b.hi_strict = b.hi_strict or strict


def prune_regions(predicate: Expr | None, spec: RegionSpec, sources: Sequence[str | None],
                  source_types: dict[str, pa.DataType], values: pa.Table) -> np.ndarray:
    """For each row of ``values`` (a region: one column per region field, named by field
    id), whether rows matching ``predicate`` may live there.

    ``predicate`` uses the table's column names; ``sources`` are the spec's source
    columns in order (None: dropped) and ``source_types`` their Arrow types.
    """
    n = values.num_rows
    if predicate is None or not n:
        return np.ones(n, bool)
    pruner = _Pruner(spec, list(sources), source_types, values)
    return pruner.mask(predicate)


class _Pruner:
    def __init__(self, spec: RegionSpec, sources: list[str | None],
                 types: dict[str, pa.DataType], values: pa.Table) -> None:
        self.values = values
        self.types = types
        self.fields: list[tuple[RegionField, list[str | None]]] = []
        at = 0
        for f in spec.fields:
            width = len(f.source_ids) or len(f.source_columns)
            self.fields.append((f, sources[at:at + width]))
            at += width

    def all(self) -> np.ndarray:
        return np.ones(self.values.num_rows, bool)

    def mask(self, e: Expr) -> np.ndarray:
        if isinstance(e, Call) and e.op == "or":
            out = np.zeros(self.values.num_rows, bool)
            for a in e.args:
                out |= self.mask(a)
            return out
        parts = _conjuncts(e)
        constraints = _Constraints(self.types)
        out = self.all()
        for part in parts:
            if not constraints.add(part) and isinstance(part, Call) and part.op in ("or",
                                                                                    "and"):
                out &= self.mask(part)
        if constraints.impossible:
            return np.zeros(self.values.num_rows, bool)
        for f, names in self.fields:
            allowed = self._field_mask(f, names, constraints)
            if allowed is not None:
                out &= allowed
        return out

    def _field_mask(self, f: RegionField, names: list[str | None], c: _Constraints
                    ) -> np.ndarray | None:
        if f.field_id not in self.values.column_names:
            return None
        region = self.values.column(f.field_id).combine_chunks()
        if names and all(n is not None and n in c.values for n in names):
            sets = [c.values[n] for n in names]  # type: ignore[index]
            if int(np.prod([len(s) for s in sets])) <= MAX_COMBINATIONS:
                combos = list(itertools.product(*sets))
                arrays = [array_of_scalars([combo[i] for combo in combos],
                                           self.types[names[i]]) for i in range(len(names))]  # type: ignore[index]
                return self._allowed(f, arrays, len(combos), region)
        if len(names) != 1 or names[0] is None or names[0] not in c.bounds:
            return None
        name = names[0]
        b = c.bounds[name]
        if f.order_preserving:
            if _coarse_ids(region.type):
                return None
            out = true_mask(pc.is_valid(region))
            # strict bounds stay strict only where the transform is one to one
            exact = f.transform == "identity"
            lo_fn = pc.greater if exact and b.lo_strict else pc.greater_equal
            hi_fn = pc.less if exact and b.hi_strict else pc.less_equal
            floats = pa.types.is_floating(region.type)
            for bound, fn in ((b.lo, lo_fn), (b.hi, hi_fn)):
                if bound is None:
                    continue
                value = self._evaluate(f, [array_of_scalars([bound], self.types[name])], 1)
                if floats and value is not None:
                    value = _wide_float(value)
                if value is None or (floats and pc.is_nan(value[0]).as_py()):
                    return None
                out &= true_mask(fn(_wide_float(region), value[0]))
            if floats:  # SQL orders NaN above every number (Arrow's kernels order it nowhere)
                out |= true_mask(pc.is_nan(_wide_float(region)))
            return out
        if f.transform in _HALF_UNIT_SECONDS and b.lo is not None and b.hi is not None:
            points = _points(b.lo, b.hi, self.types[name], f.transform)
            if points is not None:
                return self._allowed(f, [points], len(points), region)
        return None

    def _evaluate(self, f: RegionField, arrays: list[pa.Array], n: int) -> pa.Array | None:
        try:
            with sql_on_own_thread():  # we may be planning inside DataFusion's runtime
                return evaluate_field(f, arrays, n)
        except (LanceError, pa.ArrowException):
            return None  # the literals do not evaluate: prune nothing

    def _allowed(self, f: RegionField, arrays: list[pa.Array], n: int, region: pa.Array
                 ) -> np.ndarray | None:
        possible = self._evaluate(f, arrays, n)
        if possible is None:
            return None
        if not possible.type.equals(region.type):
            try:
                possible = possible.cast(region.type)
            except pa.ArrowException:
                return None
        if not pa.types.is_null(region.type):
            # compared as region ids tell values apart: a region holds every value of its
            # id (-0.0 and 0.0, every NaN, the nanoseconds of one microsecond), where
            # Arrow's is_in tells them apart
            region, possible = hash_input(region), hash_input(possible)
        hit = pc.is_in(region, value_set=possible, skip_nulls=False)
        return true_mask(hit)


def _coarse_ids(t: pa.DataType) -> bool:
    """Whether region ids of values of type ``t`` are coarser than the values (see
    :mod:`..murmur3`: nanoseconds hashed as microseconds, date64 as days): a region then
    holds values about its region value, which no bound may prune by."""
    return ((pa.types.is_timestamp(t) or pa.types.is_time64(t)) and t.unit == "ns") \
        or pa.types.is_date64(t)


def _wide_float(values: pa.Array) -> pa.Array:
    """Half floats as floats (exact): Arrow has no comparison kernels for them."""
    return values.cast(pa.float32()) if pa.types.is_float16(values.type) else values


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Call) and e.op == "and":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]


def _points(lo: pa.Scalar, hi: pa.Scalar, t: pa.DataType, transform: str) -> pa.Array | None:
    """Instants every half unit from ``lo`` to ``hi`` (and ``hi``), or None if too many."""
    if pa.types.is_timestamp(t):
        step = _HALF_UNIT_SECONDS[transform] * _TICKS[t.unit]
    elif pa.types.is_date32(t):
        step = 1
    elif pa.types.is_date64(t):
        step = 86_400_000
    else:
        return None
    # Arrow casts date32 only to and from int32 (its storage), the others to int64
    storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
    try:
        start = lo.cast(t).cast(storage).as_py()
        stop = hi.cast(t).cast(storage).as_py()
    except pa.ArrowException:
        return None  # the literals do not convert: prune nothing
    if stop < start:
        return pa.array([], t)
    if (stop - start) // step > MAX_POINTS:
        return None
    ticks = np.append(np.arange(start, stop + 1, step, dtype=np.int64), stop)
    return pa.array(ticks, pa.int64()).cast(storage).cast(t)
