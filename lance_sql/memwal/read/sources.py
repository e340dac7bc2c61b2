"""The sources of an LSM read: the base table, flushed generations and MemTables.

Each source is tagged with its generation (``-1`` for the base table) and its region, and
knows how to

* stream its rows with a projection and a pushed-down filter (:meth:`Source.scan`),
* list every row's key, address and tombstone flag (:meth:`Source.key_rows`) — the small
  newer sources do this so that their keys can mask older sources,
* find the newest row of given keys (:meth:`Source.lookup`), and
* hand out its primary-key bloom filter (generations and MemTables).

Flushed generations never change once written, so their decoded rows, key rows and bloom
filters are cached per process (bounded) and shared by every query, the way a writer's in-memory
index is "retained as a cache for readers in the same process".
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import pyarrow as pa

from lance_sql.errors import LanceError, NotFoundError
from lance_sql.expr.arrow import Call, Column, Expr, Literal, resolve
from lance_sql.expr.arrow import columns as expr_columns
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceSchema
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.bloom import PrimaryKeyBloom
from lance_sql.memwal.column_match import relabelled
from lance_sql.memwal.memtable import MemFragment, MemTable, key_codes
from lance_sql.memwal.read.keys import KeyRows, Keys, KeySet, last_rows_of, same_key_value
from lance_sql.memwal.read.unindexed import unindexed_keys
from lance_sql.memwal.wal import TOMBSTONE
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, SYSTEM_COLUMNS
from lance_sql.table.index import index_hook
from lance_sql.table.index.planner import (
    OneKeySearch,
    btree_indices,
    key_addresses,
    key_rows,
    keyed_addresses,
)
from lance_sql.table.read.comparisons import filter_table
from lance_sql.table.read.scan import (
    FragmentReaders,
    Scanner,
    narrowed,
    plan_scan,
    scan_fragment,
    take_addresses,
)
from lance_sql.table.runtime.cache import GENERATION_BLOOMS, GENERATION_KEYS, GENERATION_ROWS
from lance_sql.table.runtime.context import current_runtime

__all__ = ["BaseSource", "GenerationSource", "InMemorySource", "MemTableSource",
           "RenamedMemTable", "Source",
           "BLOOM_FILE", "newest_first", "precedence", "table_order"]

BLOOM_FILE = "bloom_filter.bin"
BASE_GEN = -1
# Counts of base-table lookups whose key column came from the key index, not the data
# files (tests)
KEYS_FROM_INDEX = [0]
# One-key lookups of the base table whose key column is the key asked (tests).
KEY_AS_ASKED = [0]
# One-key lookups of the base table answered by a kept OneKeyTake (tests).
ONE_KEY_TAKES = [0]
# Counts of base-table lookups of a composite key whose candidate rows came from a BTREE
# index on one of its columns, not from a scan (tests)
COMPOSITE_BY_INDEX = [0]
# A composite key's candidates found by the index of one of its columns are taken when
# at most this many per key asked (and at least _CANDIDATES_MIN): else the key columns
# are scanned, as before
_CANDIDATES_PER_KEY = 16
_CANDIDATES_MIN = 4096
_LOOKUP_IN_LIMIT = 4096  # keys answered through the base's BTREE index in one IN list
BATCH_ROWS = 8192
# id of a MemTable's first fragment (or of the MemTable, when empty) -> (a weak reference
# to it, to tell it from a later one at its address without keeping its rows alive; the
# column names and data column types of its rows): see MemTableSource._columns (bounded)
_MEMTABLE_COLUMNS: dict[int, tuple[weakref.ref, frozenset[str], Mapping[str, pa.DataType]]] = {}
_MEMTABLE_COLUMNS_KEPT = 1024


def newest_first(sources: Sequence[Source], across_regions: bool) -> list[list[Source]]:
    """The newer sources in the order that decides each key's newest row: per region,
    generations newest first (a key lives in one region, the MemWAL spec's rule), or —
    ``across_regions``, when the region spec cannot keep a key in one region — one
    chain over every region, ordered as the spec's DeduplicateExec orders its union:
    highest ``_gen`` first; between regions at the same generation (whose row addresses
    are not comparable) the region whose id sorts first. Lookups ask the sources in this
    order too, so a scan and a lookup name the same row."""
    if across_regions:
        return [sorted(sources, key=precedence)]
    groups: dict[object, list[Source]] = {}
    for s in sources:
        groups.setdefault(s.region, []).append(s)
    return [sorted(group, key=lambda x: -x.gen) for group in groups.values()]


def precedence(source: Source) -> tuple[int, bytes]:
    """A newer source's place in :func:`newest_first`'s order across regions (lower
    decides first)."""
    return (-source.gen, source.region.bytes if source.region is not None else b"")


def _filter_schema(schema: pa.Schema) -> pa.Schema:
    extra = [pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS if n not in schema.names]
    return pa.schema(list(schema) + extra)


class Source:
    """One dataset of the LSM tree (see the module docstring)."""

    kind = "source"
    exact_lookup = False  # lookups go through an exact in-memory key index (no bloom)
    holds_rows = False  # its rows are in memory: see held_rows

    def __init__(self, gen: int, region: uuid.UUID | None, region_index: int | None,
                 key_columns: Sequence[str]) -> None:
        self.gen = gen
        self.region = region
        self.region_index = region_index
        self.key_columns = tuple(key_columns)

    @property
    def label(self) -> str:
        """The name EXPLAIN prints: ``base_table[gen=-1]``, ``region_1a2b3c4d[gen=2]``."""
        if self.region is None:
            return f"base_table[gen={self.gen}]"
        return f"region_{self.region.hex[:8]}[gen={self.gen}]"

    @property
    def is_base(self) -> bool:
        return self.gen == BASE_GEN

    @property
    def identity(self) -> Hashable | None:
        """What identifies the source's rows for caches of what is derived from them
        (None: they may change, nothing is cached)."""
        return None

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False,
             rows_wanted: int | None = None) -> Iterator[pa.RecordBatch]:
        """Rows (tombstones included for non-base sources) with ``columns`` (data columns
        and ``_rowaddr``), where ``predicate`` holds; ``drop_rows`` (Lance-backed
        sources): physical offsets per fragment to leave out as if deleted; ``stepwise``
        (Lance-backed sources): fragments read in growing row ranges, so a consumer that
        stops early (a limit) stops the reading early too; ``rows_wanted``: how many rows
        that consumer is expected to take (a hint sizing the ranges: see
        :class:`lance_sql.table.read.scan.RangeSizer`)."""
        raise NotImplementedError

    def column_names(self) -> Collection[str] | None:
        """The columns a filter may name in :meth:`scan` (None: any of the table's); a
        column written after the source's rows (added since a generation was flushed)
        is NULL in them, so a filter naming it is applied to its rows after the scan."""
        return None

    def column_types(self) -> Mapping[str, pa.DataType] | None:
        """The type of each data column the source's rows hold (None: the table's); a
        column retyped since they were written holds its older type there, so a filter
        naming it is applied to its rows once they are cast."""
        return None

    def key_rows(self) -> KeyRows:
        raise NotImplementedError

    def held_rows(self) -> pa.Table:
        """Every row (tombstones too) with ``_rowaddr``, in address order, as the source
        holds them in memory (sources whose ``holds_rows`` is true): what a scan without
        a filter yields."""
        raise NotImplementedError

    def bloom(self) -> PrimaryKeyBloom | None:
        return None

    def might_hold(self, keys: Keys) -> bool:
        """False when the source surely holds none of ``keys`` (a cheap check before a
        lookup; sources with an exact key index know)."""
        return True

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        """The newest row of every key of ``keys`` the source holds: the key columns,
        ``columns``, ``_rowaddr`` and ``_tombstone``, plus ``_key`` (the key's position in
        ``keys``)."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.label} ({self.kind})"


# ---------------------------------------------------------------------- Lance-backed


def lance_scanner(ds: LanceDataset, columns: Sequence[str], predicate: Expr | None, *,
                  fragments: Sequence | None = None, use_index: bool | None = None,
                  drop_rows: Mapping[int, np.ndarray] | None = None) -> Scanner:
    """A scanner of ``ds`` with a filter given as an expression tree (no SQL text round
    trip): indices answer it where they help, as for a filter string. ``drop_rows``:
    physical offsets per fragment left out as if deleted (also from index answers)."""
    scanner = Scanner(ds.store, ds.manifest, columns=list(columns), fragments=fragments,
                      drop_rows=drop_rows)
    if predicate is not None:
        schema = _filter_schema(ds.manifest.schema.to_scan_arrow())
        resolved = resolve(predicate, schema)
        scanner.plan = narrowed(scanner.plan, ds.manifest, resolved, compare=True)
        indexed = index_hook(ds.store, ds.manifest, use_index)(scanner.plan,
                                                               scanner.fragments)
        if indexed is not None and drop_rows:
            rows = {f: _without(r, drop_rows.get(f)) for f, r in indexed.answer.rows.items()}
            indexed = replace(indexed, answer=replace(indexed.answer, rows=rows))
        scanner.indexed = indexed
    return scanner


def _without(rows: np.ndarray, drop: np.ndarray | None) -> np.ndarray:
    """Sorted offsets ``rows`` less those in ``drop``."""
    if drop is None or not len(drop) or not len(rows):
        return rows
    return rows[~np.isin(rows, drop)]


def _in_list(column: str, values: pa.Array) -> Expr:
    return Call("in", (Column((column,)), *(Literal(v, values.type)
                                          for v in values.to_pylist())))


class _LanceSource(Source):
    def __init__(self, ds: LanceDataset, gen: int, region: uuid.UUID | None,
                 region_index: int | None, key_columns: Sequence[str]) -> None:
        super().__init__(gen, region, region_index, key_columns)
        self.dataset = ds

    @property
    def schema(self) -> pa.Schema:
        return self.dataset.manifest.schema.to_scan_arrow()

    # system columns a source answers: a generation's row ids are its own, not the table's
    system: tuple[str, ...] = (ROW_ADDR,)

    def column_names(self) -> Collection[str] | None:
        return self._columns()[0]

    def column_types(self) -> Mapping[str, pa.DataType] | None:
        return self._columns()[1]

    _columns_of: tuple[pa.Schema, frozenset[str], Mapping[str, pa.DataType]] | None = None

    def _columns(self) -> tuple[frozenset[str], Mapping[str, pa.DataType]]:
        """The source's column names (system columns too) and data column types, made once
        per schema (a plan asks every source several times; with 64 regions, hundreds)."""
        schema = self.schema
        memo = self._columns_of
        if memo is None or memo[0] is not schema:
            memo = (schema, frozenset({*schema.names, *self.system}),
                    dict(zip(schema.names, schema.types, strict=True)))
            self._columns_of = memo  # (threads may both make it: the same facts)
        return memo[1], memo[2]

    def _readable(self, columns: Sequence[str]) -> list[str]:
        """``columns`` this source holds (the others come out NULL)."""
        data = self.schema.names
        return [c for c in dict.fromkeys(columns) if c in data or c in self.system]

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False,
             rows_wanted: int | None = None) -> Iterator[pa.RecordBatch]:
        scanner = lance_scanner(self.dataset, self._readable(columns), predicate,
                                drop_rows=drop_rows)
        scanner.stepwise = stepwise
        scanner.wanted = rows_wanted
        for table in scanner.to_tables():  # a fragment's rows as they are: no re-chunking
            yield from table.to_batches()

    def _take(self, addresses: np.ndarray, columns: Sequence[str]) -> pa.Table:
        return self.dataset.take_addresses(addresses, self._readable(columns))


def _newest_first(table: pa.Table, fragments: Sequence[Fragment]) -> np.ndarray | None:
    """The order of ``table``'s rows newest first: the table's row order backwards, its
    fragments as the manifest lists them (``fragments``; a compaction writes old rows to a
    fragment of a higher id but keeps their place), rows by offset (None: one row, or no
    ``_rowaddr``)."""
    if table.num_rows < 2 or ROW_ADDR not in table.column_names:
        return None
    order = table_order(np.asarray(table.column(ROW_ADDR).to_numpy(), np.uint64), fragments)
    if bool((order[1:] >= order[:-1]).all()):  # a take in the table's order
        return np.arange(order.size - 1, -1, -1, dtype=np.int64)
    return np.argsort(order, kind="stable")[::-1].astype(np.int64)


def _in_table_order(table: pa.Table, ids_ascending: bool) -> bool:
    """Whether ``table``'s rows are in the table's row order (ascending ``_rowaddr`` with
    the fragments listed by ascending id, ``ids_ascending``, as a take by sorted
    addresses gives them)."""
    if not ids_ascending or ROW_ADDR not in table.column_names:
        return False
    addresses = numpy_of(table.column(ROW_ADDR))
    return bool((addresses[1:] > addresses[:-1]).all())


def table_order(addresses: np.ndarray, fragments: Sequence[Fragment]) -> np.ndarray:
    """Each row address's place in the table's row order (uint64, higher: later): its
    fragment's place in the manifest's list (``fragments``), then its offset."""
    ids = np.fromiter((f.id for f in fragments), np.uint64, len(fragments))
    by_id = np.argsort(ids, kind="stable")
    held = (addresses >> np.uint64(32))
    at = np.minimum(np.searchsorted(ids[by_id], held), ids.size - 1)
    place = by_id[at].astype(np.uint64)  # each row's fragment's place in the manifest
    return (place << np.uint64(32)) | (addresses & np.uint64(0xFFFFFFFF))


# Counts of lookups that searched a base's unindexed fragments in memory (tests).
UNINDEXED_TAKES = [0]


def _with_unindexed(ds: LanceDataset, column: str, values: pa.Array
                    ) -> tuple[np.ndarray, None] | None:
    """:func:`key_addresses` of a base whose key index misses some fragments: the index
    searched for its fragments, the in-memory keys of the others (:mod:`.unindexed`) for
    theirs; None when those cannot be searched (the caller scans)."""
    indexed = key_rows(ds.store, ds.manifest, column, values)
    if indexed is None:
        return None
    tail = unindexed_keys(ds, column, frozenset(indexed.rows))
    more = tail.addresses(values) if tail is not None else None
    if more is None:
        return None
    UNINDEXED_TAKES[0] += 1
    parts = [(np.uint64(f) << np.uint64(32)) | rows.astype(np.uint64)
             for f, rows in indexed.rows.items() if rows.size]
    return np.sort(np.concatenate([*parts, more])), None


def _unkeyed_addresses(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array
                       ) -> tuple[np.ndarray, None] | None:
    """:func:`key_addresses` in the form of :func:`keyed_addresses`, without the keys."""
    found = key_addresses(store, manifest, column, values)
    return None if found is None else (found, None)


class GenerationSource(_LanceSource):
    """A flushed MemTable: a Lance table of the table's columns plus ``_tombstone``.

    Made unopened (no dataset, an ``open`` function), it opens its table on first use: a
    one-key lookup whose key the bloom filter rules out reads the bloom filter alone, not
    the generation's manifest, so a lookup pruned to one region of many, cold, costs about
    what it costs warm."""

    kind = "flushed"
    holds_rows = True

    def __init__(self, ds: LanceDataset | None, gen: int, region: uuid.UUID | None,
                 region_index: int | None, key_columns: Sequence[str], *,
                 open: Callable[[], LanceDataset | None] | None = None,
                 bloom_at: tuple[ObjectStore, str] | None = None,
                 gone: Callable[[], None] | None = None) -> None:
        """``ds`` None: an unopened generation, which ``open()`` opens on first use
        (None: it was collected after its merge). ``bloom_at``: (the table's store, the
        generation directory's key in it), where its bloom filter is read from and cached
        by (None: the dataset's own store). ``gone``: called when the generation's files
        turn out missing while it is read (the collector removed it after a merge the
        view's base version predates): it raises the error that explains it (the view's
        base version cleaned up: VersionCleanedUpError), or returns to let the
        NotFoundError through."""
        Source.__init__(self, gen, region, region_index, key_columns)
        assert ds is not None or open is not None, "an unopened generation needs open()"
        self._dataset = ds
        self._open = open
        self._gone = gone
        self._bloom_at = bloom_at
        self._bloom: PrimaryKeyBloom | None = None  # see bloom
        # (the dataset they are of, its identity, (key rows, first key column's type)):
        # facts of a generation that never changes, asked by every lookup of many keys
        self._facts: tuple[LanceDataset, Hashable, tuple[int, pa.DataType] | None] | None \
            = None

    @property
    def dataset(self) -> LanceDataset:
        ds = self._dataset
        if ds is None:
            assert self._open is not None
            opened = self._open()
            if opened is None:
                self._missing()
                raise NotFoundError(f"generation {self.gen} of region {self.region} was "
                                    "collected after its merge")
            ds = self._dataset = opened
        return ds

    @dataset.setter
    def dataset(self, ds: LanceDataset) -> None:  # (a plain attribute of other sources)
        self._dataset = ds

    def _missing(self) -> None:
        """The generation's files are gone: raise what explains it, if anything does."""
        if self._gone is not None:
            self._gone()

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False,
             rows_wanted: int | None = None) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._scan(columns, predicate)
        except NotFoundError:
            self._missing()
            raise

    def _take(self, addresses: np.ndarray, columns: Sequence[str]) -> pa.Table:
        try:
            return super()._take(addresses, columns)
        except NotFoundError:
            self._missing()
            raise

    @property
    def identity(self) -> Hashable:
        ds = self.dataset  # (its column names too: a column renamed since reads renamed)
        facts = self._facts  # (one read: threads may replace it; any of them is right)
        if facts is None or facts[0] is not ds:
            facts = self._facts = (ds, ("generation", ds.store.uri, ds.version, self.gen,
                                        self.region, tuple(self.schema.names)), None)
        return facts[1]

    def key_facts(self) -> tuple[int, pa.DataType]:
        """(the rows of :meth:`key_rows`, its first key column's type), kept by the source
        once known (a generation never changes)."""
        identity = self.identity
        facts = self._facts
        if facts is None or facts[1] is not identity or facts[2] is None:
            held = self.key_rows()
            found = (held.num_rows, held.keys[0].type)
            self._facts = (self.dataset, identity, found)
            return found
        return facts[2]

    def rows(self) -> pa.Table:
        """Every row of the generation (all columns, ``_rowaddr``), in address order,
        decoded once per process (bounded cache): a generation never changes, and it is
        small next to the base table, so scans and lookups read it from memory."""
        ds = self.dataset
        names = self.schema.names

        def load() -> pa.Table:
            try:
                return lance_scanner(ds, [*names, ROW_ADDR], None).to_table().combine_chunks()
            except NotFoundError:  # (collected since it was opened)
                self._missing()
                raise

        # (keyed by the names too: a column renamed since reads under its new name)
        return current_runtime().cache.get_or_load(
            GENERATION_ROWS, (ds.store.uri, ds.version, *names), load)

    def held_rows(self) -> pa.Table:
        return self.rows()

    def _scan(self, columns: Sequence[str], predicate: Expr | None
              ) -> Iterator[pa.RecordBatch]:
        table = self.rows()
        if predicate is not None:
            if not {p[0] for p in expr_columns(predicate)} <= set(table.column_names):
                yield from super().scan(columns, predicate)  # e.g. _rowid: the scanner's
                return
            resolved = resolve(predicate, table.schema)
            table = filter_table(table, resolved)
        held = set(table.column_names)
        names = [c for c in dict.fromkeys(columns) if c in held]
        yield from table.select(names).to_batches()

    def key_rows(self) -> KeyRows:
        ds = self.dataset

        def load() -> KeyRows:
            table = self.rows()
            return KeyRows([table.column(k).combine_chunks() for k in self.key_columns],
                           np.asarray(numpy_of(table.column(ROW_ADDR)), np.uint64),
                           np.asarray(numpy_of(table.column(TOMBSTONE)), bool))

        return current_runtime().cache.get_or_load(GENERATION_KEYS, (ds.store.uri, ds.version),
                                                   load)

    def bloom(self) -> PrimaryKeyBloom:
        """The generation's filter, kept by the source once found (a generation never
        changes; a warm view keeps a lookup's generation sources between reads)."""
        found = self._bloom
        if found is None:
            found = self._bloom = self._cached_bloom()
        return found

    def _cached_bloom(self) -> PrimaryKeyBloom:
        cache = current_runtime().cache
        if self._bloom_at is None:
            store = self.dataset.store

            def load() -> PrimaryKeyBloom:
                return PrimaryKeyBloom.from_bytes(store.read(BLOOM_FILE),
                                                  f"{store.uri}/{BLOOM_FILE}")

            return cache.get_or_load(GENERATION_BLOOMS, store.uri, load)
        table_store, directory = self._bloom_at
        key = f"{directory}/{BLOOM_FILE}"

        def load_at() -> PrimaryKeyBloom:
            try:
                data = table_store.read(key)
            except NotFoundError:
                if self._dataset is None and self._open is not None and self._open() is None:
                    return PrimaryKeyBloom()  # collected after its merge: holds no key
                raise
            return PrimaryKeyBloom.from_bytes(data, f"{table_store.uri}/{key}")

        return cache.get_or_load(GENERATION_BLOOMS, (table_store.uri, directory), load_at)

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        rows = self.key_rows()
        latest = rows.latest()
        found = keys.find_in(rows.key_set())
        hit = found >= 0
        wanted = list(dict.fromkeys([*self.key_columns, *columns, ROW_ADDR, TOMBSTONE]))
        table = self.rows()  # key rows are in the same (address) order
        present = set(table.column_names)  # (column_names builds a new list per call)
        table = table.select([c for c in wanted if c in present])
        if not hit.any():  # (a bloom filter's false positives): no rows to take
            return table.slice(0, 0).append_column("_key", pa.array([], pa.int64()))
        table = table.take(pa.array(latest[found[hit]], pa.int64()))
        return table.append_column("_key", pa.array(np.flatnonzero(hit)))


class BaseSource(_LanceSource):
    """The base table (generation -1); merge_insert keeps its keys unique, but plain
    appends may add a key again: a lookup then takes the newest row (the last in the
    table's order, see :func:`_newest_first`). Its rows have the table's ``_rowid`` and
    row versions."""

    kind = "base"
    system = SYSTEM_COLUMNS

    def __init__(self, ds: LanceDataset, key_columns: Sequence[str], *,
                 one_key: OneKeyTakes | None = None) -> None:
        """``one_key``: where one-key lookups keep what they resolve once per version
        and column list (see :class:`OneKeyTake`; a view shares it between reads)."""
        super().__init__(ds, BASE_GEN, None, None, key_columns)
        self._one_key = one_key
        self._ids_ascending: tuple[object, bool] | None = None  # see _fragment_ids_ascend

    def _fragment_ids_ascend(self) -> bool:
        """Whether the manifest lists its fragments by ascending id (known once per
        manifest: a table of thousands of fragments is not walked per lookup)."""
        manifest = self.dataset.manifest
        kept = self._ids_ascending  # (one read: threads may replace it)
        if kept is None or kept[0] is not manifest:
            ids = np.fromiter((f.id for f in manifest.fragments), np.int64,
                              len(manifest.fragments))
            kept = self._ids_ascending = (manifest, bool((ids[1:] > ids[:-1]).all()))
        return kept[1]

    def fragment_ids(self) -> list[int]:
        """The ids of the fragments this source scans (a part of a split read scans
        some of them)."""
        return [f.id for f in self.dataset.manifest.fragments]

    def key_index(self) -> str | None:
        """The BTREE index on the (single) primary-key column, if any."""
        if len(self.key_columns) != 1:
            return None
        schema = self.dataset.manifest.schema
        field_ids = {f.id for f in schema.fields if f.name == self.key_columns[0]}
        for index in btree_indices(self.dataset.manifest):
            if set(index.fields) <= field_ids:
                return index.name
        return None

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        table, rows, key_positions = self.found_rows(keys, columns)
        if rows is not None:
            table = table.take(pa.array(rows, pa.int64()))
        table = table.append_column(TOMBSTONE, pa.array(np.zeros(table.num_rows, bool)))
        return table.append_column("_key", pa.array(key_positions))

    def found_rows(self, keys: Keys, columns: Sequence[str]
                   ) -> tuple[pa.Table, np.ndarray | None, np.ndarray]:
        """:meth:`lookup` before its rows are put in the keys' order: (rows read, in the
        order read, the key columns, ``columns`` and ``_rowaddr``; each found key's row
        among them, None when they are those rows in that order; the positions of the
        found keys in ``keys``). A caller that reorders rows anyway takes them once."""
        wanted = list(dict.fromkeys([*self.key_columns, *columns]))
        indexed = self.key_index() is not None
        # one search of the key index for every key and one take, no scanner
        table = self._indexed_take(keys, wanted) if indexed else None
        if table is None and not indexed:
            table = self._candidates_take(keys, wanted)
        if table is None and indexed and keys.num_rows <= _LOOKUP_IN_LIMIT:
            predicate = _in_list(self.key_columns[0], keys.columns[0])
            table = lance_scanner(self.dataset, self._readable([*wanted, ROW_ADDR]),
                                  predicate).to_table()
        elif table is None:
            table = self._reverse_scan(keys, wanted)
        if keys.num_rows == 1 and table.num_rows <= 1:  # one key: compared as Python values
            hit_one = table.num_rows == 1 and all(
                same_key_value(table.column(k), w)
                for k, w in zip(self.key_columns, keys.table.columns, strict=True))
            return table.slice(0, int(hit_one)), None, np.zeros(int(hit_one), np.int64)
        # each key's row (a key asked twice gets its row twice, as from other sources)
        # candidates newest first: of a key held twice (plain appends to the base do
        # not enforce the key) the newest row wins, the last in the table's order
        fragments = self.dataset.manifest.fragments
        if len(self.key_columns) == 1 and _in_table_order(table, self._fragment_ids_ascend()):
            held_key = table.column(self.key_columns[0])
            if pa.types.is_integer(held_key.type) and not held_key.null_count:
                # rows in the table's order: a key's newest row is its last one
                found = last_rows_of(key_codes([held_key.combine_chunks()]), keys.codes)
                hit = found >= 0
                return table, found[hit], np.flatnonzero(hit)
        newest = _newest_first(table, fragments)
        held = [table.column(k).combine_chunks() for k in self.key_columns]
        if newest is not None:
            held = [c.take(array_from_numpy(newest)) for c in held]
        found = KeySet(held).find(keys.columns, keys.codes)
        hit = found >= 0
        rows = found[hit] if newest is None else newest[found[hit]]
        return table, rows, np.flatnonzero(hit)

    def lookup_one(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """:meth:`lookup` of one key by the key index, without the batch bookkeeping: the
        key's row (the ``columns`` this source has, and ``_rowaddr``; no row when the key
        is not here). None when the index cannot answer alone: the caller takes
        :meth:`lookup`."""
        if keys.num_rows != 1:
            return None
        take = self._one_key_take(columns)
        if take is not None:
            return take.row(self.dataset.store, keys.table.column(0))
        if self.key_index() is None:
            return None
        table = self._indexed_take(keys, list(dict.fromkeys([*self.key_columns, *columns])))
        if table is None or table.num_rows > 1:
            return None
        if table.num_rows and not all(same_key_value(table.column(k), c)
                                      for k, c in zip(self.key_columns, keys.table.columns,
                                                      strict=True)):
            return table.slice(0, 0)  # compared as lookup compares: as Python values
        return table

    def _one_key_take(self, columns: Sequence[str]) -> OneKeyTake | None:
        """The :class:`OneKeyTake` of ``columns`` at this source's version, kept in
        ``one_key`` (None: none kept, or the lookup takes the general path)."""
        kept = self._one_key
        if kept is None:
            return None
        # (one read; a view's base stays at its version, a new version gets a new view,
        # so this only guards a dataset moved in place by a write through it)
        manifest = self.dataset.manifest
        names = tuple(columns)
        found = kept.get(names)
        if found is None or found[0] is not manifest:
            try:
                take = self._resolve_one_key(manifest, names)
            except LanceError:
                return None  # (not kept: the general path meets the same error)
            found = (manifest, take)
            if len(kept) < _ONE_KEY_TAKES_KEPT:
                kept[names] = found  # (written whole: threads see it or not at all)
        take = found[1]
        # (asked each time, as the general path asks: tests turn the shortcut off)
        return take if take is not None and _exact_equality(take.key_field.type) else None

    def _resolve_one_key(self, manifest: Manifest, columns: tuple[str, ...]
                         ) -> OneKeyTake | None:
        """The take of ``columns`` (with the key) at ``manifest``; None where
        :meth:`lookup_one` answers otherwise (a composite key, a key type without exact
        equality, no index that answers alone)."""
        if len(self.key_columns) != 1 or self.key_index() is None:
            return None
        key = self.key_columns[0]
        key_type = self.schema.field(key).type
        if key not in columns or not _exact_equality(key_type):
            return None
        search = OneKeySearch.of(manifest, key)
        if search is None or not search.key_type.equals(key_type):
            return None
        return OneKeyTake(search, self.dataset, key, key_type,
                          self._readable([*columns, ROW_ADDR]))

    def _indexed_take(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """The rows of ``keys`` found by one search of the key index for all of them and
        one take of their addresses (None: the index does not cover every fragment, or
        cannot be read — the scanner then finds the keys, with its warning)."""
        ds = self.dataset
        key = self.key_columns[0]
        # many keys of a one-column key: its column built from the keys the index holds,
        # numbers or strings; one key of an exact type: the key asked (below)
        keyed = keys.num_rows > 1 and len(self.key_columns) == 1 and key in columns
        try:
            found = (keyed_addresses if keyed else _unkeyed_addresses)(
                ds.store, ds.manifest, key, keys.first_column())
            if found is None:
                # fragments merged since the index was built: their keys from the tail
                found = _with_unindexed(ds, key, keys.first_column())
        except LanceError:
            return None  # unusable index: the general path scans instead
        if found is None:
            return None
        addresses, indexed_keys = found
        key_type = self.schema.field(key).type
        if not keyed and keys.num_rows == 1 and key in columns and _exact_equality(key_type):
            # one key of exact equality: every row the index found holds that very key,
            # so the key column is the key itself, not a read of its column
            readable = self._readable([*columns, ROW_ADDR])
            table = self._take(addresses, [c for c in readable if c != key])
            given = keys.columns[0]
            column = given.cast(key_type) if not given.type.equals(key_type) else given
            if table.num_rows != 1:
                column = column.take(pa.array(np.zeros(table.num_rows, np.int64)))
            KEY_AS_ASKED[0] += 1
            return table.add_column(readable.index(key), pa.field(key, key_type), column)
        if indexed_keys is None:
            return self._take(addresses, [*columns, ROW_ADDR])
        # the key column from the index: the rows taken (deleted ones left out) found
        # among the addresses by their _rowaddr
        readable = self._readable([*columns, ROW_ADDR])
        table = self._take(addresses, [c for c in readable if c != key])
        at = np.searchsorted(addresses, table.column(ROW_ADDR).to_numpy())
        column = (pa.array(indexed_keys[at], key_type) if isinstance(indexed_keys, np.ndarray)
                  else indexed_keys.take(pa.array(at, pa.int64())))  # strings: Arrow
        KEYS_FROM_INDEX[0] += 1
        return table.add_column(readable.index(key), pa.field(key, key_type), column)

    def _candidates_take(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """A composite key's lookup by the BTREE index on one of its columns: the rows
        whose value there is one of the keys' (one search, one take), which the caller
        then matches on the whole key (fragments the index misses searched in memory:
        :mod:`.unindexed`). None: no such index, an unusable one, or too many candidates
        (the caller scans the key columns)."""
        if len(self.key_columns) < 2:
            return None
        schema = self.dataset.manifest.schema
        indexed: set[int] = set()
        for index in btree_indices(self.dataset.manifest):
            if len(index.fields) == 1:
                indexed.update(index.fields)
        column = next((k for k in self.key_columns
                       if any(f.name == k and f.id in indexed for f in schema.fields)), None)
        if column is None:
            return None
        values = keys.columns[self.key_columns.index(column)].unique().drop_null()
        ds = self.dataset
        try:
            addresses = key_addresses(ds.store, ds.manifest, column, values)
            if addresses is None:
                # fragments added since the index was built: their values from the tail
                found = _with_unindexed(ds, column, values)
                addresses = None if found is None else found[0]
        except LanceError:
            return None  # unusable index: the key columns are scanned instead
        if addresses is None or addresses.size > max(_CANDIDATES_MIN,
                                                     _CANDIDATES_PER_KEY * keys.num_rows):
            return None
        COMPOSITE_BY_INDEX[0] += 1
        return self._take(addresses, [*columns, ROW_ADDR])

    def _reverse_scan(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        """Fragments last to first, key columns only, until every key is found; then the
        rows found are taken by address. The keys become a filter of key comparisons
        when they can (one key, or a one-column key), so each fragment's key column is
        compared in place and row addresses are made for its matches only."""
        compared = self._compared_reverse_scan(keys)
        if compared is not None:
            return self._take(compared, [*columns, ROW_ADDR])
        ds = self.dataset
        wanted = KeySet(keys.columns)
        plan = lance_scanner(ds, [*self.key_columns, ROW_ADDR], None).plan
        # the distinct keys (a key asked twice, or held twice, counts once)
        distinct = np.unique(wanted.find(keys.columns, keys.codes))
        seen = np.zeros(keys.num_rows, bool)
        found: list[np.ndarray] = []
        for fragment in reversed(ds.manifest.fragments):
            if seen[distinct].all():
                break
            part = scan_fragment(ds.store, ds.manifest, fragment, plan)
            at = wanted.find([part.column(k).combine_chunks() for k in self.key_columns])
            hit = at >= 0
            if hit.any():
                found.append(np.asarray(part.column(ROW_ADDR).to_numpy(), np.uint64)[hit])
                seen[at[hit]] = True
        addresses = np.concatenate(found) if found else np.zeros(0, np.uint64)
        return self._take(addresses, [*columns, ROW_ADDR])

    def _compared_reverse_scan(self, keys: Keys) -> np.ndarray | None:
        """The addresses of ``keys``' rows, fragments last to first, each fragment's key
        columns tested against the keys as a filter (see :meth:`_reverse_scan`); None
        when the keys make no such filter (many keys of a composite key, or too many),
        or when a key column's equality could differ from the key sets' (floats: -0.0
        and NaN; decimals: scales)."""
        key_columns = keys.columns
        if not all(_exact_equality(c.type) for c in key_columns):
            return None
        if keys.num_rows == 1:
            equal = tuple(Call("=", (Column((name,)), Literal(column[0].as_py(), column.type)))
                          for name, column in zip(self.key_columns, key_columns, strict=True))
            predicate: Expr = equal[0] if len(equal) == 1 else Call("and", equal)
            distinct = 1
        elif len(self.key_columns) == 1 and keys.num_rows <= _LOOKUP_IN_LIMIT:
            values = key_columns[0].unique()
            predicate = _in_list(self.key_columns[0], values)
            distinct = len(values)
        else:
            return None
        ds = self.dataset
        schema = _filter_schema(ds.manifest.schema.to_scan_arrow())
        read = [ROW_ADDR] if distinct == 1 else [ROW_ADDR, self.key_columns[0]]
        plan = narrowed(Scanner(ds.store, ds.manifest, columns=read).plan, ds.manifest,
                        resolve(predicate, schema), compare=True)
        found: list[np.ndarray] = []
        found_keys: list[pa.Array] = []
        for fragment in reversed(ds.manifest.fragments):
            part = scan_fragment(ds.store, ds.manifest, fragment, plan)
            if not part.num_rows:
                continue
            found.append(np.asarray(part.column(ROW_ADDR).to_numpy(), np.uint64))
            if distinct == 1:
                break
            # a key the base holds twice (plain appends do not enforce it) counts once
            found_keys.extend(part.column(self.key_columns[0]).chunks)
            if len(pa.chunked_array(found_keys, found_keys[0].type).unique()) >= distinct:
                break
        return np.concatenate(found) if found else np.zeros(0, np.uint64)


# column list -> (the base manifest it was made at, its OneKeyTake; None: the general path)
OneKeyTakes = dict[tuple[str, ...], tuple[Manifest, "OneKeyTake | None"]]
_ONE_KEY_TAKES_KEPT = 64  # column lists a view keeps (more take the general path's steps)


class OneKeyTake:
    """:meth:`BaseSource.lookup_one` of a one-column key of exact equality through its
    BTREE index, resolved once per base version and column list: the key's search
    (:class:`~lance_sql.table.index.planner.OneKeySearch`) and the columns taken, so a
    lookup is one page search and one row take. The key column is the key asked, as
    :meth:`BaseSource._indexed_take` makes it (every entry found holds that very key).
    Same rows and errors as that path; immutable once made (threads share it)."""

    def __init__(self, search: OneKeySearch, dataset: LanceDataset, key: str,
                 key_type: pa.DataType, readable: list[str]) -> None:
        self.search = search
        self.dataset = dataset
        self.key_field = pa.field(key, key_type)
        self.key_at = readable.index(key)
        self.taken = [c for c in readable if c != key]
        # the take of one address as LanceDataset.take_addresses plans it, and the
        # fragment readers its takes keep (plain dict reads and writes: threads share it)
        self.plan = plan_scan(search.manifest, self.taken)
        self.readers: FragmentReaders = {}

    def row(self, store: ObjectStore, given: pa.ChunkedArray | pa.Array) -> pa.Table | None:
        """The row of the one key ``given`` (no row: not here, or deleted); None when the
        index cannot be read (the caller takes the general path, as it does then)."""
        value = given.combine_chunks() if isinstance(given, pa.ChunkedArray) else given
        if not value.type.equals(self.key_field.type):
            value = value.cast(self.key_field.type)
        try:
            addresses = self.search.addresses(store, value)
        except LanceError:
            return None  # unusable index: the general path scans instead
        # (the manifest searched is the dataset's: see _one_key_take)
        table = take_addresses(self.dataset.store, self.search.manifest, addresses,
                               plan=self.plan, readers=self.readers)
        KEY_AS_ASKED[0] += 1
        if table.num_rows > 1:
            return None  # a key held twice (plain appends): the general path picks one
        if not table.num_rows:
            value = value.slice(0, 0)
        ONE_KEY_TAKES[0] += 1
        return table.add_column(self.key_at, self.key_field, value)


def _exact_equality(t: pa.DataType) -> bool:
    """Whether ``=`` on a column of type ``t`` holds exactly when the key sets match, and
    an index entry found for a key holds that very key (integers, booleans, strings and
    binaries: equal values are equal bytes)."""
    return (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


# ---------------------------------------------------------------------- in memory


class InMemorySource(Source):
    """Rows held in memory: an Arrow table with the key columns, ``_rowaddr`` and
    ``_tombstone`` (tests build sources this way; MemTables are one)."""

    kind = "memory"
    holds_rows = True

    def __init__(self, table: pa.Table, gen: int, region: uuid.UUID | None,
                 region_index: int | None, key_columns: Sequence[str]) -> None:
        super().__init__(gen, region, region_index, key_columns)
        if ROW_ADDR not in table.column_names:
            table = table.append_column(ROW_ADDR, pa.array(np.arange(table.num_rows,
                                                                     dtype=np.uint64)))
        if TOMBSTONE not in table.column_names:
            table = table.append_column(TOMBSTONE, pa.array(np.zeros(table.num_rows, bool)))
        self.table = table
        self._rows: KeyRows | None = None

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False,
             rows_wanted: int | None = None) -> Iterator[pa.RecordBatch]:
        table = self.table
        if predicate is not None:
            resolved = resolve(predicate, _filter_schema(table.schema))
            table = filter_table(table, resolved)
        held = set(table.column_names)
        names = [c for c in columns if c in held]
        yield from table.select(names).to_batches(max_chunksize=BATCH_ROWS)

    def held_rows(self) -> pa.Table:
        return self.table

    def column_names(self) -> Collection[str] | None:
        return {*self.table.column_names, *SYSTEM_COLUMNS}

    def column_types(self) -> Mapping[str, pa.DataType] | None:
        schema = self.table.schema
        return dict(zip(schema.names, schema.types, strict=True))

    def key_rows(self) -> KeyRows:
        if self._rows is None:
            t = self.table
            self._rows = KeyRows([t.column(k).combine_chunks() for k in self.key_columns],
                                 np.asarray(t.column(ROW_ADDR).to_numpy(), np.uint64),
                                 np.asarray(t.column(TOMBSTONE).to_numpy(
                                     zero_copy_only=False), bool))
        return self._rows

    def bloom(self) -> PrimaryKeyBloom:
        bloom = PrimaryKeyBloom()
        bloom.add(self.key_rows().keys)
        return bloom

    def _rows_at(self, positions: np.ndarray, columns: Sequence[str]) -> pa.Table:
        wanted = list(dict.fromkeys([*self.key_columns, *columns, ROW_ADDR, TOMBSTONE]))
        present = set(self.table.column_names)
        names = [c for c in wanted if c in present]
        return self.table.select(names).take(pa.array(positions, pa.int64()))

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        rows = self.key_rows()
        latest = rows.latest()
        found = keys.find_in(rows.key_set())
        hit = found >= 0
        table = self._rows_at(latest[found[hit]], columns)
        return table.append_column("_key", pa.array(np.flatnonzero(hit)))


class RenamedMemTable:
    """A writer's MemTable whose columns, and the fields nested in them, read as the table
    names them now, matched by field id, as flushed generations are
    (:func:`~..generation_tables.named_as_table`): a writer opened before a rename keeps
    its schema, and its rows would otherwise read as NULL under the new name until it
    flushes. Keys asked of it are named back."""

    def __init__(self, memtable: MemTable, named: LanceSchema) -> None:
        """``named``: the MemTable's schema named as the table names it now
        (:func:`~..generation_tables.named_schema`)."""
        self.memtable = memtable
        pairs = list(zip(memtable.schema.fields, named.fields, strict=True))
        self._new = {w.name: n.name for w, n in pairs if w.name != n.name}
        self._old = {new: old for old, new in self._new.items()}
        # columns with renamed nested fields: the type to read them as
        self._types = {n.name: n.arrow_type for w, n in pairs
                       if w.children and not w.arrow_type.equals(n.arrow_type)}
        # (part of the source's identity)
        self.renamed = (tuple(sorted(self._new.items())),
                        tuple(sorted((k, str(t)) for k, t in self._types.items())))
        self.primary_key = [self._new.get(k, k) for k in memtable.primary_key]
        self.arrow_schema = self._named(memtable.arrow_schema.empty_table()).schema

    @property
    def token(self) -> object:
        return self.memtable.token

    @property
    def generation(self) -> int:
        return self.memtable.generation

    @property
    def num_rows(self) -> int:
        return self.memtable.num_rows

    @property
    def bloom(self) -> PrimaryKeyBloom:
        return self.memtable.bloom

    def lookup_codes(self, codes: np.ndarray, key_type: pa.DataType,
                     upto: int | None = None) -> np.ndarray | None:
        return self.memtable.lookup_codes(codes, key_type, upto)

    def _named(self, table: pa.Table) -> pa.Table:
        table = table.rename_columns([self._new.get(n, n) for n in table.column_names])
        for name, to in self._types.items():
            at = table.schema.get_field_index(name)
            if at >= 0:
                table = table.set_column(at, table.field(at).with_type(to),
                                         relabelled(table.column(at), to))
        return table

    def _asked(self, keys: pa.Table) -> pa.Table:
        return keys.rename_columns([self._old.get(n, n) for n in keys.column_names])

    def fragments(self) -> list[MemFragment]:
        return [replace(f, rows=self._named(f.rows)) for f in self.memtable.fragments()]

    def lookup(self, keys: pa.Table, upto: int | None = None) -> np.ndarray:
        return self.memtable.lookup(self._asked(keys), upto)

    def lookup_one(self, keys: pa.Table, upto: int | None = None
                   ) -> tuple[int, pa.Table] | None:
        found = self.memtable.lookup_one(self._asked(keys), upto)
        return None if found is None else (found[0], self._named(found[1]))

    def take(self, addresses: np.ndarray) -> pa.Table:
        return self._named(self.memtable.take(addresses))


class MemTableSource(InMemorySource):
    """A writer's MemTable in this process, as of the moment the plan was made (or its
    first ``fragment_count`` fragments: the moment of the read, see
    :class:`~.planner.ReadMoment`): rows put later are not seen, by scans or lookups.
    Lookups use the MemTable's own key index, left to the snapshot's rows."""

    kind = "memtable"
    exact_lookup = True

    def __init__(self, memtable: MemTable | RenamedMemTable, region: uuid.UUID,
                 region_index: int | None, fragment_count: int | None = None) -> None:
        Source.__init__(self, memtable.generation, region, region_index,
                        memtable.primary_key)
        self.memtable = memtable
        # the snapshot (a MemTable only gets fragments appended); rows built when scanned
        self._fragments = memtable.fragments()[:fragment_count]
        self._table: pa.Table | None = None
        self._rows = None
        self._found: tuple[Keys, np.ndarray] | None = None  # see might_hold

    @property
    def identity(self) -> Hashable:
        return ("memtable", self.memtable.token, len(self._fragments), self.gen, self.region,
                getattr(self.memtable, "renamed", ()))

    @property
    def snapshot(self) -> list[MemFragment]:
        """The MemTable's fragments when the plan was made."""
        return self._fragments

    def column_names(self) -> Collection[str] | None:
        # those of :attr:`table` (its fragments share one schema), without building it: a
        # plan asks every source, a limited scan may never read the MemTable
        return self._columns()[0]

    def column_types(self) -> Mapping[str, pa.DataType] | None:
        return self._columns()[1]

    _columns_of: tuple[frozenset[str], Mapping[str, pa.DataType]] | None = None

    def _columns(self) -> tuple[frozenset[str], Mapping[str, pa.DataType]]:
        """Column names and types, made once per MemTable schema (the snapshot's
        fragments share one; a scan of 64 regions makes 64 sources of them per read)."""
        if self._columns_of is None:
            frags = self._fragments
            first = frags[0] if frags else self.memtable
            known = _MEMTABLE_COLUMNS.get(id(first))
            if known is None or known[0]() is not first:
                schema = frags[0].rows.schema if frags else self.memtable.arrow_schema
                if len(_MEMTABLE_COLUMNS) >= _MEMTABLE_COLUMNS_KEPT:
                    _MEMTABLE_COLUMNS.clear()  # (threads may both clear or fill: same facts)
                known = _MEMTABLE_COLUMNS[id(first)] = (
                    weakref.ref(first),
                    frozenset({*schema.names, ROW_ADDR, TOMBSTONE, *SYSTEM_COLUMNS}),
                    dict(zip(schema.names, schema.types, strict=True)))
            self._columns_of = known[1:]
        return self._columns_of

    @property
    def table(self) -> pa.Table:
        """The snapshot's rows with ``_rowaddr`` and ``_tombstone``, built on first use
        (a point lookup answered by the MemTable's key index never needs them)."""
        if self._table is None:
            frags = self._fragments
            table = (pa.concat_tables([f.rows for f in frags]) if frags
                     else self.memtable.arrow_schema.empty_table())
            sizes = np.array([f.rows.num_rows for f in frags], np.int64)
            ids = np.repeat(np.array([f.fragment_id for f in frags], np.uint64), sizes)
            offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
                np.cumsum(sizes) - sizes, sizes)
            addresses = (ids << np.uint64(32)) | offsets.astype(np.uint64)
            table = table.append_column(pa.field(ROW_ADDR, pa.uint64(), False),
                                        pa.array(addresses, pa.uint64()))
            if TOMBSTONE not in table.column_names:
                table = table.append_column(TOMBSTONE,
                                            pa.array(np.zeros(table.num_rows, bool)))
            self._table = table
        return self._table

    def key_rows(self) -> KeyRows:
        """Cached per MemTable and snapshot size: a MemTable only gets fragments appended,
        so the first n fragments never change."""
        if self._rows is None:
            key = ("memtable", self.memtable.token, len(self._fragments))
            self._rows = current_runtime().cache.get_or_load(
                GENERATION_KEYS, key, partial(InMemorySource.key_rows, self))
        return self._rows

    def bloom(self) -> PrimaryKeyBloom:
        return self.memtable.bloom

    def lookup_codes(self, codes: np.ndarray, key_type: pa.DataType) -> np.ndarray | None:
        """The MemTable's :meth:`~MemTable.lookup_codes` within the snapshot."""
        return self.memtable.lookup_codes(codes, key_type, len(self._fragments))

    def lookup_keys(self, keys: pa.Table) -> np.ndarray:
        """The MemTable's :meth:`~MemTable.lookup` within the snapshot."""
        return self.memtable.lookup(keys, len(self._fragments))

    def lookup_one(self, keys: pa.Table) -> tuple[int, pa.Table] | None:
        """The MemTable's :meth:`~MemTable.lookup_one` within the snapshot."""
        return self.memtable.lookup_one(keys, len(self._fragments))

    def might_hold(self, keys: Keys) -> bool:
        addresses = self.lookup_keys(keys.table)
        # the lookup right after needs not search again
        self._found = (keys, addresses)
        return bool((addresses >= 0).any())

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        found, self._found = self._found, None
        if found is not None and found[0] is keys:
            addresses = found[1]
        else:
            addresses = self.lookup_keys(keys.table)
        hit = addresses >= 0
        if not hit.any():  # the usual answer of a MemTable: nothing read
            schema = self.memtable.arrow_schema
            names = set(schema.names)
            fields = [schema.field(c) for c in dict.fromkeys([*self.key_columns, *columns])
                      if c in names]
            return pa.schema([*fields, pa.field(ROW_ADDR, pa.uint64()),
                              pa.field("_key", pa.int64())]).empty_table()
        rows = self.memtable.take(addresses[hit])
        rows = rows.append_column(ROW_ADDR, pa.array(addresses[hit].astype(np.uint64)))
        wanted = list(dict.fromkeys([*self.key_columns, *columns, ROW_ADDR, TOMBSTONE]))
        present = set(rows.column_names)
        out = rows.select([c for c in wanted if c in present])
        return out.append_column("_key", pa.array(np.flatnonzero(hit)))
