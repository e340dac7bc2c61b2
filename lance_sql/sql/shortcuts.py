"""Queries answered from table metadata, without running a scan; plans that only stream.

``SELECT count(*) FROM t`` (any number of ``count(*)`` / ``count(<integer literal>)``
columns, aliased or not) over one plain Lance table, with no filter, grouping, limit or
join, is the table version's live row count: every fragment's physical rows minus its
deleted rows, counted exactly as the scan's count-only units count them
(:func:`lance_sql.table.live_rows`). The session recognises it in DataFusion's optimized
logical plan, so whatever SQL spelling DataFusion reduces to that plan qualifies, and
anything else (a ``WHERE``, ``count(col)``, ``count(DISTINCT ...)``, ``FILTER``, the LSM
view of a MemWAL table, a join, ``LIMIT``) runs as usual.

:func:`only_streams` tells the session which plans may run on the calling thread, and
:func:`bulk_scans` which scans may hand DataFusion large batches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lance_sql.sql.provider import LanceTableDataset
from lance_sql.table import live_rows

# what DataFusion makes of count(*) and count(1): a count of a non-NULL integer literal
_COUNT_LITERAL = re.compile(r"count\(Int64\(-?\d+\)\)")
_PASS_THROUGH = ("SubqueryAlias",)


def _variant(plan: Any) -> tuple[str, Any]:
    variant = plan.to_variant()
    return type(variant).__name__, variant


def _only_columns(projection: Any) -> bool:
    """Every expression of a projection is a column (aliased or not)."""
    for expr in projection.projections():
        while expr.variant_name() == "Alias":
            expr = expr.to_variant().expr()
        if expr.variant_name() != "Column":
            return False
    return True


def _counts_rows_only(aggregate: Any) -> bool:
    """An aggregate without grouping whose every expression is ``count(*)``."""
    if aggregate.group_by_exprs():
        return False
    exprs = aggregate.aggregate_exprs()
    if not exprs:
        return False
    for expr in exprs:
        if expr.variant_name() != "AggregateFunction" or expr.to_variant().is_distinct():
            return False
        # the display carries FILTER / ORDER BY clauses too: only the bare count matches
        if not _COUNT_LITERAL.fullmatch(expr.canonical_name()):
            return False
    return True


def counted_table(plan: Any) -> str | None:
    """The provider name of the one table a ``count(*)``-only plan reads (None: the plan
    is not one; see the module docstring)."""
    kind, variant = _variant(plan)
    if kind == "Projection":
        if not _only_columns(variant):
            return None
        [plan] = plan.inputs()
        kind, variant = _variant(plan)
    if kind != "Aggregate" or not _counts_rows_only(variant):
        return None
    [plan] = plan.inputs()
    kind, variant = _variant(plan)
    while kind in _PASS_THROUGH:
        [plan] = plan.inputs()
        kind, variant = _variant(plan)
    if kind != "TableScan" or variant.filters() or variant.fetch() is not None:
        return None
    return str(variant.table_name())


def live_row_count(table: LanceTableDataset) -> int:
    """Live rows of the table version ``table`` pins (what a count-only scan counts)."""
    total = 0
    for fragment in table.manifest.fragments:
        if fragment.deletion_file is None:
            total += fragment.physical_rows
        else:
            total += live_rows(table.store, table.manifest, fragment, 0,
                               fragment.physical_rows)
    return total


def count_result(schema: pa.Schema, count: int) -> pa.Table:
    """The one-row result of a ``count(*)``-only query: ``count`` in every column."""
    return pa.table([pa.array([count], field.type) for field in schema], schema=schema)


# plan nodes that pass a scan's batches on, each batch's work bounded by its size
_STREAMING = frozenset({"Projection", "SubqueryAlias", "Filter", "Limit", "TableScan",
                        "EmptyRelation"})


def only_streams(plan: Any, pinned: Callable[[str], bool]) -> bool:
    """True when the plan is one scan of a table the query pinned (``pinned(name)``) with
    projections, filters and limits above it: its work is all in that scan (see
    :func:`lance_sql.sql.interrupt.run_streaming_interruptibly`)."""
    stack, scans = [plan], 0
    while stack:
        node = stack.pop()
        kind, variant = _variant(node)
        if kind not in _STREAMING:
            return False
        if kind == "TableScan":
            if not pinned(str(variant.table_name())):
                return False
            scans += 1
        stack.extend(node.inputs())
    return scans == 1


# nodes that take in all of a scan's batches and give out batches of their own, each
# batch's work linear in its size: a scan beneath one feeds it only
_ABSORBING = frozenset({"Aggregate", "Distinct", "Sort"})
# nodes that pass a scan's batches on to the node above, each batch's work linear in its size
_PASSING = frozenset({"Projection", "SubqueryAlias", "Filter", "Limit", "Union"})


def bulk_scans(plan: Any) -> set[str]:
    """Provider names of the scans whose batches reach only an aggregate or a sort, through
    projections, filters, limits and unions alone.

    Such a scan may hand DataFusion batches larger than its batch size: each batch
    crossing into DataFusion costs tens of microseconds of interpreter time, and these
    operators check for cancellation between batches while their work on one grows only
    linearly with its size. Batches reaching a join (a nested loop's work per batch is the
    size of the other side), a window or the caller keep DataFusion's size. Nodes above
    the aggregate or sort see its batches, not the scan's, so they do not matter.
    """
    absorbed: set[str] = set()
    exposed: set[str] = set()
    stack: list[tuple[Any, bool]] = [(plan, False)]
    while stack:
        node, under = stack.pop()
        kind, variant = _variant(node)
        if kind == "TableScan":
            (absorbed if under else exposed).add(str(variant.table_name()))
        if kind in _ABSORBING:
            under = True
        elif kind not in _PASSING:
            under = False
        stack.extend((child, under) for child in node.inputs())
    return absorbed - exposed
