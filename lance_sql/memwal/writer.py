"""The region writer: claim a region, take puts and deletes, flush the WAL and MemTables.

Lifecycle (the spec's Writer Expectations):

1. **Claim** the region: commit the next region-manifest version with the epoch raised.
2. **Replay** the WAL entries after ``replay_after_wal_id`` (epoch <= ours), one MemTable
   fragment per entry.
3. **Put / delete**: validate, insert a MemTable fragment (readable at once). Durable
   writers return once a WAL entry holding the rows exists; others return at once and a
   background thread flushes the WAL every ``max_wal_flush_interval_ms`` (the put that
   fills ``max_wal_buffer_bytes`` flushes it itself). Puts block while the MemTables hold
   more than ``max_unflushed_bytes`` (bounded memory).
4. **WAL flush**: the pending fragments become one entry, written put-if-absent at the next
   id. A position taken by a newer epoch fences this writer; one taken by an older (fenced)
   writer still appending makes it skip to the first free id, take it, and adopt the
   skipped entries into the MemTable (they hold acknowledged rows). Known limit: until the
   MemTable is flushed, adopted rows count as newer than this writer's rows that were
   pending at that moment, while the WAL (and so the generation) orders them first.
5. **MemTable flush** (thresholds or ``flush_memtable()``): seal the MemTable, write
   ``{rand8}_gen_{g}/`` — a Lance table whose fragments are the WAL entries, reached
   through a base path — plus ``bloom_filter.bin`` and the primary-key BTREE index
   (:mod:`.pk_index`), then commit the region manifest with
   our epoch. A newer epoch there raises :class:`WriterFencedError`. A failed attempt
   leaves its directory behind for the garbage collector; the retry uses a new one.

Once fenced (or after any failure of a background step), every pending and later call
raises the recorded error: nothing is dropped silently. ``close()`` flushes the WAL
and the MemTables (as generations: readers never read the WAL), stops the background
thread and unregisters the writer; ``abort()`` stops without I/O. Writers still open at
interpreter exit have their WAL flushed (best effort) by an ``atexit`` hook; the next
writer of the region replays it.
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.allocator import release_free_memory
from lance_sql.errors import (
    InvalidInputError,
    LanceError,
    NotFoundError,
    SchemaError,
    WriterFencedError,
)
from lance_sql.format.datafile import DEFAULT_DATA_FORMAT
from lance_sql.format.fragment import BasePath, DataFile, Fragment
from lance_sql.format.memwal import FlushedGeneration, RegionManifest
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema, arrow_type_of
from lance_sql.io.commit import CommitHandler
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.index import WRITER_DEFAULT_KEYS, check_key_types, primary_key_columns
from lance_sql.memwal.memtable import MemFragment, MemTable, primary_key_bytes
from lance_sql.memwal.naming import GenerationDir
from lance_sql.memwal.pk_index import MaintainedIndex, write_generation_indexes
from lance_sql.memwal.put_columns import PutColumns
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import (
    decode_region_values,
    encode_region_values,
    matches_region_value,
    same_region_values,
)
from lance_sql.memwal.transforms import region_values
from lance_sql.memwal.type_kinds import same_kind
from lance_sql.memwal.wal import (
    TOMBSTONE,
    WalEntry,
    WalLog,
    data_file_of,
    encode_entry,
    memtable_schema,
)
from lance_sql.table.txn.commit import commit_transaction
from lance_sql.table.txn.operations import Overwrite, Transaction
from lance_sql.table.write.fragments import check_nulls

__all__ = ["BLOOM_FILE", "RegionWriter", "WriterConfig", "open_memtables", "open_writers"]

BLOOM_FILE = "bloom_filter.bin"
WAL_BASE_ID = 0
# A WAL flush of more pending rows than this writes several entries (the spec allows
# "one or more Lance files per write"): encoding an entry takes about 2-3x its rows in
# temporaries (measured), which count against the writer's memory bound. Entries are cut
# at 1/32 of max_unflushed_bytes between these bounds: smaller entries cost throughput
# (measured, 1000-row puts: 2 MiB entries ~20% fewer rows/s than 4 MiB), larger ones
# memory (2M rows, 64 + 32 MiB limits: median peak RSS growth 90 MiB with 4 MiB entries,
# 79 with 2 MiB, 77 with 1 MiB).
WAL_ENTRY_BYTES = 4 << 20
MIN_WAL_ENTRY_BYTES = 1 << 20
RELEASE_AFTER_BYTES = 1 << 20
# Temporaries of a MemTable flush's index build, per row and index: the sorted keys and
# their addresses (8 + 8 bytes for an integer key) and the page file's encoding (~16 more,
# measured), plus a fixed allowance for the pages being encoded. Counted against
# max_unflushed_bytes while the build runs: measured 2M rows with 64 + 32 MiB limits,
# median peak RSS growth 106-113 -> 96-97 MiB.
INDEX_BUILD_BYTES_PER_ROW = 32
INDEX_BUILD_FIXED_BYTES = 4 << 20


@dataclass(frozen=True)
class WriterConfig:
    """Writer options (the names the MemWAL index records as writer defaults)."""

    durable_write: bool = True
    # indexed: a put returns once its keys are in the bloom filter and lookup index;
    # otherwise the background thread adds them (lookups catch up by themselves anyway)
    indexed_write: bool = False
    max_wal_flush_interval_ms: int = 100
    max_wal_buffer_bytes: int = 10 * 1024 * 1024
    max_unflushed_bytes: int = 1024 * 1024 * 1024
    max_memtable_rows: int = 100_000
    max_memtable_bytes: int = 256 * 1024 * 1024

    @classmethod
    def from_defaults(cls, recorded: Mapping[str, str], **overrides: object) -> WriterConfig:
        """The options the MemWAL index records (strings), then ``overrides``."""
        values: dict[str, object] = {}
        for key, text in recorded.items():
            if key not in WRITER_DEFAULT_KEYS:
                continue  # another implementation's option
            if key == "durable_write":
                values[key] = text.lower() == "true"
            elif text.isdigit():
                values[key] = int(text)
            else:
                raise InvalidInputError(f"MemWAL writer default {key}={text!r} is not a "
                                        "number")
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        for name in ("max_wal_flush_interval_ms", "max_wal_buffer_bytes",
                     "max_unflushed_bytes", "max_memtable_rows", "max_memtable_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")


# ---------------------------------------------------------------------- registry
_REGISTRY: dict[tuple[str, uuid.UUID], RegionWriter] = {}
_REGISTRY_LOCK = threading.Lock()


def open_writers(table_uri: str | None = None) -> list[RegionWriter]:
    """The open writers of this process (of one table when ``table_uri`` is given), so a
    reader here can see their MemTables (strongly consistent reads)."""
    with _REGISTRY_LOCK:
        return [w for (uri, _), w in _REGISTRY.items() if table_uri in (None, uri)]


def _of_table(table_uri: str) -> list[RegionWriter]:
    """The open writers of the table now at ``table_uri`` (not of one deleted there)."""
    return [w for w in open_writers(table_uri) if w.of_this_table()]


def open_memtables(table_uri: str) -> dict[uuid.UUID, list[MemTable]]:
    """Per region of the table at ``table_uri``, the unflushed MemTables of this process's
    writer, oldest first (sealed ones still being flushed, then the active one)."""
    return {w.region_id: w.memtables() for w in _of_table(table_uri)}


def registered_writer(table_uri: str, region_id: uuid.UUID) -> RegionWriter | None:
    """This process's open writer of a region (None: none), whether or not it is of the
    table now at ``table_uri`` (:meth:`RegionWriter.of_this_table` tells)."""
    with _REGISTRY_LOCK:
        return _REGISTRY.get((table_uri, region_id))


def open_memtables_of(table_uri: str, region_id: uuid.UUID) -> list[MemTable]:
    """:func:`open_memtables` of one region (empty: no writer of it open here)."""
    with _REGISTRY_LOCK:
        writer = _REGISTRY.get((table_uri, region_id))
    return writer.memtables() if writer is not None and writer.of_this_table() else []


def _close_all_at_exit() -> None:
    for writer in open_writers():
        try:  # the WAL only: the next writer of the region replays it
            writer.close(flush_memtable=False)
        except Exception:  # noqa: BLE001 - exiting: keep closing the others
            writer.abort()


atexit.register(_close_all_at_exit)


def conform_rows(table: pa.Table, target: pa.Schema, names: Sequence[str] | None,
                 primary_key: Sequence[str], current_name: Callable[[str], str],
                 where: str = "") -> pa.Table:
    """``table`` (named as ``target`` names its columns) cast safely to ``target``'s
    columns ``names`` (all when None), checked: no column missing or unknown, no NULL
    key, no NULL where a column takes none. ``current_name`` names a missing column as
    the user knows it now. A routing writer checks a whole put before any region takes
    a row of it."""
    wanted = list(target.names) if names is None else list(names)
    given = set(table.column_names)
    missing = [n for n in wanted if n not in given]
    extra = sorted(given - set(wanted)) if names is None else []
    if missing or extra:
        missing = [current_name(n) for n in missing]
        raise SchemaError(f"{where}the data's columns do not match the table's (missing "
                          f"{missing}, unknown {extra})")
    columns = []
    for name in wanted:
        field = target.field(name)
        column = table.column(name)
        if not column.type.equals(field.type):
            if not same_kind(column.type, field.type):
                raise SchemaError(f"{where}column {name!r}: {column.type} values do not fit "
                                  f"the table's {field.type} (a put casts only between "
                                  "types of one kind: numbers, text, dates...)")
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaError(f"column {name!r}: {table.column(name).type} does not "
                                  f"fit the table's {field.type}: {exc}") from exc
        columns.append(column.combine_chunks())
    for name, column in zip(wanted, columns, strict=True):
        if name in primary_key and column.null_count:
            raise InvalidInputError(f"primary key column {name!r} has {column.null_count} "
                                    "null value(s)")
        check_nulls(column, target.field(name), name)
    return pa.Table.from_arrays(columns, names=wanted)


def as_table(data: Any) -> pa.Table:
    """What a put or delete was given, as a table (a dict of columns too)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, dict):
        try:
            return pa.table(data)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise InvalidInputError(f"a dict of columns that is no table: {exc}") from exc
    raise InvalidInputError(f"expected an Arrow table, record batch or dict of columns, "
                            f"not {type(data).__name__}")


class RegionWriter:
    """The one writer of a region (see the module docstring)."""

    def __init__(self, store: ObjectStore, region_id: uuid.UUID, schema: LanceSchema, *,
                 data_format: str = DEFAULT_DATA_FORMAT, region_spec: RegionSpec | None = None,
                 region: Mapping[str, Any] | None = None,
                 config: WriterConfig | None = None,
                 maintained_indexes: Sequence[MaintainedIndex] = (),
                 put_columns: PutColumns | None = None,
                 table_handler: CommitHandler | None = None) -> None:
        """``store`` is rooted at the table; ``schema`` is the table's (with its primary
        key). With ``region_spec`` (its ``spec_id`` set), ``region`` maps each region
        field id to this region's value and every row put must evaluate to it.
        ``maintained_indexes``: BTREE indexes every flushed generation carries besides
        the primary key's (see :func:`~.pk_index.maintained_btrees`). Puts name the
        table's columns as they are now (:mod:`.put_columns`; ``put_columns``: a
        translator shared with a routing writer; ``table_handler``: the table's commit
        handler, to find its latest version)."""
        self.store = store
        self.region_id = region_id
        self.config = config or WriterConfig()
        self.data_format = data_format
        self.table_schema = schema
        self.maintained_indexes = tuple(maintained_indexes)
        for index in self.maintained_indexes:
            if index.column not in {f.name for f in schema.fields}:
                raise InvalidInputError(f"maintained index {index.name!r}: the table has no "
                                        f"column {index.column!r}")
        self.primary_key = tuple(primary_key_columns(schema))
        check_key_types(schema)  # before the claim: nothing is written for such a table
        self.schema = memtable_schema(schema)
        self._put_schema = schema.to_arrow()
        self._columns = put_columns or PutColumns(store, schema, table_handler)
        self._arrow = self.schema.to_arrow()
        self.region_spec, self.region = self._bind_region(region_spec, region)
        self.log = RegionLog(store, region_id)
        self.wal = WalLog(store, region_id)
        self._wal_lock = threading.Lock()       # one WAL flush at a time
        self._flush_lock = threading.Lock()     # one MemTable flush at a time
        self._state = threading.Lock()          # active MemTable swaps and inserts
        self._cond = threading.Condition()      # wakes the background thread and puts
        self._failure: BaseException | None = None
        self._closed = False
        self._want_flush = False
        self._sealed_by_put = False  # a put sealed a full MemTable: write its generation
        self._entry_sizes: dict[int, int] = {}
        # entries replayed from files of older columns: their generation rewrites them
        self._rewritten: set[int] = set()
        # bytes a MemTable flush in progress allocates besides the MemTables (its index
        # build): puts wait for them too, so they fit in max_unflushed_bytes
        self._flush_reserve = 0
        self._last_wal_flush = time.monotonic()  # non-durable mode flushes on this clock
        self._sealed: list[MemTable] = []
        self._closing = False  # close() has begun: puts are refused
        manifest = self.log.claim(self.region_spec.spec_id if self.region_spec else 0,
                                  self._region_values_bytes())
        self._check_claimed_region(manifest)
        self.epoch = manifest.writer_epoch
        self._committed = self._noted(manifest.version)
        self._seen_version = manifest.version  # the newest region manifest seen
        self._active = MemTable(self.schema, self.primary_key, manifest.current_generation)
        self._next_wal = manifest.replay_after_wal_id + 1
        self._replay(manifest)
        with _REGISTRY_LOCK:
            _REGISTRY[(store.uri, region_id)] = self
        self._thread = threading.Thread(target=_background, args=(weakref.ref(self),),
                                        name=f"memwal-writer-{region_id}", daemon=True)
        self._thread.start()

    @classmethod
    def for_dataset(cls, dataset: Any, region_id: uuid.UUID, **kwargs: Any) -> RegionWriter:
        """A writer of ``dataset``'s region (a ``lance_sql`` LanceDataset)."""
        manifest = dataset.manifest
        return cls(dataset.store, region_id, manifest.schema,
                   data_format=manifest.data_format, **kwargs)

    def _bind_region(self, spec: RegionSpec | None, region: Mapping[str, Any] | None
                     ) -> tuple[RegionSpec | None, dict[str, Any] | None]:
        if spec is None:
            if region:
                raise InvalidInputError("region values given without a region spec")
            return None, None
        if spec.spec_id == 0:
            raise InvalidInputError("a region spec needs its spec id (0 is for manual regions)")
        if any(not f.source_ids for f in spec.fields):
            spec = spec.bind(self.table_schema)
        wanted = {f.field_id for f in spec.fields}
        if region is None or set(region) != wanted:
            raise InvalidInputError(f"the region's values must name the fields {sorted(wanted)},"
                                    f" got {sorted(region or {})}")
        return spec, dict(region)

    def _region_values_table(self) -> pa.Table | None:
        if self.region_spec is None or self.region is None:
            return None
        columns = {}
        for f in self.region_spec.fields:
            value_type = arrow_type_of(f.result_type) if f.result_type else None
            columns[f.field_id] = pa.array([self.region[f.field_id]], value_type)
        return pa.table(columns)

    def _region_values_bytes(self) -> bytes | None:
        values = self._region_values_table()
        return None if values is None else encode_region_values(values)

    def _check_claimed_region(self, manifest: RegionManifest) -> None:
        """The region we claimed must be the one we were asked for (spec and values)."""
        spec_id = self.region_spec.spec_id if self.region_spec else 0
        where = f"region {self.region_id}"
        if manifest.region_spec_id != spec_id:
            raise InvalidInputError(f"{where} belongs to region spec "
                                    f"{manifest.region_spec_id}, not {spec_id}")
        ours = self._region_values_table()
        if ours is not None and manifest.region_values is not None:
            stored = decode_region_values(manifest.region_values, where, self.region_spec)
            if not same_region_values(stored, ours):
                raise InvalidInputError(f"{where} holds region values {stored.to_pylist()}, "
                                        f"not {ours.to_pylist()}")

    # ------------------------------------------------------------------ recovery
    def _replay(self, manifest: RegionManifest) -> None:
        """Reload the WAL entries not yet in a flushed generation, one fragment each."""
        # find the end with existence checks first: they outpace an older writer still
        # appending, where reading entry by entry could chase it for a long time
        for entry_id in list(self.wal.ids_after(manifest.replay_after_wal_id)):
            entry = self.wal.read(entry_id, self.schema)
            if entry.writer_epoch > self.epoch:
                raise WriterFencedError(
                    f"region {self.region_id}: WAL entry {entry.entry_id} was written by epoch "
                    f"{entry.writer_epoch}, newer than ours ({self.epoch})")
            self._adopt(self._active, entry)
            self._next_wal = entry.entry_id + 1

    def _adopt(self, memtable: MemTable, entry: WalEntry) -> None:
        memtable.insert(entry.rows, wal_entry=entry.entry_id, sealed_ok=True)
        self._entry_sizes[entry.entry_id] = entry.size_bytes
        if entry.rewritten:
            self._rewritten.add(entry.entry_id)

    # ------------------------------------------------------------------ state
    @property
    def generation(self) -> int:
        """The active MemTable's generation."""
        return self._active.generation

    def memtables(self) -> list[MemTable]:
        """Unflushed MemTables, oldest first (sealed ones waiting for their flush, then the
        active one): what a reader in this process adds to the flushed generations."""
        with self._state:
            return [*self._sealed, self._active]

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed or self._closing:
            raise InvalidInputError(f"the writer of region {self.region_id} is closed")

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        if isinstance(error, WriterFencedError):
            self._unregister()  # the new writer's MemTable is the one readers must see
        with self._cond:
            self._cond.notify_all()

    def _unregister(self) -> None:
        with _REGISTRY_LOCK:
            if _REGISTRY.get((self.store.uri, self.region_id)) is self:
                del _REGISTRY[(self.store.uri, self.region_id)]

    def _unflushed_bytes(self) -> int:
        with self._state:
            return (sum(m.nbytes for m in self._sealed) + self._active.nbytes
                    + self._flush_reserve)

    # ------------------------------------------------------------------ validation
    def _conform(self, table: pa.Table, names: tuple[str, ...] | None) -> pa.Table:
        """``table`` cast (safely) to the table's columns ``names`` (all when None)."""
        return conform_rows(table, self._put_schema, names, self.primary_key,
                            self._columns.current_name, f"region {self.region_id}: ")

    def _check_region(self, rows: pa.Table) -> None:
        spec, region = self.region_spec, self.region
        if spec is None or region is None:
            return
        names = spec.source_names(self.table_schema)
        if any(n is None or n not in rows.column_names for n in names):
            return  # a delete whose keys do not determine the region
        values = region_values(spec, [rows.column(n) for n in names], rows.num_rows)
        for f in spec.fields:
            column = values.column(f.field_id).combine_chunks()
            expected = region[f.field_id]
            matches = matches_region_value(column, expected)
            wrong = int(pc.sum(pc.invert(matches)).as_py() or 0)
            if wrong:
                raise InvalidInputError(
                    f"{wrong} row(s) do not belong to region {self.region_id} (region field "
                    f"{f.field_id!r} must be {expected!r})")

    def _prepare(self, rows: pa.Table, conformed: bool = False) -> pa.Table:
        """``rows`` (named as the writer's schema) checked (``conformed``: cast and
        checked already, by :func:`conform_rows`), with ``_tombstone``."""
        if not conformed:
            rows = self._conform(rows, None)
        self._check_region(rows)
        return rows.append_column(self._arrow.field(TOMBSTONE),
                                  _falses(rows.num_rows))

    def _prepare_delete(self, keys: pa.Table) -> pa.Table:
        key_rows = self._conform(keys, self.primary_key)
        self._check_region(key_rows)
        n = key_rows.num_rows
        columns = [key_rows.column(f.name) if f.name in self.primary_key
                   else pa.nulls(n, f.type) for f in self._arrow if f.name != TOMBSTONE]
        columns.append(pc.invert(_falses(n)))
        return pa.Table.from_arrays(columns, schema=self._arrow)

    # ------------------------------------------------------------------ writing
    def put(self, data: Any) -> None:
        """Upsert rows (a table or batch of the table's columns, as it names them now:
        see :mod:`.put_columns`)."""
        self._check()
        self.put_written(self._columns.written(as_table(data)))

    def put_written(self, rows: pa.Table, *, conformed: bool = False) -> None:
        """:meth:`put` of rows already named as the writer's schema (a routing writer
        translated them; ``conformed``: and cast and checked them whole)."""
        self._check()
        self._write(self._prepare(rows, conformed))

    def delete(self, keys: Any) -> None:
        """Delete rows by key: ``keys`` holds the primary-key columns (current names)."""
        self._check()
        self.delete_written(self._columns.written(as_table(keys), self.primary_key))

    def delete_written(self, keys: pa.Table) -> None:
        """:meth:`delete` of keys already named as the writer's schema."""
        self._check()
        self._write(self._prepare_delete(keys))

    def _write(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        self._admit()
        with self._state:
            self._check()
            memtable = self._active
            fragment = memtable.insert(rows.cast(self._arrow))
        config = self.config
        if config.indexed_write:
            memtable.refresh_index(bloom=True)
        if config.durable_write or memtable.unflushed_bytes >= config.max_wal_buffer_bytes:
            # durable: wait for the WAL; non-durable with a full buffer: the put that
            # filled it flushes it (the background thread may be lagging behind)
            self._flush_wal(memtable, fragment.fragment_id)
        if self._full(memtable):
            self._seal_full(memtable)

    def _seal_full(self, memtable: MemTable) -> None:
        """Seal the MemTable this put filled, its pending rows going to the WAL first, and
        leave the generation to the background thread: a MemTable never outgrows its
        thresholds by more than one put while the thread is busy (bounded memory)."""
        with self._wal_lock:
            self._raise_failure()
            if memtable is not self._active or not self._full(memtable):
                return  # sealed meanwhile (another put, the background thread)
            with self._state:
                memtable.seal()
                self._sealed.append(memtable)
                self._active = MemTable(self.schema, self.primary_key, memtable.generation + 1)
            self._flush_pending(memtable)
        with self._cond:
            self._sealed_by_put = True
            self._cond.notify_all()

    def _admit(self) -> None:
        """Backpressure: wait while the MemTables hold more than ``max_unflushed_bytes``."""
        limit = self.config.max_unflushed_bytes
        while self._unflushed_bytes() > limit:
            self._check()
            with self._cond:
                self._want_flush = True
                self._cond.notify_all()
                self._cond.wait(0.05)

    # ------------------------------------------------------------------ WAL flush
    def flush(self) -> None:
        """WAL flush now: every pending fragment goes into one new WAL entry."""
        self._check()
        self._flush_active()

    def _flush_active(self) -> None:
        with self._wal_lock:
            self._raise_failure()
            self._flush_pending(self._active)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _flush_wal(self, memtable: MemTable, fragment_id: int) -> None:
        with self._wal_lock:
            if memtable.is_flushed(fragment_id):
                return  # another put's flush took it along (group commit), or close()
            self._raise_failure()
            if self._closed:
                raise InvalidInputError(f"the writer of region {self.region_id} is closed")
            self._flush_pending(memtable)

    def _flush_pending(self, memtable: MemTable) -> None:
        """Write ``memtable``'s pending fragments as the next WAL entries (``_wal_lock``
        held): one per run of fragments of up to ``WAL_ENTRY_BYTES`` or less (see there;
        a larger fragment alone), as encoding an entry takes a few times its rows in
        temporaries.

        After a flush of ``RELEASE_AFTER_BYTES`` or more, the memory its temporaries used
        goes back to the OS: the allocators keep freed blocks (per thread, for glibc), and
        the writer's memory bound counts resident memory (measured: ~15 MiB lower peak
        RSS writing 2M rows; ~0.1 ms a call). Small flushes (durable puts) skip it."""
        pending = memtable.take_unflushed()
        entry_bytes = min(WAL_ENTRY_BYTES, max(MIN_WAL_ENTRY_BYTES,
                                               self.config.max_unflushed_bytes // 32))
        for group in _entry_groups(pending, entry_bytes):
            self._flush_fragments(memtable, group)
        if sum(f.nbytes for f in pending) >= RELEASE_AFTER_BYTES:
            release_free_memory()

    def _flush_fragments(self, memtable: MemTable, fragments: list[MemFragment]) -> None:
        """Write ``fragments`` (pending, in order) as the next WAL entry."""
        try:
            self._check_same_table()
            data = encode_entry(self.schema, [f.rows for f in fragments], writer_epoch=self.epoch,
                                generation=memtable.generation, data_format=self.data_format,
                                path=f"{self.store.uri}/{self.wal.key(self._next_wal)}")
            entry_id = self._append(data, memtable)
            self._check_replayable(entry_id)
        except WriterFencedError as exc:
            self._fail(exc)
            raise
        except BaseException as exc:
            # the entry may or may not exist: this writer cannot know its WAL any more
            self._fail(exc)
            raise
        memtable.mark_flushed([f.fragment_id for f in fragments], entry_id)
        self._entry_sizes[entry_id] = len(data)
        self._next_wal = entry_id + 1
        self._last_wal_flush = time.monotonic()
        with self._cond:
            self._cond.notify_all()

    def _append(self, data: bytes, memtable: MemTable) -> int:
        """Write ``data`` as the next WAL entry; returns its id.

        A position already taken by a newer epoch fences us. One taken by an older writer
        (fenced, still finishing) holds valid rows: we skip to the first free position
        (existence checks, faster than its writes), take it — which fences that writer at
        its next flush — and then adopt the entries we skipped into the MemTable.
        """
        first_lost, entry_id = None, self._next_wal
        while not self.wal.append(entry_id, data):
            if first_lost is None:
                first_lost = self.wal.read(entry_id, self.schema)
                self._check_not_newer(first_lost.writer_epoch, entry_id)
            entry_id += 1
            while self.wal.exists(entry_id):
                entry_id += 1
        for skipped in range(self._next_wal, entry_id):
            entry = first_lost if skipped == self._next_wal else self.wal.read(skipped,
                                                                                self.schema)
            assert entry is not None
            self._check_not_newer(entry.writer_epoch, skipped)
            with self._state:
                self._adopt(memtable, entry)
        return entry_id

    def _check_replayable(self, entry_id: int) -> None:
        """WriterFencedError when the entry just written can never be replayed: a newer
        writer took the region and has flushed past its position, and the garbage
        collector freed that position again (a lost position fences a writer only while
        it is taken). One existence check while no region manifest was committed since
        the last one this writer saw."""
        seen = max(self._seen_version, self._committed[0])
        if not self.store.exists(self.log.paths.manifest(seen + 1)):
            return
        current = self.log.latest()
        if current is None:
            return
        self._seen_version = current.version
        if current.writer_epoch > self.epoch and entry_id <= current.replay_after_wal_id:
            raise WriterFencedError(
                f"region {self.region_id}: writer epoch {self.epoch} was fenced by epoch "
                f"{current.writer_epoch}, which flushed past WAL entry {entry_id}; the "
                f"rows just written there will not be replayed (the put was not applied)")

    def _check_not_newer(self, epoch: int, entry_id: int) -> None:
        if epoch >= self.epoch:
            raise WriterFencedError(
                f"region {self.region_id}: WAL entry {entry_id} was taken by writer epoch "
                f"{epoch}; this writer (epoch {self.epoch}) has been fenced")

    # ------------------------------------------------------------------ MemTable flush
    def flush_memtable(self) -> FlushedGeneration | None:
        """Seal the active MemTable and flush it (and any earlier sealed one still waiting)
        as generations; returns the last generation flushed (None: nothing to flush)."""
        self._check()
        return self._flush_memtables()

    def _flush_memtables(self, *, only_when_full: bool = False) -> FlushedGeneration | None:
        """``only_when_full``: seal the active MemTable only if it reached a threshold
        (checked under the locks: a flush that ran meanwhile may have emptied it)."""
        with self._flush_lock:
            with self._wal_lock:
                self._raise_failure()
                memtable = self._active
                if memtable.num_fragments and (not only_when_full or self._full(memtable)):
                    with self._state:  # sealed first: no put slips in after its WAL flush
                        memtable.seal()
                        self._sealed.append(memtable)
                        self._active = MemTable(self.schema, self.primary_key,
                                                memtable.generation + 1)
                    self._flush_pending(memtable)
            flushed = None
            while (done := self._flush_oldest_sealed()) is not None:
                flushed = done
            if flushed is not None:
                # the flushed MemTables and the flush's temporaries are free now: give
                # them back, or the allocators keep them resident (bounded memory)
                release_free_memory()
            return flushed

    def _flush_oldest_sealed(self) -> FlushedGeneration | None:
        """Write the oldest sealed MemTable's generation and drop the MemTable (None: no
        sealed MemTable)."""
        with self._state:
            if not self._sealed:
                return None
            oldest = self._sealed[0]
        with self._wal_lock:  # a put that sealed it may be writing its last entry
            self._raise_failure()
            self._flush_pending(oldest)
        flushed = self._flush_generation(oldest)
        with self._state:
            self._sealed.pop(0)
        with self._cond:
            self._cond.notify_all()
        return flushed

    def _flush_generation(self, memtable: MemTable) -> FlushedGeneration:
        try:
            self._check_same_table()
            current = self.log.check_epoch(self.epoch)
            if current.current_generation > memtable.generation:
                # an earlier attempt committed it but failed afterwards: do not add it twice
                return next(g for g in current.flushed_generations
                            if g.generation == memtable.generation)
            return self._write_generation(memtable)
        except WriterFencedError as exc:
            self._fail(exc)
            raise

    def _write_generation(self, memtable: MemTable) -> FlushedGeneration:
        entries = memtable.wal_entries()
        mapping = memtable.wal_mapping()
        rows_per_entry = dict.fromkeys(entries, 0)
        for fragment in memtable.fragments():
            rows_per_entry[mapping[fragment.fragment_id][0]] += fragment.rows.num_rows
        version = _file_version(self.data_format)
        directory = GenerationDir.new(memtable.generation)
        gen_store = self.store.child(self.log.paths.generation(directory))
        files = {e: data_file_of(self.schema, WalLog.file_name(e), self._entry_size(e),
                                 version, WAL_BASE_ID)
                 for e in entries if e not in self._rewritten}
        for e in entries:
            if e not in files:  # its WAL file holds older columns: its rows written anew
                files[e] = self._rewrite_entry(gen_store, memtable, mapping, e, version)
        fragments = tuple(Fragment(id=i, files=(files[e],), physical_rows=rows_per_entry[e])
                          for i, e in enumerate(entries))
        gen_store.put(BLOOM_FILE, memtable.bloom.to_bytes())
        op = Overwrite(fragments, self.schema,
                       initial_bases=(BasePath(WAL_BASE_ID, self.wal.uri(), False),))
        manifest = commit_transaction(gen_store, None, ManifestNaming.V2,
                                      Transaction(read_version=0, operation=op),
                                      data_format=self.data_format)
        with self._state:  # counted by the backpressure while the indexes are built
            self._flush_reserve = (INDEX_BUILD_FIXED_BYTES + INDEX_BUILD_BYTES_PER_ROW
                                   * memtable.num_rows * (1 + len(self.maintained_indexes)))
        try:
            write_generation_indexes(gen_store, memtable, manifest, self.maintained_indexes)
        finally:
            with self._state:
                self._flush_reserve = 0
            with self._cond:
                self._cond.notify_all()
        flushed = FlushedGeneration(
            memtable.generation, directory.name, in_memory_bytes=memtable.nbytes,
            physical_rows=memtable.num_rows,
            primary_key_bytes=sum(  # per fragment: no copy of every key
                primary_key_bytes([f.rows.column(k) for k in self.primary_key])
                for f in memtable.fragments()))
        last_entry = entries[-1]
        seen = self._next_wal - 1

        def record(m: RegionManifest) -> RegionManifest:
            if m.current_generation != memtable.generation:
                raise WriterFencedError(
                    f"region {self.region_id}: the region manifest expects generation "
                    f"{m.current_generation}, this writer flushed {memtable.generation}")
            return m.evolve(replay_after_wal_id=last_entry,
                            wal_id_last_seen=max(m.wal_id_last_seen, seen, last_entry),
                            current_generation=memtable.generation + 1,
                            flushed_generations=(*m.flushed_generations, flushed))

        committed = self.log.update(record, epoch=self.epoch)
        self._committed = self._noted(committed.version)
        return flushed

    def _noted(self, version: int) -> tuple[int, Hashable]:
        """The region manifest version this writer committed last and what tells that
        file from another written under its name (:meth:`ObjectStore.identity`)."""
        return version, self.store.identity(self.log.paths.manifest(version))

    def _check_same_table(self) -> None:
        """Before a WAL entry or a generation is written: WriterFencedError when the table
        was deleted (and maybe written again) here since this writer claimed its region.
        Its entries would land in the new table's WAL, whose next writer replays them as
        its own rows (one ``stat`` an entry; a deletion right after it is not seen)."""
        if not self.of_this_table():
            raise WriterFencedError(
                f"region {self.region_id}: the table at {self.store.uri} was deleted or "
                "written again since this writer claimed the region; it writes no more")

    def of_this_table(self) -> bool:
        """Whether the table at this writer's place is still the one it claimed its region
        in. A table deleted and written again there has the same region ids and manifest
        numbers: readers of it must not see this writer's MemTable. The manifest this
        writer committed last is still the same file, or was collected after newer ones
        (the region's versions did not start over)."""
        committed = self._committed
        try:
            seen = self.store.identity(self.log.paths.manifest(committed[0]))
        except NotFoundError:
            seen = None
        return self.of_table_seen(committed, seen)

    @property
    def committed(self) -> tuple[int, Hashable]:
        """(the region manifest version this writer committed last, that file's identity
        then): what :meth:`of_table_seen` compares."""
        return self._committed

    def of_table_seen(self, committed: tuple[int, Hashable], seen: Hashable | None) -> bool:
        """:meth:`of_this_table` given ``committed`` (read from :attr:`committed`) and the
        identity of its manifest file as a caller just saw it (None: no such file)."""
        version, identity = committed
        if seen is not None:
            return seen == identity
        return self.log.latest_version() > version

    def _rewrite_entry(self, gen_store: ObjectStore, memtable: MemTable,
                       mapping: dict, entry_id: int, version: tuple[int, int]) -> DataFile:
        """The rows replayed from WAL entry ``entry_id`` (written before the table's
        columns changed; matched to them since) as a data file of the generation."""
        rows = [f.rows for f in memtable.fragments() if mapping[f.fragment_id][0] == entry_id]
        name = f"{uuid.uuid4().hex}.lance"
        data = encode_entry(self.schema, rows, writer_epoch=self.epoch,
                            generation=memtable.generation, data_format=self.data_format,
                            path=f"{gen_store.uri}/data/{name}")
        gen_store.put(f"data/{name}", data)
        return data_file_of(self.schema, name, len(data), version, None)

    def _entry_size(self, entry_id: int) -> int:
        size = self._entry_sizes.get(entry_id)
        return size if size is not None else self.store.size(self.wal.key(entry_id))

    # ------------------------------------------------------------------ closing
    def _stop_thread(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._unregister()

    def close(self, *, flush_memtable: bool = True) -> None:
        """Flush pending rows to the WAL and the MemTables as generations, stop the
        background thread, unregister.

        Readers see a region's rows in its flushed generations (and, in this process,
        in open writers' MemTables), never in its WAL: without the MemTable flush a
        closed writer's rows stay unseen until a writer of the region replays its WAL and
        flushes. ``flush_memtable=False`` leaves them to that replay (only the WAL is
        written, as at a crash after the last WAL flush). Raises the writer's failure
        (e.g. WriterFencedError) if it has one; the thread is stopped either way.
        """
        if self._closed:
            return
        with self._state:  # no put is taken from here on: what was taken is flushed below
            self._closing = True
        try:
            if self._failure is None and flush_memtable:
                self._flush_memtables()
            elif self._failure is None:
                with self._wal_lock:
                    if self._failure is None:
                        self._flush_pending(self._active)
        finally:
            self._stop_thread()
        if self._failure is not None:
            raise self._failure

    def abort(self) -> None:
        """Stop without any I/O (a crash, as far as the region is concerned): rows not yet
        in the WAL are lost."""
        self._stop_thread()

    def __enter__(self) -> RegionWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:  # the rows put are in the WAL; the least I/O on the way out
            try:
                self.close(flush_memtable=False)
            except LanceError:
                pass  # the original error matters more

    # ------------------------------------------------------------------ background
    def _background_step(self) -> bool:
        """One round of the background thread; False when it should stop."""
        config = self.config
        interval = config.max_wal_flush_interval_ms / 1000
        with self._cond:
            if not self._closed and not self._want_flush and not self._sealed_by_put:
                # woken early by other news (a WAL entry written, a MemTable sealed), the
                # timed WAL flush still waits for its interval
                self._cond.wait(max(0.0, interval - (time.monotonic() - self._last_wal_flush)))
            if self._closed or self._failure is not None:
                return False
            want_memtable, sealed_by_put = self._want_flush, self._sealed_by_put
            self._want_flush = self._sealed_by_put = False
        active = self._active
        if time.monotonic() - self._last_wal_flush >= interval:  # the timed WAL flush
            # a writer of a table deleted (or written again) here stops: it could write
            # nothing more, and unregistered (WriterFencedError), an abandoned one is
            # collected with its MemTables
            self._check_same_table()
            if not config.durable_write and active.has_unflushed():
                self._flush_active()
            self._last_wal_flush = time.monotonic()  # (also when there was nothing to flush)
        active.refresh_index(bloom=True)  # off the flush path: the flush hashes the tail
        if want_memtable or sealed_by_put or self._full(active):
            self._flush_memtables(only_when_full=not want_memtable)
        return True

    def _full(self, memtable: MemTable) -> bool:
        return (memtable.num_rows >= self.config.max_memtable_rows
                or memtable.nbytes >= self.config.max_memtable_bytes)


def _background(ref: weakref.ref[RegionWriter]) -> None:
    """The writer's background thread: WAL flushes (non-durable mode) and MemTable flushes.

    Holds the writer weakly between rounds. The registry holds an open writer strongly
    (readers here see its MemTables even when its caller dropped it), until it is closed,
    fenced, or finds its table deleted; then an abandoned writer is collected.
    """
    while True:
        writer = ref()
        if writer is None:
            return
        try:
            # this module's own loop: the writer's methods, called through a weak reference
            if not writer._background_step():  # noqa: SLF001
                return
        except BaseException as exc:  # noqa: BLE001 - recorded; every later call raises it
            writer._fail(exc)  # noqa: SLF001
            return
        finally:
            del writer


def _entry_groups(fragments: list[MemFragment], limit: int) -> list[list[MemFragment]]:
    """``fragments`` cut, in order, into runs of at most ``limit`` bytes (a fragment
    larger than that alone)."""
    groups: list[list[MemFragment]] = []
    size = 0
    for fragment in fragments:
        if not groups or size + fragment.nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(fragment)
        size += fragment.nbytes
    return groups


def _falses(n: int) -> pa.Array:
    return pa.array(np.zeros(n, bool))


def _file_version(data_format: str) -> tuple[int, int]:
    major, _, minor = data_format.partition(".")
    return int(major), int(minor or 0)
