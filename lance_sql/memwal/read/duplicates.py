"""Base-table rows that a later row of the same key supersedes.

The primary key is not enforced: plain appends can put a key into the base table twice.
A lookup then takes the newest row, the last in the table's order
(:func:`.sources.table_order`); an LSM scan must keep that same row and leave the older
ones out. Which rows those are depends on the base version alone, so it is worked out once
per version (the key columns and row addresses read, nothing else) and kept in the
runtime's cache (kind ``base_duplicates``); the scan then leaves the rows out like deleted
ones, before any filter (the newest row is decided first).

The usual base holds each key once: that is settled by a sort of the keys' codes (or,
when the keys are read in ascending order, one comparison of neighbours), and the cached
answer is an empty mapping, so scans pay nothing more after the first one of a version
(measured on 10M int64 keys in ascending order: ~0.4 s CPU, about a plain full scan's;
a table whose owner vouches for unique keys skips it: :data:`UNIQUE_BASE_KEYS_CONFIG`).
Only the rows whose codes repeat are compared as keys and placed in the table's order
(:func:`.keys.latest_positions`).

A base version found to hold each key once leaves a :class:`KeyDigest` behind (its codes
sorted, with their row addresses; kind ``base_key_digests``). A later version that only
adds fragments and deletes rows (a merge's commit, an append, a delete) is then checked
from its new fragments alone: their codes are looked up in the digest, and a repeat is
possible only where a hit is a row still live in the new version. No such hit: unique, and
the digest takes the new rows in. Any hit, mostly new rows (a compaction: a full read costs
less), or a change the digest cannot follow (a key column's files rewritten, a deletion
undone by a restore) falls back to the full check. Codes read out of order are ordered
with their addresses for a digest only from a table's second full read in a process on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from lance_sql.errors import NotFoundError
from lance_sql.format.fragment import Fragment
from lance_sql.memwal.memtable import key_codes
from lance_sql.memwal.read.keys import latest_positions
from lance_sql.memwal.read.sources import BaseSource, lance_scanner, table_order
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.sorted_sets import in_sorted
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import (
    ROW_ADDR,
    deleted_offsets,
    offsets_by_fragment,
    row_offsets,
)
from lance_sql.table.runtime.cache import BASE_DUPLICATES, BASE_KEY_DIGESTS
from lance_sql.table.runtime.context import current_runtime

__all__ = ["UNIQUE_BASE_KEYS_CONFIG", "KeyDigest", "duplicates_state", "merged_rows",
           "superseded_base_rows"]

# A table config key: set to "true", the table's owner vouches that its base holds each
# primary key once (every write a merge_insert on the key, say), and scans skip the check
# (a full read of the key columns, once per base version and process: ~0.3-0.7 s CPU on
# 10M int64 keys). A key held twice then reads twice in a scan, as the owner said it cannot.
UNIQUE_BASE_KEYS_CONFIG = "lance_sql.memwal.unique_base_keys"

# Calls that read a base version's keys to find its duplicates (tests: once per version),
# and checks settled from a digest and the new fragments alone.
KEY_READS = [0]
DIGEST_CHECKS = [0]

# Entries of deleted rows a digest carries before it drops them (beyond a quarter of the
# live rows).
_SLACK = 1 << 16


def superseded_base_rows(base: BaseSource) -> dict[int, np.ndarray]:
    """The base rows (physical offsets per fragment id, sorted int64) whose key a later
    row of the base holds too; empty when every key is held once. The whole base table is
    considered, also for a source that scans part of it (a part of a split read)."""
    ds = base.dataset
    if _vouched_unique(ds):
        return {}
    return current_runtime().cache.get_or_load(
        BASE_DUPLICATES, _cache_key(base), lambda: superseded_at(ds, tuple(base.key_columns)))


def duplicates_state(base: BaseSource, planned: Mapping[int, np.ndarray] | None = None
                     ) -> str:
    """What is known, without reading a key, of ``base``'s keys held twice (for plain
    EXPLAIN): the check's answer when this process has it for that base version (or
    ``planned``, the rows a plan was given), that the table config skips it, or that the
    first scan checks."""
    if _vouched_unique(base.dataset):
        return f"skipped: table config {UNIQUE_BASE_KEYS_CONFIG}"
    found = planned if planned is not None else current_runtime().cache.peek(
        BASE_DUPLICATES, _cache_key(base))
    if found is None:
        return "not checked yet (checked on first scan)"
    count = sum(int(rows.size) for rows in found.values())
    return f"checked: {count} superseded" if count else "checked: none"


def _vouched_unique(ds: LanceDataset) -> bool:
    """Whether the table's owner vouches for unique base keys (:data:`UNIQUE_BASE_KEYS_CONFIG`)."""
    return ds.manifest.config.get(UNIQUE_BASE_KEYS_CONFIG, "").lower() == "true"


def _cache_key(base: BaseSource) -> tuple:
    """Where the check's answer for ``base``'s version is cached (the commit time too: a
    table written again at the same place restarts at version 1)."""
    ds = base.dataset
    return (ds.store.uri, ds.version, ds.manifest.timestamp_ns, tuple(base.key_columns))


def superseded_at(ds: LanceDataset, key_columns: tuple[str, ...]) -> dict[int, np.ndarray]:
    """:func:`superseded_base_rows` of ``ds``: from the digest of an earlier unique version
    when it settles the question, else read in full (leaving a digest when unique)."""
    cache = current_runtime().cache
    slot = (ds.store.uri, key_columns)
    prior: KeyDigest | _Checked | None = cache.peek(BASE_KEY_DIGESTS, slot)
    if isinstance(prior, KeyDigest) and prior.version < ds.version:
        derived = prior.advanced(ds)
        if derived is not None:
            DIGEST_CHECKS[0] += 1
            cache.put(BASE_KEY_DIGESTS, slot, derived)
            return {}
    # a table checked before in this process has new versions coming (a merger at work):
    # worth a digest even where ordering the codes costs more than sorting them
    superseded, digest = full_read_superseded(ds, key_columns, ordered=prior is not None)
    latest = cache.peek(BASE_KEY_DIGESTS, slot)
    if digest is not None:
        if not isinstance(latest, KeyDigest) or latest.version < digest.version:
            cache.put(BASE_KEY_DIGESTS, slot, digest)
    elif latest is None:
        cache.put(BASE_KEY_DIGESTS, slot, _CHECKED)
    return superseded


@dataclass(frozen=True)
class _Checked:
    """A table's keys were read in full once in this process (no digest kept)."""

    nbytes: int = 64


_CHECKED = _Checked()


def full_read_superseded(ds: LanceDataset, key_columns: Sequence[str], *,
                         ordered: bool = True
                         ) -> tuple[dict[int, np.ndarray], KeyDigest | None]:
    """The superseded rows of ``ds`` from all its keys, and its digest when they are
    unique and it fits the cache (None otherwise). Codes read in rising order give the
    digest for free; else ordering them with their addresses costs ~7x a sort of the
    codes alone (5M random int64: 1.4 s against 0.2 s), paid only when ``ordered``."""
    KEY_READS[0] += 1
    codes, addresses, tables = _codes_of(ds, key_columns, None)
    fits = KeyDigest.weight(codes.size, len(ds.manifest.fragments)) <= \
        current_runtime().cache.bound(BASE_KEY_DIGESTS)
    if codes.size < 2 or bool((codes[1:] > codes[:-1]).all()):
        # codes that only ever rise, in any order, are distinct, and so are the keys
        return {}, KeyDigest.of(ds, key_columns, codes, addresses) if fits else None
    order = np.argsort(codes) if ordered and fits else None
    ordered_codes = codes[order] if order is not None else np.sort(codes)
    repeats = ordered_codes[1:] == ordered_codes[:-1]
    if not repeats.any():
        if order is None:
            return {}, None
        return {}, KeyDigest.of(ds, key_columns, ordered_codes, addresses[order])
    # the rows whose code repeats (few): their keys compared (a hash code may collide),
    # the last in the table's order kept
    rows = np.flatnonzero(np.isin(codes, np.unique(ordered_codes[1:][repeats])))
    table = pa.concat_tables(tables)
    taken = array_from_numpy(rows)
    keys = [table.column(k).take(taken).combine_chunks() for k in key_columns]
    addresses = np.asarray(numpy_of(table.column(ROW_ADDR).take(taken)), np.uint64)
    newest = latest_positions(keys, table_order(addresses, ds.manifest.fragments))
    older = np.ones(rows.size, bool)
    older[newest] = False
    return offsets_by_fragment(addresses[older]), None


def _codes_of(ds: LanceDataset, key_columns: Sequence[str],
              fragments: Sequence[Fragment] | None
              ) -> tuple[np.ndarray, np.ndarray, list[pa.Table]]:
    """Key codes and row addresses of the live rows of ``fragments`` (all: None), in the
    order read, and the tables read (key columns and row addresses)."""
    tables = [t for t in lance_scanner(ds, [*key_columns, ROW_ADDR], None,
                                       fragments=fragments).to_tables() if t.num_rows]
    if not tables:
        return np.empty(0, np.int64), np.empty(0, np.uint64), tables
    codes = np.concatenate([key_codes([t.column(k).combine_chunks() for k in key_columns])
                            for t in tables])
    addresses = np.concatenate([np.asarray(numpy_of(t.column(ROW_ADDR).combine_chunks()),
                                           np.uint64) for t in tables])
    return codes, addresses, tables


def _key_files(fragment: Fragment, key_ids: frozenset[int]) -> tuple:
    """What a fragment's key values are read from: its data files holding a key field."""
    return tuple((f.path, f.fields, f.base_id) for f in fragment.files
                 if key_ids.intersection(f.fields))


@dataclass(frozen=True)
class KeyDigest:
    """Every key code of a base version that holds each key once, with the row address
    of each, as a few sorted runs (the first version's, then each later version's new
    rows, merged as they pile up); with the fragments it read them from, to tell what a
    later version changed. Rows deleted since stay in it until they outnumber the live
    ones: a hit on one is seen to be dead."""

    uri: str
    version: int
    key_ids: tuple[int, ...]  # the key columns' field ids, in key order
    fragments: Mapping[int, Fragment]
    runs: tuple[tuple[np.ndarray, np.ndarray], ...]  # (sorted codes, their addresses)

    @property
    def nbytes(self) -> int:
        return self.weight(self.entries, len(self.fragments))

    @staticmethod
    def weight(entries: int, fragments: int) -> int:
        """The bytes a digest of ``entries`` codes over ``fragments`` fragments holds (an
        int64 code and a uint64 address an entry, and the fragment's metadata)."""
        return 16 * entries + 256 * fragments

    @property
    def entries(self) -> int:
        return sum(c.size for c, _ in self.runs)

    @classmethod
    def of(cls, ds: LanceDataset, key_columns: Sequence[str], codes: np.ndarray,
           addresses: np.ndarray) -> KeyDigest:
        """The digest of ``ds`` from its (sorted) codes and their addresses."""
        key_ids = tuple(ds.manifest.schema.field(k).id for k in key_columns)
        return cls(ds.store.uri, ds.version, key_ids,
                   {f.id: f for f in ds.manifest.fragments}, ((codes, addresses),))

    def advanced(self, ds: LanceDataset) -> KeyDigest | None:
        """The digest of the later version ``ds`` when its keys are unique as settled
        from its new fragments alone; None when that cannot be settled so (a repeat is
        possible, or the version changed what the digest stands on)."""
        schema = ds.manifest.schema
        top = {f.id: f.name for f in schema.fields}
        if ds.store.uri != self.uri or any(i not in top for i in self.key_ids):
            return None
        key_columns = [top[i] for i in self.key_ids]  # (as named now: codes are by value)
        ids = frozenset(self.key_ids)
        kept: dict[int, Fragment] = {}
        new: list[Fragment] = []
        for frag in ds.manifest.fragments:
            old = self.fragments.get(frag.id)
            if old is None:
                new.append(frag)
                continue
            if _key_files(old, ids) != _key_files(frag, ids):
                return None  # its key values were rewritten (or another table's fragment)
            if old.deletion_file != frag.deletion_file and not _only_more_deleted(ds, old, frag):
                return None  # a row the digest has not counted is live again
            kept[frag.id] = frag
        live_total = sum(f.num_rows for f in ds.manifest.fragments)
        if 4 * sum(f.num_rows for f in new) > live_total:
            return None  # mostly new rows (a compaction's): a full read costs less
        runs = self.runs
        if new:
            codes, addresses, _ = _codes_of(ds, key_columns, new)
            found = add_unique_run(runs, codes, addresses,
                                   lambda hits: _live_mask(ds, kept, hits))
            if found is None:
                return None
            runs = found
        every = {f.id: f for f in ds.manifest.fragments}
        digest = KeyDigest(self.uri, ds.version, self.key_ids, every, runs)
        if 4 * digest.entries > 5 * live_total + _SLACK:
            digest = digest._live_only(ds)
        return digest

    def _live_only(self, ds: LanceDataset) -> KeyDigest:
        """This digest (of ``ds``, whose fragments it holds) without the rows ``ds`` has
        deleted, in one run."""
        codes, addresses = _merged(self.runs)
        live = _live_mask(ds, self.fragments, addresses)
        return replace(self, runs=((codes[live], addresses[live]),))


def add_unique_run(runs: tuple[tuple[np.ndarray, np.ndarray], ...], codes: np.ndarray,
                   addresses: np.ndarray, live: Callable[[np.ndarray], np.ndarray]
                   ) -> tuple[tuple[np.ndarray, np.ndarray], ...] | None:
    """``runs`` (sorted codes with their addresses) and the new ``codes`` as one more run:
    None when the new codes repeat one another or one of them is held by an address that
    ``live`` (row addresses -> bool mask) says still holds its row. A run at least a
    quarter of the one before it is merged into it, so runs stay few (their sizes fall
    by 4x or more each) and each row is merged O(log n) times."""
    order = np.argsort(codes, kind="stable")
    fresh, fresh_at = codes[order], addresses[order]
    if fresh.size > 1 and bool((fresh[1:] == fresh[:-1]).any()):
        return None
    hits = []
    for run_codes, run_addresses in runs:
        lo = np.searchsorted(run_codes, fresh, "left")
        hi = np.searchsorted(run_codes, fresh, "right")
        counts = hi - lo
        if counts.any():
            starts = np.repeat(lo, counts)
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts,
                                                              counts)
            hits.append(run_addresses[starts + within])
    if hits and bool(live(np.concatenate(hits)).any()):
        return None
    out = [*runs, (fresh, fresh_at)]
    while len(out) > 1 and 4 * out[-1][0].size >= out[-2][0].size:
        out[-2:] = [_merged(out[-2:])]
    return tuple(out)


def _merged(runs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted runs as one (a stable sort of sorted runs laid end to end merges them)."""
    if len(runs) == 1:
        return runs[0]
    codes = np.concatenate([c for c, _ in runs])
    order = np.argsort(codes, kind="stable")
    return codes[order], np.concatenate([a for _, a in runs])[order]


def _live_mask(ds: LanceDataset, kept: Mapping[int, Fragment], addresses: np.ndarray
               ) -> np.ndarray:
    """Which ``addresses`` name a row live in ``ds``: its fragment one of ``kept``, and
    the row not deleted there."""
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = row_offsets(addresses)
    out = np.zeros(addresses.size, bool)
    order = np.argsort(fragments, kind="stable")
    cuts = np.flatnonzero(np.diff(fragments[order])) + 1
    for group in np.split(order, cuts) if order.size else []:
        frag = kept.get(int(fragments[group[0]]))
        if frag is not None:
            deleted = deleted_offsets(ds.store, ds.manifest, frag).astype(np.int64)
            out[group] = ~in_sorted(offsets[group], deleted)
    return out


def _only_more_deleted(ds: LanceDataset, old: Fragment, new: Fragment) -> bool:
    """Whether ``new``'s deleted rows include every one of ``old``'s (same fragment);
    False when ``old``'s deletion file is gone (removed by a cleanup of old versions)."""
    try:
        before = deleted_offsets(ds.store, ds.manifest, old).astype(np.int64)
    except NotFoundError:
        return False
    after = deleted_offsets(ds.store, ds.manifest, new).astype(np.int64)
    return before.size <= after.size and bool(in_sorted(before, after).all())


def merged_rows(*parts: Mapping[int, np.ndarray] | None) -> Mapping[int, np.ndarray] | None:
    """Rows to leave out per fragment, from several such mappings (None: none at all)."""
    given = [p for p in parts if p]
    if not given:
        return None
    if len(given) == 1:
        return given[0]
    out: dict[int, list[np.ndarray]] = {}
    for part in given:
        for fragment, rows in part.items():
            out.setdefault(fragment, []).append(rows)
    return {f: r[0] if len(r) == 1 else np.concatenate(r) for f, r in out.items()}
