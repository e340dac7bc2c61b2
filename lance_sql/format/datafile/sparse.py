"""Decode single values inside mini-block chunks (the ``take`` fast path).

For encodings whose values can be located without decoding a whole chunk (flat values,
inline FastLanes bitpacking, variable-width strings and FSST over them), a ``take`` of a
few rows unpacks just those values: the bitpacked ones through the inverse FastLanes
transposition (row and lane of a block position, then at most two words), the strings
through their two offsets. Other encodings decode whole chunks (see :mod:`compressive`).
"""

from __future__ import annotations

import numpy as np

from lance_sql.errors import FormatError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile.blocks import Block, Fixed, Variable
from lance_sql.format.datafile.compressive import (
    ChunkBuffers,
    fsst_decode,
    kind,
    range_indices,
)
from lance_sql.format.pb import encodings_v2_1_pb2 as pb


def supported(enc: pb.CompressiveEncoding) -> bool:
    """Encodings whose values can be located inside a chunk without decoding it all."""
    k = kind(enc)
    if k == "flat":
        return not enc.flat.HasField("data") and enc.flat.bits_per_value % 8 == 0
    if k == "inline_bitpacking":
        return not enc.inline_bitpacking.HasField("values")
    if k == "variable":
        return kind(enc.variable.offsets) == "flat" and not enc.variable.HasField("values")
    if k == "fsst":
        return kind(enc.fsst.values) == "variable" and supported(enc.fsst.values)
    return False


def decode(enc: pb.CompressiveEncoding, bufs: list[ChunkBuffers], counts: np.ndarray,
                  chunk: np.ndarray, pos: np.ndarray, where: str) -> Block | None:  # fmt: skip
    """Values ``pos[i]`` of chunk ``chunk[i]`` only (indices into the selected chunks)."""
    if np.any(pos >= counts[chunk]):
        raise FormatError(f"{where}: row past the values of its chunk")
    k = kind(enc)
    buf = bufs[0]
    raw, base = buf.raw, buf.pos[chunk]
    size = buf.sizes[chunk]
    if k == "flat":
        width = int(enc.flat.bits_per_value) // 8
        if width == 0 or np.any((pos + 1) * width > size):
            raise FormatError(f"{where}: chunk holds fewer bytes than its values need")
        idx = (base + pos * width)[:, None] + np.arange(width)[None, :]
        return Fixed(raw[idx].reshape(-1), width * 8, pos.size)
    if k == "inline_bitpacking":
        return _sparse_inline(enc.inline_bitpacking, raw, base, size, pos, where)
    if k in ("variable", "fsst"):
        var = enc.variable if k == "variable" else enc.fsst.values.variable
        width = int(var.offsets.flat.bits_per_value)
        if width not in (32, 64):
            raise FormatError(f"{where}: {width}-bit string offsets")
        wb = width // 8
        if np.any(size < (counts[chunk] + 1) * wb):
            raise FormatError(f"{where}: string chunk too small for its offsets")
        lo = _read_uint(raw, base + pos * wb, wb)
        hi = _read_uint(raw, base + (pos + 1) * wb, wb)
        if np.any(hi < lo) or np.any(hi > size) or np.any(lo < (counts[chunk] + 1) * wb):
            raise FormatError(f"{where}: string offsets point outside their chunk")
        lens = hi - lo
        offsets = np.zeros(pos.size + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        block = Variable(offsets, raw[range_indices(base + lo, lens)], pos.size)
        return block if k == "variable" else fsst_decode(enc.fsst.symbol_table, block, where)
    return None


def _read_uint(raw: np.ndarray, at: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(at.shape, np.int64)
    for i in range(nbytes):
        out |= raw[at + i].astype(np.int64) << (8 * i)
    return out


def _sparse_inline(ib: pb.InlineBitpacking, raw: np.ndarray, base: np.ndarray, size: np.ndarray,
                   pos: np.ndarray, where: str) -> Fixed:  # fmt: skip
    bits = int(ib.uncompressed_bits_per_value)
    if bits not in (8, 16, 32, 64):
        raise FormatError(f"{where}: inline bitpacking of {bits}-bit values")
    wb = bits // 8
    width = _read_uint(raw, base, wb)
    if np.any(width > bits):
        raise FormatError(f"{where}: bit width {int(width.max())} over {bits} bits")
    lanes = bp.BLOCK // bits
    if not np.array_equal(size, (1 + width * lanes) * wb):
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    slot = bp.inverse_positions(bits)[pos]
    row, lane = slot // lanes, slot % lanes
    start = row * width
    w0, shift = start // bits, start % bits
    word_at = np.where(width > 0, base + wb * (1 + w0 * lanes + lane), base)  # 0 bits: no words
    lo = _read_uint(raw, word_at, wb).astype(np.uint64)
    spill = (shift + width > bits) & (width > 0)
    nxt = np.where(spill, word_at + wb * lanes, word_at)
    hi = _read_uint(raw, nxt, wb).astype(np.uint64)
    sh = shift.astype(np.uint64)
    val = lo >> sh
    val = np.where(spill, val | (hi << (np.uint64(bits) - sh)), val)
    mask = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(width, 63).astype(np.uint64)) - np.uint64(1))
    val = np.where(width == 0, np.uint64(0), val & mask)
    return Fixed(val.astype(bp.dtype_for(bits)).view(np.uint8), bits, pos.size)
