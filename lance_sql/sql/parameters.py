"""Query parameters: ``session.sql("... WHERE id = $1", params=[42])``.

``$1, $2, ...`` take the values of a sequence in order, ``$name`` those of a mapping.
Each placeholder is replaced, before the statement is parsed, by a SQL literal of its
value (strings quoted with their quotes doubled, so a value is never read as SQL), which
makes parameters work the same in queries and in every statement the session runs
itself (INSERT, UPDATE, DELETE, MERGE...). Values: None, bool, int, float, Decimal, str,
datetime.date and datetime.datetime (an aware one as its UTC instant).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from lance_sql.errors import InvalidInputError
from lance_sql.sql.tokens import tokenize

Params = Sequence[Any] | Mapping[str, Any]


def bind_parameters(sql: str, params: Params) -> str:
    """``sql`` with each ``$n`` / ``$name`` replaced by the literal of its value."""
    if isinstance(params, str | bytes) or not isinstance(params, Sequence | Mapping):
        raise InvalidInputError("params must be a sequence ($1, $2...) or a mapping ($name)")
    tokens = tokenize(sql)
    edits: list[tuple[int, int, str]] = []
    for tok, nxt in zip(tokens, tokens[1:], strict=False):
        if not tok.is_op("$") or nxt.start != tok.end or nxt.kind not in ("number", "word"):
            continue
        edits.append((tok.start, nxt.end, _literal(_value(params, nxt.text))))
    for start, end, text in reversed(edits):
        sql = sql[:start] + text + sql[end:]
    return sql


def _value(params: Params, name: str) -> Any:
    if isinstance(params, Mapping):
        if name not in params:
            raise InvalidInputError(f"no value for parameter ${name} (params: "
                                    f"{', '.join(map(str, params)) or 'none'})")
        return params[name]
    if not name.isdigit() or not 1 <= int(name) <= len(params):
        raise InvalidInputError(f"no value for parameter ${name}: {len(params)} positional "
                                "value(s) given ($1...)")
    return params[int(name) - 1]


def _literal(value: Any) -> str:
    """``value`` as a SQL literal of its type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"CAST('{value!r}' AS DOUBLE)"
        return f"({value!r})" if value < 0 or repr(value).startswith("-") else repr(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidInputError(f"parameter value {value} is not a finite decimal")
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        scale = max(-exponent, 0)
        precision = max(len(digits) + max(exponent, 0), scale, 1)
        if precision > 38:
            raise InvalidInputError(f"parameter value {value} has more than 38 digits")
        return f"CAST('{value}' AS DECIMAL({precision}, {scale}))"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise InvalidInputError(f"parameter values are None, bool, int, float, Decimal, str, date "
                            f"or datetime; got {type(value).__name__}")
