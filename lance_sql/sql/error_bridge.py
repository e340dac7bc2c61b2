"""Carry typed lance_sql errors through DataFusion, which flattens them to strings.

An exception raised inside our scan surfaces from DataFusion as a bare
``Exception("DataFusion error: External error: ...")``. Before raising, our code
stores the real exception under a token and puts the token in the message; the
session finds the token in DataFusion's message and re-raises the original. Errors
DataFusion raises itself (unknown column, bad SQL) are mapped by their text.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable

from lance_sql.errors import (
    InvalidInputError,
    LanceError,
    NotFoundError,
    QueryError,
    StatementRefusedError,
)

_TOKEN = re.compile(r"\[lance_sql:([0-9a-f]{32})\]")


class ErrorRegistry:
    """Thread-safe, bounded map from token to the exception it stands for."""

    def __init__(self, capacity: int = 256) -> None:
        self._items: OrderedDict[str, BaseException] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def wrap(self, exc: BaseException) -> RuntimeError:
        """A RuntimeError to raise in DataFusion's place, pointing back at ``exc``."""
        token = uuid.uuid4().hex
        _detach(exc)
        with self._lock:
            self._items[token] = exc
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return RuntimeError(f"{type(exc).__name__}: {exc} [lance_sql:{token}]")

    def lookup(self, message: str) -> BaseException | None:
        match = _TOKEN.search(message)
        if match is None:
            return None
        with self._lock:
            return self._items.pop(match.group(1), None)


_REFUSED = re.compile(r"(?:DDL|DML|Statement) not supported: \w+")


def _detach(exc: BaseException) -> None:
    """Drop the tracebacks of ``exc`` and the errors it chains to before keeping it.

    A traceback pins every frame it passes through, and with them the scan that
    failed — its data and its scanner, which DataFusion must be able to release for the
    query to end (:mod:`lance_sql.sql.streams`). The session re-raises the error with a
    traceback of its own.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending.extend((current.__cause__, current.__context__))


_UNKNOWN_COLUMN = re.compile(r"No field named ([^\s.]+(?:\.[^\s.]+)*)")
_UNKNOWN_TABLE = re.compile(r"table '([^']+)' not found")


def translate(exc: BaseException, registry: ErrorRegistry,
              tables: Callable[[], list[str]] | None = None, *,
              planning: bool = False) -> BaseException:
    """The exception the caller should see for an error out of DataFusion.

    ``tables`` lists the known table names, for "unknown table" messages. ``planning``:
    the error came while planning, before any data was read (as any optimizer error
    does), so a failed cast is of a literal the query wrote (``LIMIT 18446744073709551615``,
    ``_rowid = 'abc'``).
    """
    if isinstance(exc, LanceError):
        return exc
    message = str(exc)
    original = registry.lookup(message)
    if original is not None:
        return original
    refused = _REFUSED.search(message)
    if refused:
        return StatementRefusedError(
            f"{refused.group(0)}: the session runs queries, and writes only as Lance "
            "operations under its root")
    if "This feature is not implemented" in message:
        return StatementRefusedError(f"DataFusion cannot run this statement: {_strip(message)}")
    if "SQL error" in message or "ParserError" in message:
        return InvalidInputError(f"invalid SQL: {_strip(message)}")
    column = _UNKNOWN_COLUMN.search(message)
    if column:
        return NotFoundError(f"unknown column: {_strip(message)}")
    table = _UNKNOWN_TABLE.search(message)
    if table:
        name = table.group(1).removeprefix("lance.default.")
        known = ", ".join(tables()) if tables is not None else ""
        return NotFoundError(f"unknown table {name!r}" + (f"; tables: {known}" if known else ""))
    if "Error during planning" in message or "Schema error" in message:
        return InvalidInputError(_strip(message))
    if (planning or "Optimizer rule" in message) and "Cast error" in message:
        return InvalidInputError(f"invalid literal: {_strip(message)}")
    if "only supports a single SQL statement" in message:
        return InvalidInputError(f"one SQL statement at a time: {_strip(message)}")
    if pushes_constant(message):
        # (the session plans such a query again with its filters above the scans; this
        # is reached only where it cannot, and the engine's own words are a Rust dump)
        return QueryError(
            "DataFusion could not hand this query's filter to a Lance scan: it starts "
            "with a constant (such as NULL, or a comparison with NULL) under AND/OR")
    if any(marker in message for marker in _ENGINE_MARKERS):
        return QueryError(_strip(message))
    return exc


# DataFusion 55 builds pushed filters as pyarrow expressions; a constant operand first
# (``NULL AND x = 1``) becomes a pyarrow scalar, which has no ``&`` / ``|`` with them.
# Two constants (``x >= 1e1 AND x != NULL AND x IN (NULL)``: the comparison kept above the
# scan, ``NULL AND NULL`` pushed) meet as pyarrow scalars, whose ``&`` / ``|`` are bitwise.
# See lance_sql.sql.unpushed.
_CONSTANT_OPERANDS = ("'pyarrow.lib.BooleanScalar' and 'pyarrow._compute.Expression'",
                      "'bit_wise_and' has no kernel matching input types (bool, bool)",
                      "'bit_wise_or' has no kernel matching input types (bool, bool)")


def pushes_constant(error: BaseException | str) -> bool:
    """True when ``error`` (or a message) is DataFusion failing to build the pyarrow
    filter of a scan because a pushed filter is a constant (see the markers above): the
    query runs when planned with its filters kept above the scans."""
    message = str(error)
    return any(marker in message for marker in _CONSTANT_OPERANDS)


_ENGINE_MARKERS = ("DataFusion error", "Arrow error", "Execution error", "Cast error",
                   "Optimizer rule", "External error")


def _strip(message: str) -> str:
    return message.replace("DataFusion error: ", "").strip()
