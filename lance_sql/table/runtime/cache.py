"""Bounded, thread-safe caches for immutable things read from a table.

Data files, deletion vectors, manifests and row-lineage sequences never change once
written, so whatever is decoded from them can be shared by every scan and every thread,
keyed by what identifies the bytes. Two threads missing the same key may both load it;
the result is the same, so the race costs time, never correctness.

One :class:`TableCache` holds a cache per :class:`CacheKind`; each kind has a byte bound
(and an entry bound) that the bytes it keeps never exceed. The kinds and their default
bounds are listed in :data:`KINDS`. A value's bytes are what it holds in memory; for
open data files and indices, whose parsed metadata is Python objects, they are an
estimate (documented per kind).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_sql.errors import InvalidInputError
from lance_sql.table.runtime.open_files import (
    OPEN_FILES,
    OpenFiles,
    Victims,
    drop,
    open_files_bound,
    unlinked,
)

MiB = 1 << 20
# What an open file costs beyond its metadata (descriptor, parsed objects).
OPEN_FILE_OVERHEAD = 16 << 10


def _no_source(value: Any) -> None:
    return None


class LruCache:
    """At most ``capacity`` values and ``max_weight`` in total (e.g. bytes, with
    ``weigh``); the least recently used go first. A value heavier than ``max_weight`` is
    returned but not kept.

    With ``files`` (a ledger of open files) and ``source_of`` (the open source a value
    holds), the values are open files: they also count towards the ledger's one budget,
    which may drop them (see :mod:`lance_sql.table.runtime.open_files`), and a value
    whose file was unlinked is dropped when a lookup finds it (and loaded again)."""

    def __init__(self, capacity: int, *, max_weight: int | None = None,
                 weigh: Callable[[Any], int] | None = None, files: OpenFiles | None = None,
                 source_of: Callable[[Any], Any] | None = None) -> None:
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity
        self._max_weight = max_weight
        self._weigh = weigh
        self._weight = 0
        self.hits = 0
        self.misses = 0
        self._files = files if source_of is not None else None
        self._source_of: Callable[[Any], Any] = source_of or _no_source
        self._serial = self._files.serial(self) if self._files is not None else -1

    def _hit(self, key: Hashable) -> tuple[bool, Any]:
        """(found, value) for ``key``, marked as used (lock held); a value whose file is
        gone is dropped and not found."""
        found = self._items.get(key)
        if found is None:
            return False, None
        if self._files is not None:
            if unlinked(self._source_of(found[0])):
                self._drop(key)
                return False, None
            self._files.used(self._serial, key)
        self._items.move_to_end(key)
        self.hits += 1
        return True, found[0]

    def get_or_load(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value cached under ``key``, else ``load()`` (kept if it fits)."""
        with self._lock:
            found, value = self._hit(key)
            if found:
                return value
            self.misses += 1
        value = load()  # outside the lock: loads of other keys proceed in parallel
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            victims = self._keep(key, value, weight)
        self._settle(victims)
        return value

    def get_or_load_many(self, keys: Sequence[Hashable],
                         load: Callable[[list[Hashable]], list[Any]]) -> list[Any]:
        """The values cached under ``keys``; the missing ones from a single
        ``load(missing keys)`` (its values in that order), each kept if it fits."""
        out: list[Any] = [None] * len(keys)
        missing: list[int] = []
        with self._lock:
            for i, key in enumerate(keys):
                found, value = self._hit(key)
                if found:
                    out[i] = value
                else:
                    missing.append(i)
                    self.misses += 1
        if not missing:
            return out
        values = load([keys[i] for i in missing])  # outside the lock, as above
        weights = [self._weigh(v) if self._weigh is not None else 0 for v in values]
        victims: Victims = []
        with self._lock:
            for i, value, weight in zip(missing, values, weights, strict=True):
                out[i] = value
                victims += self._keep(keys[i], value, weight)
        self._settle(victims)
        return out

    def _keep(self, key: Hashable, value: Any, weight: int) -> Victims:
        """Store ``value`` in place of what ``key`` held, unless it is heavier than the
        bound: then ``key`` holds nothing (lock held). What the open-files ledger wants
        dropped to make room is returned, to drop once the lock is released."""
        self._drop(key)
        if self._max_weight is not None and weight > self._max_weight:
            return []
        self._items[key] = (value, weight)
        self._weight += weight
        self._evict()
        if self._files is None or key not in self._items:
            return []
        return self._files.kept(self, self._serial, key, self._source_of(value))

    def _settle(self, victims: Victims) -> None:
        """Drop what the ledger chose (no lock held), and check every open file for
        unlinked ones when that is due."""
        if self._files is None:
            return
        drop(victims)
        if self._files.sweep_due():
            self._files.sweep()

    def _drop(self, key: Hashable) -> None:
        """Forget ``key`` (lock held)."""
        old = self._items.pop(key, None)
        if old is not None:
            self._weight -= old[1]
            if self._files is not None:
                self._files.dropped(self._serial, key)

    def discard(self, key: Hashable) -> None:
        """Forget what ``key`` holds, if anything."""
        with self._lock:
            self._drop(key)

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` in place of what was there; a value too heavy to
        keep leaves nothing there (not the value it was to replace)."""
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            victims = self._keep(key, value, weight)
        self._settle(victims)

    def peek(self, key: Hashable) -> Any:
        """The value cached under ``key`` (marked as used), or None; nothing is loaded."""
        with self._lock:
            return self._hit(key)[1]

    def _evict(self) -> None:
        while len(self._items) > self._capacity or (
                self._max_weight is not None and self._weight > self._max_weight):
            self._drop(next(iter(self._items)))

    def resize(self, capacity: int, max_weight: int | None) -> None:
        """New bounds; what no longer fits goes at once (least recently used first)."""
        with self._lock:
            self._capacity = capacity
            self._max_weight = max_weight
            self._evict()

    def snapshot(self) -> tuple[int, int, int, int]:
        """Entries, total weight, hits and misses, read together."""
        with self._lock:
            return len(self._items), self._weight, self.hits, self.misses

    @property
    def weight(self) -> int:
        """Total weight of what is kept (0 without ``weigh``)."""
        return self._weight

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Drop every value (hit and miss counts stay)."""
        with self._lock:
            for key in list(self._items):
                self._drop(key)


@dataclass(frozen=True)
class CacheKind:
    """One kind of cached value: its name, default bounds and how its bytes are counted;
    for kinds whose values keep a file open, ``source_of`` gives a value's open source
    (such kinds share one budget of open files, :data:`OPEN_FILES`)."""

    name: str
    max_bytes: int
    max_entries: int
    weigh: Callable[[Any], int]
    holds: str
    source_of: Callable[[Any], Any] | None = None


def _nbytes(value: Any) -> int:
    return int(value.nbytes)


def _sized(entry: tuple[Any, int]) -> int:
    # (decoded value, size of its bytes): the bytes kept as the key and the decoded value
    return 2 * entry[1]


MANIFESTS = CacheKind(
    "manifests", 256 * MiB, 1024, _sized,
    "decoded manifests by their bytes; twice the manifest's size (key and value)")
TABLE_VERSIONS = CacheKind(
    "table_versions", 64 * MiB, 4096, _sized,
    "a SQL session's manifests by (table, version, the manifest file's identity); twice "
    "the manifest's size")
DATA_FILES = CacheKind(
    "data_files", 256 * MiB, open_files_bound(),
    lambda reader: 2 * reader.metadata_bytes + OPEN_FILE_OVERHEAD,
    "open data files (a file descriptor each; with index_files at most open_files_bound() "
    "files: a quarter of the descriptor limit, 512 to 8192, never over half of it), by "
    "path (a MemWAL WAL entry's, numbered, with the file's identity); estimated as twice "
    "the file's metadata bytes plus 16 KiB",
    source_of=lambda reader: reader.source)
DELETIONS = CacheKind(
    "deletions", 256 * MiB, 16384, _nbytes,
    "decoded deletion vectors (4 bytes a deleted row)")
LINEAGE = CacheKind(
    "lineage", 256 * MiB, 4096, _nbytes,
    "row lineage per fragment, compact (ranges and runs; 8 bytes an explicit id)")
LINEAGE_ARRAYS = CacheKind(
    "lineage_arrays", 512 * MiB, 4096, _nbytes,
    "materialised row-id and version arrays (8 bytes a row each)")
ROW_ID_INDEXES = CacheKind(
    "row_id_indexes", 256 * MiB, 1024, _nbytes,
    "row id -> address indices per table version (24 bytes a run of rows)")
CHANGE_PLANS = CacheKind(
    "change_plans", 256 * MiB, 4096, _nbytes,
    "metadata-only change-feed plans per table version, and each whole version's read plan")
CHANGE_FIELDS = CacheKind(
    "change_fields", 1 * MiB, 1024,
    lambda facts: 96 + 8 * len(facts[0]),
    "what the change feed reads of a transaction file: the fields an Update modified, "
    "an overwrite, a restore")
INDEX_FILES = CacheKind(
    "index_files", 64 * MiB, 256,
    lambda index: index.nbytes() + 2 * index.data.metadata_bytes + OPEN_FILE_OVERHEAD,
    "open BTREE indices: page bounds plus the page file's metadata (estimated as for "
    "data files); their open page files count towards the data files' budget",
    source_of=lambda index: index.data.source)
INDEX_PAGES = CacheKind(
    "index_pages", 256 * MiB, 1 << 16, _nbytes,
    "decoded BTREE index pages")
INDEX_SECTIONS = CacheKind(
    "index_sections", 16 * MiB, 64, _sized,
    "a manifest's decoded BTREE index list, by the index section's bytes; twice their size")

# MemWAL reads (lance_sql.memwal.read): flushed generations never change once written.
GENERATION_TABLES = CacheKind(
    "generation_tables", 64 * MiB, 1024,
    lambda ds: 2 * len(ds.manifest.schema.fields) * 256 + OPEN_FILE_OVERHEAD,
    "opened flushed MemWAL generations (their manifests), estimated from their schema")
GENERATION_KEYS = CacheKind(
    "generation_keys", 512 * MiB, 256, _nbytes,
    "key columns and row addresses of flushed MemWAL generations (and of snapshots of "
    "MemTables, which only grow), read by LSM scans")
GENERATION_ROWS = CacheKind(
    "generation_rows", 256 * MiB, 1024, _nbytes,
    "decoded rows of flushed MemWAL generations (small next to the base table), read by "
    "LSM scans and lookups")
GENERATION_BLOOMS = CacheKind(
    "generation_blooms", 64 * MiB, 1024, _nbytes,
    "primary-key bloom filters of flushed MemWAL generations")
BASE_ROWS_HIDDEN = CacheKind(
    "base_rows_hidden", 256 * MiB, 1 << 16,
    lambda rows: 64 + sum(int(r.nbytes) + 64 for r in rows.values()),
    "per base-table version and newer MemWAL source (a flushed generation, a MemTable "
    "fragment), the base rows whose keys that source holds, by base fragment")
BASE_DUPLICATES = CacheKind(
    "base_duplicates", 64 * MiB, 4096,
    lambda rows: 64 + sum(int(r.nbytes) + 64 for r in rows.values()),
    "per base-table version, the rows of keys it holds twice that are not the key's "
    "newest there (none: its keys are unique), by base fragment")
BASE_KEY_DIGESTS = CacheKind(
    "base_key_digests", 512 * MiB, 16, _nbytes,
    "per table and primary key, the sorted key codes and row addresses of a base version "
    "known to hold each key once (16 bytes a row), from which the next versions' checks "
    "read only their new fragments")
LSM_WINNERS = CacheKind(
    "lsm_winners", 256 * MiB, 4096, _nbytes,
    "per set of newer MemWAL sources (generations, MemTable snapshots), each one's newest "
    "rows and the keys they hold, decided by LSM scans")
LSM_WINNING_ROWS = CacheKind(
    "lsm_winning_rows", 256 * MiB, 4096, _nbytes,
    "per newer MemWAL source held in memory (a generation, a MemTable snapshot), the "
    "newer sources of its region and a projection: its rows that are their key's newest, "
    "as LSM scans without a filter read them")
LSM_KEY_DIRECTORIES = CacheKind(
    "lsm_key_directories", 256 * MiB, 256, _nbytes,
    "per set of flushed MemWAL generations, every key they hold with its newest row "
    "(21 bytes a key), and a copy of their rows joined when at most 32 MiB, searched and "
    "taken by lookups of many keys")
UNINDEXED_KEYS = CacheKind(
    "unindexed_keys", 256 * MiB, 4096, _nbytes,
    "per base fragment its BTREE key index does not cover yet (merged since the index was "
    "built), its key column; those fragments' keys sorted in blocks of 64 (8 in the newest "
    "range of ids), each block's answer per newer source, and per base version its blocks")
REGION_VALUES = CacheKind(
    "region_values", 16 * MiB, 65536, lambda entry: 1024,
    "each MemWAL region's spec id and values (fixed once the region is created), per "
    "table and set of region specs")
LSM_VIEWS = CacheKind(
    "lsm_views", 16 * MiB, 256, lambda view: 16 << 10,
    "a SQL session's LSM views read from a MemWAL index snapshot (consistency='snapshot', "
    "time travel), per table version; 16 KiB each")

KINDS: tuple[CacheKind, ...] = (
    MANIFESTS, TABLE_VERSIONS, DATA_FILES, DELETIONS, LINEAGE, LINEAGE_ARRAYS, ROW_ID_INDEXES,
    CHANGE_PLANS, CHANGE_FIELDS, INDEX_FILES, INDEX_PAGES, INDEX_SECTIONS,
    GENERATION_TABLES, GENERATION_KEYS, GENERATION_ROWS, GENERATION_BLOOMS,
    BASE_ROWS_HIDDEN, BASE_DUPLICATES, BASE_KEY_DIGESTS, LSM_WINNERS, LSM_WINNING_ROWS,
    LSM_KEY_DIRECTORIES, UNINDEXED_KEYS,
    REGION_VALUES, LSM_VIEWS,
)
_BY_NAME = {kind.name: kind for kind in KINDS}


@dataclass(frozen=True)
class CacheStats:
    """One kind's cache now: what it keeps, its bounds, and lookups so far."""

    kind: str
    entries: int
    bytes: int
    max_bytes: int
    max_entries: int
    hits: int
    misses: int


class TableCache:
    """One cache per :class:`CacheKind`, each bounded by bytes and entries.

    ``max_bytes`` overrides the default byte bound of the kinds it names (0 keeps
    nothing of that kind).
    """

    def __init__(self, max_bytes: Mapping[str, int] | None = None) -> None:
        self._caches = {kind.name: LruCache(kind.max_entries, max_weight=kind.max_bytes,
                                            weigh=kind.weigh, files=OPEN_FILES,
                                            source_of=kind.source_of) for kind in KINDS}
        self._bounds = {kind.name: kind.max_bytes for kind in KINDS}
        self.configure(**dict(max_bytes or {}))

    def get_or_load(self, kind: CacheKind, key: Hashable, load: Callable[[], Any]) -> Any:
        """The ``kind`` value cached under ``key``, else ``load()`` (kept if it fits)."""
        return self._caches[kind.name].get_or_load(key, load)

    def get_or_load_many(self, kind: CacheKind, keys: Sequence[Hashable],
                         load: Callable[[list[Hashable]], list[Any]]) -> list[Any]:
        """The ``kind`` values cached under ``keys``; the missing ones from one
        ``load(missing keys)`` call (each kept if it fits)."""
        return self._caches[kind.name].get_or_load_many(keys, load)

    def put(self, kind: CacheKind, key: Hashable, value: Any) -> None:
        """Keep ``value`` as the ``kind`` value under ``key`` (replacing it; too heavy to
        keep, it leaves nothing there)."""
        self._caches[kind.name].put(key, value)

    def bound(self, kind: CacheKind) -> int:
        """The byte bound of ``kind`` now (a value heavier is never kept)."""
        return self._bounds[kind.name]

    def peek(self, kind: CacheKind, key: Hashable) -> Any:
        """The ``kind`` value cached under ``key``, or None (nothing is loaded)."""
        return self._caches[kind.name].peek(key)

    def configure(self, **max_bytes: int) -> None:
        """Set the byte bound of each kind named (e.g. ``deletions=64 << 20``); a smaller
        bound evicts at once."""
        for name, bound in max_bytes.items():
            kind = _kind(name)
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
                raise InvalidInputError(f"cache bound for {name!r} must be a byte count "
                                        f">= 0, got {bound!r}")
            self._bounds[name] = bound
            self._caches[name].resize(kind.max_entries, bound)

    def clear(self, *kinds: str) -> None:
        """Drop everything cached of ``kinds`` (all kinds when none are named)."""
        for name in kinds or tuple(self._caches):
            self._caches[_kind(name).name].clear()

    def stats(self) -> dict[str, CacheStats]:
        """Entries, bytes, bounds, hits and misses of every kind."""
        out = {}
        for kind in KINDS:
            entries, weight, hits, misses = self._caches[kind.name].snapshot()
            out[kind.name] = CacheStats(kind.name, entries, weight, self._bounds[kind.name],
                                        kind.max_entries, hits, misses)
        return out


def _kind(name: str) -> CacheKind:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidInputError(f"no cache kind {name!r}; kinds: "
                                f"{', '.join(_BY_NAME)}") from None
