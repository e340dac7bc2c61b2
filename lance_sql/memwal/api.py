"""The MemWAL of one table, as users handle it: set it up, write through it, run its jobs.

``MemWal.initialize(ds, region_spec=RegionSpec.bucket("id", 8))`` records the MemWAL index;
``MemWal(ds).writer()`` routes each row to its region by the spec (claiming a region on
first use) and ``writer(region=uuid)`` writes one manually created region; ``merge()``,
``refresh_index()``, ``collect_garbage()`` and ``recover()`` (a dead writer's WAL
flushed) are the background jobs. Reads see the LSM view (each key's newest row over the
base table, flushed generations and this process's MemTables): ``scanner()``, ``get()``
point lookups and ``nearest()`` top-k search.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.format.memwal import MemWalIndexDetails, RegionManifest
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import gc, index_builder, merger, recovery
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.naming import MEM_WAL_DIR
from lance_sql.memwal.pk_index import MaintainedIndex, maintained_btrees
from lance_sql.memwal.put_columns import PutColumns
from lance_sql.memwal.read.planner import LsmScanner, LsmView
from lance_sql.memwal.read.warm import WarmView
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import group_by_region, region_id_for
from lance_sql.memwal.transforms import region_values
from lance_sql.memwal.writer import RegionWriter, WriterConfig, as_table, conform_rows
from lance_sql.table.dataset import LanceDataset, dataset

__all__ = ["MemWal", "RoutingWriter"]


class MemWal:
    """The MemWAL of a table that has one (see the module docstring)."""

    def __init__(self, ds: LanceDataset, *, version: int | str | None = None) -> None:
        """``version``: what reads default to (see :meth:`view`; None: the latest, with
        strong consistency): a table checked out at an older version reads as of it."""
        loaded = mem_wal_index.load(ds)
        if loaded is None:
            raise NotFoundError(f"{ds.uri} has no MemWAL (MemWal.initialize(ds, ...) sets it "
                                "up)")
        self.dataset = ds
        self.version = version
        self.details: MemWalIndexDetails = loaded[1]
        self._warm = WarmView(ds.uri, ds.commit_config)  # strong point lookups

    @classmethod
    def initialize(cls, ds: LanceDataset, region_spec: RegionSpec | None = None, *,
                   maintained_indexes: list[str] | None = None,
                   **writer_defaults: object) -> MemWal:
        """Commit the MemWAL index; ``writer_defaults`` (``durable_write``,
        ``max_memtable_rows``...) are recorded for every writer."""
        # bad values fail here, not in every writer later (unknown names: initialize)
        WriterConfig(**{k: v for k, v in writer_defaults.items()  # type: ignore[arg-type]
                        if k in mem_wal_index.WRITER_DEFAULT_KEYS})
        stale = merger.region_ids(ds) if mem_wal_index.load(ds) is None else []
        if stale:
            # region ids follow from the spec and values: a new MemWAL would take these
            # regions, and their generations' rows, as its own
            raise InvalidInputError(
                f"{ds.uri}/{MEM_WAL_DIR} holds {len(stale)} region(s) of an earlier MemWAL "
                "(the table was overwritten, or its MemWAL index dropped, since); a new "
                "MemWAL would read their rows as its own: remove that directory first "
                "(the table's latest version does not read it)")
        new = mem_wal_index.initialize(ds, region_spec, maintained_indexes=maintained_indexes,
                                       writer_defaults=writer_defaults)
        return cls(new)

    @property
    def region_spec(self) -> RegionSpec | None:
        """The newest region spec (None: regions are created by hand)."""
        return max(self.details.region_specs, key=lambda s: s.spec_id, default=None)

    def _config(self, options: dict[str, Any]) -> WriterConfig:
        return WriterConfig.from_defaults(self.details.writer_config_defaults, **options)

    def writer(self, region: uuid.UUID | None = None, **options: Any
               ) -> RoutingWriter | RegionWriter:
        """A writer routing rows by the region spec, or of one manual ``region``."""
        ds = self.dataset
        config = self._config(options)
        if region is not None:
            if self.region_spec is not None:
                raise InvalidInputError(
                    f"{ds.uri} routes rows by its region spec; manual regions are for a "
                    "MemWAL initialised with region_spec=None")
            return RegionWriter(ds.store, region, ds.manifest.schema,
                                data_format=ds.manifest.data_format, config=config,
                                maintained_indexes=self.maintained_indexes(),
                                table_handler=ds.commit_config.handler)
        spec = self.region_spec
        if spec is None:
            raise InvalidInputError(f"{ds.uri} has no region spec: pass writer(region=uuid)")
        return RoutingWriter(ds, spec, config, self.maintained_indexes())

    def maintained_indexes(self) -> tuple[MaintainedIndex, ...]:
        """The base-table indexes each flushed generation carries besides the primary
        key's (BTREE indexes the MemWAL index lists; see :mod:`.pk_index`)."""
        manifest = self.dataset.manifest
        return maintained_btrees(manifest, self.details,
                                 mem_wal_index.primary_key_columns(manifest.schema))

    # ------------------------------------------------------------------ reads
    def view(self, consistency: str = "strong", version: int | str | None = None
             ) -> LsmView:
        """The LSM view over the latest base version (see :mod:`.read.planner`).

        ``version`` (a number or tag) reads the table as of that base version: its rows
        plus the generations that version's MemWAL index snapshot lists as flushed and
        not merged (so ``consistency`` must be "snapshot", the default then). A version
        from before the MemWAL index existed is its base table alone, as SQL's
        ``VERSION AS OF`` reads it."""
        if version is not None:
            if consistency == "strong":
                consistency = "snapshot"
            if consistency != "snapshot":
                raise InvalidInputError("an older version is read from its index snapshot: "
                                        "consistency='snapshot'")
        base = dataset(self.dataset.uri, version, commit_config=self.dataset.commit_config)
        return LsmView(base, consistency=consistency, plain_ok=version is not None)

    def scanner(self, columns: Sequence[str] | None = None, filter: str | None = None,
                *, limit: int | None = None, consistency: str = "strong",
                version: int | str | None = None, batch_size: int | None = None,
                with_row_id: bool = False, with_row_address: bool = False) -> LsmScanner:
        """Every key's newest row (``to_table()``, ``to_batches()``, ``count_rows()``,
        ``explain()``); ``filter`` applies to that row only, never to older versions.
        ``_gen``, ``_region`` and ``_rowaddr`` are returned when named; ``version``
        reads as of an older base version (see :meth:`view`). A strong read of the
        latest version starts from this handle's warm view, as :meth:`get` does.
        ``to_batches()`` yields at most ``batch_size`` rows a batch (default 8192, as
        the plain scanner). ``with_row_id`` / ``with_row_address`` add ``_rowid`` /
        ``_rowaddr`` to the columns, as the plain scanner's do."""
        version = self.version if version is None else version
        view = (self._warm.view() if consistency == "strong" and version is None
                else self.view(consistency, version))
        extra = [name for name, wanted in (("_rowid", with_row_id),
                                           ("_rowaddr", with_row_address)) if wanted]
        if extra and not isinstance(columns, str):
            names = list(view.arrow_schema.names if columns is None else columns)
            columns = [*names, *(n for n in extra if n not in names)]
        return LsmScanner(view, columns, filter, limit, batch_size)

    def get(self, keys: pa.Table | pa.RecordBatch | dict, columns: Sequence[str] | None = None,
            *, consistency: str = "strong", version: int | str | None = None) -> pa.Table:
        """Point lookups: the newest live row of each key in ``keys`` (its primary-key
        columns), in the keys' order; deleted and unknown keys are left out. ``version``
        looks up as of an older base version (see :meth:`view`)."""
        version = self.version if version is None else version
        view = (self._warm.view() if consistency == "strong" and version is None
                else self.view(consistency, version))
        table = keys if isinstance(keys, pa.Table) else view.one_key_table(keys)
        if table is None:
            table = _keys_table(keys)
        return view.lookup_rows(table, columns)

    def nearest(self, column: str, query_vector: Sequence[float] | np.ndarray, k: int = 10,
                *, metric: str = "l2", columns: Sequence[str] | None = None,
                filter: str | None = None, exact: bool = False,
                consistency: str = "strong", version: int | str | None = None) -> pa.Table:
        """The ``k`` rows nearest to ``query_vector`` (exact distances, ``_distance``).
        Stale candidates are dropped with the newer generations' bloom filters, so a
        false positive may drop a valid one; ``exact=True`` checks the real keys.
        ``version`` searches the view as of that base version (see :meth:`view`)."""
        view = self.view(consistency, self.version if version is None else version)
        return view.knn_plan(column, query_vector, k, metric=metric, columns=columns,
                             filter=filter, exact=exact).to_table()

    def regions(self) -> list[RegionManifest]:
        """The latest manifest of every region."""
        out = []
        for region_id in merger.region_ids(self.dataset):
            manifest = RegionLog(self.dataset.store, region_id).latest()
            if manifest is not None:
                out.append(manifest)
        return out

    def merge(self, max_generations: int | None = None) -> list[merger.MergeResult]:
        """Merge flushed generations into the table, oldest first (at most
        ``max_generations``; default all)."""
        return merger.merge(self.dataset, max_generations=max_generations)

    def refresh_index(self, *, skip_unchanged: bool = False) -> LanceDataset:
        """Snapshot every region into the MemWAL index (see :mod:`.index_builder`); the
        table at the version that holds it, of the class of this handle's dataset."""
        ds = self.dataset
        new = index_builder.refresh_index(ds, skip_unchanged=skip_unchanged)
        return ds.at_manifest(new.manifest)

    def recover(self, regions: Sequence[uuid.UUID] | None = None, *,
                idle: timedelta | float = timedelta(seconds=60)
                ) -> list[recovery.RecoveryResult]:
        """Flush the WAL entries a dead writer acknowledged but never flushed, so readers
        everywhere see them: per region (default all) with such a backlog, unless its
        writer is open in this process or its WAL was written within ``idle`` (a timedelta
        or seconds: a writer may be alive there). The region is claimed as by any
        writer, so a live writer there is fenced (see :mod:`.recovery`)."""
        ds = self.dataset
        return recovery.recover(ds, self.details, self._config({}), self.maintained_indexes(),
                                regions, idle=idle)

    def collect_garbage(self, **options: Any) -> gc.GcResult:
        return gc.collect_garbage(self.dataset, **options)

    def status(self) -> list[dict[str, Any]]:
        """One row per region, from its latest manifest and the latest MemWAL index:
        ``region``, ``spec_id``, ``writer_epoch``, ``manifest_version``,
        ``current_generation`` (the one being written), ``flushed`` (generations on
        disk), ``merged_up_to``, ``unmerged`` (flushed, not yet merged) and
        ``wal_backlog`` (WAL entries not yet in a flushed generation, found by probing
        the WAL: rows in a writer's MemTable, or waiting for a new writer's replay)."""
        current = dataset(self.dataset.uri, commit_config=self.dataset.commit_config)
        loaded = mem_wal_index.load(current)
        details = loaded[1] if loaded is not None else self.details
        rows = []
        for m in self.regions():
            merged = details.merged_generation(m.region_id)
            flushed = [g.generation for g in m.flushed_generations]
            last = RegionLog(current.store, m.region_id).last_wal_entry(m)
            rows.append({
                "region": str(m.region_id), "spec_id": m.region_spec_id,
                "writer_epoch": m.writer_epoch, "manifest_version": m.version,
                "current_generation": m.current_generation, "flushed": flushed,
                "merged_up_to": merged, "unmerged": sum(g > merged for g in flushed),
                "wal_backlog": max(0, last - m.replay_after_wal_id),
            })
        return rows


def _keys_table(keys: object) -> pa.Table:
    """The keys of a lookup as a table: a table, batch, or dict of columns, where a
    column may be one value (``{"id": 7}``)."""
    if isinstance(keys, dict):
        keys = {name: value if isinstance(value, (list, tuple, np.ndarray, pa.Array,
                                                  pa.ChunkedArray)) else [value]
                for name, value in keys.items()}
    try:
        return as_table(keys)
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"lookup keys must be columns of the key values: {exc}"
                                ) from exc


class RoutingWriter:
    """Puts and deletes routed to one :class:`RegionWriter` per region of the spec.

    A region is claimed the first time a row of it arrives; its id is derived from its
    values, so every process sends a key to the same region.
    """

    def __init__(self, ds: LanceDataset, spec: RegionSpec, config: WriterConfig,
                 maintained_indexes: tuple[MaintainedIndex, ...] = ()) -> None:
        self.dataset = ds
        self.spec = spec
        self.config = config
        self.maintained_indexes = maintained_indexes
        self._schema = ds.manifest.schema
        self._put_schema = self._schema.to_arrow()
        # puts name the table's columns as it names them now; region writers take them
        # in this writer's schema (see memwal.put_columns)
        self._columns = PutColumns(ds.store, self._schema, ds.commit_config.handler)
        self._keys = tuple(mem_wal_index.primary_key_columns(self._schema))
        self._writers: dict[uuid.UUID, RegionWriter] = {}
        # puts may come from several threads: a region's writer is made (its region
        # claimed) under this lock, once; a second claim would fence the first writer
        self._claiming = threading.Lock()
        self._closed = False  # (set under the lock: no region is claimed after close)

    @property
    def writers(self) -> list[RegionWriter]:
        return list(self._writers.values())

    def _route(self, rows: pa.Table) -> list[tuple[RegionWriter, pa.Table]]:
        names = self.spec.source_names(self._schema)
        missing = [n for n in names if n is not None and n not in rows.column_names]
        if missing:
            raise InvalidInputError(f"rows lack the region spec's columns {missing}")
        arrays = [rows.column(n).combine_chunks() if n is not None else None for n in names]
        values = region_values(self.spec, arrays, rows.num_rows)
        out = []
        for positions in group_by_region(values):
            first = int(positions[0])
            region_id = region_id_for(self.spec, values, first)
            writer = self._writers.get(region_id)
            if writer is None:
                writer = self._claim(region_id, values, first)
            out.append((writer, rows.take(pa.array(positions))))
        return out

    def _claim(self, region_id: uuid.UUID, values: pa.Table, row: int) -> RegionWriter:
        """The writer of ``region_id`` (whose values are row ``row`` of ``values``),
        opened on its first rows, once whatever the threads putting them."""
        with self._claiming:
            writer = self._writers.get(region_id)
            if writer is None:
                if self._closed:  # (a region it has is refused by that region's writer)
                    raise InvalidInputError("the writer is closed: open a new one")
                region = {f.field_id: values.column(f.field_id)[row].as_py()
                          for f in self.spec.fields}
                writer = RegionWriter(self.dataset.store, region_id, self._schema,
                                      data_format=self.dataset.manifest.data_format,
                                      region_spec=self.spec, region=region,
                                      config=self.config,
                                      maintained_indexes=self.maintained_indexes,
                                      put_columns=self._columns)
                self._writers[region_id] = writer
            return writer

    def put(self, data: pa.Table | pa.RecordBatch | dict) -> None:
        """Upsert rows named as the table names its columns now (see
        :mod:`~.put_columns`). The whole put is checked and cast to the table's types
        before any region takes a row of it, and routed on the cast values (the values
        the region writers keep)."""
        rows = self._conformed(self._columns.written(as_table(data)), None)
        for writer, part in self._route(rows):
            writer.put_written(part, conformed=True)

    def delete(self, keys: pa.Table | pa.RecordBatch | dict) -> None:
        """Delete rows by key (the primary-key columns, current names)."""
        rows = self._columns.written(as_table(keys), self._keys)
        # the keys, and the region's columns when they are not keys (they route it)
        routing = [n for n in self.spec.source_names(self._schema)
                   if n is not None and n not in self._keys and n in rows.column_names]
        rows = self._conformed(rows, (*self._keys, *routing))
        for writer, part in self._route(rows):
            writer.delete_written(part)

    def _conformed(self, rows: pa.Table, names: tuple[str, ...] | None) -> pa.Table:
        return conform_rows(rows, self._put_schema, names, self._keys,
                            self._columns.current_name)

    def flush(self) -> None:
        for writer in self.writers:
            writer.flush()

    def flush_memtable(self) -> None:
        for writer in self.writers:
            writer.flush_memtable()

    def close(self, *, flush_memtable: bool = True) -> None:
        """Close every region's writer (see :meth:`RegionWriter.close`); puts after it
        are refused, also those of a region it had not opened."""
        with self._claiming:
            self._closed = True
        errors = []
        for writer in self.writers:
            try:
                writer.close(flush_memtable=flush_memtable)
            except Exception as exc:  # noqa: BLE001 - every writer is closed, then raise
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> RoutingWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(flush_memtable=exc_type is None)
