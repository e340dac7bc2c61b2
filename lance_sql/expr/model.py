"""The filter expression tree: three frozen node types, no engine attached.

:mod:`lance_sql.expr.parser` builds it from SQL text and
:mod:`lance_sql.expr.arrow` translates it to pyarrow and analyses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.numpy_arrow import scalar_from_python


@dataclass(frozen=True)
class Column:
    """A column reference; several parts walk into struct fields (``a.b`` is ``("a", "b")``).

    ``quoted`` says, per part, whether it was quoted (``"Name"``, `` `Name` ``): a quoted
    name binds to exactly that spelling, an unquoted one also case-insensitively (see
    :func:`lance_sql.expr.arrow.resolve_column`); it takes no part in equality."""

    path: tuple[str, ...]
    quoted: tuple[bool, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Literal:
    """A constant. ``type`` None means "whatever pyarrow infers from ``value``"."""

    value: Any
    type: pa.DataType | None = None


@dataclass(frozen=True)
class Call:
    """An operator or function applied to ``args`` (see :data:`OPS`).

    ``in`` takes the tested expression then the list's literals; ``between`` takes
    ``(x, low, high)``; ``cast`` takes ``(x, Literal(None, target_type))``. Negated SQL forms
    (``NOT IN``, ``NOT LIKE``, ``NOT BETWEEN``) are ``not`` around the positive form, which is
    exactly their meaning under three-valued logic.
    """

    op: str
    args: tuple[Expr, ...]


Expr: TypeAlias = Column | Literal | Call

COMPARISONS = {
    "=": "equal", "!=": "not_equal", "<": "less",
    "<=": "less_equal", ">": "greater", ">=": "greater_equal",
}
ARITHMETIC = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "%": "remainder"}
FUNCTIONS = {"lower": 1, "upper": 1, "abs": 1, "length": 1, "starts_with": 2, "ends_with": 2,
             "array_element": 2, "array_has": 2, "cardinality": 1, "array_length": 1,
             "isnan": 1, "date_part": 2, "regexp_like": 2}
# Functions that also take more arguments than FUNCTIONS says: the most they take
# (``regexp_like(s, pattern, flags)``)
OPTIONAL_ARGUMENTS = {"regexp_like": 3}
# Functions of one or more arguments: coalesce (the first non-NULL), concat (strings
# joined, NULLs skipped, as DataFusion's).
VARIADIC = frozenset({"coalesce", "concat"})
# ``||`` joins two strings (NULL if either is); ``is_distinct`` / ``is_not_distinct`` are
# ``IS [NOT] DISTINCT FROM`` (NULL equal to NULL, never NULL); ``case`` takes
# (condition, value) pairs then an optional ELSE value (a simple ``CASE x WHEN v`` is
# parsed as ``x = v`` conditions).
OPS = frozenset(
    {"and", "or", "not", "is_null", "is_not_null", "in", "between", "like", "ilike",
     "negate", "cast", "||", "is_distinct", "is_not_distinct", "case"}
    | COMPARISONS.keys() | ARITHMETIC.keys() | FUNCTIONS.keys() | VARIADIC
)


def col(name: str) -> Column:
    """``col("a.b")``: a column reference from a dotted name (no quoting)."""
    return Column(tuple(name.split(".")))


def lit(value: Any, type: pa.DataType | None = None) -> Literal:
    """A literal of ``value`` (typed by pyarrow when ``type`` is None)."""
    return Literal(value, type)


def cast_target(call: Call) -> pa.DataType:
    """The type a ``cast`` call converts to (its second argument, a typed literal)."""
    target = call.args[1]
    if not isinstance(target, Literal) or target.type is None:
        raise InvalidInputError(f"cast needs a type as its second argument, got {target!r}")
    return target.type


def literal_type(lit: Literal) -> pa.DataType:
    """The Arrow type ``lit`` evaluates to."""
    return scalar_of(lit).type


def scalar_of(lit: Literal) -> pa.Scalar:
    """``lit`` as a pyarrow scalar; an unrepresentable value is an InvalidInputError."""
    big = lit.type is None and isinstance(lit.value, int) and lit.value >= 2**63
    quick = scalar_from_python(lit.value, pa.uint64() if big else lit.type)
    if quick is not None:  # (pa.scalar's first call in a process imports pandas)
        return quick
    try:
        return pa.scalar(lit.value, pa.uint64() if big else lit.type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as err:
        message = f"invalid literal {lit.value!r} of type {lit.type}: {err}"
        raise InvalidInputError(message) from None
