"""``table_changes('t', start, end)`` as a DataFusion table with projection and filter pushdown.

The table function resolves the version window when the query is planned (bad versions
fail there) and returns a :class:`ChangesDataset`. When DataFusion asks for partitions
(``get_fragments(filter)``) the change plan is computed from metadata alone, restricted to
the versions the pushed filter can match and pruned by its metadata-only conjuncts; each
partition then reads just the projected data columns of its rows and applies the whole
pushed filter (DataFusion treats pushed filters as exact). EXPLAIN prints a
``ChangeFeedExec`` line with the plan; EXPLAIN ANALYZE adds what the partitions read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.memwal.read.metrics import NodeMetrics, metered
from lance_sql.sql.batch_export import exportable
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.provider import PlannedDataset, open_scanner
from lance_sql.sql.pyarrow_filter import decode, referenced_columns, rows_filter
from lance_sql.sql.streams import ScanScope
from lance_sql.table import ChangeQuery, ChangeRows, ChangeWindow, plan_query, read_query

# Change rows per partition. A partition already reads its fragments side by side
# (read_changes), and every partition pays for its own reads of shared pages, so
# partitions are large: splitting only bounds the memory one of them holds.
UNIT_ROWS = 1 << 20


@dataclass
class PushedChanges:
    """What DataFusion asked for at planning (for tests and EXPLAIN-like inspection)."""

    columns: list[str] | None = None
    filter: str | None = None
    versions_planned: list[int] = field(default_factory=list)
    rows_planned: int = 0
    rows_kept: int = 0
    changes_planned: int = 0  # change rows of the versions planned (before netting)
    units: int = 0


@dataclass(frozen=True)
class ChangeUnit:
    """One partition: a slice of the pruned change plan."""

    table: ChangesDataset
    rows: ChangeRows
    scope: ScanScope
    metrics: NodeMetrics  # shared by the partitions of one planning (EXPLAIN ANALYZE)

    def scanner(self, schema: pa.Schema | None = None, columns: list[str] | None = None,
                filter: pc.Expression | None = None,
                batch_size: int | None = None, **_: object) -> ChangeUnitScanner:
        return open_scanner(self, ChangeUnitScanner, columns, filter, batch_size)


class ChangeUnitScanner:
    """Reads one unit's rows: projected columns plus what the filter needs."""

    def __init__(self, unit: ChangeUnit, columns: list[str] | None,
                 filter: pc.Expression | None, batch_size: int) -> None:
        schema = unit.table.schema
        self.unit = unit
        self.names = list(columns) if columns is not None else schema.names
        self.pushed = filter
        self.filter = None if filter is None else rows_filter(filter, decode(filter), schema)
        self.batch_size = batch_size
        self.projected_schema = pa.schema([schema.field(n) for n in self.names])

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return metered(self.unit.metrics, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        table = self.unit.table
        try:
            self.unit.scope.check()
            used = referenced_columns(self.pushed) if self.pushed is not None else set()
            query = ChangeQuery(output=tuple(self.names), filter=self.filter,
                                filter_columns=frozenset(used))
            data = read_query(table.window, query, self.unit.rows)
            if self.names:  # casting a table without columns would lose its row count
                data = data.cast(self.projected_schema)
        except Exception as exc:
            raise table.errors.wrap(exc) from exc
        for batch in data.to_batches(max_chunksize=self.batch_size):
            if batch.num_rows:
                self.unit.scope.check()
                yield exportable(batch)


class ChangesDataset(PlannedDataset):
    """The change feed of one table over a version window."""

    def __init__(self, name: str, window: ChangeWindow, errors: ErrorRegistry,
                 mode: str = "all") -> None:
        self.window = window
        self.mode = mode
        self.sequence = 0  # the query's table function calls, numbered as planned
        self.metrics = NodeMetrics()
        self._start(name, window.schema, PushedChanges(), errors)

    def _units(self, filter: pc.Expression | None,
               scope: ScanScope) -> list[ChangeUnit]:
        tree = decode(filter) if filter is not None else None
        exact = None if filter is None else rows_filter(filter, tree, self._schema)
        query = ChangeQuery.build(self._schema, None, tree, exact=exact, mode=self.mode)
        planned = plan_query(self.window, query)
        kept = planned.rows
        self.pushed.versions_planned = list(planned.versions)
        self.pushed.rows_planned, self.pushed.rows_kept = planned.planned, len(kept)
        self.pushed.changes_planned = planned.changes
        self.metrics = metrics = NodeMetrics()  # the run of these units
        units = [ChangeUnit(self, kept.take(slice(i, i + UNIT_ROWS)), scope, metrics)
                 for i in range(0, len(kept), UNIT_ROWS)]
        self.pushed.units = len(units)
        return units

    def describe(self) -> str:
        """The EXPLAIN line of the feed: its window, mode and what planning kept."""
        pushed = self.pushed
        projection = ", ".join(pushed.columns) if pushed.columns is not None else "*"
        netted = (f"{pushed.changes_planned} changes netted to {pushed.rows_planned} rows"
                  if self.mode == "net" else f"{pushed.rows_planned} change rows")
        return (f"ChangeFeedExec: {self.name}[v{self.window.start}..v{self.window.end}], "
                f"mode={self.mode}, filter=[{pushed.filter or ''}], "
                f"projection=[{projection}], versions planned={len(pushed.versions_planned)}, "
                f"{netted}, {pushed.rows_kept} kept by the metadata filter, "
                f"{pushed.units} partitions")
