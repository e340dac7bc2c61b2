"""Wide boolean expressions in SQL text, made plannable before DataFusion sees them.

DataFusion 55 plans and evaluates ``a OR b OR c ...`` recursively, one level per
operand: a few thousand operands overflow its stack and kill the process (SIGSEGV)
while it plans the query. The common case is a long list of equalities
(``id = 1 OR id = 2 OR ...``, what generated queries produce): :func:`fold_disjunctions`
rewrites each such run into ``id IN (1, 2, ...)``, which DataFusion holds as one list
and pushes to our scan as one set lookup. Whatever is still too long to plan is refused
with :class:`InvalidInputError` instead (:func:`check_chains`).

The rewrite works on tokens, so string literals and comments are never touched, and
only on whole operands of an OR: a term ``col = literal`` is folded only when nothing
that binds tighter than OR (AND, NOT, a comparison, arithmetic...) touches it on
either side.
"""

from __future__ import annotations

from dataclasses import dataclass

from lance_sql.errors import InvalidInputError
from lance_sql.sql.tokens import Token, tokenize

# Runs shorter than this are left as written (plans and EXPLAIN output stay as the
# user wrote them); longer ones are folded.
FOLD_MIN_TERMS = 16
# Most AND/OR operators at one nesting level DataFusion is given (it crashed near 4,000).
MAX_CHAIN = 1000

# What may stand right before / right after a whole OR operand.
_BEFORE = {"OR", "WHERE", "HAVING", "ON", "WHEN", "SELECT", "(", ","}
_AFTER = {"OR", ")", ",", ";", "THEN", "ELSE", "END", "GROUP", "ORDER", "LIMIT", "OFFSET",
          "HAVING", "UNION", "INTERSECT", "EXCEPT", "WINDOW", "QUALIFY"}


@dataclass(frozen=True)
class _Term:
    """``operand = literal`` (either way round), tokens ``[first, last]``."""

    first: int
    last: int
    operand: str   # the column as written
    literal: str   # the literal as written
    kind: str      # "int", "float" or "string": only like literals share an IN list


def _boundary(tok: Token | None, allowed: set[str]) -> bool:
    if tok is None:
        return True
    return (tok.kind == "word" and tok.text.upper() in allowed) or (
        tok.kind == "op" and tok.text in allowed)


def _path_end(tokens: list[Token], i: int) -> int | None:
    """Index of the last token of a column path starting at ``i`` (``a``, ``t."b"``)."""
    if i >= len(tokens) or tokens[i].kind not in ("word", "quoted"):
        return None
    if tokens[i].kind == "word" and tokens[i].text.upper() in _BEFORE | _AFTER | {
            "AND", "NOT", "NULL", "TRUE", "FALSE", "CASE", "IS", "IN"}:
        return None
    j = i
    while (j + 2 < len(tokens) and tokens[j + 1].is_op(".")
           and tokens[j + 2].kind in ("word", "quoted")):
        j += 2
    return j


def _literal_end(tokens: list[Token], i: int) -> tuple[int, str] | None:
    """(index of its last token, kind) for a literal starting at ``i``."""
    if i >= len(tokens):
        return None
    tok = tokens[i]
    if tok.is_op("-") and i + 1 < len(tokens) and tokens[i + 1].kind == "number":
        tok, i = tokens[i + 1], i + 1
    if tok.kind == "number":
        return i, "float" if any(c in tok.text for c in ".eE") else "int"
    if tok.kind == "string":
        return i, "string"
    return None


def _term_at(tokens: list[Token], i: int, sql: str) -> _Term | None:
    """The whole-operand equality starting at token ``i``, if there is one."""
    if not _boundary(tokens[i - 1] if i else None, _BEFORE):
        return None
    path_end = _path_end(tokens, i)
    if path_end is not None and path_end + 1 < len(tokens) and tokens[path_end + 1].is_op("="):
        lit = _literal_end(tokens, path_end + 2)
        if lit is None:
            return None
        last, kind = lit
        operand = sql[tokens[i].start:tokens[path_end].end]
        literal = sql[tokens[path_end + 2].start:tokens[last].end]
    else:
        lit = _literal_end(tokens, i)
        if lit is None or lit[0] + 1 >= len(tokens) or not tokens[lit[0] + 1].is_op("="):
            return None
        path_end = _path_end(tokens, lit[0] + 2)
        if path_end is None:
            return None
        last, kind = path_end, lit[1]
        literal = sql[tokens[i].start:tokens[lit[0]].end]
        operand = sql[tokens[lit[0] + 2].start:tokens[path_end].end]
    after = tokens[last + 1] if last + 1 < len(tokens) else None
    if not _boundary(after, _AFTER):
        return None
    return _Term(i, last, operand, literal, kind)


def fold_disjunctions(sql: str) -> str:
    """``sql`` with every run of at least :data:`FOLD_MIN_TERMS` OR-ed equalities
    (``col = literal``) rewritten as IN lists, one per column and kind of literal."""
    if sql.lower().count("or") < FOLD_MIN_TERMS - 1:  # (an overcount) no run is possible:
        return sql  # a long IN list need not be tokenised here
    tokens = tokenize(sql)
    runs: list[list[_Term]] = []
    i = 0
    while i < len(tokens):
        term = _term_at(tokens, i, sql)
        if term is None:
            i += 1
            continue
        run = [term]
        while (run[-1].last + 2 < len(tokens) and tokens[run[-1].last + 1].is_kw("OR")):
            nxt = _term_at(tokens, run[-1].last + 2, sql)
            if nxt is None:
                break
            run.append(nxt)
        if len(run) >= FOLD_MIN_TERMS:
            runs.append(run)
        i = run[-1].last + 1
    if not runs:
        return sql
    out, pos = [], 0
    for run in runs:
        out.append(sql[pos:tokens[run[0].first].start])
        out.append(_folded(run))
        pos = tokens[run[-1].last].end
    out.append(sql[pos:])
    return "".join(out)


def _folded(run: list[_Term]) -> str:
    groups: dict[tuple[str, str], list[str]] = {}
    for term in run:
        groups.setdefault((term.operand, term.kind), []).append(term.literal)
    parts = [f"{operand} = {values[0]}" if len(values) == 1
             else f"{operand} IN ({', '.join(values)})"
             for (operand, _), values in groups.items()]
    return "(" + " OR ".join(parts) + ")"


def check_chains(sql: str) -> None:
    """Refuse SQL with more than :data:`MAX_CHAIN` AND/OR operators at one nesting level
    (DataFusion's planner would overflow its stack on it)."""
    text = sql.lower()
    if text.count("and") + text.count("or") <= MAX_CHAIN:  # an overcount: nothing to find
        return
    counts = [0]
    for tok in tokenize(sql):
        if tok.is_op("("):
            counts.append(0)
        elif tok.is_op(")"):
            if len(counts) > 1:
                counts.pop()
        elif tok.is_kw("AND", "OR"):
            counts[-1] += 1
            if counts[-1] > MAX_CHAIN:
                raise InvalidInputError(
                    f"expression with more than {MAX_CHAIN} AND/OR operators at one level "
                    f"(near position {tok.start}): too large to plan; write long lists "
                    "of alternatives as IN (...), or split the query")
