"""A Lance table version as DataFusion sees it: a ``pyarrow.dataset.Dataset`` subclass.

DataFusion 55's Python bindings take any ``Dataset`` subclass as a table (there is no
pure-Python TableProvider). It calls, by name:

* ``schema`` (often; cached here),
* ``scanner(columns, filter)`` at planning, reading only ``projected_schema``,
* ``get_fragments(filter)`` — its length is the number of partitions; we prune here,
* per partition ``fragment.scanner(schema, columns=, filter=, batch_size=)`` on worker
  threads, then ``projected_schema`` and ``to_batches()``.

Pushed filters are *exact*: DataFusion keeps no filter above the scan, so each unit
applies it. Batches are not validated by DataFusion, so every batch is cast to the
projected schema. Units read lazily in chunks, so ``LIMIT`` stops early; a unit with
no columns and no filter answers from metadata. Errors are carried out typed through
the :class:`ErrorRegistry`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import first_rows
from lance_sql.sql.batch_export import exportable
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.pyarrow_filter import as_expression, decode, referenced_columns, rows_filter
from lance_sql.sql.streams import ScanScope, current_scope
from lance_sql.table import (
    SYSTEM_COLUMNS,
    IndexedRows,
    RangeSizer,
    ScanPlan,
    address_ranges,
    batch_rows,
    build_scan_plan,
    fragment_spans,
    live_ranges,
    live_rows,
    no_helpers,
    plan_indexed,
    reads_are_small,
    reads_together,
    row_width,
    rows_only,
    runs_read_together,
    scan_fragment,
    scan_fragments,
    scan_rows,
)

SYSTEM_FIELDS = tuple(pa.field(name, pa.uint64()) for name in SYSTEM_COLUMNS)
CHUNK_ROWS = 128 * 1024  # rows per read when the query has a LIMIT, and at least otherwise
MAX_CHUNK_ROWS = 1 << 20
CHUNK_BYTES = 16 << 20  # decoded bytes a read aims at: wide rows are read fewer at a time
# Reads of a scan whose whole result is collected (ScanScope.collects): the result holds
# every row anyway, so reads aim at whole fragments. Each read costs ~0.5 ms of Python
# a column (measured: a 1M-row, 4-column fragment read in 1/2/3/8 pieces took 42/45/50/68
# ms of CPU); a 10M-row SELECT * of strings read 29 chunks of 16 MiB, now 12 (a first read
# of CHUNK_ROWS learns the strings' widths, once per partition: see UnitScanner._batches).
COLLECTED_CHUNK_BYTES = 128 << 20
COLLECTED_MAX_CHUNK_ROWS = 4 << 20
COUNT_BATCH_ROWS = 1 << 22
# Rows per batch handed to DataFusion by scans whose batches only feed an aggregate or a
# sort (PlannedDataset.bulk_batches): each batch costs ~30 us of interpreter time to hand
# over, and 16x DataFusion's default size makes that negligible while keeping an
# operator's work between two cancellation checks short.
BULK_BATCH_ROWS = 128 * 1024
MIN_UNIT_ROWS = 64 * 1024
# At most this many rows are read on the calling thread (ScanScope.inline): about a
# chunk's reading, so Ctrl-C waits no longer than that.
INLINE_MAX_ROWS = 2 * CHUNK_ROWS


@dataclass
class PushedScan:
    """What DataFusion asked of the table during planning (for EXPLAIN)."""

    columns: list[str] | None = None
    filter: str | None = None
    units: int = 0
    fragments_total: int = 0
    fragments_kept: int = 0
    index: str | None = None  # how a scalar index answered (None: no index used)


@dataclass(frozen=True)
class ScanUnit:
    """One partition: a row range of one fragment, read in the execution ``scope``."""

    table: LanceTableDataset
    fragment: Fragment
    start: int
    stop: int
    scope: ScanScope

    @property
    def inline_rows(self) -> int | None:
        """Physical rows it reads at most (see :meth:`PlannedDataset._inline`)."""
        return self.stop - self.start

    def scanner(
        self,
        schema: pa.Schema | None = None,
        columns: list[str] | None = None,
        filter: pc.Expression | None = None,
        batch_size: int | None = None,
        **_: object,
    ) -> UnitScanner:
        return open_scanner(self, UnitScanner, columns, filter, batch_size)


S = TypeVar("S")


def open_scanner(unit: Any, make: Callable[..., S], columns: list[str] | None,
                 filter: Any, batch_size: int | None) -> S:
    """Start one partition's scanner for DataFusion: refused once the unit's execution has
    ended, counted as running until DataFusion drops it, errors typed by the session."""
    try:
        unit.scope.check()  # the execution has ended: start nothing new
        scanner = make(unit, columns, as_expression(filter), batch_size or 8192)
        unit.scope.open(scanner)
    except Exception as exc:
        raise unit.table.errors.wrap(exc) from exc
    return scanner


class UnitScanner:
    """Reads one unit lazily, chunk by chunk."""

    def __init__(self, unit: ScanUnit, columns: list[str] | None,
                 filter: pc.Expression | None, batch_size: int,
                 plan: ScanPlan | None = None) -> None:
        """``plan``: the plan of these columns and filter, when made already (for another
        unit of the same table)."""
        table = unit.table
        names = list(columns) if columns is not None else table.schema.names
        self.unit = unit
        self.batch_size = batch_size_for(unit.scope, table, batch_size)
        self.filter = filter
        self.names = names
        self.plan = plan if plan is not None else self._plan()
        self.projected_schema = self.plan.output_schema
        self.collects = unit.scope.collects
        self.read_key = tuple(names)  # (system columns among them: the plan's are these)
        self.chunk_rows, self.widths_known = chunk_rows(
            self.plan, limited=table.limit_hint is not None, collects=self.collects)
        self.filter_width = filter_width(self.plan)
        # a filter and a LIMIT: reads sized by the rate rows matched at so far, each
        # stopping at the row completing the limit (a sequence's parts share one sizer)
        self.sizer = (RangeSizer(table.limit_hint)
                      if table.limit_hint is not None and filter is not None else None)
        # DataFusion runs the query's other units as partitions beside this one: its
        # decodes take no helper threads (see parallel.no_helpers)
        self.beside_others = unit.scope.units > 1

    def _plan(self) -> ScanPlan:
        filter = self.filter
        if filter is None:
            return build_scan_plan(self.unit.table.manifest, self.names,
                                   schema_metadata=False)
        tree = decode(filter)
        return build_scan_plan(
            self.unit.table.manifest, self.names,
            filter=rows_filter(filter, tree, self.unit.table.schema),
            filter_columns=referenced_columns(filter), schema_metadata=False,
            filter_tree=tree)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.unit.scope.reading(self._batches())
        except Exception as exc:
            raise self.unit.table.errors.wrap(exc) from exc

    def whole_and_small(self, plan: ScanPlan) -> bool:
        """Whether this unit may be read together with others of ``plan`` (one run of a
        :class:`SequentialScanner`): a whole small fragment read by ``plan`` (columns to
        decode, no LIMIT) in one chunk."""
        unit = self.unit
        return (type(self) is UnitScanner and self.plan is plan and self.sizer is None
                and unit.table.limit_hint is None and bool(plan.read_fields)
                and unit.stop <= min(self.chunk_rows, CHUNK_ROWS)
                and reads_together(unit.fragment, unit.start, unit.stop))

    def read_together(self, parts: Sequence[UnitScanner]) -> Iterator[pa.RecordBatch]:
        """The batches of ``parts`` (this one first, all :meth:`whole_and_small`), their
        fragments read together (:func:`scan_fragments`: each column decoded in one pass
        across them), each part's rows as its own read would hand them over."""
        try:
            yield from self.unit.scope.reading(self._together(parts))
        except Exception as exc:
            raise self.unit.table.errors.wrap(exc) from exc

    def _together(self, parts: Sequence[UnitScanner]) -> Iterator[pa.RecordBatch]:
        unit, table = self.unit, self.unit.table
        unit.scope.check()
        with no_helpers(self.beside_others):
            chunks = scan_fragments(table.store, table.manifest,
                                    [p.unit.fragment for p in parts], self.plan)
        for part, chunk in zip(parts, chunks, strict=True):
            for batch in chunk.to_batches(max_chunksize=part.batch_size):
                if batch.num_rows:
                    unit.scope.check()
                    yield exportable(batch)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        unit, table = self.unit, self.unit.table
        remaining = table.limit_hint
        if not self.plan.output_fields and self.filter is None:
            yield from self._count_only(remaining)
            return
        # With variable-width columns the first read is small; later ones are sized by
        # the bytes a row of the previous read took (a guess could be far off: a first
        # read of long strings sized by it would decode many times the budget at once).
        step = self.chunk_rows if self.widths_known else min(self.chunk_rows, CHUNK_ROWS)
        # a collected result of an unfiltered scan: the width another unit's read learned
        # sizes the first read here too (the first read of every unit would otherwise
        # be small: 20 reads for a 10M-row SELECT * of strings where 12 do)
        learns = self.collects and self.filter is None and remaining is None \
            and not self.widths_known
        learned = table.row_bytes.get(self.read_key) if learns else None
        if learned is not None:
            step = _rows_for(learned, collects=True)
        start = unit.start
        sizer = self.sizer
        while start < unit.stop:
            unit.scope.check()  # the query ended: stop before reading more
            if sizer is None:
                length = min(step, unit.stop - start)
                chunk = self._read_chunk(start, length)
            else:
                length = min(sizer.next_rows(), unit.stop - start)
                chunk = self._read_chunk(start, length, sizer.still_wanted())
                sizer.record(length, chunk.num_rows)
            start += length
            if remaining is None:
                step = self._next_step(chunk, length)
                if learns and chunk.num_rows:
                    table.row_bytes[self.read_key] = chunk.nbytes / chunk.num_rows
            if remaining is not None:
                chunk = first_rows(chunk, remaining)
                remaining -= chunk.num_rows
            # Batches of at most self.batch_size rows (see batch_size_for)
            for batch in chunk.to_batches(max_chunksize=self.batch_size):
                if batch.num_rows:
                    unit.scope.check()
                    yield exportable(batch)
            if remaining == 0:
                return

    def _next_step(self, chunk: pa.Table, length: int) -> int:
        """Rows to read next, by what the last read of ``length`` rows decoded."""
        if self.filter_width is not None:
            # the filter's columns are decoded for every row, the others for matching
            # rows only: a selective filter reads many rows at a time
            return _rows_for(self.filter_width + chunk.nbytes / max(length, 1), self.collects)
        if chunk.num_rows:
            return _rows_for(chunk.nbytes / chunk.num_rows, self.collects)
        return self.chunk_rows

    def _read_chunk(self, start: int, length: int, max_rows: int | None = None
                    ) -> pa.Table:
        table = self.unit.table
        with no_helpers(self.beside_others):
            return scan_fragment(table.store, table.manifest, self.unit.fragment, self.plan,
                                 offset=start, length=length, max_rows=max_rows)

    def _count_only(self, limit: int | None) -> Iterator[pa.RecordBatch]:
        unit = self.unit
        rows = live_rows(unit.table.store, unit.table.manifest, unit.fragment, unit.start,
                         unit.stop)
        if limit is not None:
            rows = min(rows, limit)
        # Few, large batches: each batch crossing into DataFusion costs more than counting.
        # Not one per unit, though: DataFusion counts by evaluating a literal over the batch
        # (4 bytes a row), and a unit counted from metadata may claim up to 2**32 rows.
        for start in range(0, rows, COUNT_BATCH_ROWS):
            yield from rows_only(min(COUNT_BATCH_ROWS, rows - start)).to_batches()


def batch_size_for(scope: ScanScope, table: PlannedDataset, batch_size: int) -> int | None:
    """Rows per batch a scan hands DataFusion (None: each chunk whole, as read).

    Each batch costs interpreter time to hand over (~30 us, and a hand-off of the
    interpreter lock between DataFusion's threads), but some operators (a nested-loop
    join) check for cancellation only between batches and work per batch in proportion
    to its size: DataFusion's batch size, then. Larger (BULK_BATCH_ROWS) when the batches
    feed only an aggregate or a sort; chunks whole when the execution collects the
    result of a plan that only streams its scans (``scope.collects``), where no operator
    works on them but the collection itself (measured on a 10M-row ``SELECT *``:
    ~20% less CPU than 8192-row batches)."""
    if scope.collects:
        return None
    if table.bulk_batches:
        return max(batch_size, BULK_BATCH_ROWS)
    return batch_size


def chunk_rows(plan: ScanPlan, *, limited: bool, collects: bool = False) -> tuple[int, bool]:
    """Rows a scan unit reads at a time, and whether that is known to fit: as many as fit
    ``CHUNK_BYTES`` decoded (by the read columns' widths, variable-width values guessed at
    32 bytes), between ``CHUNK_ROWS`` and ``MAX_CHUNK_ROWS``. Each read has a fixed
    Python cost (per column read, filter and cast). Queries with a LIMIT read
    ``CHUNK_ROWS`` at a time, to stop early; scans whose result is collected (``collects``)
    aim at ``COLLECTED_CHUNK_BYTES``, up to ``COLLECTED_MAX_CHUNK_ROWS``."""
    if limited:
        return CHUNK_ROWS, True
    widths = [_value_bytes(f.to_scan_arrow().type) for f in plan.read_fields]
    width = sum(32 if w is None else w for w in widths) + 8 * len(plan.system_names)
    return _rows_for(width, collects), None not in widths


def filter_width(plan: ScanPlan) -> int | None:
    """Decoded bytes a row of the columns the plan's filter reads (variable-width values
    guessed at 32 bytes); None when there is no filter or its columns are not known.

    A scan reads those columns first, for every row, and the others for the matching
    rows only (see ``lance_sql.table.scan_fragment``)."""
    if plan.filter is None or plan.filter_columns is None:
        return None
    widths = [_value_bytes(f.to_scan_arrow().type) for f in plan.read_fields
              if f.name in plan.filter_columns]
    return sum(32 if w is None else w for w in widths)


def _rows_for(width: float, collects: bool = False) -> int:
    budget, most = ((COLLECTED_CHUNK_BYTES, COLLECTED_MAX_CHUNK_ROWS) if collects
                    else (CHUNK_BYTES, MAX_CHUNK_ROWS))
    return int(max(CHUNK_ROWS, min(most, budget // max(width, 1))))


def _value_bytes(t: pa.DataType) -> int | None:
    """Decoded bytes of one value of ``t`` (None: variable width)."""
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_fixed_size_list(t):
        inner = _value_bytes(t.value_type)
        return None if inner is None else t.list_size * inner
    if pa.types.is_struct(t):
        parts = [_value_bytes(f.type) for f in t]
        return None if None in parts else sum(p for p in parts if p is not None)
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return None


@dataclass(frozen=True)
class IndexUnit:
    """One partition answered by a scalar index: given rows of one fragment."""

    table: LanceTableDataset
    fragment: Fragment
    rows: np.ndarray
    exact: bool            # the index alone decides the planned filter
    planned_filter: str | None
    scope: ScanScope

    @property
    def inline_rows(self) -> int | None:
        return len(self.rows)

    def scanner(self, schema: pa.Schema | None = None, columns: list[str] | None = None,
                filter: pc.Expression | None = None,
                batch_size: int | None = None, **_: object) -> IndexUnitScanner:
        return open_scanner(self, IndexUnitScanner, columns, filter, batch_size)


class IndexUnitScanner(UnitScanner):
    """Reads the rows an index found; the filter is applied only when the index did not
    decide it alone (it is then read for those rows only)."""

    unit: IndexUnit  # type: ignore[assignment]

    def _plan(self) -> ScanPlan:
        unit = self.unit
        if unit.exact and (None if self.filter is None else str(self.filter)) == \
                unit.planned_filter:  # the index decided the filter: read the rows only
            return build_scan_plan(unit.table.manifest, self.names, schema_metadata=False)
        return super()._plan()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        unit, table = self.unit, self.unit.table
        result = scan_rows(table.store, table.manifest, unit.fragment, self.plan, unit.rows)
        if table.limit_hint is not None:
            result = first_rows(result, table.limit_hint)
        for batch in result.to_batches(max_chunksize=self.batch_size):
            if batch.num_rows:
                unit.scope.check()
                yield exportable(batch)


@dataclass(frozen=True)
class SequentialUnit:
    """Several small units read one after the other as one partition, so that an
    execution on the calling thread reads them all there (see ``ScanScope.inline``)."""

    table: PlannedDataset
    units: tuple[Any, ...]
    scope: ScanScope

    def scanner(self, schema: pa.Schema | None = None, columns: list[str] | None = None,
                filter: pc.Expression | None = None, batch_size: int | None = None,
                **_: object) -> SequentialScanner:
        return open_scanner(self, SequentialScanner, columns, filter, batch_size)


class SequentialScanner:
    """The scanners of a :class:`SequentialUnit`'s units, read in turn."""

    def __init__(self, unit: SequentialUnit, columns: list[str] | None,
                 filter: pc.Expression | None, batch_size: int) -> None:
        self.parts: list[UnitScanner] = []
        plan = None  # the scanned units' plan, made once (~0.3 ms each; often 10+ units)
        for part in unit.units:
            indexed = isinstance(part, IndexUnit)
            self.parts.append((IndexUnitScanner if indexed else UnitScanner)(
                part, columns, filter, batch_size, None if indexed else plan))
            if not indexed:
                plan = self.parts[-1].plan
        self.projected_schema = self.parts[0].projected_schema
        # read in turn, the parts count one LIMIT's rows: what one read found sizes the next
        # part's reads, and the rows it still wants bound them
        shared = next((p.sizer for p in self.parts if p.sizer is not None), None)
        for part in self.parts:
            if part.sizer is not None:
                part.sizer = shared

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The parts' batches in turn; each run of whole small fragments read together,
        up to ``batch_rows(plan)`` rows at a time (:meth:`UnitScanner.read_together`)."""
        found = next((p.plan for p in self.parts if type(p) is UnitScanner), None)
        if found is None:
            for part in self.parts:
                yield from part.to_batches()
            return
        plan: ScanPlan = found
        for run, together in runs_read_together(
                self.parts, lambda part: part.whole_and_small(plan),
                lambda part: part.unit.stop, lambda: batch_rows(plan)):
            if together and len(run) >= 2:
                yield from run[0].read_together(run)
            else:
                for part in run:
                    yield from part.to_batches()


@dataclass(frozen=True)
class EmptyUnit:
    """The one partition of a scan that has no rows to read (an empty table, every
    fragment pruned): it yields no batch."""

    table: PlannedDataset
    scope: ScanScope
    inline_rows: int = 0

    def scanner(self, schema: pa.Schema | None = None, columns: list[str] | None = None,
                filter: pc.Expression | None = None, batch_size: int | None = None,
                **_: object) -> EmptyScanner:
        return open_scanner(self, EmptyScanner, columns, filter, batch_size)


class EmptyScanner:
    """The scanner of an :class:`EmptyUnit`: the projected schema and no batches."""

    def __init__(self, unit: EmptyUnit, columns: list[str] | None,
                 filter: pc.Expression | None, batch_size: int) -> None:
        schema = unit.table.schema
        names = list(columns) if columns is not None else schema.names
        self.projected_schema = pa.schema([schema.field(n) for n in names])

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(())


class PlannedDataset(pds.Dataset):
    """A dataset DataFusion plans through without a C++ dataset behind it.

    ``scanner`` only records what was pushed (columns and filter, in ``pushed``) and
    hands back the projected schema; ``get_fragments`` plans the units of work
    (``_units``, per subclass), with errors turned into the session's typed ones.
    Subclasses call :meth:`_start` instead of ``pyarrow``'s ``__init__`` (there is no C++
    dataset behind them).
    """

    _schema: pa.Schema
    pushed: Any  # a record with ``columns`` and ``filter`` (PushedScan, PushedChanges)
    errors: ErrorRegistry

    def _start(self, name: str, schema: pa.Schema, pushed: Any, errors: ErrorRegistry, *,
               query_id: str | None = None, system_columns: bool = False) -> None:
        """The state every planned dataset has: its table name, schema, the record of
        what DataFusion pushed, the session's error registry and the query it serves."""
        self.name = name
        self._schema = schema
        self.pushed = pushed
        self.errors = errors
        self.query_id = query_id
        self.system_columns = system_columns
        self.limit_hint: int | None = None
        # its batches feed only an aggregate or a sort (shortcuts.bulk_scans): its scans
        # hand DataFusion batches of BULK_BATCH_ROWS
        self.bulk_batches = False
        # the query only streams this scan (shortcuts.only_streams): filtered, its units
        # are read as one partition (see get_fragments)
        self.streams_only = False
        # decoded bytes a row of these columns took in a read of a unit, for the first
        # read of the units after it when the result is collected (UnitScanner._batches);
        # written whole from worker threads
        self.row_bytes: dict[tuple[str, ...], float] = {}

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def scanner(self, columns: list[str] | None = None, filter: pc.Expression | None = None,
                **_: object) -> PlanningScanner:
        filter = as_expression(filter)
        self.pushed.columns = list(columns) if columns is not None else None
        self.pushed.filter = None if filter is None else str(filter)
        names = list(columns) if columns is not None else self._schema.names
        return PlanningScanner(pa.schema([self._schema.field(n) for n in names],
                                         metadata=self._schema.metadata))

    def get_fragments(self, filter: pc.Expression | None = None) -> list:
        # Called on the thread that runs the query: its units belong to that execution,
        # which ends only once DataFusion has let go of all of them (its plan is gone).
        try:
            scope = current_scope()
            filter = as_expression(filter)
            units = self._units(filter, scope)
            if not units:
                # No partitions would be a plan DataFusion's sanity check refuses wherever
                # one partition is required (ORDER BY, a window, a TopK LIMIT)
                units = [EmptyUnit(self, scope)]
            if scope.inline:
                units = self._inline(units, scope)
            elif self.limit_hint is not None and len(units) > 1 and all(
                    isinstance(u, ScanUnit | IndexUnit) for u in units):
                # LIMIT (with OFFSET) without ORDER BY takes the scan's first rows: read in
                # one partition they are the table's first rows, the same every run (and
                # pylance's ``to_table(limit=, offset=)``), not whichever unit ran ahead
                units = [SequentialUnit(self, tuple(units), scope)]
            elif self.streams_only and filter is not None and len(units) > 1 and all(
                    isinstance(u, ScanUnit | IndexUnit) for u in units):
                # The scan is all the query's work and it is filtered: decoding the filter's
                # columns is interpreter-bound, and two threads decoding at once mostly wait
                # for each other's interpreter lock (measured on 10M rows: one partition
                # takes ~15% less CPU, and much less time when the machine is busy).
                units = [SequentialUnit(self, tuple(units), scope)]
            elif len(units) > 1:
                units = self._packed(units, filter, scope)
            return scope.adopt(units)
        except Exception as exc:
            raise self.errors.wrap(exc) from exc

    def _inline(self, units: list, scope: ScanScope) -> list:
        """The units as one partition when they are small enough to read on the calling
        thread, or read there in one partition anyway (a LIMIT's scan of a table's units:
        it stops at the rows it returns, and Ctrl-C stops it at its next chunk); else the
        execution moves to a worker thread (``ScanScope.want_worker``)."""
        limited = self.limit_hint is not None and all(
            isinstance(u, ScanUnit | IndexUnit) or getattr(u, "limited", False)
            for u in units)
        rows = 0
        for unit in units:
            size = getattr(unit, "inline_rows", None)
            if size is None:
                if not limited:
                    scope.want_worker()
                continue
            rows += size
        if rows > INLINE_MAX_ROWS and not limited:
            scope.want_worker()
        if len(units) <= 1:
            return units
        return [SequentialUnit(self, tuple(units), scope)]

    def _units(self, filter: pc.Expression | None, scope: ScanScope) -> list:
        raise NotImplementedError

    def _packed(self, units: list, filter: pc.Expression | None, scope: ScanScope) -> list:
        """``units`` with each run of consecutive scan units too small to gain from being
        read side by side (see :mod:`lance_sql.table.read.side_by_side`) read in turn as
        one partition: DataFusion would run them on its threads at once, which then mostly
        hand the interpreter lock to each other (1,000 fragments of 1,000 rows, two
        cores: ``SELECT *`` 2.9 -> 1.7 s, ``SELECT id`` 0.98 -> 0.45 s)."""
        names = set(self.pushed.columns if self.pushed.columns is not None
                    else self._schema.names)
        if filter is not None:
            names |= set(referenced_columns(filter) or ())
        width = row_width(f.type for f in self._schema if f.name in names)
        packed: list = []
        run: list[ScanUnit] = []
        for unit in [*units, None]:
            small = isinstance(unit, ScanUnit) and reads_are_small(
                width, unit.stop - unit.start, 1)
            if small:
                run.append(unit)
                continue
            if len(run) > 1:
                packed.append(SequentialUnit(self, tuple(run), scope))
            else:
                packed.extend(run)
            run = []
            if unit is not None:
                packed.append(unit)
        if len(packed) != len(units):  # (only a table's scan units are ever packed)
            self.pushed.units = len(packed)
        return packed


class LanceTableDataset(PlannedDataset):
    """One pinned version of one table, with or without the system columns."""

    def __init__(self, name: str, store: ObjectStore, manifest: Manifest, *,
                 system_columns: bool, errors: ErrorRegistry,
                 query_id: str | None = None) -> None:
        self.store = store
        self.manifest = manifest
        data = manifest.schema.to_scan_arrow()
        fields = list(data) + (list(SYSTEM_FIELDS) if system_columns else [])
        self._start(name, pa.schema(fields), PushedScan(), errors,
                    query_id=query_id, system_columns=system_columns)
        self.target_partitions = max(1, os.cpu_count() or 1)
        self._last_indexed: tuple[pc.Expression, list[int], IndexedRows | None] | None = None

    @property
    def label(self) -> str:
        return f"{self.name}[v={self.manifest.version}]"

    def _units(self, filter: pc.Expression | None,
               scope: ScanScope) -> list[ScanUnit]:
        candidates = fragment_spans(self.manifest.fragments, self._address_ranges(filter))
        if self.limit_hint is not None and filter is None:
            # the rows wanted are the first ones: read up to the one completing the limit
            # (DataFusion applies any OFFSET above the scan, within its fetch)
            frags = [frag for frag, _, _ in candidates]  # whole fragments: no filter
            candidates = list(live_ranges(self.store, self.manifest, frags, 0,
                                          self.limit_hint))
        indexed = self._indexed(filter, [c[0].id for c in candidates], scope.inline)
        self.pushed.index = None
        units: list = []
        if indexed is not None:
            self.pushed.index = indexed.description
            planned = None if filter is None else str(filter)
            units = [IndexUnit(self, c[0], indexed.rows[c[0].id], indexed.residual is None,
                               planned, scope) for c in candidates
                     if indexed.covers(c[0].id) and len(indexed.rows[c[0].id])]
            candidates = [c for c in candidates if not indexed.covers(c[0].id)]
        units += self._split(candidates, scope)
        self.pushed.units = len(units)
        self.pushed.fragments_total = len(self.manifest.fragments)
        self.pushed.fragments_kept = len({u.fragment.id for u in units})
        return units

    def _indexed(self, filter: pc.Expression | None, fragment_ids: list[int],
                 inline: bool = False) -> IndexedRows | None:
        """Rows scalar indices find for ``filter`` (None: scan)."""
        if filter is None or self.manifest.index_section is None:
            return None
        # an execution on the calling thread may move to a worker thread (see
        # ScanScope.want_worker) and plan again with the same filter: the index is not
        # searched twice (what it found is kept for that next planning only)
        last, self._last_indexed = self._last_indexed, None
        if last is not None and last[1] == fragment_ids and last[0].equals(filter):
            return last[2]
        tree = decode(filter)
        found = plan_indexed(self.store, self.manifest, tree, fragment_ids=fragment_ids)
        if inline:
            self._last_indexed = (filter, list(fragment_ids), found)
        return found

    def _address_ranges(self, filter: pc.Expression | None) -> list[tuple[int, int]] | None:
        if filter is None or not self.system_columns:
            return None
        tree = decode(filter)
        return None if tree is None else address_ranges(self.store, self.manifest, tree)

    def _split(self, candidates: list[tuple[Fragment, int, int]],
               scope: ScanScope) -> list[ScanUnit]:
        total = sum(stop - start for _, start, stop in candidates)
        unit_rows = max(MIN_UNIT_ROWS, math.ceil(total / max(1, self.target_partitions)))
        units = []
        for frag, start, stop in candidates:
            pieces = max(1, math.ceil((stop - start) / unit_rows))
            step = math.ceil((stop - start) / pieces)
            for s in range(start, stop, step):
                units.append(ScanUnit(self, frag, s, min(stop, s + step), scope))
        return units


@dataclass
class PlanningScanner:
    """What DataFusion reads at planning time: only the projected schema."""

    projected_schema: pa.Schema
    extra: dict = field(default_factory=dict)
