"""The LSM view cut into one independent part per region (Spark reads one partition each).

A key always routes to the same region when every source column of the region spec is a
primary-key column: then a region's generations and MemTables only ever hold keys whose
base-table rows evaluate to that region too. So part ``i`` reads the base rows whose
region values (the spec evaluated on them, as the writer routes) name region ``i``, plus
that region's generations, and deduplicates alone with the usual operators. Base rows of
region values no region has claimed yet (no generation can hold their keys) go to the
first part, so the parts are exactly the regions and cover every row once.

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
from lance_sql.expr.arrow import Expr
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
from lance_sql.table.files.reader import ROW_ADDR

__all__ = ["RegionBaseSource", "RegionSplit", "region_plan", "region_split"]


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


class RegionBaseSource(BaseSource):
    """The base table's rows that belong to one region (and, for the first part, those of
    region values no region has claimed)."""

    def __init__(self, ds: LanceDataset, key_columns: Sequence[str], spec: RegionSpec,
                 region: uuid.UUID, known: frozenset[uuid.UUID], unclaimed: bool) -> None:
        super().__init__(ds, key_columns)
        self.spec = spec
        self.mine = region
        self.known = known
        self.unclaimed = unclaimed
        self.spec_columns = [n for n in spec.source_names(ds.manifest.schema) if n]

    @property
    def label(self) -> str:
        return f"base_table[gen=-1, region_{self.mine.hex[:8]}]"

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


def region_plan(view: LsmView, split: RegionSplit, part: int,
                columns: Sequence[str] | None = None) -> ExecNode:
    """The newest row of every key of region ``split.regions[part]``: ``columns``
    (default the table's) of its base rows and generations, deduplicated."""
    if not 0 <= part < len(split.regions):
        raise InvalidInputError(f"part {part} of {len(split.regions)} regions")
    spec = view.spec
    assert spec is not None  # a split exists only for a spec
    region = split.regions[part]
    output = list(view.arrow_schema.names if columns is None else columns)
    for name in output:
        if name not in view.arrow_schema.names:
            raise InvalidInputError(f"column {name!r} does not exist; columns: "
                                    f"{', '.join(view.arrow_schema.names)}")
    names = list(dict.fromkeys([*output, *view.key_columns]))
    internal = pa.schema([view.arrow_schema.field(n) for n in names]
                         + [pa.field(ROW_ADDR, pa.uint64())])
    regions = view.regions(None, only={region})
    sources = view.sources(regions)
    sources[0] = RegionBaseSource(view.base, view.key_columns, spec, region,
                                  frozenset(split.regions), unclaimed=part == 0)
    scans = [ScanExec(s, internal) for s in sources]
    node: ExecNode = DeduplicateExec(UnionExec(scans), view.key_columns, sources)
    return ProjectionExec(node, output)
