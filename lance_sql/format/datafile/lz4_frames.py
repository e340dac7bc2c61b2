"""Runs of LZ4 buffers inflated in one codec call each, as one LZ4 frame.

Lance's LZ4 buffers are a u32 inflated size then one raw LZ4 block. pyarrow inflates raw
blocks one call at a time (~2 us of call overhead each, plus the Python around it), so a
scan of a string page cost more the smaller its chunks. The LZ4 *frame* format
(lz4_Frame_format.md in the lz4 repository) is a header, then size-prefixed blocks, then
an end mark; with independent blocks, a frame is just raw blocks in a row. So a run of
buffers becomes one frame (header made here, each block behind its compressed size) and
inflates in one call of pyarrow's frame codec, in C, without the GIL, straight into one
buffer: the chunks back to back, each where the sum of the prefixes before it says.

The header records the run's total size, which liblz4 checks. Measured on a 2M-row
string column (27 MB inflated): one call per 4 MiB run inflates as fast as 64 KiB
chunks one call at a time, and ~1/4 faster for 16 KiB chunks. (pyarrow's streaming
reader would take one frame per buffer, so each buffer's own size would be checked by
liblz4, but it copies everything once more: measured ~40% slower than one call a chunk
for 64 KiB chunks.)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError

MAX_BLOCK = 4 << 20  # the largest block an LZ4 frame holds (block size id 7)
_MAGIC = np.frombuffer(b"\x04\x22\x4d\x18", np.uint8)
_FLG = 0x40 | 0x20 | 0x08  # version 01, independent blocks, content size recorded
_BLOCK_IDS = ((64 << 10, 4), (256 << 10, 5), (1 << 20, 6), (4 << 20, 7))
_HEADER = 15  # magic, FLG, BD, content size, header checksum
_END = b"\0\0\0\0"

_P1, _P2, _P3, _P4, _P5 = (np.uint32(p) for p in (2654435761, 2246822519, 3266489917,
                                                   668265263, 374761393))  # fmt: skip


def xxh32_short(rows: np.ndarray) -> np.ndarray:
    """XXH32 (seed 0) of each row of a ``(n, length)`` uint8 array, ``length`` < 16
    (the short-input path of the algorithm: words, then bytes, then the avalanche)."""
    n, length = rows.shape
    if length >= 16:
        raise ValueError("xxh32_short hashes fewer than 16 bytes a row")

    def rotl(x: np.ndarray, r: int) -> np.ndarray:
        return (x << np.uint32(r)) | (x >> np.uint32(32 - r))

    h = np.full(n, np.uint32(374761393 + length), np.uint32)
    words = length // 4
    if words:
        lanes = np.ascontiguousarray(rows[:, : 4 * words]).view("<u4").astype(np.uint32)
        for k in range(words):
            h = rotl(h + lanes[:, k] * _P3, 17) * _P4
    for k in range(4 * words, length):
        h = rotl(h + rows[:, k].astype(np.uint32) * _P5, 11) * _P1
    h ^= h >> np.uint32(15)
    h *= _P2
    h ^= h >> np.uint32(13)
    h *= _P3
    h ^= h >> np.uint32(16)
    return h


def prefixes(raw: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The u32 inflated-size prefix of the buffers at ``pos`` (each at least 4 bytes)."""
    head = raw[pos[:, None] + np.arange(4)[None, :]].astype(np.int64)
    return head[:, 0] | (head[:, 1] << 8) | (head[:, 2] << 16) | (head[:, 3] << 24)


def fits(sizes: np.ndarray, full: np.ndarray) -> bool:
    """Whether buffers of ``sizes`` bytes claiming ``full`` inflated bytes can be framed:
    a prefix and a non-empty block, and no block over :data:`MAX_BLOCK` either way."""
    return bool(sizes.size and np.all(sizes > 4) and np.all(full > 0)
                and int(np.maximum(sizes - 4, full).max()) <= MAX_BLOCK)  # fmt: skip


class FrameGroups:
    """Runs ("groups") of the buffers ``raw[pos[i] : pos[i] + sizes[i]]`` (LZ4 with a
    u32 size prefix, ``full[i]``, see :func:`prefixes`; callers check :func:`fits`
    first), each group inflated by one codec call as one LZ4 frame (:meth:`inflate`),
    from any thread. Group ``g`` is buffers ``starts[g]`` to ``starts[g + 1] - 1``.

    The frame headers of all groups are made at once (a few numpy calls), so a group
    costs one join of its blocks and one call, whatever its number of buffers. liblz4
    checks each group's total against the sum of its prefixes; a single buffer's size is
    not checked by the codec (the caller checks what its prefix places, see
    :func:`compressive._lz4_variable`).

    Raises :class:`FormatError` when a buffer lies outside ``raw`` or claims more than LZ4
    can inflate its bytes to (before anything is allocated).
    """

    def __init__(self, raw: np.ndarray, pos: np.ndarray, sizes: np.ndarray,
                 full: np.ndarray, starts: list[int], where: str) -> None:  # fmt: skip
        pos = pos.astype(np.int64, copy=False)
        sizes = sizes.astype(np.int64, copy=False)
        full = full.astype(np.int64, copy=False)
        if np.any(pos < 0) or np.any(pos + sizes > raw.size):
            raise FormatError(f"{where}: an LZ4 buffer lies outside its page")
        if np.any(full > 255 * sizes + 64):
            raise FormatError(f"{where}: an LZ4 buffer claims more bytes than it can inflate to")
        first = np.asarray(starts, np.int64)
        totals = np.add.reduceat(full, first)
        block_max = np.maximum.reduceat(np.maximum(sizes - 4, full), first)
        ids = np.full(first.size, _BLOCK_IDS[-1][1], np.uint8)
        for limit, code in reversed(_BLOCK_IDS[:-1]):
            ids[block_max <= limit] = code
        heads = np.zeros((first.size, _HEADER), np.uint8)
        heads[:, 0:4] = _MAGIC
        heads[:, 4] = _FLG
        heads[:, 5] = ids << 4
        heads[:, 6:14] = totals.astype("<u8").view(np.uint8).reshape(-1, 8)
        heads[:, 14] = (xxh32_short(heads[:, 4:14]) >> np.uint32(8)).astype(np.uint8)
        self._heads = heads.reshape(-1).data
        self._blocks = (sizes - 4).astype("<u4").view(np.uint8).data  # block sizes
        self._raw = raw.data
        self._lo = (pos + 4).tolist()
        self._hi = (pos + sizes).tolist()
        self._bounds = [*starts, pos.size]
        self._totals = totals.tolist()
        self._where = where

    def inflate(self, g: int) -> pa.Buffer:
        """Group ``g``'s buffers inflated back to back (each where the sum of the prefixes
        before it in the group says). Raises :class:`FormatError` when one is corrupt or
        the group does not inflate to the sum of its prefixes."""
        a, b = self._bounds[g], self._bounds[g + 1]
        bv, rv = self._blocks, self._raw
        parts: list[memoryview | bytes] = [_END] * (2 * (b - a) + 2)
        parts[0] = self._heads[g * _HEADER : (g + 1) * _HEADER]
        parts[1:-1:2] = [bv[k : k + 4] for k in range(4 * a, 4 * b, 4)]
        parts[2:-1:2] = [rv[x:y] for x, y in zip(self._lo[a:b], self._hi[a:b], strict=True)]
        total = self._totals[g]
        try:
            out = _codec().decompress(b"".join(parts), decompressed_size=total)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise FormatError(f"{self._where}: corrupt LZ4 buffer: {exc}") from exc
        if out.size != total:
            raise FormatError(f"{self._where}: LZ4 buffers inflate to {out.size} bytes, "
                              f"not {total}")  # fmt: skip
        return out


@cache
def _codec() -> pa.Codec:
    return pa.Codec("lz4")  # the frame format
