"""``MERGE INTO``, parsed into what one ``merge_insert`` commit can do::

    MERGE INTO target [AS] t USING source_table | (query) [AS] s [(col, ...)]
      ON t.k = s.k [AND t.k2 = s.k2]
      WHEN MATCHED [AND condition] THEN UPDATE SET * | UPDATE SET col = expr, ...
      WHEN NOT MATCHED [BY TARGET] THEN INSERT * | INSERT (col, ...) VALUES (expr, ...)
      WHEN NOT MATCHED BY SOURCE [AND condition] THEN DELETE

``merge_insert`` applies one source row to a matched target row and to an inserted
one alike, so the UPDATE and INSERT clauses must take the same columns from the same
source expressions (``*`` means every source column of the target's names); the
statement's source is computed by DataFusion with those columns, under the target's
names. Expressions may read the source only. Clauses merge_insert cannot express
(``WHEN MATCHED THEN DELETE``, conditional inserts, several clauses of one kind) are
refused rather than approximated.
"""

from __future__ import annotations

from dataclasses import dataclass

from lance_sql.errors import InvalidInputError, StatementRefusedError
from lance_sql.sql.statements import Cursor, refuse_past_version, statement_tokens
from lance_sql.sql.tokens import Token, quote_identifier, requalify, tokenize

Assignments = tuple[tuple[str, str], ...]   # (target column, source expression)


@dataclass(frozen=True)
class Merge:
    """A parsed SQL ``MERGE INTO``: target, source query, join keys and clauses."""
    table: str
    target_alias: str
    source_query: str
    source_alias: str
    keys: tuple[tuple[str, str], ...]        # (target column, source column)
    update: bool = False
    update_condition: str | None = None      # over target.* / source.*
    update_set: Assignments | None = None    # None: UPDATE SET *
    insert: bool = False
    insert_values: Assignments | None = None  # None: INSERT *
    delete_by_source: bool = False
    delete_condition: str | None = None      # over the target's columns
    source_columns: tuple[str, ...] | None = None  # USING ... AS s(a, b): the source's names

    def source_sql(self) -> str:
        """The query giving the source rows under the target's column names."""
        mapping = self.mapping()
        alias = quote_identifier(self.source_alias)
        inner = f"({self.source_query}) AS {alias}"
        if self.source_columns is not None:
            inner += f"({', '.join(quote_identifier(c) for c in self.source_columns)})"
        if mapping is None:
            renamed = [(t, s) for t, s in self.keys if t != s]
            if not renamed:
                return f"SELECT * FROM {inner}"
            excluded = ", ".join(quote_identifier(s) for _, s in renamed)
            extra = ", ".join(f"{alias}.{quote_identifier(s)} AS {quote_identifier(t)}"
                              for t, s in renamed)
            return f"SELECT * EXCLUDE ({excluded}), {extra} FROM {inner}"
        columns = dict(mapping)
        for target, source in self.keys:
            columns.setdefault(target, f"{alias}.{quote_identifier(source)}")
        select = ", ".join(f"{expr} AS {quote_identifier(col)}" for col, expr in columns.items())
        return f"SELECT {select} FROM {inner}"

    def mapping(self) -> Assignments | None:
        """The source expression of each target column both clauses set (None: ``*``)."""
        update = self.update_set if self.update else None
        insert = self.insert_values if self.insert else None
        if self.update and self.insert and _normal(update) != _normal(insert, self.keys):
            raise StatementRefusedError(
                "MERGE: the UPDATE and INSERT clauses must set the same columns from the same "
                "source expressions (one merge_insert applies each source row to both); "
                "use UPDATE SET * and INSERT *, or matching lists")
        return update if self.update else insert


def _normal(values: Assignments | None,
            keys: tuple[tuple[str, str], ...] = ()) -> dict[str, str] | None:
    if values is None:
        return None
    key_names = {k for k, _ in keys}
    return {col: " ".join(expr.split()) for col, expr in values if col not in key_names}


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
    fields: dict[str, object] = {}
    while not cur.done():
        _when(cur, target_alias, source_alias, fields)
    if not fields:
        raise InvalidInputError("MERGE: expected at least one WHEN clause")
    _check_keys_kept(keys, source_alias, fields)
    return Merge(table, target_alias, source_query, source_alias, keys,
                 source_columns=source_columns, **fields)  # type: ignore[arg-type]


def _check_keys_kept(keys: tuple[tuple[str, str], ...], source: str,
                     fields: dict[str, object]) -> None:
    """Refuse clauses setting a key column to anything but the source's key: the source
    is computed under the target's names, so such an expression would replace the key
    merge_insert matches on (``UPDATE SET k = 'x'`` matched no row and reported 0)."""
    for clause, name in (("update_set", "UPDATE SET"), ("insert_values", "INSERT")):
        values = fields.get(clause)
        if not isinstance(values, tuple):
            continue  # * or no such clause
        for column, expression in values:
            for target_key, source_key in keys:
                if column != target_key:
                    continue
                ref = _column_ref(tokenize(expression))
                if ref is None or ref[1] != source_key or (
                        ref[0] is not None and ref[0].lower() != source.lower()):
                    raise StatementRefusedError(
                        f"MERGE: {name} sets the key column {column!r} to {expression!r}; "
                        f"merge_insert matches on the key, so it can only take the source's "
                        f"{source}.{source_key}")


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


def _refers_to(tokens: list[Token], alias: str) -> bool:
    return any(t.identifier is not None and t.identifier.lower() == alias.lower()
               and j + 1 < len(tokens) and tokens[j + 1].is_op(".")
               for j, t in enumerate(tokens))


def _when(cur: Cursor, target: str, source: str, fields: dict[str, object]) -> None:
    cur.expect_kw("WHEN")
    matched = not cur.kw("NOT")
    cur.expect_kw("MATCHED")
    kind = "matched"
    if not matched:
        kind = "by_source" if cur.kws("BY", "SOURCE") else "not_matched"
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
    if kind == "matched":
        if "update" in fields:
            raise StatementRefusedError("MERGE: only one WHEN MATCHED clause is supported")
        if action and action[0].is_kw("DELETE"):
            raise StatementRefusedError("MERGE: WHEN MATCHED THEN DELETE is not supported "
                                        "(merge_insert deletes only rows the source lacks)")
        if len(action) < 2 or not (action[0].is_kw("UPDATE") and action[1].is_kw("SET")):
            raise InvalidInputError(f"MERGE: expected UPDATE SET after WHEN MATCHED THEN, "
                                    f"got {text!r}")
        fields["update"] = True
        fields["update_set"] = _update_set(cur, action[2:], target, source)
        if condition is not None:
            fields["update_condition"] = requalify(
                condition, {target.lower(): "target", source.lower(): "source"})
    elif kind == "not_matched":
        if "insert" in fields:
            raise StatementRefusedError("MERGE: only one WHEN NOT MATCHED clause is supported")
        if condition is not None:
            raise StatementRefusedError("MERGE: WHEN NOT MATCHED AND <condition> is not "
                                        "supported (filter the source instead)")
        if not action or not action[0].is_kw("INSERT"):
            raise InvalidInputError(f"MERGE: expected INSERT after WHEN NOT MATCHED THEN, "
                                    f"got {text!r}")
        fields["insert"] = True
        fields["insert_values"] = _insert_values(cur, action[1:], target, source)
    else:
        if "delete_by_source" in fields:
            raise StatementRefusedError("MERGE: only one WHEN NOT MATCHED BY SOURCE clause is "
                                        "supported")
        if len(action) != 1 or not action[0].is_kw("DELETE"):
            raise StatementRefusedError(f"MERGE: WHEN NOT MATCHED BY SOURCE supports only "
                                        f"THEN DELETE, got {text!r}")
        fields["delete_by_source"] = True
        if condition is not None:
            cond_tokens = tokenize(condition)
            if _refers_to(cond_tokens, source):
                raise InvalidInputError("MERGE: a NOT MATCHED BY SOURCE condition can only "
                                        "read the target")
            fields["delete_condition"] = requalify(condition, {target.lower(): None})


def _source_only(cur: Cursor, text: str, target: str) -> str:
    if _refers_to(tokenize(text), target):
        raise StatementRefusedError(
            f"MERGE: {text.strip()!r} reads the target; merge_insert sets columns from the "
            "source row only")
    return text.strip()


def _update_set(cur: Cursor, tokens: list[Token], target: str,
                source: str) -> Assignments | None:
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
        out.append((ref[1], _source_only(cur, part[ptoks[eq + 1].start:], target)))
    return _unique(tuple(out))


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


def _insert_values(cur: Cursor, tokens: list[Token], target: str,
                   source: str) -> Assignments | None:
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
    values = [_source_only(cur, sub.sql[s:e], target) for s, e in sub.parenthesised()]
    sub.end()
    if not columns:
        raise InvalidInputError("MERGE: INSERT needs its column list: INSERT (a, b) VALUES "
                                "(s.a, s.b), or INSERT *")
    if len(columns) != len(values):
        raise InvalidInputError(f"MERGE: INSERT lists {len(columns)} columns but "
                                f"{len(values)} values")
    return _unique(tuple(zip(columns, values, strict=True)))


def _unique(values: Assignments) -> Assignments:
    names = [c for c, _ in values]
    if len(set(names)) != len(names):
        raise InvalidInputError("MERGE: a column is set twice")
    return values
