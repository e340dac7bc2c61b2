"""Scans answered by BTREE indices: the glue between the planner and the scanner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.index.planner import IndexedRows, plan_indexed
from lance_sql.table.read.scan import ScanPlan, narrowed, scan_rows


@dataclass(frozen=True)
class IndexedScan:
    """Reads the fragments an index answered: only the rows it found, only the columns
    the output and the residual filter need."""

    store: ObjectStore
    manifest: Manifest
    answer: IndexedRows
    plan: ScanPlan  # the scan's plan narrowed to the residual filter

    @property
    def description(self) -> str:
        return self.answer.description

    def covers(self, fragment_id: int) -> bool:
        return self.answer.covers(fragment_id)

    def num_rows(self, fragment_id: int) -> int:
        """Rows the index found there (deleted ones included)."""
        return len(self.answer.rows[fragment_id])

    def read(self, fragment: Fragment) -> pa.Table:
        rows = self.answer.rows[fragment.id]
        if not len(rows):
            return self.plan.output_schema.empty_table()
        return scan_rows(self.store, self.manifest, fragment, self.plan, rows)


def indexed_scan(store: ObjectStore, manifest: Manifest, plan: ScanPlan,
                 fragments: Sequence[Fragment] | None = None,
                 use_index: bool | None = None) -> IndexedScan | None:
    """The index-answered part of ``plan`` (None when no index helps)."""
    ids = None if fragments is None else [f.id for f in fragments]
    answer = plan_indexed(store, manifest, plan.predicate, fragment_ids=ids,
                          use_index=use_index)
    if answer is None:
        return None
    return IndexedScan(store, manifest, answer, narrowed(plan, manifest, answer.residual))


def index_hook(store: ObjectStore, manifest: Manifest, use_index: bool | None = None
               ) -> Callable[[ScanPlan, Sequence[Fragment]], IndexedScan | None]:
    """What :class:`~lance_sql.table.read.scan.Scanner` calls to let indices answer."""

    def hook(plan: ScanPlan, fragments: Sequence[Fragment]) -> IndexedScan | None:
        return indexed_scan(store, manifest, plan, fragments, use_index)

    return hook
