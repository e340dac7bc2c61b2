"""Variable-length byte strings as rows of a zero-padded matrix, for hashing whole columns.

The hashes of region routing (murmur3) and of the primary-key bloom filter (SipHash) both
consume values word by word; laid out as rows of equal width, word ``j`` of every value is
one column, and each hash step is one numpy operation over all values.
"""

from __future__ import annotations

import numpy as np

__all__ = ["padded_rows", "ranges"]


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorised."""
    lengths = lengths.astype(np.int64, copy=False)
    before = np.cumsum(lengths) - lengths
    return (np.arange(int(lengths.sum()), dtype=np.int64)
            + np.repeat(starts.astype(np.int64, copy=False) - before, lengths))


def padded_rows(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray,
                word_bytes: int) -> np.ndarray:
    """Values ``data[starts[i]:starts[i]+lengths[i]]`` as a ``(n, width * word_bytes)``
    uint8 matrix, zero-padded; ``width`` leaves every value at least one word of padding
    room (``max(lengths) // word_bytes + 1`` words), where the hashes find their tails."""
    n = lengths.size
    width = int((lengths // word_bytes).max(initial=0)) + 1
    dense = np.zeros(n * word_bytes * width, np.uint8)
    total = int(lengths.sum())
    if total:
        first = np.cumsum(lengths) - lengths
        dest = np.arange(total, dtype=np.int64)
        dest += np.repeat(np.arange(n, dtype=np.int64) * (word_bytes * width) - first,
                          lengths)
        contiguous = n == 1 or bool(np.all(starts[1:] == starts[:-1] + lengths[:-1]))
        if contiguous:
            dense[dest] = data[int(starts[0]):int(starts[0]) + total]
        else:
            dense[dest] = data[ranges(starts, lengths)]
    return dense.reshape(n, word_bytes * width)
