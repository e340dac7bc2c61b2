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

Frames are laid out by Arrow from a binary-view array of the blocks where they lie
(:func:`_frame`: no Python per block, no interpreter lock held). A scan inflates a page's
chunks by groups (:class:`FrameGroups`); the point paths (a take of scattered rows)
inflate the chunks they touch in many pages by :func:`inflate_runs`, and a large
run is cut into frames inflated on two threads when a CPU is idle; a take of many rows
begins them (:class:`Inflating`) before taking its other columns, so the helper thread
inflates while the caller works, and the caller joins in on the frames left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import memory, parallel

MAX_BLOCK = 4 << 20  # the largest block an LZ4 frame holds (block size id 7)
_MAGIC = b"\x04\x22\x4d\x18"
_FLG = 0x40 | 0x20 | 0x08  # version 01, independent blocks, content size recorded
_BLOCK_IDS = ((64 << 10, 4), (256 << 10, 5), (1 << 20, 6), (4 << 20, 7))
_END = b"\0\0\0\0"
# Runs inflating to twice this many bytes or more are cut into frames of about this
# many or more, inflated side by side, when the read has the cores to itself and a CPU
# is idle (:func:`parallel.threads_for`; on a CPU another process keeps busy a helper
# only slowed lookups down): a 1000-key take of strings in 32 KiB chunks inflates
# ~25 MB (~6 ms of codec alone; about half in the default's 16 KiB chunks). One frame
# otherwise (more on one thread gain nothing).
SPLIT_BYTES = 2 << 20
# At most this many frames, taken in turn by the threads (:class:`parallel.Begun`):
# a helper thread that gets no core for a while leaves the caller frames to do.
MAX_PARTS = 4
# Counts of :func:`inflate_runs` calls (tests): all of them, and those cut into frames.
RUNS_CALLS = [0]
SPLIT_CALLS = [0]

_U32 = np.dtype("<u4")


def prefixes(raw: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The u32 inflated-size prefix of the buffers at ``pos`` (each at least 4 bytes)."""
    return memory.words_at(raw, _U32)[pos].astype(np.int64)


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

    A group costs one header (:func:`frame_header`), one gather of its blocks by Arrow
    (:func:`_frame`, from the blocks' binary views made once) and one codec call, with no
    Python per buffer, whatever its number of buffers. liblz4
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
        self._heads = [frame_header(t, m) for t, m in zip(totals.tolist(),
                                                          block_max.tolist(), strict=True)]
        self._length = (sizes - 4).astype(np.int32)  # block sizes
        self._bounds = [*starts, pos.size]
        self._totals = totals.tolist()
        self._where = where
        self._raw = raw
        if raw.size < memory.VIEW_LIMIT:  # each block's binary view, for _frame
            self._views: np.ndarray | None = memory.byte_views([raw], [pos + 4], self._length)
            self._buffers = [pa.py_buffer(raw)]
        else:  # (a page of 2 GiB or more: each block's slice, joined)
            self._views = None
            self._lo, self._hi = (pos + 4).tolist(), (pos + sizes).tolist()

    def inflate(self, g: int) -> pa.Buffer:
        """Group ``g``'s buffers inflated back to back (each where the sum of the prefixes
        before it in the group says). Raises :class:`FormatError` when one is corrupt or
        the group does not inflate to the sum of its prefixes."""
        a, b = self._bounds[g], self._bounds[g + 1]
        if self._views is not None:
            frame = _frame(self._heads[g], self._length[a:b], self._views[a:b], self._buffers)
            return _decompress(frame, self._totals[g], self._where)
        rv = self._raw.data
        return _inflate_frame(self._heads[g], self._length[a:b].astype("<u4").view(np.uint8).data,
                              [rv[x:y] for x, y in zip(self._lo[a:b], self._hi[a:b],
                                                       strict=True)],
                              self._totals[g], self._where)


def _frame(header: bytes, length: np.ndarray, view: np.ndarray,
           buffers: Sequence[pa.Buffer]) -> pa.Buffer:  # fmt: skip
    """The LZ4 frame of ``header``, then each block (its size ``length[i]`` as a word, then
    its bytes, the binary view ``view[i]`` over ``buffers``, see
    :func:`memory.byte_views`), then the end mark: laid out by Arrow in one gather (no
    Python per block, no interpreter lock held)."""
    heads = [header[i : i + memory.VIEW_INLINE]
             for i in range(0, len(header), memory.VIEW_INLINE)]  # fmt: skip
    rows = np.zeros((len(heads) + 2 * length.size + 1, 4), "<i4")
    inline = rows.view(np.uint8)
    for i, piece in enumerate(heads):
        rows[i, 0] = len(piece)
        inline[i, 4 : 4 + len(piece)] = np.frombuffer(piece, np.uint8)
    words = rows[len(heads) : -1 : 2]
    words[:, 0] = 4
    words[:, 1] = length  # the block's size word, inline
    rows[len(heads) + 1 : -1 : 2] = view
    rows[-1, 0] = 4  # the end mark: four zero bytes, inline
    return memory.join_views(rows, buffers)


_M32 = 0xFFFFFFFF


def xxh32_small(data: bytes) -> int:
    """XXH32 (seed 0) of fewer than 16 bytes (a frame descriptor's), in Python ints: the
    short-input path of the algorithm (words, then bytes, then the avalanche)."""
    if len(data) >= 16:
        raise ValueError("xxh32_small hashes fewer than 16 bytes")
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    h = (p5 + len(data)) & _M32
    at = 0
    while at + 4 <= len(data):
        h = (h + int.from_bytes(data[at : at + 4], "little") * p3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * p4 & _M32
        at += 4
    for byte in data[at:]:
        h = (h + byte * p5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * p1 & _M32
    h ^= h >> 15
    h = h * p2 & _M32
    h ^= h >> 13
    h = h * p3 & _M32
    return h ^ (h >> 16)


def frame_header(content_size: int, block_max: int) -> bytes:
    """The header of a frame of independent blocks of at most ``block_max`` bytes (either
    way) inflating to ``content_size`` bytes in all, which liblz4 then checks."""
    code = next(c for limit, c in _BLOCK_IDS if block_max <= limit)
    return _header(content_size, code)


@lru_cache(maxsize=4096)  # chunk sizes repeat: a one-row take makes no header twice
def _header(content_size: int, code: int) -> bytes:
    descriptor = bytes([_FLG, code << 4]) + content_size.to_bytes(8, "little")
    return _MAGIC + descriptor + bytes([(xxh32_small(descriptor) >> 8) & 0xFF])


def inflate_exact(blocks: Sequence[memoryview | bytes], sizes: Sequence[int],
                  where: str) -> list[pa.Buffer | bytes]:  # fmt: skip
    """Raw LZ4 ``blocks`` (no size prefix) inflated, ``sizes[i]`` bytes each and all of
    them bytes the blocks inflated to, or a FormatError: pyarrow's raw-block codec returns
    a buffer of the size it is asked for even when the block inflates to less, the rest
    of it uninitialised memory, so a prefix that overstates must not size the output
    unchecked. The blocks go into one frame (one join of their bytes, one codec call)
    whose recorded content size liblz4 checks; each block's own size is then where the
    sizes before it place it (a block that inflates short shifts the next ones and the
    total no longer matches, unless another block's size overstates as much: the blocks
    then get each other's bytes, all of them inflated, and the callers' offset checks see
    the rest). A block too large for a frame is inflated raw and checked by a second call
    one byte short, which must fail. Callers bound ``sizes`` before calling (they size
    the output)."""
    if len(blocks) == 1 and 0 < sizes[0] <= MAX_BLOCK and 1 < len(blocks[0]) <= MAX_BLOCK:
        return [_inflate_one(blocks[0], sizes[0], where)]  # a one-row take's chunk
    out: list[pa.Buffer | bytes] = [b""] * len(blocks)
    framed = [i for i, (b, n) in enumerate(zip(blocks, sizes, strict=True))
              if n and len(b) and max(n, len(b)) <= MAX_BLOCK]
    for i, (block, size) in enumerate(zip(blocks, sizes, strict=True)):
        if size and (not len(block) or max(size, len(block)) > MAX_BLOCK):
            out[i] = _inflate_raw(block, size, where)
        elif not size and len(block) > 1:  # an empty block is one zero token
            raise FormatError(f"{where}: an LZ4 block of {len(block)} bytes claims 0")
    if not framed:
        return out
    picked = [sizes[i] for i in framed]
    lengths = np.fromiter((len(blocks[i]) for i in framed), np.int64, len(framed))
    total = sum(picked)
    whole = _inflate_frame(frame_header(total, max(max(picked), int(lengths.max()))),
                           memoryview(lengths.astype("<u4").tobytes()),
                           [blocks[i] for i in framed], total, where)
    at = 0
    for i, size in zip(framed, picked, strict=True):
        out[i] = whole.slice(at, size)
        at += size
    return out


def _inflate_one(block: memoryview | bytes, size: int, where: str) -> pa.Buffer:
    """:func:`inflate_exact` of one block that fits a frame, with less Python around."""
    return _inflate_frame(frame_header(size, max(size, len(block))),
                          memoryview(len(block).to_bytes(4, "little")), [block], size, where)


def _inflate_frame(header: bytes, words: memoryview, blocks: Sequence[memoryview | bytes],
                   total: int, where: str) -> pa.Buffer:
    """The frame of ``header``, each block after its size word (``words``: u32 each) and
    the end mark, inflated in one codec call, which checks it inflates to ``total``."""
    parts: list[memoryview | bytes] = [_END] * (2 * len(blocks) + 2)
    parts[0] = header
    parts[1:-1:2] = [words[k : k + 4] for k in range(0, 4 * len(blocks), 4)]
    parts[2:-1:2] = blocks
    return _decompress(b"".join(parts), total, where)


def _inflate_raw(block: memoryview | bytes, size: int, where: str) -> pa.Buffer:
    """One raw block of over :data:`MAX_BLOCK` bytes inflated to exactly ``size``."""
    raw = pa.Codec("lz4_raw")
    try:
        out = raw.decompress(block, decompressed_size=size)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise FormatError(f"{where}: corrupt LZ4 buffer: {exc}") from exc
    try:  # fits in one byte less: it inflates short, the rest of `out` is not its bytes
        raw.decompress(block, decompressed_size=size - 1)
    except (OSError, pa.ArrowException, ValueError):
        return out
    raise FormatError(f"{where}: LZ4 buffer inflates to fewer than the {size} bytes it claims")


@cache
def _codec() -> pa.Codec:
    return pa.Codec("lz4")  # the frame format


# ------------------------------------------------------------------ runs of many pages
@dataclass(frozen=True)
class Inflated:
    """LZ4 buffers inflated back to back into ``parts`` (one per frame): buffers
    ``bounds[k]`` to ``bounds[k + 1] - 1`` lie in ``parts[k]``, buffer ``i`` at
    ``starts[i]`` of its part, ``sizes[i]`` bytes long."""

    parts: list[pa.Buffer]
    bounds: list[int]
    starts: np.ndarray
    sizes: np.ndarray

    def pieces(self) -> list[pa.Buffer]:
        """Each buffer as a slice of its part."""
        out: list[pa.Buffer] = []
        for part, a, b in zip(self.parts, self.bounds[:-1], self.bounds[1:], strict=True):
            out.extend(part.slice(s, n) for s, n in zip(self.starts[a:b].tolist(),
                                                       self.sizes[a:b].tolist(), strict=True))
        return out


def inflate_runs(raws: Sequence[np.ndarray], pos: Sequence[np.ndarray],
                 sizes: Sequence[np.ndarray], full: Sequence[np.ndarray],
                 where: Where, *, begin: bool = False) -> Inflated | Inflating | None:
    """The LZ4 buffers ``raws[r][pos[r][i] : pos[r][i] + sizes[r][i]]`` (a u32 size prefix,
    then a block; ``full[r][i]`` the prefix, read and bounded by the caller), of every
    ``r`` in turn, inflated back to back as one frame, or, when they inflate to twice
    :data:`SPLIT_BYTES` or more and a CPU is idle (:func:`parallel.threads_for`), as
    several (see :func:`_cuts`) inflated side by side; liblz4 checks each frame's total.

    The frame is laid out without the interpreter: a binary-view array (its elements the
    header, then each block's size word and the block, where it lies in its raw, then the
    end mark), cast to one binary buffer by Arrow, so a helper thread builds and inflates
    its frame alongside the caller. None (before anything is inflated) when a buffer does
    not fit a frame (see :func:`fits`) or a raw is too large for a view: the caller
    inflates them by :func:`inflate_exact`. A buffer outside its raw is a FormatError.
    ``where`` names the buffers' place in errors: one name for all, or buffer ``i``'s
    name (its page's, say) by ``where(i)``: a frame that fails then has the buffer at
    fault found (by halves) so that its error names that buffer's place.

    With ``begin``, an :class:`Inflating` instead: the frames begun on a helper thread
    (when one may be used) while the caller does other work, then collected."""
    if not raws:
        return None
    pos_all = np.concatenate(pos).astype(np.int64, copy=False)
    size_all = np.concatenate(sizes).astype(np.int64, copy=False)
    full_all = np.concatenate(full).astype(np.int64, copy=False)
    if not fits(size_all, full_all) or max(r.size for r in raws) >= memory.VIEW_LIMIT:
        return None
    counts = [p.size for p in pos]
    limit = np.repeat(np.array([r.size for r in raws], np.int64), counts)
    outside = (pos_all < 0) | (pos_all + size_all > limit)
    if outside.any():
        raise FormatError(f"{_named(where, int(outside.argmax()))}: an LZ4 buffer lies "
                          "outside its page")
    return inflate_joined(raws, counts, pos_all, size_all, full_all, where, begin=begin)


def inflate_joined(raws: Sequence[np.ndarray], counts: Sequence[int], pos: np.ndarray,
                   sizes: np.ndarray, full: np.ndarray, where: Where, *,
                   begin: bool = False) -> Inflated | Inflating | None:
    """:func:`inflate_runs` of buffers given joined (int64 arrays): the first
    ``counts[0]`` lie in ``raws[0]``, the next ``counts[1]`` in ``raws[1]``, and so on.
    Callers have checked that every buffer lies inside its raw (a take of many rows
    knows it from its chunks' checks, so it skips a second pass over them); None, as
    there, when a buffer does not fit a frame or a raw is too large for a view."""
    if not fits(sizes, full) or max(r.size for r in raws) >= memory.VIEW_LIMIT:
        return None
    n = pos.size
    length = (sizes - 4).astype(np.int32)
    bounds = np.cumsum([0, *counts]).tolist()
    view = memory.byte_views(raws, [pos[a:b] + 4 for a, b in
                                    zip(bounds[:-1], bounds[1:], strict=True)], length)
    block_max = np.maximum(length, full)
    buffers = [pa.py_buffer(raw) for raw in raws]
    cut: list[int]  # the frames' first buffers, then n (set below, before any inflate)

    def framed(a: int, b: int) -> tuple[pa.Buffer, int]:
        """The frame of buffers ``[a, b)``, and the bytes they inflate to."""
        want = int(full[a:b].sum())
        header = frame_header(want, int(block_max[a:b].max()))
        return _frame(header, length[a:b], view[a:b], buffers), want

    def inflate(k: int) -> pa.Buffer:
        a, b = cut[k], cut[k + 1]
        frame, want = framed(a, b)
        try:
            return _decompress(frame, want, _named(where, a))
        except FormatError:
            if callable(where):
                _blame(a, b)  # (raises naming the buffer at fault, when one fails alone)
            raise

    def _blame(a: int, b: int) -> None:
        """Halve ``[a, b)`` toward a half whose frame fails until one buffer is left,
        and inflate it alone under its own name (an error only when it fails alone)."""
        while b - a > 1:
            m = (a + b) // 2
            try:
                _decompress(*framed(a, m), "")
            except FormatError:
                b = m
            else:
                a = m
        _decompress(*framed(a, b), _named(where, a))

    cut = [0, n]
    # one frame on the calling thread below twice SPLIT_BYTES (checked again by _cuts)
    job: parallel.Begun[pa.Buffer] = parallel.Begun(
        MAX_PARTS if int(full.sum()) >= 2 * SPLIT_BYTES else 1, idle_only=True)
    try:
        if job.count > 1:
            cut = _cuts(full)
        job.start(inflate, range(len(cut) - 1))
    except BaseException:
        job.close()
        raise
    begun = Inflating(job, cut, full)
    return begun if begin else begun.result()


Where = str | Callable[[int], str]  # a place for errors: the same for all buffers, or each's


def _named(where: Where, i: int) -> str:
    """Buffer ``i``'s place, as ``where`` names it."""
    return where(i) if callable(where) else where


class Inflating:
    """An :func:`inflate_runs` begun (``begin``): its frames inflating on a helper
    thread when one may be used (else nothing has run yet). :meth:`result` has the
    caller inflate the frames left and gives the :class:`Inflated`; :meth:`close` (in a
    ``finally``; nothing after :meth:`result`) joins the helper, finished or not."""

    def __init__(self, job: parallel.Begun[pa.Buffer], cut: list[int],
                 full: np.ndarray) -> None:
        self._job, self._cut, self._full = job, cut, full

    def result(self) -> Inflated:
        parts = self._job.finish()
        RUNS_CALLS[0] += 1
        if len(parts) > 1:
            SPLIT_CALLS[0] += 1
        cut, full = self._cut, self._full
        starts = np.empty(full.size, np.int64)
        for a, b in zip(cut[:-1], cut[1:], strict=True):
            run = full[a:b]
            starts[a:b] = run.cumsum() - run
        return Inflated(parts, cut, starts, full)

    def close(self) -> None:
        self._job.close()


def _cuts(full: np.ndarray) -> list[int]:
    """Where buffers inflating to ``full`` bytes are cut into frames (their first
    buffers, then their count): one frame for less than twice :data:`SPLIT_BYTES`
    inflated, else up to :data:`MAX_PARTS` of about :data:`SPLIT_BYTES` or more each,
    of about equal size (each ends with the buffer where its share is reached)."""
    total = int(full.sum())
    parts = min(MAX_PARTS, total // SPLIT_BYTES, full.size)
    if parts < 2:
        return [0, full.size]
    at = np.searchsorted(full.cumsum(), total * np.arange(1, parts) // parts) + 1
    inner = np.unique(np.clip(at, 1, full.size - 1)).tolist()
    return [0, *inner, full.size]


def _decompress(frame: pa.Buffer | bytes, total: int, where: str) -> pa.Buffer:
    """A whole frame inflated in one codec call, which checks it inflates to ``total``."""
    try:
        out = _codec().decompress(frame, decompressed_size=total)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise FormatError(f"{where}: corrupt LZ4 buffer: {exc}") from exc
    if out.size != total:
        raise FormatError(f"{where}: LZ4 buffers inflate to {out.size} bytes, not {total}")
    return out
