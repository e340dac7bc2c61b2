"""SQL predicate strings to :mod:`lance_sql.expr.arrow` trees, and back (:func:`to_sql`).

Hand-written (a tokenizer and a precedence-climbing parser) so that the accepted language is
exactly what the translators understand and every error names a character position.
Precedence, loosest first: OR, AND, NOT, comparisons (= == != <> < <= > >= IS [NOT] DISTINCT
FROM, IS IN BETWEEN LIKE ILIKE), + -, * / % || (one level, left to right), unary minus: as
sqlparser (DataFusion's and pylance's) reads them, ``a * 2 || 'x'`` is ``(a * 2) || 'x'``
and ``'x' || a * 2`` is ``('x' || a) * 2``; the right side of IS [NOT] DISTINCT FROM is a
whole expression, as sqlparser reads it. ``CASE``, ``WHEN``, ``THEN``,
``ELSE``, ``END`` are keywords only where a CASE expression expects them (a column may be
called ``end``). Identifiers keep their spelling; binding to a schema matches an
unquoted one case-insensitively when no exact name exists (as pylance binds them), a quoted
one (``"Name"`` or `` `Name` ``) exactly.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.expr.model import (
    ARITHMETIC,
    COMPARISONS,
    FUNCTIONS,
    OPTIONAL_ARGUMENTS,
    VARIADIC,
    Call,
    Column,
    Expr,
    Literal,
    cast_target,
    literal_type,
)

_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", "LIKE", "ILIKE", "TRUE", "FALSE", "AS"}
)
_OPS = ("||", "<=", ">=", "<>", "!=", "==", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")",
        ",", ".", "[", "]")
_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_IDENT = re.compile(r"[^\W\d]\w*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?(Z|[+-]\d{2}(:?\d{2})?)?", re.ASCII
)
_ALIASES = {"==": "=", "<>": "!=", "char_length": "length", "character_length": "length",
            "array_contains": "array_has", "list_has": "array_has", "list_contains": "array_has",
            "array_extract": "array_element", "list_element": "array_element",
            "list_extract": "array_element", "list_length": "array_length",
            "datepart": "date_part"}
# ``||`` binds tighter than arithmetic, as in DataFusion's parser ('x' || 2 * 3 fails there)
_BINARY_BP = {"OR": 1, "AND": 2, "=": 4, "==": 4, "!=": 4, "<>": 4, "<": 4, "<=": 4, ">": 4,
              ">=": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6, "||": 6}
_PREDICATE_BP = 4  # IS, IN, BETWEEN, LIKE, ILIKE and their NOT forms
_NOT_BP = 3  # NOT's operand stops before AND/OR but takes comparisons
_UNARY_BP = 8
_TYPES = {"INT": pa.int32(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
          "SMALLINT": pa.int16(), "TINYINT": pa.int8(), "FLOAT": pa.float32(),
          "REAL": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
          "STRING": pa.string(), "TEXT": pa.string(), "CHAR": pa.string(),
          "BOOLEAN": pa.bool_(), "BOOL": pa.bool_(), "DATE": pa.date32(),
          "TIMESTAMP": pa.timestamp("us")}
# ``<name> UNSIGNED`` (MySQL's spelling, which DataFusion reads too)
_UNSIGNED = {"TINYINT": pa.uint8(), "SMALLINT": pa.uint16(), "INT": pa.uint32(),
             "INTEGER": pa.uint32(), "BIGINT": pa.uint64()}
_HEX = re.compile(r"[0-9a-fA-F]*")


@dataclass(frozen=True)
class _Token:
    kind: str  # "ident", "qident", "string", "bytes", "int", "float", "op" or "eof"
    text: str  # source text; decoded contents for strings and quoted identifiers
    pos: int

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        if self.kind == "string":
            return "string '" + self.text.replace("'", "''") + "'"
        if self.kind == "bytes":
            return f"binary X'{self.text}'"
        return f"token '{self.text}'"


def parse_predicate(text: str, *, sql_quotes: bool = False) -> Expr:
    """Parse a SQL boolean expression such as ``"x > 5 AND name LIKE 'a%'"``.

    The filter language is pylance's: backticks quote a column name and double quotes,
    like single ones, a string (``name = "x"``). With ``sql_quotes``, double quotes
    quote a name, as in a SQL statement (the SQL layer's UPDATE / DELETE conditions).
    Raises InvalidInputError quoting ``text`` and the 0-based position of the problem.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"filter must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InvalidInputError(f"empty filter '{text}'")
    try:
        return _Parser(text, sql_quotes=sql_quotes).parse()
    except RecursionError:
        shown = text if len(text) <= 200 else text[:200] + "..."
        raise InvalidInputError(f"filter nested too deeply: '{shown}'") from None


def tokenize(text: str, *, sql_quotes: bool = False) -> list[_Token]:
    """The tokens of filter text ``text``; bad characters or strings are an InvalidInputError.
    ``"..."`` is a string, or with ``sql_quotes`` a quoted name (see :func:`parse_predicate`)."""
    name_quotes = '`"' if sql_quotes else "`"
    tokens, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("--", i):  # a comment, to the end of its line
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise _error(text, "unterminated comment", i)
            i = end + 2
        elif c == ";" and not text[i + 1:].strip():  # one statement's end
            i = n
        elif c in "'\"`":
            end, value = _quoted(text, i, name=c in name_quotes)
            if c in name_quotes and not value:
                raise _error(text, "empty quoted identifier", i)
            tokens.append(_Token("qident" if c in name_quotes else "string", value, i))
            i = end
        elif c in "xX" and text.startswith("'", i + 1):  # X'6162': bytes, in hex
            end, value = _quoted(text, i + 1)
            if len(value) % 2 or not _HEX.fullmatch(value):
                raise _error(text, "a binary literal X'...' holds pairs of hex digits", i)
            tokens.append(_Token("bytes", value, i))
            i = end
        elif m := _NUMBER.match(text, i):
            kind = "float" if "." in m[0] or m[2] else "int"
            tokens.append(_Token(kind, m[0], i))
            i = m.end()
        elif m := _IDENT.match(text, i):
            tokens.append(_Token("ident", m[0], i))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise _error(text, f"unexpected character '{c}'", i)
            tokens.append(_Token("op", op, i))
            i += len(op)
    tokens.append(_Token("eof", "", n))
    return tokens


def _quoted(text: str, start: int, *, name: bool = False) -> tuple[int, str]:
    """Read a quoted run starting at ``start`` (a quoted ``name``, else a string); a
    doubled quote stands for one."""
    q, i, parts = text[start], start + 1, []
    while True:
        j = text.find(q, i)
        if j < 0:
            what = "quoted identifier" if name else "string literal"
            raise _error(text, f"unterminated {what}", start)
        parts.append(text[i:j])
        if text.startswith(q * 2, j):
            parts.append(q)
            i = j + 2
        else:
            return j + 1, "".join(parts)


def _error(text: str, message: str, pos: int) -> InvalidInputError:
    return InvalidInputError(f"{message} at position {pos} in filter '{text}'")


def _int_literal(value: int) -> Literal | None:
    if -(2**63) <= value < 2**63:
        return Literal(value, pa.int64())
    if 0 <= value < 2**64:
        return Literal(value, pa.uint64())
    return None


def _common_type(types: list[pa.DataType]) -> pa.DataType | None:
    """The type every array-literal element of ``types`` becomes (None: there is none):
    NULLs take the others' type, integers meet floats as float64, lists meet lists as
    lists of their elements' common type."""
    known = [t for t in types if t != pa.null()]
    if not known:
        return pa.null()
    if all(t == known[0] for t in known):
        return known[0]
    if all(pa.types.is_list(t) for t in known):
        inner = _common_type([t.value_type for t in known])
        return pa.list_(inner) if inner is not None else None
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in known) and any(
            pa.types.is_floating(t) for t in known):
        return pa.float64()
    return None


def _as_element(value: object, element: pa.DataType) -> object:
    """An array-literal element's value as a value of the common type ``element``."""
    if value is None:
        return None
    if pa.types.is_floating(element):
        return float(value)  # type: ignore[arg-type]  # an int or a float, by _common_type
    if pa.types.is_list(element):
        return tuple(_as_element(v, element.value_type) for v in value)  # type: ignore[attr-defined]
    return value


class _Parser:
    def __init__(self, text: str, *, sql_quotes: bool = False) -> None:
        self.text = text
        self.tokens = tokenize(text, sql_quotes=sql_quotes)
        self.i = 0

    # -- token helpers
    def peek(self, k: int = 0) -> _Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        tok = self.peek()
        self.i += 1
        return tok

    def error(self, message: str, tok: _Token) -> InvalidInputError:
        return _error(self.text, message, tok.pos)

    def unexpected(self, tok: _Token) -> InvalidInputError:
        return self.error(f"unexpected {tok.describe()}", tok)

    @staticmethod
    def keyword(tok: _Token) -> str | None:
        return tok.text.upper() if tok.kind == "ident" and tok.text.upper() in _KEYWORDS else None

    def expect_op(self, op: str) -> _Token:
        tok = self.advance()
        if tok.kind != "op" or tok.text != op:
            raise self.error(f"expected '{op}' but found {tok.describe()}", tok)
        return tok

    def expect_word(self, word: str) -> None:
        """An identifier spelled ``word`` (a keyword only where it stands: FROM, THEN, END)."""
        tok = self.advance()
        if tok.kind != "ident" or tok.text.upper() != word:
            raise self.error(f"expected {word} but found {tok.describe()}", tok)

    def is_word(self, word: str) -> bool:
        tok = self.peek()
        return tok.kind == "ident" and tok.text.upper() == word

    def expect_keyword(self, word: str) -> None:
        tok = self.advance()
        if self.keyword(tok) != word:
            raise self.error(f"expected {word} but found {tok.describe()}", tok)

    # -- grammar
    def parse(self) -> Expr:
        expr = self.expr(0)
        if self.peek().kind != "eof":
            raise self.unexpected(self.peek())
        return expr

    def expr(self, min_bp: int) -> Expr:
        left = self.subscripts(self.prefix())
        while True:
            tok = self.peek()
            word = self.keyword(tok)
            if tok.kind == "op" and tok.text in _BINARY_BP or word in ("AND", "OR"):
                name = word or tok.text
                bp = _BINARY_BP[name]
                if bp < min_bp:
                    return left
                self.advance()
                operands = [left, self.expr(bp + 1)]
                while word and self.keyword(self.peek()) == word:  # a chain of ANDs or ORs
                    self.advance()
                    operands.append(self.expr(bp + 1))
                left = self.combine(_ALIASES.get(name, name).lower(), operands)
            elif word in ("IS", "IN", "BETWEEN", "LIKE", "ILIKE", "NOT"):
                if _PREDICATE_BP < min_bp:
                    return left
                left = self.predicate(left)
            else:
                return left

    @staticmethod
    def combine(op: str, operands: list[Expr]) -> Expr:
        if op in ("and", "or"):  # one flat n-ary node: chains of thousands of ORs stay shallow
            parts = [p for e in operands
                     for p in (e.args if isinstance(e, Call) and e.op == op else (e,))]
            return Call(op, tuple(parts))
        return Call(op, tuple(operands))

    def predicate(self, left: Expr) -> Expr:
        tok = self.advance()
        word = self.keyword(tok)
        if word == "IS":
            negated = self.keyword(self.peek()) == "NOT"
            if negated:
                self.advance()
            if self.is_word("DISTINCT"):
                self.advance()
                self.expect_word("FROM")
                # the right side is a whole expression, as sqlparser (DataFusion's, and
                # pylance's) reads it: ``x IS DISTINCT FROM 1 AND y`` compares x with
                # ``1 AND y``, so a filter selects the rows the same SQL selects
                right = self.expr(0)
                return Call("is_not_distinct" if negated else "is_distinct", (left, right))
            truth = self.keyword(self.peek())
            if truth in ("TRUE", "FALSE"):  # IS [NOT] TRUE: never NULL, as DISTINCT FROM
                self.advance()
                value = Literal(truth == "TRUE", pa.bool_())
                return Call("is_distinct" if negated else "is_not_distinct", (left, value))
            self.expect_keyword("NULL")
            return Call("is_not_null" if negated else "is_null", (left,))
        if word == "NOT":
            inner = self.keyword(self.peek())
            if inner not in ("IN", "BETWEEN", "LIKE", "ILIKE"):
                raise self.unexpected(tok)
            return Call("not", (self.predicate(left),))
        if word == "IN":
            self.expect_op("(")
            items = [self.list_item()]
            while self.peek().text == "," and self.peek().kind == "op":
                self.advance()
                items.append(self.list_item())
            self.expect_op(")")
            literals = [i for i in items if isinstance(i, Literal)]
            if len(literals) == len(items):
                return Call("in", (left, *literals))
            # an expression in the list: ``x IN (a, b)`` is ``x = a OR x = b`` by its
            # definition (three-valued logic included); the literals stay one set lookup
            parts = [Call("in", (left, *literals))] if literals else []
            parts += [Call("=", (left, i)) for i in items if not isinstance(i, Literal)]
            return parts[0] if len(parts) == 1 else Call("or", tuple(parts))
        if word == "BETWEEN":
            low = self.expr(_PREDICATE_BP + 1)
            self.expect_keyword("AND")
            return Call("between", (left, low, self.expr(_PREDICATE_BP + 1)))
        pattern_tok = self.peek()
        pattern = self.expr(_PREDICATE_BP + 1)
        if not isinstance(pattern, Literal) or not isinstance(pattern.value, str | None):
            raise self.error(f"{word} needs a string literal pattern", pattern_tok)
        assert word is not None  # LIKE or ILIKE
        if self.is_word("ESCAPE"):
            self.escape()
        return Call(word.lower(), (left, pattern))

    def escape(self) -> None:
        """``ESCAPE 'c'`` after a LIKE pattern (ESCAPE read next): only the backslash,
        which escapes without it too, as DataFusion (and pylance) take no other."""
        self.advance()
        tok = self.advance()
        if tok.kind != "string" or len(tok.text) != 1:
            what = "a single character in quotes"
            raise self.error(f"ESCAPE takes {what}, got {tok.describe()}", tok)
        if tok.text != "\\":
            raise self.error("LIKE supports no escape character but the backslash "
                             "(as DataFusion)", tok)

    def subscripts(self, value: Expr) -> Expr:
        """``value[i]``, ``value[i][j]``...: list elements (1-based, as DataFusion's);
        ``value['f']`` a struct's field, also ``.f`` after a subscript (``l[1].g``)."""
        subscripted = False
        while self.peek().kind == "op" and (self.peek().text == "[" or (
                subscripted and self.peek().text == ".")):
            if self.advance().text == ".":
                name = self.advance()
                if name.kind not in ("ident", "qident"):
                    raise self.error("a field name must follow '.'", name)
                # (unquoted names fold to lower case, as SQL's)
                index: Expr = Literal(name.text.lower() if name.kind == "ident" else name.text)
            else:
                index = self.expr(0)
                self.expect_op("]")
            value = Call("array_element", (value, index))
            subscripted = True
        return value

    def list_item(self) -> Expr:
        return self.expr(_PREDICATE_BP + 1)

    def prefix(self) -> Expr:
        tok = self.advance()
        word = self.keyword(tok)
        if tok.kind == "op" and tok.text == "(":
            inner = self.expr(0)
            self.expect_op(")")
            return inner
        if tok.kind == "op" and tok.text == "[":
            return self.array(tok)
        if tok.kind == "op" and tok.text in "+-":
            operand = self.expr(_UNARY_BP)
            if tok.text == "+":
                return operand
            return self.negate(operand, tok)
        if word == "NOT":
            return Call("not", (self.expr(_NOT_BP + 1),))
        if word in ("TRUE", "FALSE"):
            return Literal(word == "TRUE", pa.bool_())
        if word == "NULL":
            return Literal(None, pa.null())
        if tok.kind == "int":
            lit = _int_literal(int(tok.text))
            if lit is None:
                raise self.error(f"integer literal {tok.text} out of range", tok)
            return lit
        if tok.kind == "float":
            return Literal(float(tok.text), pa.float64())
        if tok.kind == "string":
            return Literal(tok.text, pa.string())
        if tok.kind == "bytes":
            return Literal(bytes.fromhex(tok.text), pa.binary())
        if tok.kind == "qident":
            return self.column(tok.text, quoted=True)
        if tok.kind == "ident" and word is None:
            return self.identifier(tok)
        raise self.unexpected(tok)

    def array(self, open_tok: _Token) -> Literal:
        """An array literal ``[1.0, 2, 3]`` (its ``[`` read): a list of literals of one
        type, integers among floats as floats, as DataFusion types it; a consumer casts
        it to its column's list type."""
        items: list[Literal] = []
        if not (self.peek().kind == "op" and self.peek().text == "]"):
            while True:
                tok = self.peek()
                item = self.expr(0)
                if not isinstance(item, Literal):
                    raise self.error("array literals may hold only literals", tok)
                items.append(item)
                if self.expect_any_op(",", "]") == "]":
                    break
        else:
            self.advance()
        element = _common_type([literal_type(i) for i in items])
        if element is None:
            types = ", ".join(sorted({str(literal_type(i)) for i in items}))
            raise self.error(f"array literal elements have no common type ({types})", open_tok)
        values = tuple(_as_element(i.value, element) for i in items)
        return Literal(values, pa.list_(element))

    def negate(self, operand: Expr, tok: _Token) -> Expr:
        if isinstance(operand, Literal) and isinstance(operand.value, int | float):
            if isinstance(operand.value, float):
                return Literal(-operand.value, pa.float64())
            if not isinstance(operand.value, bool):
                lit = _int_literal(-operand.value)
                if lit is None:
                    raise self.error(f"integer literal -{operand.value} out of range", tok)
                return lit
        return Call("negate", (operand,))

    def identifier(self, tok: _Token) -> Expr:
        name, nxt = tok.text.upper(), self.peek()
        if name == "DATE" and nxt.kind == "string":
            self.advance()
            try:
                if not _DATE.fullmatch(nxt.text):
                    raise ValueError("expected YYYY-MM-DD")
                return Literal(dt.date.fromisoformat(nxt.text), pa.date32())
            except ValueError as err:
                raise self.error(f"invalid DATE literal ({err})", nxt) from None
        if name == "TIMESTAMP" and nxt.kind == "string":
            self.advance()
            return self.timestamp(nxt)
        if name == "CASE" and (nxt.kind not in ("op", "eof") or nxt.text in ("(", "-", "+", "[")):
            return self.case()
        if nxt.kind == "op" and nxt.text == "(":
            self.advance()
            return self.cast() if name == "CAST" else self.function(tok)
        return self.column(tok.text)

    def case(self) -> Call:
        """``CASE [x] WHEN a THEN v ... [ELSE e] END`` (its CASE read): a searched CASE's
        (condition, value) pairs then the ELSE value if any; a simple CASE compares
        ``x = a`` (so a NULL never matches, as in SQL)."""
        subject = None if self.is_word("WHEN") else self.expr(0)
        if not self.is_word("WHEN"):
            raise self.error(f"expected WHEN but found {self.peek().describe()}", self.peek())
        args: list[Expr] = []
        while self.is_word("WHEN"):
            self.advance()
            condition = self.expr(0)
            self.expect_word("THEN")
            args += [condition if subject is None else Call("=", (subject, condition)),
                     self.expr(0)]
        if self.is_word("ELSE"):
            self.advance()
            args.append(self.expr(0))
        self.expect_word("END")
        return Call("case", tuple(args))

    def timestamp(self, tok: _Token) -> Literal:
        try:
            if not _TIMESTAMP.fullmatch(tok.text):
                raise ValueError("expected YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][Z|+HH:MM]")
            value = dt.datetime.fromisoformat(tok.text)
        except ValueError as err:
            raise self.error(f"invalid TIMESTAMP literal ({err})", tok) from None
        if value.tzinfo is not None:
            # DataFusion (and pylance) keep only the UTC wall-clock time of an offset literal:
            # against a zoned column it is then read in that column's zone, like any naive one
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return Literal(value, pa.timestamp("us"))

    def column(self, first: str, quoted: bool = False) -> Column:
        path, flags = [first], [quoted]
        while self.peek().text == "." and self.peek().kind == "op":
            self.advance()
            part = self.advance()
            if part.kind not in ("ident", "qident"):
                raise self.error(f"expected a field name after '.' but found {part.describe()}",
                                 part)
            path.append(part.text)
            flags.append(part.kind == "qident")
        return Column(tuple(path), tuple(flags))

    def function(self, name_tok: _Token) -> Call:
        name = _ALIASES.get(name_tok.text.lower(), name_tok.text.lower())
        if name not in FUNCTIONS and name not in VARIADIC:
            supported = ", ".join(sorted([*FUNCTIONS, *VARIADIC, "char_length", "cast"]))
            raise self.error(f"unknown function '{name_tok.text}' (supported: {supported})",
                             name_tok)
        args: list[Expr] = []
        if not (self.peek().kind == "op" and self.peek().text == ")"):
            args.append(self.expr(0))
            while self.peek().kind == "op" and self.peek().text == ",":
                self.advance()
                args.append(self.expr(0))
        self.expect_op(")")
        if name in VARIADIC:
            if not args:
                raise self.error(f"{name} takes at least one argument", name_tok)
            return Call(name, tuple(args))
        most = OPTIONAL_ARGUMENTS.get(name, FUNCTIONS[name])
        if not FUNCTIONS[name] <= len(args) <= most:
            count = f"{FUNCTIONS[name]}" + (f" to {most}" if most > FUNCTIONS[name] else "")
            raise self.error(f"{name} takes {count} argument(s), got {len(args)}", name_tok)
        if name in ("starts_with", "ends_with") and not (
            isinstance(args[1], Literal) and isinstance(args[1].value, str | None)
        ):
            raise self.error(f"{name} needs a string literal as its second argument", name_tok)
        return Call(name, tuple(args))

    def cast(self) -> Call:
        value = self.expr(0)
        self.expect_keyword("AS")
        target = self.type_name()
        self.expect_op(")")
        return Call("cast", (value, Literal(None, target)))

    def type_name(self) -> pa.DataType:
        tok = self.advance()
        name = tok.text.upper() if tok.kind == "ident" else ""
        if name == "DOUBLE" and self.peek().text.upper() == "PRECISION":
            self.advance()
        params: list[int] = []
        if self.peek().kind == "op" and self.peek().text == "(":
            self.advance()
            while True:
                num = self.advance()
                if num.kind != "int":
                    raise self.error(f"expected an integer but found {num.describe()}", num)
                params.append(int(num.text))
                if self.expect_any_op(",", ")") == ")":
                    break
        if name in ("DECIMAL", "NUMERIC"):
            precision, scale = (params + [0])[:2] if params else (38, 10)
            if len(params) > 2 or not 0 < precision <= 76 or not 0 <= scale <= precision:
                raise self.error(f"invalid DECIMAL({', '.join(map(str, params))})", tok)
            return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
        if name not in _TYPES:
            raise self.error(f"unknown type {tok.describe()} in CAST", tok)
        if params and name not in ("VARCHAR", "CHAR"):
            raise self.error(f"type {name} takes no parameters", tok)
        if name in _UNSIGNED and self.peek().kind == "ident" and \
                self.peek().text.upper() == "UNSIGNED":
            self.advance()
            return _UNSIGNED[name]
        return _TYPES[name]

    def expect_any_op(self, *ops: str) -> str:
        tok = self.advance()
        if tok.kind != "op" or tok.text not in ops:
            expected = " or ".join(f"'{o}'" for o in ops)
            raise self.error(f"expected {expected} but found {tok.describe()}", tok)
        return tok.text


# ---------------------------------------------------------------------- rendering


_PLAIN_IDENT = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED = frozenset({"and", "or", "not", "is", "null", "in", "between", "like", "ilike",
                       "true", "false", "as", "date", "timestamp", "cast", "case", "when",
                       "then", "else", "end", "distinct", "from"})
_SQL_TYPES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
              pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
              pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN", pa.date32(): "DATE",
              pa.timestamp("us"): "TIMESTAMP", pa.uint8(): "TINYINT UNSIGNED",
              pa.uint16(): "SMALLINT UNSIGNED", pa.uint32(): "INT UNSIGNED",
              pa.uint64(): "BIGINT UNSIGNED"}


def _quote_ident(name: str) -> str:
    """``name`` as the filter language, SQL statements and DataFusion all read it: bare
    when plain, else in backticks (double quotes would be a string in a filter)."""
    if _PLAIN_IDENT.fullmatch(name) and name not in _RESERVED:
        return name
    return "`" + name.replace("`", "``") + "`"


def sql_type_name(t: pa.DataType) -> str:
    """How filters name Arrow type ``t`` in SQL (``CAST(x AS <name>)``)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if t in _SQL_TYPES:
        return _SQL_TYPES[t]
    raise InvalidInputError(f"type {t} has no SQL name in lance_sql filters")


def _literal_sql(lit: Literal) -> str:
    if lit.type is not None and pa.types.is_dictionary(lit.type):  # spelt as its values
        return _literal_sql(Literal(lit.value, lit.type.value_type))
    v = lit.value
    if isinstance(v, tuple) and lit.type is not None and pa.types.is_list(lit.type):
        element = lit.type.value_type  # the elements' type is the list's: no CASTs
        return "[" + ", ".join(_literal_sql(Literal(x, element if isinstance(x, tuple)
                                                    else None)) for x in v) + "]"
    if v is None:
        text = "NULL"
    elif isinstance(v, bool):
        text = "TRUE" if v else "FALSE"
    elif isinstance(v, int):
        text = str(v)
    elif isinstance(v, float):
        text = repr(v) if math.isfinite(v) else f"CAST('{v}' AS DOUBLE)"
    elif isinstance(v, str):
        text = "'" + v.replace("'", "''") + "'"
    elif isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    elif isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    elif isinstance(v, Decimal):
        return f"CAST('{v}' AS {sql_type_name(literal_type(lit))})"
    elif isinstance(v, bytes):
        text = f"X'{v.hex().upper()}'"
    else:
        raise InvalidInputError(f"cannot render literal {v!r} as SQL")
    if lit.type is None or lit.type == pa.null() or lit.type == literal_type(Literal(v)) \
            or _same_family(lit.type, v):
        return text
    return f"CAST({text} AS {sql_type_name(lit.type)})"


def _same_family(t: pa.DataType, value: object) -> bool:
    """Whether a string (bytes) literal of type ``t`` reads the same as a plain string
    (binary) one: its other widths and layouts compare alike, so it needs no CAST (nor
    has one in SQL)."""
    if isinstance(value, str):
        return pa.types.is_string(t) or pa.types.is_large_string(t) or \
            pa.types.is_string_view(t)
    if isinstance(value, bytes):
        return pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t)
    return False


def describe_sql(expr: Expr) -> str:
    """:func:`to_sql` for messages and plan labels, which must never fail a query: an
    expression SQL cannot spell (a literal of a type without a SQL name) is shown as
    our model prints it."""
    try:
        return to_sql(expr)
    except InvalidInputError:
        return repr(expr)


def to_sql(expr: Expr) -> str:
    """Render ``expr`` as SQL text that :func:`parse_predicate` (and DataFusion) reads back.

    Fully parenthesised; column names are quoted (in backticks) unless plain lower-case
    identifiers.
    """
    if isinstance(expr, Column):
        return ".".join(_quote_ident(p) for p in expr.path)
    if isinstance(expr, Literal):
        return _literal_sql(expr)
    op, a = expr.op, [to_sql(x) for x in expr.args]
    if op in ("and", "or"):
        return "(" + f" {op.upper()} ".join(a) + ")"
    if op in COMPARISONS or op in ARITHMETIC:
        return f"({a[0]} {op} {a[1]})"
    if op == "cast":
        return f"CAST({a[0]} AS {sql_type_name(cast_target(expr))})"
    simple = {"not": "(NOT {0})", "negate": "(- {0})", "is_null": "({0} IS NULL)",
              "is_not_null": "({0} IS NOT NULL)", "between": "({0} BETWEEN {1} AND {2})",
              "like": "({0} LIKE {1})", "ilike": "({0} ILIKE {1})"}
    if op in simple:
        return simple[op].format(*a)
    if op == "in":
        return f"({a[0]} IN ({', '.join(a[1:])}))"
    if op == "||":
        return f"({a[0]} || {a[1]})"
    if op in ("is_distinct", "is_not_distinct"):
        negation = " NOT" if op == "is_not_distinct" else ""
        return f"({a[0]} IS{negation} DISTINCT FROM {a[1]})"
    if op == "case":
        pairs = "".join(f" WHEN {a[i]} THEN {a[i + 1]}" for i in range(0, len(a) - 1, 2))
        otherwise = f" ELSE {a[-1]}" if len(a) % 2 else ""
        return f"(CASE{pairs}{otherwise} END)"
    return f"{op}({', '.join(a)})"
