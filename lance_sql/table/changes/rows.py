"""Change rows: what the change feed found, as parallel arrays, before any value is read.

Shared by the planner (:mod:`lance_sql.table.changes.feed`) and the metadata filters
(:mod:`lance_sql.table.changes.query`): the metadata columns every change carries, the
change-type codes, and :class:`ChangeRows` itself.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CHANGE_TYPES",
    "META_COLUMNS",
    "META_SCHEMA",
    "ChangeRows",
]

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
ROW_ID = "_rowid"
META_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string(), nullable=False),
    pa.field(COMMIT_VERSION, pa.uint64(), nullable=False),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field(ROW_ID, pa.uint64(), nullable=False),
)
META_COLUMNS = tuple(f.name for f in META_FIELDS)
_TIMESTAMP = META_FIELDS[2].type
META_SCHEMA = pa.schema(META_FIELDS)

# Change type codes, indexes into CHANGE_TYPES.
INSERT, PREIMAGE, POSTIMAGE, DELETE = 0, 1, 2, 3
CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete")


@functools.cache
def _type_names() -> pa.Array:
    # Built on first use: converting Python values makes pyarrow import pandas (~0.2 s).
    return pa.array(CHANGE_TYPES, pa.string())


@dataclass(frozen=True)
class ChangeRows:
    """Changes as parallel arrays; no data values, only where to find them.

    The planner lays rows out in output order: by version; within one, inserts, then
    updates (each pre-image right before its post-image), then deletes, each by row id.
    """

    version: np.ndarray   # uint64: the commit
    kind: np.ndarray      # int8: index into CHANGE_TYPES
    row_id: np.ndarray    # uint64
    source: np.ndarray    # int64: version of the manifest holding the row's values
    fragment: np.ndarray  # int64: fragment id in that manifest
    offset: np.ndarray    # int64: physical row offset in that fragment
    # Pre-images only: where the post-image sits in the commit's own manifest (else -1);
    # columns the update did not modify can be read there instead of from old files.
    alt_fragment: np.ndarray  # int64
    alt_offset: np.ndarray    # int64

    def __len__(self) -> int:
        return int(self.row_id.size)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, n).nbytes for n in _ROW_FIELDS)

    def take(self, positions: np.ndarray | slice) -> ChangeRows:
        return ChangeRows(*(getattr(self, n)[positions] for n in _ROW_FIELDS))

    @staticmethod
    def concat(parts: Sequence[ChangeRows]) -> ChangeRows:
        if not parts:
            return ChangeRows(*(np.empty(0, t) for t in _ROW_TYPES))
        return ChangeRows(*(np.concatenate([getattr(p, n) for p in parts])
                            for n in _ROW_FIELDS))

    def metadata(self, timestamps: Mapping[int, int], names: Sequence[str] = META_COLUMNS,
                 *, encoded: bool = False) -> pa.Table:
        """The metadata columns ``names``; ``timestamps``: version -> commit time (µs UTC).

        ``encoded`` keeps ``_change_type`` dictionary encoded (faster to filter on).
        """
        columns = []
        for name in names:
            if name == CHANGE_TYPE:
                kinds = pa.array(self.kind, pa.int8())
                columns.append(pa.DictionaryArray.from_arrays(kinds, _type_names()) if encoded
                               else pc.take(_type_names(), kinds))
            elif name == COMMIT_VERSION:
                columns.append(pa.array(self.version, pa.uint64()))
            elif name == COMMIT_TIMESTAMP:
                columns.append(self._timestamps(timestamps))
            else:
                columns.append(pa.array(self.row_id, pa.uint64()))
        return pa.Table.from_arrays(columns, names=list(names))

    def _timestamps(self, timestamps: Mapping[int, int]) -> pa.Array:
        """Each row's commit time, wrapped as a timestamp array without a cast kernel
        (a process's first cast costs far more than the column)."""
        if len(timestamps) == 1:  # one version: no lookup per row
            at = np.full(len(self), next(iter(timestamps.values())), np.int64)
        else:
            versions = np.array(sorted(timestamps), np.uint64)
            micros = np.array([timestamps[int(v)] for v in versions], np.int64)
            at = micros[np.searchsorted(versions, self.version)] if len(self) else micros[:0]
        return pa.Array.from_buffers(_TIMESTAMP, at.size, [None, pa.py_buffer(at)])


_ROW_FIELDS = ("version", "kind", "row_id", "source", "fragment", "offset", "alt_fragment",
               "alt_offset")
_ROW_TYPES = (np.uint64, np.int8, np.uint64, np.int64, np.int64, np.int64, np.int64,
              np.int64)
