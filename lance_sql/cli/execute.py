"""Running SQL text for the CLI: split it into statements, stream each result to a renderer.

Shared by ``lance-sql sql``, the shell, the demo and the ``sql_examples`` test, so the
expected outputs in ``sql_examples/`` are exactly what the CLI prints.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import pyarrow as pa

from lance_sql.cli.progress import Progress
from lance_sql.cli.render import make_renderer
from lance_sql.errors import LanceError

if TYPE_CHECKING:  # (the SQL layer, DataFusion with it, loads when a session is made)
    from lance_sql.sql.session import LanceSession


@dataclass
class OutputOptions:
    """How results are printed."""

    fmt: str = "table"
    max_rows: int | None = None
    progress: bool | None = None  # None: only when stderr is a terminal


def split_statements(text: str) -> tuple[list[str], str]:
    """Complete ``;``-terminated statements of ``text`` and the unterminated rest.

    Semicolons inside string literals, quoted identifiers and comments do not end a
    statement. Statements are returned without their ``;``; empty ones are dropped.
    """
    statements: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            end = text.find(c, i + 1)
            while end != -1 and end + 1 < n and text[end + 1] == c:  # doubled quote
                end = text.find(c, end + 2)
            if end == -1:
                return statements, text[start:]  # unterminated literal: wait for more
            i = end + 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end == -1 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                return statements, text[start:]
            i = end + 2
            continue
        if c == ";":
            if not is_blank(text[start:i]):
                statements.append(text[start:i].strip())
            start = i + 1
        i += 1
    return statements, text[start:]


def is_blank(sql: str) -> bool:
    """True when ``sql`` holds nothing but whitespace and complete comments."""
    rest = sql.strip()
    while rest:
        if rest.startswith("--"):
            end = rest.find("\n")
            rest = "" if end == -1 else rest[end + 1:].strip()
        elif rest.startswith("/*") and "*/" in rest:
            rest = rest[rest.index("*/") + 2:].strip()
        else:
            return False
    return True


# How DataFusion renders a Python exception raised inside a table function it called.
_PY_ERR = re.compile(
    r"PyErr \{ type: <class '[\w.]+'>, value: \w+\((?P<q>['\"])(?P<msg>.*?)(?P=q)\)"
)


def error_message(exc: BaseException) -> str:
    """An error as one line of text (a wrapped Python exception: just its message)."""
    text = str(exc)
    wrapped = _PY_ERR.search(text)
    if wrapped:
        text = wrapped.group("msg")
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return text or type(exc).__name__


def is_query_error(exc: BaseException) -> bool:
    """Errors that are the query's fault, reported in one line rather than a traceback.

    Ours are typed; DataFusion raises bare ``Exception`` or ``ValueError`` for what the
    session does not map (division by zero, errors inside table functions). Anything
    else is a bug and keeps its traceback (as does everything with ``LANCE_SQL_DEBUG=1``).
    """
    if os.environ.get("LANCE_SQL_DEBUG"):
        return False
    return isinstance(exc, LanceError) or type(exc) in (Exception, ValueError)


def run_query(session: LanceSession, sql: str, out: TextIO, err: TextIO,
              options: OutputOptions) -> int:
    """Run one statement, streaming its result to ``out``; returns the number of rows."""
    df = session.sql(sql)
    renderer = make_renderer(options.fmt, out, options.max_rows)
    enabled = options.progress if options.progress is not None else _isatty(err)
    share_terminal = _isatty(out)
    with Progress(err, enabled=enabled) as progress:
        try:
            renderer.begin(df.schema())
            for item in df.execute_stream():
                batch: pa.RecordBatch = item.to_pyarrow()
                progress.add(batch.num_rows)
                if share_terminal:
                    with progress.paused():
                        renderer.batch(batch)
                else:
                    renderer.batch(batch)
        except LanceError:
            raise
        except Exception as exc:  # DataFusion's flattened errors, typed here
            translated = session.translate_error(exc)
            if translated is exc:
                raise
            raise translated from None
    renderer.end()
    out.flush()
    return renderer.rows


def run_statements(session: LanceSession, statements: list[str], out: TextIO, err: TextIO,
                   options: OutputOptions, *, keep_going: bool = False,
                   error_prefix: str = "error: ") -> int:
    """Run each statement, a blank line between results; returns the number that failed.

    In JSON, several statements print one document: an array holding each result's array
    (a failed statement's is ``null``). With ``keep_going`` an error is printed to ``err``
    and the next statement runs; otherwise the error propagates.
    """
    failures = 0
    wrapped = options.fmt == "json" and len(statements) > 1
    if wrapped:
        out.write("[\n")
    for index, sql in enumerate(statements):
        if index:
            out.write(",\n" if wrapped else "\n")
        try:
            run_query(session, sql, out, err, options)
        except Exception as exc:
            if not (keep_going and is_query_error(exc)):
                if wrapped:
                    out.write("null\n]\n")  # (the document stays whole)
                raise
            failures += 1
            if wrapped:
                out.write("null\n")
            out.flush()
            err.write(f"{error_prefix}{error_message(exc)}\n")
            err.flush()
    if wrapped:
        out.write("]\n")
    return failures


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
