"""The LSM view of a MemWAL table: which sources a read sees, and the plan over them.

Sources: the base table (generation -1), each region's flushed generations not yet merged
into that base version, and — with ``consistency="strong"`` (the default) — the unflushed
MemTables of writers open in this process. Strong reads take the regions' state from
their manifests (authoritative); ``consistency="snapshot"`` takes it from the MemWAL
index's region snapshot instead (no manifest reads, no MemTables: as fresh as the last
``refresh_index()``). A generation the garbage collector removed meanwhile is skipped:
its rows are in the base table by then.

Regions are pruned by the filter (:mod:`.pruning`) before any of their generations or
MemTables is opened. A region's spec id and values never change once it exists, so they
are remembered per process: a query whose filter prunes a region does not even read
that region's manifest after the first time.

Plans (see :mod:`.nodes`): :meth:`LsmView.scan_plan` (dedup over a union of scans),
:meth:`LsmView.lookup_plan` (coalesce over guarded take-lasts, newest first; one key, or
many keys, run the same lookups without the nodes: :meth:`LsmView.lookup_one`, :mod:`.many`)
and :meth:`LsmView.knn_plan` (top-k with stale filtering). An engine calls them with
(columns, filter expression, limit) and gets a node to ``execute()`` and ``explain()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
    VersionCleanedUpError,
)
from lance_sql.expr.arrow import Expr, resolve
from lance_sql.expr.arrow import columns as expr_columns
from lance_sql.format.memwal import MemWalIndexDetails, RegionManifest
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.generation_tables import (
    check_generation_columns,
    named_as_table,
    named_schema,
    open_generation,
)
from lance_sql.memwal.index_builder import read_snapshot
from lance_sql.memwal.merger import region_ids
from lance_sql.memwal.naming import MEM_WAL_DIR, RegionPaths
from lance_sql.memwal.read.filter_input import parse_filter
from lance_sql.memwal.read.keys import Keys
from lance_sql.memwal.read.many import ManyKeyLookup
from lance_sql.memwal.read.many import usable as many_usable
from lance_sql.memwal.read.metrics import NodeMetrics, own_work
from lance_sql.memwal.read.nodes import (
    BASE_ONLY,
    DISTANCE,
    GEN,
    KEY_POSITION,
    REGION,
    BloomFilterGuardExec,
    CoalesceFirstExec,
    DeduplicateExec,
    ExecNode,
    GlobalLimitExec,
    ProjectionExec,
    ScanExec,
    SortExec,
    TakeLastExec,
    UnionExec,
    format_plan,
    key_text,
    lacked_columns,
    local_filter_columns,
    retyped_columns,
)
from lance_sql.memwal.read.pruning import prune_regions
from lance_sql.memwal.read.search import (
    FilterStaleExec,
    KNNExec,
    StaleCheck,
    check_filter,
    check_search_columns,
    query_vector,
)
from lance_sql.memwal.read.sources import (
    BaseSource,
    GenerationSource,
    MemTableSource,
    OneKeyTakes,
    RenamedMemTable,
    Source,
    newest_first,
)
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import decode_region_values
from lance_sql.memwal.transforms import (
    bucket_numbers,
    region_values,
    scalar_region_values,
    sql_on_own_thread,
)
from lance_sql.memwal.type_kinds import same_kind
from lance_sql.memwal.value_cast import as_column_type
from lance_sql.memwal.wal import TOMBSTONE, check_reserved_columns
from lance_sql.memwal.writer import open_memtables_of, registered_writer
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, VERSION_COLUMNS
from lance_sql.table.read.scan import DEFAULT_BATCH_SIZE, rows_only
from lance_sql.table.runtime.cache import GENERATION_TABLES, REGION_VALUES
from lance_sql.table.runtime.context import current_runtime

if TYPE_CHECKING:
    from lance_sql.format.schema import LanceSchema
    from lance_sql.memwal.memtable import MemTable
    from lance_sql.memwal.read.warm import WarmState

__all__ = ["CONSISTENCY", "LsmPlan", "LsmScanner", "LsmView", "RegionState"]

CONSISTENCY = ("strong", "snapshot")
SYSTEM = (GEN, REGION, ROW_ADDR, *BASE_ONLY)
_FEW_KEYS = 16
# Lookups of at most this many keys go key by key (:meth:`LsmView.lookup_few`)
ONE_BY_ONE_KEYS = 8
_PLAIN_ROWS_KEPT = 256  # output schemas whose base row layout a view keeps
_STATES_KEPT = 4096  # regions (and regions by position) whose state and sources a view keeps


def _region_values_of(listed: list[tuple], at: Sequence[int]) -> pa.Table:
    """The region values of the listed regions ``at`` (of one spec), one row each; values
    of other types than the others' (a damaged manifest) are a FormatError."""
    try:
        return pa.concat_tables([listed[i][2] for i in at])
    except pa.ArrowInvalid as exc:
        raise FormatError(f"region values of one region spec differ in type across "
                          f"regions (a region manifest is damaged): {exc}") from exc


class _Unclaimed(Exception):
    """A region listed before its first manifest was written."""


class ReadMoment:
    """The moment one read of a MemWAL table sees, fixed on first use: the regions
    listed, each region's manifest, this process's MemTables of it and how many
    fragments each MemTable had then (MemTables only get fragments appended: the first
    n are its rows of that moment). A view holds one (:meth:`LsmView.fresh` starts a new
    one); views given the same moment read the same state, as the references to one
    table in one SQL query do: a self-join never sees a key in two states, whatever a
    writer of this process puts or flushes meanwhile. Entries are written once
    (``setdefault``): threads taking one at once keep the first."""

    def __init__(self) -> None:
        self.memtables: dict[uuid.UUID, list[MemTable]] = {}
        self.manifests: dict[uuid.UUID, RegionManifest | None] = {}
        self.fragments: dict[object, int] = {}  # MemTable token -> fragments seen
        self._listed: dict[str, list] = {}

    @property
    def listed(self) -> list | None:
        """The regions listed (see :meth:`LsmView._listed`), None until listed."""
        return self._listed.get("regions")

    def list_once(self, listed: list) -> list:
        """``listed`` as this moment's regions, or those another thread listed first."""
        return self._listed.setdefault("regions", listed)

    def fragments_of(self, memtable: MemTable) -> int:
        """How many of ``memtable``'s fragments this moment sees (fixed on first ask)."""
        seen = self.fragments.get(memtable.token)
        if seen is None:  # (counted, not copied: a MemTable may hold thousands of puts)
            seen = self.fragments.setdefault(memtable.token, memtable.num_fragments)
        return seen


@dataclass(frozen=True)
class RegionState:
    """A region as a read sees it: its flushed generations and spec values."""

    region_id: uuid.UUID
    spec_id: int
    values: pa.Table | None  # one row, a column per region field (None: manual)
    manifest: RegionManifest | None = None
    flushed: tuple[tuple[int, str], ...] = ()

    @cached_property  # (frozen: a read of an unchanged region reuses its state)
    def label(self) -> str:
        text = f"region_{self.region_id.hex[:8]}"
        if self.values is not None:
            row = self.values.to_pylist()[0]
            text += "(" + ", ".join(f"{k}={v!r}" for k, v in row.items()) + ")"
        return text


@dataclass
class LsmPlan:
    """A plan and what EXPLAIN says about it; after it ran, EXPLAIN ANALYZE
    (``explain(analyze=True)``) prints what it did: the path that answered (the nodes, or
    a lookup's one-key or many-key path) with each node's metrics."""

    root: ExecNode
    header: list[str] | Callable[[], list[str]]  # a callable: made when explained
    # a one-key lookup: runs the same lookups without the nodes (None: take the nodes)
    one: Callable[[], pa.Table | None] | None = None
    # a lookup of many keys: every newer source probed at once (see .many)
    many: ManyKeyLookup | None = None
    sources: Sequence[Source] = ()  # the sources the plan reads (or masks with)
    regions: tuple[int, int] | None = None  # (regions kept, regions listed)
    # the one-key path's metrics (the sources it asked, the one that answered)
    one_metrics: NodeMetrics | None = None
    ran: str | None = None  # the path the last run took: "one", "many" or "nodes"

    def _shortcut(self) -> pa.Table | None:
        """The answer of the one-key or many-key path (None: the nodes answer)."""
        if self.one is not None:
            self.ran = "one"
            metrics = self.one_metrics
            if metrics is None:
                found = self.one()
            else:
                with own_work(metrics):
                    found = self.one()
                if found is not None:
                    metrics.output(found.num_rows, int(found.num_rows > 0))
            if found is not None:
                return found
        if self.many is not None:
            self.ran = "many"
            return self.many.to_table()
        self.ran = "nodes"
        return None

    def execute(self):
        found = self._shortcut()
        return iter(found.to_batches()) if found is not None else self.root.execute()

    def to_table(self) -> pa.Table:
        found = self._shortcut()
        return found if found is not None else self.root.to_table()

    def explain(self, analyze: bool = False) -> str:
        """The plan (``analyze``: with what its runs so far did)."""
        header = self.header() if callable(self.header) else self.header
        if not analyze:
            return "\n".join([*header, format_plan(self.root)])
        if self.ran == "many":  # its header line says the nodes below ran: they did not
            header = [line for line in header if not line.startswith("ManyKeyProbe:")]
        lines = [*header, self._sources_line()]
        if self.ran == "one" and self.one_metrics is not None:
            lines.append(f"OneKeyLookupExec: {_lookup_text(self.root)}, "
                         f"{self.one_metrics.text()}")
        elif self.ran == "many" and self.many is not None:
            lines += self.many.explain_lines()
        else:
            lines.append(format_plan(self.root, analyze=True))
        return "\n".join(lines)

    def _sources_line(self) -> str:
        """``LsmSources: regions_kept=.., regions_pruned=.., sources_opened=.. (by kind)``."""
        kinds: dict[str, int] = {}
        for source in self.sources:
            kinds[source.kind] = kinds.get(source.kind, 0) + 1
        detail = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        parts = []
        if self.regions is not None:
            kept, total = self.regions
            parts += [f"regions_kept={kept}", f"regions_pruned={total - kept}"]
        parts.append(f"sources_opened={len(self.sources)}" + (f" ({detail})" if detail else ""))
        return "LsmSources: " + ", ".join(parts)


def _lookup_text(root: ExecNode) -> str:
    """The keys of a lookup plan (its CoalesceFirstExec's), as its TakeLastExec prints."""
    node = root
    while node.children and not isinstance(node, CoalesceFirstExec):
        node = node.children[0]
    if isinstance(node, CoalesceFirstExec):
        base = node.children[-1]
        if isinstance(base, TakeLastExec):
            return key_text(base.source.key_columns, base.keys)
    return "one key"


def _first_row(table: pa.Table, row: int = 0) -> tuple:
    """Row ``row`` of ``table`` as a tuple of Python values (cheaper than to_pylist)."""
    return tuple(c[row].as_py() for c in table.columns)


class _NaN:
    """The region value NaN as a routing dictionary's key: a float NaN equals nothing,
    itself included, so a region whose value is NaN would never be found by it."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def _route_key(values: tuple) -> tuple:
    """Region values as a routing dictionary's key (:data:`_NAN` for a NaN; ``-0.0``
    finds ``0.0``'s region, as the writer routes it)."""
    if all(v == v for v in values):  # (only a NaN differs from itself)
        return values
    return tuple(_NAN if v != v else v for v in values)


class LsmView:
    """The sources of one read of a MemWAL table (see the module docstring)."""

    def __init__(self, base: LanceDataset, *, consistency: str = "strong",
                 warm: WarmState | None = None, plain_ok: bool = False) -> None:
        """``warm``: state a :class:`~.warm.WarmView` keeps between reads (region
        listings and manifests revalidated per read instead of re-read). ``plain_ok``:
        a ``base`` version without a MemWAL index (one older than the index, read by
        time travel) is a view of its base table alone, as SQL reads it; otherwise
        NotFoundError."""
        if consistency not in CONSISTENCY:
            raise InvalidInputError(f"consistency must be one of {CONSISTENCY}, got "
                                    f"{consistency!r}")
        loaded = mem_wal_index.load(base)
        if loaded is None and not plain_ok:
            raise NotFoundError(f"{base.uri} has no MemWAL index")
        if loaded is not None:
            check_reserved_columns(base.manifest.schema, f"{base.uri} (version "
                                                         f"{base.version})")
        self.base = base
        # no index at this version: no regions, generations or MemTables belong to it
        self.has_index = loaded is not None
        if not self.has_index:
            consistency = "snapshot"
        self.consistency = consistency
        self.details: MemWalIndexDetails = (loaded[1] if loaded is not None
                                            else MemWalIndexDetails())
        self.spec: RegionSpec | None = max(self.details.region_specs,
                                           key=lambda s: s.spec_id, default=None)
        # the specs as one string (its hash kept): what cached region values are read
        # against (see _listed)
        self._specs_key = repr(self.details.region_specs)
        self.key_columns = mem_wal_index.primary_key_columns(base.manifest.schema)
        self.arrow_schema = base.manifest.schema.to_scan_arrow()
        # the key columns' types, when all are top-level columns (None: see _typed_keys)
        top = set(self.arrow_schema.names)
        self._key_types = ([self.arrow_schema.field(k).type for k in self.key_columns]
                           if all(k in top for k in self.key_columns) else None)
        # a one-column key's key table schema (see one_key_table)
        self._one_key_schema = (pa.schema([pa.field(self.key_columns[0], self._key_types[0])])
                                if self._key_types is not None and len(self._key_types) == 1
                                else None)
        # what this read sees (see ReadMoment): a region's MemTables (strong reads) are
        # taken from this process's writer of it right before its manifest is read, so
        # a MemTable flushed in between is found as a generation, never missed (and
        # never read twice: see sources)
        self.moment = ReadMoment()
        self.warm = warm
        self._lookup_schemas: dict[tuple[str, ...], pa.Schema] = {}
        # id of a lookup schema -> (it, the columns a source's lookup reads of it)
        self._wanted: dict[int, tuple[pa.Schema, list[str]]] = {}
        # what one-key lookups of the base resolve once per column list (see OneKeyTake)
        self._base_one_key: OneKeyTakes = {}
        # id of an output schema -> (it, the base row's schema, where its columns lie
        # there; None: not a plain projection): see _projected_base_row
        self._plain_rows: dict[int, tuple[pa.Schema, pa.Schema, list[int] | None]] = {}
        # what depends only on the base version, its schema and region spec, shared by a
        # warm view's fresh copies: column lists found valid, region spec source names,
        # generation directories' store keys
        self._valid_columns: set[tuple[str, ...]] = set()
        self._spec_names: list[list[str | None]] = []
        self._spec_keys: list[list[int] | None] = []  # see _spec_key_positions
        self._generation_keys: dict[tuple[uuid.UUID, str], str] = {}
        # per generation: (the table opened, it named as this base version names columns)
        self._named: dict[tuple[uuid.UUID, str], tuple[LanceDataset, LanceDataset]] = {}
        # per writer's schema (by id, kept to tell it from a later one at that address):
        # its columns renamed to read as this base version names them
        self._renamed: dict[int, tuple[LanceSchema, LanceSchema]] = {}
        # a snapshot view's regions come from its base version's MemWAL index: read once,
        # shared by its fresh copies
        self._snapshot_listing: list[list] = []
        # per region: its state as a read sees it, while its latest manifest is the same
        # object (see _states); and per (region, its position in a read's regions, lazy
        # or not): its flushed generations' sources, kept while its state's flushed list
        # and manifest are the same objects (see sources). Written whole, read once.
        self._region_states: dict[uuid.UUID, RegionState] = {}
        self._generation_sources: dict[tuple[uuid.UUID, int, bool], tuple[
            tuple[tuple[int, str], ...], RegionManifest | None, list[Source], int]] = {}
        self._base_source: list[BaseSource] = []  # made once, as the base never moves
        # per region: its log and manifest directory's key; per (region, manifest
        # version): that manifest's file name (spelt once, not per read)
        self._region_logs: dict[uuid.UUID, tuple[RegionLog, str]] = {}
        self._manifest_names: dict[tuple[uuid.UUID, int], str] = {}
        self.kept: list[RegionState] = []
        self.total_regions = 0
        # a one-key lookup's key table and its key as Python values (see _one_key)
        self._one_values: tuple[pa.Table, list[object]] | None = None

    def fresh(self, moment: ReadMoment | None = None) -> LsmView:
        """This view's base version and MemWAL index with this moment's MemTables and
        regions (what a strong read must re-read; see :mod:`.warm`), or those of
        ``moment`` (another view's: both then read the same state). A snapshot view's
        regions are its base version's, read once."""
        view = object.__new__(type(self))  # a shallow copy (as copy.copy, in fewer steps)
        view.__dict__.update(self.__dict__)
        view._reset(moment)  # (its own copy)
        return view

    def _reset(self, moment: ReadMoment | None = None) -> None:
        self.moment = moment if moment is not None else ReadMoment()
        self.kept = []
        self.total_regions = 0
        self._one_values = None

    def _take_memtables(self, rid: uuid.UUID) -> None:
        """Region ``rid``'s MemTables of this moment, taken once per read before the
        region's manifest is read (see __init__); none for a snapshot read."""
        if self.consistency == "strong" and rid not in self.moment.memtables:
            self.moment.memtables.setdefault(rid, open_memtables_of(self.base.store.uri, rid))

    def _latest_manifest(self, rid: uuid.UUID) -> RegionManifest | None:
        """Region ``rid``'s manifest as this read's moment sees it (the latest when first
        asked), its MemTables taken right before."""
        pinned = self.moment.manifests
        if rid in pinned:
            return pinned[rid]
        return pinned.setdefault(rid, self._read_latest_manifest(rid))

    def _read_latest_manifest(self, rid: uuid.UUID) -> RegionManifest | None:
        warm = self.warm
        memtables = self.moment.memtables
        known = self._region_logs.get(rid)
        if known is None:
            log = RegionLog(self.base.store, rid)
            known = (log, log.paths.manifest_dir)
            _keep(self._region_logs, rid, known, _STATES_KEPT)
        log, manifest_dir = known
        if warm is None or self.consistency != "strong" or rid in memtables:
            self._take_memtables(rid)  # MemTables first, the manifest after
            return log.latest() if warm is None else warm.latest_manifest(log)
        # as above, with one walk of the region's manifest directory for both the check
        # that this process's writer of it is of the table here (its last manifest is
        # still the file it wrote) and the directory's stamp, taken after the MemTables
        writer = registered_writer(self.base.store.uri, rid)
        if writer is None:
            memtables.setdefault(rid, [])
            return warm.latest_manifest(log, self.base.store.directory_stamp(manifest_dir))
        held = writer.memtables()
        committed = writer.committed  # (one read: the writer may commit meanwhile)
        name = self._manifest_names.get((rid, committed[0]))
        if name is None:
            name = log.paths.manifest(committed[0]).rpartition("/")[2]
            _keep(self._manifest_names, (rid, committed[0]), name, _STATES_KEPT)
        stamp, seen = self.base.store.stamp_and_identities(manifest_dir, [name])
        memtables.setdefault(rid, held if writer.of_table_seen(committed, seen[0]) else [])
        return warm.latest_manifest(log, stamp)

    # ------------------------------------------------------------------ regions
    def _listed(self) -> list[tuple[uuid.UUID, int, pa.Table | None, RegionManifest | None,
                                    tuple[tuple[int, str], ...] | None]]:
        """(region, spec id, values, manifest if read, flushed if known) per region."""
        listed = self.moment.listed
        if listed is not None:
            return listed
        if self.consistency == "snapshot" and self._snapshot_listing:
            return self._listing(self._snapshot_listing[0])
        out: list = []  # published once filled: a half-made listing is never seen
        if not self.has_index:  # the base table alone
            return self._listing(out)
        if self.consistency == "snapshot":
            snap = read_snapshot(self.base)
            for row in range(snap.num_rows):
                rid = uuid.UUID(bytes=snap.column("region_id")[row].as_py())
                spec_id = snap.column("region_spec_id")[row].as_py()
                values = None
                if self.spec is not None and spec_id == self.spec.spec_id:
                    values = pa.table({f.field_id: snap.column(f"region_field_{f.field_id}")
                                       .slice(row, 1) for f in self.spec.fields})
                flushed = tuple((g["generation"], g["path"]) for g in
                                snap.column("flushed_generations")[row].as_py())
                out.append((rid, spec_id, values, None, flushed))
            self._snapshot_listing[:] = [out]
            return self._listing(out)
        uri = self.base.store.uri
        cache = current_runtime().cache
        warm = self.warm
        names: tuple[str, ...] = ()
        stamp: tuple[Hashable, bool] | None = None
        if warm is not None:
            store = self.base.store
            # one read: the state is shared, and another read may replace it meanwhile
            listing = warm.listing
            # _mem_wal/ as it was when listed last (settled, see the .warm module): the
            # same names, without listing them
            stamp = store.directory_stamp(MEM_WAL_DIR)
            if stamp is not None and listing is not None and listing[2] == stamp[0]:
                return self._listing(listing[1])
            names = tuple(store.list_dir(MEM_WAL_DIR))
            if listing is not None and listing[0] == names:
                # every region there had a manifest then; spec ids and values are fixed
                if stamp is not None and stamp[1]:  # (the same list: routes stay tied)
                    warm.listing = (names, listing[1], stamp[0])
                return self._listing(listing[1])
            found = [RegionPaths.parse_region_dir(n) for n in names]
            rids = sorted(p.region_id for p in found if p is not None)
        else:
            rids = region_ids(self.base)
        unclaimed = False
        for rid in rids:
            read: list[RegionManifest] = []

            def load(rid: uuid.UUID = rid, read: list[RegionManifest] = read
                     ) -> tuple[int, pa.Table | None]:
                self._take_memtables(rid)  # MemTables first, the manifest after
                manifest = RegionLog(self.base.store, rid).latest()
                if manifest is None:
                    raise _Unclaimed  # nothing to remember yet
                read.append(manifest)
                values = (decode_region_values(manifest.region_values, f"region {rid}",
                                               self._spec_of(manifest.region_spec_id))
                          if manifest.region_values is not None else None)
                return manifest.region_spec_id, values

            try:  # a region's spec id and values never change once it exists; its
                # id derives from the spec id and values alone, so a MemWAL set up again
                # at this place with other specs may reuse it with other fields: cached
                # per set of specs the values are read against
                known = cache.get_or_load(REGION_VALUES, (uri, rid, self._specs_key), load)
            except _Unclaimed:
                unclaimed = True
                continue
            manifest = read[0] if read else None
            out.append((rid, known[0], known[1], manifest, None))
            if manifest is not None and warm is not None:
                warm.manifests[rid] = manifest
        if unclaimed or len(out) < self.details.num_regions:
            self._check_indexed_regions_listed({r[0] for r in out})
        if warm is not None:  # published once (an unclaimed region may be claimed later:
            # then no listing is kept, and the next read lists again)
            warm.listing = None if unclaimed else (
                names, [(r[0], r[1], r[2], None, None) for r in out],
                stamp[0] if stamp is not None and stamp[1] else None)
        return self._listing(out)

    def _listing(self, listed: list) -> list:
        """``listed`` as this read's regions (another thread's, when it listed first)."""
        return self.moment.list_once(listed)

    def _check_indexed_regions_listed(self, listed: set[uuid.UUID]) -> None:
        """A FormatError naming the regions the MemWAL index lists that have no manifest
        (or no directory) under ``_mem_wal/``. A region without a manifest is normally one
        a writer is still claiming, and is read as empty; but the index only lists regions
        whose manifests a refresh read, and manifests are never all deleted, so an indexed
        region without one was damaged: reading it as empty would return its keys' stale
        base rows with no error."""
        snap = read_snapshot(self.base)
        if not snap.num_rows:
            return
        missing = sorted({uuid.UUID(bytes=b) for b in
                          snap.column("region_id").to_pylist()} - listed)
        if missing:
            names = ", ".join(str(r) for r in missing[:3])
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise FormatError(
                f"{self.base.uri}: MemWAL region {names}{more} has no manifest under "
                f"{MEM_WAL_DIR}/ (the MemWAL index lists it, so its manifest was written "
                "and is missing: restore the region's files)")

    def regions(self, predicate: Expr | None, only: set[uuid.UUID] | None = None, *,
                at: np.ndarray | list[int] | None = None) -> list[RegionState]:
        """The regions ``predicate`` may select rows of (all without a predicate), of
        ``only`` when given, of the listed positions ``at`` (sorted) when given."""
        listed = self._listed()
        self.total_regions = len(listed)
        if at is not None and predicate is None:  # a few routed regions of many
            self.kept = self._states([listed[i] for i in (
                at.tolist() if isinstance(at, np.ndarray) else at)])
            return self.kept
        keep = np.ones(len(listed), bool)
        if only is not None:
            keep = np.array([r[0] in only for r in listed], bool)
        spec = self.spec
        if predicate is not None and spec is not None:
            pruned = [i for i, r in enumerate(listed)
                      if r[1] == spec.spec_id and r[2] is not None]
            if pruned:
                values = _region_values_of(listed, pruned)
                names = self._source_names()
                types = {n: self.arrow_schema.field(n).type for n in names if n is not None}
                mask = prune_regions(predicate, spec, names, types, values)
                keep[np.array(pruned)[~mask]] = False
        self.kept = self._states([listed[i] for i in np.flatnonzero(keep)])
        return self.kept

    def _spec_of(self, spec_id: int) -> RegionSpec | None:
        """The region spec of id ``spec_id`` (None: no such spec, or none at all)."""
        return next((s for s in self.details.region_specs if s.spec_id == spec_id), None)

    def _states(self, rows: list[tuple]) -> list[RegionState]:
        """The listed regions ``rows`` as a read sees them (latest manifests)."""
        kept = []
        for rid, spec_id, values, manifest, flushed in rows:
            if flushed is None:
                manifest = manifest or self._latest_manifest(rid)
                if manifest is None:
                    continue
                known = self._region_states.get(rid)
                if known is not None and known.manifest is manifest and \
                        known.values is values and known.spec_id == spec_id:
                    kept.append(known)  # (a frozen state: the same object for every read
                    continue  # of this manifest, and so its flushed list too)
                flushed = tuple((g.generation, g.path) for g in manifest.flushed_generations)
                state = RegionState(rid, spec_id, values, manifest, flushed)
                _keep(self._region_states, rid, state, _STATES_KEPT)
                kept.append(state)
                continue
            kept.append(RegionState(rid, spec_id, values, manifest, flushed))
        return kept

    def sources(self, regions: Sequence[RegionState], *, lazy: bool = False) -> list[Source]:
        """Base first, then per region its generations newest first (with a spec that
        does not keep a key in one region: every region's, in the order that decides
        a key's newest row, see :attr:`across_regions`; ``lazy``: generations not opened
        yet open on first use, as a lookup wants)."""
        if not self._base_source:  # (threads may both make one: either is right)
            self._base_source[:] = [BaseSource(self.base, self.key_columns,
                                               one_key=self._base_one_key)]
        out: list[Source] = [self._base_source[0]]
        for index, region in enumerate(regions):
            generations, flushed_up_to = self._generations(region, index, lazy)
            mine: list[Source] = []
            for memtable in self.moment.memtables.get(region.region_id, []):
                # (by the moment's fragments, not the live count: a put between two
                # references of one query must not make one of them read the MemTable)
                if memtable.generation > flushed_up_to and \
                        self.moment.fragments_of(memtable):
                    mine.append(MemTableSource(self._named_memtable(memtable),
                                               region.region_id, index,
                                               self.moment.fragments_of(memtable)))
            # (a MemTable's generation is above every flushed one: newest first overall)
            out.extend(sorted(mine, key=lambda s: -s.gen))
            out.extend(generations)
        if self.across_regions and len(regions) > 1:
            out[1:] = newest_first(out[1:], True)[0]
        return out

    def _generations(self, region: RegionState, index: int, lazy: bool
                     ) -> tuple[list[Source], int]:
        """(the sources of ``region``'s flushed generations not merged into the base,
        newest first; the newest generation flushed, by its list or its manifest). They are
        kept while the region's flushed list and manifest are the objects they were made
        of: they only read generations, which never change (planning a scan of 64 regions
        made its 192 generation sources afresh: ~40% of its 16 ms)."""
        key = (region.region_id, index, lazy)
        known = self._generation_sources.get(key)  # (one read: threads replace it)
        if known is not None and known[0] is region.flushed and \
                known[1] is region.manifest:
            return known[2], known[3]
        merged = self.details.merged_generation(region.region_id)
        if region.manifest is not None:
            self._check_generations_listed(region, merged)
        mine: list[Source] = []
        flushed_up_to = 0
        for gen, path in region.flushed:
            flushed_up_to = max(flushed_up_to, gen)
            if gen <= merged:
                continue
            source = self._generation(region, index, gen, path, lazy=lazy)
            if source is not None:
                mine.append(source)
        if region.manifest is not None:
            flushed_up_to = max(flushed_up_to, region.manifest.current_generation - 1)
        mine.sort(key=lambda s: -s.gen)
        _keep(self._generation_sources, key,
              (region.flushed, region.manifest, mine, flushed_up_to), _STATES_KEPT)
        return mine, flushed_up_to

    def _check_generations_listed(self, region: RegionState, merged: int) -> None:
        """Every generation this base version has not merged, up to the region's current
        one, is listed by its manifest: flushes number generations one after another,
        and the collector removes only those every kept base version merged. One missing
        was merged by a newer version and collected since this base version was removed
        (a view made before a merge and a cleanup): its rows would read as the base's
        older ones (VersionCleanedUpError); with this base version still there, damage
        (FormatError)."""
        assert region.manifest is not None
        current = region.manifest.current_generation
        listed = {gen for gen, _ in region.flushed if gen > merged}
        if len(listed) >= current - 1 - merged:
            return
        missing = sorted(set(range(merged + 1, current)) - listed)
        self._check_base_kept(region.region_id, missing)
        raise FormatError(f"{self.base.uri}: generations {missing[:5]} of region "
                          f"{region.region_id} are not merged into base version "
                          f"{self.base.version}, and its manifest does not list them")

    def _check_base_kept(self, region_id: uuid.UUID, generations: list[int]) -> None:
        """See :func:`_check_base_kept`."""
        _check_base_kept(self.base, region_id, generations)

    def _named_memtable(self, memtable: MemTable) -> MemTable | RenamedMemTable:
        """``memtable`` with its columns named as this base version names them (a writer
        opened before a rename keeps the old names; see :class:`RenamedMemTable`)."""
        written = memtable.schema
        known = self._renamed.get(id(written))  # (a writer's schema is fixed: found once
        if known is None or known[0] is not written:  # per view and writer's schema)
            known = self._renamed[id(written)] = (
                written, named_schema(written, self.base.manifest.schema))
        named = known[1]
        return memtable if named is written else RenamedMemTable(memtable, named)

    @property
    def across_regions(self) -> bool:
        """Whether a key's newest row is decided over every region, not in its own.

        The MemWAL spec requires each key to live in one region and reads rely on it;
        a spec over key columns guarantees it. With one over other columns (or regions
        made by hand) keeping a key's region fixed is the user's part; when a key was
        written to two regions anyway, reads still show it once: the row the spec's
        DeduplicateExec order (``_gen`` DESC, then the region id) puts first, the same
        for scans, lookups and searches. (Merging may later keep the other one: the
        merger applies regions in its own order.)"""
        return not self.key_routed

    @property
    def key_routed(self) -> bool:
        """Whether every source column of the region spec is a primary-key column, so a
        key always lives in one region (a spec over other columns moves a key between
        regions when such a column changes)."""
        return bool(self._spec_key_positions())  # (None: not by key; []: no column)

    def pruned_sources(self, predicate: Expr | None) -> tuple[list[Source], list[Source]]:
        """(the sources a read with ``predicate`` scans, the sources whose keys decide
        the winners). Usually the same regions' sources; but when the spec is not over
        key columns, a pruned region may hold the newest version of a key whose older
        row matches, so its sources still mask (their keys are read; their rows not)."""
        regions = self.regions(predicate)
        if predicate is None or self.key_routed or len(regions) == self.total_regions:
            sources = self.sources(regions)
            return sources, sources
        kept = {r.region_id for r in regions}
        every = self.sources(self.regions(None))
        self.kept = regions  # EXPLAIN lists the regions scanned
        return [s for s in every if s.is_base or s.region in kept], every

    def _generation(self, region: RegionState, index: int, gen: int, path: str, *,
                    lazy: bool = False) -> GenerationSource | None:
        return self.generation_source(region.region_id, index, gen, path, lazy=lazy)

    def generation_source(self, region_id: uuid.UUID, index: int, gen: int, path: str, *,
                          lazy: bool = False) -> GenerationSource | None:
        """Generation ``gen`` of a region, flushed to ``path`` (None: collected after its
        merge); ``index``: the region's position among the read's regions. ``lazy``: a
        generation not opened yet in this process is opened on first use (a lookup its
        bloom filter rules out never opens it; see GenerationSource)."""
        key = self._generation_keys.get((region_id, path))
        if key is None:  # (checked to be a generation directory's name)
            key = self._generation_keys[region_id, path] = \
                RegionPaths(region_id).generation(path)
        merged = gen <= self.details.merged_generation(region_id)
        if lazy and current_runtime().cache.peek(GENERATION_TABLES,
                                                 (self.base.store.uri, key)) is None:
            return GenerationSource(
                None, gen, region_id, index, self.key_columns, bloom_at=(self.base.store, key),
                open=partial(_kept_generation, self.base, self._named, region_id, gen, path,
                             key, merged),
                gone=partial(_check_base_kept, self.base, region_id, [gen]))
        ds = _kept_generation(self.base, self._named, region_id, gen, path, key, merged)
        if ds is None:
            return None  # collected after its merge: its rows are in the base table
        return GenerationSource(ds, gen, region_id, index, self.key_columns,
                                bloom_at=(self.base.store, key),
                                gone=partial(_check_base_kept, self.base, region_id, [gen]))

    def _header(self, what: str, regions: Sequence[RegionState] | None = None,
                total: int | None = None) -> list[str]:
        regions = self.kept if regions is None else regions
        total = self.total_regions if total is None else total
        kept = ", ".join(r.label for r in regions) or "none"
        return [f"{what}: consistency={self.consistency}, base version={self.base.version}",
                f"RegionPruning: kept {len(regions)} of {total} regions [{kept}]"]

    # ------------------------------------------------------------------ schemas
    def _field(self, name: str) -> pa.Field:
        if name == GEN:
            return pa.field(GEN, pa.int64())
        if name == REGION:
            return pa.field(REGION, pa.string())
        if name in (ROW_ADDR, KEY_POSITION):
            return pa.field(name, pa.uint64() if name == ROW_ADDR else pa.int64())
        if name in BASE_ONLY:  # the base table's; NULL on rows not merged yet
            if name in VERSION_COLUMNS and not self.base.manifest.uses_stable_row_ids:
                raise UnsupportedFeatureError(
                    f"{self.base.uri}: {name} exists only on tables created with stable "
                    "row ids (write_dataset(..., enable_stable_row_ids=True))")
            return pa.field(name, pa.uint64())
        if name == TOMBSTONE:
            return pa.field(TOMBSTONE, pa.bool_())
        if name == DISTANCE:
            return pa.field(DISTANCE, pa.float32())
        if name not in self.arrow_schema.names:
            raise NotFoundError(f"column {name!r} does not exist; columns: "
                                f"{', '.join(self.arrow_schema.names)}")
        return self.arrow_schema.field(name)

    def _schema(self, names: Sequence[str]) -> pa.Schema:
        return pa.schema([self._field(n) for n in dict.fromkeys(names)])

    def _columns(self, wanted: Sequence[str] | None) -> list[str]:
        if wanted is None:
            return list(self.arrow_schema.names)
        if isinstance(wanted, str):
            raise InvalidInputError("columns must be a list of column names")
        names = tuple(wanted)
        if not all(isinstance(n, str) for n in names) or names not in self._valid_columns:
            for name in names:  # (not names: refused here, never kept)
                self._field(name)
            self._valid_columns.add(names)
        return list(names)

    def _spec_key_positions(self) -> list[int] | None:
        """The region spec's source columns as positions among the key columns (None:
        no spec, or one over a column that is no key column: keys are not routed)."""
        if not self._spec_keys:
            names = self._source_names() if self.spec is not None else [None]
            at = [self.key_columns.index(n) if n is not None and n in self.key_columns
                  else -1 for n in names]
            self._spec_keys[:] = [None if -1 in at else at]
        return self._spec_keys[0]

    def _source_names(self) -> list[str | None]:
        """The region spec's source column names in the base schema (the spec exists)."""
        if not self._spec_names:
            assert self.spec is not None
            self._spec_names[:] = [self.spec.source_names(self.base.manifest.schema)]
        return self._spec_names[0]

    def _predicate(self, filter: str | Expr | None, *, typed: bool = False) -> Expr | None:
        """``filter`` parsed and resolved against the view's columns; ``typed``: its
        types checked too (:func:`.search.check_filter`)."""
        expr = parse_filter(filter)
        if expr is None:
            return None
        full = pa.schema([*self.arrow_schema, *(self._field(n) for n in SYSTEM
                                                 if n not in BASE_ONLY),
                          *(pa.field(n, pa.uint64()) for n in BASE_ONLY)])
        resolved = resolve(expr, full)
        for path in expr_columns(resolved):
            self._field(path[0])  # row versions need stable row ids
        if typed:
            check_filter(resolved, full)
        return resolved

    # ------------------------------------------------------------------ plans
    def scan_plan(self, columns: Sequence[str] | None = None,
                  filter: str | Expr | None = None,
                  limit: int | None = None) -> LsmPlan:
        """Every key's newest row where ``filter`` holds: ``columns`` (default the
        table's; ``_gen``, ``_region``, ``_rowaddr`` when named), at most ``limit``."""
        output = self._columns(columns)
        predicate = self._predicate(filter)
        filter_names = [p[0] for p in expr_columns(predicate)] if predicate is not None else []
        scanned, sources = self.pruned_sources(predicate)
        # a source lacking a filter column (added since its rows were written) applies the
        # filter to its rows itself, so it needs them all; otherwise its scan takes the
        # filter on data columns and only the source's own columns must be read
        lacking = any(lacked_columns(s, filter_names)
                      or retyped_columns(s, filter_names, self.arrow_schema)
                      for s in scanned)
        local = local_filter_columns(predicate)
        internal = self._schema([*output, *self.key_columns, ROW_ADDR, *(
            n for n in filter_names if lacking or n in local)])
        scans = [ScanExec(s, internal, predicate, stepwise=limit is not None,
                          rows_wanted=limit) for s in scanned]
        node: ExecNode = DeduplicateExec(UnionExec(scans), self.key_columns, sources,
                                         needed=output, across_regions=self.across_regions)
        node = ProjectionExec(node, output)
        if limit is not None:
            node = GlobalLimitExec(node, limit)
        return LsmPlan(node, self._header("LsmScan"), sources=sources,
                       regions=(len(self.kept), self.total_regions))

    def _lookup_keys(self, keys: pa.Table) -> pa.Table:
        """The primary-key columns of ``keys``, in the key's types."""
        known = self._one_values
        if known is not None and known[0] is keys:
            return keys  # one_key_table's: made as the key columns in their types
        if keys.num_rows == 1 and self._typed_keys(keys):
            return keys  # one key given as the key columns in their types: as it is
        missing = [k for k in self.key_columns if k not in keys.column_names]
        if missing:
            raise InvalidInputError(f"lookup keys lack the primary-key columns {missing}")
        return pa.table({k: _cast(keys.column(k), self._field(k).type, k)
                         for k in self.key_columns})

    def _lookup_regions(self, key_table: pa.Table
                        ) -> tuple[list[RegionState], np.ndarray | None]:
        """(the regions the keys may live in, each key's position among them: -1 any,
        -2 none) — all regions, None, when the spec does not route keys."""
        routed = self._route(key_table)
        if routed is None:
            return self.regions(None), None
        if routed.size == 1:  # one key: its region, if it exists and has a manifest
            position = int(routed[0])
            regions = self.regions(None, at=[position] if position >= 0 else [])
            return regions, np.array([0 if position >= 0 and regions else -2], np.int64)
        listed = self._listed()
        # the listed positions routed to, ascending (each once)
        at = np.flatnonzero(np.bincount(routed[routed >= 0], minlength=len(listed)))
        regions = self.regions(None, at=at)
        kept_ids = {r.region_id: i for i, r in enumerate(regions)}
        # listed position -> kept position; keys of no existing region: -2 (base only)
        remap = np.full(len(listed) + 1, -2, np.int64)
        for position in at.tolist():
            remap[position] = kept_ids.get(listed[position][0], -2)
        return regions, remap[np.where(routed >= 0, routed, len(listed))]

    def one_key_table(self, keys: object) -> pa.Table | None:
        """``{key column: [value]}`` (one key of a one-column int64 / string key, a Python
        int / str) as the one-row key table ``pa.table`` would make of it, built in the
        key's type without inferring one (~3x cheaper); None for anything else."""
        if not isinstance(keys, dict) or len(keys) != 1 or self._one_key_schema is None:
            return None
        (name, values), = keys.items()
        if name != self.key_columns[0] or type(values) is not list or len(values) != 1:
            return None
        value, t = values[0], self._one_key_schema.field(0).type
        if not ((type(value) is int and t == pa.int64() and -(1 << 63) <= value < 1 << 63)
                or (type(value) is str and t == pa.string())):
            return None
        table = pa.Table.from_arrays([pa.array(values, t)], schema=self._one_key_schema)
        self._one_values = (table, [value])  # (as_py of its one value gives it back)
        return table

    def _one_key(self, keys: pa.Table) -> tuple[list[object], list[pa.DataType]] | None:
        """The key of the one-row key table ``keys`` (in the key's types, as
        :meth:`_lookup_keys` gives it) as Python values, and the key columns' types: read
        once per lookup, for its routing and its bloom filters' hash. None when the key
        columns are not all top-level (the callers read ``keys`` themselves)."""
        types = self._key_types
        if types is None:
            return None
        known = self._one_values
        if known is not None and known[0] is keys:
            return known[1], types
        values = [c[0].as_py() for c in keys.columns]
        self._one_values = (keys, values)
        return values, types

    def _typed_keys(self, keys: pa.Table) -> bool:
        """Whether ``keys`` holds just the key columns, in order, in the key's types, each
        one chunk without nulls: what :meth:`_lookup_keys` would make of it."""
        if self._key_types is None or keys.column_names != self.key_columns:
            return False
        for t, column in zip(self._key_types, keys.columns, strict=True):
            if column.num_chunks != 1 or column.null_count or not column.type.equals(t):
                return False
        return True

    def _output_schema(self, schema: pa.Schema, output: Sequence[str]) -> pa.Schema:
        """The fields of ``output`` in a lookup's ``schema`` (made once per projection,
        as :meth:`_lookup_schema`)."""
        names = ("", *output)  # (the lookup schemas' keys never start with "")
        out = self._lookup_schemas.get(names)
        if out is None:
            out = self._lookup_schemas[names] = pa.schema([schema.field(n) for n in output])
        return out

    def _lookup_schema(self, output: Sequence[str]) -> pa.Schema:
        names = (*self.key_columns, *output, ROW_ADDR, TOMBSTONE, GEN, REGION, KEY_POSITION)
        schema = self._lookup_schemas.get(names)
        if schema is None:  # shared by a warm view's fresh copies (same base schema)
            schema = self._lookup_schemas[names] = self._schema(names)
        return schema

    def lookup_plan(self, keys: pa.Table, columns: Sequence[str] | None = None) -> LsmPlan:
        """The newest live row of every key in ``keys`` (the primary-key columns), in the
        keys' order; keys without one are left out."""
        output = self._columns(columns)
        key_table = self._lookup_keys(keys)
        regions, region_index = self._lookup_regions(key_table)
        sources = self.sources(regions, lazy=True)
        schema = self._lookup_schema(output)
        lookup_keys = Keys(key_table, region_index,
                           one=self._one_key(key_table) if key_table.num_rows == 1 else None)
        children: list[ExecNode] = []
        for source in sources[1:]:
            children.append(BloomFilterGuardExec(source, TakeLastExec(source, schema,
                                                                      lookup_keys)))
        base = TakeLastExec(sources[0], schema, lookup_keys)
        children.append(base)
        node = ProjectionExec(CoalesceFirstExec(children, lookup_keys), output)
        trace = NodeMetrics() if key_table.num_rows == 1 else None
        one = (partial(self._one_row, sources, schema, output, lookup_keys, trace)
               if key_table.num_rows == 1 else None)
        many = (ManyKeyLookup(sources, schema, output, lookup_keys, base,
                              every_region=len(regions) == self.total_regions)
                if many_usable(sources, lookup_keys, schema.field(0).type) else None)
        # the header (region labels) is made only if the plan is explained
        header = partial(self._header, "LsmPointLookup", self.kept, self.total_regions)
        if many is not None:
            header = partial(_with_line, header, f"ManyKeyProbe: {key_table.num_rows} keys, "
                             "every newer source probed at once (the same lookups as below)")
        return LsmPlan(node, header, one, many, sources=sources, one_metrics=trace,
                       regions=(len(self.kept), self.total_regions))

    def lookup_one(self, keys: pa.Table, columns: Sequence[str] | None = None
                   ) -> pa.Table | None:
        """``lookup_plan(keys, columns).to_table()`` for one key, without plan nodes (a
        one-key plan runs this way too, its nodes kept for EXPLAIN): the
        same sources asked in the same order (newer generations newest first, each
        behind its bloom filter, then the base table) and the row built straight from
        the first that holds the key. None (nothing read yet, or a source answered with
        several rows): the caller takes the plan."""
        if keys.num_rows != 1:
            return None
        output = self._columns(columns)
        key_table = self._lookup_keys(keys)
        regions, region_index = self._lookup_regions(key_table)
        return self._one_row(self.sources(regions, lazy=True), self._lookup_schema(output),
                             output, Keys(key_table, region_index, one=self._one_key(key_table)))

    def lookup_rows(self, keys: pa.Table, columns: Sequence[str] | None = None
                    ) -> pa.Table:
        """``lookup_plan(keys, columns).to_table()``, a few keys without building the
        plan (:meth:`lookup_few`): what ``mw.get`` and SQL point lookups answer."""
        few = self.lookup_few(keys, columns)
        return few if few is not None else self.lookup_plan(keys, columns).to_table()

    def lookup_few(self, keys: pa.Table, columns: Sequence[str] | None = None
                   ) -> pa.Table | None:
        """``lookup_plan(keys, columns).to_table()`` for at most :data:`ONE_BY_ONE_KEYS`
        keys, each looked up alone by :meth:`lookup_one` (building the plan's nodes
        costs more than a one-key lookup each: a key of the base took ~2 ms alone, two
        keys planned ~6). None when there are more keys, or a key needs the plan: the
        caller then takes the plan for them all."""
        if not 1 <= keys.num_rows <= ONE_BY_ONE_KEYS:
            return None
        found = []
        for i in range(keys.num_rows):
            one = self.lookup_one(keys.slice(i, 1), columns)
            if one is None:
                return None
            found.append(one)
        # one chunk, as the plan's table (a query's frame hands its batches on)
        return found[0] if len(found) == 1 else pa.concat_tables(found).combine_chunks()

    def _one_row(self, sources: Sequence[Source], schema: pa.Schema, output: list[str],
                 lookup_keys: Keys, trace: NodeMetrics | None = None) -> pa.Table | None:
        """The one key's newest live row from ``sources`` (see :meth:`lookup_one`);
        ``trace``: counts the sources asked and names the one that answered."""
        known = self._wanted.get(id(schema))  # (one read: threads may replace it)
        if known is None or known[0] is not schema:
            known = (schema, [n for n in schema.names if n not in (GEN, REGION, KEY_POSITION)])
            _keep(self._wanted, id(schema), known, _PLAIN_ROWS_KEPT)  # (written whole)
        wanted = known[1]
        region = int(lookup_keys.region[0])
        for source in [*sources[1:], sources[0]]:
            if source.region_index is not None and region != -1 and \
                    source.region_index != region:
                if trace is not None:
                    trace.add("sources_of_other_regions")
                continue  # the key routes to another region
            if trace is not None:
                trace.add("sources_asked")
            if isinstance(source, MemTableSource):  # its key index, then a one-row slice
                found = source.lookup_one(lookup_keys.table)
                if found is None:
                    continue
                address, row = found
                out = self._output_schema(schema, output)
                if row.schema.get_field_index(TOMBSTONE) >= 0 and \
                        row.column(TOMBSTONE)[0].as_py():
                    _answered(trace, source, deleted=True)
                    return out.empty_table()  # deleted
                _answered(trace, source)
                extra = {ROW_ADDR: address, KEY_POSITION: 0}  # as the source's lookup
                return _one_row_table(
                    [pa.array([extra[f.name]], f.type) if f.name in extra
                     else _one_column(row, source, f) for f in out], out)
            if isinstance(source, BaseSource):  # its key index, without batch bookkeeping
                row = source.lookup_one(lookup_keys, wanted)
                if row is not None:
                    out = self._output_schema(schema, output)
                    if not row.num_rows:
                        _answered(trace, None)
                        return out.empty_table()  # the base is asked last
                    _answered(trace, source)
                    return self._projected_base_row(row, source, out)
            if source.exact_lookup and not source.might_hold(lookup_keys):
                continue
            if not source.exact_lookup and not source.is_base:
                bloom = source.bloom()
                if bloom is not None and \
                        not bloom.might_contain_hash(int(lookup_keys.hashes[0])):
                    if trace is not None:
                        trace.add("bloom_ruled_out")
                    continue
            table = source.lookup(lookup_keys, wanted)
            if not table.num_rows:
                continue
            if table.num_rows != 1:
                return None
            out = pa.schema([schema.field(n) for n in output])
            if table.column(TOMBSTONE)[0].as_py():
                _answered(trace, source, deleted=True)
                return out.empty_table()  # deleted
            _answered(trace, source)
            return _one_row_table([_one_column(table, source, f) for f in out], out)
        _answered(trace, None)
        return pa.schema([schema.field(n) for n in output]).empty_table()

    def _projected_base_row(self, row: pa.Table, source: Source, out: pa.Schema
                            ) -> pa.Table:
        """:func:`_base_row`, the columns of a plain projection picked by their positions
        in ``row``: found once per output schema (one per projection, see
        :meth:`_output_schema`) and row schema (one per column list of the base's
        lookups), instead of a test of every output field per lookup."""
        present = row.schema
        kept = self._plain_rows.get(id(out))  # (one read: threads may replace it)
        if kept is None or kept[0] is not out or not kept[1].equals(present):
            plain = all(present.get_field_index(f.name) >= 0 and
                        present.field(f.name).type.equals(f.type) for f in out)
            kept = (out, present, [present.get_field_index(f.name) for f in out]
                    if plain else None)
            _keep(self._plain_rows, id(out), kept, _PLAIN_ROWS_KEPT)  # (written whole)
        if kept[2] is None:
            return _base_row(row, source, out)
        return _one_row_table([row.column(i) for i in kept[2]], out)

    def _route(self, keys: pa.Table) -> np.ndarray | None:
        """Each key's region (a position in the listed regions; -1: no region has its
        values) when the region spec is a function of the key; None otherwise."""
        spec = self.spec
        if spec is None:
            return None
        columns = self._spec_key_positions()
        if columns is None:
            return None
        names = [self.key_columns[i] for i in columns]
        listed = self._listed()
        known, where = self._routes(listed)
        if len(known) < len(listed):
            return None  # regions outside the spec (made by hand) may hold any key
        if known and keys.num_rows == 1:  # one key: routed without Arrow arrays if it can
            given = self._one_key(keys)
            if given is not None:
                one = scalar_region_values(spec, [given[0][i] for i in columns],
                                           [given[1][i] for i in columns])
            else:
                one = scalar_region_values(spec, [keys.column(n)[0].as_py() for n in names],
                                           [keys.schema.field(n).type for n in names])
            if one is not None:
                return np.array([where.get(_route_key(one), -1)], np.int64)
        routed = np.full(keys.num_rows, -1, np.int64)
        if not known or not keys.num_rows:
            return routed
        numbers = bucket_numbers(spec, [keys.column(n) for n in names]) \
            if keys.num_rows > _FEW_KEYS else None
        by_number = None if numbers is None else _routed_numbers(numbers, where)
        if by_number is not None:  # many integer keys bucketed: routed in numpy alone
            return by_number
        with sql_on_own_thread():  # we may be planning inside DataFusion's runtime
            values = region_values(spec, [keys.column(n) for n in names], keys.num_rows)
        if keys.num_rows <= _FEW_KEYS or any(pa.types.is_floating(t) for t in values.schema.types):
            # a few keys: a dictionary beats a join's setup (and float values: a join
            # never matches a NaN)
            for n in range(keys.num_rows):
                routed[n] = where.get(_route_key(_first_row(values, n)), -1)
            return routed
        by_number = _route_numbers(values, where)
        if by_number is not None:
            return by_number
        fields = [f.field_id for f in spec.fields]
        table = _region_values_of(listed, known)
        table = table.append_column("__region", pa.array(known, pa.int64()))
        probe = values.append_column("__key", pa.array(np.arange(keys.num_rows)))
        try:
            joined = probe.join(table.cast(pa.schema([*(values.schema.field(f) for f in fields),
                                                      table.schema.field("__region")])),
                                fields, join_type="inner", use_threads=False)
        except pa.ArrowException:
            return None  # values of another type: ask every region
        at = np.asarray(joined.column("__key").to_numpy(), np.int64)
        routed[at] = np.asarray(joined.column("__region").to_numpy(), np.int64)
        return routed

    def _routes(self, listed: list) -> tuple[list[int], dict[tuple, int]]:
        """The positions in ``listed`` of the regions of the current spec, and their
        region values (as Python tuples) -> position; a warm view keeps them while the
        same listing comes back."""
        warm = self.warm
        spec_id = self.spec.spec_id if self.spec is not None else 0
        if warm is not None:
            routes = warm.routes  # tied to the listing object itself: no mix-up between
            if routes is not None and routes[0] is listed and routes[1] == spec_id:
                return routes[2], routes[3]  # threads replacing the listing
        known = [i for i, r in enumerate(listed) if r[1] == spec_id and r[2] is not None]
        where = {_route_key(_first_row(listed[i][2])): i for i in known}
        current = warm.listing if warm is not None else None  # one read, as in _listed
        if warm is not None and current is not None and current[1] is listed:
            warm.routes = (listed, spec_id, known, where)
        return known, where

    def knn_plan(self, column: str, query: Sequence[float] | np.ndarray, k: int, *,
                 metric: str = "l2", columns: Sequence[str] | None = None,
                 filter: str | Expr | None = None, exact: bool = False
                 ) -> LsmPlan:
        """The ``k`` newest rows nearest to ``query`` in ``column`` where ``filter``
        holds, with ``_distance``."""
        check_search_columns(self.arrow_schema, column, self.base.uri)
        output = self._columns(columns)
        try:
            predicate = self._predicate(filter, typed=True)
        except NotFoundError as exc:  # (as a filter's type errors: the call's arguments)
            raise InvalidInputError(f"the filter names no column of {self.base.uri}: "
                                    f"{exc}") from exc
        scanned, sources = self.pruned_sources(predicate)
        filter_names = [p[0] for p in expr_columns(predicate)] if predicate is not None else []
        local = local_filter_columns(predicate)
        schema = self._schema([*output, column, *self.key_columns, ROW_ADDR, GEN, REGION,
                               *(n for n in filter_names if n in BASE_ONLY or n in local),
                               DISTANCE])
        vector = query_vector(query)
        check = StaleCheck(sources, self.key_columns,
                           [schema.field(c).type for c in self.key_columns], exact=exact,
                           across_regions=self.across_regions)
        knns = [KNNExec(s, schema, column, vector, k, metric, predicate, check)
                for s in scanned]
        node: ExecNode = FilterStaleExec(UnionExec(knns), check)
        node = GlobalLimitExec(SortExec(node, DISTANCE), k)
        node = ProjectionExec(node, [*output, DISTANCE])
        return LsmPlan(node, self._header("LsmSearch"), sources=sources,
                       regions=(len(self.kept), self.total_regions))


def bounded_batches(stream: Iterator[pa.RecordBatch], rows: int
                    ) -> Iterator[pa.RecordBatch]:
    """``stream``'s batches cut (zero-copy slices) into at most ``rows`` rows each; the
    stream is closed when the consumer stops early (a LIMIT met)."""
    try:
        for batch in stream:
            if batch.num_rows <= rows:
                yield batch
                continue
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def _route_numbers(values: pa.Table, where: dict[tuple, int]) -> np.ndarray | None:
    """Each row's position in ``where`` (region values -> listed position; -1: no such
    region) when the region values are one column of integers (a bucket or an identity
    of an integer key): a search of the known values, sorted, instead of a join (about
    a millisecond for 1000 keys). None otherwise: the caller joins."""
    if values.num_columns != 1 or not where or values.column(0).null_count:
        return None
    column = values.column(0)
    t = column.type
    if not pa.types.is_integer(t) or (t.bit_width == 64 and not pa.types.is_signed_integer(t)):
        return None  # (uint64 values may not fit int64)
    return _routed_numbers(column.to_numpy().astype(np.int64, copy=False), where)


# the last region values -> position dictionary _routed_numbers met, with its numbers
# sorted and their positions: (that dictionary, numbers, positions)
_NUMBERED: list[tuple[dict, np.ndarray, np.ndarray] | None] = [None]


def _routed_numbers(got: np.ndarray, where: dict[tuple, int]) -> np.ndarray | None:
    """Each of the region values ``got`` (int64 numbers) as a position in ``where``
    (see :func:`_route_numbers`; -1: no such region); None when the known values are
    not all integers of int64."""
    kept = _NUMBERED[0]  # (one read: threads may replace it)
    if kept is not None and kept[0] is where:
        codes, positions = kept[1], kept[2]
    else:
        if not where or any(len(k) != 1 or type(k[0]) is not int for k in where):
            return None
        known = [k[0] for k in where]
        try:
            codes = np.array(known, np.int64)
        except OverflowError:
            return None
        order = np.argsort(codes)
        codes = codes[order]
        positions = np.fromiter(where.values(), np.int64, len(where))[order]
        # (a warm view's routes keep one dictionary while its listing stays: its
        # numbers are sorted once; the dictionary is never changed once made)
        _NUMBERED[0] = (where, codes, positions)
    at = np.minimum(codes.searchsorted(got), codes.size - 1)
    return np.where(codes[at] == got, positions[at], -1)


def _answered(trace: NodeMetrics | None, source: Source | None, deleted: bool = False
              ) -> None:
    """Note in ``trace`` the source that answered a one-key lookup (None: no source
    holds the key)."""
    if trace is not None:
        trace.note("answered_by", "none (no source holds the key)" if source is None
                   else source.label + (" (a tombstone: deleted)" if deleted else ""))


def _with_line(header: Callable[[], list[str]], line: str) -> list[str]:
    return [*header(), line]


def _cast(column: pa.ChunkedArray | pa.Array, t: pa.DataType, name: str) -> pa.Array:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if column.null_count:
        raise InvalidInputError(f"lookup key column {name!r} has null values")
    if not same_kind(column.type, t):
        raise InvalidInputError(f"lookup key column {name!r}: {column.type} keys do not fit "
                                f"the key's {t} (another kind of value)")
    try:
        return column if column.type.equals(t) else column.cast(t)
    except pa.ArrowException as exc:
        raise InvalidInputError(f"lookup key column {name!r}: {column.type} does not fit "
                                f"the key's {t}: {exc}") from exc


def _base_row(row: pa.Table, source: Source, out: pa.Schema) -> pa.Table:
    """The output ``out`` of the one row the base table answered a one-key lookup with
    (as :meth:`BaseSource.lookup` gives it: ``_key`` 0, not a tombstone); when the row
    holds every output column in its type (a plain projection), its columns as they are."""
    present = row.schema
    if all(present.get_field_index(f.name) >= 0 and
           present.field(f.name).type.equals(f.type) for f in out):
        return _one_row_table([row.column(f.name) for f in out], out)
    base_extra = {KEY_POSITION: 0, TOMBSTONE: False}  # as BaseSource.lookup
    return _one_row_table(
        [pa.array([base_extra[f.name]], f.type) if f.name in base_extra
         else _one_column(row, source, f) for f in out], out)


def _keep(kept: dict, key: Hashable, value: object, most: int) -> None:
    """``kept[key] = value``, emptying ``kept`` first when it holds ``most`` other keys
    (a view's caches stay bounded and their entries replaceable; readers on other
    threads see an entry or none)."""
    if len(kept) >= most and key not in kept:
        kept.clear()
    kept[key] = value


def _check_base_kept(base: LanceDataset, region_id: uuid.UUID, generations: list[int]
                     ) -> None:
    """VersionCleanedUpError when the view's base version ``base`` has been removed (by
    ``cleanup_old_versions``): the region's ``generations`` it had not merged were merged
    into a newer version and collected, so the view cannot be read. (A function of the
    base alone: lazy generation sources kept between reads hold it, not the view.)"""
    try:
        base.store.identity(base.manifest_key)
    except NotFoundError:
        raise VersionCleanedUpError(
            f"{base.uri}: base version {base.version} of this LSM view was "
            f"removed by cleanup_old_versions, and generations {generations[:5]} of "
            f"region {region_id} it had not merged were merged into a newer version "
            "and collected: open the view again (mw.scanner(), mw.view())") from None


def _kept_generation(base: LanceDataset,
                     named: dict[tuple[uuid.UUID, str], tuple[LanceDataset, LanceDataset]],
                     region_id: uuid.UUID, gen: int, path: str, key: str, merged: bool
                     ) -> LanceDataset | None:
    """:func:`_named_generation`, None only when the generation was collected after
    its merge (``merged``: the view's MemWAL index says the base holds its rows). The
    garbage collector keeps every generation a kept base version has not merged: the
    files of one not merged gone is damage, a FormatError (its keys would read as the
    base's older rows, silently), unless the view's base version went first
    (VersionCleanedUpError). Eager and lazy generation sources (a one-key lookup opens
    one when its bloom filter cannot rule the key out) both apply this rule."""
    ds = _named_generation(base, named, region_id, path, key)
    if ds is None and not merged:
        _check_base_kept(base, region_id, [gen])
        raise FormatError(f"{base.uri}: generation {gen} of region {region_id} ({key}) is "
                          f"not merged into base version {base.version}, but its files "
                          "are missing")
    return ds


def _named_generation(base: LanceDataset,
                      named: dict[tuple[uuid.UUID, str], tuple[LanceDataset, LanceDataset]],
                      region_id: uuid.UUID, path: str, key: str) -> LanceDataset | None:
    """The generation in directory ``key``, its columns named as ``base`` names them
    (None: collected after its merge). ``named``: the view's kept renamings. A function
    of the state a view's read copies share, not of one copy: a lazy generation source
    kept between reads must not keep a read's MemTables alive."""

    def load() -> LanceDataset:
        return open_generation(base.uri, base.store, region_id, path)

    try:  # a flushed generation never changes: opened once per process
        ds = current_runtime().cache.get_or_load(GENERATION_TABLES, (base.store.uri, key),
                                                 load)
    except NotFoundError:
        return None
    # columns renamed since it was written read under their new names (made once per
    # view: ~7 µs a generation, which a one-key lookup would pay on every call)
    found = named.get((region_id, path))
    if found is None or found[0] is not ds:
        renamed = named_as_table(ds, base.manifest.schema)
        check_generation_columns(renamed, mem_wal_index.primary_key_columns(
            base.manifest.schema))
        found = named[region_id, path] = (ds, renamed)
    return found[1]


def _one_row_table(columns: list, schema: pa.Schema) -> pa.Table:
    """The one found row as a table of ``schema``; one row of no columns when nothing is
    projected (``count(*)`` of a key asks for none: a table built from no arrays would
    have no rows)."""
    if not columns:  # (pyarrow's replace_schema_metadata would drop the row)
        return rows_only(1)
    return pa.Table.from_arrays(columns, schema=schema)


def _one_column(table: pa.Table, source: Source, f: pa.Field
                ) -> pa.Array | pa.ChunkedArray:
    """Column ``f`` of the one row ``source`` answered a lookup with, as the plan's
    nodes give it (``_gen`` / ``_region`` the source's, columns it lacks NULL)."""
    if f.name == GEN:
        return pa.array([source.gen], pa.int64())
    if f.name == REGION:
        return pa.array([None if source.region is None else str(source.region)], pa.string())
    if table.schema.get_field_index(f.name) < 0:  # (column_names: a new list per call)
        return pa.nulls(1, f.type)
    column = table.column(f.name)
    if column.type.equals(f.type):
        return column  # (one row: one chunk, as the table takes it)
    return as_column_type(column.combine_chunks(), f.type, f"column {f.name!r}")


class LsmScanner:
    """A configured read of the LSM view (``MemWal.scanner(...)``); planned on first use,
    so the sources are those of that moment. ``to_batches`` hands out at most
    ``batch_size`` rows a batch (default the plain scanner's), as slices of what the plan
    yields (a base fragment's winners at a time)."""

    def __init__(self, view: LsmView, columns: Sequence[str] | None,
                 filter: str | Expr | None, limit: int | None,
                 batch_size: int | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidInputError(f"batch_size must be a positive integer, got "
                                    f"{batch_size!r}")
        self.view = view
        self.columns = columns
        self.filter = filter
        self.limit = limit
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE
        self._plan: LsmPlan | None = None

    @property
    def plan(self) -> LsmPlan:
        if self._plan is None:
            self._plan = self.view.scan_plan(self.columns, self.filter, self.limit)
        return self._plan

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return bounded_batches(self.plan.execute(), self.batch_size)

    def to_table(self) -> pa.Table:
        return self.plan.to_table()

    def count_rows(self) -> int:
        plan = self.view.scan_plan([], self.filter, self.limit)
        return sum(b.num_rows for b in plan.execute())

    def explain(self, analyze: bool = False) -> str:
        """The plan; ``analyze``: planned afresh, run to the end (its rows dropped) and
        printed with what each node did (EXPLAIN ANALYZE)."""
        if not analyze:
            return self.plan.explain()
        plan = self.view.scan_plan(self.columns, self.filter, self.limit)
        for _ in plan.execute():
            pass
        return plan.explain(analyze=True)
