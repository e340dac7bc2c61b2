"""The MemWAL spec's execution nodes, as operators over Arrow record-batch streams.

Every node has an output ``schema``, ``children``, ``execute()`` (an iterator of
``pa.RecordBatch``; lookup nodes also take the keys still to resolve) and ``describe()``
(its line in EXPLAIN); :func:`format_plan` prints a tree in the spec's shape.

Scans: ``DeduplicateExec`` over a ``UnionExec`` of ``ScanExec`` s. The newest row of a key
is decided before any filter (DESIGN decision 6): the newer sources are small, so the
node first reads their keys (key columns only), works out which of their rows are the
newest of their key (:class:`NewestRows`), and then streams every source — each with the
user's filter pushed into it — keeping a newer source's row only if it is its key's
winner, and a base-table row only if no newer source holds its key. Nothing is
materialised but the newer sources' keys. The winners are cached per set of immutable
newer sources, and a newer source is read as its winning rows, cached per source, newer
sources of its region and projection (:meth:`NewestRows.winning_rows`), the pushed filter
then applied to them; with a BTREE index on the key, the base rows newer
keys hide are found in it and left out by the base scan itself (:mod:`.hidden`), so base
rows stream as read. Base rows that a later base row of their key supersedes (a key
appended twice) are left out of the base scan the same way (:mod:`.duplicates`: found
once per base version; none in a base of unique keys).

Lookups: ``CoalesceFirstExec`` over ``BloomFilterGuardExec`` + ``TakeLastExec`` per
generation, newest first, then the base table's ``TakeLastExec``; keys found (a
tombstone counts: the key is deleted) are not asked of older sources, and once none are
left the remaining inputs never run.

Search (:mod:`.search`): ``KNNExec`` per source (exact top-k), ``FilterStaleExec`` drops
candidates a newer generation may hold (bloom filters; or exact keys), ``SortExec``,
``GlobalLimitExec``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr.arrow import (
    Call,
    Column,
    Expr,
    Literal,
    columns,
    filter_serially,
    to_pyarrow,
)
from lance_sql.expr.parser import describe_sql
from lance_sql.memwal.read.duplicates import (
    duplicates_state,
    merged_rows,
    superseded_base_rows,
)
from lance_sql.memwal.read.hidden import HiddenRows, hidden_base_rows
from lance_sql.memwal.read.keys import Keys, KeySet
from lance_sql.memwal.read.metrics import NodeMetrics, measured, not_own_work, own_work
from lance_sql.memwal.read.sources import BaseSource, Source, newest_first
from lance_sql.memwal.value_cast import as_column_type
from lance_sql.memwal.wal import TOMBSTONE
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID, VERSION_COLUMNS
from lance_sql.table.read.comparisons import filter_table
from lance_sql.table.read.masks import bool_array
from lance_sql.table.runtime.cache import LSM_WINNERS, LSM_WINNING_ROWS
from lance_sql.table.runtime.context import current_runtime
from lance_sql.table.runtime.workers import WorkerPool

__all__ = [
    "BASE_ONLY", "GEN", "REGION", "DISTANCE", "BloomFilterGuardExec", "CoalesceFirstExec",
    "DeduplicateExec", "ExecNode", "GlobalLimitExec", "NewestRows", "ProjectionExec",
    "ScanExec", "SortExec", "TakeLastExec", "UnionExec", "conform", "format_plan", "key_text",
    "lacked_columns",
    "retyped_columns",
]

GEN = "_gen"
REGION = "_region"
DISTANCE = "_distance"
KEY_POSITION = "_key"
SOURCE_COLUMNS = (GEN, REGION)
# The base table's row ids and versions: NULL on rows of newer sources (not merged yet)
BASE_ONLY = (ROW_ID, *VERSION_COLUMNS)
# the columns a source answers whatever its rows hold (see lacked_columns)
_BASE_LOCAL = frozenset(SOURCE_COLUMNS)
_NEWER_LOCAL = frozenset({*SOURCE_COLUMNS, *BASE_ONLY})


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``data`` as a batch of exactly ``schema`` (missing columns NULL, types cast)."""
    if not len(schema):  # no columns: the rows still count
        if isinstance(data, pa.Table):
            return pa.record_batch({"_": pa.nulls(data.num_rows)}).select([])
        return data.select([])
    if isinstance(data, pa.RecordBatch) and data.schema.equals(schema, check_metadata=True):
        return data  # already so (most batches of a scan): ~0.1 us against ~20 below
    if isinstance(data, pa.Table) and data.schema.names == schema.names:
        batches = data.combine_chunks().to_batches()
        if len(batches) == 1:
            data = batches[0]
    if (isinstance(data, pa.RecordBatch) and data.schema.names == schema.names
            and all(a.type.equals(f.type) for a, f in zip(data.columns, schema, strict=True))):
        return pa.RecordBatch.from_arrays(data.columns, schema=schema)  # no copy
    return pa.RecordBatch.from_arrays([conformed_column(data, f) for f in schema],
                                      schema=schema)


def conformed_column(data: pa.Table | pa.RecordBatch, f: pa.Field, *, combine: bool = True
                     ) -> pa.Array | pa.ChunkedArray:
    """Column ``f`` of ``data`` as ``f``'s type (cast when of another; NULL when
    ``data`` has none), one array unless ``combine`` is off (a table's chunks kept)."""
    if data.schema.get_field_index(f.name) < 0:
        return pa.nulls(data.num_rows, f.type)
    a = data.column(f.name)
    if combine and isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return as_column_type(a, f.type, f"column {f.name!r}")


def _source_columns(source: Source, n: int, names: Sequence[str] = SOURCE_COLUMNS
                    ) -> dict[str, pa.Array]:
    """The source's ``_gen`` / ``_region`` constants for ``n`` rows (those in ``names``)."""
    out = {}
    if GEN in names:
        out[GEN] = array_from_numpy(np.full(n, source.gen, np.int64))
    if REGION in names:
        region = None if source.region is None else str(source.region)
        out[REGION] = pa.repeat(pa.scalar(region, pa.string()), n)
    return out


def _conjuncts(expr: Expr | None) -> list[Expr]:
    if expr is None:
        return []
    if isinstance(expr, Call) and expr.op == "and":
        return [c for a in expr.args for c in _conjuncts(a)]
    return [expr]


def local_filter_columns(predicate: Expr | None) -> set[str]:
    """The columns of ``predicate``'s conjuncts that name a source's own columns (``_gen``,
    ``_region``, the base-only ones): a scan applies those conjuncts to its rows itself
    (see :class:`ScanExec`), so it must read every column they name (``_gen < 0 OR v > 9``
    reads ``v`` though the query outputs no ``v``)."""
    local = {*SOURCE_COLUMNS, *BASE_ONLY}
    out: set[str] = set()
    for part in _conjuncts(predicate):
        names = {p[0] for p in columns(part)}
        if names & local:
            out |= names
    return out


def _and(parts: list[Expr]) -> Expr | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Call("and", tuple(parts))


class ExecNode:
    """A plan node (see the module docstring); :attr:`metrics` is what it did while it
    ran (EXPLAIN ANALYZE)."""

    schema: pa.Schema
    children: tuple[ExecNode, ...] = ()

    @property
    def metrics(self) -> NodeMetrics:
        """The node's run-time metrics (made on first use, once: setdefault is atomic)."""
        found = self.__dict__.get("_metrics")
        if found is None:
            found = self.__dict__.setdefault("_metrics", NodeMetrics())
        return found

    def execute(self) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.execute()

    def describe(self) -> str:
        return type(self).__name__

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.execute()), schema=self.schema)


def format_plan(node: ExecNode, indent: int = 0, *, analyze: bool = False) -> str:
    """The tree, one node a line, children indented by two spaces; ``analyze``: each
    line ends with the node's metrics."""
    line = "  " * indent + node.describe()
    if analyze:
        line += ", " + node.metrics.text()
    lines = [line]
    lines += [format_plan(c, indent + 1, analyze=analyze) for c in node.children]
    return "\n".join(lines)


# ---------------------------------------------------------------------- scans


def _nulled(expr: Expr, names: set[str], schema: pa.Schema) -> Expr:
    """``expr`` with the columns ``names`` as NULL of their types in ``schema`` (a source
    whose rows lack them): typed, so functions and LIKE still find their kernels."""
    if isinstance(expr, Column):
        if expr.path[0] not in names:
            return expr
        at = schema.get_field_index(expr.path[0])
        if len(expr.path) == 1 and at >= 0:
            return Literal(None, schema.field(at).type)
        return Literal(None, pa.null())
    if isinstance(expr, Call):
        return Call(expr.op, tuple(_nulled(a, names, schema) for a in expr.args))
    return expr


def lacked_columns(source: Source, names: Collection[str]) -> set[str]:
    """The data columns among ``names`` that ``source``'s rows lack (added to the table
    after they were written)."""
    held = source.column_names()
    if held is None:
        return set()
    local = _BASE_LOCAL if source.is_base else _NEWER_LOCAL
    return {n for n in names if n not in held and n not in local}


def retyped_columns(source: Source, names: Collection[str], schema: pa.Schema) -> set[str]:
    """The columns among ``names`` that ``source``'s rows hold under another type than
    ``schema``'s (retyped since they were written: they are cast when read)."""
    types = None if source.is_base else source.column_types()  # (the base: the view's)
    if types is None:
        return set()
    return {n for n in names if n in types and schema.get_field_index(n) >= 0
            and not types[n].equals(schema.field(n).type)}


class ScanExec(ExecNode):
    """Rows of one source: ``schema``'s columns (``_gen`` / ``_region`` are the source's
    constants; ``_rowid`` and the row versions NULL but on the base table) where
    ``predicate`` holds; the parts of the predicate on data columns are pushed into the
    source's own scan (indices and pruning apply there), the others apply to its rows."""

    def __init__(self, source: Source, schema: pa.Schema, predicate: Expr | None = None,
                 *, stepwise: bool = False, rows_wanted: int | None = None) -> None:
        """``stepwise``: the plan may stop early (a limit): a base table is read in growing
        row ranges rather than whole fragments (see :meth:`Source.scan`), sized for
        ``rows_wanted`` rows (the limit; a hint)."""
        self.source = source
        self.stepwise = stepwise and source.is_base
        self.rows_wanted = rows_wanted
        self.schema = schema
        self.predicate = predicate
        pushed: list[Expr] = []
        residual: list[Expr] = []
        local = set(SOURCE_COLUMNS) if source.is_base else {*SOURCE_COLUMNS, *BASE_ONLY}
        for part in _conjuncts(predicate):
            names = {p[0] for p in columns(part)}
            lacked = lacked_columns(source, names)
            if lacked or retyped_columns(source, names, schema):
                # columns added after the source's rows were written (NULL there), or
                # retyped since (their values cast first): applied to its rows here (the
                # plan reads every filter column then: see LsmView.scan_plan)
                residual.append(_nulled(part, lacked, schema))
            else:
                (residual if names & local else pushed).append(part)
        self.pushed, self.residual = _and(pushed), _and(residual)

    @property
    def read_names(self) -> list[str]:
        """The columns read from the source (``_gen`` and ``_region`` are made here)."""
        return [n for n in self.schema.names if n not in SOURCE_COLUMNS]

    @property
    def pushed_names(self) -> set[str]:
        """The columns the pushed filter reads."""
        return set() if self.pushed is None else {p[0] for p in columns(self.pushed)}

    @property
    def winner_names(self) -> list[str]:
        """The columns of a newer source's winning rows this scan reads: its own and the
        pushed filter's (see :meth:`execute`'s ``rows``)."""
        return list(dict.fromkeys([*self.read_names, *sorted(self.pushed_names)]))

    @measured
    def execute(self, drop_rows: Mapping[int, np.ndarray] | None = None,
                omit: Sequence[str] = (), rows: WinningRows | None = None
                ) -> Iterator[pa.RecordBatch]:
        """``drop_rows``: the source's rows to leave out (see :meth:`Source.scan`);
        ``omit``: columns nobody reads after this node, left out of its batches (not read);
        ``rows``: the source's rows to scan instead of the source (its winning rows, in
        memory: see :meth:`NewestRows.winning_rows`), the pushed filter applied to them
        (they must hold its columns)."""
        residual = None
        if self.residual is not None:
            residual = to_pyarrow(self.residual, self.schema)
            omit = [n for n in omit if n not in {p[0] for p in columns(self.residual)}]
        schema = self.schema
        if omit:
            schema = pa.schema([f for f in schema if f.name not in omit])
        wanted = [n for n in schema.names if n not in SOURCE_COLUMNS]
        if rows is not None:
            table = rows.table
            if self.pushed is not None:
                # (spelled as the view's columns, which the winners hold by those names)
                table = filter_table(table, self.pushed)
                held = set(table.schema.names)
                table = table.select([n for n in wanted if n in held])
            scan: Iterable[pa.RecordBatch] = table.to_batches()
        elif self.stepwise:
            scan = self.source.scan(wanted, self.pushed, drop_rows or None, stepwise=True,
                                    rows_wanted=self.rows_wanted)
        elif not drop_rows:
            scan = self.source.scan(wanted, self.pushed)
        else:
            scan = self.source.scan(wanted, self.pushed, drop_rows)
        for batch in scan:
            if not batch.num_rows:
                continue
            self.metrics.add("rows_read", batch.num_rows)  # (before the residual filter)
            extra = _source_columns(self.source, batch.num_rows, schema.names)
            for name, values in extra.items():
                batch = batch.append_column(name, values)
            out = conform(batch, schema)
            if residual is not None:
                out = filter_serially(pa.Table.from_batches([out]), residual)
                out = conform(out, schema)
            if out.num_rows:
                yield out

    def describe(self) -> str:
        text = describe_sql(self.predicate) if self.predicate is not None else ""
        return f"ScanExec: {self.source.label}, source={self.source.kind}, filter=[{text}]"


# Counts of groups of newer sources whose winners were read as one (tests).
READ_TOGETHER = [0]
_SOURCE_AT = "__lance_sql_source"


@dataclass(frozen=True)
class WinnersRead:
    """Newer sources' winners read as groups (:func:`read_winners_together`): by ``id``
    of each scan read so, its batches (slices of its group's)."""

    batches_of: dict[int, list[pa.RecordBatch]]


def read_winners_together(scans: Sequence[ScanExec], rows: Sequence[WinningRows | None]
                          ) -> WinnersRead:
    """What ``scans`` of newer sources whose winners are in memory (``rows``) yield, for
    those that share their pushed filter, their winners' columns and their output schema
    with another scan and apply no filter of their own after it: their winners joined,
    filtered in one pass and made into batches of the schema at once, each scan's own
    metrics counted from its share. Per scan, this work has a fixed cost (its filter
    typed, its batches conformed and counted) that many small sources pay many times
    over: 64 regions of 3 generations and a MemTable, 10M-row base, ``cat = 7``:
    see the README's LSM section."""
    groups: dict[tuple, list[tuple[ScanExec, WinningRows]]] = {}
    for scan, found in zip(scans, rows, strict=True):
        if found is None or scan.residual is not None or (
                scan.pushed is not None
                and not scan.pushed_names <= set(found.table.schema.names)):
            continue
        key = (scan.pushed, found.table.schema, scan.schema)
        groups.setdefault(key, []).append((scan, found))
    out = WinnersRead({})
    for (pushed, _, schema), members in groups.items():
        if len(members) < 2:
            continue
        READ_TOGETHER[0] += 1
        sizes = [found.table.num_rows for _, found in members]
        joined = pa.concat_tables([found.table for _, found in members])
        at = np.repeat(np.arange(len(members), dtype=np.int64), sizes)
        if pushed is not None:
            joined = filter_table(joined.append_column(_SOURCE_AT, array_from_numpy(at)),
                                  pushed)
            at = np.asarray(numpy_of(joined.column(_SOURCE_AT)), np.int64)
            joined = joined.drop_columns([_SOURCE_AT])
        counts = np.bincount(at, minlength=len(members)).tolist()
        wanted = [n for n in schema.names if n not in SOURCE_COLUMNS]
        held = set(joined.schema.names)
        joined = joined.select([n for n in wanted if n in held])
        if GEN in schema.names or REGION in schema.names:
            # the sources' constants, row by row (one batch then)
            joined = joined.combine_chunks()
            sources = [scan.source for scan, _ in members]
            taken = array_from_numpy(at)
            if GEN in schema.names:
                gens = array_from_numpy(np.array([s.gen for s in sources], np.int64))
                joined = joined.append_column(GEN, gens.take(taken))
            if REGION in schema.names:
                regions = pa.array([None if s.region is None else str(s.region)
                                    for s in sources], pa.string())
                joined = joined.append_column(REGION, regions.take(taken))
        start = 0
        for (scan, _), n in zip(members, counts, strict=True):
            # each scan's rows in their place (a scan's output keeps the sources' order)
            batches = [conform(b, schema) for b in joined.slice(start, n).to_batches()
                       if b.num_rows] if n else []
            start += n
            scan.metrics.add("rows_read", n)
            scan.metrics.output(n, len(batches))
            out.batches_of[id(scan)] = batches
    return out


class UnionExec(ExecNode):
    """Its children's batches, one child after the other."""

    def __init__(self, children: Sequence[ExecNode]) -> None:
        if not children:
            raise InvalidInputError("a union needs at least one input")
        self.children = tuple(children)
        self.schema = children[0].schema

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        for child in self.children:
            for batch in child.execute():
                yield batch if batch.schema.equals(self.schema) else conform(batch,
                                                                             self.schema)


def _cast(keys: list[pa.Array], types: Sequence[pa.DataType]) -> list[pa.Array]:
    return [k if k.type.equals(t) else k.cast(t) for k, t in zip(keys, types, strict=True)]


class _Winners:
    """The newest rows' addresses of each of a list of (non-base) sources, and the keys
    each holds (see :class:`NewestRows`)."""

    def __init__(self, winners: list[np.ndarray], keys: list[list[pa.Array]]) -> None:
        self.winners = winners
        self.keys = keys
        self._all: KeySet | None = None  # built on first use (no base key index)
        self.nbytes = (sum(int(w.nbytes) for w in winners)
                       + sum(int(a.nbytes) for k in keys for a in k))

    @classmethod
    def of(cls, sources: Sequence[Source], key_types: Sequence[pa.DataType],
           across_regions: bool = False) -> _Winners:
        winners: dict[int, np.ndarray] = {}
        keys: list[list[pa.Array]] = []
        for chain in newest_first(sources, across_regions):
            newer: list[KeySet] = []
            for s in chain:
                rows = s.key_rows()
                latest = rows.latest()
                held = _cast([k.take(array_from_numpy(latest)) for k in rows.keys], key_types)
                stale = np.zeros(latest.size, bool)
                for older_than in newer:
                    stale |= older_than.contains(held)
                win = latest[~stale & ~rows.tombstone[latest]]
                winners[id(s)] = np.sort(rows.rowaddr[win])
                same = all(k.type.equals(t) for k, t in zip(rows.keys, key_types, strict=True))
                # a generation's key set is cached with its key rows: built once
                newer.append(rows.key_set() if same else KeySet(held))
                keys.append(held)
        return cls([winners[id(s)] for s in sources], keys)

    def all_keys(self, key_types: Sequence[pa.DataType]) -> KeySet:
        if self._all is None:
            if self.keys:
                merged = [pa.concat_arrays([k[i] for k in self.keys])
                          for i in range(len(key_types))]
            else:
                merged = [pa.nulls(0, t) for t in key_types]
            self._all = KeySet(merged)
        return self._all


@dataclass(frozen=True)
class WinningRows:
    """A newer source's rows that are their key's newest version (see
    :meth:`NewestRows.winning_rows`), and how many of its rows are not."""

    table: pa.Table
    left_out: int

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes) + 64


def _region_chains(sources: Sequence[Source], type_names: tuple[str, ...],
                   across_regions: bool = False) -> dict[int, Hashable]:
    """Per source (by ``id``), what its winners depend on (see :meth:`_Winners.of`): its
    identity and those of the sources that decide before it (newer ones of its region,
    or of every region: :func:`.sources.newest_first`), with the key types; only sources
    whose rows are held in memory."""
    out: dict[int, Hashable] = {}
    for chain in newest_first(sources, across_regions):
        identities: list[Hashable] = []
        for s in chain:
            identities.append(s.identity)
            if s.holds_rows:
                out[id(s)] = (tuple(identities), type_names)
    return out


class NewestRows:
    """Which rows of a set of sources are their key's newest version.

    Per region, generations newest first: a source's row wins when it is the newest row
    of its key in that source (highest ``_rowaddr``), no newer generation of the region
    holds the key, and it is not a tombstone. ``across_regions`` (a region spec that
    does not keep a key in one region): no source ordered before it in any region holds
    the key (see :func:`.sources.newest_first`). A base-table row wins when no
    generation of any region holds its key. Only key columns are read.
    """

    def __init__(self, sources: Sequence[Source], key_types: Sequence[pa.DataType],
                 across_regions: bool = False) -> None:
        self.key_types = list(key_types)
        # base rows hidden by newer keys, left out by the base scan itself (see
        # :mod:`.hidden`); base rows of fragments it covers need no key comparison
        self.hidden: HiddenRows | None = None
        newer = [s for s in sources if not s.is_base]
        identities = [s.identity for s in newer]
        self._chains: dict[int, Hashable] = {}
        if all(i is not None for i in identities):
            # the same immutable sources (generations, MemTable snapshots) give the same
            # winners: worked out once per set of sources
            type_names = tuple(str(t) for t in self.key_types)
            key = (tuple(identities), type_names, across_regions)
            found = current_runtime().cache.get_or_load(
                LSM_WINNERS, key, lambda: _Winners.of(newer, self.key_types, across_regions))
            self._chains = _region_chains(newer, type_names, across_regions)
        else:
            found = _Winners.of(newer, self.key_types, across_regions)
        self._found: _Winners = found
        self._winners = {id(s): w for s, w in zip(newer, found.winners, strict=True)}

    def winning_rows(self, source: Source, names: Sequence[str]) -> WinningRows | None:
        """The rows of newer ``source`` that win (the ``names`` it has, in address order:
        what a scan of it without a filter keeps), kept in the runtime's cache per
        source, newer sources of its region and ``names``: a source's winners depend on
        those alone, and they never change (generations, MemTable snapshots). None when
        its rows are not held in memory or may change (no identity): the scan then
        reads the source and :meth:`keep` decides per batch."""
        chain = self._chains.get(id(source))
        if chain is None:
            return None
        wanted = tuple(dict.fromkeys(names))

        def load() -> WinningRows:
            table = source.held_rows()
            rowaddr = np.asarray(numpy_of(table.column(ROW_ADDR)), np.uint64)
            present = set(table.schema.names)
            table = table.select([n for n in wanted if n in present])
            winners = self._winners[id(source)]
            mask = members(winners, rowaddr) if winners.size else \
                np.zeros(rowaddr.size, bool)
            kept = int(np.count_nonzero(mask))
            if kept < mask.size:
                table = table.filter(bool_array(mask))
            return WinningRows(table, mask.size - kept)

        return current_runtime().cache.get_or_load(LSM_WINNING_ROWS, (chain, wanted), load)

    def _cast(self, keys: list[pa.Array]) -> list[pa.Array]:
        return _cast(keys, self.key_types)

    def all_keys(self) -> KeySet:
        """Every key any generation holds (tombstones too)."""
        return self._found.all_keys(self.key_types)

    @property
    def has_newer(self) -> bool:
        return bool(self._found.keys)

    @property
    def newer_key_count(self) -> int:
        """How many keys the newer sources hold (each once per source holding it)."""
        return sum(len(k[0]) for k in self._found.keys if k)

    def _hidden_dropped(self, rowaddr: np.ndarray) -> bool:
        """Whether the base scan already left out the hidden rows among ``rowaddr``."""
        hidden = self.hidden
        if hidden is None or not rowaddr.size:
            return hidden is not None
        first, last = int(rowaddr[0]) >> 32, int(rowaddr[-1]) >> 32
        if first == last:  # a base batch holds rows of one fragment
            return first in hidden.covered
        fragments = np.unique(rowaddr >> np.uint64(32))
        return hidden.covers_all(fragments.tolist())

    def keep(self, source: Source, keys: list[pa.Array], rowaddr: np.ndarray) -> np.ndarray:
        """For each row of ``source`` (its keys and addresses), whether it is the winner."""
        if source.is_base:
            if not self.has_newer or self._hidden_dropped(rowaddr):
                return np.ones(rowaddr.size, bool)
            return ~self.all_keys().contains(self._cast(keys))
        winners = self._winners.get(id(source))
        if winners is None or not winners.size:
            return np.zeros(rowaddr.size, bool)
        return members(winners, rowaddr)


# A source's winning addresses spanning at most this many times their count are looked up
# in a table indexed by address (a gather) instead of searched (a binary search per row,
# ~10x dearer): a generation's rows are one fragment's consecutive offsets.
_DENSE_SPAN = 8


def members(sorted_addresses: np.ndarray, rowaddr: np.ndarray) -> np.ndarray:
    """For each of ``rowaddr``, whether it is one of ``sorted_addresses`` (sorted, unique,
    non-empty uint64)."""
    lo = sorted_addresses[0]
    span = int(sorted_addresses[-1] - lo) + 1
    if span > _DENSE_SPAN * sorted_addresses.size:
        pos = np.minimum(np.searchsorted(sorted_addresses, rowaddr), sorted_addresses.size - 1)
        return sorted_addresses[pos] == rowaddr
    table = np.zeros(span, bool)
    table[(sorted_addresses - lo).astype(np.intp)] = True
    rel = rowaddr - lo  # below lo wraps around to huge values: outside the table too
    inside = rel < np.uint64(span)
    if inside.all():
        return table[rel.astype(np.intp)]
    out = np.zeros(rowaddr.size, bool)
    out[inside] = table[rel[inside].astype(np.intp)]
    return out


def _scans(node: ExecNode) -> list[ScanExec]:
    if isinstance(node, ScanExec):
        return [node]
    if isinstance(node, UnionExec):
        return [s for c in node.children for s in _scans(c)]
    raise InvalidInputError(f"DeduplicateExec reads scans of sources, not {node.describe()}")


class DeduplicateExec(ExecNode):
    """Per primary key, only the row with the highest (``_gen``, ``_rowaddr``); a
    tombstone removes the key. Its input is a union of :class:`ScanExec` s whose batches
    carry the key columns and ``_rowaddr``; ``sources`` are every source of the view
    (also ones pruned from the union by region), whose keys decide the winners."""

    def __init__(self, child: ExecNode, key_columns: Sequence[str],
                 sources: Sequence[Source] | None = None,
                 needed: Sequence[str] | None = None, *,
                 across_regions: bool = False,
                 superseded: Mapping[int, np.ndarray] | None = None) -> None:
        """``needed``: the columns read from its output (None: all); its output then has
        only those (in its input's order). ``across_regions``: a key may live in several
        regions, the winner is decided over all of them (see :class:`NewestRows`).
        ``superseded``: the base rows a later base row of their key supersedes, when the
        caller found them already (see :func:`.duplicates.superseded_base_rows`; None:
        found here, once per base version and process)."""
        self.across_regions = across_regions
        self.superseded = superseded
        self.children = (child,)
        self.needed = None if needed is None else frozenset(needed)
        self.key_columns = tuple(key_columns)
        for name in (*self.key_columns, ROW_ADDR):
            if name not in child.schema.names:
                raise InvalidInputError(f"DeduplicateExec needs column {name!r} in its input")
        self.schema = child.schema if self.needed is None else pa.schema(
            [f for f in child.schema if f.name in self.needed])
        self.scans = _scans(child)
        self.sources = list(sources) if sources is not None else [s.source for s in
                                                                  self.scans]

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        names = self.schema.names
        for batch in self._winning():
            yield batch if batch.schema.names == names else batch.select(names)

    def _winning(self) -> Iterator[pa.RecordBatch]:
        """The winning rows, with the input's columns or (base rows, when ``needed``
        allows) only the needed ones."""
        types = [self.children[0].schema.field(k).type for k in self.key_columns]
        newest = NewestRows(self.sources, types, self.across_regions)
        base = [s for s in self.sources if isinstance(s, BaseSource)]
        if base and newest.has_newer and any(s.source.is_base for s in self.scans):
            newest.hidden = hidden_base_rows(base[0], self.sources)
        hidden = newest.hidden
        # base rows a later base row of their key supersedes (plain appends may hold a
        # key twice): left out of the base scan as if deleted (none: unique keys)
        older: Mapping[int, np.ndarray] = {}
        if base and any(s.source.is_base for s in self.scans):
            older = (superseded_base_rows(base[0]) if self.superseded is None
                     else self.superseded)
        drop = merged_rows(hidden.rows if hidden is not None else None, older)
        metrics, union = self.metrics, self.children[0]
        metrics.add("newer_keys", newest.newer_key_count)
        if hidden is not None:
            metrics.defer("base_rows_hidden_by_index", hidden.count)
        if older:
            metrics.add("base_rows_superseded", sum(int(r.size) for r in older.values()))
        # every base row left is a winner when the index covered all the base's fragments:
        # its rows stream as read, without their addresses unless those are asked for
        settled = hidden is not None and hidden.covers_all(base[0].fragment_ids())
        omit = ([n for n in (ROW_ADDR, *self.key_columns) if n not in self.needed]
                if settled and self.needed is not None else [])

        def winners(scan: ScanExec) -> Iterator[pa.RecordBatch]:
            if scan.source.is_base and settled:
                for batch in scan.execute(drop, omit):
                    union.metrics.output(batch.num_rows)  # (the union is read through)
                    metrics.add("rows_in", batch.num_rows)
                    yield batch
                return
            if not scan.source.is_base:
                # its winners (cached), the pushed filter applied to them: the rows a scan
                # of the source with the filter keeps (the winner decided before the filter)
                rows = newest.winning_rows(scan.source, scan.winner_names)
                if rows is not None and (scan.pushed is None or scan.pushed_names
                                         <= set(rows.table.schema.names)):
                    metrics.add("newer_rows_left_out", rows.left_out)
                    for batch in scan.execute(rows=rows):
                        union.metrics.output(batch.num_rows)
                        metrics.add("rows_in", batch.num_rows)
                        yield batch
                    return
            for batch in scan.execute(drop if scan.source.is_base else None):
                union.metrics.output(batch.num_rows)
                keys = [batch.column(k) for k in self.key_columns]
                rowaddr = np.asarray(numpy_of(batch.column(ROW_ADDR)), np.uint64)
                mask = newest.keep(scan.source, keys, rowaddr)
                if mask.all():
                    metrics.add("rows_in", batch.num_rows)
                    yield batch
                    continue
                kept = int(np.count_nonzero(mask))
                metrics.count(rows_in=batch.num_rows, rows_dropped=batch.num_rows - kept)
                if kept:
                    yield batch.filter(bool_array(mask))

        newer = [s for s in self.scans if not s.source.is_base]
        if not newer or len(newer) == len(self.scans):
            for scan in self.scans:
                yield from winners(scan)
            return
        if any(s.stepwise for s in self.scans):
            # a limit (the base read stepwise): the base's first rows may be all that is
            # taken, so the newer sources, whose rows come after the base's, are read only
            # if they are reached, on this thread (not ahead, for nobody)
            for scan in [*(s for s in self.scans if s.source.is_base), *newer]:
                yield from winners(scan)
            return
        # the newer sources are small: read them (in a thread the query owns) while the
        # base table streams, then hand their rows out after the base's
        def read_newer() -> list[pa.RecordBatch]:
            with own_work(metrics):  # the node's work, on the reader's thread
                found = [newest.winning_rows(s.source, s.winner_names) for s in newer]
                together = read_winners_together(newer, found).batches_of
                out: list[pa.RecordBatch] = []
                for scan, rows in zip(newer, found, strict=True):
                    batches = together.get(id(scan))
                    if batches is None:
                        out.extend(winners(scan))
                        continue
                    metrics.add("newer_rows_left_out", rows.left_out if rows else 0)
                    for batch in batches:
                        union.metrics.output(batch.num_rows)
                        metrics.add("rows_in", batch.num_rows)
                    out.extend(batches)
                return out

        with WorkerPool("lsm", 1) as pool:
            ahead = pool.submit(read_newer)
            for scan in self.scans:
                if scan.source.is_base:
                    yield from winners(scan)
            with not_own_work():  # waiting for the reader is not work
                found = ahead.result()
            yield from found

    def describe(self) -> str:
        text = (f"DeduplicateExec: partition_by=[{', '.join(self.key_columns)}], "
                f"order_by=[{GEN} DESC, {ROW_ADDR} DESC]")
        base = [s for s in self.sources if isinstance(s, BaseSource)]
        if base and any(s.source.is_base for s in self.scans):  # (as the run checks)
            text += f", base_duplicate_keys=[{duplicates_state(base[0], self.superseded)}]"
        return text


class ProjectionExec(ExecNode):
    """Its child's batches with only the named columns, in that order."""

    def __init__(self, child: ExecNode, names: Sequence[str]) -> None:
        self.children = (child,)
        self.names = list(names)
        self.schema = pa.schema([child.schema.field(n) for n in self.names])

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        for batch in self.children[0].execute():
            yield batch.select(self.names)

    def describe(self) -> str:
        return f"ProjectionExec: columns=[{', '.join(self.names)}]"


class GlobalLimitExec(ExecNode):
    """The first ``limit`` rows; the input stops being read once they are there."""

    def __init__(self, child: ExecNode, limit: int) -> None:
        if limit < 0:
            raise InvalidInputError(f"limit must not be negative, got {limit}")
        self.children = (child,)
        self.schema = child.schema
        self.limit = limit

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        remaining = self.limit
        if not remaining:
            return
        stream = self.children[0].execute()
        try:
            for batch in stream:
                batch = batch.slice(0, remaining)
                remaining -= batch.num_rows
                if batch.num_rows:
                    yield batch
                if not remaining:
                    return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def describe(self) -> str:
        return f"GlobalLimitExec: limit={self.limit}"


class SortExec(ExecNode):
    """All input rows sorted by one column ascending (inputs here are top-k lists)."""

    def __init__(self, child: ExecNode, column: str) -> None:
        self.children = (child,)
        self.schema = child.schema
        self.column = column

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        table = self.children[0].to_table()
        if table.num_rows:
            yield from table.sort_by([(self.column, "ascending")]).combine_chunks().to_batches()

    def describe(self) -> str:
        return f"SortExec: order_by=[{self.column} ASC]"


# ---------------------------------------------------------------------- lookups


def key_text(key_columns: Sequence[str], keys: Keys | None) -> str:
    """The keys of a lookup as EXPLAIN prints them (``id = 7``, ``id IN (100 keys)``)."""
    if keys is None:
        return ", ".join(key_columns) + " = target"
    if keys.num_rows == 1:
        row = keys.table.slice(0, 1).to_pylist()[0]
        return " AND ".join(f"{k} = {row[k]!r}" for k in key_columns)
    names = ", ".join(key_columns)
    return f"({names}) IN ({keys.num_rows} keys)" if len(key_columns) > 1 else \
        f"{names} IN ({keys.num_rows} keys)"


class TakeLastExec(ExecNode):
    """The newest row of each key in one source (with ``_tombstone``: a deleted key is
    found too); key columns, ``columns``, ``_rowaddr``, ``_gen``, ``_region`` and
    ``_key`` (the key's position in the keys given)."""

    def __init__(self, source: Source, schema: pa.Schema, keys: Keys | None = None) -> None:
        self.source = source
        self.schema = schema
        self.keys = keys
        self.runs = 0

    @measured
    def execute(self, keys: Keys | None = None) -> Iterator[pa.RecordBatch]:
        keys = keys if keys is not None else self.keys
        if keys is None or not keys.num_rows:
            return
        self.runs += 1
        self.metrics.add("keys_asked", keys.num_rows)
        table = self.source.lookup(keys, self.wanted)
        if not table.num_rows:  # the usual answer of a newer source: nothing to tag
            return
        if TOMBSTONE in table.column_names:
            self.metrics.add("tombstones", pc.sum(table.column(TOMBSTONE)).as_py() or 0)
        at = np.asarray(numpy_of(table.column(KEY_POSITION)), np.int64)
        table = table.remove_column(table.schema.get_field_index(KEY_POSITION))
        for name, values in _source_columns(self.source, table.num_rows).items():
            table = table.append_column(name, values)
        table = table.append_column(KEY_POSITION, array_from_numpy(keys.position[at]))
        yield conform(table, self.schema)  # columns in the schema's order: no copy

    @property
    def wanted(self) -> list[str]:
        """The columns the source is asked for (the schema's, not the tags)."""
        return [n for n in self.schema.names if n not in (*SOURCE_COLUMNS, KEY_POSITION)]

    def found_rows(self, keys: Keys) -> tuple[pa.Table, np.ndarray | None, np.ndarray]:
        """:meth:`execute` of the base table's node without tagging or reordering: its
        :meth:`BaseSource.found_rows` of ``keys`` (rows in the order read), counted in
        this node's metrics as :meth:`execute` counts them (for a caller that reorders
        rows anyway: the many-key lookup takes them once)."""
        source = self.source
        if not isinstance(source, BaseSource):
            raise InvalidInputError(f"{source.label}: only the base table gives found rows")
        self.runs += 1
        self.metrics.started()
        self.metrics.add("keys_asked", keys.num_rows)
        with own_work(self.metrics):
            table, rows, key_at = source.found_rows(keys, self.wanted)
        if key_at.size:
            self.metrics.add("tombstones", 0)  # (the base holds none)
            self.metrics.output(int(key_at.size))
        return table, rows, key_at

    def describe(self) -> str:
        how = ""
        index = getattr(self.source, "key_index", None)
        if index is not None:
            name = index()
            how = f", index={name}" if name else ", reverse_scan"
        return (f"TakeLastExec: {self.source.label}, "
                f"filter=[{key_text(self.source.key_columns, self.keys)}]{how}")


class BloomFilterGuardExec(ExecNode):
    """Runs its child only for the keys the source's bloom filter may hold; when it
    holds none of them, the child is not run at all."""

    def __init__(self, source: Source, child: TakeLastExec) -> None:
        self.source = source
        self.children = (child,)
        self.schema = child.schema
        self.skipped = 0

    @measured
    def execute(self, keys: Keys | None = None) -> Iterator[pa.RecordBatch]:
        child = self.children[0]
        assert isinstance(child, TakeLastExec)
        keys = keys if keys is not None else child.keys
        if keys is None or not keys.num_rows:
            return
        # a source whose own key index is exact answers faster than its bloom filter
        bloom = None if self.source.exact_lookup else self.source.bloom()
        metrics = self.metrics
        if bloom is None:
            metrics.add("keys_unchecked", keys.num_rows)
        elif keys.num_rows == 1:
            metrics.add("bloom_checks")
            if not bloom.might_contain_hash(int(keys.hashes[0])):
                self.skipped += 1
                metrics.count(keys_ruled_out=1, child_skipped=1)
                return
        else:
            maybe = bloom.might_contain_hashes(keys.hashes)
            passed = int(np.count_nonzero(maybe))
            metrics.count(bloom_checks=keys.num_rows, keys_ruled_out=keys.num_rows - passed)
            if not passed:
                self.skipped += 1
                metrics.add("child_skipped")
                return
            if passed < keys.num_rows:
                keys = keys.take(maybe)
        yield from child.execute(keys)

    def describe(self) -> str:
        return f"BloomFilterGuardExec: bf[{self.source.label.replace('[', '][', 1)}"


class CoalesceFirstExec(ExecNode):
    """Asks its inputs in order for the keys not resolved yet; stops when none are left.
    A key is resolved by the first input that has it; a tombstone resolves it as deleted
    (it is not returned). Rows come out in the order of the keys given."""

    def __init__(self, children: Sequence[ExecNode], keys: Keys) -> None:
        self.children = tuple(children)
        self.schema = children[0].schema
        self.keys = keys
        self.evaluated = 0

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        remaining = self.keys
        found: list[pa.RecordBatch] = []
        metrics = self.metrics
        metrics.add("keys", self.keys.num_rows)
        for at, child in enumerate(self.children):
            if not remaining.num_rows:
                metrics.add("inputs_not_run", len(self.children) - at)
                break
            if isinstance(child, BloomFilterGuardExec) and not child.source.exact_lookup:
                # hashed once, when a bloom filter first needs them (a key a MemTable
                # answers is never hashed); the subsets below inherit them, and the key
                # codes too (many keys: a subset's key set probe then needs no columns)
                remaining.hashes  # noqa: B018
                if remaining.num_rows > 1:
                    remaining.codes  # noqa: B018
            self.evaluated += 1
            local = remaining.for_region(getattr(getattr(child, "source", None),
                                                 "region_index", None))
            batches = list(child.execute(local))  # type: ignore[call-arg]
            if not batches:
                continue
            if self.keys.num_rows == 1 and len(batches) == 1 and batches[0].num_rows == 1:
                # the one key's newest row: returned unless it is a tombstone
                child.metrics.add("keys_resolved")
                metrics.add("inputs_not_run", len(self.children) - at - 1)
                if not batches[0].column(TOMBSTONE)[0].as_py():
                    yield batches[0]
                else:
                    metrics.add("keys_deleted")
                return
            table = pa.Table.from_batches(batches, schema=self.schema)
            original = np.asarray(numpy_of(table.column(KEY_POSITION)), np.int64)
            resolved = np.isin(remaining.position, original)
            live = pc.invert(pc.fill_null(table.column(TOMBSTONE), False))
            kept = table.filter(live)
            child.metrics.add("keys_resolved", int(np.count_nonzero(resolved)))
            metrics.add("keys_deleted", table.num_rows - kept.num_rows)
            found.extend(kept.to_batches())
            remaining = remaining.take(~resolved)
        metrics.add("keys_not_found", remaining.num_rows)
        if not found:
            return
        table = pa.Table.from_batches(found, schema=self.schema)
        order = pc.sort_indices(table.column(KEY_POSITION))
        yield from table.take(order).combine_chunks().to_batches()

    def describe(self) -> str:
        return "CoalesceFirstExec: return_first_non_null"
