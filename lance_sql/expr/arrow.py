"""Engine-neutral filter expressions and their translation to pyarrow.

Filters reach lance_sql as SQL predicate strings, as in pylance
(``ds.to_table(filter="x > 5")``, ``ds.delete("id IN (1, 2)")``).
:func:`parse_predicate` turns them into the small tree defined here; keeping that tree free of
any engine lets a scan learn which columns to read (:func:`columns`), prune fragments by row
address (:mod:`lance_sql.expr.bounds`) and evaluate rows with pyarrow (:func:`to_pyarrow`).

Semantics follow SQL as DataFusion (the engine lance_sql answers queries with) implements it,
so a filter string selects the same rows whichever path evaluates it:

* three-valued logic: a comparison with NULL is NULL and a NULL predicate drops the row;
  ``x IN (1, NULL)`` is TRUE or NULL, never FALSE; the field of a NULL struct is NULL;
* floats order every NaN above every number and equal to itself, and -0.0 = 0.0
  (DataFusion looks at a NaN's sign bit, and its IN lists tell -0.0 from 0.0: we do not);
* integer ``/`` truncates toward zero, ``%`` takes the dividend's sign, integer overflow wraps,
  dividing an integer by zero fails when the filter runs; CAST truncates toward zero;
* a literal compared with an expression takes that expression's type where SQL coerces it:
  strings against dates/timestamps/numbers, DATE/TIMESTAMP against timestamp columns (a naive
  timestamp is wall-clock time in the column's time zone, a DATE is UTC midnight), NULL against
  anything; each IN item is coerced the same way on its own. A string expression compared with
  a number is cast to that number's type; integers meet decimals as decimals; integers and
  decimals meet floats as float64. Dictionary-encoded columns are decoded first.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import functools
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr.case_mapping import case_function
from lance_sql.expr.casts import decimal_double_function, float_decimal_function
from lance_sql.expr.float_compare import float_key_function, negative_nan_function
from lance_sql.expr.lists import is_list, list_function
from lance_sql.expr.model import (
    ARITHMETIC,
    COMPARISONS,
    FUNCTIONS,
    OPS,
    Call,
    Column,
    Expr,
    Literal,
    cast_target,
    col,
    lit,
    literal_type,
)
from lance_sql.expr.model import scalar_of as _scalar
from lance_sql.expr.parser import describe_sql, parse_predicate, to_sql
from lance_sql.expr.regex import ascii_text_function, re2_pattern
from lance_sql.expr.text import literal_text, needs_own_text, text_function
from lance_sql.numpy_arrow import array_of_scalars, scalar

__all__ = [
    "ARITHMETIC", "COMPARISONS", "FUNCTIONS", "OPS", "Call", "Column", "Expr", "Literal",
    "col", "columns", "lit", "literal_type", "parse_predicate", "resolve", "resolve_column",
    "exact_literal", "to_pyarrow", "to_sql",
]

_UNARY_FN = {"lower": "utf8_lower", "upper": "utf8_upper", "abs": "abs_checked",
             "length": "utf8_length", "negate": "negate"}
_MATCH_FN = {"like": "match_like", "ilike": "match_like", "starts_with": "starts_with",
             "ends_with": "ends_with"}
# Terms one AND/OR joins directly (pyarrow's recursion depth), and terms one AND/OR may
# have at all (after folding equalities into IN lists).
CHAIN = 64
MAX_TERMS = 100_000


def columns(expr: Expr) -> set[tuple[str, ...]]:
    """Every column path ``expr`` reads, as written (see :func:`resolve` for schema names)."""
    if isinstance(expr, Column):
        return {expr.path}
    if isinstance(expr, Call):
        return set().union(*(columns(a) for a in expr.args))
    return set()


# ---------------------------------------------------------------------- schema binding


def _schema_paths(fields: list[pa.Field], prefix: str = "") -> list[str]:
    out = []
    for f in fields:
        out.append(prefix + f.name)
        if pa.types.is_struct(f.type):
            out += _schema_paths(list(f.type), prefix + f.name + ".")
    return out


def resolve_column(schema: pa.Schema, path: tuple[str, ...], quoted: tuple[bool, ...] = ()
                   ) -> tuple[tuple[str, ...], pa.DataType]:
    """The schema's spelling and type of ``path``.

    Names match exactly; an unquoted part (``quoted`` False or absent) else
    case-insensitively when that is unambiguous, as pylance binds ``filter="X > 1"`` to
    column ``x``. A quoted part (``"Name"``, `` `Name` ``) matches its spelling only.
    """
    fields: list[pa.Field] = list(schema)
    names: list[str] = []
    for i, part in enumerate(path):
        matches = [f for f in fields if f.name == part]
        exact = i < len(quoted) and quoted[i]
        if not matches and not exact:
            matches = [f for f in fields if f.name.lower() == part.lower()]
        if len(matches) != 1:
            available = ", ".join(_schema_paths(list(schema))) or "(none)"
            problem = "is ambiguous (quote it to choose one spelling)" if matches else \
                "not found" + (" (a quoted name matches its exact spelling)" if exact else "")
            raise NotFoundError(
                f"column '{'.'.join(path)}' {problem}; available columns: {available}"
            )
        names.append(matches[0].name)
        typ = matches[0].type
        fields = list(typ) if pa.types.is_struct(typ) else []
    return tuple(names), typ


def resolve(expr: Expr, schema: pa.Schema) -> Expr:
    """``expr`` with every column path spelled as in ``schema`` (NotFoundError if missing)."""
    if isinstance(expr, Column):
        return Column(resolve_column(schema, expr.path, expr.quoted)[0])
    if isinstance(expr, Call):
        return Call(expr.op, tuple(resolve(a, schema) for a in expr.args))
    return expr


# ------------------------------------------------------------------- pyarrow translation

_Typed: TypeAlias = tuple[pc.Expression, pa.DataType]


def _empty(type: pa.DataType) -> pa.Array:
    """An empty array of ``type`` (without pyarrow's pandas probe where it can)."""
    try:
        return pa.nulls(0, type)
    except (pa.ArrowException, TypeError):
        return pa.array([], type)


@functools.cache
def _null_bool() -> _Typed:
    # built once, on first use
    return pc.scalar(scalar(None, pa.bool_())), pa.bool_()


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


# Kernels that can fail on a value (a zero divisor, a string that is no number, an
# overflow...); our own functions (named lance_sql_...) are counted among them.
_FALLIBLE = frozenset({"divide", "remainder", "cast", "add_checked", "subtract_checked",
                       "multiply_checked", "divide_checked", "abs_checked", "negate_checked",
                       "round", "match_substring_regex"})
# The rows whose values the expression being translated is needed for (None: all): the
# branches of COALESCE and CASE are computed only where they are chosen, as DataFusion
# computes them, so a branch that fails elsewhere (``coalesce(x, 1 / y)`` where y is 0 but
# x is not NULL) does not fail the filter.
_NEEDED: contextvars.ContextVar[pc.Expression | None] = contextvars.ContextVar(
    "lance_sql_needed_rows", default=None)


def _call(fn: str, args: list[_Typed], options: pc.FunctionOptions | None = None) -> _Typed:
    """Apply a pyarrow kernel, finding its result type (and type errors) on empty arrays now.
    A kernel that can fail on a value sees NULL (which it passes) outside the rows that
    need it (see :data:`_NEEDED`)."""
    needed = _NEEDED.get()
    if needed is not None and args and (fn in _FALLIBLE or fn.startswith("lance_sql_")) \
            and args[0][1] != pa.null():
        first, t = args[0]
        try:
            nothing = pc.scalar(scalar(None, t))
        except (pa.ArrowException, TypeError):
            nothing = None
        if nothing is not None:
            masked = _kernel("if_else", [needed, first, nothing])
            args = [(masked, t), *args[1:]]
    try:
        empties = [_empty(t) for _, t in args]
        out_type = pc.call_function(fn, empties, options).type
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as err:
        types = ", ".join(str(t) for _, t in args)
        raise InvalidInputError(f"cannot apply {fn} to ({types}) in filter: {err}") from None
    # pyarrow builds a call by name only through its private constructor
    return _kernel(fn, [e for e, _ in args], options), out_type


def _in_written_order(x: _Typed) -> _Typed:
    """``x``, a sum or product, kept apart from the sums or products around it when it is
    a float: Acero's simplifier flattens chains of ``add`` (``multiply``) calls, moves
    their constants together and folds them, so ``f * 1e300 * 1e10`` would be computed as
    ``f * inf`` (NaN where ``f`` is 0) and ``g + 0.1 + 0.2`` as ``g + 0.30000000000000004``.
    A cast to its own type (which costs nothing) is a call of another kernel, so the
    chain stops there and the floats are computed left to right, as DataFusion (and SQL)
    computes them. Integers and decimals are left as they are: their sums and products
    are exact (or wrap around), in any order."""
    if not pa.types.is_floating(x[1]):
        return x
    return _kernel("cast", [x[0]], pc.CastOptions(x[1])), x[1]


def _datafusion_text(x: _Typed) -> _Typed:
    """``x`` as text: floats, timestamps and date64 as DataFusion spells them (pyarrow's
    cast does otherwise), other types through the cast."""
    if not needs_own_text(x[1]):
        return _cast(x, pa.string())
    if pa.types.is_date64(x[1]):  # DataFusion spells it as the timestamp of its ms
        x = (x[0].cast(pa.timestamp("ms")), pa.timestamp("ms"))
    return _call(text_function(x[1]), [x])


def _cast(x: _Typed, target: pa.DataType) -> _Typed:
    """SQL CAST: floats and decimals truncate toward zero; out-of-range values fail."""
    if pa.types.is_integer(x[1]) and pa.types.is_decimal(target):
        # pyarrow wants room for every int64 before it looks at the values; SQL does not
        wide = _int_as_decimal(x[1])
        precision = wide.precision + target.scale
        wide = (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, target.scale)
        if wide != target:
            x = _cast(x, wide)
    source = x[1]
    if pa.types.is_decimal(source) and pa.types.is_floating(target):
        doubles = _call(decimal_double_function(source), [x])
        return doubles if target == pa.float64() else _cast(doubles, target)
    if pa.types.is_floating(source) and pa.types.is_integer(target):
        # cut toward zero, then checked: a NaN, an infinity or a value out of range fails
        return _call("cast", [_call("trunc", [x])], pc.CastOptions(target))
    if pa.types.is_floating(source) and pa.types.is_decimal128(target):
        return _call(float_decimal_function(source, target), [x])  # arrow-rs's rounding
    if pa.types.is_decimal(source) and pa.types.is_decimal(target) and \
            source.scale > target.scale:
        # half away from zero, with a digit to spare for the carry (9.999 -> 10.00),
        # then checked against the target's precision
        digits = source.precision + 1
        wide = (pa.decimal128 if digits <= 38 else pa.decimal256)(min(digits, 76),
                                                                  source.scale)
        rounded = _call("round", [_call("cast", [x], pc.CastOptions(wide))],
                        pc.RoundOptions(ndigits=target.scale,
                                        round_mode="half_towards_infinity"))
        return _checked_decimal(rounded, target)
    if pa.types.is_decimal(source) and pa.types.is_integer(target):
        # cut toward zero to whole units (no digit lost above them), then checked
        whole = (pa.decimal128 if source.byte_width == 16 else pa.decimal256)(
            source.precision, 0)
        units = _call("cast", [x], pc.CastOptions(whole, allow_decimal_truncate=True))
        return _call("cast", [units], pc.CastOptions(target))
    if pa.types.is_decimal(source) and pa.types.is_decimal(target):
        return _checked_decimal(x, target)
    # (an integer beyond 2**53 to the nearest double, as DataFusion's cast)
    return _call("cast", [x], pc.CastOptions(target, allow_float_truncate=True))


def _floats_in_common(branches: list[_Typed]) -> list[_Typed]:
    """Branches of one value mixing integers and floats, all cast to the float type
    DataFusion gives them (float64 if one is, else float32). Left to pyarrow's kernels
    inside a dataset expression, an int64 column and a float64 literal met as float32:
    ``coalesce(id, 0.5)`` failed beyond 2**24, or kept float32's digits."""
    types = {t for _, t in branches if t != pa.null()}
    if len(types) < 2 or not all(pa.types.is_integer(t) or pa.types.is_floating(t)
                                 for t in types):
        return branches
    target = pa.float64() if pa.float64() in types else \
        pa.float32() if pa.float32() in types else None
    if target is None:
        return branches  # integers only: pyarrow's common integer, as DataFusion's
    return [x if x[1] in (target, pa.null()) else _cast(x, target) for x in branches]


def _wide_integers_in_common(branches: list[_Typed]) -> list[_Typed]:
    """Branches of one value mixing uint64 with signed integers, all as decimal(20, 0),
    the type DataFusion gives them (no integer type holds both: pyarrow's int64 failed
    on values from 2**63)."""
    types = {t for _, t in branches}
    if pa.uint64() not in types or not any(pa.types.is_signed_integer(t) for t in types):
        return branches
    wide = pa.decimal128(20, 0)
    return [_cast(x, wide) if pa.types.is_integer(x[1]) else x for x in branches]


def _checked_decimal(x: _Typed, target: pa.DataType) -> _Typed:
    """``x`` (decimals already at ``target``'s scale or finer with zeros past it) as
    ``target``: a value of more digits than it holds fails, as DataFusion's cast does."""
    if x[1].scale > target.scale:  # digits past the target's scale cut off first (in a
        # type keeping every digit before the point: nothing else can be lost there)
        same_scale = (pa.decimal128 if x[1].byte_width == 16 else pa.decimal256)(
            x[1].precision, target.scale)
        x = _call("cast", [x], pc.CastOptions(same_scale, allow_decimal_truncate=True))
    return _call("cast", [x], pc.CastOptions(target))


def _tzinfo(tz: str) -> dt.tzinfo:
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", tz)
    if m:
        delta = dt.timedelta(hours=int(m[2]), minutes=int(m[3]))
        return dt.timezone(-delta if m[1] == "-" else delta)
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise InvalidInputError(f"unknown time zone {tz!r}: {err}") from None


def _nanoseconds_past_micros(text: str) -> int:
    """The 7th to 9th fractional digits of a time's seconds in ``text`` (what a Python
    datetime drops), as nanoseconds."""
    found = re.search(r":\d\d[.,]\d{6}(\d{1,3})", text)
    return int(found[1].ljust(3, "0")) if found else 0


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _as_timestamp(v: Any, target: pa.TimestampType, nanos: int = 0) -> pa.Scalar:
    """A date/datetime literal (``nanos``: nanoseconds past its microseconds) as an
    instant of ``target``, as DataFusion coerces it: in the column's unit, digits finer
    than it cut off toward zero (``ts_s = '12:00:00.5'`` is 12:00:00)."""
    if not isinstance(v, dt.datetime):  # a DATE: midnight, UTC for zoned columns
        v = dt.datetime.combine(v, dt.time(), dt.UTC if target.tz else None)
    if target.tz is None and v.tzinfo is not None:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    elif target.tz is not None and v.tzinfo is None:
        v = v.replace(tzinfo=_tzinfo(target.tz))  # naive: wall-clock time in the column's zone
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if v.tzinfo is not None else None)
    exact = (v - epoch) // dt.timedelta(microseconds=1) * 1000 + nanos  # (any year: ints)
    per = _PER_SECOND["ns"] // _PER_SECOND[target.unit]
    value = abs(exact) // per * (1 if exact >= 0 else -1)
    return scalar(value, pa.timestamp(target.unit, target.tz))


def _literal_as(lit: Literal, target: pa.DataType) -> pa.Scalar | None:
    """``lit`` coerced to ``target`` where SQL coerces a literal to the other side's type."""
    v = lit.value
    if v is None:
        try:
            return scalar(None, target)
        except (pa.ArrowException, TypeError):
            return None
    if isinstance(v, int) and not isinstance(v, bool) and pa.types.is_integer(target):
        # Keep the column's type when the literal fits: otherwise pyarrow widens a uint64
        # column to int64 and fails on values of 2**63 and above.
        try:
            return scalar(v, target)
        except (pa.ArrowException, OverflowError):
            return None
    try:
        if pa.types.is_timestamp(target) and isinstance(v, str | dt.date):
            nanos = _nanoseconds_past_micros(v) if isinstance(v, str) else 0
            return _as_timestamp(dt.datetime.fromisoformat(v) if isinstance(v, str) else v,
                                 target, nanos)
        if pa.types.is_date(target) and isinstance(v, str):
            return scalar(dt.date.fromisoformat(v.strip()), target)
        if isinstance(v, str) and pa.types.is_integer(target):
            return scalar(int(v.strip()))
        if isinstance(v, str) and pa.types.is_floating(target):
            return scalar(float(v))
        if isinstance(v, str) and pa.types.is_decimal(target):
            return scalar(Decimal(v.strip()))
    except (ValueError, ArithmeticError, pa.ArrowException) as err:
        raise InvalidInputError(f"cannot compare {target} with literal {v!r}: {err}") from None
    return None


def exact_literal(lit: Literal, target: pa.DataType) -> pa.Scalar | None:
    """``lit`` as a ``target`` value when comparing a ``target`` column with it means
    comparing with exactly that value (so a sorted index of the column can answer), else
    None (NULL, or SQL would compare in another type, e.g. an int column with 1.5)."""
    if lit.value is None:
        return None
    try:
        s = _literal_as(lit, target)
    except InvalidInputError:
        return None
    if s is None:
        s = _scalar(lit)
        binary = all(pa.types.is_binary(t) or pa.types.is_large_binary(t)
                     for t in (s.type, target))
        if not binary and (_family(s.type) != _family(target) or _family(s.type) == "other"):
            return None
    if pa.types.is_floating(s.type) and not pa.types.is_floating(target):
        return None  # SQL compares an integer column with a float in floating point
    try:
        exact = s.cast(target)
        if not exact.cast(s.type).equals(s):
            return None
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return exact


def _int_as_decimal(t: pa.DataType) -> pa.DataType:
    """The narrowest decimal holding every value of integer type ``t``."""
    signed = pa.types.is_signed_integer(t)
    return pa.decimal128(len(str(2 ** (t.bit_width - signed))), 0)


_SQL_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}  # the decimal DataFusion gives an integer


def _decimal_op(op: str, left: _Typed, right: _Typed) -> _Typed:
    """``left op right`` (decimals or integers; ``op`` one of + - * /) as DataFusion
    computes decimals: its result type (capped at 38 digits), exact sums and products,
    quotients cut toward zero at the dividend's scale + 4. Computed in 256-bit decimals
    so pyarrow's own result types (which differ) never overflow first."""
    def decimal(t: pa.DataType) -> pa.DataType:
        return t if pa.types.is_decimal(t) else pa.decimal128(_SQL_INT_DIGITS[t.bit_width], 0)

    (p1, s1), (p2, s2) = ((d.precision, d.scale) for d in map(decimal, (left[1], right[1])))
    if op in ("+", "-"):
        scale = max(s1, s2)
        precision = scale + max(p1 - s1, p2 - s2) + 1
    elif op == "*":
        scale, precision = s1 + s2, p1 + p2 + 1
    else:
        scale, precision = s1 + 4, p1 + s2 + 4
    digits = 76 if 32 in (d.byte_width for d in (left[1], right[1])
                          if pa.types.is_decimal(d)) else 38  # decimal256 meets its own rules
    result = (pa.decimal256 if digits == 76 else pa.decimal128)(min(precision, digits),
                                                                 min(scale, digits))
    # the dividend one scale finer than the result: pyarrow's quotient then has digits
    # past it, cut off by the final cast
    first = (p1 + 4, s1 + 4) if op == "/" else (p1, s1)
    if op == "*" and p1 + p2 + 1 > 76:  # (a product of such values overflows 38 digits)
        first = (76 - 1 - p2, s1)
    if op == "/" and first[0] + p2 + 1 > 76:
        raise InvalidInputError(f"decimal division of {left[1]} by {right[1]} needs more than "
                                "76 digits")
    wide = [_cast(left, pa.decimal256(*first)), _cast(right, pa.decimal256(p2, s2))]
    # quotients cut at the result's scale, then checked against its precision (an
    # overflow fails, as in DataFusion)
    return _checked_decimal(_call(ARITHMETIC[op], wide), result)


def _unify(left: _Typed, right: _Typed) -> tuple[_Typed, _Typed]:
    """Casts SQL makes that pyarrow would not, or would make differently: a string meeting a
    number becomes that number, integers meet decimals as decimals, integers and decimals meet
    floats as float64 (pyarrow may pick float32 for two constants), decimals beyond 38
    digits together as decimal256 (pyarrow's common decimal128 would fail)."""
    lt, rt = left[1], right[1]
    if pa.types.is_decimal(lt) and pa.types.is_decimal(rt) and lt != rt:
        scale = max(lt.scale, rt.scale)
        digits = scale + max(lt.precision - lt.scale, rt.precision - rt.scale)
        if digits > 38:
            wide = pa.decimal256(min(digits, 76), scale)
            return _cast(left, wide), _cast(right, wide)
    for swap in (False, True):
        (a, at), (b, bt) = (right, left) if swap else (left, right)
        if _is_string(at) and _is_numeric(bt):
            a, at = _cast((a, at), bt)
        elif pa.types.is_decimal(at) and pa.types.is_integer(bt):
            b, bt = _cast((b, bt), _int_as_decimal(bt))
        elif at == pa.uint64() and pa.types.is_signed_integer(bt):
            # No integer type holds both; compare as exact decimals instead.
            wide = pa.decimal128(20, 0)
            a, at = _cast((a, at), wide)
            b, bt = _cast((b, bt), wide)
        elif (pa.types.is_decimal(at) or pa.types.is_integer(at)) and pa.types.is_floating(bt):
            a, at = _cast((a, at), pa.float64())
            if bt != pa.float64():
                b, bt = _cast((b, bt), pa.float64())
        else:
            continue
        return ((b, bt), (a, at)) if swap else ((a, at), (b, bt))
    return left, right


class _Translator:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        # (node id, needed rows' id) -> (node, needed rows, its translation): a node is
        # translated once however often its parents look at it (node and rows are kept,
        # so their ids are not reused meanwhile)
        self._done: dict[tuple[int, int], tuple[Expr, object, _Typed]] = {}

    def expr(self, e: Expr) -> _Typed:
        needed = _NEEDED.get()
        key = (id(e), id(needed))
        found = self._done.get(key)
        if found is not None and found[0] is e and found[1] is needed:
            return found[2]
        typed = self._translate(e)
        self._done[key] = (e, needed, typed)
        return typed

    def where(self, rows: pc.Expression | None, e: Expr, boolean: bool = False) -> _Typed:
        """``e`` (a ``boolean`` one, if so) translated as needed only on ``rows``, within
        the rows already needed: a failing kernel sees NULL elsewhere."""
        outer = _NEEDED.get()
        if rows is not None and outer is not None:
            rows = _and(outer, rows)
        token = _NEEDED.set(rows if rows is not None else outer)
        try:
            return self.boolean(e) if boolean else self.expr(e)
        finally:
            _NEEDED.reset(token)

    def _translate(self, e: Expr) -> _Typed:
        if isinstance(e, Column):
            path, t = resolve_column(self.schema, e.path, e.quoted)
            x: _Typed = (pc.field(*path), t)
            if pa.types.is_float16(t):  # (Arrow compares and computes no halffloats)
                return _cast(x, pa.float32())
            return _cast(x, t.value_type) if pa.types.is_dictionary(t) else x
        if isinstance(e, Literal):
            s = _scalar(e)
            if pa.types.is_float16(s.type):  # (a SQL literal compared with a half float)
                s = s.cast(pa.float32())
            return pc.scalar(s), s.type
        op, args = e.op, e.args
        if op in ("and", "or"):
            if op == "or":
                args = fold_equalities(args)
            if len(args) > MAX_TERMS:
                raise InvalidInputError(
                    f"filter has {len(args)} {op.upper()}ed terms; at most {MAX_TERMS} are "
                    "supported (equalities of one column are folded into IN lists first)")
            parts = [self.boolean(a) for a in args]
            return _combine(f"{op}_kleene", parts)
        if op == "not":
            return _call("invert", [self.boolean(args[0])])
        if op in COMPARISONS:
            return self.compare(op, args[0], args[1])
        if op in ("is_null", "is_not_null"):
            return _call("is_null" if op == "is_null" else "is_valid", [self.expr(args[0])])
        if op == "in":
            return self.is_in(args[0], args[1:])
        if op == "between":
            low, high = self.compare(">=", args[0], args[1]), self.compare("<=", args[0], args[2])
            return _call("and_kleene", [low, high])
        if op in ("+", "-") and (shifted := self.date_shift(op, args[0], args[1])) is not None:
            return shifted
        if op in ARITHMETIC:
            sides = [self.expr(x)[1] for x in args]
            if pa.null() in sides and any(_is_numeric(t) for t in sides):
                # a number and NULL: NULL, of the number's type (pyarrow would compute
                # decimal types of no precision, or float32 for a double)
                t = next(t for t in sides if _is_numeric(t))
                return pc.scalar(scalar(None, t)), t
            exact = self.decimal_arithmetic(op, args[0], args[1])
            if exact is not None:
                return exact
            left, right = self.arithmetic_operands(args[0], args[1])
            if op == "/" and pa.types.is_integer(left[1]) and pa.types.is_integer(right[1]):
                # (pyarrow's unchecked kernel gives 0 for MIN / -1; DataFusion fails)
                return _call("divide_checked", [left, right])
            result = _call(ARITHMETIC[op], [left, right])
            return _in_written_order(result) if op in ("+", "*") else result
        if op in _MATCH_FN:
            return self.match(op, args[0], args[1])
        if op in ("upper", "lower"):
            value = _text_if_null(self.expr(args[0]))
            full = case_function(op, value[1])  # (as DataFusion maps 'ß', see the module)
            return _call(full or _UNARY_FN[op], [value])
        if op in _UNARY_FN:
            value = _text_if_null(self.expr(args[0])) if op == "length" else self.expr(args[0])
            if op == "negate" and pa.types.is_unsigned_integer(value[1]):
                raise InvalidInputError(f"'-' takes signed numbers, not {value[1]} (as in "
                                        "DataFusion)")
            return _call(_UNARY_FN[op], [value])
        if op in ("array_element", "array_has", "cardinality", "array_length"):
            return self.list_call(op, args)
        if op == "isnan":
            return self.isnan(args[0])
        if op == "date_part":
            return self.date_part(args[0], args[1])
        if op == "regexp_like":
            return self.regexp_like(args)
        if op == "cast":
            # (a cast of constants fails whatever rows need it, as DataFusion folds it)
            token = _NEEDED.set(None) if not columns(args[0]) else None
            try:
                value, target = self.expr(args[0]), cast_target(e)
                if _is_string(target) and needs_own_text(value[1]):  # DataFusion's spelling
                    return _cast(_datafusion_text(value), target)
                return _cast(value, target)
            finally:
                if token is not None:
                    _NEEDED.reset(token)
        if op in ("is_distinct", "is_not_distinct"):
            return self.distinct(op == "is_distinct", args[0], args[1])
        if op == "coalesce":
            typed, earlier_null = [], None
            for a in args:  # each argument only where those before it are all NULL
                typed.append(self.where(earlier_null, a))
                null = _kernel("is_null", [typed[-1][0]])
                earlier_null = null if earlier_null is None else _and(earlier_null, null)
            return _call("coalesce", self.common(args, typed))
        if op == "case":
            return self.case(args)
        if op in ("concat", "||"):
            return self.concat(args, skip_nulls=op == "concat")
        raise InvalidInputError(f"unknown operator {op!r} in filter")

    def isnan(self, a: Expr) -> _Typed:
        """``isnan(x)``: whether a float is NaN; any other number is never NaN (FALSE,
        NULL for NULL), as DataFusion answers; other types are refused, as there."""
        x = self.expr(a)
        if pa.types.is_floating(x[1]):
            return _call("is_nan", [x])
        if x[1] == pa.null():
            return _null_bool()
        if not _is_numeric(x[1]):
            raise InvalidInputError(f"isnan takes a number, not {x[1]}: {describe_sql(a)}")
        false = (pc.scalar(scalar(False)), pa.bool_())
        return _call("if_else", [_call("is_valid", [x]), false, _null_bool()])

    def regexp_like(self, args: tuple[Expr, ...]) -> _Typed:
        """``regexp_like(s, pattern[, flags])``: whether the pattern (Rust's dialect, see
        :mod:`lance_sql.expr.regex`) matches somewhere in ``s``. The pattern and flags are
        literals (a NULL pattern matches nothing: NULL; NULL flags are none)."""
        for arg, what in zip(args[1:], ("pattern", "flags"), strict=False):
            if not isinstance(arg, Literal) or not isinstance(arg.value, str | None):
                raise InvalidInputError(f"regexp_like needs a string literal {what}, got "
                                        f"{describe_sql(arg)}")
        text = self.expr(args[0])
        if not (_is_string(text[1]) or text[1] == pa.null()):
            raise InvalidInputError(f"regexp_like takes a string, not {text[1]}: "
                                    f"{describe_sql(args[0])}")
        pattern = args[1].value  # type: ignore[union-attr]
        flags = args[2].value if len(args) > 2 else None  # type: ignore[union-attr]
        if pattern is None or text[1] == pa.null():
            return _null_bool()
        translated, boundaries = re2_pattern(pattern, flags)
        if boundaries:  # (RE2's \b is ASCII's: right only where the text is ASCII)
            text = _call(ascii_text_function(text[1]), [text])
        return _call("match_substring_regex", [text], pc.MatchSubstringOptions(translated))

    def date_part(self, part: Expr, value: Expr) -> _Typed:
        """``date_part('year', d)`` and DataFusion's other parts (:data:`_DATE_PARTS`) of
        a date or timestamp (a zoned one in its zone's local time; a string is read as a
        timestamp first), typed as there: int32, but int64 nanoseconds and float64 epoch
        seconds. Seconds are whole; milli-, micro- and nanoseconds count the seconds too. A
        time of day has the parts of a clock (hour to nanosecond, and epoch)."""
        if not isinstance(part, Literal) or not isinstance(part.value, str) or not part.value:
            raise InvalidInputError("date_part needs a non-empty string literal naming the "
                                    f"part, got {describe_sql(part)}")
        name = part.value
        for quote in "'\"":
            if len(name) > 1 and name[0] == name[-1] == quote:
                name = name[1:-1]
                break
        kind = _DATE_PARTS.get(name.lower())
        if kind is None:
            raise InvalidInputError(f"date part {part.value!r} is not supported (as in "
                                    f"DataFusion); parts: {', '.join(sorted(_DATE_PARTS))}")
        x = self.expr(value)
        if _is_string(x[1]):
            x = _cast(x, pa.timestamp("ns"))
        if pa.types.is_date(x[1]):
            if kind == "epoch":  # whole days of seconds
                days = _cast(_cast(x, pa.date32()), pa.int32())
                return _call("multiply", [_cast(days, pa.float64()), _float(86400.0)])
            x = _cast(x, pa.timestamp("s"))
        clock = pa.types.is_time(x[1]) and kind in (
            "hour", "minute", "second", "millisecond", "microsecond", "nanosecond", "epoch")
        if not (pa.types.is_timestamp(x[1]) or clock):
            raise InvalidInputError(f"date_part {name!r} takes a date or a timestamp, not "
                                    f"{x[1]}: {describe_sql(value)}")
        if kind == "epoch":  # the instant's seconds, whatever its zone (a time's: of its day)
            ticks = _cast(x, pa.int32() if pa.types.is_time32(x[1]) else pa.int64())
            ticks = _cast(ticks, pa.float64())
            return _call("divide", [ticks, _float(float(_PER_SECOND[x[1].unit]))])
        if kind in ("millisecond", "microsecond", "nanosecond"):
            scale = {"millisecond": 1_000, "microsecond": 1_000_000,
                     "nanosecond": 1_000_000_000}[kind]
            total = _call("multiply", [_call("second", [x]), _int64(scale)])
            for finer, per in (("millisecond", 1_000_000), ("microsecond", 1_000),
                               ("nanosecond", 1)):
                if per * scale >= 1_000_000_000:
                    step = per * scale // 1_000_000_000
                    total = _call("add", [total, _call("multiply", [_call(finer, [x]),
                                                                    _int64(step)])])
            return total if kind == "nanosecond" else _cast(total, pa.int32())
        fn, options = _PART_KERNELS[kind]
        return _cast(_call(fn, [x], options), pa.int32())

    def date_shift(self, op: str, a: Expr, b: Expr) -> _Typed | None:
        """``date + n``, ``n + date`` and ``date - n``: ``n`` days later or earlier (a
        date32, as DataFusion computes them); None for other operands."""
        date, days = self.expr(a), self.expr(b)
        if op == "+" and pa.types.is_date(days[1]):
            date, days = days, date
        if not (pa.types.is_date(date[1]) and pa.types.is_integer(days[1])):
            return None
        if pa.types.is_date64(date[1]):
            date = _cast(date, pa.date32())
        number = _cast(_cast(date, pa.int32()), pa.int64())
        moved = _call("add_checked" if op == "+" else "subtract_checked",
                      [number, _cast(days, pa.int64())])
        return _cast(_cast(moved, pa.int32()), pa.date32())

    def list_call(self, op: str, args: tuple[Expr, ...]) -> _Typed:
        """The list functions of :mod:`lance_sql.expr.lists`."""
        lists = self.expr(args[0])
        t = lists[1]
        if op == "array_element" and pa.types.is_struct(t):
            return self.struct_field(lists, args[1])
        if op == "cardinality" and pa.types.is_map(t):
            return _call(list_function("cardinality", [t], pa.uint64()), [lists])
        if t == pa.null():  # NULL has no elements, and no length
            if op == "array_element":
                return lists
            return _cast(lists, pa.bool_() if op == "array_has" else pa.uint64())
        if not is_list(t):
            raise InvalidInputError(f"{op} needs a list, got {t} in filter")
        if op in ("cardinality", "array_length"):
            return _call(list_function("cardinality", [t], pa.uint64()), [lists])
        item = t.value_type
        if op == "array_element":
            index = self.expr(args[1])
            if not pa.types.is_integer(index[1]):
                raise InvalidInputError(f"a list index must be an integer, got {index[1]} "
                                        "in filter")
            index = _cast(index, pa.int64())
            return _call(list_function(op, [t, pa.int64()], item), [lists, index])
        wanted = args[1]
        if isinstance(wanted, Literal):
            s = _literal_as(wanted, item)
            if s is None:
                s = exact_literal(wanted, item)
            if s is None:
                raise InvalidInputError(f"array_has of {t} cannot look for {wanted.value!r}")
            value: _Typed = (pc.scalar(s), item)
        else:
            value = self.expr(wanted)
            if value[1] != item:
                value = _cast(value, item)
        return _call(list_function(op, [t, item], pa.bool_()), [lists, value])

    def struct_field(self, value: _Typed, name: Expr) -> _Typed:
        """``value['f']`` (or ``value.f`` after a subscript): the field ``f`` of a struct."""
        t = value[1]
        if not isinstance(name, Literal) or not isinstance(name.value, str):
            raise InvalidInputError(f"a field of {t} is named by a string, got "
                                    f"{describe_sql(name)}")
        names = [f.name for f in t]
        if name.value not in names:
            raise NotFoundError(f"no field {name.value!r} in {t}")
        index = names.index(name.value)
        return _call("struct_field", [value], pc.StructFieldOptions([index]))

    def distinct(self, distinct: bool, a: Expr, b: Expr) -> _Typed:
        """``a IS [NOT] DISTINCT FROM b``: ``a != b`` where both are non-NULL, else
        whether exactly one is NULL; never NULL."""
        left, right = self.coerce(a, b)
        both = _call("and", [_call("is_valid", [left]), _call("is_valid", [right])])
        one_null = _call("xor", [_call("is_null", [left]), _call("is_null", [right])])
        if left[1] == pa.null() or right[1] == pa.null():
            differ = one_null  # NULL against anything: no values to compare
        else:
            unequal = (_nan_compare("!=", left, right)
                       if pa.types.is_floating(left[1]) or pa.types.is_floating(right[1])
                       else _call("not_equal", [left, right]))
            differ = _call("if_else", [both, unequal, one_null])
        return differ if distinct else _call("invert", [differ])

    def common(self, args: tuple[Expr, ...], typed: list[_Typed] | None = None
               ) -> list[_Typed]:
        """``args`` translated (or their translations ``typed``) as the branches of one
        value (COALESCE's arguments, CASE's results): literals take the type of the first
        non-literal (or non-NULL) branch, as SQL coerces them; pyarrow's kernels find the
        common type of the rest."""
        if typed is None:
            typed = [self.expr(a) for a in args]
        anchor = next((t for a, (_, t) in zip(args, typed, strict=True)
                       if not isinstance(a, Literal) and t != pa.null()),
                      next((t for _, t in typed if t != pa.null()), None))
        if anchor is None:
            return typed
        out, widened = [], False
        for a, x in zip(args, typed, strict=True):
            whole = isinstance(a, Literal) and isinstance(a.value, int) \
                and not isinstance(a.value, bool)
            if whole and pa.types.is_integer(anchor):
                # an integer literal is an Int64 to DataFusion: the branches meet as
                # int64 (decimal(20, 0) with a uint64), not as the column's own type
                x = (pc.scalar(scalar(a.value, pa.int64())), pa.int64())  # type: ignore[union-attr]
                widened = True
            elif isinstance(a, Literal) and x[1] != anchor:
                s = _literal_as(a, anchor)
                if s is None and pa.types.is_decimal(anchor) and whole:
                    s = exact_literal(Literal(Decimal(a.value)), anchor)  # 0 as decimal(10, 2)
                x = x if s is None else (pc.scalar(s), s.type)
            out.append(x)
        if widened and pa.uint64() not in {t for _, t in out}:
            # cast here: evaluating, Arrow would cast the literal down to the column's type
            out = [_cast(x, pa.int64()) if pa.types.is_integer(x[1]) else x for x in out]
        return _floats_in_common(_wide_integers_in_common(out))

    def case(self, args: tuple[Expr, ...]) -> _Typed:
        """A searched CASE: the value of the first condition that is TRUE (a NULL
        condition is not), else the ELSE value or NULL; one ``if_else`` per WHEN. Each
        condition is computed only where no earlier one holds, each value only where it
        is chosen, as DataFusion computes them."""
        false = (pc.scalar(scalar(False)), pa.bool_())
        conditions, branches, undecided = [], [], None
        for condition_expr, value_expr in zip(args[0:len(args) - 1:2], args[1::2],
                                              strict=False):
            condition = self.where(undecided, condition_expr, boolean=True)
            conditions.append(condition)
            holds = _kernel("coalesce", [condition[0], false[0]])
            branches.append(self.where(holds, value_expr))
            fails = _kernel("invert", [holds])
            undecided = fails if undecided is None else _and(undecided, fails)
        value_exprs = args[1::2] if len(args) % 2 == 0 else (*args[1:len(args) - 1:2], args[-1])
        if len(args) % 2:
            branches.append(self.where(undecided, args[-1]))
        values = self.common(value_exprs, branches)
        has_else = len(args) % 2 == 1
        results, otherwise = (values[:-1], values[-1]) if has_else else (values, None)
        types = [t for _, t in values if t != pa.null()]
        if otherwise is None or otherwise[1] == pa.null():
            target = types[0] if types else pa.null()
            otherwise = (pc.scalar(scalar(None, target)), target)
        out = otherwise
        for condition, value in zip(reversed(conditions), reversed(results), strict=True):
            if value[1] == pa.null():
                value = (pc.scalar(scalar(None, out[1])), out[1])
            out = _call("if_else", [_call("coalesce", [condition, false]), value, out])
        return out

    def concat(self, args: tuple[Expr, ...], skip_nulls: bool) -> _Typed:
        """``concat(...)`` (NULLs skipped, as DataFusion's: all NULL is ``''``) or
        ``a || b`` (NULL if either is); other types are cast to strings first."""
        if not skip_nulls and any(isinstance(a, Literal) and a.value is None for a in args):
            text = pa.string()
            return pc.scalar(scalar(None, text)), text
        # a NULL literal adds nothing to concat (and pyarrow mishandles NULL scalars there)
        args = tuple(a for a in args if not (isinstance(a, Literal) and a.value is None)) \
            or (Literal("", pa.string()),)
        typed = [self.expr(a) for a in args]
        for a, (_, t) in zip(args, typed, strict=True):
            if not (_is_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
                    or pa.types.is_date(t) or pa.types.is_decimal(t)
                    or pa.types.is_timestamp(t) or pa.types.is_float32(t)
                    or pa.types.is_float64(t) or t == pa.null()):
                raise InvalidInputError(f"concat / || of {t} ({describe_sql(a)}) is not supported: "
                                        "strings, numbers, booleans, dates and timestamps")
        text = pa.large_string() if any(t == pa.large_string() for _, t in typed) \
            else pa.string()
        if all(isinstance(a, Literal) for a in args):  # pyarrow fails on scalars alone
            values = [literal_text(_scalar(a)) for a in args]  # type: ignore[arg-type]
            return pc.scalar(scalar("".join(values), text)), text
        # floats, timestamps and date64 spelled as DataFusion spells them (lance_sql.expr.text)
        parts = [x if x[1] == text else _cast(_datafusion_text(x), text) for x in typed]
        empty = (pc.scalar(scalar("", text)), text)
        if skip_nulls:  # NULL as '' (pyarrow's null_handling="skip" loses all-NULL rows)
            parts = [_call("coalesce", [x, empty]) for x in parts]
        return _call("binary_join_element_wise", [*parts, empty],
                     pc.JoinOptions(null_handling="emit_null"))

    def boolean(self, e: Expr) -> _Typed:
        x = self.expr(e)
        if x[1] == pa.null():
            return _cast(x, pa.bool_())
        if x[1] != pa.bool_():
            raise InvalidInputError(f"expected a boolean in filter, got {x[1]}: {describe_sql(e)}")
        return x

    def coerce(self, a: Expr, b: Expr) -> tuple[_Typed, _Typed]:
        left, right = self.expr(a), self.expr(b)
        if isinstance(b, Literal) and not isinstance(a, Literal):
            s = _literal_as(b, left[1])
            right = right if s is None else (pc.scalar(s), s.type)
        elif isinstance(a, Literal) and not isinstance(b, Literal):
            s = _literal_as(a, right[1])
            left = left if s is None else (pc.scalar(s), s.type)
        elif isinstance(a, Literal) and _is_string(left[1]) and pa.types.is_temporal(right[1]):
            s = _literal_as(a, right[1])  # two literals: the string one is read as a time
            left = left if s is None else (pc.scalar(s), s.type)
        elif isinstance(b, Literal) and _is_string(right[1]) and pa.types.is_temporal(left[1]):
            s = _literal_as(b, left[1])
            right = right if s is None else (pc.scalar(s), s.type)
        return _unify(left, right)

    def decimal_arithmetic(self, op: str, a: Expr, b: Expr) -> _Typed | None:
        """``a op b`` in decimals as DataFusion computes it, when it does: a decimal with
        a decimal or an integer, and a uint64 column with a signed integer (no integer
        type holds both: ``u - 1`` is -1 at 0, not 2**64 - 1); None otherwise."""
        if op == "%":
            return None
        left, right = self.expr(a), self.expr(b)
        types = (left[1], right[1])
        if not (any(pa.types.is_decimal(t) for t in types)
                and all(pa.types.is_decimal(t) or pa.types.is_integer(t) for t in types)
                or pa.uint64() in types and any(pa.types.is_signed_integer(t) for t in types)):
            return None
        return _decimal_op(op, left, right)

    def arithmetic_operands(self, a: Expr, b: Expr) -> tuple[_Typed, _Typed]:
        """:meth:`coerce` for arithmetic, but an integer literal keeps its own (64-bit)
        type beside an integer column, as in DataFusion: ``i8 + 100`` and ``u32 - 5``
        are computed as int64, not wrapped around in the column's type."""
        for const, other in ((b, a), (a, b)):
            if isinstance(const, Literal) and isinstance(const.value, int) and \
                    not isinstance(const.value, bool) and not isinstance(other, Literal) \
                    and const.type in (None, pa.int64(), pa.uint64()):
                typed = self.expr(other)
                if pa.types.is_integer(typed[1]) and typed[1] not in (pa.int64(), pa.uint64()):
                    # (cast here: left to itself, Acero casts the literal down instead)
                    typed = _cast(typed, pa.int64())
                    pair = (typed, self.expr(const)) if const is b else (self.expr(const), typed)
                    return _unify(*pair)
                break  # (64-bit columns: as for comparisons, the literal takes their type)
        left, right = self.coerce(*self._float32_with_integer(a, b))
        if {left[1], right[1]} == {pa.float32(), pa.float64()}:
            # float32 meets float64 as float64, as in DataFusion (left to itself, Acero
            # casts the float64 literal of ``f32 + 0.5`` down to float32 instead)
            left, right = (_cast(x, pa.float64()) if x[1] == pa.float32() else x
                           for x in (left, right))
        return left, right

    def _float32_with_integer(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """An integer operand of float32 arithmetic as float32: DataFusion computes
        ``i8 + f32`` in float32 (pyarrow's kernels, and :func:`_unify`, would widen both
        to float64). Literals are left to :meth:`coerce`."""
        if isinstance(a, Literal) or isinstance(b, Literal):
            return a, b
        types = [self.expr(a)[1], self.expr(b)[1]]
        if pa.float32() not in types or not any(pa.types.is_integer(t) for t in types):
            return a, b
        as_float = Literal(None, pa.float32())
        return tuple(Call("cast", (x, as_float)) if pa.types.is_integer(t) else x
                     for x, t in zip((a, b), types, strict=True))  # type: ignore[return-value]

    def half_result(self, e: Expr) -> bool:
        """Whether DataFusion types ``e`` as a half float: a float16 column or literal, or
        arithmetic of half floats with each other or with integers. Arrow computes no half
        floats (they are computed as float32 here); :func:`value_expression` casts such a
        value back, so a new column keeps the type DataFusion (and pylance) give it."""
        if isinstance(e, Column | Literal):
            return pa.types.is_float16(self._declared(e))
        if not isinstance(e, Call):
            return False
        if e.op == "negate":
            return self.half_result(e.args[0])
        if e.op not in ARITHMETIC:
            return False
        halves = [self.half_result(x) for x in e.args]
        return any(halves) and all(
            h or pa.types.is_integer(self.expr(x)[1]) for h, x in zip(halves, e.args,
                                                                      strict=True))

    def _declared(self, e: Column | Literal) -> pa.DataType:
        """The type of a column or literal as declared (before halffloats are widened)."""
        if isinstance(e, Column):
            return resolve_column(self.schema, e.path, e.quoted)[1]
        return e.type if e.type is not None else _scalar(e).type

    def compare(self, op: str, a: Expr, b: Expr) -> _Typed:
        left, right = self.coerce(a, b)
        if left[1] == right[1] == pa.null():  # (no kernel compares NULL with NULL)
            return _null_bool()
        if pa.types.is_floating(left[1]) or pa.types.is_floating(right[1]):
            for value, other, flipped in ((b, left, False), (a, right, True)):
                number = value.value if isinstance(value, Literal) else None
                if isinstance(number, int | float) and not isinstance(number, bool) and \
                        number == number and pa.types.is_floating(other[1]):
                    return _number_compare(_FLIPPED[op] if flipped else op, left, right,
                                           other)
            return _nan_compare(op, left, right)
        return _call(COMPARISONS[op], [left, right])

    def is_in(self, x_expr: Expr, items: tuple[Expr, ...]) -> _Typed:
        values = [i for i in items if not (isinstance(i, Literal) and i.value is None)]
        result = self._value_set_lookup(x_expr, values) if values else _null_bool()
        if result is None:  # no exact common type: spell it out as x = a OR x = b ...
            result = _combine("or_kleene", [self.compare("=", x_expr, v) for v in values])
        if len(values) < len(items):  # x IN (..., NULL) is never FALSE
            result = _call("or_kleene", [result, _null_bool()])
        return result

    def _value_set_lookup(self, x_expr: Expr, values: list[Expr]) -> _Typed | None:
        """``is_in`` against one typed array, when every literal converts exactly to x's type."""
        x = self.expr(x_expr)
        scalars = []
        for v in values:
            if not isinstance(v, Literal):
                return None
            s = _literal_as(v, x[1])
            s = _scalar(v) if s is None else s
            if _family(s.type) != _family(x[1]) or _family(s.type) == "other":
                return None
            if pa.types.is_floating(s.type) and pa.types.is_integer(x[1]) and \
                    s.is_valid and abs(s.as_py()) >= 2.0 ** 53:
                return None  # beyond 2**53 a float equals several integers: compared as floats
            if pa.types.is_floating(s.type) and pa.types.is_decimal(x[1]):
                return None  # a decimal meets a float as a float (4.99 is no exact decimal)
            try:
                exact = s.cast(x[1])
                if not exact.cast(s.type).equals(s):  # e.g. 1.505 as decimal(10, 2)
                    return None
            except (pa.ArrowException, TypeError):
                return None
            scalars.append(exact)
        value_set = array_of_scalars(scalars, x[1])
        probe = x
        if pa.types.is_floating(x[1]):  # the hash lookup tells -0.0 from 0.0; SQL does not
            zero: _Typed = (pc.scalar(scalar(0.0, x[1])), x[1])
            probe = _call("add", [x, zero])
            value_set = pc.add(value_set, scalar(0.0, x[1]))
        hit = _call("is_in", [probe], pc.SetLookupOptions(value_set, skip_nulls=True))
        return _call("if_else", [_call("is_valid", [x]), hit, _null_bool()])

    def match(self, op: str, x_expr: Expr, pattern: Expr) -> _Typed:
        if not isinstance(pattern, Literal) or not isinstance(pattern.value, str | None):
            raise InvalidInputError(f"{op} needs a string literal pattern, got "
                                    f"{describe_sql(pattern)}")
        if pattern.value is None:
            return _null_bool()
        options = pc.MatchSubstringOptions(pattern.value, ignore_case=op == "ilike")
        return _call(_MATCH_FN[op], [_text_if_null(self.expr(x_expr))], options)


def _text_if_null(x: _Typed) -> _Typed:
    """``x``, a NULL literal typed as a string (no string kernel takes Arrow's null type,
    and SQL's string functions of NULL are NULL)."""
    return _cast(x, pa.string()) if x[1] == pa.null() else x


# date_part's names of each part (DataFusion's, as pylance 14 reads them)
_DATE_PARTS = {
    **dict.fromkeys(("y", "yr", "yrs", "year", "years"), "year"),
    **dict.fromkeys(("mon", "mons", "month", "months"), "month"),
    **dict.fromkeys(("w", "week", "weeks"), "week"),
    **dict.fromkeys(("d", "day", "days"), "day"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "hour"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "minute"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "second"),
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), "millisecond"),
    **dict.fromkeys(("us", "usec", "usecs", "microsecond", "microseconds"), "microsecond"),
    **dict.fromkeys(("nanosecond", "nanoseconds"), "nanosecond"),
    **dict.fromkeys(("qtr", "quarter"), "quarter"),
    "doy": "doy", "dow": "dow", "isodow": "isodow", "isoyear": "isoyear", "epoch": "epoch",
}
# the pyarrow kernel computing each part that is one (ISO weeks; Sunday is day 0 of a
# week, Monday day 1 of an ISO one)
_PART_KERNELS: dict[str, tuple[str, pc.FunctionOptions | None]] = {
    "year": ("year", None), "month": ("month", None), "day": ("day", None),
    "hour": ("hour", None), "minute": ("minute", None), "second": ("second", None),
    "quarter": ("quarter", None), "doy": ("day_of_year", None), "week": ("iso_week", None),
    "isoyear": ("iso_year", None),
    "dow": ("day_of_week", pc.DayOfWeekOptions(count_from_zero=True, week_start=7)),
    "isodow": ("day_of_week", pc.DayOfWeekOptions(count_from_zero=False, week_start=1)),
}


def _int64(value: int) -> _Typed:
    return pc.scalar(scalar(value, pa.int64())), pa.int64()


def _float(value: float) -> _Typed:
    return pc.scalar(scalar(value, pa.float64())), pa.float64()


def _kernel(fn: str, args: list[pc.Expression], options: pc.FunctionOptions | None = None
            ) -> pc.Expression:
    """The expression calling kernel ``fn`` (pyarrow builds these only through a private
    constructor; every call goes through here)."""
    return pc.Expression._call(fn, args, options)  # noqa: SLF001


def _and(a: pc.Expression, b: pc.Expression) -> pc.Expression:
    return _kernel("and_kleene", [a, b])


def _family(t: pa.DataType) -> str:
    if _is_numeric(t):
        return "number"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if _is_string(t):
        return "string"
    if pa.types.is_temporal(t):
        return "time"
    return "bool" if pa.types.is_boolean(t) else "other"


def _combine(fn: str, parts: list[_Typed]) -> _Typed:
    """``parts`` joined with an associative kernel (``and_kleene``/``or_kleene``) so that
    pyarrow never recurses deeply through the result.

    pyarrow flattens nested calls of one associative kernel into a single left-deep chain
    before evaluating, and walks that chain recursively: 10,000 terms overflow its
    stack. So at most :data:`CHAIN` parts are joined directly; longer lists are joined in
    groups, each behind a no-op cast to boolean that pyarrow does not flatten through,
    and the groups joined the same way, level after level.
    """
    while len(parts) > 1:
        groups = [_chain(fn, parts[i : i + CHAIN]) for i in range(0, len(parts), CHAIN)]
        if len(groups) == 1:
            return groups[0]
        parts = [_call("cast", [g], pc.CastOptions(pa.bool_())) for g in groups]
    return parts[0]


def _chain(fn: str, parts: list[_Typed]) -> _Typed:
    out = parts[0]
    for part in parts[1:]:
        out = _call(fn, [out, part])
    return out


def fold_equalities(args: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """The operands of an OR with equalities of one column to literals (and that column's
    IN lists) merged into one IN list per column: ``a = 1 OR b = 2 OR a = 3`` is
    ``a IN (1, 3) OR b = 2``. The same under three-valued logic (IN is defined as that
    disjunction), and one set lookup instead of thousands of comparisons."""
    groups: dict[tuple[str, ...], list[Literal]] = {}
    members: dict[tuple[str, ...], int] = {}
    for arg in args:
        found = _equality_values(arg)
        if found is not None:
            groups.setdefault(found[0].path, []).extend(found[1])
            members[found[0].path] = members.get(found[0].path, 0) + 1
    if all(count < 2 for count in members.values()):
        return args
    out: list[Expr] = []
    placed: set[tuple[str, ...]] = set()
    for arg in args:
        found = _equality_values(arg)
        if found is None or members[found[0].path] < 2:
            out.append(arg)
        elif found[0].path not in placed:
            placed.add(found[0].path)
            out.append(Call("in", (found[0], *groups[found[0].path])))
    return tuple(out)


def _equality_values(e: Expr) -> tuple[Column, list[Literal]] | None:
    """(column, literals) when ``e`` is ``column = literal`` (either way round) or
    ``column IN (literals)``."""
    if not isinstance(e, Call):
        return None
    if e.op == "=" and len(e.args) == 2:
        a, b = e.args
        if isinstance(a, Literal) and isinstance(b, Column):
            a, b = b, a
        if isinstance(a, Column) and isinstance(b, Literal):
            return a, [b]
    if e.op == "in" and isinstance(e.args[0], Column) and all(
            isinstance(v, Literal) for v in e.args[1:]):
        return e.args[0], list(e.args[1:])  # type: ignore[arg-type]
    return None


_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _number_compare(op: str, left: _Typed, right: _Typed, column: _Typed) -> _Typed:
    """``left op right`` where one side is a number (not NaN) and the other, ``column``,
    floats; ``op`` as seen from ``column``'s side. Arrow's kernel, but a NaN is above every
    number and one with the sign bit set below (:mod:`lance_sql.float_order`): the NaN
    rows are added to ``>`` and ``<`` (``=`` and ``!=`` already answer them)."""
    plain = _call(COMPARISONS[_FLIPPED[op] if column is right else op], [left, right])
    if op in ("=", "!="):
        return plain
    below = _call(negative_nan_function(column[1]), [column])
    if op in ("<", "<="):
        return _call("or_kleene", [plain, below])
    above = _call("and_not_kleene", [_call("is_nan", [column]), below])
    return _call("or_kleene", [plain, above])


def _nan_compare(op: str, left: _Typed, right: _Typed) -> _Typed:
    """Compare floats as DataFusion does: on their order keys (:mod:`lance_sql.float_order`:
    a NaN equals a NaN of its sign, a negative NaN is below every number, a NaN above)."""
    width = 8 if pa.float64() in (left[1], right[1]) else 4
    target = pa.float64() if width == 8 else pa.float32()
    keys = [_call(float_key_function(target), [x if x[1] == target else _cast(x, target)])
            for x in (left, right)]
    return _call(COMPARISONS[op], keys)


def to_pyarrow(expr: Expr | str, schema: pa.Schema) -> pc.Expression:
    """A boolean pyarrow expression for ``expr`` over ``schema``, for ``Table.filter`` or a
    dataset scan (both drop rows where it is NULL).

    Raises NotFoundError for unknown columns and InvalidInputError for type errors, both
    before any data is read.
    """
    if isinstance(expr, str):
        expr = parse_predicate(expr)
    translator = _Translator(schema)
    try:
        return translator.boolean(expr)[0]
    except RecursionError:
        raise InvalidInputError("filter is nested too deeply") from None


def filter_serially(table: pa.Table, expression: pc.Expression) -> pa.Table:
    """``table.filter(expression)``, run on the calling thread.

    ``Table.filter`` hands the work to Arrow's CPU pool, whose threads may drop our
    numpy-backed buffers (which takes the GIL) after the call has returned, even while
    the interpreter exits; our scans run their fragments in parallel already. pyarrow's
    exceptions pass through (see :func:`filter_rows`).
    """
    from pyarrow import acero  # (imports pyarrow.dataset: only once a filter runs)

    return _run_serially(table, acero.Declaration("filter", acero.FilterNodeOptions(expression)))


def project_serially(table: pa.Table, expressions: Sequence[pc.Expression],
                     names: Sequence[str]) -> pa.Table:
    """The columns ``names`` computed by ``expressions`` over ``table``, on the calling
    thread (as :func:`filter_serially`, for the same reason)."""
    from pyarrow import acero

    node = acero.Declaration("project", acero.ProjectNodeOptions(list(expressions),
                                                                 list(names)))
    return _run_serially(table, node)


def _run_serially(table: pa.Table, node: object) -> pa.Table:
    """``table`` through the one Acero ``node``, with no thread of Arrow's pool."""
    from pyarrow import acero

    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)), node])
    return plan.to_table(use_threads=False)


def filter_rows(table: pa.Table, expression: pc.Expression) -> pa.Table:
    """``table``'s rows where ``expression`` (from :func:`to_pyarrow`) is true.

    A filter typed without error can still fail on the values it meets, as SQL's does
    (a string column compared with a number casts each string: ``'abc'`` does not parse;
    an integer overflows; a division by zero): that is an InvalidInputError, not
    pyarrow's exception."""
    try:
        return filter_serially(table, expression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise InvalidInputError(f"the filter fails on the table's values: {err}") from None


def value_expression(expr: Expr | str, schema: pa.Schema, *,
                     lance_literals: bool = False) -> pc.Expression:
    """A pyarrow expression computing ``expr`` (of any type) over ``schema``: the SQL
    expressions of ``add_columns``. Errors as for :func:`to_pyarrow`. ``lance_literals``:
    type literals as pylance does first (see :func:`lance_literal_types`)."""
    if isinstance(expr, str):
        expr = parse_predicate(expr)
    try:
        if lance_literals:
            expr = lance_literal_types(expr, schema)
        translator = _Translator(schema)
        value = translator.expr(expr)
        if translator.half_result(expr) and not pa.types.is_float16(value[1]):
            value = _cast(value, pa.float16())
        return value[0]
    except RecursionError:
        raise InvalidInputError("expression is nested too deeply") from None


def lance_literal_types(expr: Expr, schema: pa.Schema) -> Expr:
    """``expr`` with literals typed as pylance types them before DataFusion sees the
    expression (its ``add_columns``, ``update`` and scan projections): in arithmetic of a
    numeric column (or struct field) with a literal, at the top of the expression or of
    AND / OR operands, the literal takes the column's type, and so do the literals of
    arithmetic made of literals only on the right (``a * (2 - 1)``). So ``i8 + 1`` is an
    int8 that wraps around as DataFusion's integer arithmetic does, ``f32 * 2.5`` a
    float32, ``dec(5, 2) + 1`` a decimal(6, 2). A literal the type cannot hold exactly
    (``i8 + 1000``, ``i8 + 1.5``) is refused, as pylance refuses it: the result's type
    would otherwise depend on the literal's value. Deeper arithmetic (``a - 1 - 1``) is
    left to SQL's usual typing, as in pylance."""
    if not isinstance(expr, Call):
        return expr
    if expr.op in ("and", "or"):
        return Call(expr.op, tuple(lance_literal_types(a, schema) for a in expr.args))
    if expr.op not in ARITHMETIC:
        return expr
    left, right = expr.args
    for column, other, column_first in ((left, right, True), (right, left, False)):
        if not isinstance(column, Column):
            continue
        target = resolve_column(schema, column.path, column.quoted)[1]
        if not _is_numeric(target):
            return expr
        if isinstance(other, Literal):
            other = _lance_literal(other, target, expr)
            if column_first and expr.op == "/" and pa.types.is_decimal(target) \
                    and other.value is not None:
                # a divisor's precision is not in the quotient's type: the literal's own
                # digits keep the exact division within 76 digits (38-digit columns)
                digits = len(str(abs(int(other.value)))) + target.scale
                other = Literal(other.value, pa.decimal128(min(digits, target.precision),
                                                           target.scale))
        elif column_first and _literals_only(other):
            other = _typed_literals(other, target, expr)
        else:
            return expr
        return Call(expr.op, (column, other) if column_first else (other, column))
    return expr


def _literals_only(e: Expr) -> bool:
    return isinstance(e, Literal) or (isinstance(e, Call) and e.op in ARITHMETIC and all(
        _literals_only(a) for a in e.args))


def _typed_literals(e: Expr, target: pa.DataType, whole: Expr) -> Expr:
    if isinstance(e, Literal):
        return _lance_literal(e, target, whole)
    assert isinstance(e, Call)
    return Call(e.op, tuple(_typed_literals(a, target, whole) for a in e.args))


def _lance_literal(lit: Literal, target: pa.DataType, whole: Expr) -> Literal:
    """``lit`` as a ``target`` literal where pylance converts it without loss (integers
    in range to integers, numbers to floats, integers to decimals), else refused."""
    v = lit.value
    if v is None:
        return lit
    exact: Any = None
    if isinstance(v, int) and not isinstance(v, bool):
        if pa.types.is_integer(target):
            signed = pa.types.is_signed_integer(target)
            low = -(2 ** (target.bit_width - 1)) if signed else 0
            high = 2 ** (target.bit_width - signed)
            exact = v if low <= v < high else None
        elif pa.types.is_floating(target):
            exact = float(v)
        elif pa.types.is_decimal(target):
            digits = len(str(abs(v)))
            exact = Decimal(v) if digits <= target.precision - target.scale else None
    elif isinstance(v, float) and pa.types.is_floating(target):
        exact = v
    if exact is None:
        raise InvalidInputError(f"the literal {to_sql(lit)} does not convert to {target}, the "
                                f"type of the column it meets in {to_sql(whole)} (as in "
                                "pylance, a literal takes its column's type; cast the column "
                                "for another type)")
    return Literal(exact, target)


def value_nullable(expr: Expr | str, schema: pa.Schema) -> bool:
    """Whether ``expr`` over ``schema`` may be NULL, as DataFusion (and so pylance, whose
    ``add_columns`` stores it) decides: a non-NULL literal or a column that is not
    nullable is not, operators and casts are nullable when an operand is, IS [NOT] NULL
    never is, COALESCE is when every argument is; functions, CASE and IS DISTINCT FROM
    are taken as nullable."""
    if isinstance(expr, str):
        expr = parse_predicate(expr)
    if isinstance(expr, Literal):
        return expr.value is None
    if isinstance(expr, Column):
        path = resolve_column(schema, expr.path, expr.quoted)[0]
        fields: Sequence[pa.Field] = list(schema)
        for part in path:
            field = next(f for f in fields if f.name == part)
            if field.nullable:
                return True
            fields = list(field.type) if pa.types.is_struct(field.type) else []
        return False
    op, args = expr.op, expr.args
    if op in ("is_null", "is_not_null"):
        return False
    if op == "cast":
        return value_nullable(args[0], schema)
    if op == "coalesce":
        return all(value_nullable(a, schema) for a in args)
    if op in ("and", "or", "not", "negate", "in", "between", "like", "ilike", "||") \
            or op in ARITHMETIC or op in COMPARISONS:
        return any(value_nullable(a, schema) for a in args)
    return True
