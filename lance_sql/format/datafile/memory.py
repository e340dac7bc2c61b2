"""Output buffers for large decoded columns, taken from Arrow's memory pool.

Fresh memory is dear on the machines this runs on: a new ``bytes`` object or numpy array
of tens of megabytes is mapped from the operating system and faulted in page by page
(measured ~2 ns a byte, more than the decoding that fills it), and given back when freed.
Arrow's pool (mimalloc or jemalloc) keeps freed memory for the next allocation, so a scan
that decodes column after column reuses the same pages. The arrays returned here wrap a
pool buffer, which lives as long as any array viewing it (Arrow arrays made from them too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def pool_bytes(size: int) -> np.ndarray:
    """A writable, uninitialised uint8 array of ``size`` bytes in Arrow's memory pool."""
    return np.frombuffer(pa.allocate_buffer(max(size, 0)), np.uint8)


def join_slices(source: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """``source[starts[i]:stops[i]]`` back to back, in a pool buffer (one numpy
    concatenation, no intermediate ``bytes``)."""
    out = pool_bytes(int((stops - starts).sum()))
    if starts.size:
        np.concatenate([source[a:b] for a, b in zip(starts.tolist(), stops.tolist(),
                                                    strict=True)], out=out)  # fmt: skip
    return out


def gather_runs(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """``source[starts[i] : starts[i] + lengths[i]]`` back to back, in C: Arrow's ``take``
    of every other value of a binary array over ``source`` whose values are the runs and
    the gaps between them (no per-byte index). None unless the runs are in order and do
    not overlap (then the caller gathers by index)."""
    n = starts.size
    if n == 0:
        return pool_bytes(0)
    starts = starts.astype(np.int64, copy=False)
    ends = starts + lengths
    if (int(starts[0]) < 0 or int(ends[-1]) > source.size or np.any(lengths < 0)
            or np.any(starts[1:] < ends[:-1])):  # fmt: skip
        return None
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2], bounds[1::2] = starts, ends
    large = source.size >= 2**31
    offsets = bounds if large else bounds.astype(np.int32)
    runs = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), 2 * n - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(source)])  # fmt: skip
    taken = runs.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    total = int(lengths.sum())
    return np.frombuffer(taken.buffers()[2], np.uint8, total) if total else pool_bytes(0)


def words_at(raw: np.ndarray, dt: np.dtype, skip: int = 0) -> np.ndarray:
    """The words ``dt`` (a little-endian integer type) of the bytes ``raw`` starting at
    every byte from ``skip`` on, as a view: word ``i`` is the bytes from ``skip + i``
    (numpy reads unaligned words). So the words at scattered offsets are one index of it,
    not a gather of their bytes (an index array ``width`` times the size, then a view);
    an offset whose word runs past ``raw`` is out of range, as for that gather."""
    count = raw.size - skip - dt.itemsize + 1
    if count <= 0:
        return np.zeros(0, dt)
    return np.ndarray((count,), dt, raw, skip, (1,))


def aligned_words(raw: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The whole words ``dt`` of ``raw`` (its first ``raw.size // dt.itemsize``), as a
    view: word ``i`` is the bytes from ``i * dt.itemsize``. Where ``raw`` starts at a
    multiple of the word size the view is aligned, and numpy gathers from it faster than
    from :func:`words_at`'s (unaligned items are copied one call each)."""
    return np.ndarray((raw.size // dt.itemsize,), dt, raw)


VIEW_INLINE = 12  # bytes an Arrow binary view holds in itself
VIEW_LIMIT = 1 << 31  # a view's offset into its buffer is an i32


def byte_views(sources: Sequence[np.ndarray], starts: Sequence[np.ndarray],
               lengths: np.ndarray) -> np.ndarray:  # fmt: skip
    """Arrow binary views (rows of four i32) of the runs ``sources[r][s : s + n]``, ``s`` in
    ``starts[r]`` for each ``r`` in turn and ``n`` the matching ``lengths``, for
    :func:`join_views` (a gather in C, no Python per run): a run of up to 12 bytes is held
    in its view (its length, its bytes, zeros), a longer one is its length, a zero prefix,
    its source's index and its start. (Arrow reads a long view's bytes from its buffer;
    the prefix, the run's first 4 bytes in a well-formed view, serves only comparisons, so
    these views are for :func:`join_views` alone: reading every run's first bytes cost a
    cache miss a run.) Callers check that every run lies inside its source and that
    sources are smaller than :data:`VIEW_LIMIT`."""
    lengths = lengths.astype(np.int64, copy=False)
    view = np.zeros((lengths.size, 4), "<i4")
    view[:, 0] = lengths
    which = np.repeat(np.arange(len(sources), dtype=np.int32), [s.size for s in starts])
    at = np.concatenate(starts).astype(np.int64, copy=False) if starts else lengths[:0]
    far = np.flatnonzero(lengths > VIEW_INLINE)
    view[far, 2] = which[far]
    view[far, 3] = at[far]
    short = np.flatnonzero((lengths > 0) & (lengths <= VIEW_INLINE))
    if short.size:  # their bytes, then zeros (those past a source's end read as its last)
        held = np.zeros((short.size, VIEW_INLINE), np.uint8)
        step = np.arange(VIEW_INLINE)
        for r, src in enumerate(sources):
            mine = np.flatnonzero(which[short] == r)
            if mine.size:
                held[mine] = src[np.minimum(at[short[mine], None] + step, src.size - 1)]
        held[step >= lengths[short, None]] = 0
        view[short, 1:] = held.view("<i4")
    return view


def join_views(view: np.ndarray, sources: Sequence[np.ndarray | pa.Buffer]) -> pa.Buffer:
    """The runs of ``view`` (rows made by :func:`byte_views` over ``sources``, or inline
    ones) back to back in one new buffer: Arrow casts the binary views to one binary
    array (a copy per run in C, without the interpreter lock)."""
    total = int(view[:, 0].sum(dtype=np.int64))
    if not total:
        return pa.allocate_buffer(0)
    views = pa.Array.from_buffers(pa.binary_view(), view.shape[0],
                                  [None, pa.py_buffer(view), *map(pa.py_buffer, sources)])
    return views.cast(pa.large_binary()).buffers()[2].slice(0, total)
