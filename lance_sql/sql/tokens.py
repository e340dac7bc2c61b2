"""A small SQL tokenizer that keeps every token's place in the original text.

The front door only needs to recognise table references, time-travel clauses and
``*`` wildcards, then splice replacements into the query text; everything else is
left for DataFusion to parse. Comments and string literals are tokens of their own
so nothing inside them is ever mistaken for SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from lance_sql.errors import InvalidInputError

_SPEC = [
    ("ws", r"\s+"),
    ("comment", r"--[^\n]*|/\*.*?\*/"),
    ("string", r"[Ee]?'(?:[^']|'')*'"),
    ("quoted", r'"(?:[^"]|"")*"|`(?:[^`]|``)*`'),
    ("number", r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"),
    ("word", r"[A-Za-z_][A-Za-z_0-9$]*"),
    ("op", r"=>|<=|>=|<>|!=|::|\|\||[-+*/%=<>(),.;:\[\]{}!|&^~?@#$]"),
]
_TOKEN = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _SPEC), re.S)
# A run of at least LITERAL_RUN comma-separated unsigned numbers (``1, 2.5, 3``), one token
# of kind "numbers" where a caller asks for them: the front door's rewrite only skips
# literals, and a 1000-key IN list is otherwise 2000 tokens made and walked in Python.
LITERAL_RUN = 16
_NUMBER = r"\d+(?:\.\d+)?"
_RUNS = re.compile(
    f"(?P<numbers>{_NUMBER}(?:\\s*,\\s*{_NUMBER}){{{LITERAL_RUN - 1},}}(?![\\w.]))|"
    + _TOKEN.pattern, re.S)


class Token(NamedTuple):
    """One SQL token and where it sits in the text (a named tuple: a query with a long
    literal list has thousands, made and compared cheaply)."""
    kind: str   # word, quoted, string, number, numbers (a run, on request), op
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text

    def is_kw(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words

    def is_op(self, *ops: str) -> bool:
        return self.kind == "op" and self.text in ops

    @property
    def nesting(self) -> int:
        """+1 for an opening bracket (``(``, ``[`` or ``{``), -1 for a closing one, else 0:
        what splitting at top-level commas counts (an array literal's commas are not
        top level)."""
        if self.kind != "op":
            return 0
        return (self.text in "([{") - (self.text in ")]}") if len(self.text) == 1 else 0

    @property
    def identifier(self) -> str | None:
        """The identifier this token names (unquoted, unescaped), or None."""
        if self.kind == "word":
            return self.text
        if self.kind == "quoted":
            quote = self.text[0]
            return self.text[1:-1].replace(quote * 2, quote)
        return None


def tokenize(sql: str, *, literal_runs: bool = False) -> list[Token]:
    """The tokens of ``sql`` (whitespace and comments dropped); with ``literal_runs``,
    long runs of numbers are single ``numbers`` tokens (see :data:`LITERAL_RUN`)."""
    return list(iter_tokens(sql, literal_runs=literal_runs))


def iter_tokens(sql: str, *, literal_runs: bool = False) -> Iterator[Token]:
    """:func:`tokenize`'s tokens one by one (a reader that stops early tokenizes no
    further); InvalidInputError where the text stops being SQL tokens."""
    pos = 0
    pattern = _RUNS if literal_runs else _TOKEN
    for match in pattern.finditer(sql):  # each match must start where the last ended
        start, end = match.span()
        if start != pos:
            break
        kind = match.lastgroup or "op"
        if kind != "ws" and kind != "comment":
            yield Token(kind, match.group(), start, end)
        pos = end
    if pos < len(sql):
        raise InvalidInputError(
            f"unexpected character {sql[pos]!r} at position {pos} in SQL: {sql!r}"
        )


def check_single_statement(tokens: list[Token]) -> None:
    """One statement per call (trailing semicolons allowed); InvalidInputError naming
    where the second one starts."""
    for k, tok in enumerate(tokens):
        if tok.is_op(";"):
            rest = [t for t in tokens[k + 1:] if not t.is_op(";")]
            if rest:
                raise InvalidInputError(
                    f"one SQL statement at a time: a second statement starts at position "
                    f"{rest[0].start} ({rest[0].text!r})")


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def filter_text(sql: str) -> str:
    """SQL expression text (an UPDATE / DELETE condition, a SET value, a MERGE condition)
    as the table layer's filter language reads it: double-quoted names become
    backticked ones, since a filter reads ``"x"`` as a string, as pylance does."""
    edits = [(tok.start, tok.end, "`" + tok.text[1:-1].replace('""', '"').replace("`", "``")
              + "`") for tok in tokenize(sql) if tok.kind == "quoted" and tok.text[0] == '"']
    for start, end, new in reversed(edits):
        sql = sql[:start] + new + sql[end:]
    return sql


def column_path(name: str) -> str:
    """A top-level column's name as the table layer reads field paths (``update``
    keys): backquoted, inner backquotes doubled, when it holds a dot or a backquote."""
    if "." in name or "`" in name:
        return "`" + name.replace("`", "``") + "`"
    return name


def string_value(token: Token) -> str:
    """The value of a string literal token."""
    body = token.text[1:] if token.text[0] in "Ee" else token.text
    return body[1:-1].replace("''", "'")


def requalify(text: str, renames: dict[str, str | None]) -> str:
    """``text`` with ``alias.`` prefixes replaced (``None``: removed)."""
    tokens = tokenize(text)
    edits = []
    for j, tok in enumerate(tokens[:-1]):
        ident = tok.identifier
        if ident is not None and ident.lower() in renames and tokens[j + 1].is_op("."):
            if j > 0 and tokens[j - 1].is_op("."):
                continue
            new = renames[ident.lower()]
            end = tokens[j + 1].end if new is None else tok.end
            edits.append((tok.start, end, new or ""))
    for start, end, new in reversed(edits):
        text = text[:start] + new + text[end:]
    return text
