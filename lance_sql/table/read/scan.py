"""Reading a table version: fragments -> Arrow, with projection, filter and system columns.

A scan plans once (which fields, which files, which filter) and then reads each
fragment independently, so fragments can be read in parallel threads. Per
fragment it: reads the needed columns from whichever data files hold them
(columns absent from a fragment read as NULL; tombstoned ids are ignored), drops
deleted rows, adds ``_rowid`` / ``_rowaddr`` when asked, applies the filter and
projects. Everything is vectorised; no per-row Python.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import threading
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    SchemaError,
)
from lance_sql.expr import Expr, filter_rows, parse_predicate, resolve, to_pyarrow
from lance_sql.expr import columns as expr_columns
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import array_from_numpy, empty_table, first_rows
from lance_sql.table.files.reader import (
    ROW_ADDR,
    ROW_CREATED,
    ROW_ID,
    ROW_UPDATED,
    SYSTEM_COLUMNS,
    VERSION_COLUMNS,
    FragmentReader,
    by_fragment,
    row_offsets,
    system_arrays,
)
from lance_sql.table.read import take_many
from lance_sql.table.read.arrow_filters import decode, known, referenced_columns
from lance_sql.table.read.batched import WholeColumns
from lance_sql.table.read.comparisons import Comparison, columns_of, conjunction, mask, typed
from lance_sql.table.read.masks import bool_array
from lance_sql.table.read.prune import address_ranges, fragment_spans
from lance_sql.table.read.side_by_side import reads_are_small, row_width
from lance_sql.table.runtime.workers import WorkerPool

DEFAULT_BATCH_SIZE = 8192
P = TypeVar("P")  # a piece of a scan: a row range of a fragment, as a read takes it
# Rows a filtered scan with a limit (or a stepwise one) reads first, and at most at a time
# (see RangeSizer): it may stop after any range.
LIMITED_FIRST_ROWS = 8 * 1024
LIMITED_MAX_ROWS = 1 << 20
# ... and first when every row matches but those deleted or left out (a stepwise scan
# without a filter: the LSM view's base), when the rows wanted are few
LIMITED_UNFILTERED_ROWS = 1024
# A range sized by the rate rows matched at so far covers this many times the rows expected
# to hold the ones still wanted: a range read more costs more than rows decoded more
# (measured on 10M rows, one int32 filter column: 8k rows 1.7 ms, 16k 1.9 ms, 128k 3.5 ms).
LIMITED_MARGIN = 2
# While nothing matched, a range is this many times the last: a filter matching nothing
# then reads a first fragment in few ranges (10M rows, LIMIT 10: 66 ms CPU growing twice
# as fast, 62 four times, 60 without the limit).
LIMITED_GROWTH = 4


class RangeSizer:
    """The rows a filtered read that stops after ``wanted`` matching rows (None: unknown)
    reads next: ``LIMITED_FIRST_ROWS`` first; while nothing matched (or more than wanted
    and the reader goes on), ``LIMITED_GROWTH`` times the last range; once rows matched,
    the rows the ones still wanted are expected in at the rate seen so far (times
    ``LIMITED_MARGIN``); all at most ``LIMITED_MAX_ROWS``. Reads running in a pool report
    as they end: the counts are kept under a lock. ``first``: the first range's rows
    instead (and the fewest a range is given)."""

    def __init__(self, wanted: int | None, first: int = LIMITED_FIRST_ROWS) -> None:
        self.wanted = wanted
        self.first = first
        self.scanned = 0
        self.matched = 0
        self._last = 0
        self._lock = threading.Lock()

    def record(self, scanned: int, matched: int) -> None:
        """A read of ``scanned`` rows found ``matched``."""
        with self._lock:
            self.scanned += scanned
            self.matched += matched

    def _expected(self) -> float | None:
        """Rows the ones still wanted are expected in (None: no rate or nothing wanted)."""
        if self.wanted is None or not self.matched or self.matched >= self.wanted:
            return None
        return (self.wanted - self.matched) * self.scanned / self.matched

    def next_rows(self) -> int:
        with self._lock:
            expected = self._expected()
            if not self._last:
                rows = self.first
            elif expected is None:
                rows = self._last * LIMITED_GROWTH
            else:
                rows = math.ceil(expected * LIMITED_MARGIN)
            rows = max(self.first, min(LIMITED_MAX_ROWS, rows))
            self._last = rows
            return rows

    def still_wanted(self) -> int | None:
        """The rows wanted that no read reported yet (None: unknown)."""
        with self._lock:
            return None if self.wanted is None else max(0, self.wanted - self.matched)

    @property
    def expects_done(self) -> bool:
        """Whether the next range is expected to hold the rows still wanted (a reader then
        reads it alone rather than several ahead)."""
        with self._lock:
            expected = self._expected()
        return expected is not None and expected * LIMITED_MARGIN <= LIMITED_MAX_ROWS


@dataclass(frozen=True)
class ScanPlan:
    """What to read: resolved once per scan, then applied to every fragment."""

    output_fields: tuple[str, ...]          # names in output order (data + system)
    read_fields: tuple[LanceField, ...]     # data fields to read (projection + filter)
    filter: pc.Expression | None
    filter_text: str | None
    need_row_id: bool
    need_row_addr: bool
    output_schema: pa.Schema
    # Top-level names the filter reads; None = unknown. Known, it lets a scan read the
    # filter's columns first and fetch the other output columns only for matching rows.
    filter_columns: frozenset[str] | None = None
    # Row versions (_row_created_at_version / _row_last_updated_at_version) wanted.
    need_row_versions: bool = False
    # The filter as an expression tree with the schema's column names (None: no filter
    # or not known), for answering it from indices.
    predicate: Expr | None = None
    # The filter as comparisons of data columns with constants that must all hold, when
    # it is known to be exactly that (None: apply ``filter`` as a pyarrow expression).
    comparisons: tuple[Comparison, ...] | None = None

    @functools.cached_property
    def output_fields_typed(self) -> tuple[tuple[str, pa.DataType, bool], ...]:
        """(name, type, nullable) of each output field, read once per plan (see
        :func:`conformed`; a kept plan's one-row takes pass them)."""
        return tuple((f.name, f.type, f.nullable) for f in self.output_schema)

    @functools.cached_property
    def system_names(self) -> tuple[str, ...]:
        """System columns a fragment scan must produce, in a fixed order (found once per
        plan: a kept plan's one-row takes ask each time; threads may race harmlessly)."""
        wanted = {ROW_ID: self.need_row_id, ROW_ADDR: self.need_row_addr,
                  ROW_CREATED: self.need_row_versions, ROW_UPDATED: self.need_row_versions}
        return tuple(name for name, needed in wanted.items() if needed)

    def late_fields(self) -> tuple[LanceField, ...]:
        """Output data fields the filter does not read (fetched after filtering)."""
        if self.filter is None or self.filter_columns is None:
            return ()
        return tuple(f for f in self.read_fields
                     if f.name in self.output_fields and f.name not in self.filter_columns)


def plan_scan(
    manifest: Manifest,
    columns: Sequence[str] | None = None,
    filter: str | pc.Expression | None = None,
    *,
    with_row_id: bool = False,
    with_row_address: bool = False,
    translate: bool = True,
) -> ScanPlan:
    """The plan of a Python-API scan: ``columns`` (None: every data column) and a
    ``filter`` (SQL text, or a pyarrow expression as pylance takes), plus the system
    columns asked for. ``translate=False`` leaves the pyarrow form of the filter for later
    (:func:`translated`): the plan then has a ``predicate`` but no ``filter`` and must not
    be scanned with as it is.

    A pyarrow expression is read as its tree (:mod:`.arrow_filters`), so it is planned as
    the same filter in SQL would be (indices, comparisons, row-address pruning); one
    holding a call that model does not know filters as pyarrow evaluates it, reading the
    columns it names. (It is never printed and parsed: pyarrow prints strings in double
    quotes, which SQL reads as column names.)"""
    if columns is None:
        wanted = [f.name for f in manifest.schema.fields]
    else:
        if isinstance(columns, str):
            raise InvalidInputError("columns must be a list of column names")
        wanted = list(columns)
    if with_row_id and ROW_ID not in wanted:
        wanted.append(ROW_ID)
    if with_row_address and ROW_ADDR not in wanted:
        wanted.append(ROW_ADDR)
    _check_names(manifest, wanted)
    expr = predicate = None
    parsed: Expr | None = None
    if isinstance(filter, pc.Expression):
        parsed = decode(filter)
        if parsed is None or not known(parsed):
            used = referenced_columns(filter)
            _check_names(manifest, sorted(used))
            return build_scan_plan(manifest, wanted, filter=filter, filter_columns=used,
                                   filter_text=str(filter))
    elif filter is not None and not isinstance(filter, str):
        raise InvalidInputError(f"a filter is SQL text or a pyarrow expression, got "
                                f"{type(filter).__name__}")
    elif filter is not None:
        if not filter.strip():  # (pylance refuses it too: no condition is None, not "")
            raise InvalidInputError(f"empty filter {filter!r}: pass None to read every row")
        parsed = parse_predicate(filter)
    if parsed is not None:
        schema = filter_schema(manifest)
        # Resolve first: unquoted names match the schema ignoring case.
        predicate = resolve(parsed, schema)
        if translate:
            expr = to_pyarrow(parsed, schema)
    text = filter if filter is None or isinstance(filter, str) else str(filter)
    return build_scan_plan(manifest, wanted, predicate=predicate, filter=expr, filter_text=text,
                           translate=translate, filter_tree=predicate)


def translated(plan: ScanPlan, manifest: Manifest) -> ScanPlan:
    """``plan`` with the pyarrow form of its predicate (a no-op when it has it)."""
    if plan.filter is not None or plan.predicate is None:
        return plan
    return replace(plan, filter=to_pyarrow(plan.predicate, filter_schema(manifest)))


def filter_schema(manifest: Manifest) -> pa.Schema:
    """What a scan's filter and output may name: the data columns as scans return them,
    then the system columns."""
    full = manifest.schema.to_scan_arrow()
    clash = [n for n in full.names if n in SYSTEM_COLUMNS]
    if clash:  # (pylance lets a column be renamed so, then cannot read the table either)
        raise SchemaError(f"column {clash[0]!r} has the name of a system column; rename it "
                          "(alter_columns) to read the table")
    return pa.schema([*full, *_SYSTEM_FIELDS], metadata=full.metadata)


_SYSTEM_FIELDS = tuple(pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS)


def _check_names(manifest: Manifest, names: Sequence[str]) -> None:
    """NotFoundError for the first of ``names`` that is neither a column nor a system one."""
    data_names = [f.name for f in manifest.schema.fields]
    known = set(data_names).union(SYSTEM_COLUMNS)
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise NotFoundError(
                f"column {name!r} does not exist; columns: {', '.join(data_names)}"
            )


def build_scan_plan(
    manifest: Manifest,
    names: Sequence[str],
    *,
    predicate: Expr | None = None,
    filter: pc.Expression | None = None,
    filter_columns: Collection[str] | None = None,
    filter_text: str | None = None,
    schema_metadata: bool = True,
    filter_tree: Expr | None = None,
    translate: bool = True,
) -> ScanPlan:
    """The one way a scan plan is made: output ``names`` (data or system columns), kept
    where the filter holds.

    The filter is ``predicate`` (a tree over the table's columns; translated to pyarrow
    unless ``filter`` is given too) or a pyarrow ``filter`` alone, which then needs the
    top-level names it reads as ``filter_columns``. ``schema_metadata`` keeps the table's
    schema metadata on the output schema (the Python API does, as pylance).
    ``filter_tree`` is the filter as a tree (the pyarrow ``filter`` decoded, or the
    ``predicate`` it is made from), when known to be exactly it: if it is a conjunction of
    comparisons with constants, scans evaluate those directly.
    ``translate=False`` leaves a predicate's pyarrow form for :func:`translated`.
    """
    _check_names(manifest, names)
    schema = filter_schema(manifest)
    if predicate is not None:
        if filter is None and translate:
            filter = to_pyarrow(predicate, schema)
        if filter_columns is None:
            filter_columns = {path[0] for path in expr_columns(predicate)}
    elif filter is not None and filter_columns is None:
        raise InvalidInputError("a pyarrow filter needs the columns it reads")
    used = frozenset(filter_columns) if (filter is not None or predicate is not None) and \
        filter_columns is not None else None
    needed = set(names) | (used or set())
    comparisons = conjunction(filter_tree) if filter is not None or (
        predicate is not None and not translate) else None
    data_names = {f.name for f in manifest.schema.fields}
    if comparisons is not None and not columns_of(comparisons) <= (used or set()) & data_names:
        comparisons = None
    if comparisons is not None:
        comparisons = typed(comparisons, schema)
    return ScanPlan(
        output_fields=tuple(names),
        read_fields=tuple(f for f in manifest.schema.fields if f.name in needed),
        filter=filter,
        filter_text=filter_text,
        need_row_id=ROW_ID in needed,
        need_row_addr=ROW_ADDR in needed,
        need_row_versions=bool(needed & set(VERSION_COLUMNS)),
        output_schema=pa.schema([schema.field(n) for n in names],
                                metadata=schema.metadata if schema_metadata else None),
        filter_columns=used,
        predicate=predicate,
        comparisons=comparisons,
    )


def narrowed(plan: ScanPlan, manifest: Manifest, predicate: Expr | None, *,
             compare: bool = False) -> ScanPlan:
    """``plan`` with its filter replaced by ``predicate`` (None: no filter), reading only
    the columns the output and ``predicate`` need. ``compare``: ``predicate`` is the whole
    filter, so a conjunction of comparisons in it may be evaluated as such (see
    :func:`build_scan_plan`)."""
    new = build_scan_plan(manifest, plan.output_fields, predicate=predicate,
                          filter_tree=predicate if compare else None)
    return replace(new, output_schema=plan.output_schema, filter_text=plan.filter_text)


def matching_rows(store: ObjectStore, manifest: Manifest, plan: ScanPlan,
                  indexed: Callable[[ScanPlan, Sequence[Fragment]], IndexedRead | None]
                  | None = None) -> Iterator[tuple[Fragment, np.ndarray]]:
    """(fragment, offsets of its live rows ``plan`` keeps) for fragments with matches;
    ``indexed`` may answer some fragments from an index (as in :class:`Scanner`).

    ``plan`` must output ``_rowaddr``.
    """
    answer = indexed(plan, manifest.fragments) if indexed is not None else None
    for frag in manifest.fragments:
        if answer is not None and answer.covers(frag.id):
            if not answer.num_rows(frag.id):
                continue
            table = answer.read(frag)
        else:
            table = scan_fragment(store, manifest, frag, plan)
        addresses = table.column(ROW_ADDR)
        if len(addresses):
            yield frag, row_offsets(addresses)


def scan_fragment(
    store: ObjectStore,
    manifest: Manifest,
    fragment: Fragment,
    plan: ScanPlan,
    *,
    offset: int = 0,
    length: int | None = None,
    drop: np.ndarray | None = None,
    max_rows: int | None = None,
    decoded: Mapping[str, pa.Array | None] | None = None,
    reader: FragmentReader | None = None,
) -> pa.Table:
    """The plan applied to physical rows ``[offset, offset+length)`` of one fragment;
    ``drop``: physical row offsets to leave out as if deleted (sorted or not);
    ``max_rows``: only the first that many rows are wanted (a limit): with a filter, the
    other output columns are then read only up to the row completing them.
    ``decoded``: read fields' values already decoded for all the fragment's rows (by
    name; None or missing: read here), for whole-fragment reads only
    (:func:`scan_fragments`); ``reader``: the fragment's reader, when kept."""
    if reader is None:
        reader = FragmentReader(store, manifest, fragment)
    rows = reader.check_rows()  # before the count sizes row addresses or empty columns
    if length is None:
        length = rows - offset
    if plan.comparisons is not None and plan.filter is not None:
        compared = _scan_compared(reader, store, manifest, fragment, plan, offset, length,
                                  drop, max_rows, decoded)
        if compared is not None:
            return compared
    late = plan.late_fields()
    if late:
        return _scan_late(store, manifest, fragment, plan, late, offset, length, drop,
                          max_rows, decoded, reader)
    mask = _live_mask(reader, drop, offset, length)
    got: Mapping[str, pa.Array | None] = decoded or {}
    if mask is not None:
        table = _read_live(store, manifest, reader, plan, mask, offset, got)
    else:
        arrays = [a if (a := got.get(f.name)) is not None else
                  _read_paged(reader, f, offset, length) for f in plan.read_fields]
        names = [f.name for f in plan.read_fields]
        system = plan.system_names
        if system:
            arrays.extend(system_arrays(store, manifest, fragment,
                                        slice(offset, offset + length), system))
            names.extend(system)
        if names:
            table = pa.Table.from_arrays(arrays, names=names)
        else:  # count-only scans: a table with rows but no columns
            table = rows_only(length)
    if plan.filter is not None:
        table = filter_rows(table, plan.filter)
    table = table.select(list(plan.output_fields))
    if max_rows is not None and table.num_rows > max_rows:
        table = table.slice(0, max_rows)
    if not plan.output_fields:
        return table  # casting a table without columns would lose its row count
    return cast_output(table, plan.output_schema, store, fragment)


def scan_fragments(store: ObjectStore, manifest: Manifest, fragments: Sequence[Fragment],
                   plan: ScanPlan, drops: Mapping[int, np.ndarray] | None = None
                   ) -> list[pa.Table]:
    """:func:`scan_fragment` of each of ``fragments`` (all their rows; ``drops``: per
    fragment id, as ``drop``). Each read column of the fragments is decoded in one pass
    across them where their pages allow (:mod:`.batched`): small fragments then cost a
    fraction of a fragment's fixed cost per column each. A filter is then applied to
    each fragment's decoded columns as :func:`scan_fragment` applies it (the other
    output columns filtered or taken in memory)."""
    drops = drops or {}
    if not plan.read_fields or len(fragments) < 2:
        return [scan_fragment(store, manifest, f, plan, drop=drops.get(f.id))
                for f in fragments]
    readers: list[FragmentReader] = []
    checked: list[FragmentReader] = []
    for fragment in fragments:
        reader = FragmentReader(store, manifest, fragment)
        readers.append(reader)
        try:
            reader.check_rows()
        except LanceError:
            continue  # raised again below, when its turn comes
        checked.append(reader)
    columns = WholeColumns(checked, plan.read_fields)
    if len(checked) == len(fragments):
        whole = _scan_run(store, manifest, fragments, checked, plan, columns, drops)
        if whole is not None:
            return whole
    position = {id(r): i for i, r in enumerate(checked)}
    out = []
    for fragment, reader in zip(fragments, readers, strict=True):
        i = position.get(id(reader))
        decoded = None if i is None else columns.of(i)
        out.append(scan_fragment(store, manifest, fragment, plan,
                                 drop=drops.get(fragment.id), decoded=decoded,
                                 reader=reader))
    return out


# The column of a run's positions a general filter keeps (see _scan_run): no table
# column can be named so (a name is never empty).
_POSITION = ""


class _NotJoined(Exception):
    """A column of the run did not decode as one array (see :func:`_scan_run`)."""


def _scan_run(store: ObjectStore, manifest: Manifest, fragments: Sequence[Fragment],
              readers: Sequence[FragmentReader], plan: ScanPlan, columns: WholeColumns,
              drops: Mapping[int, np.ndarray]) -> list[pa.Table] | None:
    """:func:`scan_fragments` done once for the whole run when the columns it reads
    decoded over it (fragments whose pages decoded with no other's read alone and
    joined): deleted and dropped rows, the filter and the output types
    are applied to the run's columns at once, and each fragment's table is a slice of
    the result (no copy). Fragment by fragment, that work cost as much as the decoding
    before it. A filter's columns are decoded first: a run it leaves no rows of decodes
    nothing else. None (the fragment-by-fragment path, which also names the fragment of
    any error) for system columns under a general filter (which may read them), empty
    fragments, a column no fragment of the run decoded together with another's, or
    output that does not conform."""
    system = plan.system_names
    if system and plan.filter is not None and plan.comparisons is None:
        return None
    sizes = np.array([r.check_rows() for r in readers], np.int64)
    if not sizes.all():
        return None
    starts = np.cumsum(sizes) - sizes
    lives = [_live_mask(r, drops.get(f.id)) for r, f in zip(readers, fragments, strict=True)]
    keep = None if all(m is None for m in lives) else np.concatenate(
        [np.ones(n, bool) if m is None else m for m, n in zip(lives, sizes, strict=True)])

    def column(name: str) -> pa.Array:
        array = columns.joined(name)
        if array is None:
            raise _NotJoined
        return array

    try:
        table = None  # the rows the general filter kept, when it ran
        if plan.filter is not None:
            matched = None if plan.comparisons is None else \
                mask(plan.comparisons, {n: column(n) for n in columns_of(plan.comparisons)})
            if matched is not None:
                keep = matched if keep is None else keep & matched
            else:  # the general filter, on live rows only (as fragment by fragment)
                names = [f.name for f in plan.read_fields]
                table = pa.Table.from_arrays(
                    [*map(column, names), pa.array(np.arange(sizes.sum()))],
                    names=[*names, _POSITION])
                if keep is not None:
                    table = table.filter(bool_array(keep))
                table = filter_rows(table, plan.filter)
                kept_at = np.asarray(table.column(_POSITION).combine_chunks())
                counts = np.diff(np.searchsorted(kept_at, [*starts, sizes.sum()]))
        if table is None:
            if keep is None:
                counts = sizes
            else:
                before = np.concatenate([[0], np.cumsum(keep)])
                counts = before[starts + sizes] - before[starts]
        if not plan.output_fields:
            return [rows_only(int(n)) for n in counts]
        if not counts.any():
            return [empty_table(plan.output_schema) for _ in fragments]
        made: dict[str, pa.Array] = {}
        if system:
            if table is not None:
                kept = kept_at
            else:
                kept = np.arange(int(sizes.sum())) if keep is None else np.flatnonzero(keep)
            made = dict(zip(system, _run_system_arrays(store, manifest, fragments, starts,
                                                       kept, system), strict=True))
        if table is not None:
            wanted = [made[n] if n in made else table.column(n) for n in plan.output_fields]
        elif keep is None:
            wanted = [made[n] if n in made else column(n) for n in plan.output_fields]
        else:
            pool, selection = pa.system_memory_pool(), bool_array(keep)  # (see _read_live)
            wanted = [made[n] if n in made else
                      pc.filter(column(n), selection, memory_pool=pool)
                      for n in plan.output_fields]
        out = conformed(wanted, plan.output_schema, store, fragments[0])
    except (_NotJoined, FormatError):
        return None
    cuts = np.cumsum(counts) - counts
    return [out.slice(int(a), int(n)) for a, n in zip(cuts, counts, strict=True)]


def _scan_compared(reader: FragmentReader, store: ObjectStore, manifest: Manifest,
                   fragment: Fragment, plan: ScanPlan, offset: int, length: int,
                   drop: np.ndarray | None, max_rows: int | None = None,
                   decoded: Mapping[str, pa.Array | None] | None = None
                   ) -> pa.Table | None:
    """:func:`scan_fragment` for a plan whose filter is ``plan.comparisons``: the compared
    columns are read and tested first; the other output columns and the system columns
    are then made for the matching rows only (taken when few match), the first
    ``max_rows`` of them when given. None when a comparison needs the general path (its
    constant is not of its column's type)."""
    assert plan.comparisons is not None
    by_name = {f.name: f for f in plan.read_fields}
    tested_names = sorted(columns_of(plan.comparisons))
    got = decoded or {}
    unread = [n for n in tested_names if got.get(n) is None]
    tested = dict(zip(unread, reader.read([by_name[n] for n in unread], offset=offset,
                                          length=length) if unread else [], strict=True))
    tested = {n: tested[n] if n in tested else got[n] for n in tested_names}
    keep = mask(plan.comparisons, tested)
    if keep is None:
        return None
    live = _live_mask(reader, drop, offset, length)
    if live is not None:
        keep &= live
    local = np.flatnonzero(keep)
    if max_rows is not None and local.size > max_rows:
        # the rest is read up to the row completing the rows wanted only
        local = local[:max_rows]
        length = int(local[-1]) + 1 if local.size else 0
        keep = keep[:length]
        tested = {n: a.slice(0, length) for n, a in tested.items()}
        got = {n: a.slice(0, length) for n, a in got.items() if a is not None}
    if not plan.output_fields:
        return rows_only(int(local.size))
    if local.size == 0:
        return empty_table(plan.output_schema)
    rows = local + offset
    many = _reads_range(local.size, length)
    selection = bool_array(keep) if many else array_from_numpy(local)
    pick = (lambda a: a.filter(selection)) if many else (lambda a: a.take(selection))
    others = [f for f in plan.read_fields
              if f.name in plan.output_fields and f.name not in tested]
    if not others:
        fetched: list[pa.Array] = []
    elif many:
        unread_fields = [f for f in others if got.get(f.name) is None]
        read_now = dict(zip((f.name for f in unread_fields),
                            reader.read(unread_fields, offset=offset, length=length)
                            if unread_fields else [], strict=True))
        fetched = [pick(read_now[f.name] if f.name in read_now else got[f.name])
                   for f in others]
    else:  # (decoded columns: taken in memory, ``local`` being their positions too)
        unread_fields = [f for f in others if got.get(f.name) is None]
        taken = dict(zip((f.name for f in unread_fields),
                         reader.take(unread_fields, rows) if unread_fields else [],
                         strict=True))
        fetched = [taken[f.name] if f.name in taken else pick(got[f.name])
                   for f in others]
    columns = {f.name: a for f, a in zip(others, fetched, strict=True)}
    for name, array in tested.items():
        if name in plan.output_fields:
            columns[name] = pick(array)
    system = plan.system_names
    columns.update(zip(system, system_arrays(store, manifest, fragment, rows, system),
                       strict=True))
    table = pa.Table.from_arrays([columns[n] for n in plan.output_fields],
                                 names=list(plan.output_fields))
    return cast_output(table, plan.output_schema, store, fragment)


def _run_system_arrays(store: ObjectStore, manifest: Manifest, fragments: Sequence[Fragment],
                       starts: np.ndarray, positions: np.ndarray, names: Sequence[str]
                       ) -> list[pa.Array]:
    """System columns ``names`` of a run's rows at ``positions`` (sorted, counted from
    the run's first row; ``starts``: where each fragment's rows begin). Row addresses
    are made for the whole run at once; lineage columns fragment by fragment."""
    which = np.searchsorted(starts, positions, "right") - 1
    offsets = positions - starts[which]
    bounds = np.searchsorted(which, np.arange(len(fragments) + 1))
    out = []
    for name in names:
        if name == ROW_ADDR or (name == ROW_ID and not manifest.uses_stable_row_ids):
            ids = np.array([f.id for f in fragments], np.uint64)
            addresses = (ids[which] << np.uint64(32)) | offsets.astype(np.uint64)
            out.append(array_from_numpy(addresses, pa.uint64()))
            continue
        pieces = [system_arrays(store, manifest, f, offsets[a:b], [name])[0]
                  for f, a, b in zip(fragments, bounds[:-1].tolist(), bounds[1:].tolist(),
                                     strict=True) if b > a]
        out.append(pa.concat_arrays(pieces) if pieces else pa.array([], pa.uint64()))
    return out


def _reads_range(matched: int, length: int) -> bool:
    """Whether columns are better read over the whole range and filtered than taken at
    ``matched`` rows of it: a take's cost per row is several times a read's."""
    return matched * 4 >= length


def _live_mask(reader: FragmentReader, drop: np.ndarray | None, offset: int = 0,
               length: int | None = None) -> np.ndarray | None:
    """Which of the fragment's rows ``[offset, offset + length)`` (default: all) are not
    deleted and not in ``drop``; None when every row is. A range's mask is made for the
    range alone (a limited scan reads 8k-row ranges of 1M-row fragments)."""
    mask = reader.keep_mask()
    rows = reader.check_rows()
    length = rows - offset if length is None else length
    ranged = offset != 0 or length != rows
    if drop is not None and len(drop) and ranged:
        drop = np.asarray(drop)
        drop = drop[(drop >= offset) & (drop < offset + length)] - offset
    if ranged and mask is not None:
        mask = mask[offset : offset + length]  # (a view: copied below before a change)
    if drop is not None and len(drop):
        mask = np.ones(length, bool) if mask is None else mask.copy()
        mask[drop] = False
    return mask


def _read_live(store: ObjectStore, manifest: Manifest, reader: FragmentReader,
               plan: ScanPlan, mask: np.ndarray, offset: int,
               decoded: Mapping[str, pa.Array | None] | None = None) -> pa.Table:
    """``plan.read_fields`` and system columns of the rows ``[offset, offset + len(mask))``
    where ``mask`` holds. Each column is filtered as soon as it is decoded, while its
    buffers are still in cache (and freed before the next is decoded); system columns
    are made for the kept rows only. The kept values go to the system allocator, where
    the decoded buffers just freed are: measured on a 10M-row scan dropping 1.75% of its
    rows, Arrow's default pool (mimalloc) returned freed memory to the kernel and had it
    zeroed again, fragment after fragment (~0.3 s of system time; 750 -> 350 ms CPU).
    ``decoded``: as in :func:`scan_fragment` (whole-fragment reads only)."""
    names = [f.name for f in plan.read_fields]
    system = plan.system_names
    if not names and not system:
        return rows_only(int(np.count_nonzero(mask)))
    keep = bool_array(mask)
    got = decoded or {}
    pool = pa.system_memory_pool()
    arrays = [_read_kept(reader, f, keep, offset) if (a := got.get(f.name)) is None
              else pc.filter(a, keep, memory_pool=pool) for f in plan.read_fields]
    if system:
        rows = np.flatnonzero(mask) + offset
        arrays.extend(system_arrays(store, manifest, reader.fragment, rows, system))
        names.extend(system)
    return pa.Table.from_arrays(arrays, names=names)


def _page_cuts(reader: FragmentReader, field: LanceField, offset: int, stop: int
               ) -> list[int]:
    """``offset``, the page boundaries of ``field`` inside ``(offset, stop)``, ``stop``:
    the pieces of a range that lie in one page each (the whole range when the column
    has no such pages)."""
    bounds = reader.page_bounds(field)
    inner = [] if bounds is None else \
        np.unique(bounds[(bounds > offset) & (bounds < stop)]).tolist()
    return [offset, *inner, stop]


def _read_paged(reader: FragmentReader, field: LanceField, offset: int, length: int
                ) -> pa.Array | pa.ChunkedArray:
    """Rows ``[offset, offset + length)`` of ``field``, one chunk per page they span: one
    read of the whole range joins the pages' values, a copy of every value (measured on
    a 10M-row scan whose string column has two pages a fragment: ~5% of its CPU)."""
    cuts = _page_cuts(reader, field, offset, offset + length)
    pieces = [reader.read([field], offset=a, length=b - a)[0]
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, type=pieces[0].type)


def _read_kept(reader: FragmentReader, field: LanceField, keep: pa.BooleanArray,
               offset: int) -> pa.Array | pa.ChunkedArray:
    """Rows ``[offset, offset + len(keep))`` of ``field`` where ``keep`` holds. A column
    whose pages split the range is read and filtered page by page, into one chunk per
    page: the filter copies the kept values anyway, so joining the pages' values first
    (what a read of the whole range does) would copy them once more."""
    pool = pa.system_memory_pool()  # see _read_live
    cuts = _page_cuts(reader, field, offset, offset + len(keep))
    pieces = [pc.filter(reader.read([field], offset=a, length=b - a)[0],
                        keep.slice(a - offset, b - a), memory_pool=pool)
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, type=pieces[0].type)


def scan_rows(store: ObjectStore, manifest: Manifest, fragment: Fragment, plan: ScanPlan,
              rows: np.ndarray, *, live: bool = False,
              reader: FragmentReader | None = None) -> pa.Table:
    """The plan applied to the physical ``rows`` (sorted offsets) of one fragment; deleted
    rows are dropped (``live``: the caller already did). Only the pages holding those
    rows are read. ``reader``: the fragment's reader, when the caller keeps one."""
    if reader is None:
        reader = FragmentReader(store, manifest, fragment)
    mask = None if live else reader.keep_mask()
    if mask is not None and len(rows):
        rows = rows[mask[rows]]
    arrays = reader.take(plan.read_fields, rows) if len(rows) else [
        pa.array([], f.to_scan_arrow().type) for f in plan.read_fields]
    names = [f.name for f in plan.read_fields]
    system = plan.system_names
    if system:
        arrays.extend(system_arrays(store, manifest, fragment, rows, system))
        names.extend(system)
    if not names:
        table = rows_only(len(rows))
    else:
        table = pa.Table.from_arrays(arrays, names=names)
    if plan.filter is not None:
        table = filter_rows(table, plan.filter)
    table = table.select(list(plan.output_fields))
    if not plan.output_fields:
        return table
    return cast_output(table, plan.output_schema, store, fragment)


def take_addresses(store: ObjectStore, manifest: Manifest, addresses: np.ndarray,
                   columns: Sequence[str] | None = None, *,
                   plan: ScanPlan | None = None,
                   readers: FragmentReaders | None = None) -> pa.Table:
    """Rows by row address (uint64 ``fragment_id << 32 | offset``), in the order given.

    Addresses of deleted rows are skipped; an unknown fragment, or an offset past its
    fragment's end, is an error. ``plan``: ``plan_scan(manifest, columns)`` when the
    caller kept it; ``readers``: the fragment readers the caller keeps with that plan
    (filled here by one-row takes, see :data:`FragmentReaders`).
    """
    if plan is None:
        plan = plan_scan(manifest, columns)
    if addresses.size == 1:  # a point lookup's row: no grouping, nothing to reorder
        return _take_one_address(store, manifest, plan, int(addresses[0]), readers)
    groups, order, fragment_readers = [], [], []
    for frag, rows, where in by_fragment(manifest, addresses):
        if rows[-1] >= frag.physical_rows:  # rows are sorted
            raise InvalidInputError(
                f"row offset {int(rows[-1])} is past the end of fragment {frag.id}"
            )
        reader = _kept_reader(store, manifest, frag, readers)
        mask = reader.keep_mask()
        if mask is not None:
            live = mask[rows]
            where, rows = where[live], rows[live]
        groups.append((frag, rows))
        order.append(where)
        fragment_readers.append(reader)
    # many rows: each column taken from every fragment at once, when it can be
    together = (take_many.take_rows(store, manifest, plan, groups, fragment_readers)
                if addresses.size >= take_many.MIN_ROWS else None)
    pieces = [together] if together is not None else [
        scan_rows(store, manifest, frag, plan, rows, live=True, reader=reader)
        for (frag, rows), reader in zip(groups, fragment_readers, strict=True)]
    if not pieces:
        return plan.output_schema.empty_table()
    placed = np.concatenate(order)
    if len(pieces) == 1 and (placed.size < 2 or bool((placed[1:] >= placed[:-1]).all())):
        return pieces[0]  # addresses given in order (a key index's): nothing to reorder
    if not plan.output_fields:  # rows without columns: no order to restore (and Arrow's
        # concatenation and take of tables without columns lose their rows)
        return rows_only(sum(p.num_rows for p in pieces))
    table = pa.concat_tables(pieces)
    inverse = np.argsort(placed, kind="stable")
    return table.take(pa.array(inverse))  # pieces are cast


# Fragment id -> its reader, kept by a caller with a take plan of one manifest (the
# dataset's kept take plans): a point lookup's one-row take then finds the fragment's
# files, the plan's fields grouped by file and the row count check done. A reader holds
# no open file (those stay in the runtime's bounded cache); plain dict reads and writes
# only, so threads share it (two may make the same reader: either is right).
FragmentReaders = dict[int, FragmentReader]
_READERS_KEPT = 1024  # fragments per kept plan (more are read with a new reader each)


def _kept_reader(store: ObjectStore, manifest: Manifest, frag: Fragment,
                 readers: FragmentReaders | None) -> FragmentReader:
    """The reader of ``frag`` kept in ``readers`` (made and kept there when missing)."""
    reader = readers.get(frag.id) if readers is not None else None
    if reader is None or reader.fragment is not frag or reader.manifest is not manifest:
        reader = FragmentReader(store, manifest, frag)
        if readers is not None and len(readers) < _READERS_KEPT:
            readers[frag.id] = reader
    return reader


def _take_one_address(store: ObjectStore, manifest: Manifest, plan: ScanPlan,
                     address: int, readers: FragmentReaders | None = None) -> pa.Table:
    """:func:`take_addresses` of one address: its row, or no row when it is deleted."""
    frag_id, row = address >> 32, address & 0xFFFFFFFF
    frag = next((f for f in manifest.fragments if f.id == frag_id), None)
    if frag is None:
        raise NotFoundError(f"row address refers to fragment {frag_id}, which does not exist")
    if row >= frag.physical_rows:
        raise InvalidInputError(f"row offset {row} is past the end of fragment {frag.id}")
    if plan.filter is not None or frag.deletion_file is not None or not plan.output_fields:
        return scan_rows(store, manifest, frag, plan, np.array([row], np.int64))
    # the row of every column in one pass (no deleted rows here, no filter): what
    # scan_rows gives, without its row arrays
    reader = _kept_reader(store, manifest, frag, readers)
    found = dict(zip((f.name for f in plan.read_fields),
                     reader.take_row(plan.read_fields, row), strict=True))
    system = plan.system_names
    if system:
        found.update(zip(system, system_arrays(store, manifest, frag,
                                               np.array([row], np.int64), system),
                         strict=True))
    return conformed([found[n] for n in plan.output_fields], plan.output_schema, store, frag,
                     plan.output_fields_typed)


def _scan_late(store: ObjectStore, manifest: Manifest, fragment: Fragment, plan: ScanPlan,
               late: tuple[LanceField, ...], offset: int, length: int,
               drop: np.ndarray | None = None, max_rows: int | None = None,
               decoded: Mapping[str, pa.Array | None] | None = None,
               reader: FragmentReader | None = None) -> pa.Table:
    """Filter on the filter's columns first, then fetch ``late`` columns for matches only
    (the first ``max_rows`` when given): taken when few match, else read over the range
    (up to the last match) and filtered. ``decoded``, ``reader``: as in
    :func:`scan_fragment` (a late column decoded already is filtered or taken in
    memory)."""
    late_names = {f.name for f in late}
    early = [n for n in plan.output_fields if n not in late_names]
    outputs = early + ([ROW_ADDR] if ROW_ADDR not in early else [])
    by_name = {f.name: f for f in plan.output_schema}
    probe = replace(
        plan,
        output_fields=tuple(outputs),
        read_fields=tuple(f for f in plan.read_fields if f.name not in late_names),
        need_row_addr=True,
        output_schema=pa.schema([by_name.get(n) or pa.field(ROW_ADDR, pa.uint64())
                                 for n in outputs]),
        filter_columns=None,
        comparisons=None,
    )
    matched = scan_fragment(store, manifest, fragment, probe, offset=offset, length=length,
                            drop=drop, max_rows=max_rows, decoded=decoded, reader=reader)
    if matched.num_rows == 0:
        return plan.output_schema.empty_table()
    rows = row_offsets(matched.column(ROW_ADDR))
    if max_rows is not None:
        length = int(rows[-1]) + 1 - offset  # (rows: sorted) nothing wanted past the last
    if reader is None:
        reader = FragmentReader(store, manifest, fragment)
    known = decoded or {}
    got = {f.name: a for f in late if (a := known.get(f.name)) is not None}
    fetched: Sequence[pa.Array | pa.ChunkedArray]
    if _reads_range(rows.size, length):  # (rows: sorted, inside the range)
        keep = np.zeros(length, bool)
        keep[rows - offset] = True
        selection = bool_array(keep)
        fetched = [_read_kept(reader, f, selection, offset) if f.name not in got else
                   pc.filter(got[f.name].slice(offset, length), selection) for f in late]
    else:
        unread = [f for f in late if f.name not in got]
        taken = dict(zip((f.name for f in unread),
                         reader.take(unread, rows) if unread else [], strict=True))
        at = array_from_numpy(rows)  # (decoded: the fragment's rows from its first)
        fetched = [taken[f.name] if f.name in taken else got[f.name].take(at)
                   for f in late]
    columns = dict(zip((f.name for f in late), fetched, strict=True))
    table = pa.Table.from_arrays(
        [columns[n] if n in columns else matched.column(n) for n in plan.output_fields],
        names=list(plan.output_fields),
    )
    return cast_output(table, plan.output_schema, store, fragment)


def cast_output(table: pa.Table, schema: pa.Schema, store: ObjectStore,
                fragment: Fragment) -> pa.Table:
    """``table`` as ``schema``; data that cannot be (nulls in a non-nullable column, say,
    from a damaged or inconsistent file) is a FormatError naming the fragment's files."""
    return conformed(table.columns, schema, store, fragment)


def conformed(arrays: Sequence[pa.Array | pa.ChunkedArray], schema: pa.Schema,
              store: ObjectStore, fragment: Fragment,
              fields: Sequence[tuple[str, pa.DataType, bool]] | None = None) -> pa.Table:
    """The table of ``arrays`` (one per field of ``schema``, in its order) as
    :func:`cast_output` makes it. ``fields``: (name, type, nullable) of the schema's
    fields when the caller kept them (a schema makes its fields anew on every read)."""
    if fields is None:
        fields = [(f.name, f.type, f.nullable) for f in schema]
    try:
        columns = []
        for column, (name, t, nullable) in zip(arrays, fields, strict=True):
            if column.type.equals(t):
                # No cast: it would refuse the nulls pylance leaves in non-nullable
                # children under null rows (blob descriptions); check the top level only.
                if not nullable and column.null_count:
                    raise ValueError(f"column {name!r} is not nullable but holds "
                                     f"{column.null_count} null value(s)")
            else:
                column = column.cast(t)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=schema)
    except (ValueError, pa.ArrowException) as exc:
        files = ", ".join(f.key for f in fragment.files) or "no data files"
        raise FormatError(f"{store.uri}: fragment {fragment.id} ({files}): {exc}") from exc


class IndexedRead(Protocol):
    """Fragments an index answers (see :mod:`lance_sql.table.index.planner`)."""

    @property
    def description(self) -> str: ...

    def covers(self, fragment_id: int) -> bool: ...

    def num_rows(self, fragment_id: int) -> int: ...

    def read(self, fragment: Fragment) -> pa.Table: ...


class Scanner:
    """A configured read of one table version (pylance's ``LanceScanner`` shape)."""

    def __init__(
        self,
        store: ObjectStore,
        manifest: Manifest,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        batch_size: int | None = None,
        limit: int | None = None,
        offset: int | None = None,
        with_row_id: bool = False,
        with_row_address: bool = False,
        fragments: Sequence[Fragment] | None = None,
        num_threads: int | None = None,
        indexed: Callable[[ScanPlan, Sequence[Fragment]], IndexedRead | None] | None = None,
        drop_rows: Mapping[int, np.ndarray] | None = None,
    ) -> None:
        """``indexed``, given the plan and the fragments, may answer some fragments from an
        index (see :class:`IndexedRead`); the others are scanned. ``drop_rows``: per
        fragment id, physical row offsets the scan leaves out as if deleted (rows an
        index answers are the hook's to leave out)."""
        self.store = store
        self.manifest = manifest
        self._plan = plan_scan(manifest, columns, filter, with_row_id=with_row_id,
                               with_row_address=with_row_address, translate=False)
        _check_count(batch_size, "batch_size", low=1)
        _check_count(limit, "limit")
        _check_count(offset, "offset")
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE
        self.limit = limit
        self.offset = offset or 0
        self.fragments = tuple(manifest.fragments if fragments is None else fragments)
        # a filter on _rowaddr or _rowid reads only the fragments (and the rows of them)
        # its addresses can reach: a point lookup by row id opens one fragment, not all
        self._spans: dict[int, tuple[int, int]] = {}
        if self._plan.predicate is not None:
            ranges = address_ranges(store, manifest, self._plan.predicate)
            if ranges is not None:
                spans = fragment_spans(self.fragments, ranges)
                self.fragments = tuple(f for f, _, _ in spans)
                self._spans = {f.id: (a, b) for f, a, b in spans if b - a != f.physical_rows}
        self.num_threads = num_threads or min(8, os.cpu_count() or 1)
        self.indexed = indexed(self._plan, self.fragments) if indexed is not None else None
        self.drop_rows = drop_rows or {}
        # fragments read in growing row ranges (see _stepped_tables): for a consumer that
        # may stop early; a filtered scan with a limit reads so anyway. ``wanted``: the rows
        # such a consumer is expected to take (a hint sizing the ranges; None: unknown)
        self.stepwise = False
        self.wanted: int | None = None
        answered = self.indexed
        if answered is None or not all(answered.covers(f.id) for f in self.fragments):
            self._plan = translated(self._plan, manifest)  # fragments to scan: now

    @property
    def plan(self) -> ScanPlan:
        """What this scan reads. The pyarrow form of the filter is made when first needed:
        a scan whose fragments indices answer in full never needs it."""
        self._plan = translated(self._plan, self.manifest)
        return self._plan

    @plan.setter
    def plan(self, plan: ScanPlan) -> None:
        self._plan = plan

    def _read_fragment(self, fragment: Fragment) -> pa.Table:
        if self.indexed is not None and self.indexed.covers(fragment.id):
            return self.indexed.read(fragment)
        start, stop = self._span(fragment)
        if stop - start != fragment.physical_rows:  # the rows a row-address filter reaches
            return scan_fragment(self.store, self.manifest, fragment, self.plan,
                                 offset=start, length=stop - start,
                                 drop=self.drop_rows.get(fragment.id))
        return scan_fragment(self.store, self.manifest, fragment, self.plan,
                             drop=self.drop_rows.get(fragment.id))

    def _span(self, fragment: Fragment) -> tuple[int, int]:
        """The physical rows of ``fragment`` the scan reads (all, unless a filter on row
        addresses reaches only some)."""
        return self._spans.get(fragment.id, (0, fragment.physical_rows))

    def _read_range(self, piece: tuple[Fragment, int, int]) -> pa.Table:
        return self._read_first(piece, None)

    def _read_first(self, piece: tuple[Fragment, int, int], max_rows: int | None
                    ) -> pa.Table:
        """The scan's rows of a row range (the first ``max_rows`` of them when given)."""
        fragment, start, stop = piece
        if self.indexed is not None and self.indexed.covers(fragment.id):
            table = self.indexed.read(fragment)  # whole: see _stepped_ranges
            return table if max_rows is None else first_rows(table, max_rows)
        if start == 0 and stop == fragment.physical_rows and max_rows is None:
            return self._read_fragment(fragment)
        return scan_fragment(self.store, self.manifest, fragment, self.plan, offset=start,
                             length=stop - start, drop=self.drop_rows.get(fragment.id),
                             max_rows=max_rows)

    def explain_plan(self) -> str:
        """How this scan reads: which fragments an index answers, which it scans."""
        lines = [f"LanceScan: {len(self.fragments)} fragments, "
                 f"projection=[{', '.join(self._plan.output_fields)}], "
                 f"filter=[{self._plan.filter_text or ''}]"]
        if self.indexed is not None:
            lines.append(f"  {self.indexed.description}")
        return "\n".join(lines) + "\n"

    @property
    def projected_schema(self) -> pa.Schema:
        return self._plan.output_schema

    @property
    def dataset_schema(self) -> pa.Schema:
        """The table's schema (every column, as scans return them), as pylance's."""
        return self.manifest.schema.to_scan_arrow()

    def _fragment_tables(self) -> Generator[pa.Table, None, None]:
        """Fragment results in order, read ahead in a pool owned by this iterator.

        Closing the iterator (a limit reached, the consumer gone, an error) closes the
        pool: reads not started are dropped and running ones joined.
        """
        frags = [f for f in self.fragments if f.physical_rows > 0]
        if self.indexed is not None:
            indexed = self.indexed
            frags = [f for f in frags if not indexed.covers(f.id) or indexed.num_rows(f.id)]
            if all(indexed.covers(f.id) for f in frags):
                for frag in frags:  # takes of the rows found: threads did not pay (measured)
                    yield indexed.read(frag)
                return
        if self.stepwise or (self.limit is not None and not self._unfiltered):
            yield from self._stepped_tables(frags)
            return
        yield from self._grouped([(f, *self._span(f)) for f in frags])

    def _grouped(self, ranges: Sequence[tuple[Fragment, int, int]]
                 ) -> Generator[pa.Table, None, None]:
        """The reads of ``ranges`` (row ranges of fragments), in order; read ahead in a
        pool owned by this iterator, a task per run of consecutive ranges of at least
        :data:`MIN_TASK_ROWS` rows (see :func:`_task_groups`), unless the reads are too
        small to gain from threads (then on the caller's thread: :meth:`_small`)."""
        groups = _task_groups(ranges)
        if len(groups) <= 1 or self.num_threads <= 1 or self._small(ranges):
            yield from self._read_ranges(ranges)
            return
        with WorkerPool("scan", self.num_threads) as pool:
            for tables in pool.ordered(self._read_group, groups, self.num_threads):
                yield from tables

    def _read_ranges(self, ranges: Sequence[tuple[Fragment, int, int]]
                     ) -> Iterator[pa.Table]:
        """The reads of ``ranges`` in order; runs of whole small fragments read together
        (:func:`scan_fragments`), up to :func:`batch_rows` rows at a time."""
        for run, together in runs_read_together(
                ranges, self._batchable, lambda piece: piece[2], lambda: batch_rows(self.plan)):
            if together:
                yield from scan_fragments(self.store, self.manifest,
                                          [fragment for fragment, _, _ in run], self.plan,
                                          self.drop_rows)
            else:
                yield self._read_range(run[0])

    def _batchable(self, piece: tuple[Fragment, int, int]) -> bool:
        """Whether ``piece`` is a whole fragment of at most :data:`BATCH_FRAGMENT_ROWS`
        rows that no index answers."""
        fragment, start, stop = piece
        return (reads_together(fragment, start, stop)
                and (self.indexed is None or not self.indexed.covers(fragment.id)))

    def _small(self, ranges: Sequence[tuple[Fragment, int, int]]) -> bool:
        """Whether ``ranges`` are read faster on one thread (see :mod:`.side_by_side`)."""
        plan = self._plan
        width = row_width(f.to_scan_arrow().type for f in plan.read_fields) + 8 * len(
            plan.system_names)
        return reads_are_small(width, sum(b - a for _, a, b in ranges), len(ranges))

    def _read_group(self, group: Sequence[tuple[Fragment, int, int]]) -> list[pa.Table]:
        return list(self._read_ranges(group))

    def _pieces(self, ranges: Iterator[P], read: Callable[[P], pa.Table]
                ) -> Generator[pa.Table, None, None]:
        """``read`` of each of ``ranges`` (row ranges of fragments), in order (read ahead in
        a pool owned by this iterator when there is more than one)."""
        first = next(ranges, None)
        if first is None:
            return
        second = next(ranges, None)
        if second is None or self.num_threads <= 1:
            for piece in itertools.chain((first,), () if second is None else (second,),
                                         ranges):
                yield read(piece)
            return
        with WorkerPool("scan", self.num_threads) as pool:
            yield from pool.ordered(read, itertools.chain((first, second), ranges),
                                    self.num_threads)

    def _live_ranges(self, frags: Sequence[Fragment]) -> Iterator[tuple[Fragment, int, int]]:
        """For a scan without a filter: see :func:`live_ranges`."""
        return live_ranges(self.store, self.manifest, frags, self.offset, self.limit,
                           self.drop_rows)

    def _stepped_tables(self, frags: Sequence[Fragment]) -> Iterator[pa.Table]:
        """For a filtered scan with a limit (or a ``stepwise`` one): the fragments read in
        row ranges sized by a :class:`RangeSizer`, so that the scan stops reading soon
        after enough rows matched or its consumer stopped. Ranges are read one at a time
        while the next is expected to complete the rows wanted (a pool reading ahead would
        read ranges nobody takes); then, the rest read ahead in a pool. With a limit, each
        range's read stops at the row completing it (a hint, ``wanted``, stops none: the
        consumer may drop rows)."""
        exact = self.limit is not None
        wanted = self.offset + self.limit if self.limit is not None else self.wanted
        first = LIMITED_FIRST_ROWS
        if wanted is not None and self._unfiltered:  # about every row read is kept
            first = min(LIMITED_FIRST_ROWS, max(LIMITED_UNFILTERED_ROWS, 2 * wanted))
        sizer = RangeSizer(wanted, first)
        ranges = self._stepped_ranges(frags, sizer, exact)

        def read(piece: tuple[Fragment, int, int, int | None]) -> pa.Table:
            table = self._read_first(piece[:3], piece[3])
            sizer.record(piece[2] - piece[1], table.num_rows)
            return table

        for piece in ranges:
            yield read(piece)
            if not sizer.expects_done:
                break
        else:
            return
        yield from self._pieces(ranges, read)

    def _stepped_ranges(self, frags: Sequence[Fragment], sizer: RangeSizer, exact: bool
                         ) -> Iterator[tuple[Fragment, int, int, int | None]]:
        """Each fragment in row ranges of the sizes ``sizer`` gives as they are asked for
        (fragments an index answers stay whole), with the most rows a range may give
        when ``exact``: those still wanted when it is asked for. (Asked for in order, on
        the consumer's thread, a range's count includes no later range's rows.)"""
        for frag in frags:
            whole = self.indexed is not None and self.indexed.covers(frag.id)
            start, end = (0, frag.physical_rows) if whole else self._span(frag)
            while start < end:
                stop = end if whole else min(end, start + sizer.next_rows())
                yield frag, start, stop, sizer.still_wanted() if exact else None
                start = stop

    @property
    def _unfiltered(self) -> bool:
        return self._plan.predicate is None and self._plan.filter is None

    def _limited_tables(self) -> Generator[pa.Table, None, None]:
        skip = self.offset
        remaining = self.limit
        if remaining == 0:
            return
        tables: Generator[pa.Table, None, None]
        if self._unfiltered and (remaining is not None or skip) and (
                self.indexed is None or not any(self.indexed.covers(f.id)
                                                for f in self.fragments)):
            # the ranges hold exactly the rows wanted: the offset is skipped in them
            frags = [f for f in self.fragments if f.physical_rows > 0]
            tables = self._pieces(self._live_ranges(frags), self._read_range)
            skip = 0
        else:
            tables = self._fragment_tables()
        with contextlib.closing(tables):  # its pool is joined here, not when collected
            yield from self._sliced(tables, skip, remaining)

    @staticmethod
    def _sliced(tables: Iterator[pa.Table], skip: int, remaining: int | None
                ) -> Iterator[pa.Table]:
        """``tables`` past their first ``skip`` rows, up to ``remaining`` rows in all."""
        for table in tables:
            if skip:
                if table.num_rows <= skip:
                    skip -= table.num_rows
                    continue
                # lengths explicit: a table without columns does not clamp them
                table = table.slice(skip, table.num_rows - skip)
                skip = 0
            if remaining is not None:
                table = table.slice(0, min(remaining, table.num_rows))
                remaining -= table.num_rows
            if table.num_rows:
                yield table
            if remaining == 0:
                return

    def to_tables(self) -> Iterator[pa.Table]:
        """The result a table per fragment (fewer, larger pieces than batches; no copy)."""
        return self._limited_tables()

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The result in batches of at most ``batch_size`` rows. A whole scan reads its
        first batch's rows alone first, so the first batch comes after a read of that
        many rows, not of the whole first fragment; the rest is read a fragment at a
        time, as :meth:`to_table` reads it."""
        tables: Generator[pa.Table, None, None]
        if self.limit is None and not self.offset and self.indexed is None \
                and not self.stepwise:
            tables = self._first_batch_apart([f for f in self.fragments
                                              if f.physical_rows > 0])
        else:
            tables = self._limited_tables()
        with contextlib.closing(tables):  # its pool is joined here, not when collected
            for table in tables:
                if any(column.num_chunks > 1 for column in table.columns):
                    table = table.combine_chunks()
                yield from table.to_batches(max_chunksize=self.batch_size)

    def _first_batch_apart(self, frags: Sequence[Fragment]) -> Generator[pa.Table, None, None]:
        """The scan's tables, the first fragment's first ``batch_size`` rows read alone
        first (on the caller's thread), then the rest as :meth:`to_table` reads it."""
        ranges = [(f, *self._span(f)) for f in frags]
        if ranges:
            first, start, end = ranges[0]
            if end - start > 2 * self.batch_size:
                yield self._read_range((first, start, start + self.batch_size))
                ranges[0] = (first, start + self.batch_size, end)
        yield from self._grouped(ranges)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        tables = list(self._limited_tables())
        if not tables:
            return self.projected_schema.empty_table()
        if not self._plan.output_fields:  # concatenating column-less tables loses rows
            return pa.table({"_": pa.nulls(sum(t.num_rows for t in tables))}).select([])
        return pa.concat_tables(tables)

    def count_rows(self) -> int:
        if (self._plan.predicate is None and self._plan.filter is None and self.limit is None
                and not self.offset and not any(len(d) for d in self.drop_rows.values())):
            return sum(f.num_rows for f in self.fragments)
        return sum(t.num_rows for t in self._limited_tables())


# A pool task reads consecutive fragments until it holds at least this many rows: the
# decoding of a small fragment is mostly Python holding the GIL, so a task per tiny
# fragment only adds futures and contention (1000 fragments of 1000 rows: 5-15% CPU).
MIN_TASK_ROWS = 64 * 1024
# Whole fragments of at most BATCH_FRAGMENT_ROWS rows are read BATCH_ROWS rows at a time,
# each column of theirs decoded in one pass (see scan_fragments); larger fragments gain
# nothing from it (their fixed cost per column is small beside their decoding).
BATCH_FRAGMENT_ROWS = 32 * 1024
BATCH_ROWS = 128 * 1024
BATCH_BYTES = 64 << 20


def batch_rows(plan: ScanPlan) -> int:
    """The most rows a run of fragments read together holds (at least one fragment):
    :data:`BATCH_ROWS`, fewer when the plan's rows are wide (:data:`BATCH_BYTES` of
    decoded values at most, by :func:`row_width`'s estimate)."""
    width = row_width(f.to_scan_arrow().type for f in plan.read_fields) + 8 * len(
        plan.system_names)
    return max(1, min(BATCH_ROWS, BATCH_BYTES // max(width, 1)))


def runs_read_together(items: Sequence[P], together: Callable[[P], bool],
                       rows: Callable[[P], int], limit: Callable[[], int]
                       ) -> Iterator[tuple[list[P], bool]]:
    """``items`` in order as runs: ``(run, True)`` for consecutive items ``together``
    holds for, at most ``limit()`` rows (by ``rows``) a run but never empty; ``([item],
    False)`` for each other item. ``limit`` is asked once, when first needed."""
    run: list[P] = []
    held = 0
    bound = 0
    for item in items:
        if not together(item):
            if run:
                yield run, True
                run, held = [], 0
            yield [item], False
            continue
        bound = bound or limit()
        n = rows(item)
        if run and held + n > bound:
            yield run, True
            run, held = [], 0
        run.append(item)
        held += n
    if run:
        yield run, True


def reads_together(fragment: Fragment, start: int, stop: int) -> bool:
    """Whether a read of rows ``[start, stop)`` of ``fragment`` may be one of a run of
    fragments read together (:func:`scan_fragments`): all its rows, and at most
    :data:`BATCH_FRAGMENT_ROWS` of them."""
    return start == 0 and stop == fragment.physical_rows <= BATCH_FRAGMENT_ROWS


def _task_groups(ranges: Sequence[tuple[Fragment, int, int]]
                 ) -> list[list[tuple[Fragment, int, int]]]:
    """``ranges`` (fragment, start, stop) in order, cut into runs of at least
    :data:`MIN_TASK_ROWS` rows (the last run may hold fewer); a range that large is a run
    of its own."""
    groups: list[list[tuple[Fragment, int, int]]] = []
    rows = MIN_TASK_ROWS
    for piece in ranges:
        if rows >= MIN_TASK_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(piece)
        rows += piece[2] - piece[1]
    return groups


def live_ranges(store: ObjectStore, manifest: Manifest, frags: Sequence[Fragment],
                offset: int, limit: int | None,
                drop_rows: Mapping[int, np.ndarray] | None = None
                ) -> Iterator[tuple[Fragment, int, int]]:
    """(fragment, start, stop): the physical row range of each of ``frags`` holding the live
    rows ``[offset, offset + limit)`` of their scan in order (``limit`` None: to the end);
    ``drop_rows`` as :class:`Scanner`'s. Fragments wholly before the offset are skipped by
    their live-row counts, unread; each range ends at the row completing the limit, so a
    read of it decodes only the pages it covers."""
    skip = offset
    remaining = limit
    for frag in frags:
        if remaining == 0:
            return
        if frag.physical_rows == 0:
            continue
        drop = None if drop_rows is None else drop_rows.get(frag.id)
        live = _live_mask(FragmentReader(store, manifest, frag), drop)
        rows = frag.physical_rows if live is None else int(np.count_nonzero(live))
        if skip >= rows:
            skip -= rows
            continue
        take = rows - skip if remaining is None else min(rows - skip, remaining)
        if live is None:
            start, stop = skip, skip + take
        else:
            kept = np.flatnonzero(live)
            start, stop = int(kept[skip]), int(kept[skip + take - 1]) + 1
        skip = 0
        if remaining is not None:
            remaining -= take
        yield frag, start, stop


# Counts are int64 inside Arrow: larger ones cannot be sliced by.
MAX_COUNT = (1 << 63) - 1


def _check_count(value: object, what: str, low: int = 0) -> None:
    """``value`` is None or an integer in ``[low, MAX_COUNT]``; else InvalidInputError."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidInputError(f"{what} must be an integer, got {value!r}")
    if not low <= int(value) <= MAX_COUNT:
        raise InvalidInputError(f"{what} must be between {low} and {MAX_COUNT}, got {value!r}")


def rows_only(num_rows: int) -> pa.Table:
    """A table with ``num_rows`` rows and no columns (what count-only scans produce)."""
    return pa.table({"_": pa.nulls(num_rows)}).select([])
