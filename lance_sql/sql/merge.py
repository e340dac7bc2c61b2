"""``MERGE INTO``, parsed into its WHEN clauses::

    MERGE INTO target [AS] t USING source_table | (query) [AS] s [(col, ...)]
      ON t.k = s.k [AND t.k2 = s.k2]
      WHEN MATCHED [AND condition] THEN UPDATE SET * | UPDATE SET col = expr, ... | DELETE
                                        | DO NOTHING
      WHEN NOT MATCHED [BY TARGET] [AND condition] THEN INSERT * | INSERT (col, ...)
                                        VALUES (expr, ...) | DO NOTHING
      WHEN NOT MATCHED BY SOURCE [AND condition] THEN UPDATE SET ... | DELETE | DO NOTHING

Clauses are taken in order: the first whose kind and condition hold acts on a row, a
row no clause takes is left alone (SQL's rule, as in PostgreSQL, Spark/Delta and
DuckDB). Conditions and values are SQL (DataFusion's); a MATCHED clause reads the
target and the source, a NOT MATCHED one the source only, a BY SOURCE one the target
only.

The forms pylance's ``merge_insert`` expresses (at most one clause of each kind: an
UPDATE or an unconditional DELETE, an unconditional INSERT setting the same columns
from the source alone, a DELETE by source, conditions in the filter language) run as
one ``merge_insert`` (:meth:`Merge.merge_insert_form`); the others are evaluated by
DataFusion (:mod:`lance_sql.sql.merge_rows`). Either way the statement is one commit.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from lance_sql.errors import InvalidInputError, StatementRefusedError
from lance_sql.expr import columns, parse_predicate
from lance_sql.sql.dml import needs_engine
from lance_sql.sql.statements import Cursor, refuse_past_version, statement_tokens
from lance_sql.sql.tokens import Token, quote_identifier, requalify, tokenize

Assignments = tuple[tuple[str, str], ...]   # (target column, SQL expression)

MATCHED = "matched"
NOT_MATCHED = "not matched"             # by target: a source row no target row matches
NOT_MATCHED_BY_SOURCE = "not matched by source"


@dataclass(frozen=True)
class WhenClause:
    """One ``WHEN ... THEN ...`` clause of a MERGE."""
    kind: str                               # MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE
    action: str                             # "update", "delete", "insert" or "nothing"
    condition: str | None = None            # SQL over the statement's aliases
    assignments: Assignments | None = None  # update / insert; None: ``*``


@dataclass(frozen=True)
class Merge:
    """A parsed SQL ``MERGE INTO``: target, source query, join keys and clauses."""
    table: str
    target_alias: str
    source_query: str
    source_alias: str
    keys: tuple[tuple[str, str], ...]        # (target column, source column)
    clauses: tuple[WhenClause, ...]
    source_columns: tuple[str, ...] | None = None  # USING ... AS s(a, b): the source's names

    def source_relation(self) -> str:
        """The source as a FROM item: ``(query) AS s[(a, b)]``."""
        inner = f"({self.source_query}) AS {quote_identifier(self.source_alias)}"
        if self.source_columns is not None:
            inner += f"({', '.join(quote_identifier(c) for c in self.source_columns)})"
        return inner

    def merge_insert_form(self, target_columns: Collection[str] = ()
                          ) -> MergeInsertForm | None:
        """The statement as one ``merge_insert``, or None when it cannot be one.

        A DO NOTHING clause that no later clause of its kind follows changes nothing
        and is dropped; then each kind may have one clause: MATCHED an UPDATE (values
        from the source only) or an unconditional DELETE, NOT MATCHED an unconditional
        INSERT (the same columns from the same expressions, keys from the source's
        keys), BY SOURCE a DELETE; conditions must be in the filter language.
        ``target_columns``: the table's, which an UPDATE value naming one unqualified
        may read (merge_insert computes the values from the source alone).
        """
        kept = [c for j, c in enumerate(self.clauses) if c.action != "nothing"
                or any(later.kind == c.kind for later in self.clauses[j + 1:])]
        by_kind = {c.kind: c for c in kept}
        if len(by_kind) != len(kept):
            return None
        target, source = self.target_alias.lower(), self.source_alias.lower()
        update = by_kind.get(MATCHED)
        insert = by_kind.get(NOT_MATCHED)
        delete = by_kind.get(NOT_MATCHED_BY_SOURCE)
        if update is not None and not (update.action == "update" or (
                update.action == "delete" and update.condition is None)):
            return None
        if insert is not None and insert.condition is not None:
            return None
        if delete is not None and delete.action != "delete":
            return None
        for clause in (update, insert):
            for _, expr in clause.assignments or () if clause is not None else ():
                if _refers_to(tokenize(expr), target):
                    return None
        if update is not None and update.action == "update" and any(
                _bare_names(tokenize(expr)) & set(target_columns)
                for _, expr in update.assignments or ()):
            return None  # (the target's column, or an ambiguous name: SQL binds it)
        if insert is not None and not self._keys_from_source(insert.assignments):
            return None
        update_condition = delete_condition = None
        if update is not None and update.condition is not None:
            # merge_insert tests the condition on the rows it is given, which hold the
            # SET values under the target's names: a source column is what the source
            # holds only for SET *, and not a key it renames (else the general path)
            read = _source_columns_read(tokenize(update.condition), source)
            renamed = {s.lower() for t, s in self.keys if t != s}
            if read and (update.assignments is not None or read & renamed):
                return None
            update_condition = requalify(update.condition,
                                         {target: "target", source: "source"})
            if needs_engine(update_condition) or _reads_unqualified(update_condition):
                return None
        if delete is not None and delete.condition is not None:
            delete_condition = requalify(delete.condition, {target: None})
            if needs_engine(delete_condition):
                return None
        updates = update is not None and update.action == "update"
        form = MergeInsertForm(
            self, updates, update_condition,
            update.assignments if update is not None and updates else None,
            update is not None and not updates, insert is not None,
            insert.assignments if insert is not None else None, delete is not None,
            delete_condition)
        if form.update and form.insert and \
                _normal(form.update_set) != _normal(form.insert_values, self.keys):
            return None  # one merge_insert applies each source row to both
        return form

    def _keys_from_source(self, values: Assignments | None) -> bool:
        """Whether ``values`` sets each key column from the source's key (or is ``*``)."""
        return values is None or all(
            _is_source_column(expr, self.source_alias, source_key)
            for column, expr in values for target_key, source_key in self.keys
            if column == target_key)


@dataclass(frozen=True)
class MergeInsertForm:
    """A MERGE that one ``merge_insert`` runs: which of its three actions it takes."""
    merge: Merge
    update: bool = False
    update_condition: str | None = None      # over target.* / source.*
    update_set: Assignments | None = None    # None: UPDATE SET *
    delete_matched: bool = False             # WHEN MATCHED THEN DELETE
    insert: bool = False
    insert_values: Assignments | None = None  # None: INSERT *
    delete_by_source: bool = False
    delete_condition: str | None = None      # over the target's columns

    def source_sql(self) -> str:
        """The query giving the source rows under the target's column names."""
        merge = self.merge
        mapping = self.update_set if self.update else self.insert_values
        alias = quote_identifier(merge.source_alias)
        inner = merge.source_relation()
        if not (self.update or self.insert):  # only deletes: the keys are all it reads
            return "SELECT " + ", ".join(
                f"{alias}.{quote_identifier(s)} AS {quote_identifier(t)}"
                for t, s in merge.keys) + f" FROM {inner}"
        if mapping is None:
            renamed = [(t, s) for t, s in merge.keys if t != s]
            if not renamed:
                return f"SELECT * FROM {inner}"
            excluded = ", ".join(quote_identifier(s) for _, s in renamed)
            extra = ", ".join(f"{alias}.{quote_identifier(s)} AS {quote_identifier(t)}"
                              for t, s in renamed)
            return f"SELECT * EXCLUDE ({excluded}), {extra} FROM {inner}"
        columns = dict(mapping)
        for target, source in merge.keys:
            columns.setdefault(target, f"{alias}.{quote_identifier(source)}")
        select = ", ".join(f"{expr} AS {quote_identifier(col)}" for col, expr in columns.items())
        return f"SELECT {select} FROM {inner}"


def _normal(values: Assignments | None,
            keys: tuple[tuple[str, str], ...] = ()) -> dict[str, str] | None:
    if values is None:
        return None
    key_names = {k for k, _ in keys}
    return {col: " ".join(expr.split()) for col, expr in values if col not in key_names}


def _is_source_column(expression: str, source: str, column: str) -> bool:
    """Whether ``expression`` is the source's ``column`` (``s.col`` or ``col``)."""
    ref = _column_ref(tokenize(expression))
    return ref is not None and ref[1] == column and (
        ref[0] is None or ref[0].lower() == source.lower())


def parse_merge(sql: str) -> Merge | None:
    """The MERGE statement in ``sql``, or None if it is not one."""
    tokens = statement_tokens(sql)
    if not tokens or not tokens[0].is_kw("MERGE"):
        return None
    cur = Cursor(sql, tokens, "MERGE")
    cur.i = 1
    cur.expect_kw("INTO")
    table = cur.table_name()
    refuse_past_version(table, tokens, cur.i, "MERGE")
    target_alias = _alias(cur, "USING") or table
    cur.expect_kw("USING")
    tok = cur.peek()
    if tok is not None and tok.is_op("("):
        start = cur.i
        cur.parenthesised()
        source_query = sql[tokens[start].end:tokens[cur.i - 1].start].strip()
        source_name = None
    else:
        source_name = cur.table_name()
        source_query = f"SELECT * FROM {quote_identifier(source_name)}"
    source_alias = _alias(cur, "ON") or source_name
    if source_alias is None:
        raise InvalidInputError("MERGE: a (query) source needs an alias: USING (...) AS s")
    if source_alias.lower() == target_alias.lower():
        raise InvalidInputError("MERGE: give the source an alias other than the target's")
    source_columns = _column_aliases(cur)
    cur.expect_kw("ON")
    on_end = _find(tokens, cur.i, "WHEN")
    keys = _keys(sql, tokens[cur.i:on_end], target_alias, source_alias)
    cur.i = on_end
    clauses: list[WhenClause] = []
    while not cur.done():
        clause = _when(cur, target_alias, source_alias)
        if any(c.kind == clause.kind and c.condition is None for c in clauses):
            raise InvalidInputError(
                f"MERGE: a WHEN {clause.kind.upper()} clause follows an unconditional one "
                "of its kind, which takes every such row (only the last may omit AND "
                "<condition>)")
        clauses.append(clause)
    if not clauses:
        raise InvalidInputError("MERGE: expected at least one WHEN clause")
    merge = Merge(table, target_alias, source_query, source_alias, keys, tuple(clauses),
                  source_columns)
    check_keys_kept(merge)
    return merge


def check_keys_kept(merge: Merge) -> None:
    """Refuse an UPDATE setting a key column to anything but the source's key: the row
    would no longer be the one the ON condition matched (``UPDATE SET k = 'x'``); a key
    is changed by deleting the row and inserting another. (Checked again once the
    assigned names are bound to the table's: ``SET ID = ...`` sets ``id``.)"""
    for clause in merge.clauses:
        if clause.action != "update":
            continue
        for column, expression in clause.assignments or ():
            for target_key, source_key in merge.keys:
                if column == target_key and not _is_source_column(
                        expression, merge.source_alias, source_key):
                    raise StatementRefusedError(
                        f"MERGE: UPDATE SET sets the key column {column!r} to "
                        f"{expression!r}; a matched row's key can only take the source's "
                        f"{merge.source_alias}.{source_key}")


def _column_aliases(cur: Cursor) -> tuple[str, ...] | None:
    """The ``(a, b)`` naming the source's columns after its alias, if given."""
    tok = cur.peek()
    if tok is None or not tok.is_op("("):
        return None
    names = []
    for s, e in cur.parenthesised():
        part = tokenize(cur.sql[s:e])
        if len(part) != 1 or part[0].identifier is None:
            raise InvalidInputError(f"MERGE: expected a column name in the source's alias "
                                    f"list, got {cur.sql[s:e].strip()!r}")
        names.append(part[0].identifier)
    if not names:
        raise InvalidInputError("MERGE: the source's alias list names no column")
    if len({n.lower() for n in names}) != len(names):
        raise InvalidInputError(f"MERGE: a column is named twice in the source's alias "
                                f"list {tuple(names)}")
    return tuple(names)


def _alias(cur: Cursor, stop: str) -> str | None:
    cur.kw("AS")
    tok = cur.peek()
    if tok is None or tok.identifier is None or tok.is_kw(stop):
        return None
    cur.i += 1
    return tok.identifier


def _find(tokens: list[Token], start: int, *words: str) -> int:
    """Index of the first of ``words`` outside brackets from ``start`` (or the end)."""
    depth = 0
    for j in range(start, len(tokens)):
        tok = tokens[j]
        depth += tok.nesting
        if depth == 0 and tok.is_kw(*words):
            return j
    return len(tokens)


def _column_ref(tokens: list[Token]) -> tuple[str | None, str] | None:
    if len(tokens) == 1 and tokens[0].identifier:
        return None, tokens[0].identifier
    if len(tokens) == 3 and tokens[0].identifier and tokens[1].is_op(".") and tokens[2].identifier:
        return tokens[0].identifier, tokens[2].identifier
    return None


def _keys(sql: str, tokens: list[Token], target: str,
          source: str) -> tuple[tuple[str, str], ...]:
    if not tokens:
        raise InvalidInputError("MERGE: ON needs a condition")
    parts, start = [], 0
    for j, tok in enumerate(tokens):
        if tok.is_kw("AND"):
            parts.append(tokens[start:j])
            start = j + 1
    parts.append(tokens[start:])
    keys = []
    for part in parts:
        eq = next((j for j, t in enumerate(part) if t.is_op("=")), None)
        left = _column_ref(part[:eq]) if eq is not None else None
        right = _column_ref(part[eq + 1:]) if eq is not None else None
        sides = {}
        for ref in (left, right):
            if ref is None or ref[0] is None:
                break
            qualifier = ref[0].lower()
            if qualifier == target.lower():
                sides["target"] = ref[1]
            elif qualifier == source.lower():
                sides["source"] = ref[1]
        if len(sides) != 2:
            text = sql[part[0].start:part[-1].end] if part else ""
            raise StatementRefusedError(
                f"MERGE: the ON condition must be equalities of target and source columns "
                f"joined by AND (merge_insert matches on keys), got {text!r}")
        keys.append((sides["target"], sides["source"]))
    return tuple(keys)


def _source_columns_read(tokens: list[Token], alias: str) -> set[str]:
    """The columns ``alias.column`` names among ``tokens`` (lower-cased)."""
    names = set()
    for j, t in enumerate(tokens[:-2]):
        column = tokens[j + 2].identifier
        if t.identifier is not None and t.identifier.lower() == alias.lower() and \
                tokens[j + 1].is_op(".") and column is not None:
            names.add(column.lower())
    return names


def _bare_names(tokens: list[Token]) -> set[str]:
    """The names ``tokens`` may read as unqualified columns: identifiers neither
    qualified (``s.x``), qualifying (``x.y``) nor called (``f(...)``), each as written
    and, unquoted, as SQL folds it (a keyword among them is harmless: it only sends a
    statement whose table has a column of that name to the general path)."""
    names: set[str] = set()
    for j, tok in enumerate(tokens):
        ident = tok.identifier
        if ident is None or (j > 0 and tokens[j - 1].is_op(".")) or (
                j + 1 < len(tokens) and tokens[j + 1].is_op(".", "(")):
            continue
        names.add(ident)
        if tok.kind == "word":
            names.add(ident.lower())
    return names


def _reads_unqualified(condition: str) -> bool:
    """Whether a WHEN MATCHED condition, requalified for merge_insert (``target.x``,
    ``source.x``), reads a column by a bare name, which SQL binds to whichever side has
    it (or finds ambiguous) while merge_insert's condition finds it on neither."""
    return any(len(path) < 2 or path[0] not in ("target", "source")
               for path in columns(parse_predicate(condition, sql_quotes=True)))


def _refers_to(tokens: list[Token], alias: str) -> bool:
    return any(t.identifier is not None and t.identifier.lower() == alias.lower()
               and j + 1 < len(tokens) and tokens[j + 1].is_op(".")
               for j, t in enumerate(tokens))


def _when(cur: Cursor, target: str, source: str) -> WhenClause:
    cur.expect_kw("WHEN")
    matched = not cur.kw("NOT")
    cur.expect_kw("MATCHED")
    kind = MATCHED
    if not matched:
        kind = NOT_MATCHED_BY_SOURCE if cur.kws("BY", "SOURCE") else NOT_MATCHED
        if kind == NOT_MATCHED:
            cur.kws("BY", "TARGET")
    condition = None
    if cur.kw("AND"):
        then = _find(cur.tokens, cur.i, "THEN")
        if then == cur.i or then >= len(cur.tokens):
            cur.fail("expected <condition> THEN")
        condition = cur.sql[cur.tokens[cur.i].start:cur.tokens[then - 1].end].strip()
        cur.i = then
    cur.expect_kw("THEN")
    action_end = _find(cur.tokens, cur.i, "WHEN")
    action = cur.tokens[cur.i:action_end]
    text = cur.sql[action[0].start:action[-1].end] if action else ""
    cur.i = action_end
    # the side a clause's row lacks: a NOT MATCHED row has no target row, a BY SOURCE
    # row no source row
    absent = {MATCHED: None, NOT_MATCHED: target, NOT_MATCHED_BY_SOURCE: source}[kind]
    if len(action) == 2 and action[0].is_kw("DO") and action[1].is_kw("NOTHING"):
        verb, assignments = "nothing", None
    elif len(action) == 1 and action[0].is_kw("DELETE") and kind != NOT_MATCHED:
        verb, assignments = "delete", None
    elif len(action) >= 2 and action[0].is_kw("UPDATE") and action[1].is_kw("SET") \
            and kind != NOT_MATCHED:
        verb = "update"
        assignments = _update_set(cur, action[2:], target)
        if kind == NOT_MATCHED_BY_SOURCE and assignments is None:
            raise InvalidInputError("MERGE: WHEN NOT MATCHED BY SOURCE has no source row to "
                                    "take UPDATE SET * from; name the columns")
    elif action and action[0].is_kw("INSERT") and kind == NOT_MATCHED:
        verb, assignments = "insert", _insert_values(cur, action[1:])
    else:
        allowed = {MATCHED: "UPDATE SET, DELETE or DO NOTHING",
                   NOT_MATCHED: "INSERT or DO NOTHING",
                   NOT_MATCHED_BY_SOURCE: "UPDATE SET, DELETE or DO NOTHING"}[kind]
        raise InvalidInputError(f"MERGE: expected {allowed} after WHEN {kind.upper()} "
                                f"THEN, got {text!r}")
    if absent is not None:
        for part in [condition or ""] + [e for _, e in assignments or ()]:
            if _refers_to(tokenize(part), absent):
                raise InvalidInputError(
                    f"MERGE: a WHEN {kind.upper()} clause has no {absent!r} row to read: "
                    f"{part.strip()!r}")
    return WhenClause(kind, verb, condition, assignments)


def _update_set(cur: Cursor, tokens: list[Token], target: str) -> Assignments | None:
    if len(tokens) == 1 and tokens[0].is_op("*"):
        return None
    if not tokens:
        raise InvalidInputError("MERGE: UPDATE SET needs assignments or *")
    text = cur.sql[tokens[0].start:tokens[-1].end]
    out: list[tuple[str, str]] = []
    sub = Cursor(text, tokenize(text), "MERGE")
    for start, end in _split(sub):
        part = text[start:end]
        ptoks = tokenize(part)
        eq = next((j for j, t in enumerate(ptoks) if t.is_op("=")), None)
        ref = _column_ref(ptoks[:eq]) if eq else None
        if ref is None or eq is None or eq + 1 >= len(ptoks):
            raise InvalidInputError(f"MERGE: expected column = expression, got {part.strip()!r}")
        if ref[0] is not None and ref[0].lower() != target.lower():
            raise InvalidInputError(f"MERGE: UPDATE SET assigns target columns, got {ref[0]!r}")
        out.append((ref[1], part[ptoks[eq + 1].start:].strip()))
    return _unique(tuple(out))


def _insert_values(cur: Cursor, tokens: list[Token]) -> Assignments | None:
    if len(tokens) == 1 and tokens[0].is_op("*"):
        return None
    text = cur.sql[tokens[0].start:tokens[-1].end] if tokens else ""
    sub = Cursor(text, tokenize(text), "MERGE")
    columns: list[str] = []
    tok = sub.peek()
    if tok is not None and tok.is_op("("):
        for s, e in sub.parenthesised():
            ref = _column_ref(tokenize(text[s:e]))
            if ref is None:
                raise InvalidInputError(f"MERGE: expected a column name, got {text[s:e]!r}")
            columns.append(ref[1])
    sub.expect_kw("VALUES")
    values = [sub.sql[s:e].strip() for s, e in sub.parenthesised()]
    sub.end()
    if not columns:
        raise InvalidInputError("MERGE: INSERT needs its column list: INSERT (a, b) VALUES "
                                "(s.a, s.b), or INSERT *")
    if len(columns) != len(values):
        raise InvalidInputError(f"MERGE: INSERT lists {len(columns)} columns but "
                                f"{len(values)} values")
    return _unique(tuple(zip(columns, values, strict=True)))


def _split(cur: Cursor) -> list[tuple[int, int]]:
    """Top-level comma-separated spans of ``cur``'s whole text."""
    spans, depth, start = [], 0, 0
    for tok in cur.tokens:
        depth += tok.nesting
        if depth == 0 and tok.is_op(","):
            spans.append((start, tok.start))
            start = tok.end
    spans.append((start, len(cur.sql)))
    return spans


def _unique(values: Assignments) -> Assignments:
    names = [c for c, _ in values]
    if len(set(names)) != len(names):
        raise InvalidInputError("MERGE: a column is set twice")
    return values
