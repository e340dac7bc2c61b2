"""The ``lance`` PySpark Python data source: bulk writes and parallel reads.

Writes follow Delta's shape: each task writes data files for its partitions with
lance_sql's writer and returns the fragments as a commit message; the driver then
commits exactly one transaction, pinned to the version read when the job started,
so a concurrent append rebases and a concurrent overwrite fails the job. Every file
a job writes is named with a job-specific prefix, so an aborted job — including
tasks that died without sending a message — is cleaned up by that prefix.

Reads are cut into input partitions by bytes (see :mod:`lance_sql.spark.partitioning`;
options ``maxPartitionBytes``, ``minPartitions``, ``openCostInBytes``), or one per
fragment in chunks of ``rowsPerPartition`` rows when that is given. Other options:
``version`` (number or tag), ``timestamp``, ``columns`` (data and system columns, comma
separated), ``withRowId`` / ``withRowAddress`` / ``withRowVersions``
(``_row_created_at_version`` and ``_row_last_updated_at_version``, tables with stable
row ids only). With ``spark.sql.python.filterPushdown.enabled`` on, register with
:func:`lance_sql.spark.register` and simple filters are evaluated inside the scan (and
prune fragments by row address).

A table with a MemWAL reads as its LSM view (each key's newest row over the base table
and the flushed generations not merged yet; MemTables of writers are not seen, executors
are other processes; ``_rowid`` and the row versions are the base table's, NULL on rows
not merged yet, ``_rowaddr`` is within the row's source). The base table is read once,
cut into partitions as a table read is (by bytes, or by ``rowsPerPartition``), each
leaving out the base rows that newer generations' keys hide (through the key's BTREE
index when there is one); each region's unmerged generations form one part,
deduplicated alone and placed whole in the partition with the fewest bytes (see
:mod:`lance_sql.memwal.read.split`). The generations are pinned when the read is
planned. ``version``/``timestamp`` read as of that base
version. ``baseOnly=true`` reads the base table alone (with every option above). With
pushdown on, the simple filters Spark pushes prune regions before any partition is
planned (a pruned region's generations are never opened) and are pushed into every
source, each key's newest row decided first (a key whose newest version fails the
filter never shows an older one).

Writes take ``maxRowsPerFile``, and when they create (or overwrite) a table,
``enableStableRowIds=true`` (row ids for life, so the table has a change feed) and
``primaryKey=col[,col...]`` (the unenforced primary key, recorded as pylance does).

``readChangeFeed=true`` reads the change data feed instead (Delta's option names):
``startingVersion`` or ``startingTimestamp`` (required), ``endingVersion`` or
``endingTimestamp`` (default: the latest version, pinned when the read is planned);
versions are inclusive at both ends. The columns are those of
:func:`lance_sql.table.table_changes`: the table's, then ``_change_type``,
``_commit_version`` and ``_rowid`` (``decimal(20,0)``, as every ``uint64``) and
``_commit_timestamp`` (``timestamp``). The driver plans the changes from metadata only
and cuts the planned change rows into input partitions the same way (a partition may
span commits; with ``rowsPerPartition``, one per commit in chunks of that many rows);
executors re-plan their commits from metadata and read the data values. With pushdown
on, filters on ``_change_type``, ``_commit_version`` and ``_rowid`` prune versions and
rows before any data is read. ``changeMode=net`` reads the net feed instead (one change
per row for the whole window, see :mod:`lance_sql.table.changes.net`; pushed filters
then apply to the net rows): the driver plans the whole window and partitions are
ranges of its net rows.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar, overload

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)

from lance_sql.errors import InvalidInputError
from lance_sql.expr import Call, Column, Expr, Literal
from lance_sql.expr.lists import is_list
from lance_sql.io.external import ExternalManifestCommit, SqliteManifestStore
from lance_sql.io.uri import open_store
from lance_sql.memwal.index import load as load_mem_wal_index
from lance_sql.memwal.read.nodes import ExecNode
from lance_sql.memwal.read.planner import LsmView
from lance_sql.memwal.read.split import (
    FragmentRange,
    GenerationPin,
    RegionPart,
    base_plan,
    plan_split,
    region_plan,
)
from lance_sql.spark.partitioning import (
    MAX_PARTITION_BYTES,
    OPEN_COST_BYTES,
    RowRange,
    SizedPiece,
    SplitPolicy,
    fragment_size,
    plan_partitions,
)
from lance_sql.spark.types import arrow_schema, check_writable, spark_schema
from lance_sql.table import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    ROW_ADDR,
    ROW_ID,
    SYSTEM_COLUMNS,
    VERSION_COLUMNS,
    ChangeQuery,
    ChangeRows,
    ChangeWindow,
    CommitConfig,
    JobFiles,
    LanceDataset,
    ScanPlan,
    address_ranges,
    build_scan_plan,
    check_mode,
    commit_job,
    fragment_spans,
    open_for_write,
    parse_instant,
    plan_query,
    read_query,
    resolve_window,
    scan_fragment,
    write_job_fragments,
)

# Bytes of a change row's metadata (version, type, row id, timestamp), added to the
# data's average row width when change-feed reads are cut into partitions.
CHANGE_ROW_BYTES = 32
# Rows scanned at a time within a partition of a table read.
SCAN_ROWS = 1 << 20
_TRUE = ("true", "1", "yes")


# Rows per Arrow batch handed to Spark: small enough that the JVM converts one batch
# while the Python worker produces the next.
BATCH_ROWS = 1 << 16

def _open(options: dict[str, str]) -> LanceDataset:
    if "path" not in options:
        raise InvalidInputError("the lance data source needs a path: .load(uri) or .save(uri)")
    version: int | str | dt.datetime | None = options.get("version")
    if "timestamp" in options:
        if version is not None:
            raise InvalidInputError("give either the version or the timestamp option, not both")
        version = parse_instant(options["timestamp"])  # the latest version at or before it
    return LanceDataset(options["path"], version)


@overload
def _positive_int(options: dict[str, str], name: str, default: int) -> int: ...
@overload
def _positive_int(options: dict[str, str], name: str, default: None) -> int | None: ...
def _positive_int(options: dict[str, str], name: str, default: int | None) -> int | None:
    """A positive integer option (``default`` when absent)."""
    text = _option(options, name)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _split_policy(options: dict[str, str]) -> SplitPolicy:
    """How reads are cut into input partitions (see :mod:`lance_sql.spark.partitioning`)."""
    return SplitPolicy(
        max_partition_bytes=_positive_int(options, "maxPartitionBytes", MAX_PARTITION_BYTES),
        min_partitions=_positive_int(options, "minPartitions", _usable_cores()),
        open_cost_bytes=_positive_int(options, "openCostInBytes", OPEN_COST_BYTES))


def _usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, where the OS reports one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _flag(options: dict[str, str], *names: str) -> bool:
    """Spark's options are case-insensitive: a plain dict of them has lower-case keys."""
    return any((_option(options, n) or "false").lower() in _TRUE for n in names)


class LanceDataSource(DataSource):
    """``spark.read.format("lance")`` / ``df.write.format("lance")``."""

    @classmethod
    def name(cls) -> str:
        return "lance"

    def schema(self) -> T.StructType:
        options = dict(self.options)
        if _change_feed(options):
            window = _change_window(options)
            return spark_schema(_project(window.schema, options))
        ds = _open(options)
        # on the LSM view, rows not merged into the base table yet have no row id or
        # versions (NULL); _rowaddr is within the row's source
        lsm = _lsm(ds, options)
        full = pa.schema(list(ds.schema) + [
            pa.field(n, pa.uint64(), nullable=lsm and n != ROW_ADDR) for n in SYSTEM_COLUMNS])
        fields = list(_project(ds.schema, options, full))
        wanted = []
        if _flag(options, "withRowId", "with_row_id"):
            wanted.append(ROW_ID)
        if _flag(options, "withRowAddress", "with_row_address"):
            wanted.append(ROW_ADDR)
        if _flag(options, "withRowVersions", "with_row_versions"):
            wanted.extend(VERSION_COLUMNS)
        fields += [full.field(n) for n in wanted if n not in {f.name for f in fields}]
        if any(f.name in VERSION_COLUMNS for f in fields) and not ds.manifest.uses_stable_row_ids:
            raise InvalidInputError(
                f"{options['path']} has no row-version columns: they need stable row ids, "
                "chosen when a table is created (write_dataset(..., enable_stable_row_ids=True))")
        return spark_schema(pa.schema(fields))

    def reader(self, schema: T.StructType) -> LanceReader | ChangeFeedReader | LsmReader:
        options = dict(self.options)
        if _change_feed(options):
            return ChangeFeedReader(options, schema)
        if _lsm(_open(options), options):
            return LsmReader(options, schema)
        return LanceReader(options, schema)

    def writer(self, schema: T.StructType, overwrite: bool) -> LanceWriter:
        return LanceWriter(dict(self.options), schema, overwrite)


class FilteringLanceDataSource(LanceDataSource):
    """The same source with filter pushdown (needs Spark's Python pushdown flag on)."""

    def reader(self, schema: T.StructType) -> LanceReader | ChangeFeedReader | LsmReader:
        options = dict(self.options)
        if _change_feed(options):
            return FilteringChangeFeedReader(options, schema)
        if _lsm(_open(options), options):
            return FilteringLsmReader(options, schema)
        return FilteringLanceReader(options, schema)


def _project(table: pa.Schema, options: dict[str, str],
             full: pa.Schema | None = None) -> pa.Schema:
    """``table`` narrowed to the ``columns`` option (names looked up in ``full``)."""
    columns = options.get("columns")
    if not columns:
        return table
    full = full or table
    names = [c.strip() for c in columns.split(",") if c.strip()]
    for name in names:
        if name not in full.names:
            raise InvalidInputError(f"columns option: column {name!r} does not exist; "
                                    f"columns: {', '.join(full.names)}")
    return pa.schema([full.field(n) for n in names])


# ------------------------------------------------------------------ the change feed


def _change_feed(options: dict[str, str]) -> bool:
    return _flag(options, "readChangeFeed")


def _option(options: dict[str, str], name: str) -> str | None:
    """An option by name; Spark keeps option names case-insensitively (lower-cased)."""
    value = options.get(name, options.get(name.lower()))
    return None if value is None or not str(value).strip() else str(value).strip()


def _commit_config(options: dict[str, str]) -> CommitConfig | None:
    """The ``commitConfig`` option, for tables kept in an external manifest store (Spark's
    options are strings, so the store is named, not passed): ``"sqlite:/path/db"`` for the
    built-in SQLite manifest store, or ``"package.module:name"`` of a CommitConfig (or of a
    function returning one) importable where Spark runs the job's driver side."""
    spec = _option(options, "commitConfig")
    if spec is None:
        return None
    if spec.startswith("sqlite:"):
        return CommitConfig(handler=ExternalManifestCommit(
            SqliteManifestStore(spec.removeprefix("sqlite:"))))
    module_name, _, attr = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidInputError(f"commitConfig {spec!r}: not an importable "
                                f"'package.module:name' ({exc})") from exc
    config = found() if callable(found) and not isinstance(found, CommitConfig) else found
    if not isinstance(config, CommitConfig):
        raise InvalidInputError(f"commitConfig {spec!r} gave {type(config).__name__}, "
                                "not a lance_sql CommitConfig")
    return config


def _change_window(options: dict[str, str]) -> ChangeWindow:
    """The feed's version window from Delta's options (the end pinned to a version)."""
    if "path" not in options:
        raise InvalidInputError("the lance data source needs a path: .load(uri)")
    for name in ("version", "timestamp"):
        if _option(options, name) is not None:
            raise InvalidInputError(
                f"readChangeFeed takes startingVersion/startingTimestamp and endingVersion/"
                f"endingTimestamp, not the {name!r} option")
    bounds = []
    for side in ("starting", "ending"):
        version = _option(options, f"{side}Version")
        stamp = _option(options, f"{side}Timestamp")
        if version is not None and stamp is not None:
            raise InvalidInputError(
                f"give either {side}Version or {side}Timestamp for readChangeFeed, not both")
        if version is not None and not version.isdigit():
            raise InvalidInputError(f"{side}Version must be a version number, got {version!r}")
        if stamp is not None and stamp.isdigit():
            raise InvalidInputError(f"{side}Timestamp must be a timestamp, got {stamp!r}")
        bounds.append(int(version) if version is not None else stamp)
    start, end = bounds
    if start is None:
        raise InvalidInputError(
            "readChangeFeed needs startingVersion or startingTimestamp (endingVersion / "
            "endingTimestamp are optional and default to the latest version)")
    return resolve_window(open_store(options["path"]), start, end)


_Partition = TypeVar("_Partition", bound=InputPartition)


def _own_partition(partition: InputPartition, kind: type[_Partition]) -> _Partition:
    """``partition`` as the ``kind`` the reader planned (Spark hands each task one back)."""
    if not isinstance(partition, kind):
        raise InvalidInputError(f"expected a {kind.__name__}, got {type(partition).__name__}")
    return partition


@dataclass(frozen=True)
class ChangePartition(InputPartition):
    """Planned change rows (after metadata pruning) of one or more commits.

    Each range's key is a commit version; its rows are that commit's planned rows.
    """

    ranges: tuple[RowRange, ...]


class ChangeFeedReader(DataSourceReader):
    """Reads the change feed: plans on the driver, reads data values on executors."""

    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        window = _change_window(options)
        self.uri = options["path"]
        self.start, self.end = window.start, window.end
        self.mode = _option(options, "changeMode") or "all"
        self.net = check_mode(self.mode)
        self.rows_per_partition = _positive_int(options, "rowsPerPartition", None)
        self.policy = _split_policy(options)
        self.columns = [f.name for f in schema.fields]
        self.spark_arrow = _spark_arrow_schema(window.schema, schema)
        self.filters: list[Expr] = []

    def _window(self) -> ChangeWindow:
        return resolve_window(open_store(self.uri), self.start, self.end)

    def _query(self, window: ChangeWindow) -> ChangeQuery:
        return ChangeQuery.build(window.schema, self.columns, _conjunction(self.filters),
                                 mode=self.mode)

    def _rows(self, window: ChangeWindow, query: ChangeQuery,
              versions: Sequence[int] | None) -> ChangeRows:
        return plan_query(window, query, versions).rows

    def partitions(self) -> Sequence[ChangePartition]:
        window = self._window()
        query = self._query(window)
        if self.net:  # net rows need the whole window: one piece, cut into row ranges
            n = len(self._rows(window, query, None))
            if self.rows_per_partition is not None:
                step = self.rows_per_partition
                return [ChangePartition((RowRange(0, start, min(n, start + step)),))
                        for start in range(0, n, step)] or [ChangePartition(())]
            piece = SizedPiece(0, n, n * self._row_bytes(window))
            return [ChangePartition(r) for r in plan_partitions([piece], self.policy)] or [
                ChangePartition(())]
        # Planned a commit at a time, so planning memory does not grow with the window.
        counts = {v: len(self._rows(window, query, [v])) for v in query.versions(window)}
        if self.rows_per_partition is not None:
            step = self.rows_per_partition
            parts = [ChangePartition((RowRange(v, start, min(n, start + step)),))
                     for v, n in counts.items() for start in range(0, n, step)]
        else:
            width = self._row_bytes(window)
            pieces = [SizedPiece(v, n, n * width) for v, n in counts.items()]
            parts = [ChangePartition(r) for r in plan_partitions(pieces, self.policy)]
        return parts or [ChangePartition(())]

    def _row_bytes(self, window: ChangeWindow) -> int:
        """Bytes a change row is taken to cost: the end version's average for the columns
        read, plus the change metadata."""
        manifest = window.manifest_of(window.end)
        wanted = [f for f in manifest.schema.fields if f.name in self.columns]
        sizes = [fragment_size(f, wanted) for f in manifest.fragments]
        rows = sum(s.rows for s in sizes)
        data = sum(s.bytes for s in sizes) // rows if rows else 0
        return data + CHANGE_ROW_BYTES

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = _own_partition(partition, ChangePartition)
        if not partition.ranges:
            return
        window = self._window()
        query = self._query(window)
        if self.net:  # each commit's plan is cached: re-planning the window is cheap
            rows = self._rows(window, query, None)
            first = {0: 0}
        else:
            versions = sorted({r.key for r in partition.ranges})
            rows = self._rows(window, query, versions)  # in version order
            first = dict(zip(versions, np.searchsorted(rows.version,
                                                       np.array(versions, np.uint64))
                             .tolist(), strict=True))
        positions = np.concatenate([np.arange(first[r.key] + r.start, first[r.key] + r.stop)
                                    for r in partition.ranges])
        # Answered a slice at a time, so a task's memory does not grow with its rows.
        for start in range(0, positions.size, SCAN_ROWS):
            table = read_query(window, query, rows.take(positions[start:start + SCAN_ROWS]))
            for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                yield _to_spark_batch(batch, self.spark_arrow)


# Metadata columns whose pushed filters the feed evaluates (before reading data values).
_CHANGE_FILTER_COLUMNS = {CHANGE_TYPE: str, COMMIT_VERSION: int, ROW_ID: int}


class FilteringChangeFeedReader(ChangeFeedReader):
    """The change-feed reader that also takes the filters Spark pushes down."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        return _take_filters(filters, _change_filter_expr, self.filters)


def _change_filter_expr(f: Filter) -> Expr | None:
    """A pushed filter on the feed's metadata columns, literals made exact; else None."""
    if isinstance(f, Not):
        inner = _change_filter_expr(f.child)
        return None if inner is None else Call("not", (inner,))
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1 or attribute[0] not in _CHANGE_FILTER_COLUMNS:
        return None
    kind = _CHANGE_FILTER_COLUMNS[attribute[0]]
    if isinstance(f, IsNull | IsNotNull):
        return _filter_expr(f)
    if isinstance(f, In):
        values = list(f.value)
    elif isinstance(f, _COMPARISON_TYPES):
        values = [f.value]
    else:
        return None
    exact: list[str | int] = []
    for v in values:
        if kind is str and isinstance(v, str):
            exact.append(v)
        elif (kind is int and isinstance(v, int | Decimal) and not isinstance(v, bool)
              and v == int(v) and 0 <= int(v) < 1 << 64):
            exact.append(int(v))
        else:
            return None
    column = Column((attribute[0],))
    if isinstance(f, In):
        return Call("in", (column,) + tuple(Literal(v) for v in exact))
    return Call(_COMPARISONS[type(f)], (column, Literal(exact[0])))


# ------------------------------------------------------------------ MemWAL tables


def _lsm(ds: LanceDataset, options: dict[str, str]) -> bool:
    """Whether a read is of the LSM view: a table with a MemWAL, unless baseOnly."""
    return not _flag(options, "baseOnly") and load_mem_wal_index(ds) is not None


@dataclass(frozen=True)
class LsmPartition(InputPartition):
    """Parts of a split LSM read (see :mod:`lance_sql.memwal.read.split`), each whole:
    base row ranges (masked by the generations ``masks``) and region parts."""

    ranges: tuple[FragmentRange, ...] = ()
    masks: tuple[GenerationPin, ...] = ()
    regions: tuple[RegionPart, ...] = ()
    # base rows of the ranges' fragments a later base row of their key supersedes, as
    # planned (none: the base's keys are unique; see LsmSplit.superseded_in)
    superseded: Mapping[int, np.ndarray] = field(default_factory=dict)


class LsmReader(DataSourceReader):
    """Reads a MemWAL table's LSM view: the base table once, cut into partitions by
    bytes like a table read, each dropping the base rows newer keys hide; each region's
    unmerged generations as one region part, deduplicated alone and handed to the
    partition with the fewest bytes so far (no task is added for them)."""

    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        ds = _open(options)
        self.uri = options["path"]
        self.version = ds.version
        pinned = _option(options, "version") or _option(options, "timestamp")
        # an older version is read from its MemWAL index snapshot (the generations it
        # lists as unmerged); the latest from the region manifests
        self.consistency = "snapshot" if pinned else "strong"
        self.rows_per_partition = _positive_int(options, "rowsPerPartition", None)
        self.policy = _split_policy(options)
        self.columns = [f.name for f in schema.fields]
        self.spark_arrow = _spark_arrow_schema(ds.schema, schema)
        self.filters: list[Expr] = []

    def partitions(self) -> Sequence[LsmPartition]:
        view = LsmView(LanceDataset(self.uri, self.version), consistency=self.consistency)
        predicate = _conjunction(self.filters)
        split = plan_split(view, predicate)
        ds = view.base
        bounds = None if predicate is None else address_ranges(ds.store, ds.manifest,
                                                               predicate)
        fragments = [frag for frag, _, _ in fragment_spans(ds.manifest.fragments, bounds)]
        read = list(build_scan_plan(ds.manifest, self.columns,
                                    schema_metadata=False).read_fields)
        ranges: list[tuple[FragmentRange, ...]]
        if self.rows_per_partition is not None:  # the base in chunks of that many rows
            step = self.rows_per_partition
            ranges = [(FragmentRange(f.id, start, min(f.physical_rows, start + step)),)
                      for f in fragments for start in range(0, f.physical_rows, step)]
        else:
            base = plan_partitions([fragment_size(f, read) for f in fragments], self.policy)
            ranges = [tuple(FragmentRange(r.key, r.start, r.stop) for r in p) for p in base]
        sized = [(part, self._region_bytes(view, part)) for part in split.regions]
        if not ranges:
            ranges = [()] * max(1, min(len(sized), self.policy.min_partitions))
        load = [sum(_range_bytes(ds, r, read) for r in p) for p in ranges]
        regions: list[list[RegionPart]] = [[] for _ in ranges]
        for part, size in sorted(sized, key=lambda x: -x[1]):  # largest first
            at = int(np.argmin(load))
            regions[at].append(part)
            load[at] += size
        return [LsmPartition(r, split.masks if r else (), tuple(g), split.superseded_in(r))
                for r, g in zip(ranges, regions, strict=True)]

    def _region_bytes(self, view: LsmView, part: RegionPart) -> int:
        """The bytes of a region part's generations (their data files)."""
        total = 0
        for pin in part.generations:
            source = view.generation_source(pin.region, 0, pin.gen, pin.path)
            if source is not None:
                total += sum(fragment_size(f, source.dataset.manifest.schema.fields).bytes
                             for f in source.dataset.manifest.fragments)
        return total

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = _own_partition(partition, LsmPartition)
        # no regions listed, no MemTables: the sources are the ones the partition names
        view = LsmView(LanceDataset(self.uri, self.version), consistency="snapshot")
        predicate = _conjunction(self.filters)
        nodes: list[ExecNode | None] = [
            base_plan(view, partition.ranges, partition.masks, self.columns, predicate,
                      partition.superseded)
        ] if partition.ranges else []
        nodes += [region_plan(view, part, self.columns, predicate)
                  for part in partition.regions]
        for node in nodes:
            if node is None:
                continue
            for batch in node.execute():
                for piece in pa.Table.from_batches([batch]).to_batches(
                        max_chunksize=BATCH_ROWS):
                    yield _to_spark_batch(piece, self.spark_arrow)


def _range_bytes(ds: LanceDataset, r: FragmentRange, read: list) -> int:
    """The bytes a base row range is estimated to read."""
    fragment = next(f for f in ds.manifest.fragments if f.id == r.fragment)
    size = fragment_size(fragment, read)
    return size.bytes * (r.stop - r.start) // max(1, size.rows)


class FilteringLsmReader(LsmReader):
    """The LSM reader that also takes the filters Spark pushes down: they prune regions
    and go into every source, each key's newest row decided before they apply."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        return _take_filters(filters, _filter_expr, self.filters)


@dataclass(frozen=True)
class ReadPartition(InputPartition):
    """Row ranges of one or more fragments, read in table order by one Spark task."""

    ranges: tuple[RowRange, ...]


class LanceReader(DataSourceReader):
    """Reads one table version, one Spark partition per slice of fragments."""

    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        ds = _open(options)
        self.uri = options["path"]
        self.version = ds.version
        self.rows_per_partition = _positive_int(options, "rowsPerPartition", None)
        self.policy = _split_policy(options)
        self.columns = [f.name for f in schema.fields]
        self.spark_arrow = _spark_arrow_schema(ds.schema, schema)
        self.filters: list[Expr] = []

    def partitions(self) -> Sequence[ReadPartition]:
        ds = LanceDataset(self.uri, self.version)
        tree = _conjunction(self.filters)
        bounds = None if tree is None else address_ranges(ds.store, ds.manifest, tree)
        fragments = [frag for frag, _, _ in fragment_spans(ds.manifest.fragments, bounds)]
        if self.rows_per_partition is not None:
            step = self.rows_per_partition
            parts = [ReadPartition((RowRange(f.id, start, min(f.physical_rows, start + step)),))
                     for f in fragments for start in range(0, f.physical_rows, step)]
        else:
            read = list(self._plan(ds).read_fields)
            sizes = [fragment_size(f, read) for f in fragments]
            parts = [ReadPartition(ranges) for ranges in plan_partitions(sizes, self.policy)]
        return parts or [ReadPartition(())]

    def _plan(self, ds: LanceDataset) -> ScanPlan:
        """The columns read and the pushed filters, as every fragment's scan applies them."""
        return build_scan_plan(ds.manifest, self.columns, predicate=_conjunction(self.filters),
                               schema_metadata=False)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = _own_partition(partition, ReadPartition)
        if not partition.ranges:
            return
        ds = LanceDataset(self.uri, self.version)
        by_id = {f.id: f for f in ds.manifest.fragments}
        plan = self._plan(ds)
        for part in partition.ranges:
            frag = by_id[part.key]
            # Scanned a slice at a time, so a task's memory does not grow with its bytes.
            for start in range(part.start, part.stop, SCAN_ROWS):
                stop = min(part.stop, start + SCAN_ROWS)
                table = scan_fragment(ds.store, ds.manifest, frag, plan, offset=start,
                                      length=stop - start)
                for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                    yield _to_spark_batch(batch, self.spark_arrow)


class FilteringLanceReader(LanceReader):
    """The table reader that also takes the filters Spark pushes down."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        return _take_filters(filters, _filter_expr, self.filters)


def _take_filters(filters: list[Filter], convert: Callable[[Filter], Expr | None],
                  taken: list[Expr]) -> Iterator[Filter]:
    """Keep in ``taken`` the filters ``convert`` can evaluate; yield the rest back to Spark."""
    for f in filters:
        expr = convert(f)
        if expr is None:
            yield f
        else:
            taken.append(expr)


def _conjunction(filters: list[Expr]) -> Expr | None:
    """The pushed filters as one expression (None when there are none)."""
    if not filters:
        return None
    return Call("and", tuple(filters)) if len(filters) > 1 else filters[0]


_COMPARISON_TYPES = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_COMPARISONS: dict[type[Filter], str] = dict(
    zip(_COMPARISON_TYPES, ("=", ">", ">=", "<", "<="), strict=True))


def _filter_expr(f: Filter) -> Expr | None:
    """Spark's pushed filter in lance_sql's filter model; None if we do not evaluate it."""
    if isinstance(f, Not):
        inner = _filter_expr(f.child)
        return None if inner is None else Call("not", (inner,))
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1:
        return None  # nested fields stay with Spark
    column = Column((attribute[0],))
    op = _COMPARISONS.get(type(f))
    if op is not None and isinstance(f, _COMPARISON_TYPES):  # exact types, not subclasses
        return Call(op, (column, Literal(f.value)))
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return Call("is_null", (column,))
        # never NULL: a NULL column value is false here (so true under a NOT)
        return Call("and", (Call("is_not_null", (column,)),
                            Call("=", (column, Literal(f.value)))))
    if isinstance(f, In):
        return Call("in", (column,) + tuple(Literal(v) for v in f.value))
    if isinstance(f, IsNull):
        return Call("is_null", (column,))
    if isinstance(f, IsNotNull):
        return Call("is_not_null", (column,))
    if isinstance(f, StringStartsWith):
        return Call("starts_with", (column, Literal(f.value)))
    if isinstance(f, StringEndsWith):
        return Call("ends_with", (column, Literal(f.value)))
    return None


def _spark_arrow_schema(table: pa.Schema, spark: T.StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``spark`` (nullability included)."""
    out = []
    for f in spark.fields:
        if f.name in SYSTEM_COLUMNS and f.name not in table.names:
            out.append(pa.field(f.name, pa.decimal128(20, 0), f.nullable))
        else:
            out.append(pa.field(f.name, _spark_arrow(table.field(f.name).type, f.dataType),
                                f.nullable))
    return pa.schema(out)


def _spark_arrow(lance: pa.DataType, spark: T.DataType) -> pa.DataType:
    """Arrow type of a Spark column whose data comes from Lance type ``lance``."""
    if pa.types.is_dictionary(lance):
        return _spark_arrow(lance.value_type, spark)
    if isinstance(spark, T.ArrayType):
        item = _spark_arrow(lance.value_type, spark.elementType)
        return pa.list_(pa.field("element", item, spark.containsNull))
    if isinstance(spark, T.StructType):
        return pa.struct([
            pa.field(sf.name, _spark_arrow(lance.field(sf.name).type, sf.dataType), sf.nullable)
            for sf in spark.fields
        ])
    if isinstance(spark, T.MapType):
        return pa.map_(pa.field("key", _spark_arrow(lance.key_type, spark.keyType), False),
                       pa.field("value", _spark_arrow(lance.item_type, spark.valueType),
                                spark.valueContainsNull))
    if isinstance(spark, T.TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(spark, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(spark, T.DayTimeIntervalType):
        return pa.duration("us")
    return arrow_schema(T.StructType([T.StructField("c", spark)])).field(0).type


def _to_spark_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for array, target in zip(batch.columns, schema, strict=True):
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        columns.append(_as_spark(array, target))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _as_spark(array: pa.Array, target: pa.Field) -> pa.Array:
    """A Lance column as Spark's Arrow type. Spark keeps times to the microsecond: finer
    ones are rounded down to it, as Spark converts an instant (nested ones are cut
    toward zero, the same for times after 1970)."""
    t = array.type
    if (pa.types.is_timestamp(t) or pa.types.is_duration(t)) and t.unit == "ns":
        nanos = np.asarray(array.cast(pa.int64()).fill_null(0).to_numpy(), np.int64)
        micros = pa.array(np.floor_divide(nanos, 1000), pa.int64(),
                          mask=np.asarray(array.is_null().to_numpy(zero_copy_only=False)))
        array = micros.cast(pa.timestamp("us", t.tz) if pa.types.is_timestamp(t)
                            else pa.duration("us"))
    try:
        return array.cast(target.type)
    except pa.ArrowInvalid:
        if not _finer_than_micros(t):
            raise
        return array.cast(target.type, safe=False)


def _finer_than_micros(t: pa.DataType) -> bool:
    """Whether ``t`` holds nanosecond times or durations at some depth."""
    if (pa.types.is_timestamp(t) or pa.types.is_duration(t)) and t.unit == "ns":
        return True
    if pa.types.is_struct(t):
        return any(_finer_than_micros(t.field(i).type) for i in range(t.num_fields))
    if is_list(t):
        return _finer_than_micros(t.value_type)
    return False


@dataclass
class LanceCommitMessage(WriterCommitMessage):
    """What one task wrote: serialized fragments and the files behind them."""

    fragments: list[bytes] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


class LanceWriter(DataSourceArrowWriter):
    """Writes Spark tasks' Arrow batches into fragments, committed once by the driver."""

    def __init__(self, options: dict[str, str], schema: T.StructType, overwrite: bool) -> None:
        if "path" not in options:
            raise InvalidInputError("the lance data source needs a path: .save(uri)")
        self.uri = options["path"]
        self.overwrite = overwrite
        self.job = JobFiles.new(uuid.uuid4().hex[:16])
        self.max_rows_per_file = _positive_int(options, "maxRowsPerFile", 1 << 20)
        self.stable_row_ids = _flag(options, "enableStableRowIds")
        key = _option(options, "primaryKey")
        primary_key = [c.strip() for c in key.split(",") if c.strip()] if key else []
        self.commit_config = _commit_config(options)
        self.target = open_for_write(self.uri, arrow_schema(schema), overwrite=overwrite,
                                     commit_config=self.commit_config,
                                     primary_key=primary_key,
                                     stable_row_ids=self.stable_row_ids)
        if self.target.version is not None and not overwrite:
            check_writable(self.target.schema.to_arrow(), schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        fragments, keys = write_job_fragments(self.uri, self.target, self.job, iterator,
                                              max_rows_per_file=self.max_rows_per_file)
        return LanceCommitMessage([f.to_proto().SerializeToString() for f in fragments], keys)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_job(self.uri, self.target, self.job,
                   [m.fragments for m in _own_messages(messages)],
                   overwrite=self.overwrite, commit_config=self.commit_config,
                   stable_row_ids=self.stable_row_ids)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.remove_all(self.uri, [k for m in _own_messages(messages) for k in m.keys])


def _own_messages(messages: list[WriterCommitMessage | None]) -> list[LanceCommitMessage]:
    """The tasks' commit messages (None: a task that sent none), checked to be ours."""
    own: list[LanceCommitMessage] = []
    for m in messages:
        if m is None:
            continue
        if not isinstance(m, LanceCommitMessage):
            raise InvalidInputError(f"not a lance commit message: {type(m).__name__}")
        own.append(m)
    return own

