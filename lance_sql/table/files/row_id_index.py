"""The row-id index of one table version: stable row id -> current row address.

Built on first use from the fragments' row-id sequences, leaving out deleted rows
(an updated row's old copy is deleted, so each live id maps to exactly one address).
It is stored as *runs*: maximal stretches where consecutive ids sit at consecutive
addresses. Freshly written data is one run per fragment, so 10M rows take a few hundred
bytes; scattered updates and deletions cost one run each. Lookups are a vectorised
binary search over the run starts.
"""

from __future__ import annotations

import numpy as np

from lance_sql.errors import FormatError
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.lineage import load_lineage
from lance_sql.table.files.reader import checked_rows, deleted_offsets
from lance_sql.table.runtime.cache import ROW_ID_INDEXES
from lance_sql.table.runtime.context import current_runtime

MISSING = np.uint64((1 << 64) - 1)


class RowIdIndex:
    """Sorted runs ``(first id, first address, length)`` of live rows."""

    def __init__(self, starts: np.ndarray, addresses: np.ndarray, lengths: np.ndarray) -> None:
        order = np.argsort(starts, kind="stable")
        self.starts = starts[order]
        self.addresses = addresses[order]
        self.lengths = lengths[order]
        ends = self.starts + self.lengths
        if len(ends) > 1 and bool(np.any(self.starts[1:] < ends[:-1])):
            clash = int(self.starts[1:][self.starts[1:] < ends[:-1]][0])
            raise FormatError(f"row id {clash} belongs to more than one live row")

    @property
    def num_runs(self) -> int:
        return int(self.starts.size)

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.addresses.nbytes + self.lengths.nbytes)

    @classmethod
    def build(cls, store: ObjectStore, manifest: Manifest) -> RowIdIndex:
        starts, addrs, lengths = [], [], []
        for frag in manifest.fragments:
            if frag.physical_rows == 0:
                continue
            lineage = load_lineage(store, manifest, frag)
            deleted = deleted_offsets(store, manifest, frag)
            runs = None if len(deleted) else lineage.id_runs()
            if runs is not None:  # the sequence's ranges are the runs: nothing to build
                first, at, length = runs
                starts.append(first)
                addrs.append(at.astype(np.uint64) | (np.uint64(frag.id) << np.uint64(32)))
                lengths.append(length.astype(np.uint64))
                continue
            keep = np.ones(checked_rows(store, manifest, frag, small_ok=True), dtype=bool)
            keep[deleted] = False
            positions = np.flatnonzero(keep).astype(np.uint64)
            ids = lineage.ids_at(positions)  # live rows only, not cached
            if ids.size == 0:
                continue
            breaks = np.flatnonzero((np.diff(ids) != 1) | (np.diff(positions) != 1)) + 1
            first = np.concatenate(([0], breaks))
            last = np.append(breaks, ids.size)
            starts.append(ids[first])
            addrs.append(positions[first] | (np.uint64(frag.id) << np.uint64(32)))
            lengths.append((last - first).astype(np.uint64))
        if not starts:
            empty = np.empty(0, np.uint64)
            return cls(empty, empty, empty)
        return cls(np.concatenate(starts), np.concatenate(addrs), np.concatenate(lengths))

    def lookup(self, row_ids: np.ndarray) -> np.ndarray:
        """Addresses of ``row_ids`` (``uint64``); :data:`MISSING` where an id is not live."""
        ids = np.asarray(row_ids, dtype=np.uint64)
        if self.starts.size == 0:
            return np.full(ids.shape, MISSING, np.uint64)
        run = np.searchsorted(self.starts, ids, side="right").astype(np.int64) - 1
        safe = np.maximum(run, 0)
        delta = ids - self.starts[safe]
        found = (run >= 0) & (ids >= self.starts[safe]) & (delta < self.lengths[safe])
        return np.where(found, self.addresses[safe] + delta, MISSING)


def row_id_index(store: ObjectStore, manifest: Manifest) -> RowIdIndex:
    """The index of this manifest, built on first use and cached (thread safe). A commit
    never changes, so the key is the table, the version and its commit time (a table
    re-created at the same place has a new one)."""
    key = (store.uri, manifest.version, manifest.timestamp_ns)
    return current_runtime().cache.get_or_load(
        ROW_ID_INDEXES, key, lambda: RowIdIndex.build(store, manifest))
