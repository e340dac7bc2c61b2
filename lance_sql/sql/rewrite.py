"""The SQL front door's rewrite: time travel, version pinning and hidden system columns.

DataFusion cannot see versions: its permissive dialects parse ``VERSION AS OF`` and
silently read the latest data. So before DataFusion sees a query, every reference
to a Lance table is replaced by a canonical, quoted name that pins one version
(``t VERSION AS OF 3`` -> ``"t@3#q7" AS t``), which the lazy catalog resolves.
Pinning every reference at rewrite time also gives the snapshot rule: one query
sees one version per table, even when it names the table twice.

System columns (``_rowid``, ``_rowaddr``...) are hidden from ``*``: a query that
never names them is planned against providers without them; a query that does is
planned against providers with them, and its wildcards over Lance tables (and over
``nearest(...)``, whose rows are a table's) become ``* EXCLUDE (...)``, each relation
excluding the system columns its provider shows. A ``*`` over several such relations
cannot exclude a name they share (DataFusion calls it ambiguous): it becomes one
wildcard per relation, ``a.* EXCLUDE (...), b.* EXCLUDE (...)``, which is what ``*``
means over joins matched by ``ON`` (see :func:`_wildcard_text`). Any time-travel clause
left over after the rewrite is an error,
never ignored. One statement per call; NULLs in literal ``IN`` lists go last (see
:func:`_nulls_last`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from lance_sql.errors import InvalidInputError
from lance_sql.sql.tokens import (
    Token,
    check_single_statement,
    quote_identifier,
    string_value,
    tokenize,
)
from lance_sql.table import parse_instant

_CLAUSE_END = {
    "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "QUALIFY", "WINDOW", "UNION",
    "INTERSECT", "EXCEPT", "FETCH", "SELECT",
}
_LITERALS = ("number", "numbers", "string")
_NOT_ALIAS = _CLAUSE_END | {
    "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL", "ON", "USING", "AS", "FOR",
    "VERSION", "TIMESTAMP", "AT", "OUTER", "SEMI", "ANTI", "LATERAL",
}


@dataclass(frozen=True)
class VersionSpec:
    """What a time-travel clause asks for."""

    kind: str  # "version", "tag" or "timestamp"
    value: int | str | dt.datetime

    def describe(self) -> str:
        return f"{self.kind} {self.value}"


@dataclass
class _Relation:
    name: str
    alias: str
    qualifier: str | None  # what names it in the rewritten text (``x``, ``"T"``; None: no alias)
    hidden: tuple[str, ...] = ()  # the system columns its provider shows, hidden from *
    # system columns' names among its own columns (``table_changes``' ``_rowid``): a * that
    # hides another relation's column of that name is ambiguous too
    own: tuple[str, ...] = ()


@dataclass
class _Scope:
    relations: list[_Relation] = field(default_factory=list)  # the FROM items, in order
    wildcards: list[tuple[int, str | None]] = field(default_factory=list)  # (token idx, qual)
    # a FROM item the rewrite does not follow (LATERAL, UNNEST), or a join that merges
    # columns (USING, NATURAL): its * is not one wildcard per item
    opaque: bool = False


@dataclass
class _Frame:
    scope: _Scope | None = None
    clause: str | None = None
    expect_relation: bool = False


@dataclass(frozen=True)
class RewrittenQuery:
    """A query with time travel rewritten to pinned table names, and what it names."""
    text: str
    explain: bool
    system_columns: bool
    tables: tuple[str, ...]


# is_lance(name) -> bool; resolve(name, spec, with_system_columns) -> (replacement
# identifier, the system columns the provider then shows)
IsLance = Callable[[str], bool]
Resolve = Callable[[str, VersionSpec | None, bool], tuple[str, tuple[str, ...]]]
# table functions whose rows are a Lance table's: their system columns are hidden too
LANCE_ROW_FUNCTIONS = frozenset({"nearest"})
# table functions with a system column's name among their own columns
OWN_SYSTEM_NAMES = {"table_changes": ("_rowid",)}


def parse_timestamp(text: str) -> dt.datetime:
    """A timestamp literal; naive values are UTC (manifests record UTC times)."""
    try:
        return parse_instant(text)
    except InvalidInputError:
        raise InvalidInputError(f"invalid timestamp {text!r} in time-travel clause") from None


def at_spec(text: str) -> VersionSpec:
    """What the part after ``@`` of a table name ``t@...`` asks for: digits a version, a
    date-time (``2026-11-01...``) the latest version committed by then, else a tag (also
    one whose name starts as a date does, when the rest does not parse as one)."""
    if text.isdigit():
        return VersionSpec("version", int(text))
    if text[:4].isdigit() and len(text) >= 10 and text[4] == "-":
        try:
            return VersionSpec("timestamp", parse_timestamp(text))
        except InvalidInputError:
            pass  # not a date-time: a tag named so (``t@2026-release``)
    return VersionSpec("tag", text)


def _literal_spec(tokens: list[Token], i: int, kind: str) -> tuple[VersionSpec, int]:
    """Parse the literal of a time-travel clause at ``tokens[i]``; return spec and next index."""
    if i >= len(tokens):
        raise InvalidInputError("time-travel clause is missing its version or timestamp")
    tok = tokens[i]
    if tok.is_kw("TIMESTAMP") and i + 1 < len(tokens) and tokens[i + 1].kind == "string":
        return VersionSpec("timestamp", parse_timestamp(string_value(tokens[i + 1]))), i + 2
    if kind == "version":
        if tok.kind == "number" and tok.text.isdigit():
            return VersionSpec("version", int(tok.text)), i + 1
        if tok.kind == "string":
            text = string_value(tok)
            if text.isdigit():
                return VersionSpec("version", int(text)), i + 1
            return VersionSpec("tag", text), i + 1
    elif tok.kind == "string":
        return VersionSpec("timestamp", parse_timestamp(string_value(tok))), i + 1
    elif tok.kind == "number":
        seconds = float(tok.text)
        return VersionSpec("timestamp", dt.datetime.fromtimestamp(seconds, dt.UTC)), i + 1
    raise InvalidInputError(
        f"unexpected {tok.text!r} in time-travel clause at position {tok.start}"
    )


def time_travel_clause(tokens: list[Token], i: int) -> tuple[VersionSpec | None, int]:
    """The time-travel clause starting at ``tokens[i]`` (``VERSION AS OF 3``, ``AT
    (VERSION => 3)``...) and the index after it, or ``(None, i)``."""

    def kw(j: int, *words: str) -> bool:
        return j < len(tokens) and tokens[j].is_kw(*words)

    def op(j: int, *ops: str) -> bool:
        return j < len(tokens) and tokens[j].is_op(*ops)

    start = i
    if kw(i, "FOR") and kw(i + 1, "SYSTEM_TIME", "SYSTEM_VERSION", "VERSION", "TIMESTAMP"):
        i += 1
    if kw(i, "VERSION", "SYSTEM_VERSION", "TIMESTAMP", "SYSTEM_TIME") and kw(i + 1, "AS") and kw(
        i + 2, "OF"
    ):
        kind = "version" if tokens[i].upper in ("VERSION", "SYSTEM_VERSION") else "timestamp"
        return _literal_spec(tokens, i + 3, kind)
    i = start
    if kw(i, "AT") and op(i + 1, "(") and kw(i + 2, "VERSION", "TIMESTAMP") and op(i + 3, "=>"):
        kind = "version" if tokens[i + 2].upper == "VERSION" else "timestamp"
        spec, j = _literal_spec(tokens, i + 4, kind)
        if not op(j, ")"):
            raise InvalidInputError(f"expected ')' to close AT (...) at position {tokens[i].start}")
        return spec, j + 1
    return None, start


def _identifier(tok: Token) -> str | None:
    if tok.kind == "quoted":
        return tok.identifier
    if tok.kind == "word" and tok.upper not in _NOT_ALIAS:
        return tok.text
    return None


def _cte_names(tokens: list[Token]) -> set[str]:
    names = set()
    for i, tok in enumerate(tokens):
        if tok.kind != "word":  # (most tokens of a long literal list: checked cheaply)
            continue
        if tok.is_kw("AS") and i + 1 < len(tokens) and tokens[i + 1].is_op("(") and i > 0:
            prev = tokens[i - 1]
            if prev.is_op(")"):  # name (col, ...) AS (
                depth, j = 0, i - 1
                while j >= 0:
                    depth += tokens[j].is_op(")") - tokens[j].is_op("(")
                    if depth == 0:
                        break
                    j -= 1
                prev = tokens[j - 1] if j > 0 else prev
            ident = prev.identifier
            if ident:
                names.add(ident.lower())
    return names


def _has_system_column(tokens: list[Token], system_columns: tuple[str, ...]) -> bool:
    wanted = {c.lower() for c in system_columns}
    for tok in tokens:
        if tok.kind != "word" and tok.kind != "quoted":
            continue
        ident = tok.identifier
        if ident is None:
            continue
        if (tok.kind == "word" and ident.lower() in wanted) or ident in system_columns:
            return True
    return False


def rewrite(sql: str, is_lance: IsLance, resolve: Resolve,
            system_columns: tuple[str, ...]) -> RewrittenQuery:
    """Rewrite ``sql`` as described in the module docstring."""
    tokens = tokenize(sql, literal_runs=True)
    if not tokens:
        raise InvalidInputError("empty SQL statement")
    check_single_statement(tokens)
    explain = tokens[0].is_kw("EXPLAIN")
    ctes = _cte_names(tokens)
    system = _has_system_column(tokens, system_columns)
    edits: list[tuple[int, int, str]] = _nulls_last(sql, tokens)
    consumed: set[int] = set()
    scopes: list[_Scope] = []
    tables: list[str] = []
    frames = [_Frame()]
    i = 0
    while i < len(tokens):
        tok, frame = tokens[i], frames[-1]
        if tok.kind in _LITERALS:  # a literal changes nothing here
            i += 1
            continue
        if tok.is_op("("):
            if frame.clause == "from" and frame.expect_relation:  # a derived table
                frame.expect_relation = False
                _derived_table(tokens, i, frame)
            frames.append(_Frame())
            i += 1
            continue
        if tok.is_op(")"):
            if len(frames) > 1:
                frames.pop()
            frames[-1].expect_relation = False
            i += 1
            continue
        if tok.is_kw("SELECT"):
            frame.scope = _Scope()
            scopes.append(frame.scope)
            frame.clause = "select"
        elif tok.is_kw("FROM") and frame.scope is not None and frame.clause == "select":
            frame.clause, frame.expect_relation = "from", True
        elif frame.clause == "from":
            if tok.is_kw("JOIN") or tok.is_op(","):
                frame.expect_relation = True
            elif tok.kind == "word" and tok.upper in _CLAUSE_END:
                frame.clause = None
            elif tok.is_kw("USING", "NATURAL"):
                assert frame.scope is not None
                frame.scope.opaque = True
            elif frame.expect_relation and tok.is_kw("LATERAL", "UNNEST"):
                frame.expect_relation = False
                assert frame.scope is not None
                frame.scope.opaque = True
            elif frame.expect_relation and _identifier(tok) is not None:
                i = _relation(tokens, i, frame, ctes, is_lance, resolve, system, edits, consumed,
                              tables, system_columns)
                continue
        elif frame.clause == "select" and tok.is_op("*") and i > 0:
            prev = tokens[i - 1]
            if prev.is_kw("SELECT", "DISTINCT", "ALL") or prev.is_op(","):
                assert frame.scope is not None
                frame.scope.wildcards.append((i, None))
            elif prev.is_op(".") and i > 1 and tokens[i - 2].identifier:
                assert frame.scope is not None
                frame.scope.wildcards.append((i, tokens[i - 2].identifier))
        i += 1
    _check_leftover_time_travel(tokens, consumed)
    if system:
        for scope in scopes:
            for index, qualifier in scope.wildcards:
                text = _wildcard_text(scope, qualifier)
                if text is not None:
                    edits.append((tokens[index].start, tokens[index].end, text))
    text = sql
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return RewrittenQuery(text, explain, system, tuple(tables))


def _wildcard_text(scope: _Scope, qualifier: str | None) -> str | None:
    """What a wildcard (``*`` or ``qualifier.*``) of ``scope`` becomes when the query
    shows system columns (None: it stays as written)."""
    if qualifier is not None:
        named = [r for r in scope.relations if r.alias.lower() == qualifier.lower()]
        if len(named) != 1 or not named[0].hidden:
            return None
        return f"* EXCLUDE ({', '.join(named[0].hidden)})"
    hiding = [r for r in scope.relations if r.hidden]
    if not hiding:
        return None
    hidden = list(dict.fromkeys(c for r in hiding for c in r.hidden))
    shared = sorted(c for c in hidden
                    if sum(c in r.hidden or c in r.own for r in scope.relations) > 1)
    if not shared:
        return f"* EXCLUDE ({', '.join(hidden)})"
    aliases = [r.alias.lower() for r in scope.relations]
    if scope.opaque or len(set(aliases)) != len(aliases) or any(
            r.qualifier is None for r in scope.relations):
        raise InvalidInputError(
            "SELECT * over several Lance tables cannot hide their system columns "
            f"({', '.join(shared)}) when the query names one and the FROM clause joins "
            "with USING or NATURAL, or holds an item without an alias (a subquery, a "
            "table function), LATERAL or UNNEST: write each table's wildcard (a.*, b.*) "
            "instead")
    # over joins matched by ON (or commas, CROSS JOIN), * is each item's columns in turn
    return ", ".join(
        f"{r.qualifier}.*" + (f" EXCLUDE ({', '.join(r.hidden)})" if r.hidden else "")
        for r in scope.relations)


def _closing(tokens: list[Token], i: int) -> int:
    """The index of the bracket closing the one at ``tokens[i]`` (``len(tokens)``: none)."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens)


def _alias_at(tokens: list[Token], k: int) -> Token | None:
    """The alias written at ``tokens[k]`` (``AS x`` or ``x``), if any."""
    if k < len(tokens) and tokens[k].is_kw("AS"):
        k += 1
    if k < len(tokens) and _identifier(tokens[k]) is not None and not (
        tokens[k].kind == "word" and tokens[k].upper in _CLAUSE_END
    ):
        return tokens[k]
    return None


def _derived_table(tokens: list[Token], i: int, frame: _Frame) -> None:
    """Record the FROM item ``( ... ) [AS] alias`` opening at ``tokens[i]``."""
    assert frame.scope is not None
    alias = _alias_at(tokens, _closing(tokens, i) + 1)
    name = "" if alias is None else alias.identifier or ""
    frame.scope.relations.append(_Relation(name, name, None if alias is None else alias.text))


def _relation(tokens: list[Token], i: int, frame: _Frame, ctes: set[str], is_lance: IsLance,
              resolve: Resolve, system: bool, edits: list[tuple[int, int, str]],
              consumed: set[int], tables: list[str], system_columns: tuple[str, ...]
              ) -> int:
    """Handle a relation reference starting at ``tokens[i]``; return the next index."""
    frame.expect_relation = False
    assert frame.scope is not None
    parts = [tokens[i].identifier or ""]
    j = i + 1
    while j + 1 < len(tokens) and tokens[j].is_op(".") and tokens[j + 1].identifier:
        parts.append(tokens[j + 1].identifier or "")
        j += 2
    if j < len(tokens) and tokens[j].is_op("("):
        # a table function such as table_versions('t'); nearest()'s rows are a table's
        alias = _alias_at(tokens, _closing(tokens, j) + 1)
        function = parts[-1].lower()
        hidden = system_columns if system and function in LANCE_ROW_FUNCTIONS else ()
        frame.scope.relations.append(_Relation(
            parts[-1], "" if alias is None else alias.identifier or "",
            None if alias is None else alias.text, hidden, OWN_SYSTEM_NAMES.get(function, ())))
        return j
    name_end = j
    spec, j = time_travel_clause(tokens, j)
    clause_tokens = range(name_end, j)
    name = parts[-1]
    qualified_ok = len(parts) == 1 or [p.lower() for p in parts[:-1]] in (
        ["default"], ["lance", "default"]
    )
    lance = qualified_ok and name.lower() not in ctes and is_lance(name)
    if not lance and spec is None and qualified_ok and "@" in name.strip("@"):
        # "t@3", "t@tag", "t@2026-11-01T10:00:00": time travel written in the name
        table, _, at = name.rpartition("@")
        if table.lower() not in ctes and is_lance(table):
            name, spec, lance = table, at_spec(at), True
    if spec is not None and not lance:
        raise InvalidInputError(
            f"time travel ({spec.describe()}) applies only to Lance tables; "
            f"{'.'.join(parts)!r} is not one"
        )
    alias = _alias_at(tokens, j)
    if not lance:
        named = alias or tokens[j - 1]  # (a plain table's last name part)
        frame.scope.relations.append(_Relation(name, named.identifier or "", named.text))
        return j
    consumed.update(clause_tokens)
    replacement, hidden = resolve(name, spec, system)
    end = tokens[j - 1].end
    qualifier = quote_identifier(name) if alias is None else alias.text
    if alias is None:
        replacement += f" AS {qualifier}"
    edits.append((tokens[i].start, end, replacement))
    frame.scope.relations.append(_Relation(name, alias.identifier or "" if alias else name,
                                           qualifier, hidden if system else ()))
    tables.append(name)
    return j


def _literal_item(item: list[Token]) -> bool:
    if len(item) == 2 and item[0].is_op("-", "+"):
        item = item[1:]
    return len(item) == 1 and (item[0].kind in _LITERALS or item[0].is_kw(
        "NULL", "TRUE", "FALSE"))


def _nulls_last(sql: str, tokens: list[Token]) -> list[tuple[int, int, str]]:
    """Edits keeping NULLs of literal ``IN (...)`` lists out of DataFusion's way.

    DataFusion 55 rewrites ``x IN (NULL, 3)`` to ``NULL OR x = 3`` *after* deciding to push
    it into the scan, then fails to build that as a pyarrow expression (a pyarrow scalar
    has no ``|`` with an expression). With the NULLs at the end (``IN`` ignores order)
    it builds ``x = 3 OR NULL``. A list of NULLs only is left alone: DataFusion folds it
    to a constant, which the scan reads (see ``pyarrow_filter.as_expression``).
    """
    edits = []
    n = len(tokens)
    for i, tok in enumerate(tokens):
        if tok.kind != "word" or i + 1 >= n or not tok.is_kw("IN") or \
                not tokens[i + 1].is_op("("):
            continue
        items: list[list[Token]] = [[]]
        j = i + 2
        while j < n:
            t = tokens[j]
            if t.kind == "op":
                if t.text == ")" or t.text == "(":
                    break
                if t.text == ",":
                    items.append([])
                    j += 1
                    continue
            items[-1].append(t)
            j += 1
        if j >= n or not tokens[j].is_op(")") or not all(map(_literal_item, items)):
            continue
        nulls = [item for item in items if item[0].is_kw("NULL")]
        if not nulls:
            continue  # already in order
        ordered = [item for item in items if not item[0].is_kw("NULL")] + nulls
        if ordered != items:
            text = ", ".join(sql[item[0].start:item[-1].end] for item in ordered)
            edits.append((items[0][0].start, items[-1][-1].end, text))
    return edits


def _check_leftover_time_travel(tokens: list[Token], consumed: set[int]) -> None:
    for i, tok in enumerate(tokens):
        if tok.kind != "word" or i in consumed:
            continue
        spec, _ = (None, i)
        if tok.is_kw("VERSION", "TIMESTAMP", "SYSTEM_TIME", "SYSTEM_VERSION", "AT", "FOR"):
            try:
                spec, _ = time_travel_clause(tokens, i)
            except InvalidInputError:
                spec = VersionSpec("version", 0)
        if spec is not None:
            raise InvalidInputError(
                f"time-travel clause at position {tok.start} is not directly after a Lance "
                "table name, so it cannot be honoured (it would otherwise be silently ignored)"
            )
