"""How writers cut columns into pages: buffer arrays, flush past a size, split evenly."""

from __future__ import annotations

import math

import pyarrow as pa


def split_rows(nbytes: int, rows: int, max_page_bytes: int) -> list[tuple[int, int]]:
    """Split ``rows`` into near-equal (start, length) runs of at most ``max_page_bytes`` each."""
    count = max(1, min(rows, math.ceil(nbytes / max_page_bytes)))
    size = math.ceil(rows / count)
    return [(s, min(size, rows - s)) for s in range(0, rows, size)]


class PageBuffer:
    """Arrays waiting to become pages of one column (or one top-level field)."""

    def __init__(self, page_bytes: int, max_page_bytes: int) -> None:
        self.page_bytes = page_bytes
        self.max_page_bytes = max_page_bytes
        self._arrays: list[pa.Array] = []
        self._nbytes = 0

    def add(self, arr: pa.Array) -> bool:
        """Buffer ``arr``; True when enough is pending to write pages."""
        if len(arr):
            self._arrays.append(arr)
            self._nbytes += arr.nbytes
        return self._nbytes > self.page_bytes

    def drain(self) -> list[pa.Array]:
        """Everything pending, as page-sized slices (empty when nothing is pending)."""
        if not self._arrays:
            return []
        arrays, nbytes = self._arrays, self._nbytes
        self._arrays, self._nbytes = [], 0
        arr = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
        return [arr.slice(s, n) for s, n in split_rows(nbytes, len(arr), self.max_page_bytes)]
