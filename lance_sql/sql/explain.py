"""EXPLAIN output: DataFusion's plan with our scan's operator tree beneath each dataset node.

DataFusion shows a Python dataset as one opaque ``DatasetExec`` line. Under it we
print what our scan really does, in the shape of the specification's plan nodes::

    DatasetExec: number_of_fragments=2, filter_expr=(id > 6), projection=[s]
      ScanExec: events[v=5], filter=[(id > 6)], projection=[s]
        FragmentPruning: kept 2 of 3 fragments, 2 partitions
"""

from __future__ import annotations

import re

import pyarrow as pa

from lance_sql.sql.lsm_provider import LsmTableDataset
from lance_sql.sql.nearest_provider import NearestDataset
from lance_sql.sql.provider import LanceTableDataset

Planned = LanceTableDataset | LsmTableDataset | NearestDataset


def lsm_lines(ds: LsmTableDataset, indent: str) -> list[str]:
    """EXPLAIN lines of an LSM view: the planner's tree (regions kept, sources read)."""
    pushed = ds.pushed
    projection = ", ".join(pushed.columns) if pushed.columns is not None else "*"
    lines = [f"{indent}LsmViewExec: {ds.label}, filter=[{pushed.filter or ''}], "
             f"projection=[{projection}]"
             + (f", limit={ds.limit_hint}" if ds.limit_hint is not None else "")
             + (", filter applied above the view" if pushed.residual else "")]
    if pushed.plan is not None:
        lines += [f"{indent}  {line}" for line in pushed.plan.explain().splitlines()]
    return lines


def search_lines(ds: NearestDataset, indent: str) -> list[str]:
    """EXPLAIN lines of a ``nearest()`` call: its arguments and the search plan."""
    lines = [f"{indent}{ds.describe()}"]
    if ds.pushed.plan is not None:
        lines += [f"{indent}  {line}" for line in ds.pushed.plan.explain().splitlines()]
    return lines


def scan_lines(ds: Planned, indent: str) -> list[str]:
    """EXPLAIN lines of one planned scan: what was pushed into it and what it reads."""
    if isinstance(ds, LsmTableDataset):
        return lsm_lines(ds, indent)
    if isinstance(ds, NearestDataset):
        return search_lines(ds, indent)
    pushed = ds.pushed
    projection = ", ".join(pushed.columns) if pushed.columns is not None else "*"
    lines = [
        f"{indent}ScanExec: {ds.label}, filter=[{pushed.filter or ''}], "
        f"projection=[{projection}]"
        + (f", limit={ds.limit_hint}" if ds.limit_hint is not None else "")
    ]
    lines.append(
        f"{indent}  FragmentPruning: kept {pushed.fragments_kept} of {pushed.fragments_total} "
        f"fragments, {pushed.units} partitions"
    )
    if pushed.index is not None:
        lines.append(f"{indent}  {pushed.index}")
    return lines


def _match(line: str, candidates: list[Planned]) -> Planned | None:
    for ds in candidates:
        projection = ", ".join(ds.pushed.columns or [])
        if f"projection=[{projection}]" in line and (
            ds.pushed.filter is None or ds.pushed.filter in line
        ):
            return ds
    return candidates[0] if candidates else None


def annotate_physical_plan(plan: str, planned: list[Planned]) -> str:
    """DataFusion's physical plan with our scan's lines under each of its scans."""
    remaining = list(planned)
    out = []
    for line in plan.splitlines():
        out.append(line)
        if "DatasetExec" in line:
            ds = _match(line, remaining)
            if ds is not None:
                remaining.remove(ds)
                indent = line[: len(line) - len(line.lstrip())] + "  "
                out.extend(scan_lines(ds, indent))
    return "\n".join(out) + "\n"


def logical_order(planned: list[Planned], logical: str) -> list[Planned]:
    """The scans in the order the logical plan lists their ``TableScan`` lines.

    DataFusion's physical plan lists its ``DatasetExec`` lines in that order too (unless
    a join swaps its inputs), and a line shows only a projection and a filter: scans it
    cannot tell apart (a ``nearest()`` call and a table read for the same columns) are
    matched in this order. A table's scan is named by its pinned query id, a table
    function's only as ``nearest()``: those are taken in the order they were planned."""
    positions: dict[int, int] = {}
    calls = sorted((ds for ds in planned if isinstance(ds, NearestDataset)),
                   key=lambda ds: ds.sequence)
    found = [m.start() for m in re.finditer(r"TableScan: nearest\(\)", logical)]
    for ds, at in zip(calls, found, strict=False):
        positions[id(ds)] = at
    for ds in planned:
        if not isinstance(ds, NearestDataset) and ds.query_id is not None:
            match = re.search(rf"#q{re.escape(ds.query_id)}\b", logical)
            if match is not None:
                positions[id(ds)] = match.start()
    return sorted(planned, key=lambda ds: positions.get(id(ds), len(logical)))


def render_explain(table: pa.Table, planned: list[Planned]) -> pa.Table:
    """DataFusion's EXPLAIN result with the physical plan annotated."""
    types = table.column("plan_type").to_pylist()
    plans = table.column("plan").to_pylist()
    logical = "\n".join(p for t, p in zip(types, plans, strict=False) if t == "logical_plan")
    planned = logical_order(planned, logical)
    plans = [
        annotate_physical_plan(p, planned) if t == "physical_plan" else p
        for t, p in zip(types, plans, strict=False)
    ]
    return pa.table({"plan_type": types, "plan": plans})
