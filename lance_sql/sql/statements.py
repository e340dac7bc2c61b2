"""Which statements the session runs itself, which it refuses, and what they say.

DataFusion would run DDL and DML in memory (``CREATE TABLE`` makes a memory table
that vanishes with the session) or against arbitrary files (``CREATE EXTERNAL
TABLE``, ``COPY ... TO``). The session therefore classifies every statement before
DataFusion sees it:

* writes to Lance tables, parsed here into frozen values and run as Lance commits
  (see :mod:`lance_sql.sql.writes`)::

      CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t [TBLPROPERTIES (...)] AS <query>
      CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t (col TYPE [NOT NULL] [PRIMARY KEY], ...,
                                                   [PRIMARY KEY (col, ...)]) [TBLPROPERTIES (...)]
      INSERT INTO|OVERWRITE [TABLE] t [(col, ...)] <query or VALUES>
      DROP TABLE [IF EXISTS] t            TRUNCATE [TABLE] t
      ALTER TABLE t ADD [COLUMN|COLUMNS] col TYPE | (col TYPE, ...)
      ALTER TABLE t DROP [COLUMN|COLUMNS] [IF EXISTS] col [, col ...]
      ALTER TABLE t RENAME COLUMN a TO b
      ALTER TABLE t ALTER [COLUMN] c TYPE t | SET DATA TYPE t | SET NOT NULL | DROP NOT NULL
      ALTER TABLE t CREATE TAG name [AS OF VERSION n]     (Iceberg's syntax)
      ALTER TABLE t DROP TAG [IF EXISTS] name
      RESTORE [TABLE] t TO VERSION [AS OF] n|'tag'          (Delta's syntax)
      MERGE INTO ... (see :mod:`lance_sql.sql.merge`), UPDATE / DELETE (:mod:`dml`)

* statements that touch files outside the root (``CREATE EXTERNAL TABLE``, ``COPY``),
  run by DataFusion only when the session allows external files;
* everything DataFusion would keep in memory only (views, memory tables, ``SET``...),
  refused with :class:`StatementRefusedError`.

Anything else is a query and goes to DataFusion, which is told (through its SQL
options) to refuse DDL, DML and other statements anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from lance_sql.errors import InvalidInputError, StatementRefusedError
from lance_sql.sql.rewrite import time_travel_clause
from lance_sql.sql.tokens import Token, string_value, tokenize


@dataclass(frozen=True)
class ColumnDef:
    """A column of ``CREATE TABLE`` or ``ADD COLUMNS``."""
    name: str
    type_sql: str          # the SQL type as written, e.g. "DECIMAL(10, 2)"
    not_null: bool = False
    primary_key: bool = False


@dataclass(frozen=True)
class CreateTable:
    """``CREATE TABLE``, from columns or ``AS`` a query."""
    table: str
    columns: tuple[ColumnDef, ...] = ()   # empty with a query
    query: str | None = None              # CREATE TABLE ... AS <query>
    if_not_exists: bool = False
    replace: bool = False
    stable_row_ids: bool = False          # TBLPROPERTIES ('enable_stable_row_ids' = 'true')


@dataclass(frozen=True)
class Insert:
    """``INSERT INTO`` / ``INSERT OVERWRITE`` a query's rows."""
    table: str
    columns: tuple[str, ...] | None
    query: str                            # a SELECT, VALUES (...) or any query
    overwrite: bool = False


@dataclass(frozen=True)
class DropTable:
    """``DROP TABLE``."""
    table: str
    if_exists: bool = False


@dataclass(frozen=True)
class Truncate:
    """``TRUNCATE TABLE``: a new version without rows."""
    table: str


@dataclass(frozen=True)
class AddColumns:
    """``ALTER TABLE ... ADD COLUMN(S)``, filled with nulls."""
    table: str
    columns: tuple[ColumnDef, ...]


@dataclass(frozen=True)
class DropColumns:
    """``ALTER TABLE ... DROP COLUMN(S)``."""
    table: str
    columns: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    """``ALTER TABLE ... RENAME COLUMN``."""
    table: str
    old: str
    new: str


@dataclass(frozen=True)
class AlterColumn:
    """``ALTER TABLE ... ALTER COLUMN c TYPE t`` / ``SET NOT NULL`` / ``DROP NOT NULL``."""
    table: str
    column: str
    type_sql: str | None = None    # the new SQL type as written
    nullable: bool | None = None


@dataclass(frozen=True)
class CreateTag:
    """``CREATE TAG``: name a version (the latest by default)."""
    table: str
    tag: str
    version: int | None = None


@dataclass(frozen=True)
class DropTag:
    """``DROP TAG``."""
    table: str
    tag: str
    if_exists: bool = False


@dataclass(frozen=True)
class Restore:
    """``RESTORE TABLE ... TO`` a version or tag."""
    table: str
    version: int | str


@dataclass(frozen=True)
class External:
    """A statement DataFusion runs against files outside the root."""

    kind: str   # "read" (CREATE EXTERNAL TABLE) or "write" (COPY)
    what: str


Statement = (CreateTable | Insert | DropTable | Truncate | AddColumns | DropColumns
             | RenameColumn | AlterColumn | CreateTag | DropTag | Restore)


def refuse_past_version(table: str, tokens: list[Token], i: int, verb: str) -> None:
    """Refuse a write naming a past version of its target (``DELETE FROM t VERSION AS OF
    3``, ``UPDATE "t@3"``...): only the latest version takes writes, and nothing is
    committed. The message says what to do instead."""
    spec, _ = time_travel_clause(tokens, i) if i < len(tokens) else (None, i)
    base, at, suffix = table.rpartition("@")
    if spec is None and not (at and base and suffix):
        return
    what = spec.describe() if spec is not None else (
        f"version {suffix}" if suffix.isdigit() else repr(suffix))
    name = base if spec is None else table
    raise StatementRefusedError(
        f"{verb}: {name} at {what} is a past version, which cannot be written (writes go "
        f"to the latest version). To write from it, restore it first (RESTORE TABLE "
        f"{name} TO VERSION <n>, or ds.restore(n)) or copy it (CREATE TABLE ... AS SELECT "
        f"* FROM {name} VERSION AS OF <n>); to read it, SELECT ... VERSION AS OF <n>")


class Cursor:
    """Walks the tokens of one statement, with errors that quote the statement."""

    def __init__(self, sql: str, tokens: list[Token], what: str) -> None:
        self.sql, self.tokens, self.what, self.i = sql, tokens, what, 0

    def peek(self, offset: int = 0) -> Token | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def kw(self, *words: str) -> bool:
        """Consume one of ``words`` if it comes next."""
        tok = self.peek()
        if tok is not None and tok.is_kw(*words):
            self.i += 1
            return True
        return False

    def kws(self, *words: str) -> bool:
        """Consume the keyword sequence ``words`` if it comes next, else nothing."""
        for offset, word in enumerate(words):
            tok = self.peek(offset)
            if tok is None or not tok.is_kw(word):
                return False
        self.i += len(words)
        return True

    def op(self, op: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.is_op(op):
            self.i += 1
            return True
        return False

    def expect_kw(self, *words: str) -> None:
        if not self.kw(*words):
            self.fail(f"expected {' or '.join(words)}")

    def expect_op(self, op: str) -> None:
        if not self.op(op):
            self.fail(f"expected {op!r}")

    def identifier(self, what: str = "a name") -> str:
        tok = self.peek()
        if tok is None or tok.identifier is None:
            self.fail(f"expected {what}")
        self.i += 1
        assert tok is not None and tok.identifier is not None
        return tok.identifier

    def table_name(self) -> str:
        """A table name, optionally qualified as ``default.t`` or ``lance.default.t``."""
        parts = [self.identifier("a table name")]
        while self.op("."):
            parts.append(self.identifier("a table name"))
        if len(parts) > 1 and [p.lower() for p in parts[:-1]] not in (["default"],
                                                                      ["lance", "default"]):
            raise InvalidInputError(f"{self.what}: unknown schema in {'.'.join(parts)!r}")
        return parts[-1]

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def rest(self) -> str:
        """The text from the current token to the end of the statement."""
        if self.done():
            self.fail("expected more")
        return self.sql[self.tokens[self.i].start:self.tokens[-1].end].strip()

    def end(self) -> None:
        if not self.done():
            self.fail("unexpected text")

    def parenthesised(self) -> list[tuple[int, int]]:
        """Consume ``( ... )``; the (start, end) text spans of its top-level comma parts."""
        self.expect_op("(")
        parts, depth = [], 0
        start = self.tokens[self.i].start if not self.done() else 0
        while not self.done():
            tok = self.tokens[self.i]
            if depth == 0 and tok.is_op(")"):
                parts.append((start, tok.start))
                self.i += 1
                return [(s, e) for s, e in parts if self.sql[s:e].strip()]
            depth += tok.nesting
            if depth == 0 and tok.is_op(","):
                parts.append((start, tok.start))
                start = tok.end
            self.i += 1
        self.fail("unclosed '('")
        raise AssertionError  # unreachable

    def fail(self, message: str) -> None:
        tok = self.peek()
        where = f" at {self.sql[tok.start:tok.start + 30]!r}" if tok else " at the end"
        raise InvalidInputError(f"{self.what}: {message}{where}")


def statement_tokens(sql: str) -> list[Token]:
    """``sql``'s tokens without trailing semicolons; several statements are an error."""
    tokens = tokenize(sql)
    while tokens and tokens[-1].is_op(";"):
        tokens.pop()
    if any(t.is_op(";") for t in tokens):
        raise InvalidInputError("one statement at a time, please (found ';' inside the SQL)")
    return tokens


def parse_statement(sql: str) -> Statement | External | None:
    """The statement ``sql`` holds if the session runs it itself (None for queries).

    Raises :class:`StatementRefusedError` for statements nobody may run here.
    """
    tokens = statement_tokens(sql)
    if not tokens:
        return None
    first = tokens[0].upper if tokens[0].kind == "word" else ""
    cur = Cursor(sql, tokens, first)
    cur.i = 1
    if first == "CREATE":
        return _create(cur)
    if first == "INSERT":
        return _insert(cur)
    if first == "DROP":
        return _drop(cur)
    if first == "ALTER":
        return _alter(cur)
    if first == "TRUNCATE":
        cur.kw("TABLE")
        table = cur.table_name()
        refuse_past_version(table, cur.tokens, cur.i, "TRUNCATE")
        cur.end()
        return Truncate(table)
    if first == "RESTORE":
        return _restore(cur)
    if first == "COPY":
        return External("write", "COPY")
    if first in _REFUSED:
        raise StatementRefusedError(f"{first} statements are not supported: {_REFUSED[first]}")
    return None


_REFUSED = {
    "SET": "the session's settings are fixed",
    "RESET": "the session's settings are fixed",
    "PREPARE": "prepared statements are not supported",
    "EXECUTE": "prepared statements are not supported",
    "DEALLOCATE": "prepared statements are not supported",
    "BEGIN": "each statement is its own transaction (one commit)",
    "START": "each statement is its own transaction (one commit)",
    "COMMIT": "each statement is its own transaction (one commit)",
    "ROLLBACK": "each statement is its own transaction (one commit)",
    "USE": "the session has one schema",
    "GRANT": "access is the file system's",
    "REVOKE": "access is the file system's",
}


def _column_def(cur: Cursor, sql: str, span: tuple[int, int]) -> ColumnDef:
    text = sql[span[0]:span[1]]
    tokens = tokenize(text)
    if not tokens or tokens[0].identifier is None:
        raise InvalidInputError(f"{cur.what}: expected a column definition, got {text.strip()!r}")
    name = tokens[0].identifier
    assert name is not None
    end, not_null, primary = len(tokens), False, False
    while True:  # constraints come after the type
        if end - 2 >= 1 and tokens[end - 2].is_kw("NOT") and tokens[end - 1].is_kw("NULL"):
            not_null, end = True, end - 2
        elif end - 2 >= 1 and tokens[end - 2].is_kw("PRIMARY") and tokens[end - 1].is_kw("KEY"):
            primary, end = True, end - 2
        elif end - 1 >= 2 and tokens[end - 1].is_kw("NULL") and not tokens[end - 2].is_kw("NOT"):
            end -= 1
        else:
            break
    if end < 2:
        raise InvalidInputError(f"{cur.what}: column {name!r} needs a type")
    type_sql = text[tokens[1].start:tokens[end - 1].end].strip()
    return ColumnDef(name, type_sql, not_null or primary, primary)


def _within_angle_brackets(sql: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` (split at commas) joined again where a comma was inside a type's angle
    brackets: ``STRUCT<a INT, b VARCHAR>`` is one column's type."""
    joined: list[tuple[int, int]] = []
    depth = 0
    for start, end in spans:
        if depth > 0:
            start = joined.pop()[0]
        depth = 0
        for tok in tokenize(sql[start:end]):
            depth += 1 if tok.is_op("<") else -1 if tok.is_op(">") else 0
        joined.append((start, end))
    return joined


def _column_defs(cur: Cursor) -> tuple[ColumnDef, ...]:
    columns: list[ColumnDef] = []
    keys: list[str] = []
    for span in _within_angle_brackets(cur.sql, cur.parenthesised()):
        tokens = tokenize(cur.sql[span[0]:span[1]])
        if len(tokens) >= 2 and tokens[0].is_kw("PRIMARY") and tokens[1].is_kw("KEY"):
            sub = Cursor(cur.sql[span[0]:span[1]], tokens, cur.what)
            sub.i = 2
            keys.extend(_plain_identifier(sub, sub.sql[s:e]) for s, e in sub.parenthesised())
            sub.end()
        elif tokens and tokens[0].is_kw("CONSTRAINT", "UNIQUE", "FOREIGN", "CHECK"):
            raise StatementRefusedError(
                f"{cur.what}: table constraints other than PRIMARY KEY are not supported")
        else:
            columns.append(_column_def(cur, cur.sql, span))
    if not columns:
        raise InvalidInputError(f"{cur.what}: a table needs at least one column")
    names = [c.name for c in columns]
    for key in keys:
        if key not in names:
            raise InvalidInputError(f"{cur.what}: primary key column {key!r} is not defined")
    if keys and any(c.primary_key for c in columns):
        raise InvalidInputError(f"{cur.what}: the primary key is declared twice")
    if keys:
        columns = [ColumnDef(c.name, c.type_sql, c.not_null or c.name in keys, c.name in keys)
                   for c in columns]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"{cur.what}: a column is defined twice")
    return tuple(columns)


def _create(cur: Cursor) -> CreateTable | External:
    replace = cur.kws("OR", "REPLACE")
    if cur.kw("EXTERNAL") or cur.kws("UNBOUNDED", "EXTERNAL"):
        return External("read", "CREATE EXTERNAL TABLE")
    if cur.kw("TEMPORARY", "TEMP"):
        raise StatementRefusedError("CREATE TEMPORARY ...: temporary objects would live in "
                                    "memory only; write a Lance table or use a CTE")
    if cur.kw("VIEW") or cur.kws("MATERIALIZED", "VIEW"):
        raise StatementRefusedError("CREATE VIEW: views would live in memory only and vanish "
                                    "with the session; use a CTE (WITH ...) or CREATE TABLE ... "
                                    "AS SELECT, which writes a Lance table")
    if not cur.kw("TABLE"):
        tok = cur.peek()
        what = tok.text.upper() if tok is not None else ""
        raise StatementRefusedError(f"CREATE {what}: only CREATE TABLE (a Lance table under "
                                    "the session's root) is supported")
    if_not_exists = cur.kws("IF", "NOT", "EXISTS")
    if replace and if_not_exists:
        raise InvalidInputError("CREATE OR REPLACE TABLE cannot also say IF NOT EXISTS")
    table = cur.table_name()
    stable = _properties(cur)
    if cur.kw("AS"):
        return CreateTable(table, query=cur.rest(), if_not_exists=if_not_exists,
                           replace=replace, stable_row_ids=stable)
    tok = cur.peek()
    if tok is None or not tok.is_op("("):
        cur.fail("expected AS <query> or (column TYPE, ...)")
    columns = _column_defs(cur)
    stable = _properties(cur) or stable
    if cur.kw("AS"):
        raise StatementRefusedError("CREATE TABLE t (columns) AS <query>: give either the "
                                    "columns or the query (cast in the query)")
    cur.end()
    return CreateTable(table, columns, if_not_exists=if_not_exists, replace=replace,
                       stable_row_ids=stable)


TABLE_PROPERTIES = ("enable_stable_row_ids",)


def _properties(cur: Cursor) -> bool:
    """``TBLPROPERTIES ('enable_stable_row_ids' = 'true')``: whether to give rows stable ids
    (the only property a new table takes)."""
    if not cur.kw("TBLPROPERTIES"):
        return False
    stable = False
    for start, end in cur.parenthesised():
        tokens = tokenize(cur.sql[start:end])
        if len(tokens) != 3 or tokens[0].kind != "string" or not tokens[1].is_op("=") \
                or tokens[2].kind not in ("string", "word"):
            raise InvalidInputError(f"{cur.what}: expected 'key' = 'value' in TBLPROPERTIES, "
                                    f"got {cur.sql[start:end].strip()!r}")
        key = string_value(tokens[0])
        value = string_value(tokens[2]) if tokens[2].kind == "string" else tokens[2].text
        if key not in TABLE_PROPERTIES:
            raise InvalidInputError(f"{cur.what}: unknown table property {key!r}; known: "
                                    f"{', '.join(TABLE_PROPERTIES)}")
        if value.lower() not in ("true", "false"):
            raise InvalidInputError(f"{cur.what}: {key} must be 'true' or 'false'")
        stable = value.lower() == "true"
    return stable


def _insert(cur: Cursor) -> Insert:
    if cur.kw("OVERWRITE"):
        overwrite = True
    elif cur.kw("INTO"):
        overwrite = False
    else:
        cur.fail("expected INTO or OVERWRITE")
        raise AssertionError
    cur.kw("TABLE")
    table = cur.table_name()
    refuse_past_version(table, cur.tokens, cur.i, "INSERT")
    columns = None
    tok, after = cur.peek(), cur.peek(1)
    # "(a, b) SELECT" is a column list; "(SELECT ...)" is the query itself.
    if tok is not None and tok.is_op("(") and not (after is not None
                                                    and after.is_kw("SELECT", "WITH", "VALUES")):
        columns = tuple(_plain_identifier(cur, cur.sql[s:e]) for s, e in cur.parenthesised())
        if len(set(columns)) != len(columns):
            raise InvalidInputError(f"INSERT: a column is listed twice in {columns}")
    if cur.kws("DEFAULT", "VALUES"):
        raise StatementRefusedError("INSERT ... DEFAULT VALUES: columns have no defaults")
    return Insert(table, columns, cur.rest(), overwrite)


def _plain_identifier(cur: Cursor, text: str) -> str:
    tokens = tokenize(text)
    if len(tokens) != 1 or tokens[0].identifier is None:
        raise InvalidInputError(f"{cur.what}: expected a column name, got {text.strip()!r}")
    name = tokens[0].identifier
    assert name is not None
    return name


def _drop(cur: Cursor) -> DropTable | External:
    if not cur.kw("TABLE"):
        tok = cur.peek()
        what = tok.text.upper() if tok is not None else ""
        raise StatementRefusedError(f"DROP {what}: only DROP TABLE is supported")
    if_exists = cur.kws("IF", "EXISTS")
    table = cur.table_name()
    if cur.kw("CASCADE", "RESTRICT", "PURGE"):
        pass
    cur.end()
    return DropTable(table, if_exists)


def _names(cur: Cursor) -> tuple[str, ...]:
    tok = cur.peek()
    if tok is not None and tok.is_op("("):
        return tuple(_plain_identifier(cur, cur.sql[s:e]) for s, e in cur.parenthesised())
    names = [cur.identifier("a column name")]
    while cur.op(","):
        cur.kw("DROP")
        cur.kw("COLUMN")
        names.append(cur.identifier("a column name"))
    return tuple(names)


def _alter_column(cur: Cursor, table: str) -> AlterColumn:
    """``ALTER [COLUMN] c TYPE t | SET DATA TYPE t | SET NOT NULL | DROP NOT NULL``."""
    cur.kw("COLUMN")
    column = cur.identifier("a column name")
    if cur.kw("TYPE") or cur.kws("SET", "DATA", "TYPE"):
        return AlterColumn(table, column, type_sql=cur.rest())
    if cur.kws("SET", "NOT", "NULL"):
        cur.end()
        return AlterColumn(table, column, nullable=False)
    if cur.kws("DROP", "NOT", "NULL"):
        cur.end()
        return AlterColumn(table, column, nullable=True)
    cur.fail("expected TYPE <type>, SET DATA TYPE <type>, SET NOT NULL or DROP NOT NULL")
    raise AssertionError


def _alter(cur: Cursor) -> Statement:
    cur.expect_kw("TABLE")
    table = cur.table_name()
    if cur.kw("ADD"):
        if cur.kws("TAG"):
            cur.fail("use ALTER TABLE t CREATE TAG name")
        cur.kw("COLUMN", "COLUMNS")
        tok = cur.peek()
        if tok is not None and tok.is_op("("):
            columns = _column_defs(cur)
        else:
            start = cur.tokens[cur.i].start if not cur.done() else len(cur.sql)
            cur.i = len(cur.tokens)
            columns = (_column_def(cur, cur.sql, (start, len(cur.sql))),)
        if any(c.primary_key or c.not_null for c in columns):
            raise InvalidInputError("ALTER TABLE ADD COLUMN: a new column holds NULLs in "
                                    "existing rows, so it cannot be NOT NULL or a primary key")
        cur.end()
        return AddColumns(table, columns)
    if cur.kw("DROP"):
        if cur.kw("TAG"):
            if_exists = cur.kws("IF", "EXISTS")
            tag = _tag_name(cur)
            cur.end()
            return DropTag(table, tag, if_exists)
        cur.kw("COLUMN", "COLUMNS")
        if_exists = cur.kws("IF", "EXISTS")
        names = _names(cur)
        cur.end()
        return DropColumns(table, names, if_exists)
    if cur.kw("RENAME"):
        if cur.kw("TO"):
            raise StatementRefusedError("ALTER TABLE ... RENAME TO: renaming a table is not "
                                        "supported (its directory name is its name)")
        cur.expect_kw("COLUMN")
        old = cur.identifier("a column name")
        cur.expect_kw("TO")
        new = cur.identifier("the new column name")
        cur.end()
        return RenameColumn(table, old, new)
    if cur.kw("ALTER"):
        return _alter_column(cur, table)
    if cur.kws("CREATE", "TAG") or cur.kws("REPLACE", "TAG"):
        tag = _tag_name(cur)
        version = None
        if cur.kws("AS", "OF", "VERSION"):
            tok = cur.peek()
            if tok is None or tok.kind != "number" or not tok.text.isdigit():
                cur.fail("expected a version number")
            assert tok is not None
            version = int(tok.text)
            cur.i += 1
        cur.end()
        return CreateTag(table, tag, version)
    cur.fail("expected ADD, DROP, RENAME COLUMN, ALTER COLUMN, CREATE TAG or DROP TAG")
    raise AssertionError


def _tag_name(cur: Cursor) -> str:
    tok = cur.peek()
    if tok is not None and tok.kind == "string":
        cur.i += 1
        return string_value(tok)
    return cur.identifier("a tag name")


def _restore(cur: Cursor) -> Restore:
    cur.kw("TABLE")
    table = cur.table_name()
    cur.expect_kw("TO")
    cur.expect_kw("VERSION")
    cur.kws("AS", "OF")
    tok = cur.peek()
    if tok is not None and tok.kind == "number" and tok.text.isdigit():
        version: int | str = int(tok.text)
    elif tok is not None and tok.kind == "string":
        version = string_value(tok)
    else:
        cur.fail("expected a version number or a 'tag'")
        raise AssertionError
    cur.i += 1
    cur.end()
    return Restore(table, version)
