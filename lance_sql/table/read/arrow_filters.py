"""The tree of a ``pyarrow.compute.Expression``, read in lance_sql's filter model.

pyarrow offers no accessors for an expression's structure, and its string form is
lossy (long IN lists print ``...``, strings print in double quotes, which SQL reads as
names). Its pickle form, however, is an Arrow IPC file whose schema metadata lists the
tree in prefix order (``call``/``field_ref``/``literal``/``options``/``end`` entries,
with literals as length-1 columns). ``Schema.metadata`` would collapse the repeated keys,
so the ordered pairs are read through the Arrow C data interface.

Two readers use it: SQL scans (the filter DataFusion pushes) and the Python API (a
pyarrow expression passed as ``filter=``, as pylance accepts). A call this model does
not know becomes ``Call("unknown", ...)``, which analyses treat as "could be anything"
and no translation takes (see :func:`known`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import LanceError
from lance_sql.expr import Call, Column, Expr, Literal, to_sql
from lance_sql.format.arrow_c import c_metadata

__all__ = ["UNKNOWN", "decode", "decode_serialised", "in_list", "known",
           "referenced_columns", "sql_text"]

UNKNOWN = Call("unknown", ())


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(key.decode(), value.decode(errors="replace")) for key, value in c_metadata(schema)]


_COMPARE = {"equal": "=", "not_equal": "!=", "less": "<", "less_equal": "<=",
            "greater": ">", "greater_equal": ">="}
# (pyarrow's plain "and" / "or" are not SQL's: NULL AND FALSE is NULL there, which a NOT
# above keeps as NULL where SQL's FALSE becomes TRUE; they stay unknown calls)
_LOGIC = {"and_kleene": "and", "or_kleene": "or"}


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
    return {column.path[0] for column in _references(pairs)}


def _references(pairs: list[tuple[str, str]]) -> list[Column]:
    """Every field reference among ``pairs``, as columns."""
    out, at = [], 0
    while at < len(pairs):
        column, at = _reference(pairs, at)
        if column is not None:
            out.append(column)
        else:
            at += 1
    return out


def _reference(pairs: list[tuple[str, str]], at: int) -> tuple[Column | None, int]:
    """The field reference at ``pairs[at]`` and the position after it; (None, at) when
    there is none. A nested one (``pc.field("s", "x")``) is a ``nested_field_ref`` entry
    giving its depth, then one ``field_ref`` a level; a plain one's dotted name is a path
    (DataFusion pushes struct fields so)."""
    key, value = pairs[at]
    if key == "field_ref":
        return Column(tuple(value.split("."))), at + 1
    if key == "nested_field_ref":
        depth = int(value)
        names = pairs[at + 1: at + 1 + depth]
        if len(names) != depth or depth < 1 or any(k != "field_ref" for k, _ in names):
            raise ValueError("a nested field reference without its names")
        return Column(tuple(v for _, v in names)), at + 1 + depth
    return None, at


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
        at = 0
        while at < len(pairs):
            key, value = pairs[at]
            at += 1
            if key == "call":
                calls.append((value, [], [None]))
                continue
            if key == "options":
                calls[-1][2][0] = table.column(int(value))[0].as_py()
                continue
            if key == "end":
                name, args, options = calls.pop()
                item = _call(name, args, options[0])
            elif key in ("field_ref", "nested_field_ref"):
                reference, at = _reference(pairs, at - 1)
                assert reference is not None
                item = reference
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
        if isinstance(options, dict) and options.get("nan_is_null"):
            return Call("unknown", exprs)  # (NaN counts as NULL: not SQL's IS NULL)
        return Call("is_null", exprs)
    if name == "is_valid":
        return Call("is_not_null", exprs)
    if name == "is_in" and isinstance(options, dict):
        values = options.get("value_set") or []
        return Call("in", exprs + tuple(Literal(v) for v in values))
    return Call("unknown", exprs)


def known(tree: Expr) -> bool:
    """Whether ``tree`` holds no call this model does not know (it is then exactly the
    expression it was decoded from)."""
    stack = [tree]
    while stack:  # (long OR chains nest deep: no recursion)
        node = stack.pop()
        if isinstance(node, Call):
            if node.op == "unknown":
                return False
            stack.extend(node.args)
    return True


def sql_text(expression: pc.Expression) -> str:
    """The expression as SQL (what a transaction records as a delete's predicate), or
    pyarrow's print of it when it holds a call the model does not know."""
    tree = decode(expression)
    if tree is not None and known(tree):
        try:
            return to_sql(tree)
        except (LanceError, ValueError, TypeError):
            pass
    return str(expression)
