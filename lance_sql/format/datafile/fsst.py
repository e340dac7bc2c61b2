"""FSST string decompression (the symbol tables Lance 2.1/2.2 store per page), in numpy.

A symbol table is 2312 bytes: an 8-byte little-endian header (bytes 4-7 ``b"TSSF"``, byte 3
the encoder switch, byte 2 the suffix limit, byte 1 the terminator, byte 0 the number of
symbols ``n``), then ``n`` symbols of 8 bytes and ``n`` symbol lengths. With the switch
off the strings are stored raw. Otherwise each compressed byte ``c < 255`` stands for
symbol ``c`` and ``255`` escapes the next byte, which is copied as is.

Decoding is vectorised: escapes are found from runs of 255 bytes (a run always starts on a
code, so escapes and literals alternate inside it), every input byte gets an output length
(symbol length, 0 for an escape, 1 for a literal) and its symbol as one zero-padded 8-byte
word; output positions are the running sum of the lengths, and one scatter in input order
through a view with a one-byte stride writes the words, each word's padding overwritten by
the next word. From a few thousand codes on, codes go two at a time: Arrow's ``take`` of
a binary array of symbol pairs (a 65536-entry table, one entry per pair of codes, plus one
per pair holding an escaped byte) does the work in C.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError

TABLE_SIZE = 8 + 256 * 8 + 256
_TAKE_MIN = 1 << 12  # codes; from here Arrow's take of symbol pairs decodes fastest
_MAGIC = b"TSSF"
ESCAPE = 255


@dataclass(frozen=True)
class SymbolTable:
    """An FSST symbol table, as lookup arrays by code."""
    enabled: bool
    lengths: np.ndarray  # (512,) uint8: codes 0..255, then 256 + b for literal byte b
    symbols: np.ndarray  # (512,) uint64: the symbol bytes, little-endian, zero padded


def parse_symbol_table(raw: bytes, where: str) -> SymbolTable:
    """Decode an FSST symbol table; a malformed one is a FormatError naming ``where``."""
    if len(raw) < 8 or raw[4:8] != _MAGIC:
        raise FormatError(f"{where}: FSST symbol table has no TSSF header")
    nsym = raw[0]
    enabled = bool(raw[3] & 1)
    need = 8 + 9 * nsym
    if len(raw) < need:
        raise FormatError(f"{where}: FSST symbol table of {len(raw)} bytes holds {nsym} symbols")
    syms = np.zeros((512, 8), np.uint8)
    lens = np.zeros(512, np.uint8)
    if nsym:
        syms[:nsym] = np.frombuffer(raw, np.uint8, 8 * nsym, 8).reshape(nsym, 8)
        lens[:nsym] = np.frombuffer(raw, np.uint8, nsym, 8 + 8 * nsym)
    if np.any(lens[:nsym] > 8) or np.any(lens[:nsym] == 0):
        raise FormatError(f"{where}: FSST symbol table has symbol lengths outside 1..8")
    syms[256:, 0] = np.arange(256, dtype=np.uint8)
    lens[256:] = 1
    lens[nsym:256] = 0  # unused codes decode to nothing (corrupt input, never written)
    lens[ESCAPE] = 0  # an escape code itself produces nothing; its literal produces 1
    syms[np.arange(8)[None, :] >= lens[:, None]] = 0
    return SymbolTable(enabled, lens, syms.view("<u8").reshape(-1).copy())


def _pair_table(table: SymbolTable) -> tuple[np.ndarray, np.ndarray]:
    """Codes taken two at a time: (65536,) 16-byte words and (65536,) byte lengths.

    Entry ``a + 256 * b`` (code ``a`` then code ``b``, as a little-endian uint16) holds
    symbol ``a``'s bytes followed by symbol ``b``'s, zero padded.
    """
    lens = table.lengths[:256].astype(np.uint64)
    syms = table.symbols[:256]
    a = np.tile(np.arange(256), 256)
    b = np.repeat(np.arange(256), 256)
    sa, sb, bits = syms[a], syms[b], lens[a] * np.uint64(8)
    # numpy shifts of 64 bits are undefined, so 0- and 64-bit shifts are special cased
    mid = (bits > 0) & (bits < 64)
    sh = np.where(mid, bits, np.uint64(8))
    words = np.empty((65536, 2), np.uint64)
    words[:, 0] = np.where(mid, sa | (sb << sh), np.where(bits == 0, sb, sa))
    words[:, 1] = np.where(mid, sb >> (np.uint64(64) - sh), np.where(bits == 0, 0, sb))
    return words.view("V16").reshape(-1), (lens[a] + lens[b]).astype(np.uint8)


def _scatter(out: np.ndarray, width: int, pos: np.ndarray, words: np.ndarray,
             lengths: np.ndarray) -> None:
    """Write ``words`` (``width`` bytes each) at byte offsets ``pos`` of ``out``, in order.

    The target is a view of ``out`` with a one-byte stride, so word ``i`` covers bytes
    ``pos[i]..pos[i]+width-1``; each write's zero padding is overwritten by the next word
    (numpy's fancy assignment writes in index order), and ``out`` has ``width`` spare
    bytes at the end for the last word's padding. numpy documents no order for repeated
    indices, so :data:`_ORDERED` checks it once; without it each byte is written once,
    byte plane by byte plane (``lengths``: the real bytes of each word).
    """
    if _ORDERED:
        view = np.ndarray((out.size - width + 1,), f"V{width}", out, 0, (1,))
        view[pos] = words
        return
    planes = words.view(np.uint8).reshape(-1, width)
    for k in range(width):
        keep = lengths > k
        out[pos[keep] + k] = planes[keep, k]


def _scatter_is_ordered() -> bool:
    """Whether overlapping fancy assignments keep the last write (numpy's behaviour)."""
    rng = np.random.default_rng(0)
    pos = np.cumsum(rng.integers(1, 9, 20_000))
    words = rng.integers(0, 1 << 63, pos.size, dtype=np.uint64)
    out = np.zeros(int(pos[-1]) + 8, np.uint8)
    np.ndarray((out.size - 7,), "V8", out, 0, (1,))[pos] = words.view("V8")
    # ordered writes leave in each byte the last word starting at or before it
    byte = np.arange(int(pos[0]), int(pos[-1]) + 8)
    owner = np.searchsorted(pos, byte, side="right") - 1
    expected = words.view(np.uint8).reshape(-1, 8)[owner, byte - pos[owner]]
    return bool(np.array_equal(out[pos[0]:], expected))


def decompress(
    table: SymbolTable, data: np.ndarray, offsets: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Decode strings ``data[offsets[i]:offsets[i+1]]``; returns (bytes, int64 offsets).

    Every code is looked up as one 8-byte word (symbol bytes, zero padded); output
    positions are the running sum of symbol lengths, and one ordered scatter of the words
    through a one-byte-stride view writes them, each word's padding overwritten by the
    next. Large inputs without escapes go two codes at a time through a 65536-entry table
    of 16-byte words, which halves the per-code work.
    """
    offsets = offsets.astype(np.int64, copy=False)
    start = int(offsets[0]) if offsets.size else 0
    end = int(offsets[-1]) if offsets.size else 0
    if not table.enabled:
        return data[start:end], offsets - start
    codes = data[start:end]
    n = codes.size
    if n == 0:
        return np.zeros(0, np.uint8), np.zeros(offsets.size, np.int64)
    bounds = offsets - start
    if bounds.min() < 0 or bounds.max() > n:
        raise FormatError(f"{where}: FSST string offsets outside the compressed data")
    escapes = np.flatnonzero(codes == ESCAPE)
    lit = np.zeros(0, np.int64)
    if escapes.size:
        lit = _literals(escapes, n, where)
        starts = np.zeros(n + 1, bool)
        starts[bounds[1:-1]] = True
        if starts[lit].any():
            raise FormatError(f"{where}: FSST escape crosses a string boundary")
    if n >= _TAKE_MIN:
        return _decompress_take(table, codes, bounds, lit)
    lengths = np.take(table.lengths, codes)
    words = np.take(table.symbols, codes)
    if lit.size:
        lengths[lit] = 1  # a literal is its own byte (its escape code yields nothing)
        words[lit] = codes[lit]
    cum = np.empty(n + 1, np.int64)
    cum[0] = 0
    np.cumsum(lengths, out=cum[1:])
    total = int(cum[-1])
    out = np.empty(total + 8, np.uint8)
    _scatter(out, 8, cum[:-1], words.view("V8"), lengths)
    return out[:total], cum[bounds]


def _literal_pairs(table: SymbolTable, codes: np.ndarray, lit: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The 16-byte words and byte lengths of the code pairs holding the literals at
    ``lit`` (positions in ``codes``, none past its end): the byte alone when its escape
    comes first in the pair (the literal is second), else the byte then the next code's
    symbol. A pair never holds two literals."""
    second = (lit & 1).astype(bool)
    byte = codes[lit].astype(np.uint64)
    after = codes[np.where(second, lit, lit + 1)]  # the next code when the literal is first
    sym = table.symbols[after]
    fixed = np.empty((lit.size, 2), np.uint64)
    fixed[:, 0] = np.where(second, byte, byte | (sym << np.uint64(8)))
    fixed[:, 1] = np.where(second, np.uint64(0), sym >> np.uint64(56))
    lens = np.where(second, 1, 1 + table.lengths[after]).astype(np.uint8)
    return fixed.view("V16").reshape(-1), lens


def _decompress_take(table: SymbolTable, codes: np.ndarray, bounds: np.ndarray,
                     lit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Codes two at a time by Arrow's ``take`` of a binary array of symbol pairs (65536
    entries, one per pair of codes, then one per pair holding a literal): its values are
    the decoded bytes, its offsets give each pair's end.

    An odd last code is paired with the escape code (which decodes to nothing). A pair
    holding a literal (``lit``: sorted positions) gets its own entry: the byte alone when
    its escape comes first in the pair, else the byte then the next code's symbol. A
    string that starts after an odd number of codes starts inside a pair, after its first
    code's bytes.
    """
    if codes.size & 1:
        codes = np.r_[codes, np.uint8(ESCAPE)]
    words, lens = _pair_table(table)
    idx: np.ndarray = codes.view("<u2")
    if lit.size:
        fixed, fixed_lens = _literal_pairs(table, codes, lit)
        words = np.concatenate([words, fixed])
        lens = np.concatenate([lens, fixed_lens])
        idx = idx.astype(np.uint32)
        idx[lit >> 1] = 65536 + np.arange(lit.size, dtype=np.uint32)
    offs = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    data = words.view(np.uint8).reshape(-1, 16)[np.arange(16)[None, :] < lens[:, None]]
    large = idx.size * 16 >= 1 << 31  # the output could overflow 32-bit offsets
    symbols = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), lens.size,
                                    [None, pa.py_buffer(offs if large else offs.astype(np.int32)),
                                     pa.py_buffer(data)])  # fmt: skip
    taken = symbols.take(pa.array(idx))
    width = 8 if large else 4
    ends = np.frombuffer(taken.buffers()[1], f"<i{width}", idx.size + 1, taken.offset * width)
    size = int(ends[-1])
    out = np.frombuffer(taken.buffers()[2], np.uint8, size) if size else np.zeros(0, np.uint8)
    head = bounds & ~1
    first = np.take(table.lengths, np.take(codes, head, mode="clip"))
    if lit.size:  # a literal first in its pair yields one byte
        at = np.minimum(np.searchsorted(lit, head), lit.size - 1)
        first[lit[at] == head] = 1
    first *= (bounds & 1).astype(np.uint8)
    return out, ends[bounds >> 1].astype(np.int64) + first


def _literals(escapes: np.ndarray, n: int, where: str) -> np.ndarray:
    """Positions of the escaped (literal) bytes, from the positions of all 255 bytes.

    A byte after a non-255 byte is a code, so a run of 255s starts on a code: inside a
    run escapes sit at even offsets and the literals they announce at odd ones. Only the
    255s are looked at (few in practice), never every code.
    """
    k = np.arange(escapes.size)
    run_start = np.r_[True, np.diff(escapes) != 1]
    first = np.maximum.accumulate(np.where(run_start, k, 0))
    lit = escapes[(k - first) % 2 == 0] + 1
    if lit.size and int(lit[-1]) >= n:
        raise FormatError(f"{where}: FSST data ends with an escape byte")
    return lit


_ORDERED = _scatter_is_ordered()
