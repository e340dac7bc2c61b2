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

Everything works on whole arrays of blocks at once: one numpy expression per row of the
lane (at most 64), never a Python loop over values or blocks.
"""

from __future__ import annotations

from functools import cache

import numpy as np

BLOCK = 1024
_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_BATCH_BYTES = 1 << 23  # per ufunc call overhead dominates below ~1M values a batch
_DTYPES = {8: np.dtype("<u1"), 16: np.dtype("<u2"), 32: np.dtype("<u4"), 64: np.dtype("<u8")}


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


def unpack(words: np.ndarray, width: int, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Unpack ``(n_blocks, W*LANES)`` words into ``(n_blocks, 1024)`` values.

    ``words`` must have the dtype of ``bits`` (it may be a strided view); ``width`` is in
    ``[0, bits]``. For a fixed row ``r`` the lanes land on consecutive output positions,
    so every step is a plain slice assignment over all blocks of a batch; batches are large
    (8 MiB of output) because each step is a handful of ufunc calls per row of the lane.
    """
    dt = _DTYPES[bits]
    n = words.shape[0]
    if out is None:
        out = np.empty((n, BLOCK), dt)
    if width == 0 or n == 0:
        out[:] = 0
        return out
    lanes = BLOCK // bits
    mask = dt.type((1 << width) - 1)
    bases = [_ORDER[r // 8] * 16 + (r % 8) * 128 for r in range(bits)]
    plan = []
    for r in range(bits):
        w0, shift = divmod(r * width, bits)
        plan.append((bases[r], w0, shift, shift + width > bits))
    batch = max(1, _BATCH_BYTES // (BLOCK * dt.itemsize))
    for b0 in range(0, n, batch):
        b1 = min(n, b0 + batch)
        w3 = words[b0:b1].reshape(b1 - b0, width, lanes)
        dst = out[b0:b1]
        tmp = np.empty((b1 - b0, lanes), dt)
        tmp2 = np.empty((b1 - b0, lanes), dt) if width < bits else None
        for base, w0, shift, spill in plan:
            target = dst[:, base : base + lanes]
            if width == bits:
                target[...] = w3[:, w0, :]
                continue
            if shift:
                np.right_shift(w3[:, w0, :], dt.type(shift), out=tmp)
            else:
                tmp[...] = w3[:, w0, :]
            if spill:
                np.left_shift(w3[:, w0 + 1, :], dt.type(bits - shift), out=tmp2)
                np.bitwise_or(tmp, tmp2, out=tmp)
            np.bitwise_and(tmp, mask, out=target)
    return out


def pack(values: np.ndarray, width: int, bits: int) -> np.ndarray:
    """Inverse of :func:`unpack`: ``(n_blocks, 1024)`` values to packed words.

    Values must fit in ``width`` bits (higher bits are dropped).
    """
    dt = _DTYPES[bits]
    n = values.shape[0]
    lanes = BLOCK // bits
    if width == 0 or n == 0:
        return np.zeros((n, 0), dt)
    rows = values.astype(dt, copy=False)[:, _positions(bits).reshape(-1)].reshape(n, bits, lanes)
    if width < bits:
        rows = rows & dt.type((1 << width) - 1)
    words = np.zeros((n, width, lanes), dt)
    for r in range(bits):
        start = r * width
        w0, shift = divmod(start, bits)
        words[:, w0, :] |= rows[:, r, :] << dt.type(shift)
        if shift + width > bits:
            words[:, w0 + 1, :] |= rows[:, r, :] >> dt.type(bits - shift)
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
