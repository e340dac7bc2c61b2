"""Read the tree of a ``pyarrow.compute.Expression`` that DataFusion pushes to a scan.

pyarrow offers no accessors for an expression's structure, and its string form is
lossy (long IN lists print ``...``). Its pickle form, however, is an Arrow IPC file
whose schema metadata lists the tree in prefix order (``call``/``field_ref``/
``literal``/``options``/``end`` entries, with literals as length-1 columns).
``Schema.metadata`` would collapse the repeated keys, so the ordered pairs are read
through the Arrow C data interface.

The decoded tree uses lance_sql's own filter model (:mod:`lance_sql.expr.arrow`), so
the scan can tell which columns a filter reads and which fragments it can skip. The
original pyarrow expression is what filters rows (but for floats, see
:func:`rows_filter`), so decoding only ever needs to be conservative: a call we do not
model becomes ``Call("unknown", ...)``, which analyses treat as "could be anything"
(and which no translation takes)."""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import LanceError, QueryError
from lance_sql.expr import Call, Column, Expr, Literal, to_pyarrow
from lance_sql.expr import columns as expr_columns
from lance_sql.format.arrow_c import c_metadata

UNKNOWN = Call("unknown", ())


def as_expression(pushed: object) -> pc.Expression | None:
    """A filter DataFusion pushed, as an expression (None: no filter).

    A filter that folded to a constant arrives as a pyarrow scalar, not an expression
    (``x IN (NULL)`` is NULL): it filters as that constant does, true keeping every row,
    false and NULL none.
    """
    if pushed is None or isinstance(pushed, pc.Expression):
        return pushed
    if isinstance(pushed, pa.Scalar):
        return None if pushed.as_py() is True else pc.scalar(False)
    raise QueryError(f"DataFusion pushed a filter lance_sql cannot read: {pushed!r}")


def rows_filter(filter: pc.Expression, tree: Expr | None, schema: pa.Schema
                ) -> pc.Expression:
    """What filters a scan's rows for the ``filter`` DataFusion pushed (``tree``: it
    decoded, None if it did not).

    DataFusion pushes filters as Exact and orders floats with NaN above every number and
    equal to itself, but the pyarrow form it pushes compares them as IEEE does (NaN
    matches nothing: ``v > 74.0`` would lose the NaN rows DataFusion keeps). A filter
    that reads a float column is therefore made again from its tree by lance_sql's own
    translator, which orders floats as DataFusion does; any other filter, or one the
    translator cannot take, filters as pushed.

    So is one with an IN list under anything but AND / OR: the pushed ``is_in`` answers
    FALSE for a NULL value, where SQL's IN answers NULL, and under a NOT that FALSE keeps
    the row (``NOT (x IN (1, 2, 3, 4) AND s <> 'z')`` kept the rows whose ``x`` is NULL).
    Under AND / OR alone, FALSE and NULL drop a row alike: those filter as pushed (a
    100,000-value IN is not made again for every partition).
    """
    if tree is None or not (_negated_in_list(tree) or _reads_floats(tree, schema)):
        return filter
    try:
        return to_pyarrow(tree, schema)
    except (LanceError, RecursionError):
        return filter


def _negated_in_list(tree: Expr) -> bool:
    """Whether an IN list lies under a node other than AND / OR (a NOT, IS [NOT] NULL,
    a comparison of its truth...), where its NULL and FALSE would differ."""
    stack = [(tree, False)]
    while stack:  # (DataFusion's OR chains nest deep: no recursion)
        node, inside = stack.pop()
        if isinstance(node, Call):
            if node.op == "in" and inside:
                return True
            below = inside or node.op not in ("and", "or")
            stack.extend((a, below) for a in node.args)
    return False


def _reads_floats(tree: Expr, schema: pa.Schema) -> bool:
    for path in expr_columns(tree):
        t: pa.DataType | None = None
        fields: Any = schema
        for name in path:
            index = fields.get_field_index(name) if fields is not None else -1
            if index < 0:
                t = None
                break
            t = fields.field(index).type
            fields = t if pa.types.is_struct(t) else None
        if t is not None and pa.types.is_floating(t):
            return True
    return False


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(key.decode(), value.decode(errors="replace")) for key, value in c_metadata(schema)]


_COMPARE = {"equal": "=", "not_equal": "!=", "less": "<", "less_equal": "<=",
            "greater": ">", "greater_equal": ">="}
_LOGIC = {"and_kleene": "and", "and": "and", "or_kleene": "or", "or": "or"}


def _read(expression: pc.Expression) -> tuple[list[tuple[str, str]], pa.Table]:
    buffer = expression.__reduce__()[1][0]
    table = pa.ipc.open_file(pa.py_buffer(buffer)).read_all()
    return _ordered_metadata(table.schema), table


def in_list(expression: pc.Expression) -> tuple[str, pa.Array] | None:
    """``(column, values)`` when the expression is nothing but ``column IN (values)`` on a
    top-level column, the values as the Arrow array pushed (no Python literal each: an
    ``IN`` of many keys is read in one step); None: any other expression."""
    pairs, table = _read(expression)
    if len(pairs) != 4 or [k for k, _ in pairs] != ["call", "field_ref", "options", "end"] \
            or pairs[0][1] != "is_in" or "." in pairs[1][1]:
        return None
    try:
        options = table.column(int(pairs[2][1]))[0]
        values = options["value_set"].values
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    return (pairs[1][1], values) if isinstance(values, pa.Array) else None


def referenced_columns(expression: pc.Expression) -> set[str]:
    """Top-level names of every field the expression reads."""
    pairs, _ = _read(expression)
    out = set()
    for key, value in pairs:
        if key == "field_ref":
            out.add(value.split(".", 1)[0])
    return out


# ``column == integer`` as pyarrow prints it (a plain name: no dots, no quoting)
_ONE_PIN = re.compile(r"\(([A-Za-z_][A-Za-z0-9_]*) == (-?[0-9]{1,20})\)")
_PIN_TYPES = (pa.int64(), pa.int32(), pa.uint64(), pa.uint32(), pa.int16(), pa.uint16(),
              pa.int8(), pa.uint8())


def _one_pin(expression: pc.Expression) -> Expr | None:
    """``column == integer`` (what a point lookup pushes) read from the expression's
    printed form, and only if the expression rebuilt from it, in one of the integer types,
    equals the original (the print omits the literal's type): the same tree as the full
    decode, without serialising the expression. None: not of that form."""
    found = _ONE_PIN.fullmatch(str(expression))
    if found is None:
        return None
    name, value = found.group(1), int(found.group(2))
    field = pc.field(name)
    for t in _PIN_TYPES:
        try:
            literal = pa.scalar(value, t)
        except (pa.ArrowException, OverflowError):
            continue  # does not fit this type
        if expression.equals(field == pc.scalar(literal)):
            return Call("=", (Column((name,)), Literal(value, t)))
    return None


def decode(expression: pc.Expression) -> Expr | None:
    """The expression in lance_sql's filter model; None if it cannot be read at all.

    Read with an explicit stack, not recursion: DataFusion hands over long OR chains as
    one nested call per operand. A lone ``column == integer`` is read from its printed
    form (:func:`_one_pin`).
    """
    pinned = _one_pin(expression)
    if pinned is not None:
        return pinned
    return decode_serialised(expression)


def decode_serialised(expression: pc.Expression) -> Expr | None:
    """:func:`decode` from the serialised form (any expression)."""
    pairs, table = _read(expression)
    calls: list[tuple[str, list[Expr], list[Any]]] = []  # (name, args, [options])
    try:
        for key, value in pairs:
            if key == "call":
                calls.append((value, [], [None]))
                continue
            if key == "options":
                calls[-1][2][0] = table.column(int(value))[0].as_py()
                continue
            if key == "end":
                name, args, options = calls.pop()
                item = _call(name, args, options[0])
            elif key == "field_ref":
                item = Column(tuple(value.split(".")))
            elif key == "literal":
                column = table.column(int(value))
                item = Literal(column[0].as_py(), column.type)
            else:
                return None
            if not calls:
                return item
            calls[-1][1].append(item)
    except (IndexError, ValueError, KeyError, struct.error):
        pass
    return None


def _call(name: str, args: Sequence[Expr | None], options: Any) -> Expr:
    exprs = tuple(a if a is not None else UNKNOWN for a in args)
    if name in _COMPARE:
        return Call(_COMPARE[name], exprs)
    if name in _LOGIC:  # nested ANDs (ORs) become one n-ary node
        op = _LOGIC[name]
        return Call(op, tuple(p for e in exprs
                              for p in (e.args if isinstance(e, Call) and e.op == op else (e,))))
    if name == "invert":
        return Call("not", exprs)
    if name == "is_null":
        return Call("is_null", exprs)
    if name == "is_valid":
        return Call("is_not_null", exprs)
    if name == "is_in" and isinstance(options, dict):
        values = options.get("value_set") or []
        return Call("in", exprs + tuple(Literal(v) for v in values))
    return Call("unknown", exprs)
