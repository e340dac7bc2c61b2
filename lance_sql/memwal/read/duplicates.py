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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from lance_sql.memwal.memtable import key_codes
from lance_sql.memwal.read.keys import latest_positions
from lance_sql.memwal.read.sources import BaseSource, lance_scanner, table_order
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR
from lance_sql.table.runtime.cache import BASE_DUPLICATES
from lance_sql.table.runtime.context import current_runtime

__all__ = ["UNIQUE_BASE_KEYS_CONFIG", "merged_rows", "superseded_base_rows"]

# A table config key: set to "true", the table's owner vouches that its base holds each
# primary key once (every write a merge_insert on the key, say), and scans skip the check
# (a full read of the key columns, once per base version and process: ~0.3-0.7 s CPU on
# 10M int64 keys). A key held twice then reads twice in a scan, as the owner said it cannot.
UNIQUE_BASE_KEYS_CONFIG = "lance_sql.memwal.unique_base_keys"

# Calls that read a base version's keys to find its duplicates (tests: once per version).
KEY_READS = [0]


def superseded_base_rows(base: BaseSource) -> dict[int, np.ndarray]:
    """The base rows (physical offsets per fragment id, sorted int64) whose key a later
    row of the base holds too; empty when every key is held once. The whole base table is
    considered, also for a source that scans part of it (a part of a split read)."""
    ds = base.dataset
    if ds.manifest.config.get(UNIQUE_BASE_KEYS_CONFIG, "").lower() == "true":
        return {}
    # (the commit time too: a table written again at the same place restarts at 1)
    where = (ds.store.uri, ds.version, ds.manifest.timestamp_ns, tuple(base.key_columns))
    return current_runtime().cache.get_or_load(
        BASE_DUPLICATES, where, lambda: _superseded(ds, base.key_columns))


def _superseded(ds: LanceDataset, key_columns: Sequence[str]) -> dict[int, np.ndarray]:
    KEY_READS[0] += 1
    tables = [t for t in lance_scanner(ds, [*key_columns, ROW_ADDR], None).to_tables()
              if t.num_rows]
    if sum(t.num_rows for t in tables) < 2:
        return {}
    # each piece's codes (an integer key: its values), in the order read: codes that
    # only ever rise, in any order, are distinct, and so are the keys
    codes = np.concatenate([key_codes([t.column(k).combine_chunks() for k in key_columns])
                            for t in tables])
    if bool((codes[1:] > codes[:-1]).all()):
        return {}
    ordered = np.sort(codes)
    repeats = ordered[1:] == ordered[:-1]
    if not repeats.any():
        return {}
    # the rows whose code repeats (few): their keys compared (a hash code may collide),
    # the last in the table's order kept
    rows = np.flatnonzero(np.isin(codes, np.unique(ordered[1:][repeats])))
    table = pa.concat_tables(tables)
    taken = array_from_numpy(rows)
    keys = [table.column(k).take(taken).combine_chunks() for k in key_columns]
    addresses = np.asarray(numpy_of(table.column(ROW_ADDR).take(taken)), np.uint64)
    newest = latest_positions(keys, table_order(addresses, ds.manifest.fragments))
    older = np.ones(rows.size, bool)
    older[newest] = False
    return _by_fragment(addresses[older])


def _by_fragment(addresses: np.ndarray) -> dict[int, np.ndarray]:
    addresses = np.sort(addresses)
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    cuts = np.flatnonzero(np.diff(fragments)) + 1
    return {int(f[0]): o for f, o in zip(np.split(fragments, cuts), np.split(offsets, cuts),
                                         strict=True) if f.size}


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
