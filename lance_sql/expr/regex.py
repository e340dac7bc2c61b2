"""``regexp_like`` patterns in DataFusion's (Rust ``regex``) dialect, rewritten for RE2,
the engine of pyarrow's ``match_substring_regex``.

The two read most patterns alike, but not all: Rust's ``\\d``, ``\\s`` and ``\\w`` are
Unicode classes where RE2's are ASCII (``'^\\w+$'`` matches ``'héllo'`` in DataFusion
only), Rust's ``x`` flag (whitespace and ``#`` comments ignored) is unknown to RE2, and
Rust reads ``[a-z&&[^aeiou]]`` (set operations, nested classes) where RE2 reads literal
characters, and RE2 has no CRLF mode (``R``: ``.`` stops at ``\r`` too). So
:func:`re2_pattern` rewrites these as RE2 spells them and refuses what RE2 would read
otherwise: a clear error beats other rows. ``\\b`` / ``\\B``
are ASCII word boundaries in RE2; they agree with Rust's on ASCII text, which
:func:`re2_pattern` reports so the caller can insist on it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr.udfs import scalar_function

__all__ = ["ascii_text_function", "re2_pattern"]

# Rust's \d is \p{Nd}; \s is Unicode White_Space; \w is Alphabetic, marks, decimal
# digits, connector punctuation and the joiners (Alphabetic: letters, letter numbers,
# and the few Other_Alphabetic symbols outside the marks: circled and squared letters)
_DIGIT = r"\p{Nd}"
_SPACE = (r"\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}"
          r"\x{3000}")
_WORD = (r"\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}"
         r"\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}")
_CLASS_BODY = {"d": _DIGIT, "s": _SPACE, "w": _WORD}
_FLAGS = "imsUuxR"  # Rust's flags
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _refuse(pattern: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"regexp_like pattern {pattern!r}: {why} is not supported")


def re2_pattern(pattern: str, flags: str | None) -> tuple[str, bool]:
    """``pattern`` with DataFusion's ``flags`` as an RE2 pattern reading the same, and
    whether its word boundaries need ASCII text to agree. InvalidInputError for flags
    DataFusion refuses and for Rust syntax that RE2 would read differently."""
    flags = flags or ""
    if "g" in flags:
        raise InvalidInputError("regexp_like does not support the \"global\" flag 'g' "
                                "(as in DataFusion)")
    for i, f in enumerate(flags):
        if f not in _FLAGS or f in flags[:i]:
            raise InvalidInputError(f"regexp_like flags {flags!r}: {f!r} is not a flag, or "
                                    "repeats one (flags: i, m, s, U, u, x, R)")
    crlf = "R" in flags and "s" not in flags  # '.' then stops at \r as at \n
    if "R" in flags and ("m" in flags or "(?" in pattern):
        raise _refuse(pattern, "the CRLF flag 'R' with multi-line or inline flags")
    out = _Rewriter(pattern, verbose="x" in flags, crlf=crlf)
    body = out.run()
    kept = "".join(f for f in flags if f in "imsU")
    return (f"(?{kept}){body}" if kept else body), out.boundaries


class _Rewriter:
    def __init__(self, pattern: str, verbose: bool, crlf: bool) -> None:
        self.p, self.i, self.verbose, self.crlf = pattern, 0, verbose, crlf
        self.out: list[str] = []
        self.boundaries = False

    def run(self) -> str:
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                self.out.append(self.escape(in_class=False))
            elif c == "[":
                self.out.append(self.char_class())
            elif c == "(" and p.startswith("(?", self.i):
                self.group_flags()
            elif self.verbose and c.isspace():
                self.i += 1
            elif c == "{" and self.p.startswith("{,", self.i):
                raise InvalidInputError(f"regexp_like pattern {self.p!r}: a repetition "
                                        "needs its least count (as in DataFusion)")
            elif self.crlf and c == ".":
                self.out.append(r"[^\n\r]")
                self.i += 1
            elif self.verbose and c == "#":
                end = p.find("\n", self.i)
                self.i = len(p) if end < 0 else end + 1
            else:
                self.out.append(c)
                self.i += 1
        return "".join(self.out)

    def group_flags(self) -> None:
        """``(?flags)`` / ``(?flags:``: RE2 knows i, m, s and U; Rust's u, x and R change
        how the rest reads, and are refused."""
        j = self.i + 2
        while j < len(self.p) and (self.p[j].isalpha() or self.p[j] == "-"):
            j += 1
        spelled = self.p[self.i + 2:j]
        if j < len(self.p) and self.p[j] in ":)" and spelled and \
                any(f in "uxR" for f in spelled):
            raise _refuse(self.p, f"the inline flags (?{spelled})")
        self.out.append("(?")
        self.i += 2

    def escape(self, in_class: bool) -> str:
        """The escape at ``self.i`` (a backslash) as RE2 reads Rust's; moves past it."""
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise InvalidInputError(f"regexp_like pattern {p!r} ends in a lone backslash")
        c = p[i + 1]
        self.i = i + 2
        if c in _CLASS_BODY:
            return _CLASS_BODY[c] if in_class else f"[{_CLASS_BODY[c]}]"
        if c in "DSW":
            if c == "D":
                return r"\P{Nd}"
            if in_class:
                raise _refuse(p, f"\\{c} inside a bracketed class")
            return f"[^{_CLASS_BODY[c.lower()]}]"
        if c in "bB" and not in_class:
            if p.startswith("{", self.i):
                raise _refuse(p, "\\b{...}")
            self.boundaries = True
            return "\\" + c
        if c in "<>":
            raise _refuse(p, f"the word boundary \\{c}")
        if c in _HEX_ESCAPES and not (c == "x" and not p.startswith("{", self.i)):
            return self.code_point(c)
        if c.isspace():  # (an escaped space stays, even under the x flag)
            return rf"\x{{{ord(c):X}}}"
        return "\\" + c

    def code_point(self, kind: str) -> str:
        r"""``\u{...}``, ``\u0041``, ``\U0001F600`` (and ``\x{...}``) as RE2's ``\x{...}``."""
        p, i = self.p, self.i
        if p.startswith("{", i):
            end = p.find("}", i)
            digits = p[i + 1:end] if end > 0 else ""
            self.i = end + 1
        else:
            digits = p[i:i + _HEX_ESCAPES[kind]]
            self.i = i + len(digits)
            if len(digits) != _HEX_ESCAPES[kind]:
                digits = ""
        try:
            value = int(digits, 16)
        except ValueError:
            raise InvalidInputError(f"regexp_like pattern {p!r}: bad escape \\{kind}") from None
        return rf"\x{{{value:X}}}"

    def char_class(self) -> str:
        """A bracketed class from ``self.i`` (its ``[``), read as Rust reads it."""
        p = self.p
        self.i += 1
        parts = ["["]
        if p.startswith("^", self.i):
            parts.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(p):
                raise InvalidInputError(f"regexp_like pattern {p!r}: unclosed class")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                parts.append("]")
                return "".join(parts)
            first = False
            if c == "\\":
                parts.append(self.escape(in_class=True))
            elif c == "[":
                end = p.find(":]", self.i)
                if p.startswith("[:", self.i) and end > 0 and p[self.i + 2:end].isalpha():
                    parts.append(p[self.i:end + 2])
                    self.i = end + 2
                else:
                    raise _refuse(p, "a class nested in a class")
            elif c in "&~-" and p.startswith(c * 2, self.i):
                raise _refuse(p, f"the class set operation {c * 2}")
            elif self.verbose and c.isspace():
                self.i += 1
            else:
                parts.append(c)
                self.i += 1


def _ascii_only(strings: pa.Array) -> pa.Array:
    if pc.all(pc.string_is_ascii(strings)).as_py() is not False:  # (None: no strings)
        return strings
    raise InvalidInputError(
        "regexp_like: a pattern with \\b or \\B over text that is not all ASCII is not "
        "supported (its Unicode word boundaries differ from the engine's ASCII ones)")


def ascii_text_function(t: pa.DataType) -> str:
    """The name of a pyarrow function passing strings of type ``t`` through when all are
    ASCII, failing otherwise (registered on first use)."""
    return scalar_function(f"lance_sql_ascii_text_{t}", _ascii_only, {"strings": t}, t,
                           "strings unchanged, if all of them are ASCII")
