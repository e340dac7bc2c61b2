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
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.expr.arrow import Call, Column, Expr, Literal, resolve
from lance_sql.expr.arrow import columns as expr_columns
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.bloom import PrimaryKeyBloom
from lance_sql.memwal.memtable import MemFragment, MemTable
from lance_sql.memwal.read.keys import KeyRows, Keys, KeySet
from lance_sql.memwal.wal import TOMBSTONE
from lance_sql.numpy_arrow import numpy_of
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, SYSTEM_COLUMNS
from lance_sql.table.index import index_hook
from lance_sql.table.index.planner import btree_indices, key_addresses, keyed_addresses
from lance_sql.table.read.comparisons import filter_table
from lance_sql.table.read.scan import Scanner, narrowed, scan_fragment
from lance_sql.table.runtime.cache import GENERATION_BLOOMS, GENERATION_KEYS, GENERATION_ROWS
from lance_sql.table.runtime.context import current_runtime

__all__ = ["BaseSource", "GenerationSource", "InMemorySource", "MemTableSource", "Source",
           "BLOOM_FILE"]

BLOOM_FILE = "bloom_filter.bin"
BASE_GEN = -1
# Counts of base-table lookups whose key column came from the key index, not the data
# files (tests)
KEYS_FROM_INDEX = [0]
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
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False
             ) -> Iterator[pa.RecordBatch]:
        """Rows (tombstones included for non-base sources) with ``columns`` (data columns
        and ``_rowaddr``), where ``predicate`` holds; ``drop_rows`` (Lance-backed
        sources): physical offsets per fragment to leave out as if deleted; ``stepwise``
        (Lance-backed sources): fragments read in growing row ranges, so a consumer that
        stops early (a limit) stops the reading early too."""
        raise NotImplementedError

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

    def _readable(self, columns: Sequence[str]) -> list[str]:
        """``columns`` this source holds (the others come out NULL)."""
        data = self.schema.names
        return [c for c in dict.fromkeys(columns) if c in data or c in self.system]

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False
             ) -> Iterator[pa.RecordBatch]:
        scanner = lance_scanner(self.dataset, self._readable(columns), predicate,
                                drop_rows=drop_rows)
        scanner.stepwise = stepwise
        for table in scanner.to_tables():  # a fragment's rows as they are: no re-chunking
            yield from table.to_batches()

    def _take(self, addresses: np.ndarray, columns: Sequence[str]) -> pa.Table:
        return self.dataset.take_addresses(addresses, self._readable(columns))


def _unkeyed_addresses(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array
                       ) -> tuple[np.ndarray, None] | None:
    """:func:`key_addresses` in the form of :func:`keyed_addresses`, without the keys."""
    found = key_addresses(store, manifest, column, values)
    return None if found is None else (found, None)


class GenerationSource(_LanceSource):
    """A flushed MemTable: a Lance table of the table's columns plus ``_tombstone``."""

    kind = "flushed"
    holds_rows = True

    @property
    def identity(self) -> Hashable:
        ds = self.dataset  # (its column names too: a column renamed since reads renamed)
        return ("generation", ds.store.uri, ds.version, self.gen, self.region,
                tuple(self.schema.names))

    def rows(self) -> pa.Table:
        """Every row of the generation (all columns, ``_rowaddr``), in address order,
        decoded once per process (bounded cache): a generation never changes, and it is
        small next to the base table, so scans and lookups read it from memory."""
        ds = self.dataset
        names = self.schema.names

        def load() -> pa.Table:
            return lance_scanner(ds, [*names, ROW_ADDR], None).to_table().combine_chunks()

        # (keyed by the names too: a column renamed since reads under its new name)
        return current_runtime().cache.get_or_load(
            GENERATION_ROWS, (ds.store.uri, ds.version, *names), load)

    def held_rows(self) -> pa.Table:
        return self.rows()

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False
             ) -> Iterator[pa.RecordBatch]:
        table = self.rows()
        if predicate is not None:
            if not {p[0] for p in expr_columns(predicate)} <= set(table.column_names):
                yield from super().scan(columns, predicate)  # e.g. _rowid: the scanner's
                return
            resolved = resolve(predicate, table.schema)
            table = filter_table(table, resolved)
        names = [c for c in dict.fromkeys(columns) if c in table.column_names]
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
        store = self.dataset.store

        def load() -> PrimaryKeyBloom:
            return PrimaryKeyBloom.from_bytes(store.read(BLOOM_FILE),
                                              f"{store.uri}/{BLOOM_FILE}")

        return current_runtime().cache.get_or_load(GENERATION_BLOOMS, store.uri, load)

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
    """The base table (generation -1); its keys are unique (merge_insert keeps them so).
    Its rows have the table's ``_rowid`` and row versions."""

    kind = "base"
    system = SYSTEM_COLUMNS

    def __init__(self, ds: LanceDataset, key_columns: Sequence[str]) -> None:
        super().__init__(ds, BASE_GEN, None, None, key_columns)

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
            wanted_key = [c[0].as_py() for c in keys.table.columns]
            hit_one = table.num_rows == 1 and all(
                table.column(k)[0].as_py() == w
                for k, w in zip(self.key_columns, wanted_key, strict=True))
            table = table.slice(0, int(hit_one))
            key_positions = np.zeros(table.num_rows, np.int64)
        else:  # each key's row (a key asked twice gets its row twice, as from other sources)
            found = KeySet([table.column(k).combine_chunks() for k in self.key_columns]).find(
                keys.columns, keys.codes)
            hit = found >= 0
            table = table.take(pa.array(found[hit], pa.int64()))
            key_positions = np.flatnonzero(hit)
        table = table.append_column(TOMBSTONE, pa.array(np.zeros(table.num_rows, bool)))
        return table.append_column("_key", pa.array(key_positions))

    def lookup_one(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """:meth:`lookup` of one key by the key index, without the batch bookkeeping: the
        key's row (the ``columns`` this source has, and ``_rowaddr``; no row when the key
        is not here). None when the index cannot answer alone: the caller takes
        :meth:`lookup`."""
        if keys.num_rows != 1 or self.key_index() is None:
            return None
        table = self._indexed_take(keys, list(dict.fromkeys([*self.key_columns, *columns])))
        if table is None or table.num_rows > 1:
            return None
        if table.num_rows and any(table.column(k)[0].as_py() != c[0].as_py()
                                  for k, c in zip(self.key_columns, keys.table.columns,
                                                  strict=True)):
            return table.slice(0, 0)  # compared as lookup compares: as Python values
        return table

    def _indexed_take(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """The rows of ``keys`` found by one search of the key index for all of them and
        one take of their addresses (None: the index does not cover every fragment, or
        cannot be read — the scanner then finds the keys, with its warning)."""
        ds = self.dataset
        key = self.key_columns[0]
        # many keys of a one-column key: its column built from the keys the index holds,
        # numbers or strings (one key: its column read with the row costs no more than
        # that; measured)
        keyed = keys.num_rows > 1 and len(self.key_columns) == 1 and key in columns
        try:
            found = (keyed_addresses if keyed else _unkeyed_addresses)(
                ds.store, ds.manifest, key, keys.columns[0])
        except LanceError:
            return None  # unusable index: the general path scans instead
        if found is None:
            return None
        addresses, indexed_keys = found
        if indexed_keys is None:
            return self._take(addresses, [*columns, ROW_ADDR])
        # the key column from the index: the rows taken (deleted ones left out) found
        # among the addresses by their _rowaddr
        readable = self._readable([*columns, ROW_ADDR])
        table = self._take(addresses, [c for c in readable if c != key])
        at = np.searchsorted(addresses, table.column(ROW_ADDR).to_numpy())
        key_type = self.schema.field(key).type
        column = (pa.array(indexed_keys[at], key_type) if isinstance(indexed_keys, np.ndarray)
                  else indexed_keys.take(pa.array(at, pa.int64())))  # strings: Arrow
        KEYS_FROM_INDEX[0] += 1
        return table.add_column(readable.index(key), pa.field(key, key_type), column)

    def _candidates_take(self, keys: Keys, columns: Sequence[str]) -> pa.Table | None:
        """A composite key's lookup by the BTREE index on one of its columns: the rows
        whose value there is one of the keys' (one search, one take), which the caller
        then matches on the whole key. None: no such index covering every fragment, an
        unusable one, or too many candidates (the caller scans the key columns)."""
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
        except LanceError:
            return None  # unusable index: the key columns are scanned instead
        if addresses is None or addresses.size > max(_CANDIDATES_MIN,
                                                     _CANDIDATES_PER_KEY * keys.num_rows):
            return None
        COMPOSITE_BY_INDEX[0] += 1
        return self._take(addresses, [*columns, ROW_ADDR])

    def _reverse_scan(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        """Fragments last to first, key columns only, until every key is found; then the
        rows found are taken by address."""
        ds = self.dataset
        wanted = KeySet(keys.columns)
        plan = lance_scanner(ds, [*self.key_columns, ROW_ADDR], None).plan
        remaining = keys.num_rows
        found: list[np.ndarray] = []
        for fragment in reversed(ds.manifest.fragments):
            if not remaining:
                break
            part = scan_fragment(ds.store, ds.manifest, fragment, plan)
            hit = wanted.contains([part.column(k).combine_chunks()
                                   for k in self.key_columns])
            if hit.any():
                found.append(np.asarray(part.column(ROW_ADDR).to_numpy(), np.uint64)[hit])
                remaining -= int(hit.sum())
        addresses = np.concatenate(found) if found else np.zeros(0, np.uint64)
        return self._take(addresses, [*columns, ROW_ADDR])


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
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False
             ) -> Iterator[pa.RecordBatch]:
        table = self.table
        if predicate is not None:
            resolved = resolve(predicate, _filter_schema(table.schema))
            table = filter_table(table, resolved)
        names = [c for c in columns if c in table.column_names]
        yield from table.select(names).to_batches(max_chunksize=BATCH_ROWS)

    def held_rows(self) -> pa.Table:
        return self.table

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


class MemTableSource(InMemorySource):
    """A writer's MemTable in this process, as of the moment the plan was made (rows put
    later are not seen: the snapshot is of its fragments then). Lookups use the
    MemTable's own key index."""

    kind = "memtable"
    exact_lookup = True

    def __init__(self, memtable: MemTable, region: uuid.UUID, region_index: int | None
                 ) -> None:
        Source.__init__(self, memtable.generation, region, region_index,
                        memtable.primary_key)
        self.memtable = memtable
        self._fragments = memtable.fragments()  # the snapshot; rows built when scanned
        self._table: pa.Table | None = None
        self._rows = None
        self._found: tuple[Keys, np.ndarray, int] | None = None  # see might_hold

    @property
    def identity(self) -> Hashable:
        return ("memtable", self.memtable.token, len(self._fragments), self.gen, self.region)

    @property
    def snapshot(self) -> list[MemFragment]:
        """The MemTable's fragments when the plan was made."""
        return self._fragments

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

    def might_hold(self, keys: Keys) -> bool:
        rows = self.memtable.num_rows
        addresses = self.memtable.lookup(keys.table)
        # the lookup right after needs not search again, unless rows were put meanwhile
        self._found = (keys, addresses, rows)
        return bool((addresses >= 0).any())

    def lookup(self, keys: Keys, columns: Sequence[str]) -> pa.Table:
        # rows put since the plan was made may answer too: they are newer still
        found, self._found = self._found, None
        if found is not None and found[0] is keys and found[2] == self.memtable.num_rows:
            addresses = found[1]
        else:
            addresses = self.memtable.lookup(keys.table)
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
