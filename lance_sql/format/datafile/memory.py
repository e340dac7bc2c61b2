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
