"""Matching a table's key column against a merge source's keys, one fragment at a time.

merge_insert's general path joins every live target row's key and row address with the
source (an Arrow hash join over the whole table). When the key is one column and the
source's non-null keys are unique, each target key matches at most one source row, so
a fragment's keys can be looked up directly, without materialising row addresses:

* integer keys: the source keys sorted once; a fragment whose keys increase (the usual
  shape of appended or merged tables) is answered by searching the few source keys in
  its range inside it, any other fragment through a table of flags over the source's
  key span;
* other hashable types (strings, binary, dates, timestamps, ...): Arrow's ``index_in``.

Pure logic: the caller reads the keys and honours deletions.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["KeyMatcher"]

_HASHED = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
           pa.types.is_large_binary, pa.types.is_fixed_size_binary, pa.types.is_date,
           pa.types.is_timestamp, pa.types.is_time, pa.types.is_boolean)


# Unsorted fragments are matched through flags over the source keys' span, at most
# 2**_BUCKET_BITS of them (16 MiB while the merge runs): one per key value when the
# span is that small, else one per bucket of neighbouring values (a flagged bucket's
# rows are then confirmed by a binary search, which alone would be slow: measured
# 10x an Arrow join over 10M shuffled keys).
_BUCKET_BITS = 24


def _flat(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


class KeyMatcher:
    """The source's keys, ready to be matched against target fragments' keys."""

    def __init__(self, keys: pa.Array, sorted_keys: np.ndarray | None,
                 source_rows: np.ndarray | None) -> None:
        self.keys = keys                  # the source's key column (for index_in)
        self.sorted_keys = sorted_keys    # integer keys: non-null source keys, sorted
        self.source_rows = source_rows    # ... and the source row of each
        # integer keys: a flag per bucket of ``2**shift`` values over the source's span
        self.members = np.zeros(0, dtype=bool)
        self.shift = 0
        if sorted_keys is not None and len(sorted_keys):
            span = int(sorted_keys[-1]) - int(sorted_keys[0])  # < 2**64
            self.shift = max(0, span.bit_length() - _BUCKET_BITS)
            self.members = np.zeros((span >> self.shift) + 2, dtype=bool)  # +1: outside
            self.members[self._buckets(sorted_keys)] = True

    def _buckets(self, values: np.ndarray) -> np.ndarray:
        """Each value's bucket; values outside the source's span land in the last one
        (never set) or, with ``shift`` > 0, possibly in the span's last bucket."""
        assert self.sorted_keys is not None
        unsigned = values.view(np.uint64) if values.dtype.itemsize == 8 else \
            values.astype(np.uint64)
        low = self.sorted_keys[:1].astype(np.uint64)  # two's complement, as ``unsigned``
        offsets = unsigned - low  # wraps below the span: huge
        outside = np.uint64(len(self.members) - 1) << np.uint64(self.shift)
        np.minimum(offsets, outside, out=offsets)
        offsets >>= np.uint64(self.shift)
        return offsets

    @classmethod
    def build(cls, keys: pa.Array | pa.ChunkedArray) -> KeyMatcher | None:
        """A matcher for source key column ``keys``, or None when this shape needs the
        general join (a type we do not look up directly, or a repeated non-null key)."""
        keys = _flat(keys)
        kind = keys.type
        if pa.types.is_integer(kind):
            rows = np.arange(len(keys), dtype=np.int64)
            values = keys
            if keys.null_count:
                valid = np.asarray(keys.is_valid().to_numpy(zero_copy_only=False), bool)
                rows, values = rows[valid], keys.filter(pa.array(valid))
            numbers = np.asarray(values.to_numpy(zero_copy_only=False))
            order = np.argsort(numbers, kind="stable")
            ordered = numbers[order]
            if len(ordered) > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
                return None
            return cls(keys, ordered, rows[order])
        if any(test(kind) for test in _HASHED):
            non_null = len(keys) - keys.null_count
            if non_null and pc.count_distinct(keys, mode="only_valid").as_py() != non_null:
                return None
            return cls(keys, None, None)
        return None

    def match(self, target: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``target`` whose key a source row has, that source row), both
        int64, positions ascending. NULL keys never match."""
        target = _flat(target)
        if not target.type.equals(self.keys.type):
            target = target.cast(self.keys.type)
        if self.sorted_keys is None:
            return self._hashed(target)
        return self._searched(target)

    def _hashed(self, target: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        found = pc.index_in(target, value_set=self.keys, skip_nulls=True)
        positions = np.flatnonzero(
            np.asarray(found.is_valid().to_numpy(zero_copy_only=False), bool))
        rows = np.asarray(found.drop_null().to_numpy(zero_copy_only=False), np.int64)
        return positions.astype(np.int64), rows

    def _searched(self, target: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        assert self.sorted_keys is not None and self.source_rows is not None
        source, rows = self.sorted_keys, self.source_rows
        empty = np.zeros(0, np.int64)
        if len(target) == 0 or len(source) == 0:
            return empty, empty
        valid = None
        if target.null_count:
            valid = np.asarray(target.is_valid().to_numpy(zero_copy_only=False), bool)
            target = target.fill_null(0)
        values = np.asarray(target.to_numpy(zero_copy_only=False))
        if valid is None and len(values) > 1 and bool(np.all(values[1:] > values[:-1])):
            # increasing: search the source keys within the fragment's range in it
            lo = int(np.searchsorted(source, values[0], side="left"))
            hi = int(np.searchsorted(source, values[-1], side="right"))
            candidates = source[lo:hi]
            positions = np.searchsorted(values, candidates)
            hit = values[positions] == candidates
            return positions[hit].astype(np.int64), rows[lo:hi][hit]
        # any order: candidates by their bucket's flag, confirmed by a binary search
        candidates = np.flatnonzero(self.members[self._buckets(values)])
        if valid is not None:
            candidates = candidates[valid[candidates]]
        found = values[candidates]
        at = np.searchsorted(source, found)
        np.minimum(at, len(source) - 1, out=at)
        hit = source[at] == found
        return candidates[hit].astype(np.int64), rows[at[hit]]
