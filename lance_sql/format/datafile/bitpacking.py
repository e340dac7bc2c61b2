"""FastLanes bitpacking (the layout Lance 2.1/2.2 uses), vectorised with numpy.

Values come in blocks of 1024 unsigned integers of ``T`` bits (T = 8, 16, 32 or 64). A
block packed to ``W`` bits per value is ``W * 1024 / T`` words of ``T`` bits: the block is
split into ``LANES = 1024 / T`` lanes, word ``w * LANES + l`` holds bits ``[w*T, (w+1)*T)``
of lane ``l``'s bit stream, and the ``T`` values of a lane follow each other in that
stream, LSB first. The value in row ``r`` of lane ``l`` lands at block position
``ORDER[r // 8] * 16 + (r % 8) * 128 + l`` (the FastLanes transposition).

Two framings exist on disk:

* inline (``InlineBitpacking``): every 1024-value chunk starts with one ``T``-bit word
  holding ``W``; the last chunk is zero-padded to 1024 values;
* out of line (``OutOfLineBitpacking``): ``W`` lives in the encoding and the buffer is
  just the packed blocks, the tail either packed (padded) or stored unpacked.

Everything works on whole arrays of blocks at once, never a Python loop over values or
blocks: :func:`unpack` takes blocks of one width, :func:`unpack_blocks` blocks of any
mix of widths (dearer per value: its shifts and masks are per block), each in a fixed
handful of numpy calls per batch of blocks.
"""

from __future__ import annotations

from functools import cache

import numpy as np

BLOCK = 1024
_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_DTYPES: dict[int, np.dtype] = {8: np.dtype("<u1"), 16: np.dtype("<u2"), 32: np.dtype("<u4"),
                                64: np.dtype("<u8")}


def dtype_for(bits: int) -> np.dtype:
    """The unsigned little-endian dtype of a ``bits``-wide word (8, 16, 32 or 64)."""
    return _DTYPES[bits]


def packed_words(width: int, bits: int) -> int:
    """Words of ``bits`` bits in one block packed to ``width`` bits per value."""
    return BLOCK * width // bits


@cache
def _positions(bits: int) -> np.ndarray:
    """``pos[r, l]``: block position of row ``r`` of lane ``l``."""
    lanes = BLOCK // bits
    r = np.arange(bits)[:, None]
    order = np.array(_ORDER)[r // 8]
    return (order * 16 + (r % 8) * 128 + np.arange(lanes)[None, :]).astype(np.intp)


@cache
def inverse_positions(bits: int) -> np.ndarray:
    """``inv[p]``: the (row * LANES + lane) slot that block position ``p`` is stored in."""
    pos = _positions(bits).reshape(-1)
    inv = np.empty_like(pos)
    inv[pos] = np.arange(pos.size)
    return inv


@cache
def _uniform_tables(width: int, bits: int) -> tuple[np.ndarray, ...]:
    """Row tables for :func:`unpack` at one width, rows listed in output order (row ``k``
    fills block positions ``[k*LANES, (k+1)*LANES)``): the word rows holding each row's
    low and spill bits, and the shifts; rows that do not spill shift by ``bits - 1``, and
    the mask (``width < bits``) drops the one bit that brings in."""
    dt = _DTYPES[bits]
    rows = np.argsort(_positions(bits)[:, 0])  # output row k is lane row rows[k]
    lo = np.empty(bits, np.intp)
    hi = np.empty(bits, np.intp)
    shr = np.empty((bits, 1), dt)
    shl = np.full((bits, 1), bits - 1, dt)
    for k, r in enumerate(rows.tolist()):
        w0, s = divmod(r * width, bits)
        lo[k], hi[k], shr[k] = w0, min(w0 + 1, width - 1), s
        if s + width > bits:
            shl[k] = bits - s
    for t in (lo, hi, shr, shl):
        t.setflags(write=False)
    return lo, hi, shr, shl


_BATCH_BYTES = 1 << 18  # output of one batch: its working arrays stay in L2
# 64-bit values of fewer than 32 bits are worked on as 32-bit halves of their words: half
# the bytes per numpy pass, so batches can be 4x larger for the same cache footprint
# (fewer calls: scans decoding in threads hand the interpreter lock over less often)
_NARROW_BATCH_BYTES = 1 << 20


def unpack(words: np.ndarray, width: int, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Unpack ``(n_blocks, W*LANES)`` words into ``(n_blocks, 1024)`` values.

    ``words`` must have the dtype of ``bits`` (it may be a strided view); ``width`` is in
    ``[0, bits]``. Each output row of a block is ``LANES`` consecutive values drawn from
    ``LANES`` consecutive words, so a batch of blocks takes six numpy calls whatever the
    width: two row gathers in output order (low word, spill word), two shifts, an or and
    the mask. Few large calls keep the GIL free most of the time when scans decode in
    threads (one call per row of the lane, as before, was 3x slower on two threads).
    """
    dt = _DTYPES[bits]
    n = words.shape[0]
    if out is None:
        out = np.empty((n, BLOCK), dt)
    if width == 0 or n == 0:
        out[:] = 0
        return out
    if bits == 64 and width < 32:
        return _unpack_narrow(words, width, out)
    lanes = BLOCK // bits
    lo, hi, shr, shl = _uniform_tables(width, bits)
    mask = dt.type((1 << width) - 1)
    batch = max(1, _BATCH_BYTES // (BLOCK * dt.itemsize))
    for b0 in range(0, n, batch):
        b1 = min(n, b0 + batch)
        w3 = words[b0:b1].reshape(b1 - b0, width, lanes)
        dst = out[b0:b1].reshape(b1 - b0, bits, lanes)
        if width == bits:
            np.take(w3, lo, axis=1, out=dst)
            continue
        low = np.take(w3, lo, axis=1)
        high = np.take(w3, hi, axis=1)
        np.right_shift(low, shr, out=low)
        np.left_shift(high, shl, out=high)
        np.bitwise_or(low, high, out=low)
        np.bitwise_and(low, mask, out=dst)
    return out


@cache
def _narrow_tables(width: int) -> tuple[np.ndarray, ...]:
    """:func:`_uniform_tables` for 64-bit blocks of ``width < 32`` read as 32-bit words:
    lane ``l``'s 64-bit word ``w`` is its 32-bit words ``2w`` (low half) and ``2w + 1``."""
    rows = np.argsort(_positions(64)[:, 0])  # output row k is lane row rows[k]
    lo = np.empty(64, np.intp)
    hi = np.empty(64, np.intp)
    shr = np.empty((64, 1), np.uint32)
    shl = np.full((64, 1), 31, np.uint32)
    for k, r in enumerate(rows.tolist()):
        j, s = divmod(r * width, 32)
        lo[k], hi[k], shr[k] = j, min(j + 1, 2 * width - 1), s
        if s + width > 32:
            shl[k] = 32 - s
    for t in (lo, hi, shr, shl):
        t.setflags(write=False)
    return lo, hi, shr, shl


def _unpack_narrow(words: np.ndarray, width: int, out: np.ndarray) -> np.ndarray:
    """:func:`unpack` of 64-bit blocks packed to ``width < 32`` bits: each lane's words are
    split into 32-bit halves (one small copy of the packed words), unpacked as 32-bit
    values and widened as they are masked into ``out`` (measured: ~2.0 ns a value against
    ~2.6 at 64 bits, with a quarter of the numpy calls)."""
    lo, hi, shr, shl = _narrow_tables(width)
    mask = np.uint32((1 << width) - 1)
    lanes = BLOCK // 64
    n = words.shape[0]
    if words.strides[-1] != 8:
        words = np.ascontiguousarray(words)  # its halves are viewed in place below
    batch = max(1, _NARROW_BATCH_BYTES // (BLOCK * 8))
    for b0 in range(0, n, batch):
        b1 = min(n, b0 + batch)
        m = b1 - b0
        # (blocks, word, lane) of 64 bits -> (blocks, 32-bit word of the lane, lane)
        halves = words[b0:b1].view("<u4").reshape(m, width, lanes, 2)
        w3 = np.ascontiguousarray(halves.transpose(0, 1, 3, 2)).reshape(m, 2 * width, lanes)
        low = np.take(w3, lo, axis=1)
        high = np.take(w3, hi, axis=1)
        np.right_shift(low, shr, out=low)
        np.left_shift(high, shl, out=high)
        np.bitwise_or(low, high, out=low)
        np.bitwise_and(low, mask, out=out[b0:b1].reshape(m, 64, lanes), casting="safe")
    return out


@cache
def _mixed_tables(bits: int) -> tuple[np.ndarray, ...]:
    """Per-width row tables for :func:`unpack_blocks`, each ``(bits + 1, bits)``.

    Rows are listed in output order (row ``k`` of a table fills block positions
    ``[k*LANES, (k+1)*LANES)``), so gathering whole lanes-wide rows of words in this order
    yields the block already transposed. For width ``w`` and output row ``k``:
    ``lo``/``hi`` are the word offsets (in words) of the first and spill word rows, ``shr``
    the right shift of the low word; ``shl`` the left shift of the spill word when no
    block is full width (``bits - 1`` for rows that do not spill: the mask drops what it
    brings in), ``shl1`` the shift to apply after a first ``<< 1`` (so no shift reaches
    ``bits``, which numpy leaves undefined). ``mask`` is ``(bits + 1,)``.
    """
    dt = _DTYPES[bits]
    lanes = BLOCK // bits
    base = _positions(bits)[:, 0]
    rows = np.argsort(base)  # output row k is lane row rows[k]
    assert np.array_equal(base[rows], np.arange(bits) * lanes)
    lo = np.zeros((bits + 1, bits), np.int64)
    hi = np.zeros((bits + 1, bits), np.int64)
    shr = np.zeros((bits + 1, bits), dt)
    shl = np.full((bits + 1, bits), bits - 1, dt)
    shl1 = np.zeros((bits + 1, bits), dt)
    for w in range(1, bits + 1):
        for k, r in enumerate(rows.tolist()):
            w0, s = divmod(r * w, bits)
            lo[w, k] = w0 * lanes
            hi[w, k] = min(w0 + 1, w - 1) * lanes  # past the block only for rows that do not spill
            shr[w, k] = s
            if s + w > bits:
                shl[w, k] = bits - s
            shl1[w, k] = bits - 1 - s
    mask = np.array([(1 << w) - 1 for w in range(bits + 1)], np.uint64).astype(dt)
    for a in (lo, hi, shr, shl, shl1, mask):
        a.setflags(write=False)
    return lo, hi, shr, shl, shl1, mask


_MIXED_BATCH_BYTES = 1 << 19  # working arrays of a batch stay in L2


def unpack_blocks(words: np.ndarray, starts: np.ndarray, widths: np.ndarray, bits: int,
                  out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Unpack blocks of any mix of widths at once into ``(n_blocks, 1024)`` values.

    ``words`` is a 1-D array of ``bits``-wide words; block ``i`` is packed to
    ``widths[i]`` bits and its ``widths[i] * LANES`` words start at ``words[starts[i]]``.
    Callers check that every block lies inside ``words`` (indices are clamped, never
    trusted). A fixed number of numpy calls whatever the widths: each output row of a
    block is ``LANES`` consecutive values drawn from ``LANES`` consecutive words, so two
    row gathers (low word, spill word), two shifts, an or and a mask do all the work.
    This beats :func:`unpack` when there are few blocks per width.
    """
    dt = _DTYPES[bits]
    n = widths.shape[0]
    if out is None:
        out = np.empty((n, BLOCK), dt)
    lanes = BLOCK // bits
    if n == 0:
        return out
    if words.ndim != 1 or words.dtype != dt:
        raise ValueError(f"unpack_blocks needs a 1-D array of {bits}-bit words")
    widths = np.asarray(widths, np.intp)
    if words.shape[0] < lanes or not widths.any():
        if widths.any():
            raise ValueError("unpack_blocks: blocks reach past the words")
        out[:] = 0
        return out
    lo_t, hi_t, shr_t, shl_t, shl1_t, mask_t = _mixed_tables(bits)
    full = bool((widths == bits).any())
    step = words.strides[0]
    nrows = words.shape[0] - lanes + 1
    view = np.lib.stride_tricks.as_strided(words, shape=(nrows, lanes), strides=(step, step),
                                           writeable=False)  # fmt: skip
    starts = np.asarray(starts, np.int64)
    batch = max(1, _MIXED_BATCH_BYTES // (BLOCK * dt.itemsize))
    for b0 in range(0, n, batch):
        b1 = min(n, b0 + batch)
        w = widths[b0:b1]
        s = starts[b0:b1, None]
        rows = lo_t[w]
        rows += s
        np.clip(rows, 0, nrows - 1, out=rows)
        low = view[rows]  # (blocks, bits, lanes)
        rows = hi_t[w]
        rows += s
        np.clip(rows, 0, nrows - 1, out=rows)
        high = view[rows]
        np.right_shift(low, shr_t[w][:, :, None], out=low)
        if full:
            np.left_shift(high, dt.type(1), out=high)
            np.left_shift(high, shl1_t[w][:, :, None], out=high)
        else:
            np.left_shift(high, shl_t[w][:, :, None], out=high)
        np.bitwise_or(low, high, out=low)
        np.bitwise_and(low, mask_t[w][:, None, None], out=out[b0:b1].reshape(b1 - b0, bits, lanes))
    return out


@cache
def _pack_tables(width: int, bits: int, word_bits: int) -> tuple[np.ndarray, ...]:
    """Tables for :func:`pack` of ``bits``-bit values to ``width`` bits, built from words
    of ``word_bits`` bits (``bits``, or 32 for 64-bit values of at most 32 bits): the
    group order that regroups a block's values as (row, lane) (a permutation of the
    ``bits // 8`` groups of ``lanes`` values in each eighth of a block), the left shift
    of every row, the first row of each word (``np.bitwise_or.reduceat`` groups: row
    starts are ``width <= word_bits`` apart, so every word has one), and the rows that
    spill into the next word with their right shifts and target words."""
    dt = _DTYPES[word_bits]
    lanes = BLOCK // bits
    order = np.array(_ORDER[: bits // 8], np.intp) * 16 // lanes
    word, shift = np.divmod(np.arange(bits) * width, word_bits)
    first = np.searchsorted(word, np.arange(bits * width // word_bits)).astype(np.intp)
    spill = np.flatnonzero(shift + width > word_bits).astype(np.intp)
    tables = (order, shift.astype(dt)[:, None], first, spill,
              (word_bits - shift[spill]).astype(dt)[:, None], word[spill] + 1)
    for t in tables:
        t.setflags(write=False)
    return tables


_ROW_LOOP_MIN_BLOCKS = 32  # from this many blocks :func:`pack` goes row by row (measured:
# 64-bit values to 21 bits, 1000 blocks: 9 ms row by row, 25 ms with reduceat, 15 ms for
# the former gather-then-loop; 4 blocks: 0.06 ms with reduceat, 0.4 ms row by row)


def pack(values: np.ndarray, width: int, bits: int, *, fits: bool = False) -> np.ndarray:
    """Inverse of :func:`unpack`: ``(n_blocks, 1024)`` values to packed words.

    Higher bits than ``width`` are dropped, unless ``fits`` promises there are none. Row
    ``r`` of lane ``l`` is block position ``ORDER[r // 8] * 16 + (r % 8) * 128 + l``, so
    with a block viewed as ``(r % 8, group, lane)`` every row is a strided view. Many
    blocks are packed row by row over all blocks at once (a shift and an OR per row into
    its word, one more where it spills into the next word); a few blocks, where numpy's
    per-call cost dominates, in a fixed handful of calls (rows regrouped by a gather and a
    transpose, shifted, OR-ed per word by one ``reduceat``). 64-bit values packed to at
    most 32 bits are worked on as 32-bit words (half the bytes per pass), each 64-bit word
    being two of them.
    """
    dt = _DTYPES[bits]
    n = values.shape[0]
    lanes = BLOCK // bits
    if width == 0 or n == 0:
        return np.zeros((n, 0), dt)
    word_bits = 32 if bits == 64 and width <= 32 else bits
    wt = _DTYPES[word_bits]
    order, shl, first, spill, shr, target = _pack_tables(width, bits, word_bits)
    grouped = values.astype(dt, copy=False).reshape(n, 8, bits // 8, lanes)
    if word_bits != bits:
        grouped = grouped.astype(wt)  # drops the high half: width <= 32 keeps nothing there
    mask = wt.type((1 << width) - 1) if width < word_bits and not fits else None
    if n >= _ROW_LOOP_MIN_BLOCKS:
        words = np.zeros((n, bits * width // word_bits, lanes), wt)
        spills = dict(zip(spill.tolist(), shr[:, 0].tolist(), strict=True))
        for r in range(bits):
            row = grouped[:, r % 8, order[r // 8], :]
            if mask is not None:
                row = row & mask
            w0 = (r * width) // word_bits
            words[:, w0, :] |= row << shl[r, 0]
            if r in spills:
                words[:, w0 + 1, :] |= row >> wt.type(spills[r])
    else:
        # (block, r % 8, group, lane) -> (block, r // 8, r % 8, lane) = (block, row, lane)
        rows = np.take(grouped, order, axis=2).transpose(0, 2, 1, 3).reshape(n, bits, lanes)
        if mask is not None:
            rows &= mask
        words = np.bitwise_or.reduceat(rows << shl, first, axis=1)
        if spill.size:
            words[:, target, :] |= rows[:, spill, :] >> shr
    if word_bits != bits:  # 32-bit words 2w (low half) and 2w + 1 of each lane -> word w
        halves = words.reshape(n, width, 2, lanes).transpose(0, 1, 3, 2)
        words = np.ascontiguousarray(halves).view(dt).reshape(n, width, lanes)
    return words.reshape(n, width * lanes)


def block_widths(values: np.ndarray) -> np.ndarray:
    """Per-block bit widths of ``(n_blocks, 1024)`` unsigned values."""
    top = values.max(axis=1).astype(np.uint64)
    out = np.zeros(top.shape, np.int64)
    nz = top > 0
    # float log2 is exact enough to locate the top bit after a correction step
    guess = np.floor(np.log2(top[nz].astype(np.float64))).astype(np.int64) + 1
    guess = np.clip(guess, 1, 64)
    too_small = (guess < 64) & (top[nz] >> np.minimum(guess, 63).astype(np.uint64) > 0)
    guess[too_small] += 1
    too_big = (guess > 1) & (top[nz] >> (guess - 1).astype(np.uint64) == 0)
    guess[too_big] -= 1
    out[nz] = guess
    return out
