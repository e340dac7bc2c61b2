"""FSST string compression (the encoder side of :mod:`fsst`), vectorised in numpy.

A symbol table of up to 255 symbols (1-8 bytes) is learnt from a sample of a page's
strings, then every string of the page is encoded at once.

**Encoding.** Strings are parsed greedily left to right; at each cursor the longest
symbol that matches wins, a byte without a symbol is escaped (``255``, then the byte).
All cursors of a block of strings advance together, one code per string per round, so
the work is a few numpy operations per emitted code. Lookups follow FSST: the 8 bytes at
the cursor are read as one little-endian word, its bytes past the string's end replaced
by the terminator (a byte no multi-byte symbol holds, so no match crosses the end); a
hash of its first three bytes indexes a table of the (at most one) symbol of 3-8 bytes
in that bucket, checked against the word under the symbol's mask; its first two bytes index a
65536-entry table holding the best symbol of one or two bytes, or the escape. Every entry
is one ``uint32`` (the output word: the code, or ``255`` and the literal byte; the input
bytes consumed; 1 word written), so escapes need no branch. Round ``r`` writes row ``r``
of a (rounds x strings) matrix of words, read out string by string at the end. When the
terminator does not occur in the page, a finished string's cursor parks on it (its entry
consumes and writes nothing) and finished strings are dropped only once they are half of
a block; otherwise they are dropped as soon as they finish.

**Symbol table.** As in FSST, a few generations over the sample: parse it with the
current table, count each code and each pair of adjacent codes, and keep the 255
candidates (the symbols, and pairs concatenated up to eight bytes) of highest gain (count
x length, single bytes favoured so few bytes are escaped), at most one symbol of three or
more bytes per hash bucket of the first three bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_sql.format.datafile.fsst import ESCAPE, TABLE_SIZE, _literals

_MAGIC = 0x46535354 << 32
MAX_SYMBOLS = 255
SAMPLE_BYTES = 1 << 15  # bytes of strings the table is learnt from
_GENERATIONS = 5
_BLOCK = 1 << 16  # strings encoded together (their arrays stay in cache)
_SEGMENT = 1024  # longer strings are encoded in pieces of this many bytes (bounds the rounds)
_FEW_ESCAPES = 1024  # up to this many escapes in a block, literals are put in run by run
_M24 = np.uint64(0xFFFFFF)
_HASH_BITS = 16  # long symbols are found by a hash of their first three bytes
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
_HASH_SHIFT = np.uint64(64 - _HASH_BITS)
_M16 = np.uint64(0xFFFF)
# a table entry: output word (bits 0-15), input bytes (16-23), words written (24-31: 1, or
# 0 for a finished string's cursor parked on its terminator)
_IN_SHIFT = 16
_OUT_SHIFT = 24


@dataclass(frozen=True)
class SymbolTable:
    """A learnt FSST table: ``symbols`` (uint64, zero padded) of ``lengths`` bytes, by code,
    and the ``terminator`` byte (never inside a multi-byte symbol)."""

    symbols: np.ndarray
    lengths: np.ndarray
    terminator: int

    def serialize(self) -> bytes:
        """The 2312-byte table Lance stores in the page's encoding (pylance's layout)."""
        n = int(self.symbols.size)
        head = _MAGIC | (1 << 24) | (self.terminator << 8) | n
        out = bytearray(TABLE_SIZE)
        out[:8] = head.to_bytes(8, "little")
        out[8 : 8 + 8 * n] = self.symbols.astype("<u8").tobytes()
        out[8 + 8 * n : 8 + 9 * n] = self.lengths.astype(np.uint8).tobytes()
        return bytes(out)


@dataclass(frozen=True)
class _Lookup:
    """The encoder's tables for one symbol table."""

    short: np.ndarray  # (65536,) uint32 entries by the first two bytes
    prefix: np.ndarray  # (1 << 16,) uint8 by prefix hash: 1 + index of the long symbol
    long_entry: np.ndarray  # (256,) uint32 entries of the long symbols (index 0: none)
    long_mask: np.ndarray  # (256,) uint64
    long_value: np.ndarray  # (256,) uint64 (index 0 never matches)


def bucket(symbols: np.ndarray) -> np.ndarray:
    """The hash bucket of symbols (or words) by their first three bytes."""
    return ((symbols & _M24) * _HASH_MUL) >> _HASH_SHIFT


def _entry(word: np.ndarray, n_in: np.ndarray, n_out: np.ndarray) -> np.ndarray:
    return (word.astype(np.uint32) | (n_in.astype(np.uint32) << _IN_SHIFT)
            | (n_out.astype(np.uint32) << _OUT_SHIFT))  # fmt: skip


def _lookup(table: SymbolTable, term_absent: bool) -> _Lookup:
    lens = table.lengths.astype(np.int64)
    syms = table.symbols
    codes = np.arange(lens.size)
    # short entries: escape by default, then 1-byte symbols, then 2-byte ones win
    keys = np.arange(65536, dtype=np.uint32)
    first = keys & 0xFF
    short = _entry(ESCAPE | (first << 8), np.ones(65536, np.uint32), np.ones(65536))
    one = lens == 1
    byte_code = np.full(256, -1, np.int64)
    byte_code[syms[one].astype(np.int64)] = codes[one]
    has1 = byte_code[first] >= 0
    short[has1] = _entry(byte_code[first[has1]], np.ones(int(has1.sum())), np.ones(int(has1.sum())))
    two = lens == 2
    k2 = syms[two].astype(np.int64)
    short[k2] = _entry(codes[two], np.full(k2.size, 2), np.ones(k2.size))
    if term_absent:  # a cursor on a terminator is a finished string: it stays put
        short[first == table.terminator] = 0
    prefix = np.zeros(1 << _HASH_BITS, np.uint8)
    long_ = np.flatnonzero(lens >= 3)
    entry = np.zeros(256, np.uint32)
    mask = np.zeros(256, np.uint64)
    value = np.ones(256, np.uint64)  # slot 0: (w & 0) == 1 never holds
    slots = np.arange(1, long_.size + 1)
    prefix[bucket(syms[long_]).astype(np.int64)] = slots
    entry[slots] = _entry(long_, lens[long_], np.ones(long_.size))
    mask[slots] = np.where(lens[long_] == 8, np.uint64(0xFFFFFFFFFFFFFFFF),
                           (np.uint64(1) << (8 * lens[long_]).astype(np.uint64)) - np.uint64(1))
    value[slots] = syms[long_]
    return _Lookup(short, prefix, entry, mask, value)


def _padded(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The page's bytes plus eight spare ones, so every cursor can read a whole word."""
    body = data[int(offsets[0]) : int(offsets[-1])]
    out = np.zeros(body.size + 8, np.uint8)
    out[: body.size] = body
    return out


def encode(table: SymbolTable, data: np.ndarray, offsets: np.ndarray,
           lookup: _Lookup | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Compress strings ``data[offsets[i]:offsets[i+1]]``; returns (bytes, int64 offsets)."""
    offsets = np.asarray(offsets, np.int64)
    n = offsets.size - 1
    if n <= 0:
        return np.zeros(0, np.uint8), np.zeros(max(n + 1, 1), np.int64)
    lengths = np.diff(offsets)
    if int(lengths.max()) > _SEGMENT:
        # long strings are encoded as pieces of _SEGMENT bytes (a parse may restart at a
        # cut), so the rounds stay few; a string's codes are its pieces' codes in order
        pieces = np.maximum((lengths + _SEGMENT - 1) // _SEGMENT, 1)
        first = np.zeros(n + 1, np.int64)
        np.cumsum(pieces, out=first[1:])
        nth = np.arange(int(first[-1]), dtype=np.int64) - np.repeat(first[:-1], pieces)
        cuts = np.r_[np.repeat(offsets[:-1], pieces) + nth * _SEGMENT, offsets[-1]]
        comp, sub = encode(table, data, cuts, lookup)
        return comp, sub[first]
    term = table.terminator
    padded = _padded(data, offsets)
    parked = not bool((padded[:-8] == term).any())
    if lookup is None:
        lookup = _lookup(table, parked)
    starts = offsets[:-1] - offsets[0]
    win = np.ndarray((padded.size - 7,), "<u8", padded, 0, (1,))
    fill = np.uint64(0x0101010101010101 * term)
    parts: list[np.ndarray] = []  # each block's bytes, as soon as it is encoded
    comp = np.zeros(n + 1, np.int64)
    counts = np.empty(_BLOCK, np.int64)
    for a in range(0, n, _BLOCK):
        b = min(n, a + _BLOCK)
        words = _encode_block(lookup, win, fill, starts[a:b], starts[a:b] + lengths[a:b],
                              counts[: b - a], parked)
        part, bounds = _bytes(words, counts[: b - a])
        parts.append(part)
        comp[a + 1 : b + 1] = bounds[1:] + comp[a]
    del padded, win
    return (np.concatenate(parts) if len(parts) > 1 else parts[0]), comp


def _bytes(codes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output words (``counts`` per string) as bytes: the code, then for an escape its
    literal (the word's second byte); and the strings' offsets in them."""
    low = codes.view(np.uint8)[0::2]
    bounds = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    esc = np.flatnonzero(low == ESCAPE)
    if esc.size == 0:
        return np.ascontiguousarray(low), bounds
    if esc.size > _FEW_ESCAPES:
        keep = np.ones((codes.size, 2), bool)
        keep[:, 1] = low == ESCAPE
        out = codes.view(np.uint8).reshape(-1, 2)[keep]
    else:  # few: copy the runs between escapes, then put the literals in
        cuts = [0, *(esc + 1).tolist(), low.size]
        out = np.empty(low.size + esc.size, np.uint8)
        for k in range(esc.size + 1):
            out[cuts[k] + k : cuts[k + 1] + k] = low[cuts[k] : cuts[k + 1]]
        out[esc + 1 + np.arange(esc.size)] = codes.view(np.uint8)[1::2][esc]
    return out, bounds + np.searchsorted(esc, bounds)


def _encode_block(lk: _Lookup, win: np.ndarray, fill: np.uint64, cur: np.ndarray,
                  end: np.ndarray, counts: np.ndarray, parked: bool) -> np.ndarray:  # fmt: skip
    """Encode one block of strings (cursors ``cur`` up to ``end``): their output words
    (code, or escape and literal), string after string; ``counts`` receives each
    string's number of words.

    Round ``r`` stores one word per live string in row ``r`` of a matrix; strings that
    finished are dropped from the rounds once they are half of them (until then they
    stay parked on their terminators, producing words that are not counted).
    """
    mb = cur.size
    cur = cur.copy()
    idx: np.ndarray | None = None  # the strings the cursors belong to (None: all)
    cnt = np.zeros(mb, np.int64)
    rows: list[np.ndarray] = []
    m = mb
    t = np.empty(m, np.uint64)
    r = np.empty(m, np.int64)
    keep_bytes = np.r_[(np.uint64(1) << np.arange(0, 64, 8, dtype=np.uint64)) - np.uint64(1),
                       np.uint64(0xFFFFFFFFFFFFFFFF)]
    term_bytes = fill & ~keep_bytes
    e = np.empty(m, np.uint32)
    d = np.empty(m, np.uint32)
    ok = np.empty(m, bool)
    c = cnt
    if not parked and not np.all(cur < end):  # empty strings: no round for them
        idx = np.flatnonzero(cur < end)
        cur, end, c, m = cur[idx], end[idx], c[idx], idx.size
    while m:
        tt, ee, dd, kk, rr = t[:m], e[:m], d[:m], ok[:m], r[:m]
        ww = win[cur]  # (fancy indexing reads unaligned words faster than take)
        # bytes past the string's end read as terminators, which no long symbol holds
        np.subtract(end, cur, out=rr)
        np.minimum(rr, 8, out=rr)
        np.bitwise_and(ww, np.take(keep_bytes, rr), out=ww)
        np.bitwise_or(ww, np.take(term_bytes, rr), out=ww)
        np.bitwise_and(ww, _M24, out=tt)
        np.multiply(tt, _HASH_MUL, out=tt)
        np.right_shift(tt, _HASH_SHIFT, out=tt)
        slot = np.take(lk.prefix, tt.view(np.int64))
        np.take(lk.long_mask, slot, out=tt)
        np.bitwise_and(tt, ww, out=tt)
        np.equal(tt, np.take(lk.long_value, slot), out=kk)
        np.bitwise_and(ww, _M16, out=tt)
        np.take(lk.short, tt.view(np.int64), out=ee)
        np.subtract(np.take(lk.long_entry, slot), ee, out=dd)
        np.multiply(dd, kk, out=dd)
        np.add(ee, dd, out=ee)
        row = np.zeros(mb, np.uint16) if idx is not None else np.empty(mb, np.uint16)
        if idx is None:
            row[:] = ee.view(np.uint16)[0::2]
        else:
            row[idx] = ee.view(np.uint16)[0::2]
        rows.append(row)
        step = ee.view(np.uint8)
        np.add(cur, step[2::4], out=cur)
        np.add(c, step[3::4], out=c)
        np.less(cur, end, out=kk)
        live = int(np.count_nonzero(kk))
        if live == m or (parked and live * 2 > m):
            continue  # finished cursors stay on their terminators: dropped later
        # (without parking a terminator may occur in the data: finished strings leave now)
        gone = np.flatnonzero(~kk)
        where = gone if idx is None else idx[gone]
        cnt[where] = c[gone]
        keep = np.flatnonzero(kk)
        cur, end, c = cur[keep], end[keep], c[keep]
        idx = keep if idx is None else idx[keep]
        m = live
    counts[:] = cnt
    if not rows:
        return np.zeros(0, np.uint16)
    matrix = np.stack(rows, axis=1)  # (strings, rounds)
    return matrix[np.arange(len(rows))[None, :] < cnt[:, None]]


# --------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Sample:
    """Contiguous runs of a page's strings: ``data``/``offsets`` as one string array, and
    ``runs``, the string index where each run starts (plus the end)."""

    data: np.ndarray
    offsets: np.ndarray
    runs: np.ndarray


def sample(data: np.ndarray, offsets: np.ndarray, budget: int = SAMPLE_BYTES,
           runs: int = 4) -> Sample:  # fmt: skip
    """About ``budget`` bytes of the page's strings, in ``runs`` evenly spaced runs."""
    offsets = np.asarray(offsets, np.int64)
    n = offsets.size - 1
    total = int(offsets[-1] - offsets[0])
    if total <= budget:
        a = np.zeros(1, np.int64)
        b = np.full(1, n, np.int64)
    else:
        a = np.unique(np.linspace(0, n, runs, endpoint=False).astype(np.int64))
        b = np.searchsorted(offsets, offsets[a] + budget // a.size, "right") - 1
        b = np.maximum(np.minimum(b, np.r_[a[1:], n]), a + 1)
    counts = b - a
    pick = np.repeat(a - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(int(counts.sum()))
    lens = offsets[pick + 1] - offsets[pick]
    out_offs = np.zeros(pick.size + 1, np.int64)
    np.cumsum(lens, out=out_offs[1:])
    src = np.repeat(offsets[pick] - out_offs[:-1], lens) + np.arange(int(out_offs[-1]))
    return Sample(data[src], out_offs, np.r_[0, np.cumsum(counts)])


def _codes(table: SymbolTable, data: np.ndarray, offsets: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """The greedy parse of the strings: extended codes (symbol code, or 256 + an escaped
    byte), whether each code starts its string, and the compressed size."""
    comp, coffs = encode(table, data, offsets)
    c = comp.astype(np.int64)
    esc = np.flatnonzero(comp == ESCAPE)
    keep = np.ones(c.size, bool)
    if esc.size:
        lit = _literals(esc, c.size, "fsst sample")
        c[lit] += 256
        keep[lit - 1] = False
    first = np.zeros(c.size, bool)
    lens = np.diff(coffs)
    first[coffs[:-1][lens > 0]] = True
    return c[keep], first[keep], int(comp.size)


def _concat(v1: np.ndarray, l1: np.ndarray, v2: np.ndarray, l2: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Symbols ``1`` then ``2``, cut to eight bytes."""
    shift = (8 * l1).astype(np.uint64)
    v = v1 | np.where(l1 < 8, v2 << np.minimum(shift, np.uint64(63)), np.uint64(0))
    ln = np.minimum(l1 + l2, 8)
    return v & _mask(ln), ln


def _mask(lengths: np.ndarray) -> np.ndarray:
    bits = (8 * lengths).astype(np.uint64)
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    return np.where(lengths >= 8, full, (np.uint64(1) << np.minimum(bits, np.uint64(63)))
                    - np.uint64(1))  # fmt: skip


def build_table(data: np.ndarray, offsets: np.ndarray) -> SymbolTable:
    """Learn a symbol table from a sample of the strings (see the module docstring)."""
    return learn(sample(data, offsets))[0]


def learn(smp: Sample) -> tuple[SymbolTable, int]:
    """A symbol table learnt from ``smp`` and the sample's compressed size with it."""
    data, offsets = smp.data, smp.offsets
    hist = np.bincount(data, minlength=256)
    term = int(np.argmin(hist))
    table = SymbolTable(np.zeros(0, np.uint64), np.zeros(0, np.uint8), term)
    if data.size == 0:
        return table, 0
    byte_vals = np.arange(256, dtype=np.uint64)
    for gen in range(_GENERATIONS):
        codes, first, _ = _codes(table, data, offsets)
        vals = np.r_[table.symbols, np.zeros(256 - table.symbols.size, np.uint64), byte_vals]
        lens = np.r_[table.lengths.astype(np.int64), np.zeros(256 - table.lengths.size,
                                                             np.int64), np.ones(256, np.int64)]
        count1 = np.bincount(codes, minlength=512)
        used = np.flatnonzero(count1)
        cand_v = [vals[used]]
        cand_l = [lens[used]]
        cand_g = [count1[used] * lens[used] * np.where(lens[used] == 1, 8, 1)]
        if gen < _GENERATIONS - 1 and codes.size > 1:
            same = ~first[1:]
            pairs = codes[:-1][same] * 512 + codes[1:][same]
            pc, pn = np.unique(pairs, return_counts=True)
            c1, c2 = pc // 512, pc % 512
            ok = (pn >= 2) & (lens[c1] < 8)
            ok &= ~((c1 >= 256) & (c1 - 256 == term)) & ~((c2 >= 256) & (c2 - 256 == term))
            c1, c2, pn = c1[ok], c2[ok], pn[ok]
            v, ln = _concat(vals[c1], lens[c1], vals[c2], lens[c2])
            cand_v.append(v)
            cand_l.append(ln)
            cand_g.append(pn * ln)
        cv, cl, cg = np.concatenate(cand_v), np.concatenate(cand_l), np.concatenate(cand_g)
        # one candidate per symbol (gains added), best first
        key = np.empty((cv.size, 2), np.uint64)
        key[:, 0] = cv
        key[:, 1] = cl.astype(np.uint64)
        _, inv = np.unique(key.view("V16").reshape(-1), return_inverse=True)
        inv = inv.reshape(-1)
        gain = np.bincount(inv, weights=cg)
        rep = np.zeros(gain.size, np.int64)
        rep[inv] = np.arange(inv.size)
        cv, cl, cg = cv[rep], cl[rep], gain
        order = np.lexsort((cv, -cl, -cg))
        cv, cl = cv[order], cl[order]
        # no multi-byte symbol holds the terminator
        has_term = np.zeros(cv.size, bool)
        for k in range(8):
            has_term |= (k < cl) & (((cv >> np.uint64(8 * k)) & np.uint64(0xFF)) == term)
        keep = ~(has_term & (cl > 1))
        # at most one symbol of 3+ bytes per hash of its first 3 bytes (the best)
        long_ = keep & (cl >= 3)
        li = np.flatnonzero(long_)
        _, firsts = np.unique(bucket(cv[li]), return_index=True)
        dup = np.ones(li.size, bool)
        dup[firsts] = False
        keep[li[dup]] = False
        sel = np.flatnonzero(keep)[:MAX_SYMBOLS]
        table = SymbolTable(cv[sel].astype(np.uint64), cl[sel].astype(np.uint8), term)
    return table, _codes(table, data, offsets)[2]
