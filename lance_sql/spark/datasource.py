"""The ``lance`` PySpark Python data source: bulk writes and parallel reads.

Writes follow Delta's shape: each task writes data files for its partitions with
lance_sql's writer and returns the fragments as a commit message; the driver then
commits exactly one transaction, pinned to the version read when the job started,
so a concurrent append rebases and a concurrent overwrite fails the job. Every file
a job writes is named with a job-specific prefix, so an aborted job — including
tasks that died without sending a message — is cleaned up by that prefix.

Reads make one input partition per fragment (large fragments split into row
ranges). Options: ``version`` (number or tag), ``timestamp``, ``columns``,
``withRowId`` / ``withRowAddress``. With ``spark.sql.python.filterPushdown.enabled``
on, register with :func:`lance_sql.spark.register` and simple filters are
evaluated inside the scan (and prune fragments by row address).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

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

from lance_sql.errors import InvalidInputError, UnsupportedFeatureError
from lance_sql.io.uri import open_store
from lance_sql.spark.types import arrow_schema, check_writable, spark_schema
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.expr import Call, Column, Expr, Literal, rowaddr_bounds, to_pyarrow
from lance_sql.table.jobs import JobFiles, commit_job, open_for_write, write_job_fragments
from lance_sql.table.scan import ROW_ADDR, ROW_ID, ScanPlan, scan_fragment
from lance_sql.table.timetravel import version_at

PARTITION_ROWS = 1 << 20
_TRUE = ("true", "1", "yes")


def _open(options: dict[str, str]) -> LanceDataset:
    if "path" not in options:
        raise InvalidInputError("the lance data source needs a path: .load(uri) or .save(uri)")
    version: int | str | None = options.get("version")
    if "timestamp" in options:
        if version is not None:
            raise InvalidInputError("give either the version or the timestamp option, not both")
        when = dt.datetime.fromisoformat(options["timestamp"].replace("Z", "+00:00"))
        version = version_at(open_store(options["path"]), when)
    return LanceDataset(options["path"], version)


def _flag(options: dict[str, str], *names: str) -> bool:
    return any(options.get(n, "false").lower() in _TRUE for n in names)


class LanceDataSource(DataSource):
    """``spark.read.format("lance")`` / ``df.write.format("lance")``."""

    @classmethod
    def name(cls) -> str:
        return "lance"

    def schema(self) -> T.StructType:
        if _flag(self.options, "readChangeFeed"):
            raise UnsupportedFeatureError(
                "readChangeFeed needs the change data feed (table_changes), which lance_sql "
                "does not provide yet"
            )
        ds = _open(dict(self.options))
        table = ds.schema
        columns = self.options.get("columns")
        if columns:
            table = pa.schema([table.field(c.strip()) for c in columns.split(",")])
        fields = list(table)
        if _flag(self.options, "withRowId", "with_row_id"):
            fields.append(pa.field(ROW_ID, pa.uint64(), nullable=False))
        if _flag(self.options, "withRowAddress", "with_row_address"):
            fields.append(pa.field(ROW_ADDR, pa.uint64(), nullable=False))
        return spark_schema(pa.schema(fields))

    def reader(self, schema: T.StructType) -> LanceReader:
        return LanceReader(dict(self.options), schema)

    def writer(self, schema: T.StructType, overwrite: bool) -> LanceWriter:
        return LanceWriter(dict(self.options), schema, overwrite)


class FilteringLanceDataSource(LanceDataSource):
    """The same source with filter pushdown (needs Spark's Python pushdown flag on)."""

    def reader(self, schema: T.StructType) -> LanceReader:
        return FilteringLanceReader(dict(self.options), schema)


@dataclass(frozen=True)
class FragmentRange(InputPartition):
    fragment_id: int
    start: int
    stop: int


class LanceReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        ds = _open(options)
        self.uri = options["path"]
        self.version = ds.version
        self.columns = [f.name for f in schema.fields]
        self.spark_arrow = _spark_arrow_schema(ds.schema, schema)
        self.filters: list[Expr] = []

    def partitions(self) -> Sequence[FragmentRange]:
        ds = LanceDataset(self.uri, self.version)
        bounds = self._address_bounds()
        parts = []
        for frag in ds.get_fragments():
            if frag.num_rows == 0 or not _overlaps(bounds, frag.id, frag.physical_rows):
                continue
            for start in range(0, frag.physical_rows, PARTITION_ROWS):
                parts.append(FragmentRange(frag.id, start,
                                           min(frag.physical_rows, start + PARTITION_ROWS)))
        return parts or [FragmentRange(-1, 0, 0)]

    def _address_bounds(self) -> list[tuple[int, int]] | None:
        if not self.filters:
            return None
        tree = Call("and", tuple(self.filters)) if len(self.filters) > 1 else self.filters[0]
        return rowaddr_bounds(tree, ROW_ADDR)

    def read(self, partition: FragmentRange) -> Iterator[pa.RecordBatch]:
        if partition.fragment_id < 0:
            return
        ds = LanceDataset(self.uri, self.version)
        frag = next(f for f in ds.get_fragments() if f.id == partition.fragment_id)
        full = pa.schema(list(ds.schema) + [pa.field(ROW_ID, pa.uint64()),
                                            pa.field(ROW_ADDR, pa.uint64())])
        filter_expr = None
        filter_columns: frozenset[str] | None = None
        needed = set(self.columns)
        if self.filters:
            tree = Call("and", tuple(self.filters)) if len(self.filters) > 1 else self.filters[0]
            filter_expr = to_pyarrow(tree, full)
            filter_columns = frozenset(c.path[0] for c in _columns(tree))
            needed |= filter_columns
        plan = ScanPlan(
            output_fields=tuple(self.columns),
            read_fields=tuple(f for f in ds.manifest.schema.fields if f.name in needed),
            filter=filter_expr,
            filter_text=None,
            need_row_id=ROW_ID in needed,
            need_row_addr=ROW_ADDR in needed,
            output_schema=pa.schema([full.field(c) for c in self.columns]),
            filter_columns=filter_columns,
        )
        table = scan_fragment(ds.store, ds.manifest, frag, plan, offset=partition.start,
                              length=partition.stop - partition.start)
        for batch in table.to_batches(max_chunksize=1 << 20):
            yield _to_spark_batch(batch, self.spark_arrow)


class FilteringLanceReader(LanceReader):
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        for f in filters:
            expr = _filter_expr(f)
            if expr is None:
                yield f
            else:
                self.filters.append(expr)


def _columns(expr: Expr) -> list[Column]:
    if isinstance(expr, Column):
        return [expr]
    if isinstance(expr, Call):
        return [c for a in expr.args for c in _columns(a)]
    return []


def _overlaps(bounds: list[tuple[int, int]] | None, fragment_id: int, rows: int) -> bool:
    if bounds is None:
        return True
    lo, hi = fragment_id << 32, (fragment_id << 32) + rows
    return any(b_lo < hi and b_hi > lo for b_lo, b_hi in bounds)


_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<",
                LessThanOrEqual: "<="}


def _filter_expr(f: Filter) -> Expr | None:
    """Spark's pushed filter in lance_sql's filter model; None if we do not evaluate it."""
    if isinstance(f, Not):
        inner = _filter_expr(f.child)
        return None if inner is None else Call("not", (inner,))
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1:
        return None  # nested fields stay with Spark
    column = Column((attribute[0],))
    if type(f) in _COMPARISONS:
        return Call(_COMPARISONS[type(f)], (column, Literal(f.value)))
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return Call("is_null", (column,))
        return Call("=", (column, Literal(f.value)))
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
        if f.name in (ROW_ID, ROW_ADDR):
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
        columns.append(array.cast(target.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@dataclass
class LanceCommitMessage(WriterCommitMessage):
    """What one task wrote: serialized fragments and the files behind them."""

    fragments: list[bytes] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


class LanceWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: T.StructType, overwrite: bool) -> None:
        if "path" not in options:
            raise InvalidInputError("the lance data source needs a path: .save(uri)")
        self.uri = options["path"]
        self.overwrite = overwrite
        self.job = JobFiles.new(uuid.uuid4().hex[:16])
        self.max_rows_per_file = int(options.get("maxRowsPerFile", 1 << 20))
        self.target = open_for_write(self.uri, arrow_schema(schema), overwrite=overwrite)
        if self.target.previous is not None and not overwrite:
            check_writable(self.target.previous.schema.to_arrow(), schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        fragments, keys = write_job_fragments(self.uri, self.target, self.job, iterator,
                                              max_rows_per_file=self.max_rows_per_file)
        return LanceCommitMessage([f.to_proto().SerializeToString() for f in fragments], keys)

    def commit(self, messages: list[LanceCommitMessage | None]) -> None:
        commit_job(self.uri, self.target, self.job, [m.fragments for m in messages if m],
                   overwrite=self.overwrite)

    def abort(self, messages: list[LanceCommitMessage | None]) -> None:
        self.job.remove_all(self.uri, [k for m in messages if m for k in m.keys])

