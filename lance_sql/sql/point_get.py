"""Point gets: primary-key lookups on an LSM table answered without DataFusion planning.

``SELECT <* | col, ...> FROM t WHERE pk = k`` (or ``pk IN (k, ...)``, or one ``=`` per
column of a composite key, ANDed, parentheses allowed) on a MemWAL table is a lookup of
known keys. DataFusion would parse it, optimize it, plan it and run it only to hand the
keys to the LSM view's lookup plan; here the query is recognised from its tokens and the
same lookup plan (:meth:`lance_sql.memwal.read.planner.LsmView.lookup_plan`) runs at once,
on the view the catalog gives DataFusion for that query (same version, same consistency).

Only a narrow, fully understood shape is taken (the way distributed databases answer
primary-key reads with a "point get" plan that skips the optimizer). Anything else — an
alias, a join, ``LIMIT``, ``ORDER BY``, an expression, another predicate, time travel, a
system column, a literal whose value or type could be read two ways (NULL, a float, a
sign, an out-of-range integer), a plain table, an unknown table or column — returns None
and the query takes DataFusion's path unchanged (which raises its usual errors).

Identifiers resolve as DataFusion resolves them: unquoted ones folded to lower case,
double-quoted ones kept; table names as the front door's rewrite finds them. The answer
carries the schema DataFusion's result would: the table's fields (names, types,
nullability, field metadata) as the SQL provider declares them (without the table's
schema metadata, which no SQL result carries).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME
from lance_sql.memwal.read.nodes import conform
from lance_sql.memwal.read.planner import LsmView
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.sql.catalog import LanceSchemaProvider, TableDirectory, TableName, VersionResolver
from lance_sql.sql.lsm_provider import LSM_ONLY, MAX_LOOKUP_KEYS, LsmTableDataset
from lance_sql.sql.rewrite import VersionSpec
from lance_sql.sql.tokens import Token, iter_tokens, string_value
from lance_sql.table import SYSTEM_COLUMNS

# Words that are never taken as an unquoted column or table name here (DataFusion reads
# them as keywords or may: such a query falls through). Every keyword of DataFusion's SQL
# parser was tried as a column name in each place this shape has one, and as a table name,
# against the same name quoted: these are the ones DataFusion 55 reads otherwise
# (``current_date`` is a function call, ``SELECT id, values`` a parse error...).
_KEYWORDS = frozenset({
    "ALL", "ANALYZE", "AND", "ANY", "AS", "ASC", "AT", "BETWEEN", "BY", "CASE", "CAST",
    "CLUSTER", "CROSS", "CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "DESC",
    "DISTINCT", "DISTRIBUTE", "ELSE", "END", "EXCEPT", "EXCLUDE", "EXISTS", "EXPLAIN",
    "FALSE", "FETCH", "FOR", "FROM", "FULL", "GROUP", "HAVING", "ILIKE", "IN", "INNER",
    "INTERSECT", "INTERVAL", "INTO", "IS", "JOIN", "LATERAL", "LEFT", "LIKE", "LIMIT", "MINUS",
    "NATURAL", "NOT", "NULL", "OFFSET", "ON", "OR", "ORDER", "OUTER", "QUALIFY", "RETURNING",
    "RIGHT", "SELECT", "SIMILAR", "SOME", "SORT", "STRUCT", "SYSTEM_TIME", "SYSTEM_VERSION",
    "TABLE", "THEN", "TIMESTAMP", "TOP", "TRIM", "TRUE", "UNION", "UNNEST", "USING", "VALUES",
    "VERSION", "VIEW", "WHEN", "WHERE", "WINDOW", "WITH",
})
_HIDDEN = frozenset(c.lower() for c in (*SYSTEM_COLUMNS, *LSM_ONLY))
_EXPLAINED = re.compile(r"\s*EXPLAIN\s+(SELECT\b.*)", re.IGNORECASE | re.DOTALL)
# Characters Python's ``\s`` takes for whitespace but DataFusion does not.
_NOT_WHITESPACE = ("\x1c", "\x1d", "\x1e", "\x1f")
_MAX_NESTING = 16  # parentheses around the conditions
_QUERY_ID = "point-get"  # the catalog reads a pinned name with a query id as the latest

Literal = int | str


@dataclass(frozen=True)
class PointQuery:
    """A query of the point-get shape, as written (names resolved as DataFusion would)."""

    table: str
    columns: tuple[str, ...] | None  # None: ``*``
    conditions: tuple[tuple[str, tuple[Literal, ...], bool], ...]  # (column, values, IN)


@dataclass(frozen=True)
class PointAnswer:
    """A point get's rows and the schema the query's frame declares."""

    rows: pa.Table     # what DataFusion's ``to_arrow_table`` would return
    schema: pa.Schema  # the frame's logical schema (DataFusion's ``df.schema()``)


class _NotAPointGet(Exception):
    """The query leaves the point-get shape (internal: the parser's way out)."""


class _Tokens:
    """A token stream with one token of lookahead, read lazily: a query that leaves the
    shape early is not tokenized to its end."""

    def __init__(self, sql: str) -> None:
        self._it: Iterator[Token] = iter_tokens(sql, literal_runs=True)
        self.peek: Token | None = next(self._it, None)

    def take(self) -> Token:
        tok = self.peek
        if tok is None:
            raise _NotAPointGet
        self.peek = next(self._it, None)
        return tok

    def keyword(self, word: str) -> None:
        if not self.take().is_kw(word):
            raise _NotAPointGet

    def op(self, text: str) -> None:
        if not self.take().is_op(text):
            raise _NotAPointGet

    def at_kw(self, word: str) -> bool:
        return self.peek is not None and self.peek.is_kw(word)

    def at_op(self, text: str) -> bool:
        return self.peek is not None and self.peek.is_op(text)


def _identifier(tok: Token) -> str:
    """The name ``tok`` stands for as DataFusion resolves it (unquoted: lower case)."""
    if tok.kind == "word" and tok.upper not in _KEYWORDS:
        return tok.text.lower()
    if tok.kind == "quoted" and tok.text[0] == '"':
        name = tok.identifier
        if name:
            return name
    raise _NotAPointGet


def _literals(tokens: _Tokens) -> list[Literal]:
    """One literal (or a run of unsigned integers, a ``numbers`` token)."""
    tok = tokens.take()
    if tok.kind == "numbers":  # "1, 2, 3, ..." (see tokens.LITERAL_RUN)
        text = tok.text
        if "." in text or not text.isascii():
            raise _NotAPointGet
        return [int(part) for part in text.split(",")]
    negative = tok.is_op("-")
    if negative:
        tok = tokens.take()
    if tok.kind == "number" and tok.text.isascii() and tok.text.isdigit():
        value = int(tok.text)
        if negative and value == 0:
            raise _NotAPointGet  # -0: read alike as an integer, but nothing to gain
        return [-value if negative else value]
    if not negative and tok.kind == "string" and tok.text[0] == "'":
        return [string_value(tok)]  # (E'...' escapes are DataFusion's to read)
    raise _NotAPointGet


def _condition(tokens: _Tokens, out: list[tuple[str, tuple[Literal, ...], bool]],
               depth: int) -> None:
    """``( conjunction )``, ``col = literal`` or ``col IN (literal, ...)``."""
    if tokens.at_op("("):
        if depth >= _MAX_NESTING:
            raise _NotAPointGet  # (the front door refuses what is too deep to plan)
        tokens.take()
        _conjunction(tokens, out, depth + 1)
        tokens.op(")")
        return
    column = _identifier(tokens.take())
    if tokens.at_op("="):
        tokens.take()
        out.append((column, tuple(_literals(tokens)), False))
        return
    tokens.keyword("IN")
    tokens.op("(")
    values = _literals(tokens)
    while tokens.at_op(","):
        tokens.take()
        values += _literals(tokens)
    tokens.op(")")
    out.append((column, tuple(values), True))


def _conjunction(tokens: _Tokens, out: list[tuple[str, tuple[Literal, ...], bool]],
                 depth: int = 0) -> None:
    _condition(tokens, out, depth)
    while tokens.at_kw("AND"):
        tokens.take()
        _condition(tokens, out, depth)


def _read_otherwise(sql: str) -> bool:
    """Whether DataFusion's tokenizer may read ``sql`` otherwise than ours: a second
    ``/*`` (its block comments nest: ``/* /* */ a -- */ b`` hides ``a``, not ``b``) or a
    control character only Python takes for whitespace. (Substring searches: a regular
    expression cost ~0.2 ms over a 1000-key query.)"""
    if "/" in sql:
        first = sql.find("/*")
        if first >= 0 and sql.find("/*", first + 2) >= 0:
            return True
    return any(c in sql for c in _NOT_WHITESPACE)


def parse(sql: str) -> PointQuery | None:
    """The point-get query ``sql`` is (None: any other statement, or not SQL at all)."""
    if _read_otherwise(sql):
        return None
    try:
        tokens = _Tokens(sql)
        tokens.keyword("SELECT")
        columns: list[str] | None = None
        if tokens.at_op("*"):
            tokens.take()
        else:
            columns = [_identifier(tokens.take())]
            while tokens.at_op(","):
                tokens.take()
                columns.append(_identifier(tokens.take()))
        tokens.keyword("FROM")
        table = tokens.take()
        if table.kind == "word" and table.upper in _KEYWORDS:
            raise _NotAPointGet
        name = table.identifier if table.kind == "word" or table.text[0] == '"' else None
        if not name:
            raise _NotAPointGet
        tokens.keyword("WHERE")
        conditions: list[tuple[str, tuple[Literal, ...], bool]] = []
        _conjunction(tokens, conditions)
        while tokens.peek is not None:  # trailing semicolons only
            tokens.op(";")
    except (_NotAPointGet, LanceError, ValueError):
        return None  # (LanceError: not SQL, ValueError: an integer of 4300+ digits;
        # DataFusion will say what it makes of them)
    return PointQuery(name, None if columns is None else tuple(columns), tuple(conditions))


class PointGets:
    """A session's point-get path: the switch (``enabled``, for tests and benchmarks: off
    sends every query through DataFusion) and how many queries it answered."""

    def __init__(self) -> None:
        self.enabled = True
        self._lock = threading.Lock()
        self._count = 0

    @property
    def answered(self) -> int:
        """Queries answered as point gets so far."""
        with self._lock:
            return self._count

    def answer(self, sql: str, directory: TableDirectory, resolver: VersionResolver,
               catalog: LanceSchemaProvider, probed: dict[str, int] | None = None
               ) -> PointAnswer | None:
        """The answer of ``sql`` if it is a point get on an LSM table (None: it is not,
        or in doubt; DataFusion plans it). ``probed`` gets the latest version of the
        table it looked up (the caller's plan may pin it rather than probe again)."""
        if not self.enabled:
            return None
        query = parse(sql)
        bound = _bind(query, directory, resolver, catalog, probed) \
            if query is not None else None
        if bound is None:
            return None
        found = _run(bound)
        with self._lock:
            self._count += 1
        return found

    def explain(self, sql: str, directory: TableDirectory, resolver: VersionResolver,
                catalog: LanceSchemaProvider) -> str | None:
        """What ``EXPLAIN`` adds for a plain ``EXPLAIN <query>`` whose query is answered
        as a point get (None: it is not; nothing is looked up)."""
        found = _EXPLAINED.match(sql)
        if not self.enabled or found is None:
            return None
        query = parse(found.group(1))
        bound = _bind(query, directory, resolver, catalog) if query is not None else None
        if query is None or bound is None:
            return None
        keys = bound.keys
        return (f"PointGet: {query.table}, {keys.num_rows} "
                f"key{'s' if keys.num_rows != 1 else ''} on [{', '.join(keys.column_names)}], "
                f"projection=[{', '.join(bound.columns)}]: answered when sql() is called by "
                "the LSM view's point lookup of these keys, without DataFusion (the plans "
                "above are what DataFusion runs with point gets off)")


def _key_table(query: PointQuery, key_columns: list[str], schema: pa.Schema
               ) -> pa.Table | None:
    """The keys the conditions name, each once, in the key's types (None: not exactly
    the key's columns, or a literal the key's type does not hold as written)."""
    conditions = query.conditions
    if len(conditions) != len(key_columns) or \
            sorted(c[0] for c in conditions) != sorted(key_columns):
        return None  # another column, a key column twice or missing
    if len(key_columns) > 1 and any(is_in for _, _, is_in in conditions):
        return None  # composite keys: one '=' per column
    columns = {}
    for name, values, _ in conditions:
        key_type = schema.field(name).type
        if pa.types.is_integer(key_type):
            numbers = _integer_keys(values, key_type)
            if numbers is None:
                return None
            columns[name] = numbers
            continue
        if not (pa.types.is_string(key_type) or pa.types.is_large_string(key_type)):
            return None
        unique = list(dict.fromkeys(values))  # first occurrences, in order
        if len(unique) > MAX_LOOKUP_KEYS:
            return None  # the provider scans instead
        if not all(type(v) is str for v in unique):
            return None
        columns[name] = pa.array(unique, type=key_type)
    return pa.table({k: columns[k] for k in key_columns})


def _integer_keys(values: tuple[Literal, ...], key_type: pa.DataType) -> pa.Array | None:
    """Integer literals as the key column of an integer key: each once, first occurrences
    in order, in numpy (an ``IN`` of 1000 keys: no Python set and list of them); None
    when one is no integer or out of the range ``key_type`` holds as DataFusion reads
    the literal, or when there are too many."""
    if not all(type(v) is int for v in values):
        return None
    try:
        numbers = np.array(values, np.int64)
    except OverflowError:
        return None
    low, high = _integer_range(key_type)
    if not numbers.size or int(numbers.min()) < low or int(numbers.max()) > high:
        return None
    _, first = np.unique(numbers, return_index=True)
    if first.size > MAX_LOOKUP_KEYS:
        return None  # the provider scans instead
    unique = array_from_numpy(numbers[np.sort(first)], pa.int64())
    return unique if key_type.equals(pa.int64()) else unique.cast(key_type)


def _integer_range(key_type: pa.DataType) -> tuple[int, int]:
    """The integers ``key_type`` holds that DataFusion reads as an Int64 literal."""
    bits = key_type.bit_width
    if pa.types.is_signed_integer(key_type):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, min((1 << bits) - 1, (1 << 63) - 1)


@dataclass(frozen=True)
class _Bound:
    """A point get resolved against its table: the view to ask, the keys, the columns."""

    view: LsmView
    keys: pa.Table
    columns: list[str]
    table_schema: pa.Schema  # the provider's (no system columns)


def _bind(query: PointQuery, directory: TableDirectory, resolver: VersionResolver,
          catalog: LanceSchemaProvider, probed: dict[str, int] | None = None
          ) -> _Bound | None:
    """``query`` against the latest version of its table, read as DataFusion's provider
    would read it (None: not an LSM table, or not a point get of it); the version
    probed goes into ``probed``."""
    if catalog.consistency == "base":
        return None  # every table read as itself: no LSM view
    try:
        directory.uri(query.table)
    except LanceError:
        return None  # not a Lance table here: DataFusion's to resolve (or refuse)
    named = [c for c, _, _ in query.conditions] + list(query.columns or ())
    if any(n.lower() in _HIDDEN for n in named):
        return None  # system columns: the provider exposes them
    version = resolver.version_of(query.table, None)
    if probed is not None:
        probed[query.table] = version
    manifest = resolver.resolved_manifest(query.table, version)
    sections = manifest.index_section
    if sections is None or MEM_WAL_INDEX_NAME.encode() not in sections:
        return None  # no MemWAL: a plain table
    if sorted(c for c, _, _ in query.conditions) != sorted(manifest.schema.primary_key):
        return None  # not exactly the key's columns (before any view is opened)
    pinned = TableName(query.table, VersionSpec("version", version), query_id=_QUERY_ID)
    provider = catalog.dataset(pinned)
    if not isinstance(provider, LsmTableDataset):
        return None  # consistency="base" reads the base table alone
    table_schema = provider.schema
    view = provider.view
    names = table_schema.names
    columns = list(query.columns) if query.columns is not None else names
    if len(set(columns)) != len(columns) or not set(columns).issubset(names) or \
            not view.key_columns:
        return None
    keys = _key_table(query, view.key_columns, table_schema)
    return None if keys is None else _Bound(view, keys, columns, table_schema)


def _run(bound: _Bound) -> PointAnswer:
    """The rows of the bound lookup, shaped as DataFusion's result."""
    view, keys, columns, table_schema = bound.view, bound.keys, bound.columns, \
        bound.table_schema
    found = view.lookup_rows(keys, columns)  # (as ``mw.get`` answers)
    fields = [table_schema.field(c) for c in columns]
    schema = pa.schema(fields, metadata=table_schema.metadata)  # the provider's: none
    if not found.num_rows:
        return PointAnswer(schema.empty_table(), schema)
    if not all(a.type.equals(f.type) for a, f in zip(found.columns, fields, strict=True)):
        found = pa.Table.from_batches([conform(found, pa.schema(fields))])  # types cast
    return PointAnswer(pa.Table.from_arrays(found.columns, schema=schema), schema)
