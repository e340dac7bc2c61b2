"""Column names in UPDATE / DELETE expressions bound by SQL's rule, as SELECT binds them.

The session evaluates an UPDATE's SET expressions and a DELETE's or UPDATE's WHERE (those
without subqueries) with the table layer's filter language, which binds an unquoted name
case-insensitively when no exact one exists, as pylance's Python filters do. In SQL,
DataFusion folds an unquoted name to lower case and binds it exactly (``SELECT name``
does not find column ``Name``; ``"Name"`` does), so before a statement runs every column
it names is checked under that rule: a name SQL would not bind is a NotFoundError saying
how to quote it, and one the filter language would bind to another column than SQL's
(``NAME`` with columns ``name`` and ``NAME``) an InvalidInputError.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import Call, Column, Expr, parse_predicate, resolve_column
from lance_sql.sql.tokens import quote_identifier
from lance_sql.table import SYSTEM_COLUMNS


def sql_column(name: str, quoted: bool) -> str:
    """A column name as SQL reads it: unquoted names fold to lower case."""
    return name if quoted else name.lower()


def check_sql_names(text: str, schema: pa.Schema, statement: str) -> None:
    """Refuse ``text``'s column names that SQL would not bind as the filter language does
    (the system columns, ``_rowid``..., are names of every table)."""
    schema = pa.schema(list(schema) + [pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS
                                       if n not in schema.names])
    for column in _columns(parse_predicate(text, sql_quotes=True)):
        quoted = column.quoted or (False,) * len(column.path)
        folded = tuple(sql_column(p, q) for p, q in zip(column.path, quoted, strict=True))
        try:
            resolve_column(schema, folded, (True,) * len(folded))
        except NotFoundError:
            spelled = ".".join(column.path)
            hint = ""
            try:  # the spelling the user probably meant
                found = resolve_column(schema, column.path)[0]
                hint = f"; quote it to keep its case: {'.'.join(map(quote_identifier, found))}"
            except NotFoundError:
                pass
            raise NotFoundError(
                f"{statement}: no column {'.'.join(folded)!r} (written {spelled}); SQL folds "
                f"unquoted names to lower case, as SELECT does{hint}; columns: "
                f"{', '.join(n for n in schema.names if n not in SYSTEM_COLUMNS)}") from None
        if resolve_column(schema, column.path, column.quoted)[0] != folded:
            raise InvalidInputError(
                f"{statement}: {'.'.join(column.path)} is ambiguous here; quote the column "
                f"meant: {'.'.join(map(quote_identifier, folded))}")


def check_sql_target(column: str, schema: pa.Schema, statement: str) -> None:
    """A NotFoundError, saying how to quote it, unless ``column`` (an UPDATE's SET target
    as SQL reads it: folded unless quoted) is one of ``schema``'s columns."""
    if column in schema.names:
        return
    same = [n for n in schema.names if n.lower() == column.lower()]
    hint = f"; quote it to keep its case: {quote_identifier(same[0])}" if same else ""
    raise NotFoundError(
        f"{statement}: no column {column!r} to set; SQL folds unquoted names to lower case, "
        f"as SELECT does{hint}; columns: {', '.join(schema.names)}")


def names_system_column(text: str) -> bool:
    """Whether an expression (one the filter language parses) reads a system column: the
    table layer computes SET values from data columns only, DataFusion from all."""
    parsed = parse_predicate(text, sql_quotes=True)
    return any(c.path[0].lower() in SYSTEM_COLUMNS for c in _columns(parsed))


def _columns(expr: Expr) -> Iterator[Column]:
    if isinstance(expr, Column):
        yield expr
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from _columns(arg)
