"""Decode single values inside mini-block chunks (the ``take`` fast path).

For encodings whose values can be located without decoding a whole chunk (flat values,
inline FastLanes bitpacking, variable-width strings and FSST over them), a ``take`` of a
few rows unpacks just those values: the bitpacked ones through the inverse FastLanes
transposition (row and lane of a block position, then at most two words), the strings
through their two offsets. Other encodings decode whole chunks (see :mod:`compressive`).
"""

from __future__ import annotations

from functools import cache

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


def string_offset_bytes(enc: pb.CompressiveEncoding, where: str) -> int:
    """Bytes per string offset of a mini-block ``variable`` (or FSST over variable)
    encoding: 4 or 8, the offsets stored flat; anything else is a FormatError."""
    var = enc.variable if kind(enc) == "variable" else enc.fsst.values.variable
    width = int(var.offsets.flat.bits_per_value)
    if kind(var.offsets) != "flat" or width not in (32, 64):
        raise FormatError(f"{where}: {width}-bit string offsets")
    return width // 8


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
    k = kind(enc)
    buf = bufs[0]
    raw = buf.raw
    if k == "flat":
        width = int(enc.flat.bits_per_value) // 8
        # pos < counts and (pos + 1) * width <= size, checked per chunk in one pass
        limit = np.minimum(counts, buf.sizes // width) if width else np.zeros_like(counts)
        if np.any(pos >= limit[chunk]):
            if np.any(pos >= counts[chunk]):
                raise FormatError(f"{where}: row past the values of its chunk")
            raise FormatError(f"{where}: chunk holds fewer bytes than its values need")
        words = gather_words(raw, buf.pos, width, chunk, pos)
        if words is not None:
            return Fixed(words, width * 8, pos.size)
        idx = (buf.pos[chunk] + pos * width)[:, None] + np.arange(width)[None, :]
        return Fixed(raw[idx].reshape(-1), width * 8, pos.size)
    if np.any(pos >= counts[chunk]):
        raise FormatError(f"{where}: row past the values of its chunk")
    if k == "inline_bitpacking":
        return _sparse_inline(enc.inline_bitpacking, buf, chunk, pos, where)
    if k in ("variable", "fsst"):
        wb = string_offset_bytes(enc, where)
        base, size = buf.pos[chunk], buf.sizes[chunk]
        if np.any(size < (counts[chunk] + 1) * wb):
            raise FormatError(f"{where}: string chunk too small for its offsets")
        read = _word_reader(raw, buf.pos, wb)
        lo = read(chunk, pos)
        hi = read(chunk, pos + 1)
        if np.any(hi < lo) or np.any(hi > size) or np.any(lo < (counts[chunk] + 1) * wb):
            raise FormatError(f"{where}: string offsets point outside their chunk")
        lens = hi - lo
        offsets = np.zeros(pos.size + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        block = Variable(offsets, raw[range_indices(base + lo, lens)], pos.size)
        return block if k == "variable" else fsst_decode(enc.fsst.symbol_table, block, where)
    return None


def word_view(raw: np.ndarray, starts: np.ndarray,
              nbytes: int) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """``raw`` as little-endian words of ``nbytes`` (1, 2, 4 or 8) bytes and the word index
    of each buffer start ``starts[i]``, or None when the starts differ modulo ``nbytes``.

    The view may be unaligned in memory (numpy reads such arrays correctly).
    """
    if nbytes not in (1, 2, 4, 8):
        return None
    if nbytes == 1 or starts.size == 0:
        return raw, starts
    shift = int(starts[0]) % nbytes
    if np.any(starts % nbytes != shift):
        return None
    nwords = (raw.size - shift) // nbytes
    words = raw[shift : shift + nwords * nbytes].view(f"<u{nbytes}")
    return words, (starts - shift) // nbytes


def gather_words(raw: np.ndarray, starts: np.ndarray, width: int, chunk: np.ndarray,
                 pos: np.ndarray) -> np.ndarray | None:  # fmt: skip
    """Bytes of values ``pos[i]`` (``width`` bytes each) of the buffer starting at
    ``raw[starts[chunk[i]]]``, gathered as whole words; None unless ``width`` is a word
    size and every buffer starts at the same offset modulo ``width`` (the caller has
    checked that the values lie inside their buffers)."""
    view = word_view(raw, starts, width)
    if view is None:
        return None
    words, first = view
    return words[first[chunk] + pos].view(np.uint8)


def _word_reader(raw: np.ndarray, starts: np.ndarray, nbytes: int):
    """``read(chunk, j)``: word ``j[i]`` (``nbytes`` bytes, little-endian, unsigned) of the
    buffer at ``raw[starts[chunk[i]]]``, as int64 (words within the buffers)."""
    view = word_view(raw, starts, nbytes)
    if view is None:
        return lambda chunk, j: _read_uint(raw, starts[chunk] + j * nbytes, nbytes)
    words, first = view
    return lambda chunk, j: words[first[chunk] + j].astype(np.int64)


def _read_uint(raw: np.ndarray, at: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(at.shape, np.int64)
    for i in range(nbytes):
        out |= raw[at + i].astype(np.int64) << (8 * i)
    return out


@cache
def row_lane(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and lane of the FastLanes slot holding each block position."""
    slot = bp.inverse_positions(bits).astype(np.int64)
    lanes = bp.BLOCK // bits
    return slot // lanes, slot % lanes


def _sparse_inline(ib: pb.InlineBitpacking, buf: ChunkBuffers, chunk: np.ndarray,
                   pos: np.ndarray, where: str) -> Fixed:  # fmt: skip
    bits = int(ib.uncompressed_bits_per_value)
    if bits not in (8, 16, 32, 64):
        raise FormatError(f"{where}: inline bitpacking of {bits}-bit values")
    wb = bits // 8
    lanes = bp.BLOCK // bits
    raw, starts, sizes = buf.raw, buf.pos, buf.sizes
    if np.any(sizes < wb):
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    dt = bp.dtype_for(bits)
    view = word_view(raw, starts, wb)
    if view is None:
        width_c = _read_uint(raw, starts, wb)
    else:
        words, first = view
        width_c = words[first].astype(np.int64)
    # one bit width per chunk, the chunk holding exactly one packed block
    if np.any(width_c > bits):
        raise FormatError(f"{where}: bit width {int(width_c.max())} over {bits} bits")
    if not np.array_equal(sizes, (1 + width_c * lanes) * wb):
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    mask_c = (np.uint64(1) << np.minimum(width_c, 63).astype(np.uint64)) - np.uint64(1)
    mask_c = np.where(width_c >= 64, np.uint64(0xFFFFFFFFFFFFFFFF), mask_c).astype(dt)
    row_of, lane_of = row_lane(bits)
    row, lane = row_of[pos], lane_of[pos]
    width = width_c[chunk]
    start = row * width
    w0, shift = start // bits, start % bits
    j = np.where(width > 0, 1 + w0 * lanes + lane, 0)  # 0 bits: no words, read the header
    spill = shift + width > bits  # the value continues in the next word of its lane
    j_hi = np.where(spill, j + lanes, j)
    if view is None:
        lo = _read_uint(raw, starts[chunk] + j * wb, wb).astype(dt)
        hi = _read_uint(raw, starts[chunk] + j_hi * wb, wb).astype(dt)
    else:
        at = first[chunk]
        lo = words[at + j].astype(dt, copy=False)
        hi = words[at + j_hi].astype(dt, copy=False)
    sh = shift.astype(dt)
    # without a spill the high part lands at bits >= width and is masked off; two shifts
    # keep each below the word size
    val = (lo >> sh) | ((hi << dt.type(1)) << (dt.type(bits - 1) - sh))
    val &= mask_c[chunk]
    return Fixed(val.view(np.uint8), bits, pos.size)
