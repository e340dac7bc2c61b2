"""Output buffers for large decoded columns, taken from Arrow's memory pool.

Fresh memory is dear on the machines this runs on: a new ``bytes`` object or numpy array
of tens of megabytes is mapped from the operating system and faulted in page by page
(measured ~2 ns a byte, more than the decoding that fills it), and given back when freed.
Arrow's pool (mimalloc or jemalloc) keeps freed memory for the next allocation, so a scan
that decodes column after column reuses the same pages. The arrays returned here wrap a
pool buffer, which lives as long as any array viewing it (Arrow arrays made from them too).
"""

from __future__ import annotations

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
