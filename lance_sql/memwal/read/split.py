"""The LSM view cut into independent parts for a parallel reader (Spark's tasks).

Shape: the base table is read once in total, cut by fragments (row ranges) into *base
parts*, and each region's newer sources (its flushed generations not merged yet) make one
*region part*. No part ever needs another part's rows:

* a base row is its key's newest version exactly when no newer source of any region
  holds the key (a row or a tombstone). A base part reads its row ranges and leaves out
  the rows the newer sources' keys hide — the machinery of the local scan
  (:class:`~.nodes.DeduplicateExec`): with a BTREE index on the key the hidden rows are
  found in the index and dropped by the scan like deleted rows (:mod:`.hidden`), else
  keys are compared. The newer keys are small: a part reads them from the generations
  it is given (decoded once per process and cached). A part runs cold (a Spark task in
  a fresh worker), where searching the index costs ~3 us a newer key but comparing
  keys ~0.2 us a base row (measured: 300k newer keys, 1M-row part: 1.0 s vs 0.25 s), so
  the index is used only when the newer rows are under 1/16 of the part's rows;
* a newer row's winner is decided inside its region (each key maps to one region, the
  MemWAL spec's rule), so a region part deduplicates its own generations alone — unless
  the spec is not over key columns, when the other regions' generations decide too
  (their keys only; see :attr:`~.planner.LsmView.across_regions`).

A key the base table itself holds twice (plain appends do not enforce the key) keeps its
last row in the table's order only: the older rows are found once when the split is planned
(:mod:`.duplicates`; none in the usual base of unique keys) and each base part is handed
those of its fragments, to leave out like deleted rows.

So every row of the view is in exactly one part. Against the older shape (one part per
region, each assigning *all* base rows to regions by evaluating the spec and keeping its
own), the base is read once instead of once per region, and the split needs no region
spec over key columns: manual regions, non-key specs and regions of an older spec split
the same way. A reader may run several parts in one task (each stays whole).

The parts are pinned when planned (:func:`plan_split`): the generations each part reads
or masks with are listed then, so all parts see the same sources even if a region
flushes meanwhile. MemTables are not seen (they live in their writers' processes).

A filter prunes regions first: region parts only for regions whose values can match, and
a pruned region's generations are never opened — base parts mask with the kept regions'
keys when the spec is over key columns (a pruned region's keys are those of base rows the
filter rejects anyway). With a spec over other columns a key may have moved into a
pruned region, whose newer row must still hide the key's older base row, so base parts
then mask with every region's keys (read, their rows not returned), as the local scan
does. The filter is pushed into every source after each key's newest row is decided.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.expr.arrow import Expr, resolve
from lance_sql.expr.arrow import columns as expr_columns
from lance_sql.memwal.read.duplicates import superseded_base_rows
from lance_sql.memwal.read.filter_input import parse_filter
from lance_sql.memwal.read.nodes import (
    DeduplicateExec,
    ExecNode,
    ProjectionExec,
    ScanExec,
    UnionExec,
    local_filter_columns,
)
from lance_sql.memwal.read.planner import LsmView, RegionState
from lance_sql.memwal.read.sources import (
    BaseSource,
    GenerationSource,
    Source,
    lance_scanner,
)
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, SYSTEM_COLUMNS
from lance_sql.table.read.scan import Scanner, narrowed, scan_fragment

# _rowaddr within its source; _rowid and the row versions the base table's (NULL on rows
# not merged yet: see the LSM view)
SYSTEM = SYSTEM_COLUMNS
# Rows of a fragment range read at a time, so a part's memory does not grow with its rows.
RANGE_ROWS = 1 << 20
# A base part finds the rows newer keys hide through the key's index only when its rows
# are at least this many times the newer rows (see the module docstring).
INDEX_RATIO = 16

__all__ = ["FragmentRange", "GenerationPin", "LsmSplit", "PartBaseSource", "RegionPart",
           "base_plan", "plan_split", "region_plan"]


@dataclass(frozen=True)
class GenerationPin:
    """One flushed generation a split read uses: region, generation number, its path."""

    region: uuid.UUID
    gen: int
    path: str


@dataclass(frozen=True)
class RegionPart:
    """A region's newer rows: its generations not merged yet, deduplicated alone — or,
    when the spec does not keep a key in one region, also against ``masks``, the other
    regions' generations (their keys read, their rows not; see
    :attr:`~.planner.LsmView.across_regions`)."""

    region: uuid.UUID
    generations: tuple[GenerationPin, ...]
    masks: tuple[GenerationPin, ...] = ()


@dataclass(frozen=True)
class FragmentRange:
    """Physical rows ``[start, stop)`` of base fragment ``fragment``."""

    fragment: int
    start: int
    stop: int


@dataclass(frozen=True)
class LsmSplit:
    """A split read as planned: the region parts, the generations whose keys hide
    base rows (every base part masks with all of them), and the base rows a later base
    row of their key supersedes (physical offsets per fragment; empty: the base's keys
    are unique), found once here so that no base part reads every key again
    (:meth:`superseded_in`)."""

    regions: tuple[RegionPart, ...]
    masks: tuple[GenerationPin, ...]
    superseded: Mapping[int, np.ndarray] = field(default_factory=dict)

    def superseded_in(self, ranges: Sequence[FragmentRange]) -> dict[int, np.ndarray]:
        """The superseded rows of the fragments ``ranges`` read (what a base part of
        them is handed: see :func:`base_plan`)."""
        wanted = {r.fragment for r in ranges}
        return {f: rows for f, rows in self.superseded.items() if f in wanted}


def _predicate(view: LsmView, filter: str | Expr | None) -> Expr | None:
    """``filter`` resolved against the view's columns (None: no filter)."""
    expr = parse_filter(filter)
    if expr is None:
        return None
    return resolve(expr, pa.schema([*view.arrow_schema,
                                    *(pa.field(n, pa.uint64()) for n in SYSTEM)]))


def _pins(view: LsmView, region: RegionState) -> tuple[GenerationPin, ...]:
    """The region's flushed generations not merged into the view's base version."""
    merged = view.details.merged_generation(region.region_id)
    return tuple(GenerationPin(region.region_id, gen, path)
                 for gen, path in sorted(region.flushed) if gen > merged)


def plan_split(view: LsmView, filter: str | Expr | None = None) -> LsmSplit:
    """The parts a read of ``view`` with ``filter`` needs (see the module docstring):
    a region part per region the filter may select rows of and that has unmerged
    generations, and the generations base parts mask with."""
    predicate = _predicate(view, filter)
    kept = view.regions(predicate)
    if predicate is None or view.key_routed or len(kept) == view.total_regions:
        masking = kept
    else:  # a key may have moved into a pruned region: its newer row still hides
        masking = view.regions(None)
    masks = tuple(p for r in masking for p in _pins(view, r))
    parts = tuple(RegionPart(r.region_id, pins,
                             tuple(p for p in masks if p.region != r.region_id)
                             if view.across_regions else ())
                  for r in kept if (pins := _pins(view, r)))
    base = BaseSource(view.base, view.key_columns)
    return LsmSplit(parts, masks, superseded_base_rows(base))


def _sources(view: LsmView, pins: Sequence[GenerationPin]) -> list[GenerationSource]:
    """The pinned generations as sources (one collected meanwhile is left out: its
    rows are in the base table by then)."""
    index: dict[uuid.UUID, int] = {}
    out = []
    for pin in pins:
        at = index.setdefault(pin.region, len(index))
        source = view.generation_source(pin.region, at, pin.gen, pin.path)
        if source is not None:
            out.append(source)
    return out


class PartBaseSource(BaseSource):
    """The base table's rows in some row ranges of its fragments (a base part)."""

    def __init__(self, ds: LanceDataset, key_columns: Sequence[str],
                 ranges: Sequence[FragmentRange], *, use_index: bool = True) -> None:
        """``use_index``: whether the key's index may find the rows newer keys hide
        (else keys are compared)."""
        super().__init__(ds, key_columns)
        self.use_index = use_index
        by_id = {f.id: f for f in ds.manifest.fragments}
        for r in ranges:
            fragment = by_id.get(r.fragment)
            if fragment is None or not 0 <= r.start <= r.stop <= fragment.physical_rows:
                raise InvalidInputError(f"rows [{r.start}, {r.stop}) of fragment "
                                        f"{r.fragment}: not in version {ds.version}")
        self.ranges = tuple(ranges)
        self._by_id = by_id

    @property
    def label(self) -> str:
        return f"base_table[gen=-1, {len(self.ranges)} fragment ranges]"

    def fragment_ids(self) -> list[int]:
        return list(dict.fromkeys(r.fragment for r in self.ranges))

    def key_index(self) -> str | None:
        return super().key_index() if self.use_index else None

    def scan(self, columns: Sequence[str], predicate: Expr | None,
             drop_rows: Mapping[int, np.ndarray] | None = None, *, stepwise: bool = False,
             rows_wanted: int | None = None) -> Iterator[pa.RecordBatch]:
        ds = self.dataset
        names = self._readable(columns)
        drop_rows = drop_rows or {}
        for r in self.ranges:
            fragment = self._by_id[r.fragment]
            if r.start == 0 and r.stop == fragment.physical_rows:
                # a whole fragment: the scanner, so indices answer the filter where
                # they can (the general scan's path)
                scanner = _scanner(ds, names, predicate, [fragment], drop_rows, True)
                scanner.stepwise = stepwise
                scanner.wanted = rows_wanted
                for table in scanner.to_tables():
                    yield from table.to_batches()
                continue
            plan = _scanner(ds, names, predicate, [fragment], drop_rows, False).plan
            for start in range(r.start, r.stop, RANGE_ROWS):
                table = scan_fragment(ds.store, ds.manifest, fragment, plan, offset=start,
                                      length=min(r.stop, start + RANGE_ROWS) - start,
                                      drop=drop_rows.get(r.fragment))
                yield from table.to_batches()


def _scanner(ds: LanceDataset, columns: Sequence[str], predicate: Expr | None,
             fragments: Sequence, drop_rows: Mapping[int, np.ndarray],
             indexed: bool) -> Scanner:
    """A scanner of ``fragments`` (through the indices when ``indexed``)."""
    if indexed:  # indices answer what they can (dropped rows left out of answers too)
        return lance_scanner(ds, columns, predicate, fragments=fragments,
                             drop_rows=drop_rows)
    scanner = Scanner(ds.store, ds.manifest, columns=list(columns), fragments=fragments,
                      drop_rows=drop_rows)
    if predicate is not None:
        schema = pa.schema([*ds.manifest.schema.to_scan_arrow(),
                            *(pa.field(n, pa.uint64()) for n in SYSTEM)])
        scanner.plan = narrowed(scanner.plan, ds.manifest, resolve(predicate, schema))
    return scanner


def _internal(view: LsmView, columns: Sequence[str] | None,
              predicate: Expr | None) -> tuple[list[str], pa.Schema]:
    """The output columns and the schema the part's scans produce."""
    output = list(view.arrow_schema.names if columns is None else columns)
    for name in output:
        if name not in view.arrow_schema.names and name not in SYSTEM:
            raise InvalidInputError(f"column {name!r} does not exist; columns: "
                                    f"{', '.join(view.arrow_schema.names)}")
    local = local_filter_columns(predicate)  # (the scans' own filters read these)
    read = [p[0] for p in expr_columns(predicate) if p[0] in SYSTEM or p[0] in local] \
        if predicate else []
    names = list(dict.fromkeys([*output, *view.key_columns, ROW_ADDR, *read]))
    return output, pa.schema([pa.field(n, pa.uint64()) if n in SYSTEM
                              else view.arrow_schema.field(n) for n in names])


def base_plan(view: LsmView, ranges: Sequence[FragmentRange],
              masks: Sequence[GenerationPin], columns: Sequence[str] | None = None,
              filter: str | Expr | None = None,
              superseded: Mapping[int, np.ndarray] | None = None) -> ExecNode:
    """A base part: the rows of ``ranges`` no generation of ``masks`` holds the key of
    (their newest version is elsewhere, or deleted), nor a later base row (a key the
    base holds twice), where ``filter`` holds. ``superseded``: those later-held base
    rows as planned (:meth:`LsmSplit.superseded_in`; None: found by the part, which then
    reads every key of the base)."""
    predicate = _predicate(view, filter)
    output, internal = _internal(view, columns, predicate)
    newer = _sources(view, masks)
    newer_rows = sum(f.physical_rows for s in newer for f in s.dataset.manifest.fragments)
    rows = sum(r.stop - r.start for r in ranges)
    base = PartBaseSource(view.base, view.key_columns, ranges,
                          use_index=newer_rows * INDEX_RATIO <= rows)
    sources: list[Source] = [base, *newer]
    scan = ScanExec(base, internal, predicate)
    node = DeduplicateExec(UnionExec([scan]), view.key_columns, sources, needed=output,
                           superseded=superseded)
    return ProjectionExec(node, output)


def region_plan(view: LsmView, part: RegionPart, columns: Sequence[str] | None = None,
                filter: str | Expr | None = None) -> ExecNode | None:
    """A region part: the newest row of each key its generations hold (none for a
    tombstone), where ``filter`` holds; None when every generation was collected."""
    predicate = _predicate(view, filter)
    output, internal = _internal(view, columns, predicate)
    sources = _sources(view, part.generations)
    if not sources:
        return None
    scans = [ScanExec(s, internal, predicate) for s in sorted(sources, key=lambda s: -s.gen)]
    deciding = [*sources, *_sources(view, part.masks)] if part.masks else sources
    node = DeduplicateExec(UnionExec(scans), view.key_columns, deciding, needed=output,
                           across_regions=bool(part.masks))
    return ProjectionExec(node, output)
