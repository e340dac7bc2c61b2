"""Primary keys of the base fragments its BTREE index does not cover yet, searched in memory.

Every generation the merger merges adds a fragment to the base table, and the base's key
index covers such fragments only once an index builder has run (``optimize_indices``):
the index catch-up lag of the MemWAL spec. Until then the index alone cannot say which
base rows hold a key, and lookups and the LSM scan's hidden-row search fell back to
reading every base row's key (measured on a 2M-row base with 240 merged fragments: one-key
lookups ~40 ms instead of ~1 ms, the full LSM scan 1.96x the base scan instead of 1.38x).

Here the key column of each uncovered fragment (the "tail", small beside the indexed part
while the builder keeps up) is read once (cached per fragment: its key values never
change), and per base version the live keys of the tail go into one :class:`KeySet`.
The index answers for its fragments, the tail for the others; together they give every
base row of a key, as a fully covering index would. A tail of more than
:data:`MAX_TAIL_ROWS` rows, float keys (the index matches them by value, keys are told
apart by their bits), a tail holding a key twice among its live rows, or keys that do not
fit the column's type leave it unbuilt (None): the callers then fall back as before.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.format.fragment import Fragment
from lance_sql.format.schema import LanceField
from lance_sql.memwal.read.keys import KeySet
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.runtime.cache import UNINDEXED_KEYS
from lance_sql.table.runtime.context import current_runtime

__all__ = ["MAX_TAIL_ROWS", "UnindexedKeys", "unindexed_keys"]

# Physical rows of uncovered fragments above which no tail is built (memory: ~24 bytes a
# row for an integer key; a tail this large means the index builder is far behind).
MAX_TAIL_ROWS = 4_000_000
# Counts of fragment key columns read, and of tails built (tests).
FRAGMENT_READS = [0]
BUILDS = [0]

_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True, eq=False)
class UnindexedKeys:
    """The live keys of the base fragments ``fragment_ids`` (those the index misses), each
    with its fragment and physical offset."""

    fragment_ids: frozenset[int]
    key_type: pa.DataType
    keys: KeySet
    fragment_of: np.ndarray  # int64, per key as given to the set
    offset_of: np.ndarray  # int64, physical offset in that fragment

    @property
    def nbytes(self) -> int:
        held = sum(int(k.nbytes) for k in self.keys.keys)
        return int(self.keys.codes.nbytes + self.keys.order.nbytes + held
                   + self.fragment_of.nbytes + self.offset_of.nbytes) + 256

    def _found(self, values: pa.Array) -> np.ndarray | None:
        """Positions (among the keys given to the set) of the rows holding one of
        ``values``; None when a value does not fit the key's type."""
        if not values.type.equals(self.key_type):
            try:
                values = values.cast(self.key_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        if values.null_count:
            values = values.drop_null()
        found = self.keys.find([values])
        return found[found >= 0]

    def rows(self, values: pa.Array) -> dict[int, np.ndarray] | None:
        """Per fragment of the tail (every one, most with none), the sorted physical
        offsets of its live rows whose key is one of ``values`` (None: see
        :meth:`_found`)."""
        at = self._found(values)
        if at is None:
            return None
        out = {f: _EMPTY for f in self.fragment_ids}
        if not at.size:
            return out
        fragments, offsets = self.fragment_of[at], self.offset_of[at]
        order = np.lexsort((offsets, fragments))
        fragments, offsets = fragments[order], offsets[order]
        cuts = np.flatnonzero(np.diff(fragments)) + 1
        for part_fragments, part in zip(np.split(fragments, cuts), np.split(offsets, cuts),
                                        strict=True):
            out[int(part_fragments[0])] = part
        return out

    def addresses(self, values: pa.Array) -> np.ndarray | None:
        """The row addresses (``fragment << 32 | offset``, sorted) of the tail's live rows
        whose key is one of ``values`` (None: see :meth:`_found`)."""
        at = self._found(values)
        if at is None:
            return None
        found = (self.fragment_of[at].astype(np.uint64) << np.uint64(32)) | \
            self.offset_of[at].astype(np.uint64)
        return np.sort(found)


@dataclass(frozen=True)
class _Unusable:
    """A cached "no tail" (see the module docstring)."""

    nbytes: int = 64


def unindexed_keys(ds: LanceDataset, column: str, covered: frozenset[int]
                   ) -> UnindexedKeys | None:
    """The tail of ``ds``'s fragments outside ``covered`` (those the key index on
    ``column`` covers) on that key, cached per base version; None when there is none to
    search (no uncovered fragment) or it cannot be built (see the module docstring)."""
    manifest = ds.manifest
    tail = [f for f in manifest.fragments if f.id not in covered]
    if not tail:
        return None
    field = manifest.schema.field(column)
    key_type = field.to_scan_arrow().type
    if pa.types.is_floating(key_type) or sum(f.physical_rows for f in tail) > MAX_TAIL_ROWS:
        return None
    cache = current_runtime().cache
    # (the commit time too: a table written again at the same place restarts at 1)
    where = (ds.store.uri, ds.version, manifest.timestamp_ns, column, covered)
    built = cache.get_or_load(UNINDEXED_KEYS, ("tail", *where),
                              lambda: _build(ds, field, key_type, tail))
    return built if isinstance(built, UnindexedKeys) else None


def _build(ds: LanceDataset, field: LanceField, key_type: pa.DataType, tail: list[Fragment]
           ) -> UnindexedKeys | _Unusable:
    BUILDS[0] += 1
    keys, fragment_of, offset_of = [], [], []
    for fragment in tail:
        reader = FragmentReader(ds.store, ds.manifest, fragment)
        values = _fragment_keys(ds, reader, fragment, field)
        live = reader.keep_mask()
        if values.null_count:
            valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
            live = valid if live is None else live & valid
        offsets = (np.arange(len(values), dtype=np.int64) if live is None
                   else np.flatnonzero(live).astype(np.int64))
        if live is not None:
            values = values.take(array_from_numpy(offsets))
        if not len(values):
            continue
        keys.append(values if values.type.equals(key_type) else values.cast(key_type))
        fragment_of.append(np.full(offsets.size, fragment.id, np.int64))
        offset_of.append(offsets)
    if not keys:
        joined = pa.nulls(0, key_type)
        fragments, offsets = _EMPTY, _EMPTY
    else:
        joined = pa.concat_arrays(keys)
        fragments, offsets = np.concatenate(fragment_of), np.concatenate(offset_of)
    keyset = KeySet([joined])
    codes = keyset.codes
    if codes.size > 1 and bool((codes[1:] == codes[:-1]).any()):
        # a key held twice among live rows (or, for hashed keys, a code shared): the set
        # finds one row of a key only
        return _Unusable()
    return UnindexedKeys(frozenset(f.id for f in tail), key_type, keyset, fragments, offsets)


def _fragment_keys(ds: LanceDataset, reader: FragmentReader, fragment: Fragment,
                   field: LanceField) -> pa.Array:
    """Every physical row's key in ``fragment`` (deleted rows too), cached by the data
    files the key is read from (their values never change)."""
    files: Hashable = tuple((f.path, f.fields, f.base_id) for f in fragment.files
                            if field.id in f.fields)

    def read() -> pa.Array:
        FRAGMENT_READS[0] += 1
        values = reader.read([field])[0]
        return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values

    key = ("fragment", ds.store.uri, fragment.id, fragment.physical_rows, field.id, files)
    return current_runtime().cache.get_or_load(UNINDEXED_KEYS, key, read)
