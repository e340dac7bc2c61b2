"""Primary keys of the base fragments its BTREE index does not cover yet, searched in memory.

Every generation the merger merges adds a fragment to the base table, and the base's key
index covers such fragments only once an index builder has run (``optimize_indices``):
the index catch-up lag of the MemWAL spec. Until then the index alone cannot say which
base rows hold a key, and lookups and the LSM scan's hidden-row search fell back to
reading every base row's key (measured on a 2M-row base with 240 merged fragments: one-key
lookups ~40 ms instead of ~1 ms, the full LSM scan 2x the base scan instead of ~1.2x).

Here the keys of the uncovered fragments (the "tail", small beside the indexed part while
the builder keeps up) are searched in memory. A fragment's key values never change, so
everything is built from immutable parts and nothing per base version:

* each fragment's key column (every physical row, deleted ones too) is read once;
* fragments are grouped into blocks by id (ids ``[64 k, 64 k + 64)``, ``[8 k, 8 k + 8)``
  in the newest such range: the merger's fragments get rising ids, so a new version
  changes the last, small block only), and each block's keys are sorted once by code
  (:func:`~lance_sql.memwal.memtable.key_codes`: an integer key itself, other keys a
  hash, each match then confirmed on the key);
* the hidden-row search keeps each block's answer for a flushed generation or MemTable
  piece (their keys never change), so a new base version searches its new block only.

A search gives every row of the tail holding a key, deleted rows and keys held twice
included, which is what the callers take from the index too: the hidden-row search leaves
deleted rows out anyway, and a lookup's take drops them and keeps a key's newest row.
Above :data:`MAX_TAIL_ROWS` rows (an :class:`~lance_sql.errors.IndexFallbackWarning`,
once a table and process), and for float keys (the index matches them by value, keys
are told apart by their bits), there is no tail (None) and the callers fall back as
before.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import IndexFallbackWarning
from lance_sql.format.fragment import Fragment
from lance_sql.format.schema import LanceField
from lance_sql.memwal.memtable import key_codes
from lance_sql.numpy_arrow import array_from_numpy, true_mask
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import FragmentReader, offsets_by_fragment
from lance_sql.table.runtime.cache import UNINDEXED_KEYS
from lance_sql.table.runtime.context import current_runtime

__all__ = ["BLOCK_FRAGMENTS", "MAX_TAIL_ROWS", "NEWEST_BLOCK_FRAGMENTS", "UnindexedKeys",
           "unindexed_keys"]

# Physical rows of uncovered fragments above which no tail is used (memory: ~40 bytes a
# row for an integer key; a tail this large means the index builder is far behind).
MAX_TAIL_ROWS = 4_000_000
# Fragments a block spans by id (see the module docstring), and in the newest range of
# ids (where merges add fragments): a new base version re-sorts the keys of at most
# NEWEST_BLOCK_FRAGMENTS fragments, and once a range is no longer the newest, its
# fragments' keys once more, as one block.
BLOCK_FRAGMENTS = 64
NEWEST_BLOCK_FRAGMENTS = 8
# Counts of fragment key columns read, of blocks sorted, and of blocks searched for a
# hidden-row search's keys (tests).
FRAGMENT_READS = [0]
BLOCK_BUILDS = [0]
BLOCK_SEARCHES = [0]

_EMPTY = np.zeros(0, np.int64)
_NO_ADDRESSES = np.zeros(0, np.uint64)
_WARNED: set[str] = set()  # tables warned of a tail too large


@dataclass(frozen=True, eq=False)
class _Block:
    """The keys of some fragments (every physical row), sorted by code, each with its
    fragment and offset; ``keys`` in the same order when codes are hashes (to confirm).
    ``distinct`` are the codes once each, ``first`` where each begins (one more: the end),
    so a search is one binary search of the distinct codes."""

    identity: Hashable  # what its rows are (the key it is cached under)
    distinct: np.ndarray
    first: np.ndarray
    fragment_of: np.ndarray
    offset_of: np.ndarray
    keys: pa.Array | None

    @property
    def nbytes(self) -> int:
        held = 0 if self.keys is None else int(self.keys.nbytes)
        return int(self.distinct.nbytes + self.first.nbytes + self.fragment_of.nbytes
                   + self.offset_of.nbytes) + held + 128

    def find(self, codes: np.ndarray, values: pa.Array) -> np.ndarray:
        """The entries holding one of ``values`` (whose codes are ``codes``)."""
        if not self.distinct.size:
            return _EMPTY
        at = np.searchsorted(self.distinct, codes)
        hit = self.distinct[np.minimum(at, self.distinct.size - 1)] == codes
        asked = np.flatnonzero(hit)
        if not asked.size:
            return _EMPTY
        at = at[asked]
        lo = self.first[at]
        counts = self.first[at + 1] - lo
        total = int(counts.sum())
        starts = np.repeat(lo, counts)
        entries = starts + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        if self.keys is not None:  # hash codes: the very key, not another of its code
            asked = np.repeat(asked, counts)
            same = pc.equal(values.take(array_from_numpy(asked)),
                            self.keys.take(array_from_numpy(entries)))
            entries = entries[true_mask(same)]
        return entries


@dataclass(frozen=True, eq=False)
class UnindexedKeys:
    """The keys of the base fragments ``fragment_ids`` (those the index misses) of one
    base version, as blocks."""

    fragment_ids: frozenset[int]
    key_type: pa.DataType
    blocks: tuple[_Block, ...]
    newest: int = 0  # how many of the last blocks are of the newest range of ids

    @property
    def nbytes(self) -> int:
        """The bytes of its newest range's blocks, which few versions share (cached apart
        too, counted twice); the older ranges' blocks every later version shares are
        counted under their own entries only (a tail near :data:`MAX_TAIL_ROWS` would
        not fit the cache counted twice over)."""
        return sum(b.nbytes for b in self.blocks[len(self.blocks) - self.newest:]) + \
            64 * len(self.blocks) + 256

    def _found(self, values: pa.Array, blocks: Sequence[_Block] | None = None
               ) -> np.ndarray | None:
        """The row addresses (``fragment << 32 | offset``, uint64, unordered) of the rows
        holding one of ``values`` (in ``blocks``, default all); None when a value does not
        fit the key's type."""
        if not values.type.equals(self.key_type):
            try:
                values = values.cast(self.key_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        if values.null_count:
            values = values.drop_null()
        if not len(values):
            return _NO_ADDRESSES
        codes = key_codes([values])
        found = [_NO_ADDRESSES]
        for block in self.blocks if blocks is None else blocks:
            at = block.find(codes, values)
            found.append((block.fragment_of[at].astype(np.uint64) << np.uint64(32))
                         | block.offset_of[at].astype(np.uint64))
        return np.concatenate(found)

    def rows(self, values: pa.Array, asker: Hashable | None = None
             ) -> dict[int, np.ndarray] | None:
        """Per fragment of the tail (every one, most with none), the sorted physical
        offsets of its rows holding one of ``values`` (None: see :meth:`_found`).
        ``asker``: what the values are, when they never change for it (a flushed
        generation's keys): each block's answer is then kept for the next base version,
        whose blocks are the same but the last (the hidden rows of each merge's new
        version found in the new fragment's block alone)."""
        out = dict.fromkeys(self.fragment_ids, _EMPTY)
        if asker is None:
            found = self._found(values)
            if found is None:
                return None
            out.update(offsets_by_fragment(np.unique(found)))
            return out
        cache = current_runtime().cache
        for block in self.blocks:
            def search(block: _Block = block) -> _PerFragment | _Unfit:
                BLOCK_SEARCHES[0] += 1
                found = self._found(values, (block,))
                return _UNFIT if found is None else \
                    _PerFragment(offsets_by_fragment(np.unique(found)))

            got = cache.get_or_load(UNINDEXED_KEYS, ("rows", block.identity, asker), search)
            if isinstance(got, _Unfit):
                return None
            out.update(got.rows)
        return out

    def addresses(self, values: pa.Array) -> np.ndarray | None:
        """The row addresses (``fragment << 32 | offset``, sorted, distinct) of the tail's
        rows holding one of ``values`` (None: see :meth:`_found`)."""
        found = self._found(values)
        return None if found is None else np.unique(found)


@dataclass(frozen=True)
class _PerFragment:
    """A block's answer to one asker (cached): offsets by fragment."""

    rows: dict[int, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(int(r.nbytes) + 64 for r in self.rows.values()) + 64


@dataclass(frozen=True)
class _Unfit:
    """A cached answer: the asker's values do not fit the key's type."""

    nbytes: int = 64


_UNFIT = _Unfit()


def unindexed_keys(ds: LanceDataset, column: str, covered: frozenset[int]
                   ) -> UnindexedKeys | None:
    """The tail of ``ds``'s fragments outside ``covered`` (those the key index on
    ``column`` covers); None when there is none to search (no uncovered fragment) or it
    is not used (see the module docstring)."""
    manifest = ds.manifest
    tail = [f for f in manifest.fragments if f.id not in covered]
    if not tail:
        return None
    field = manifest.schema.field(column)
    key_type = field.to_scan_arrow().type
    if pa.types.is_floating(key_type):
        return None
    rows = sum(f.physical_rows for f in tail)
    if rows > MAX_TAIL_ROWS:
        if ds.store.uri not in _WARNED:  # (once a table and process: every read would)
            _WARNED.add(ds.store.uri)
            warnings.warn(IndexFallbackWarning(
                f"{ds.store.uri}: the BTREE index on {column!r} misses {rows} rows in "
                f"{len(tail)} fragments (over {MAX_TAIL_ROWS}): LSM lookups and scans "
                f"compare every base key until it catches up (ds.optimize."
                f"optimize_indices())"), stacklevel=3)
        return None

    def load() -> UnindexedKeys:
        # the newest ids' range (where the merger adds fragments) in blocks of fewer
        # fragments, so each merge re-sorts few keys; older ranges in whole blocks
        top = max(f.id for f in tail) // BLOCK_FRAGMENTS
        groups: dict[tuple[int, int], list[Fragment]] = {}
        for fragment in tail:
            at = fragment.id // BLOCK_FRAGMENTS
            sub = fragment.id // NEWEST_BLOCK_FRAGMENTS if at == top else -1
            groups.setdefault((at, sub), []).append(fragment)
        ordered = sorted(groups.items())
        blocks = tuple(_block(ds, field, key_type, group) for _, group in ordered)
        newest = sum(1 for (at, _), _ in ordered if at == top)
        return UnindexedKeys(frozenset(f.id for f in tail), key_type, blocks, newest)

    # per version too, so a lookup does not hash its blocks' fragments again (the commit
    # time too: a table written again at the same place restarts at version 1)
    version = ("tail", ds.store.uri, ds.version, manifest.timestamp_ns, field.id, covered)
    return current_runtime().cache.get_or_load(UNINDEXED_KEYS, version, load)


def _identity(fragment: Fragment, field: LanceField) -> tuple:
    """What a fragment's key values are: its id, rows and the data files holding the key
    (deletions aside: a block holds deleted rows too)."""
    files = tuple((f.path, f.fields, f.base_id) for f in fragment.files if field.id in f.fields)
    return fragment.id, fragment.physical_rows, files


def _block(ds: LanceDataset, field: LanceField, key_type: pa.DataType,
           fragments: Sequence[Fragment]) -> _Block:
    """The block of ``fragments``, cached by what their keys are."""
    key = ("block", ds.store.uri, field.id, str(key_type),
           tuple(_identity(f, field) for f in fragments))
    return current_runtime().cache.get_or_load(
        UNINDEXED_KEYS, key, lambda: _sorted_block(key, ds, field, key_type, fragments))


def _sorted_block(identity: Hashable, ds: LanceDataset, field: LanceField,
                  key_type: pa.DataType, fragments: Sequence[Fragment]) -> _Block:
    BLOCK_BUILDS[0] += 1
    keys, fragment_of, offset_of = [], [], []
    for fragment in fragments:
        values = _fragment_keys(ds, fragment, field)
        offsets = np.arange(len(values), dtype=np.int64)
        if values.null_count:  # (a key is never NULL; such a row matches no key)
            offsets = offsets[true_mask(values.is_valid())]
            values = values.take(array_from_numpy(offsets))
        keys.append(values if values.type.equals(key_type) else values.cast(key_type))
        fragment_of.append(np.full(offsets.size, fragment.id, np.int64))
        offset_of.append(offsets)
    joined = pa.concat_arrays(keys)
    codes = key_codes([joined]) if len(joined) else _EMPTY
    order = np.argsort(codes)
    codes = codes[order]
    starts = np.flatnonzero(np.diff(codes)) + 1
    first = np.concatenate([[0], starts, [codes.size]]) if codes.size else np.zeros(1, np.int64)
    exact = pa.types.is_integer(key_type)  # (key_codes: such a key is its own code)
    return _Block(identity, codes[first[:-1]], first.astype(np.int64),
                  np.concatenate(fragment_of)[order], np.concatenate(offset_of)[order],
                  None if exact else joined.take(array_from_numpy(order)))


def _fragment_keys(ds: LanceDataset, fragment: Fragment, field: LanceField) -> pa.Array:
    """Every physical row's key in ``fragment`` (deleted rows too), cached by what its
    keys are."""

    def read() -> pa.Array:
        FRAGMENT_READS[0] += 1
        values = FragmentReader(ds.store, ds.manifest, fragment).read([field])[0]
        return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values

    key = ("fragment", ds.store.uri, field.id, _identity(fragment, field))
    return current_runtime().cache.get_or_load(UNINDEXED_KEYS, key, read)
