"""Tables with ``ds.initialize_mem_wal(...)`` and ``ds.mem_wal``, as pylance users call them.

``lance_sql.dataset(...)`` and ``lance_sql.write_dataset(...)`` return a
:class:`MemWalDataset`: a :class:`~lance_sql.table.dataset.LanceDataset` (every read and
write method unchanged) that also sets up and hands out the table's MemWAL. The table
layer cannot know about MemWAL (layers point one way), so the methods live in this
subclass; versions reached from it (``checkout_version``, the dataset a commit returns)
keep the class.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.expr import Column
from lance_sql.format.manifest import Manifest
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.held_field_ids import held_field_id
from lance_sql.memwal.index import load as load_mem_wal_index
from lance_sql.memwal.read.flat_search import table_knn_plan
from lance_sql.memwal.read.nearest_scanner import QUERY_INDEX, NearestQuery, NearestScanner
from lance_sql.memwal.read.nodes import DISTANCE
from lance_sql.memwal.schema_changes import check_type_changes
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.dataset import dataset as open_table
from lance_sql.table.dataset import write_dataset as write_table
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID
from lance_sql.table.read.projection import ProjectingScanner, projections_of, read_columns

__all__ = ["MemWalDataset", "dataset", "write_dataset"]

# scanner keywords a vector search takes (the hints among them change nothing)
_NEAREST_SCAN_KEYWORDS = frozenset({
    "prefilter", "with_row_id", "with_row_address", "batch_size", "batch_readahead",
    "fragment_readahead", "scan_in_order", "late_materialization", "use_stats",
    "fast_search", "disable_scoring_autoprojection", "io_buffer_size", "use_scalar_index",
    "strict_batch_size", "batch_size_bytes"})


class MemWalDataset(LanceDataset):
    """A Lance table version that can also set up and open its MemWAL."""

    # opened at a version asked for (a number, tag or instant), not the latest: its
    # MemWAL handle reads as of that version; a write through it moves it to the latest
    checked_out = False

    @classmethod
    def of(cls, ds: LanceDataset) -> MemWalDataset:
        """``ds`` (same version, store and commit settings) as a MemWalDataset."""
        if isinstance(ds, cls):
            return ds
        ref, manifest = ds._at  # noqa: SLF001 - the base class's own state, read once
        return cls._opened(ds.uri, ds.store, ds.commit_config,  # type: ignore[return-value]
                           ref, manifest)

    def initialize_mem_wal(
        self,
        region_spec: RegionSpec | None = None,
        maintained_indexes: list[str] | None = None,
        *,
        durable_write: bool | None = None,
        max_memtable_rows: int | None = None,
        max_memtable_bytes: int | None = None,
        max_wal_flush_interval_ms: int | None = None,
        max_unflushed_bytes: int | None = None,
    ) -> MemWal:
        """Set up the table's MemWAL (one CreateIndex commit) and return its handle.

        ``region_spec`` routes each row to a region (``RegionSpec.bucket("id", 8)``, combine
        specs with ``+``); None: regions are created by hand (``mw.writer(region=uuid)``).
        ``maintained_indexes``: base-table indexes MemTables keep (None: all of them).
        The writer options given are recorded in the MemWAL index as every writer's
        defaults (a writer may still override them); options left None keep the writer
        defaults (durable writes, 100k-row / 256 MiB MemTables, a WAL flush every 100 ms
        when not durable, 1 GiB of unflushed rows before puts block).

        Like pylance's mutating methods, this dataset object moves to the version the
        commit created. Raises ``InvalidInputError`` if the table already has a MemWAL
        (or an option is invalid) and ``SchemaError`` if it has no primary key.
        """
        options = {"durable_write": durable_write, "max_memtable_rows": max_memtable_rows,
                   "max_memtable_bytes": max_memtable_bytes,
                   "max_wal_flush_interval_ms": max_wal_flush_interval_ms,
                   "max_unflushed_bytes": max_unflushed_bytes}
        given = {k: v for k, v in options.items() if v is not None}
        handle = MemWal.initialize(self, region_spec, maintained_indexes=maintained_indexes,
                                   **given)
        self._moved_to(handle.dataset.manifest)
        return MemWal(self)

    def nearest(self, column: str, query_vector: Sequence[float] | np.ndarray, k: int = 10,
                *, metric: str = "l2", columns: Sequence[str] | None = None,
                filter: str | None = None, version: int | str | None = None) -> pa.Table:
        """The ``k`` rows nearest to ``query_vector`` in ``column`` (exact, ``_distance``
        added; ``metric`` l2, cosine or dot): over the LSM view when the table has a
        MemWAL (see :meth:`MemWal.nearest`), else over this version of the table.
        ``version`` (a number or tag) searches the table as of that version instead: its
        LSM view then (see :meth:`MemWal.view`) when that version has a MemWAL."""
        ds: LanceDataset = self
        if version is not None:
            ds = open_table(self.uri, version, commit_config=self.commit_config)
        if load_mem_wal_index(ds) is not None:
            return MemWal(ds).nearest(column, query_vector, k, metric=metric,
                                      columns=columns, filter=filter, version=version)
        return table_knn_plan(ds, column, query_vector, k, metric=metric, columns=columns,
                              filter=filter).to_table()

    def scanner(self, columns: Sequence[str] | None = None, filter: Any = None,
                limit: int | None = None, offset: int | None = None, nearest: Any = None,
                *args: Any, **kwargs: Any) -> Any:
        """:meth:`LanceDataset.scanner`, and with ``nearest={"column": ..., "q": [...],
        "k": 10, "metric": "l2"}`` pylance's vector search of this table version (its base
        table when it has a MemWAL), exact (see
        :mod:`~lance_sql.memwal.read.nearest_scanner`): the filter applies after the
        search unless ``prefilter=True``."""
        if nearest is None:
            return super().scanner(columns, filter, limit, offset, None, *args, **kwargs)
        if args:
            raise InvalidInputError("a vector search takes the scanner's later arguments "
                                    "by keyword")
        unsupported = sorted(set(kwargs) - _NEAREST_SCAN_KEYWORDS)
        if unsupported:
            raise InvalidInputError(f"a vector search does not take {unsupported}")
        with_row_id = bool(kwargs.get("with_row_id"))
        with_row_address = bool(kwargs.get("with_row_address"))
        projections = None if columns is None else projections_of(columns, self.schema)
        query = NearestQuery.of(nearest)
        found = NearestScanner(
            self, query,
            columns if projections is None else read_columns(projections, self.schema),
            filter, prefilter=bool(kwargs.get("prefilter")), limit=limit, offset=offset,
            with_row_id=with_row_id, with_row_address=with_row_address,
            batch_size=kwargs.get("batch_size"))
        if projections is None:
            return found
        # expressions (``{"twice": "id * 2"}``, struct fields) computed from the rows found
        system = [n for n, on in ((ROW_ID, with_row_id), (ROW_ADDR, with_row_address)) if on]
        if query.many:  # which query a row answers, first as pylance has it
            projections = {QUERY_INDEX: Column((QUERY_INDEX,)), **projections}
        return ProjectingScanner(found, projections, [DISTANCE, *system])

    def alter_columns(self, *alterations: Mapping[str, Any]) -> None:
        """As :meth:`LanceDataset.alter_columns`; on a table with a MemWAL a type change
        is refused (SchemaError) when a value the MemWAL holds unmerged would not fit the
        new type (:func:`~lance_sql.memwal.schema_changes.check_type_changes`)."""
        check_type_changes(self, alterations)
        super().alter_columns(*alterations)

    def checkout_version(self, version: Any) -> MemWalDataset:
        ds = MemWalDataset.of(super().checkout_version(version))
        ds.checked_out = True
        return ds

    def _moved_to(self, manifest: Manifest | None) -> None:
        super()._moved_to(manifest)
        if manifest is not None:
            self.checked_out = False

    def _held_field_id(self, manifest: Manifest) -> int:
        """New columns go above the ids the MemWAL's unmerged generations and this
        process's writers hold (:func:`~lance_sql.memwal.held_field_ids.held_field_id`)."""
        return held_field_id(self, manifest)

    @property
    def mem_wal(self) -> MemWal | None:
        """The MemWAL of this version of the table, or None when it has none (set one
        up with :meth:`initialize_mem_wal`). The same handle while this object stays
        at one version, so ``ds.mem_wal.get(...)`` keeps its lookup view warm. Its reads
        are of the latest version (strongly consistent), or as of this version when it was
        asked for (``checkout_version(n)``, ``dataset(uri, version=n)``: see
        :meth:`MemWal.view`)."""
        # the version read once, before the handle reads the index: if another thread's
        # write moves this object meanwhile, the handle is newer than its tag and the
        # next call makes a new one (never an old handle tagged with a newer version)
        version = self.version
        held = getattr(self, "_mem_wal_handle", None)
        if held is not None and held[0] == version:
            return held[1]
        if load_mem_wal_index(self) is None:
            return None
        # a version asked for (checked out) reads as of itself
        handle = MemWal(self, version=version if self.checked_out else None)
        self._mem_wal_handle = (version, handle)
        return handle


def dataset(uri: str | os.PathLike[str], *args: Any, **kwargs: Any) -> MemWalDataset:
    """Open a table (see :func:`lance_sql.table.dataset.dataset`)."""
    ds = MemWalDataset.of(open_table(uri, *args, **kwargs))
    given = args[0] if args else kwargs.get("version")
    if given is not None or kwargs.get("asof") is not None:
        ds.checked_out = True
    return ds


def write_dataset(data: Any, uri: str | os.PathLike[str], *args: Any,
                  **kwargs: Any) -> MemWalDataset:
    """Write a table (see :func:`lance_sql.table.dataset.write_dataset`)."""
    return MemWalDataset.of(write_table(data, uri, *args, **kwargs))


# The table layer's signatures and docstrings (``help()`` shows them), not copies that drift.
for _ours, _theirs in ((dataset, open_table),
                       (write_dataset, write_table)):
    functools.update_wrapper(_ours, _theirs, assigned=("__doc__",), updated=())
