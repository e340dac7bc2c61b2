"""The LSM view cut into one independent part per region (Spark reads one partition each).

A key always routes to the same region when every source column of the region spec is a
primary-key column: then a region's generations and MemTables only ever hold keys whose
base-table rows evaluate to that region too. So part ``i`` reads the base rows whose
region values (the spec evaluated on them, as the writer routes) name region ``i``, plus
that region's generations, and deduplicates alone with the usual operators. Base rows of
region values no region has claimed yet (no generation can hold their keys) go to the
first part, so the parts are exactly the regions and cover every row once.

A filter prunes the parts before any is planned (:func:`region_parts`): only regions whose
values can match get a part, so a pruned region's generations are never opened; the
filter is then pushed into each part's sources under the usual newest-row-wins rule (the
winners are decided by the region's keys before the filter applies).

When the spec cannot assign base rows — no spec (manual regions), a spec over non-key
columns (a key's row may move between regions when such a column changes), or regions
written under an older spec — :func:`region_split` returns None and a reader should read
the view as one part (``LsmView.scan_plan``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.expr.arrow import Expr, parse_predicate, resolve
from lance_sql.expr.arrow import columns as expr_columns
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.read.nodes import (
    DeduplicateExec,
    ExecNode,
    ProjectionExec,
    ScanExec,
    UnionExec,
)
from lance_sql.memwal.read.planner import LsmView
from lance_sql.memwal.read.sources import BaseSource
from lance_sql.memwal.routing import group_by_region, region_id_for
from lance_sql.memwal.transforms import region_values
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, SYSTEM_COLUMNS

# _rowaddr within its source; _rowid and the row versions the base table's (NULL on rows
# not merged yet: see the LSM view)
SYSTEM = SYSTEM_COLUMNS

__all__ = ["RegionBaseSource", "RegionPart", "RegionSplit", "region_parts", "region_plan",
           "region_split"]


@dataclass(frozen=True)
class RegionSplit:
    """The regions a view is cut into, in a fixed order (the first also takes base rows
    of unclaimed region values)."""

    regions: tuple[uuid.UUID, ...]


def region_split(view: LsmView) -> RegionSplit | None:
    """One part per region of ``view``, or None when the spec cannot assign base rows
    (see the module docstring)."""
    spec = view.spec
    if spec is None:
        return None
    names = spec.source_names(view.base.manifest.schema)
    if not names or any(n is None or n not in view.key_columns for n in names):
        return None
    regions = view.regions(None)
    if any(r.spec_id != spec.spec_id or r.values is None for r in regions):
        return None
    if not regions:
        return None
    return RegionSplit(tuple(sorted((r.region_id for r in regions), key=str)))


@dataclass(frozen=True)
class RegionPart:
    """One part of a split read: the rows of region ``region`` (None: no region's), and
    when ``unclaimed`` also the base rows of region values no region has claimed."""

    region: uuid.UUID | None
    unclaimed: bool


def _predicate(view: LsmView, filter: str | Expr | None) -> Expr | None:
    """``filter`` resolved against the view's columns (None: no filter)."""
    if filter is None or (isinstance(filter, str) and not filter.strip()):
        return None
    expr = parse_predicate(filter) if isinstance(filter, str) else filter
    return resolve(expr, pa.schema([*view.arrow_schema,
                                    *(pa.field(n, pa.uint64()) for n in SYSTEM)]))


def region_parts(view: LsmView, split: RegionSplit, filter: str | Expr | None = None
                 ) -> list[RegionPart]:
    """The parts a read with ``filter`` needs: one per region of ``split`` whose values
    can match it (region pruning), the first also taking the base rows of unclaimed
    region values; when every region is pruned, one part for those base rows alone."""
    predicate = _predicate(view, filter)
    kept = {r.region_id for r in view.regions(predicate)} if predicate is not None else set(
        split.regions)
    regions = [r for r in split.regions if r in kept]
    if not regions:
        return [RegionPart(None, True)]
    return [RegionPart(r, i == 0) for i, r in enumerate(regions)]


class RegionBaseSource(BaseSource):
    """The base table's rows that belong to one region (and, for the first part, those of
    region values no region has claimed)."""

    def __init__(self, ds: LanceDataset, key_columns: Sequence[str], spec: RegionSpec,
                 region: uuid.UUID | None, known: frozenset[uuid.UUID], unclaimed: bool
                 ) -> None:
        super().__init__(ds, key_columns)
        self.spec = spec
        self.mine = region
        self.known = known
        self.unclaimed = unclaimed
        self.spec_columns = [n for n in spec.source_names(ds.manifest.schema) if n]

    @property
    def label(self) -> str:
        mine = "unclaimed" if self.mine is None else f"region_{self.mine.hex[:8]}"
        return f"base_table[gen=-1, {mine}]"

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None
             ) -> Iterator[pa.RecordBatch]:
        wanted = list(dict.fromkeys([*columns, *self.spec_columns]))
        for batch in super().scan(wanted, predicate, drop_rows):
            keep = self._mask(batch)
            out = batch.filter(pa.array(keep)) if not keep.all() else batch
            if out.num_rows:
                yield out.select([c for c in wanted if c in columns or c == ROW_ADDR])

    def _mask(self, batch: pa.RecordBatch) -> np.ndarray:
        arrays = [batch.column(n) for n in self.spec_columns]
        values = region_values(self.spec, arrays, batch.num_rows)
        keep = np.zeros(batch.num_rows, bool)
        for positions in group_by_region(values):  # one group per region value: few
            rid = region_id_for(self.spec, values, int(positions[0]))
            if rid == self.mine or (self.unclaimed and rid not in self.known):
                keep[positions] = True
        return keep


def region_plan(view: LsmView, split: RegionSplit, part: int | RegionPart,
                columns: Sequence[str] | None = None, filter: str | Expr | None = None
                ) -> ExecNode:
    """The newest row of every key of one part (``split.regions[part]``, or a
    :class:`RegionPart` of :func:`region_parts`) where ``filter`` holds: ``columns``
    (default the table's) of its base rows and generations, deduplicated before the
    filter applies (the filter is pushed into every source; a region's keys mask)."""
    if isinstance(part, int):
        if not 0 <= part < len(split.regions):
            raise InvalidInputError(f"part {part} of {len(split.regions)} regions")
        part = RegionPart(split.regions[part], part == 0)
    elif part.region is not None and part.region not in split.regions:
        raise InvalidInputError(f"region {part.region} is not one of the split's")
    spec = view.spec
    assert spec is not None  # a split exists only for a spec
    output = list(view.arrow_schema.names if columns is None else columns)
    for name in output:
        if name not in view.arrow_schema.names and name not in SYSTEM:
            raise InvalidInputError(f"column {name!r} does not exist; columns: "
                                    f"{', '.join(view.arrow_schema.names)}")
    predicate = _predicate(view, filter)
    system = [p[0] for p in expr_columns(predicate) if p[0] in SYSTEM] if predicate else []
    names = list(dict.fromkeys([*output, *view.key_columns, ROW_ADDR, *system]))
    internal = pa.schema([pa.field(n, pa.uint64()) if n in SYSTEM
                          else view.arrow_schema.field(n) for n in names])
    mine = set() if part.region is None else {part.region}
    sources = view.sources(view.regions(None, only=mine))
    sources[0] = RegionBaseSource(view.base, view.key_columns, spec, part.region,
                                  frozenset(split.regions), unclaimed=part.unclaimed)
    scans = [ScanExec(s, internal, predicate) for s in sources]
    node: ExecNode = DeduplicateExec(UnionExec(scans), view.key_columns, sources)
    return ProjectionExec(node, output)
