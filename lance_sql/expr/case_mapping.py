"""``upper()`` and ``lower()`` in filters with the full Unicode case mapping, as DataFusion
(so SQL, and pylance's filters) applies them.

Arrow's ``utf8_upper`` / ``utf8_lower`` map each character to one character: ``'ß'``
stays ``'ß'``, ``'ǰ'`` stays ``'ǰ'``, a word-final ``'Σ'`` becomes ``'σ'``. The full
mapping (Rust's ``to_uppercase`` / ``to_lowercase``, Python's ``str.upper`` /
``str.lower``) gives ``'SS'``, ``'J̌'`` and ``'ς'``, so ``upper(k) = 'SS'`` matched other
rows through the Python API than through SQL. The characters whose full mapping differs
are few (102 expand when upper-cased; ``'İ'`` expands and ``'Σ'`` depends on its place
when lower-cased): strings holding none of them take Arrow's kernel, the rest (rare) are
mapped by Python's ``str`` methods. Only strings outside ASCII are searched for them (1M
strings: all ASCII ~1.3x the time of Arrow's kernel alone, 1% outside ASCII ~1.7x, all
outside ASCII ~5.5x).
Registered as pyarrow scalar functions on first use.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr.udfs import scalar_function

__all__ = ["case_function", "full_case"]

_SIMPLE = {"upper": "utf8_upper", "lower": "utf8_lower"}


@functools.cache
def _special(op: str) -> str:
    """An RE2 class of the characters whose full ``op`` mapping is not Arrow's simple
    one: those it maps to several characters (all below U+FB18), and the capital sigma,
    whose lower case depends on whether it ends a word."""
    chars = [chr(c) for c in range(0xFB18)
             if not 0xD800 <= c < 0xE000 and len(getattr(chr(c), op)()) > 1]
    if op == "lower":
        chars.append("\u03a3")
    return "[" + "".join(chars) + "]"


def full_case(op: str, values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``values`` (strings) upper- or lower-cased (``op``) with the full mapping."""
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([full_case(op, c) for c in values.chunks], values.type)
    simple = pc.call_function(_SIMPLE[op], [values])
    # (every special character is outside ASCII: only the other strings are searched)
    other = pc.invert(pc.string_is_ascii(values)).fill_null(False)
    if not pc.any(other).as_py():
        return simple
    special = pc.match_substring_regex(values.filter(other), _special(op))
    if not pc.any(special).as_py():
        return simple
    special = pc.replace_with_mask(other, other, special.fill_null(False))
    mapped = [getattr(s, op)() for s in values.filter(special).to_pylist()]
    return pc.replace_with_mask(simple, special, pa.array(mapped, values.type))


def case_function(op: str, t: pa.DataType) -> str | None:
    """The name of the scalar function applying ``op`` (``upper`` / ``lower``) to strings
    of type ``t`` with the full mapping, registered on first use; None for other types
    (Arrow's kernel then says what it says of them)."""
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return None
    return scalar_function(f"lance_sql_full_{op}_{t}", functools.partial(full_case, op),
                           {"values": t}, t, f"{op} with the full Unicode case mapping")
