"""The change data feed: rows each version inserted, updated and deleted (Delta's shape).

``table_changes(store, start, end)`` covers versions ``start..end`` *inclusive*, as Delta
does; version ``v``'s changes are the difference between manifests ``v-1`` and ``v``
(version 1 against an empty table). pylance's ``delta()`` excludes its start instead.
Each row carries the table's columns plus ``_change_type`` (``insert``,
``update_preimage``, ``update_postimage``, ``delete``), ``_commit_version``,
``_commit_timestamp`` and ``_rowid``. Only tables with stable row ids have a feed.

Work is split so that filters prune before data is read:

1. :func:`plan_changes` compares manifests fragment by fragment (unchanged fragments cost
   nothing) using row lineage and deletion vectors only, giving a :class:`ChangeRows`:
   per change, its type, version, row id and where the row's values live.
2. :class:`~lance_sql.table.changes.query.ChangeQuery` filters those rows on the metadata
   columns (:mod:`lance_sql.table.changes.rows` holds the rows and the column names).
3. :func:`read_changes` reads the projected data columns of the surviving rows (from the
   old manifest's files for deletes and pre-images) and applies the whole filter.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pyarrow as pa

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    VersionCleanedUpError,
    VersionNotFoundError,
)
from lance_sql.expr import filter_rows
from lance_sql.expr.casts import cast_like_datafusion
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import WRITER_LIBRARY, Manifest
from lance_sql.format.naming import TRANSACTIONS_DIR
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table.changes.columns import Commit, column_sources_many
from lance_sql.table.changes.net import check_mode, net_changes
from lance_sql.table.changes.query import ChangeQuery
from lance_sql.table.changes.rows import (
    DELETE,
    INSERT,
    META_COLUMNS,
    META_FIELDS,
    POSTIMAGE,
    PREIMAGE,
    ChangeRows,
)
from lance_sql.table.files.lineage import FragmentLineage, load_lineage
from lance_sql.table.files.reader import (
    FragmentReader,
    checked_rows,
    deleted_offsets,
    null_column,
)
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.meta.timetravel import (
    as_utc,
    commit_micros,
    parse_instant,
    version_at,
    version_since,
)
from lance_sql.table.meta.versions import (
    describe_versions,
    list_versions,
    load_manifest,
    read_tag,
)
from lance_sql.table.read.scan import cast_output
from lance_sql.table.runtime.cache import CHANGE_FIELDS, CHANGE_PLANS
from lance_sql.table.runtime.context import current_runtime
from lance_sql.table.runtime.workers import WorkerPool
from lance_sql.table.txn.operations import Overwrite, Restore, Transaction, Update

__all__ = [
    "ChangeWindow",
    "PlannedChanges",
    "plan_changes",
    "plan_query",
    "read_changes",
    "read_query",
    "resolve_window",
    "table_changes",
]

# Fragments read in parallel when gathering the values of changed rows, and the fewest
# rows a read needs to be worth a thread. Smaller reads are mostly Python work that holds
# the GIL (a 10k-row take from a mapped 1M-row fragment: ~0.6 ms; a 100k-row dense read
# of two columns: ~3 ms; no large copy to overlap since the local store maps its files),
# so threads only add hand-offs, which a loaded machine makes long: bench_lineage's 1%
# update took 11 ms in one thread vs 20 ms on the pool (quiet), 33-48 vs 83 ms (loaded).
READ_THREADS = min(8, os.cpu_count() or 1)
PARALLEL_ROWS = 1 << 18

VersionArg = int | str | dt.datetime
ManifestOf = Callable[[int], Manifest]


# ---------------------------------------------------------------- the version window


@dataclass(frozen=True)
class ChangeWindow:
    """Versions ``start..end`` (inclusive) and the manifests their changes need."""

    store: ObjectStore
    start: int
    end: int
    manifest_of: ManifestOf = field(repr=False, compare=False)

    @property
    def schema(self) -> pa.Schema:
        """Data columns (the end version's) followed by the change metadata columns."""
        data = self.manifest_of(self.end).schema.to_arrow()
        return pa.schema(list(data) + list(META_FIELDS), metadata=data.metadata)


def _as_point(store: ObjectStore, value: VersionArg, what: str) -> int | dt.datetime:
    """A bound as a version number or an instant. Text is read as ``VERSION AS OF``
    reads it: digits are a version, an ISO timestamp an instant, anything else a tag
    (the version it names; NotFoundError when there is no such tag)."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} must be a version number, a tag or a timestamp, "
                                f"got {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, dt.datetime):
        return as_utc(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            return parse_instant(text)
        except InvalidInputError:
            pass
        try:
            return int(read_tag(store, text)["version"])
        except InvalidInputError:  # not even a tag's name
            raise InvalidInputError(f"{what} {value!r} is neither a version number, a tag "
                                    "nor an ISO timestamp") from None
        except NotFoundError:
            raise NotFoundError(f"{what} {value!r} is neither a version number, an ISO "
                                f"timestamp nor a tag of {store.uri}") from None
    raise InvalidInputError(f"{what} must be a version number, a tag or a timestamp, "
                            f"got {value!r}")


def _oldest_readable(versions: list[int]) -> int:
    """The oldest version whose changes can still be computed: its parent and every
    version after it remain (past the newest when a cleanup kept it alone: only the
    changes of versions yet to come are)."""
    i = len(versions) - 1
    while i > 0 and versions[i - 1] == versions[i] - 1:
        i -= 1
    return versions[i] if versions[i] == 1 else versions[i] + 1


def _readable_hint(versions: list[int]) -> str:
    oldest = _oldest_readable(versions)
    later = " (of versions committed from now on)" if oldest > versions[-1] else ""
    return f"changes are readable from version {oldest}{later}"


def resolve_window(store: ObjectStore, start: VersionArg, end: VersionArg | None = None,
                   manifest_of: ManifestOf | None = None) -> ChangeWindow:
    """The window for ``start..end`` (version numbers, tags or timestamps; ``end`` None =
    latest).

    A timestamp start means the first version committed at or after it, a timestamp end
    the last committed at or before it. A table without stable row ids, or whose own
    columns use the feed's metadata names, has no feed (InvalidInputError).
    """
    refs = {r.version: r for r in list_versions(store)}
    if not refs:
        raise NotFoundError(f"no Lance table at {store.uri}")
    versions = sorted(refs)
    cache: dict[int, Manifest] = {}

    def load(version: int) -> Manifest:
        if version not in cache:
            if version not in refs:
                raise _missing(store, version, versions)
            cache[version] = (manifest_of(version) if manifest_of is not None
                              else load_manifest(store, refs[version]))
        return cache[version]

    first = _as_point(store, start, "start")
    last = _as_point(store, versions[-1] if end is None else end, "end")
    listed = [refs[v] for v in versions]
    if isinstance(first, dt.datetime):
        first = version_since(store, first, lambda ref: load(ref.version), refs=listed)
    if isinstance(last, dt.datetime):
        last = version_at(store, last, lambda ref: load(ref.version), refs=listed)
    if first < 1:
        raise InvalidInputError(f"change versions start at 1, got start={first}")
    if first > last:
        raise InvalidInputError(f"start version {first} is after end version {last}")
    for version in (first, last, first - 1):
        if version >= 1 and version not in refs:
            raise _missing(store, version, versions)
    window = ChangeWindow(store, first, last, load)
    _check_stable(window)
    _check_names(window.schema)
    return window


def _missing(store: ObjectStore, version: int, versions: list[int]) -> NotFoundError:
    listed = describe_versions(versions)
    if version < versions[-1]:  # versions are numbered without gaps: cleanup removed it
        return VersionCleanedUpError(
            f"the change window reaches version {version} of {store.uri}, which was removed "
            f"by cleanup; versions {listed} remain, {_readable_hint(versions)}")
    return VersionNotFoundError(f"version {version} of {store.uri} does not exist; "
                                f"versions: {listed}")


def _check_stable(window: ChangeWindow) -> None:
    if not window.manifest_of(window.end).uses_stable_row_ids:
        raise InvalidInputError(
            f"{window.store.uri} has no change data feed: it needs stable row ids, which are "
            "chosen when a table is created (write_dataset(..., enable_stable_row_ids=True))")


@contextmanager
def _history_guard(window: ChangeWindow) -> Iterator[None]:
    """Missing files of old versions become a VersionCleanedUpError naming the window."""
    try:
        yield
    except VersionCleanedUpError:
        raise
    except NotFoundError as exc:
        versions = [r.version for r in list_versions(window.store)]
        hint = f"; {_readable_hint(versions)}" if versions else ""
        raise VersionCleanedUpError(
            f"changes of versions {window.start}..{window.end} of {window.store.uri} need "
            f"files that no longer exist (removed by cleanup?): {exc}{hint}") from exc


# ------------------------------------------------------------------- the change plan




def _same_rows(old: Fragment, new: Fragment) -> bool:
    """Same physical rows with the same lineage (the deletion vector may differ)."""
    return (old.files == new.files and old.physical_rows == new.physical_rows
            and old.row_id_sequence == new.row_id_sequence
            and old.created_at_version_sequence == new.created_at_version_sequence
            and old.last_updated_at_version_sequence == new.last_updated_at_version_sequence)


def _sorted_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Values of ``a`` not in ``b`` (both sorted and unique), as int64."""
    a = a.astype(np.int64, copy=False)
    if not b.size or not a.size:
        return a
    at = np.minimum(np.searchsorted(b, a), b.size - 1)
    return a[b[at] != a]


def _live(store: ObjectStore, manifest: Manifest, frag: Fragment) -> np.ndarray:
    keep = np.ones(checked_rows(store, manifest, frag, small_ok=True), dtype=bool)
    keep[deleted_offsets(store, manifest, frag)] = False
    return np.flatnonzero(keep)


@dataclass(frozen=True)
class _Side:
    """Candidate rows on one side of a version: fragment, offset, row id and the version
    that last updated the row (what matching needs; creation versions are not)."""

    fragment: np.ndarray
    offset: np.ndarray
    row_ids: np.ndarray
    updated: np.ndarray

    @staticmethod
    def build(parts: list[tuple[int, np.ndarray, FragmentLineage]]) -> _Side:
        """From ``(fragment id, offsets, that fragment's whole lineage)`` parts."""
        if not parts:
            empty = np.empty(0, np.int64)
            return _Side(empty, empty, empty.astype(np.uint64), empty.astype(np.uint64))
        ids = [lin.ids_at(o) for _, o, lin in parts]
        updated = [lin.updated_at(o) for _, o, lin in parts]
        return _Side(np.repeat(np.array([f for f, _, _ in parts], np.int64),
                               [o.size for _, o, _ in parts]),
                     _joined([o.astype(np.int64, copy=False) for _, o, _ in parts]),
                     _joined(ids), _joined(updated))


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _id_order(ids: np.ndarray) -> np.ndarray | None:
    """Positions of ``ids`` in ascending order; None when they already are (common:
    fragments keep rows in id order)."""
    if ids.size < 2 or bool(np.all(ids[1:] >= ids[:-1])):
        return None
    return np.argsort(ids, kind="stable")


def _selected(mask: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Positions where ``mask`` holds, in the given order (None: ascending positions)."""
    return np.flatnonzero(mask) if order is None else order[mask[order]]


def version_changes(store: ObjectStore, old: Manifest | None, new: Manifest) -> ChangeRows:
    """Changes of the commit that turned ``old`` (None: empty table) into ``new``.

    In output order: inserts, then updates (each pre-image right before its post-image),
    then deletes, each by row id.
    """
    version = new.version
    old_frags = {} if old is None else {f.id: f for f in old.fragments}
    new_frags = {f.id: f for f in new.fragments}
    vanished: list[tuple[int, np.ndarray, FragmentLineage]] = []
    appeared: list[tuple[int, np.ndarray, FragmentLineage]] = []
    for frag in old_frags.values():
        assert old is not None
        now = new_frags.get(frag.id)
        if now is frag:  # decoded from the same bytes: untouched by this commit
            continue
        if now is not None and _same_rows(frag, now):
            if now.deletion_file == frag.deletion_file:
                continue
            was, now_deleted = deleted_offsets(store, old, frag), deleted_offsets(store, new, now)
            # Deletion vectors are sorted and unique.
            if was.size == 0:  # the fragment's first deletions
                offsets, back = now_deleted.astype(np.int64), np.empty(0, np.int64)
            else:
                offsets = _sorted_difference(now_deleted, was)
                back = _sorted_difference(was, now_deleted)  # rows a restore brought back
            if back.size:
                appeared.append((now.id, back, load_lineage(store, new, now)))
        else:
            offsets = _live(store, old, frag)
        if offsets.size:
            vanished.append((frag.id, offsets, load_lineage(store, old, frag)))
    for frag in new_frags.values():
        before = old_frags.get(frag.id)
        if before is frag or (before is not None and _same_rows(before, frag)):
            continue
        lineage = load_lineage(store, new, frag)
        if frag.deletion_file is None:  # every row is live: no copies needed
            rows = checked_rows(store, new, frag, small_ok=True)
            appeared.append((frag.id, np.arange(rows, dtype=np.int64), lineage))
            continue
        offsets = _live(store, new, frag)
        if offsets.size:
            appeared.append((frag.id, offsets, lineage))
    gone, came = _Side.build(vanished), _Side.build(appeared)
    gone_ids, came_ids = gone.row_ids, came.row_ids
    # Match each appearing row to its vanishing copy by id: no copy means inserted (or
    # brought back by a restore); a copy with another last-updated version means updated;
    # the same version means merely moved (compaction). Live ids are unique on each
    # side, so each appearing row matches at most one vanishing row.
    order = _id_order(gone_ids)
    ids = gone_ids if order is None else gone_ids[order]
    if ids.size and order is None and np.array_equal(ids, came_ids):
        # the same ids on both sides, both in order (a rewrite): row i matches row i
        matched = np.ones(ids.size, bool)
        partner = np.arange(ids.size)
        post = came.updated != gone.updated
    elif ids.size:
        at = np.minimum(np.searchsorted(ids, came_ids), ids.size - 1)
        matched = ids[at] == came_ids
        partner = at if order is None else order[at]  # each appearing row's vanishing copy
        post = matched & (came.updated != gone.updated[partner])
    else:
        partner = np.zeros(came_ids.size, np.int64)
        matched = post = np.zeros(came_ids.size, bool)
    deleted = np.ones(gone_ids.size, dtype=bool)
    deleted[partner[matched]] = False
    came_order = _id_order(came_ids)
    ins_at = _selected(~matched, came_order)
    post_at = _selected(post, came_order)
    pre_at = partner[post_at]
    del_at = _selected(deleted, order)
    return _change_rows(version, came, gone, ins_at, pre_at, post_at, del_at)


def _change_rows(version: int, came: _Side, gone: _Side, ins_at: np.ndarray,
                 pre_at: np.ndarray, post_at: np.ndarray, del_at: np.ndarray) -> ChangeRows:
    """Inserts, pre/post-image pairs and deletes, laid out directly in output order."""
    n_ins, n_upd, n_del = ins_at.size, post_at.size, del_at.size
    total = n_ins + 2 * n_upd + n_del
    pre, post = slice(n_ins, n_ins + 2 * n_upd, 2), slice(n_ins + 1, n_ins + 2 * n_upd, 2)
    dels = slice(n_ins + 2 * n_upd, total)

    def lay_out(came_values: np.ndarray, gone_values: np.ndarray, dtype: type) -> np.ndarray:
        out: np.ndarray = np.empty(total, dtype)
        out[:n_ins] = came_values[ins_at]
        out[pre] = gone_values[pre_at]
        out[post] = came_values[post_at]
        out[dels] = gone_values[del_at]
        return out

    kind = np.empty(total, np.int8)
    kind[:n_ins], kind[pre], kind[post], kind[dels] = INSERT, PREIMAGE, POSTIMAGE, DELETE
    source = np.full(total, version, np.int64)
    source[pre] = source[dels] = version - 1
    alt_fragment = np.full(total, -1, np.int64)  # each pre-image's post-image
    alt_offset = np.full(total, -1, np.int64)
    alt_fragment[pre] = came.fragment[post_at]
    alt_offset[pre] = came.offset[post_at]
    row_id = lay_out(came.row_ids, gone.row_ids, np.uint64)
    return ChangeRows(np.full(total, version, np.uint64), kind, row_id, source,
                      lay_out(came.fragment, gone.fragment, np.int64),
                      lay_out(came.offset, gone.offset, np.int64), alt_fragment, alt_offset)


def plan_changes(window: ChangeWindow, versions: Sequence[int] | None = None) -> ChangeRows:
    """Metadata-only changes of ``versions`` (default: the whole window), ordered."""
    wanted = range(window.start, window.end + 1) if versions is None else versions
    with _history_guard(window):
        parts = [_cached_version_changes(window, v) for v in sorted(wanted)]
    return parts[0] if len(parts) == 1 else ChangeRows.concat(parts)  # versions ascend


def _cached_version_changes(window: ChangeWindow, version: int) -> ChangeRows:
    """One version's ordered changes; kept for reuse (SQL plans then executes, and each
    Spark executor re-plans its version). A commit never changes, so the key is the
    table, the version and both manifests' commit times (a table re-created at the same
    place has new ones)."""
    old = window.manifest_of(version - 1) if version > 1 else None
    new = window.manifest_of(version)

    def plan() -> ChangeRows:
        return version_changes(window.store, old, new)

    return current_runtime().cache.get_or_load(CHANGE_PLANS, _plan_key(window, version), plan)


def _plan_key(window: ChangeWindow, version: int) -> tuple:
    old = window.manifest_of(version - 1) if version > 1 else None
    new = window.manifest_of(version)
    return (window.store.uri, version, new.timestamp_ns, old.timestamp_ns if old else None)


# ------------------------------------------------------------------------ querying


def timestamps_of(window: ChangeWindow, rows: ChangeRows) -> dict[int, int]:
    """Commit time (µs UTC) of every version in ``rows``."""
    return {v: commit_micros(window.manifest_of(v)) for v in _distinct(rows.version)}


def _distinct(values: np.ndarray) -> list[int]:
    """The distinct values, ascending (planned rows are sorted by version: no sort then)."""
    if values.size and bool(np.all(values[1:] >= values[:-1])):
        return values[np.r_[True, values[1:] != values[:-1]]].tolist()
    return np.unique(values).tolist()


def read_changes(window: ChangeWindow, rows: ChangeRows, names: Sequence[str],
                 schema: pa.Schema | None = None) -> pa.Table:
    """Columns ``names`` of ``rows``, in their order; data values read only for them."""
    schema = schema or window.schema
    out_schema = pa.schema([schema.field(n) for n in names])
    if not names:
        return pa.table({"_": pa.nulls(len(rows))}).select([])
    lance_schema = window.manifest_of(window.end).schema
    fields = [f for f in lance_schema.fields if f.name in names and f.name not in META_COLUMNS]
    data: dict[str, pa.ChunkedArray | pa.Array] = {}
    with _history_guard(window):
        plan = _read_plan(window, rows, fields, schema)
        results = _run_jobs([job for read in plan.reads for job in read.jobs])
    done = 0
    for read in plan.reads:
        data.update(read.columns(results[done:done + len(read.jobs)]))
        done += len(read.jobs)
    arrays = [plan.meta.column(n) if n in META_COLUMNS else data[n] for n in names]
    return pa.Table.from_arrays(arrays, schema=out_schema)


@dataclass(frozen=True)
class _ReadPlan:
    """How to read ``rows``' data columns, and their metadata columns: everything of a
    read that does not depend on the values read."""

    rows: ChangeRows
    meta: pa.Table
    reads: list[_GroupRead]

    @property
    def nbytes(self) -> int:
        jobs = [job for read in self.reads for job in read.jobs]
        return (self.meta.nbytes + sum(job.offsets.nbytes + 512 for job in jobs)
                + sum(0 if r.inverse is None else r.inverse.nbytes for r in self.reads))


def _read_plan(window: ChangeWindow, rows: ChangeRows, fields: list,
               schema: pa.Schema) -> _ReadPlan:
    """The read plan of ``rows``; kept with the change plans when ``rows`` is one
    version's whole cached plan (a repeated query then only reads values)."""

    def build() -> _ReadPlan:
        by_version: dict[int, dict[int, Fragment]] = {}  # fragments by id, per version
        reads = [_GroupRead.plan(window, located, group, schema, by_version)
                 for group, located in _by_location(window, rows, fields)] if fields else []
        return _ReadPlan(rows, rows.metadata(timestamps_of(window, rows)), reads)

    if not len(rows) or rows.version[0] != rows.version[-1]:
        return build()
    version = int(rows.version[0])
    whole = _cached_version_changes(window, version)
    if whole is not rows and not _views_of(rows, whole):
        return build()  # pruned or built elsewhere: planned for this call only
    rows = whole  # e.g. SQL's one partition of a whole version is a slice of it
    targets = tuple((f.id, f.name, schema.field(f.name).type) for f in fields)
    # (which fields hold the end's columns depends on the end too)
    end = window.manifest_of(window.end)
    key = ("read", _plan_key(window, version), window.end, end.timestamp_ns, targets)
    plan = current_runtime().cache.get_or_load(CHANGE_PLANS, key, build)
    return plan if plan.rows is rows else build()


def _views_of(rows: ChangeRows, whole: ChangeRows) -> bool:
    """Whether ``rows`` is all of ``whole`` through views of its arrays (a full slice):
    the same length, memory and strides for every field."""
    if len(rows) != len(whole):
        return False
    for f in fields(whole):
        a, b = getattr(rows, f.name), getattr(whole, f.name)
        if a.dtype != b.dtype or a.strides != b.strides or \
                a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
            return False
    return True


def _by_location(window: ChangeWindow, rows: ChangeRows, fields: list
                 ) -> list[tuple[list, ChangeRows]]:
    """``fields`` grouped by where each row's values are read.

    A pre-image's columns that its update did not modify hold the same values as its
    post-image, which sits in the commit's own (newer, contiguous) files: those are read
    there. Only updates lance_sql committed are trusted to list what they modified.
    """
    pre = (rows.kind == PREIMAGE) & (rows.alt_fragment >= 0)
    if len(rows) and rows.version[0] == rows.version[-1]:  # one version (rows ascend)
        versions = [int(rows.version[0])] if pre.any() else []
    else:
        versions = _distinct(rows.version[pre])
    # versions whose Update lists the fields it modified, with those fields
    modified = {v: changed for v in versions
                if (changed := _modified_fields(window, v)) is not None}
    # The update names the fields of its own version: a column's field there, which a
    # later type change may have replaced by the end's field of another id.
    held = _sources(window, list(modified), fields) if modified else {}
    groups: dict[tuple[int, ...], list] = {}
    for i, column in enumerate(fields):
        alternate = tuple(v for v in versions if v in modified
                          and not _modifies(held[v][i], modified[v]))
        groups.setdefault(alternate, []).append(column)
    out = []
    for alternate, group in groups.items():
        if not alternate:
            out.append((group, rows))
            continue
        use = pre if len(alternate) == len(versions) else (
            pre & np.isin(rows.version, np.array(alternate, np.uint64)))
        out.append((group, replace(
            rows,
            source=np.where(use, rows.version.astype(np.int64), rows.source),
            fragment=np.where(use, rows.alt_fragment, rows.fragment),
            offset=np.where(use, rows.alt_offset, rows.offset))))
    return out


def _modifies(field: LanceField | None, modified: frozenset[int]) -> bool:
    """Whether an update that modified the fields ``modified`` changed the column
    ``field`` holds in its version (None, a column it did not have: taken as changed,
    read where pre-images are)."""
    return field is None or any(f.id in modified for f in field.walk())


# What the feed needs of a version's transaction: the fields its Update changed, whether
# it overwrote the table, the version it restored (-1: none)
_Facts = tuple[tuple[int, ...], bool, int]
_ORDINARY: _Facts = ((), False, -1)


def _transaction_facts(window: ChangeWindow, version: int) -> _Facts:
    """:data:`_Facts` of version ``version``, read once per transaction file (they are
    written once, under unique names); an ordinary commit when there is none or it
    cannot be read (every column is then read from the old files)."""
    manifest = window.manifest_of(version)
    if not manifest.transaction_file:
        return _ORDINARY
    key = f"{TRANSACTIONS_DIR}/{manifest.transaction_file}"

    def load() -> _Facts:
        try:
            op = Transaction.decode(window.store.read(key), f"{window.store.uri}/{key}") \
                .operation
        except LanceError:
            return _ORDINARY
        changed: tuple[int, ...] = ()
        if isinstance(op, Update):
            # (a rewrite of rows lists them as the fields its new fragments change)
            changed = op.fields_modified or (op.fields_for_preserving_frag_bitmap
                                             if op.update_mode == "rewrite_rows" else ())
        return (tuple(changed), isinstance(op, Overwrite),
                op.version if isinstance(op, Restore) else -1)

    return current_runtime().cache.get_or_load(CHANGE_FIELDS, (window.store.uri, key), load)


def _modified_fields(window: ChangeWindow, version: int) -> frozenset[int] | None:
    """Field ids version ``version``'s Update modified, when it says so and we wrote it."""
    if window.manifest_of(version).writer_library != WRITER_LIBRARY:
        return None
    changed = _transaction_facts(window, version)[0]
    return frozenset(changed) if changed else None


def _commit(window: ChangeWindow, version: int) -> Commit:
    """Whether version ``version`` overwrote the table or restored an older version."""
    _, overwrite, restored = _transaction_facts(window, version)
    return Commit(overwrite, None if restored < 0 else restored)


def _sources(window: ChangeWindow, versions: Iterable[int], fields: list
             ) -> dict[int, tuple[LanceField | None, ...]]:
    """Per version of ``versions``, per end column of ``fields``, the field of that
    version holding its values (see :mod:`.columns`)."""
    return column_sources_many(window.end, versions, fields,
                               lambda v: window.manifest_of(v).schema,
                               lambda v: _commit(window, v))


@dataclass(frozen=True)
class _ReadJob:
    """Rows of one fragment to read for one group of columns."""

    store: ObjectStore
    manifest: Manifest
    fragment: Fragment
    offsets: np.ndarray
    fields: list
    target: pa.Schema
    # per field, the field of ``manifest``'s version holding it (the field itself when
    # unchanged; None: NULL there), see :func:`.columns.column_sources_many`
    sources: tuple[LanceField | None, ...]

    def run(self) -> pa.Table:
        reader = FragmentReader(self.store, self.manifest, self.fragment)
        offsets = self.offsets
        fields = list({s.id: s for s in self.sources if s is not None}.values())
        lo, hi = int(offsets.min()), int(offsets.max()) + 1
        if hi - lo <= 2 * offsets.size:  # dense (a new fragment): read the run, then pick
            arrays = reader.read(fields, offset=lo, length=hi - lo)
            if hi - lo != offsets.size or not np.all(offsets[1:] > offsets[:-1]):
                arrays = [a.take(pa.array(offsets - lo)) for a in arrays]
        else:
            arrays = reader.take(fields, offsets)
        read = dict(zip((f.id for f in fields), arrays, strict=True))
        arrays = [_as_column(read[s.id], f, offsets.size) if s is not f and s is not None
                  else read[s.id] if s is not None
                  else null_column(offsets.size, f, self.store.uri)
                  for f, s in zip(self.fields, self.sources, strict=True)]
        piece = pa.Table.from_arrays(arrays, names=[f.name for f in self.fields])
        return cast_output(piece, self.target, self.store, self.fragment)


def _as_column(values: pa.Array | pa.ChunkedArray, field: LanceField, rows: int
               ) -> pa.Array | pa.ChunkedArray:
    """An older version's values of ``field`` (its column before a type change or an
    overwrite) in the column's end type, cast as ``alter_columns`` casts them; NULL where
    a value does not cast (a row deleted before the type change never had to), the
    others kept."""
    target = field.to_scan_arrow().type
    if values.type == target:
        return values
    if isinstance(values, pa.ChunkedArray):
        chunks = [_cast_or_null(c, target) for c in values.chunks]
        return pa.chunked_array(chunks, type=target) if chunks else pa.nulls(rows, target)
    return _cast_or_null(values, target)


_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
# how many failed casts one array's values may take before its failing parts read NULL
# whole (values that do not cast are rows deleted before the type change: a few)
_CAST_ATTEMPTS = 4096


def _cast_or_null(values: pa.Array, target: pa.DataType,
                  budget: list[int] | None = None) -> pa.Array:
    """``values`` cast as ``alter_columns`` casts them, each value that does not cast
    NULL: a cast of the whole array first, then, when it fails, of its halves in turn
    (a few failing values cost a few casts per halving, never one per value). Past
    :data:`_CAST_ATTEMPTS` failures, a part that still fails reads NULL whole."""
    budget = [_CAST_ATTEMPTS] if budget is None else budget
    try:
        return cast_like_datafusion(values, target)
    except _CAST_ERRORS:
        budget[0] -= 1
        if len(values) <= 1 or budget[0] <= 0:
            return pa.nulls(len(values), target)
    half = len(values) // 2
    return pa.concat_arrays([_cast_or_null(values.slice(0, half), target, budget),
                             _cast_or_null(values.slice(half), target, budget)])


@dataclass(frozen=True)
class _GroupRead:
    """One group of columns read for every row: a job per fragment, then the rows' order."""

    target: pa.Schema
    jobs: list[_ReadJob]
    # the jobs' rows, concatenated and taken at ``inverse``, are the rows (None: already)
    inverse: np.ndarray | None

    @staticmethod
    def plan(window: ChangeWindow, rows: ChangeRows, fields: list, schema: pa.Schema,
             by_version: dict[int, dict[int, Fragment]]) -> _GroupRead:
        target = pa.schema([schema.field(f.name) for f in fields])
        if not len(rows):
            return _GroupRead(target, [], None)
        order, starts, ends = _location_groups(rows.source, rows.fragment)
        # A fragment whose deletion vector changed has the same files in both versions:
        # its rows of either version are read in one go (when their columns are the same
        # fields in both).
        same_files: dict[tuple, tuple[Manifest, Fragment, tuple, list]] = {}
        sources = _sources(window, np.unique(rows.source).tolist(), fields)
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            picked = slice(lo, hi) if order is None else order[lo:hi]
            source, frag_id = int(rows.source[picked][0]), int(rows.fragment[picked][0])
            manifest = window.manifest_of(source)
            frags = by_version.get(source)
            if frags is None:
                frags = by_version[source] = {f.id: f for f in manifest.fragments}
            frag = frags[frag_id]
            held = sources[source]
            where = tuple(None if h is None else h.id for h in held)
            same_files.setdefault((frag.files, frag.physical_rows, where),
                                  (manifest, frag, held, []))[3].append(picked)
        jobs, picks = [], []
        for manifest, frag, held, parts in same_files.values():
            picked = parts[0] if len(parts) == 1 else np.concatenate(
                [np.arange(p.start, p.stop) if isinstance(p, slice) else p for p in parts])
            picks.append(picked)
            jobs.append(_ReadJob(window.store, manifest, frag, rows.offset[picked], fields,
                                 target, held))
        if order is not None or len(picks) < len(starts):
            order = np.concatenate([np.arange(p.start, p.stop) if isinstance(p, slice) else p
                                    for p in picks])
        inverse = None
        if order is not None and np.any(order[1:] < order[:-1]):  # back to the rows' order
            inverse = np.empty_like(order)
            inverse[order] = np.arange(order.size)
        return _GroupRead(target, jobs, inverse)

    def columns(self, results: list[pa.Table]) -> dict[str, pa.ChunkedArray]:
        """The group's columns in the rows' order, from its jobs' ``results``."""
        if not self.jobs:
            return {f.name: pa.chunked_array([], f.type) for f in self.target}
        table = pa.concat_tables(results)
        if self.inverse is not None:
            table = table.take(pa.array(self.inverse))
        return {name: table.column(name) for name in self.target.names}


def _run_jobs(jobs: list[_ReadJob]) -> list[pa.Table]:
    """Each job's rows, in the jobs' order. Fragments are independent: large reads run
    side by side, the largest first.

    Reads of a few rows are mostly Python work that holds the GIL; threads only add
    hand-offs to them, so they run in this thread while the pool does the large ones.
    """
    large = sorted((i for i, job in enumerate(jobs) if job.offsets.size >= PARALLEL_ROWS),
                   key=lambda i: -jobs[i].offsets.size)
    if len(large) < 2 or READ_THREADS < 2:
        return [job.run() for job in jobs]
    results: list[pa.Table | None] = [None] * len(jobs)
    with WorkerPool("changes", min(len(large), READ_THREADS)) as pool:
        pending = [(i, pool.submit(jobs[i].run)) for i in large]
        for i, job in enumerate(jobs):
            if job.offsets.size < PARALLEL_ROWS:
                results[i] = job.run()
        for i, future in pending:
            results[i] = future.result()
    return [r for r in results if r is not None]


def _location_groups(source: np.ndarray, fragment: np.ndarray
                     ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Rows grouped by where their values live, (source version, fragment).

    Returns ``(order, starts, ends)``: group ``i`` is ``order[starts[i]:ends[i]]``;
    ``order`` None means the rows already come grouped (a few long runs, e.g. a new
    fragment read whole), so no reordering is needed at all.
    """
    n = source.size
    cuts = np.flatnonzero((source[1:] != source[:-1]) | (fragment[1:] != fragment[:-1])) + 1
    if cuts.size < 64:
        starts, ends = np.r_[0, cuts], np.r_[cuts, n]
        where = list(zip(source[starts].tolist(), fragment[starts].tolist(), strict=True))
        if len(set(where)) == len(where):
            return None, starts, ends
    s0, f0 = int(source.min()), int(fragment.min())
    width = int(fragment.max()) - f0 + 1
    span = (int(source.max()) - s0 + 1) * width
    if span <= 1 << 16:  # small keys: numpy's stable sort of 16-bit keys is a radix sort
        compact = ((source - s0) * width + (fragment - f0)).astype(np.uint16)
        order = np.argsort(compact, kind="stable")
        counts = np.bincount(compact, minlength=span)
        sizes = counts[counts > 0]
    else:
        key = (source << np.int64(32)) | fragment
        order = np.argsort(key, kind="stable")
        firsts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]])
        sizes = np.diff(np.r_[firsts, n])
    ends = np.cumsum(sizes)
    return order, ends - sizes, ends


@dataclass(frozen=True)
class PlannedChanges:
    """A query's change rows after metadata pruning, and what planning them took."""

    versions: tuple[int, ...]  # the versions planned (those the query's filter can match)
    planned: int         # change rows before pruning (a net query's: its net rows)
    rows: ChangeRows     # the rows the metadata part of the filter keeps
    changes: int = 0     # change rows of the versions planned (before a net query's netting)


def plan_query(window: ChangeWindow, query: ChangeQuery,
               versions: Sequence[int] | None = None) -> PlannedChanges:
    """The change rows of ``query`` from metadata only: plan the versions it can match
    (or ``versions``), then prune on the metadata part of its filter. A net query plans
    the whole window (``versions`` must be None) and prunes its net rows."""
    if query.net and versions is not None:
        raise InvalidInputError("net changes are planned for the whole window at once")
    wanted = tuple(query.versions(window) if versions is None else versions)
    rows = plan_changes(window, wanted)
    changes = len(rows)
    if query.net:
        with _history_guard(window):
            rows = _before_the_window(window, net_changes(rows))
    return PlannedChanges(wanted, len(rows), query.prune(rows, timestamps_of(window, rows)),
                          changes)


def _before_the_window(window: ChangeWindow, rows: ChangeRows) -> ChangeRows:
    """Net deletes and pre-images show a row's values from before the window. Netting
    points them at the version before the row's first change, which holds the same
    values unless a column is another field there than before the window (one dropped
    in between that a restore brought back, or one a restore brought back in between):
    such rows are read before the window, found there by row id."""
    before = window.start - 1
    old_side = np.isin(rows.kind, (PREIMAGE, DELETE)) & (rows.source > before)
    if before < 1 or not old_side.any():
        return rows
    fields = list(window.manifest_of(window.end).schema.fields)
    if not fields:
        return rows
    versions = _distinct(rows.source[old_side])
    held = _sources(window, [*versions, before], fields)

    def key(v: int) -> tuple:
        return tuple(None if h is None else (h.id, h.arrow_type) for h in held[v])

    differ = [v for v in versions if key(v) != key(before)]
    if not differ:
        return rows
    move = np.flatnonzero(old_side & np.isin(rows.source, np.array(differ, np.int64)))
    fragment, offset = _locate(window.store, window.manifest_of(before), rows.row_id[move])
    moved = replace(rows, source=rows.source.copy(), fragment=rows.fragment.copy(),
                    offset=rows.offset.copy(), alt_fragment=rows.alt_fragment.copy(),
                    alt_offset=rows.alt_offset.copy())
    moved.source[move], moved.fragment[move], moved.offset[move] = before, fragment, offset
    moved.alt_fragment[move] = moved.alt_offset[move] = -1
    return moved


def _locate(store: ObjectStore, manifest: Manifest, row_ids: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Fragment and offset of each of ``row_ids`` (live rows of ``manifest``), by the
    version's row-id index."""
    addresses = row_id_index(store, manifest).lookup(row_ids)
    if bool((addresses == MISSING).any()):
        raise FormatError(f"rows changed in a window of {store.uri} are missing from version "
                          f"{manifest.version}, before it")
    return (addresses >> np.uint64(32)).astype(np.int64), \
        (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)


def run_query(window: ChangeWindow, query: ChangeQuery) -> pa.Table:
    """Plan, prune on metadata, read, filter and project."""
    return read_query(window, query, plan_query(window, query).rows)


def read_query(window: ChangeWindow, query: ChangeQuery, rows: ChangeRows) -> pa.Table:
    """``query``'s result for planned and pruned ``rows``: read, filter, project."""
    table = read_changes(window, rows, query.read_columns)
    if query.filter is not None and not query.prefilter_is_whole:
        table = filter_rows(table, query.filter)
    return table.select(list(query.output))


def table_changes(source: ObjectStore | str | os.PathLike[str], start: VersionArg,
                  end: VersionArg | None = None, columns: Sequence[str] | None = None,
                  filter: str | None = None, mode: str = "all") -> pa.Table:
    """Changes of versions ``start..end`` (inclusive; ``end`` None = latest) of a table.

    ``start``/``end`` are version numbers or timestamps (datetime or ISO text);
    ``filter`` is SQL over the data and metadata columns, ``columns`` a projection.
    ``mode="net"``: one row per changed row for the whole window, its net effect (see
    :mod:`lance_sql.table.changes.net`); the filter applies to those rows.
    """
    store = source if isinstance(source, ObjectStore) else open_store(os.fspath(source))
    check_mode(mode)  # before any version is resolved
    window = resolve_window(store, start, end)
    return run_query(window, ChangeQuery.build(window.schema, columns, filter, mode=mode))


def _check_names(schema: pa.Schema) -> None:
    """A table whose own columns use the feed's metadata names has no feed."""
    clash = [n for n in schema.names[: len(schema) - len(META_COLUMNS)] if n in META_COLUMNS]
    if clash:
        raise InvalidInputError(f"the table's column {clash[0]!r} collides with the change "
                                "feed's metadata column of that name")
