"""EXPLAIN output: DataFusion's plan with our scan's operator tree beneath each dataset node.

DataFusion shows a Python dataset as one opaque ``DatasetExec`` line. Under it we
print what our scan really does, in the shape of the specification's plan nodes::

    DatasetExec: number_of_fragments=2, filter_expr=(id > 6), projection=[s]
      ScanExec: events[v=5], filter=[(id > 6)], projection=[s]
        FragmentPruning: kept 2 of 3 fragments, 2 partitions

``EXPLAIN ANALYZE`` runs the query; DataFusion then gives its plan as "Plan with
Metrics", and beneath its ``DatasetExec`` lines we print the LSM, search and change-feed
trees as they ran, each node with its metrics from that run (``metrics=[output_rows=...,
elapsed_compute=..., ...]``, as DataFusion prints its own).
"""

from __future__ import annotations

import re

import pyarrow as pa

from lance_sql.sql.changes_provider import ChangesDataset
from lance_sql.sql.lsm_provider import LsmTableDataset
from lance_sql.sql.nearest_provider import NearestDataset
from lance_sql.sql.provider import LanceTableDataset

Planned = LanceTableDataset | LsmTableDataset | NearestDataset | ChangesDataset
# the plan_type of DataFusion's EXPLAIN ANALYZE result
ANALYZED = "Plan with Metrics"


def lsm_lines(ds: LsmTableDataset, indent: str, analyze: bool = False) -> list[str]:
    """EXPLAIN lines of an LSM view: the planner's tree (regions kept, sources read);
    ``analyze``: with what its nodes did."""
    pushed = ds.pushed
    projection = ", ".join(pushed.columns) if pushed.columns is not None else "*"
    lines = [f"{indent}LsmViewExec: {ds.label}, filter=[{pushed.filter or ''}], "
             f"projection=[{projection}]"
             + (f", limit={ds.limit_hint}" if ds.limit_hint is not None else "")
             + (", filter applied above the view" if pushed.residual else "")]
    if pushed.plan is not None:
        lines += [f"{indent}  {line}" for line in pushed.plan.explain(analyze).splitlines()]
    return lines


def search_lines(ds: NearestDataset, indent: str, analyze: bool = False) -> list[str]:
    """EXPLAIN lines of a ``nearest()`` call: its arguments and the search plan."""
    lines = [f"{indent}{ds.describe()}"]
    if ds.pushed.plan is not None:
        lines += [f"{indent}  {line}"
                  for line in ds.pushed.plan.explain(analyze).splitlines()]
    return lines


def change_lines(ds: ChangesDataset, indent: str, analyze: bool = False) -> list[str]:
    """EXPLAIN lines of a ``table_changes()`` call: the feed's plan (and what it read)."""
    return [f"{indent}{ds.describe()}" + (f", {ds.metrics.text()}" if analyze else "")]


def scan_lines(ds: Planned, indent: str, analyze: bool = False) -> list[str]:
    """EXPLAIN lines of one planned scan: what was pushed into it and what it reads;
    ``analyze``: LSM, search and change-feed trees with what they did."""
    if isinstance(ds, LsmTableDataset):
        return lsm_lines(ds, indent, analyze)
    if isinstance(ds, NearestDataset):
        return search_lines(ds, indent, analyze)
    if isinstance(ds, ChangesDataset):
        return change_lines(ds, indent, analyze)
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


def annotate_physical_plan(plan: str, planned: list[Planned], analyze: bool = False) -> str:
    """DataFusion's physical plan with our scan's lines under each of its scans
    (``analyze``: it ran, and our lines say what each node did)."""
    remaining = list(planned)
    out: list[str] = []
    lines = plan.splitlines()
    at = 0
    while at < len(lines):
        line = lines[at]
        out.append(line)
        at += 1
        if "DatasetExec" not in line:
            continue
        # a long filter (an IN list's values) goes on over several lines: ours go after
        entry, depth = [line], _depth(line)
        while depth > 0 and at < len(lines):
            entry.append(lines[at])
            out.append(lines[at])
            depth += _depth(lines[at])
            at += 1
        ds = _match("\n".join(entry), remaining)
        if ds is not None:
            remaining.remove(ds)
            indent = line[: len(line) - len(line.lstrip())] + "  "
            out.extend(scan_lines(ds, indent, analyze))
    return "\n".join(out) + "\n"


def _depth(text: str) -> int:
    """Brackets ``text`` opens and does not close."""
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def logical_order(planned: list[Planned], logical: str) -> list[Planned]:
    """The scans in the order the logical plan lists their ``TableScan`` lines.

    DataFusion's physical plan lists its ``DatasetExec`` lines in that order too (unless
    a join swaps its inputs), and a line shows only a projection and a filter: scans it
    cannot tell apart (a ``nearest()`` call and a table read for the same columns) are
    matched in this order. A table's scan is named by its pinned query id, a table
    function's only by the function's name: those are taken in the order they were
    planned."""
    positions: dict[int, int] = {}
    for kind, name in ((NearestDataset, "nearest"), (ChangesDataset, "table_changes")):
        calls = sorted((ds for ds in planned if isinstance(ds, kind)),
                       key=lambda ds: ds.sequence)
        found = [m.start() for m in re.finditer(rf"TableScan: {name}\(\)", logical)]
        for ds, at in zip(calls, found, strict=False):
            positions[id(ds)] = at
    for ds in planned:
        if not isinstance(ds, NearestDataset | ChangesDataset) and ds.query_id is not None:
            match = re.search(rf"#q{re.escape(ds.query_id)}\b", logical)
            if match is not None:
                positions[id(ds)] = match.start()
    return sorted(planned, key=lambda ds: positions.get(id(ds), len(logical)))


def render_explain(table: pa.Table, planned: list[Planned], logical_plan: str = "") -> pa.Table:
    """DataFusion's EXPLAIN result with the physical plan annotated (EXPLAIN ANALYZE's
    plan with metrics too). ``logical_plan``: the query's logical plan as text, for
    EXPLAIN ANALYZE, whose result has none (it orders the scans, see
    :func:`logical_order`)."""
    types = table.column("plan_type").to_pylist()
    plans = table.column("plan").to_pylist()
    logical = "\n".join(p for t, p in zip(types, plans, strict=False)
                        if t == "logical_plan") or logical_plan
    planned = logical_order(planned, logical)
    plans = [
        annotate_physical_plan(p, planned, analyze=t == ANALYZED)
        if t in ("physical_plan", ANALYZED) else p
        for t, p in zip(types, plans, strict=False)
    ]
    return pa.table({"plan_type": types, "plan": plans})
