"""``UPDATE`` and ``DELETE`` statements on Lance tables, run through the table layer.

DataFusion plans queries, not writes to our tables, so the session recognises these
two statements itself and hands them to ``LanceDataset.update`` / ``delete``::

    UPDATE t SET a = a + 1, b = 'x' WHERE id < 10
    DELETE FROM t WHERE id = 3

Expressions are the SQL subset of the table layer's filter parser; a WHERE holding a
subquery (``id IN (SELECT ...)``, ``EXISTS (...)``) is evaluated by DataFusion on the
version the write starts from, which gives the addresses of the rows to change (and,
when a SET value holds a subquery, every assigned value of those rows). The
statement's result is one row: ``num_rows_updated`` or ``num_deleted_rows``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import parse_predicate
from lance_sql.expr.arrow import to_pyarrow, value_expression
from lance_sql.sql.identifiers import sql_column
from lance_sql.sql.statements import refuse_past_version
from lance_sql.sql.tokens import Token, check_single_statement, tokenize


@dataclass(frozen=True)
class UpdateStatement:
    """A parsed SQL ``UPDATE``: SET expressions per column and the WHERE text."""
    table: str
    assignments: dict[str, str]
    where: str | None
    alias: str | None = None  # UPDATE t [AS] x: expressions may say x.col
    joined: str | None = None  # UPDATE t SET ... FROM <tables> WHERE ...: the FROM list


@dataclass(frozen=True)
class DeleteStatement:
    """A parsed SQL ``DELETE``: the table and the WHERE text."""
    table: str
    where: str | None
    alias: str | None = None  # DELETE FROM t [AS] x: the filter may say x.col
    joined: str | None = None  # DELETE FROM t USING <tables> WHERE ...: the USING list


def _top_level_split(sql: str, tokens: list[Token], separator: str) -> list[str]:
    """``sql`` split at ``separator`` tokens outside parentheses and brackets."""
    parts, depth, start = [], 0, tokens[0].start if tokens else 0
    for tok in tokens:
        depth += tok.nesting
        if depth == 0 and tok.is_op(separator):
            parts.append(sql[start:tok.start])
            start = tok.end
    parts.append(sql[start:tokens[-1].end] if tokens else "")
    return [p.strip() for p in parts]


def _table_and_rest(sql: str, tokens: list[Token], i: int, statement: str) -> tuple[str, int]:
    """The table name at ``tokens[i]`` (``t``, ``default.t`` or ``lance.default.t``, as
    the other statements take it) and the index after it."""
    parts: list[str] = []
    while True:
        if i >= len(tokens) or tokens[i].identifier is None:
            raise InvalidInputError(f"{statement}: expected a table name")
        name = tokens[i].identifier
        assert name is not None
        parts.append(name)
        i += 1
        if i + 1 < len(tokens) and tokens[i].is_op(".") and tokens[i + 1].identifier:
            i += 1
            continue
        break
    if len(parts) > 1 and [p.lower() for p in parts[:-1]] not in (["default"],
                                                                  ["lance", "default"]):
        raise InvalidInputError(f"{statement}: unknown schema in {'.'.join(parts)!r}")
    return parts[-1], i


def _alias(tokens: list[Token], i: int, stop: str) -> tuple[str | None, int]:
    """An alias after the table name (``t AS x``, ``t x``), unless ``stop`` comes next."""
    if i < len(tokens) and tokens[i].is_kw("AS"):
        i += 1
    elif i >= len(tokens) or tokens[i].is_kw(stop):
        return None, i
    if i < len(tokens) and tokens[i].identifier is not None and not tokens[i].is_kw(stop):
        return tokens[i].identifier, i + 1
    return None, i


def _where(sql: str, tokens: list[Token], i: int, statement: str) -> str | None:
    if i >= len(tokens):
        return None
    if not tokens[i].is_kw("WHERE") or i + 1 >= len(tokens):
        raise InvalidInputError(f"{statement}: expected WHERE <condition>, got "
                                f"{sql[tokens[i].start:].strip()!r}")
    return sql[tokens[i + 1].start:tokens[-1].end].strip()


def _top_level_keyword(tokens: list[Token], i: int, word: str) -> int:
    """The index of the first ``word`` from ``tokens[i]`` on outside parentheses (a
    subquery's own WHERE is not the statement's), else ``len(tokens)``."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0 and tokens[j].is_kw(word):
            return j
    return len(tokens)


def has_subquery(text: str) -> bool:
    """Whether an UPDATE/DELETE condition holds a subquery (``IN (SELECT ...)``,
    ``EXISTS (SELECT ...)``, a scalar ``(SELECT ...)``): DataFusion evaluates those."""
    return any(tok.is_kw("SELECT") for tok in tokenize(text))


def needs_engine(text: str, schema: pa.Schema | None = None, *, condition: bool = True
                 ) -> bool:
    """Whether DataFusion, not the table layer's filter language, evaluates an UPDATE /
    DELETE expression: one holding a subquery, SQL the filter language does not parse
    (``round(x, 1)``, ``substr``, ``now()``, ``INTERVAL '1 day'`` and the rest of
    DataFusion's functions and syntax), or, given the table's ``schema``, one it parses
    but cannot type (timestamps of two zones compared, ``length`` of a binary...), which
    DataFusion runs as a SELECT would. ``condition``: a WHERE (else a SET value)."""
    if has_subquery(text):
        return True
    try:
        parsed = parse_predicate(text, sql_quotes=True)
        if schema is not None:
            (to_pyarrow if condition else value_expression)(parsed, schema)
    except InvalidInputError:
        return True
    except NotFoundError:
        return False  # (an unknown column: the table layer names it)
    return False


def parse_dml(sql: str) -> UpdateStatement | DeleteStatement | None:
    """The statement if ``sql`` is an UPDATE or DELETE, else None (a query)."""
    tokens = tokenize(sql)
    check_single_statement(tokens)
    while tokens and tokens[-1].is_op(";"):
        tokens.pop()
    if not tokens:
        return None
    if tokens[0].is_kw("DELETE"):
        if len(tokens) < 2 or not tokens[1].is_kw("FROM"):
            raise InvalidInputError("DELETE: expected DELETE FROM <table> [WHERE ...]")
        table, i = _table_and_rest(sql, tokens, 2, "DELETE")
        refuse_past_version(table, tokens, i, "DELETE")
        alias, i = _alias(tokens, i, "WHERE")
        if i < len(tokens) and alias is not None and alias.upper() == "USING":
            alias, i = None, i - 1  # DELETE FROM t USING ...: no alias
        joined = None
        if i < len(tokens) and tokens[i].is_kw("USING"):
            end = _top_level_keyword(tokens, i + 1, "WHERE")
            joined = _joined(sql, tokens, i + 1, end, "DELETE ... USING")
            i = end
        return DeleteStatement(table, _where(sql, tokens, i, "DELETE"), alias, joined)
    if not tokens[0].is_kw("UPDATE"):
        return None
    table, i = _table_and_rest(sql, tokens, 1, "UPDATE")
    refuse_past_version(table, tokens, i, "UPDATE")
    alias, i = _alias(tokens, i, "SET")
    if i >= len(tokens) or not tokens[i].is_kw("SET"):
        raise InvalidInputError("UPDATE: expected UPDATE <table> SET col = expr, ... [WHERE ...]")
    end = _top_level_keyword(tokens, i + 1, "WHERE")
    joined = None
    from_at = _top_level_keyword(tokens[:end], i + 1, "FROM")
    while from_at < end and tokens[from_at - 1].is_kw("DISTINCT"):  # IS DISTINCT FROM
        from_at = _top_level_keyword(tokens[:end], from_at + 1, "FROM")
    if from_at < end:  # UPDATE t SET ... FROM u WHERE t.k = u.k (PostgreSQL's form)
        joined = _joined(sql, tokens, from_at + 1, end, "UPDATE ... FROM")
    set_tokens = tokens[i + 1:min(end, from_at)]
    if not set_tokens:
        raise InvalidInputError("UPDATE: SET needs at least one assignment")
    assignments: dict[str, str] = {}
    for part in _top_level_split(sql, set_tokens, ","):
        ptoks = tokenize(part)
        qualified = (len(ptoks) >= 5 and ptoks[1].is_op(".") and ptoks[0].identifier
                     is not None and ptoks[0].identifier.lower() in
                     {table.lower(), (alias or table).lower()})
        if qualified:  # SET t.col = ... / x.col = ...: the target's own column
            ptoks = ptoks[2:]
        if len(ptoks) < 3 or ptoks[0].identifier is None or not ptoks[1].is_op("="):
            raise InvalidInputError(f"UPDATE: expected column = expression, got {part!r}")
        column = ptoks[0].identifier
        assert column is not None
        column = sql_column(column, quoted=ptoks[0].kind == "quoted")  # SQL folds unquoted
        if column in assignments:
            raise InvalidInputError(f"UPDATE: column {column!r} is assigned twice")
        value = part[ptoks[2].start:].strip()
        # SET c = DEFAULT: columns have no defaults, so NULL (as SQL's default default)
        assignments[column] = "NULL" if len(ptoks) == 3 and ptoks[2].is_kw("DEFAULT") \
            else value
    return UpdateStatement(table, assignments, _where(sql, tokens, end, "UPDATE"), alias,
                           joined)


def _joined(sql: str, tokens: list[Token], start: int, end: int, what: str) -> str:
    """The text of an UPDATE's FROM list / a DELETE's USING list (tokens start..end)."""
    if start >= end:
        raise InvalidInputError(f"{what}: expected one or more tables")
    return sql[tokens[start].start:tokens[end - 1].end].strip()
