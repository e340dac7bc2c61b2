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
the next word. From a few thousand codes on, codes go two at a time through Arrow: the
views of a 65536-entry table of symbol pairs (plus one entry per pair holding an escaped
byte) are gathered by a fixed-width ``take`` and cast from binary views to binary, which
lays the bytes out back to back in C; large pages go in blocks over a few threads (both
calls release the GIL). That cast, ~8 ns a pair, is what bounds FSST decoding here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import parallel
from lance_sql.format.datafile.memory import pool_bytes

TABLE_SIZE = 8 + 256 * 8 + 256
_TAKE_MIN = 1 << 12  # codes; from here pairs decoded by Arrow are fastest
_PAIR_BLOCK = 1 << 18  # pairs decoded per Arrow call (4 MiB of views), the unit of threading
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

    Small inputs: every code is looked up as one 8-byte word (symbol bytes, zero padded);
    output positions are the running sum of symbol lengths, and one ordered scatter of
    the words through a one-byte-stride view writes them, each word's padding overwritten
    by the next. From :data:`_TAKE_MIN` codes on, codes go two at a time through Arrow
    (:class:`_PairDecoder`), which halves the per-code work and runs in C.
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
    lit0 = np.zeros(0, np.int64)
    if bounds.min() < 0 or bounds.max() > n:
        raise FormatError(f"{where}: FSST string offsets outside the compressed data")
    # no escape below the largest code (one cheap reduction, the common case)
    escapes = np.flatnonzero(codes == ESCAPE) if int(codes.max()) == ESCAPE else lit0
    lit = lit0
    if escapes.size:
        lit = _literals(escapes, n, where)
        inner = bounds[1:-1]  # a literal may not start a string
        at = np.minimum(np.searchsorted(inner, lit), max(inner.size - 1, 0))
        if inner.size and np.any(inner[at] == lit):
            raise FormatError(f"{where}: FSST escape crosses a string boundary")
    if n >= _TAKE_MIN:
        return _decompress_pairs(table, codes, bounds, lit)
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


def _pair_views(table: SymbolTable, fixed: np.ndarray, fixed_lens: np.ndarray
                ) -> tuple[pa.Array, pa.Buffer, pa.Array]:  # fmt: skip
    """The code pairs as Arrow binary-view structs: a fixed-size-binary(16) array of 65536
    views (entry ``a + 256 * b``: symbol ``a`` then symbol ``b``), then one per pair in
    ``fixed`` (16-byte words, byte lengths ``fixed_lens``: a literal and at most one
    symbol, so at most 9 bytes); the buffer the views of over 12 bytes point into; and
    each entry's byte length (uint8). The 65536 are kept for the last few tables (every
    page of a column often has the same one, and each scan reads it again).
    """
    key = table.symbols[:256].tobytes() + table.lengths[:256].tobytes()
    views, body, lens = _table_views(key)
    if fixed.size:
        extra, extra_body = _views_of(fixed, fixed_lens)
        assert extra_body.size == 0  # literal pairs are short: all inline
        views = np.concatenate([views, extra])
        lens = np.concatenate([lens, fixed_lens])
    table_array = pa.Array.from_buffers(pa.binary(16), lens.size,
                                        [None, pa.py_buffer(views)])  # fmt: skip
    return table_array, body, pa.array(lens)


@lru_cache(maxsize=8)
def _table_views(key: bytes) -> tuple[np.ndarray, pa.Buffer, np.ndarray]:
    """Views, long-pair buffer and lengths of the 65536 pairs of the table whose 256
    symbol words and lengths are ``key`` (read-only: shared between threads)."""
    symbols = np.frombuffer(key, "<u8", 256)
    lengths = np.frombuffer(key, np.uint8, 256, 2048)
    words, lens = _pair_table(SymbolTable(True, lengths, symbols))
    views, body = _views_of(words, lens)
    views.flags.writeable = lens.flags.writeable = False
    return views, pa.py_buffer(body if body.size else np.zeros(16, np.uint8)), lens


def _views_of(words: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary views (rows of 16 bytes) of byte strings given as zero-padded 16-byte words:
    a 4-byte length then, up to 12 bytes, the bytes themselves; longer ones hold their
    first 4 bytes, buffer 0 and their offset in the returned buffer of their words."""
    data = words.view(np.uint8).reshape(-1, 16)
    views = np.zeros((lens.size, 16), np.uint8)
    views[:, :4] = lens.astype("<u4").view(np.uint8).reshape(-1, 4)
    views[:, 4:] = data[:, :12]
    long = np.flatnonzero(lens > 12)
    body = data[long].reshape(-1)  # each long pair's 16 bytes (padding included)
    views[long, 8:12] = 0  # buffer 0
    views[long, 12:] = (np.arange(long.size, dtype="<u4") * 16).view(np.uint8).reshape(-1, 4)
    return views, body


class _PairDecoder:
    """Codes two at a time, decoded in C by Arrow, block by block over a few threads.

    Pair ``j`` is codes ``2j, 2j+1``, a little-endian uint16 into the pair table (see
    :func:`_pair_views`); pairs holding a literal have their own entries (index 65536 and
    up). A block of pairs is decoded by gathering its views (a fixed-width ``take``) and
    casting them from binary views to binary, which copies the bytes back to back; both
    calls release the GIL. Block sizes are summed first, so that each block is copied
    into the output while its bytes are still in cache and the string offsets that fall
    in it are read from its pair ends straight away.
    """

    def __init__(self, views: pa.Array, body: pa.Buffer, lens: pa.Array, idx: pa.Array,
                 bounds: np.ndarray) -> None:  # fmt: skip
        self.views, self.body, self.lens, self.idx = views, body, lens, idx
        npair = len(idx)
        self.firsts = list(range(0, npair, _PAIR_BLOCK)) or [0]
        self.counts = [min(_PAIR_BLOCK, npair - a) for a in self.firsts]
        self.pair = bounds >> 1  # the pair each string bound falls in (non-decreasing)
        cut = np.searchsorted(self.pair, np.asarray(self.firsts[1:], np.int64)).tolist()
        self.spans = list(zip([0, *cut], [*cut, bounds.size], strict=True))

    def size(self, k: int) -> int:
        """Decoded bytes of block ``k``."""
        taken = self.lens.take(self.idx.slice(self.firsts[k], self.counts[k]))
        return int(np.frombuffer(taken.buffers()[1], np.uint8, len(taken),
                                 taken.offset).sum(dtype=np.int64))  # fmt: skip

    def decode(self, k: int, out: np.ndarray, at: int, ends: np.ndarray) -> None:
        """Decode block ``k`` into ``out[at:]``; the string bounds in it into ``ends``."""
        first, count = self.firsts[k], self.counts[k]
        taken = self.views.take(self.idx.slice(first, count))
        pairs = pa.Array.from_buffers(pa.binary_view(), count,
                                      [None, taken.buffers()[1], self.body])  # fmt: skip
        flat = pairs.cast(pa.binary())
        pair_ends = np.frombuffer(flat.buffers()[1], "<i4", count + 1, flat.offset * 4)
        size = int(pair_ends[-1])
        out[at : at + size] = np.frombuffer(flat.buffers()[2], np.uint8, size)
        lo, hi = self.spans[k]
        ends[lo:hi] = pair_ends[self.pair[lo:hi] - first]
        ends[lo:hi] += at


def _decompress_pairs(table: SymbolTable, codes: np.ndarray, bounds: np.ndarray,
                      lit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Codes two at a time (see :class:`_PairDecoder`); an odd last code is decoded on
    its own after the pairs. A pair holding a literal (``lit``: sorted positions) gets
    its own entry: the byte alone when its escape comes first in the pair, else the byte
    then the next code's symbol. A string that starts after an odd number of codes starts
    inside a pair, after its first code's bytes.
    """
    n = codes.size
    npair = n >> 1
    in_pairs = lit[lit < 2 * npair] if lit.size else lit
    views, body, lens = _pair_views(table, *_literal_pairs(table, codes, in_pairs))
    idx: np.ndarray = codes[: 2 * npair].view("<u2")
    if in_pairs.size:
        idx = idx.astype(np.uint32)
        idx[in_pairs >> 1] = 65536 + np.arange(in_pairs.size, dtype=np.uint32)
    decoder = _PairDecoder(views, body, lens, pa.array(idx), bounds)
    blocks = range(len(decoder.firsts))
    sizes = parallel.map_parts(decoder.size, blocks)
    base = np.cumsum([0, *sizes]).tolist()
    tail = b""
    if n & 1:  # the odd last code: a literal (its escape ends the last pair) or a symbol
        last = int(codes[-1])
        if lit.size and int(lit[-1]) == n - 1:
            tail = bytes([last])
        else:
            tail = int(table.symbols[last]).to_bytes(8, "little")[: int(table.lengths[last])]
    total = base[-1] + len(tail)
    out = pool_bytes(total)
    ends = np.empty(bounds.size, np.int64)
    parallel.map_parts(lambda k: decoder.decode(k, out, base[k], ends), blocks)
    out[total - len(tail) : total] = np.frombuffer(tail, np.uint8)
    # a string starting inside a pair (an odd bound) starts after the pair's first code
    odd = np.flatnonzero(bounds & 1)
    head = bounds[odd] - 1
    first = table.lengths[codes[head]]
    if lit.size:  # a literal first in its pair yields one byte
        at = np.minimum(np.searchsorted(lit, head), lit.size - 1)
        first[lit[at] == head] = 1
    ends[odd] += first
    return out, ends


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
