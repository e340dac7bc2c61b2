"""The user-facing table API, named after pylance's so its users feel at home.

``write_dataset(data, uri, mode=...)`` creates, appends to or overwrites a table;
``dataset(uri, version=None)`` opens one at the latest version, a version number
or a tag. A :class:`LanceDataset` is one immutable version: reading it never sees
later commits; writing through it commits on top of the latest version, except
compaction and schema changes, which (as pylance's) are built on the object's own
version and rebase over, or conflict with, what was committed since.
"""

from __future__ import annotations

import builtins
import itertools
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import (
    AppendSchemaError,
    InvalidInputError,
    NotFoundError,
    SchemaError,
    TableExistsError,
)
from lance_sql.format.fragment import BasePath, Fragment
from lance_sql.format.index import IndexMetadata
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.schema import LanceSchema, check_column_names
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table import index as indices
from lance_sql.table.changes.feed import table_changes
from lance_sql.table.files.deletions import add_deletions
from lance_sql.table.files.reader import (
    ROW_ADDR,
    ROW_ID,
    open_data_file,
)
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.meta.field_ids import highest_held_field_id
from lance_sql.table.meta.timetravel import parse_instant, version_at
from lance_sql.table.meta.versions import (
    VersionRef,
    check_tag_name,
    commit_time,
    delete_tag,
    find_version,
    latest_version,
    list_versions,
    load_latest,
    load_manifest,
    read_tag,
    read_tags,
    replace_tag_metadata,
    tag_exists,
    tag_time,
    write_tag,
)
from lance_sql.table.ops import cleanup, maintenance, schema_evolution
from lance_sql.table.ops import clone as cloning
from lance_sql.table.ops import update as updating
from lance_sql.table.ops.merge_insert import MergeInsertBuilder
from lance_sql.table.read.arrow_filters import sql_text
from lance_sql.table.read.blobs import BlobFile, take_blobs
from lance_sql.table.read.fragment import LanceFragment, fragment_values
from lance_sql.table.read.ordering import OrderedScanner, sort_keys
from lance_sql.table.read.positions import U64_MAX, checked_integers, live_addresses
from lance_sql.table.read.projection import (
    ProjectingScanner,
    Projection,
    nested_selection,
    projections_of,
    read_columns,
    select_nested,
)
from lance_sql.table.read.scan import (
    FragmentReaders,
    Scanner,
    ScanPlan,
    matching_rows,
    plan_scan,
    take_addresses,
)
from lance_sql.table.txn.commit import CommitConfig
from lance_sql.table.txn.history import operation_of
from lance_sql.table.txn.operations import (
    Append,
    CreateIndex,
    Delete,
    Overwrite,
    UpdateBases,
    UpdateConfig,
)
from lance_sql.table.txn.writer import WriteContext, cleanup_is_retryable
from lance_sql.table.write.field_order import reader_in_table_order
from lance_sql.table.write.fragments import (
    DEFAULT_DATA_FORMAT,
    DEFAULT_MAX_ROWS_PER_FILE,
    STORAGE_VERSION_ALIASES,
    to_reader,
    with_primary_key,
    write_fragments,
)

WRITE_MODES = ("create", "append", "overwrite")
# pylance scanner options that tune its engine and change no result here (see scanner)
SCAN_HINTS = frozenset({
    "prefilter", "late_materialization", "use_stats", "io_buffer_size", "fast_search",
    "strict_batch_size", "disable_scoring_autoprojection",
})
# What names a version: its number, a tag, or an instant (the latest version committed at
# or before it); None is the latest.
Version = int | str | datetime | None


# What a tag may point at (pylance's ``reference``): a version number, another tag, None
# (the version the dataset object is at, as pylance), or (branch, version) where the branch
# is None or "main" (lance_sql has no other branches) and the version None means the
# branch's latest.
TagReference = int | str | tuple[str | None, int | None] | None


class Tags:
    """``ds.tags``: named pointers to versions, stored under ``_refs/tags/``, as pylance's."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._ds = dataset

    def list(self) -> dict[str, dict]:
        """name -> ``version``, ``branch``, ``created_at`` / ``updated_at`` (aware UTC
        datetimes), ``manifest_size``, ``metadata``; in name order."""
        return {name: _with_times(name, info) for name, info in read_tags(self._ds.store).items()}

    def list_ordered(self, order: str | None = None) -> builtins.list[tuple[str, dict]]:
        """``list()``'s items by version, newest first (``order="desc"``, the default) or
        oldest first (``"asc"``); tags of one version in name order."""
        if order not in (None, "asc", "desc"):
            raise InvalidInputError(f"invalid tag order {order!r}: 'asc' or 'desc'")
        items = list(self.list().items())
        sign = 1 if order == "asc" else -1
        return sorted(items, key=lambda item: sign * item[1]["version"])

    def create(self, tag: str, reference: TagReference = None) -> None:
        check_tag_name(tag, creating=True)
        write_tag(self._ds.store, tag, self._target(reference), replace=False)

    def update(self, tag: str, reference: TagReference = None) -> None:
        """Move ``tag`` to ``reference``, keeping its creation time and metadata."""
        check_tag_name(tag, creating=True)
        write_tag(self._ds.store, tag, self._target(reference), replace=True)

    def replace_metadata(self, tag: str, metadata: dict[str, str]) -> None:
        """Replace the tag's metadata as a whole; its version and times stay."""
        replace_tag_metadata(self._ds.store, tag, metadata)

    def delete(self, tag: str) -> None:
        delete_tag(self._ds.store, tag)

    def get_version(self, tag: str) -> int:
        return read_tag(self._ds.store, tag)["version"]

    def _target(self, reference: TagReference) -> VersionRef:
        store = self._ds.store
        if isinstance(reference, tuple):
            if len(reference) != 2:
                raise InvalidInputError(f"a tag reference tuple is (branch, version), got "
                                        f"{reference!r:.80}")
            branch, reference = reference
            if branch not in (None, "main"):
                raise NotFoundError(f"branch {branch!r} does not exist in {store.uri} "
                                    "(lance_sql tables have only the main branch)")
            if reference is None:
                return latest_version(store, self._ds.commit_config.handler)
        if reference is None:
            # pylance tags the version this object is at (an old or stale handle's own,
            # not the newest); only a (branch, None) pair names the branch's latest.
            return find_version(store, self._ds.version)
        if isinstance(reference, str) and not reference.isdigit():
            return find_version(store, read_tag(store, reference)["version"])
        if isinstance(reference, bool) or not isinstance(reference, int | str | np.integer):
            raise InvalidInputError(f"a tag points at a version number, a tag name or None, "
                                    f"got {reference!r:.80}")
        return find_version(store, int(reference))


def _with_times(name: str, info: dict) -> dict:
    return {**info, "created_at": tag_time(info["created_at"], name),
            "updated_at": tag_time(info["updated_at"], name)}


class Optimizer:
    """``ds.optimize``: compaction and index optimisation."""

    def __init__(self, compact: Callable[..., maintenance.CompactionMetrics],
                 indices: Callable[[], None]) -> None:
        self._compact, self._indices = compact, indices

    def compact_files(self, **options: Any) -> maintenance.CompactionMetrics:
        """Rewrite small / deletion-heavy fragments; see :func:`maintenance.compact_files`."""
        return self._compact(**options)

    def optimize_indices(self, **_: Any) -> None:
        """Fold fragments added since each BTREE / BITMAP index was built into a new index."""
        self._indices()


_MOVES = threading.Lock()  # LanceDataset._moved_to's compare and replace


class LanceDataset:
    """One version of a Lance table.

    Every write goes through a :class:`WriteContext` on the newest version (compaction
    and schema changes: on this object's version, see :meth:`_write_context_here`) and,
    like pylance, moves the dataset object to the version it committed.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        version: Version = None,
        *,
        store: ObjectStore | None = None,
        commit_config: CommitConfig | None = None,
    ) -> None:
        self.uri = os.fspath(uri)
        self.store = store if store is not None else open_store(self.uri)
        self.commit_config = commit_config or CommitConfig()
        if version is None:  # (cleanup may remove the version found before it is read)
            self._at = load_latest(self.store, self.commit_config.handler)
        else:
            ref = self._resolve(version)
            self._at = (ref, load_manifest(self.store, ref))

    @classmethod
    def _opened(cls, uri: str, store: ObjectStore, config: CommitConfig, ref: VersionRef,
                manifest: Manifest) -> LanceDataset:
        ds = cls.__new__(cls)
        ds.uri, ds.store, ds.commit_config = uri, store, config
        ds._at = (ref, manifest)  # noqa: SLF001 - its own alternate constructor
        return ds

    # The version this object is at, and its manifest: one pair, replaced as a whole when a
    # write moves the object, so a thread reading through it while another writes sees one
    # version or the other, never one's number with the other's manifest. A method that
    # needs the manifest more than once (or the pair) reads ``_at`` once.
    _at: tuple[VersionRef, Manifest]

    @property
    def _ref(self) -> VersionRef:
        return self._at[0]

    @property
    def _manifest(self) -> Manifest:
        return self._at[1]

    def _resolve(self, version: Version) -> VersionRef:
        handler = self.commit_config.handler
        if version is None:
            return latest_version(self.store, handler)
        if isinstance(version, datetime):  # the latest committed at or before it
            return find_version(self.store, version_at(self.store, version), handler)
        if isinstance(version, str) and (not version.isdigit()
                                         or tag_exists(self.store, version)):
            # (digits name a version, unless a tag has that name: pylance makes such
            # tags, and opens a string as a tag)
            return find_version(self.store, read_tag(self.store, version)["version"], handler)
        if isinstance(version, bool) or not isinstance(version, int | str | np.integer) or int(
                version) < 1:
            raise InvalidInputError(f"invalid version {version!r}: a version number, a tag "
                                    "name or a datetime")
        return find_version(self.store, int(version), handler)

    # -- metadata --------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._at[1].version

    @property
    def manifest_key(self) -> str:
        """The store key of this version's manifest file."""
        return self._at[0].key

    @property
    def latest_version(self) -> int:
        return latest_version(self.store, self.commit_config.handler).version

    @property
    def manifest(self) -> Manifest:
        return self._at[1]

    @property
    def lance_schema(self) -> LanceSchema:
        return self._manifest.schema

    @property
    def schema(self) -> pa.Schema:
        return self._manifest.schema.to_arrow()

    @property
    def max_field_id(self) -> int:
        """The highest field id the schema or a data file holds (pylance's)."""
        return highest_held_field_id(self._manifest)

    @property
    def data_storage_version(self) -> str:
        return self._manifest.data_format

    @property
    def tags(self) -> Tags:
        return Tags(self)

    def get_fragments(self) -> list[LanceFragment]:
        """This version's fragments (see :class:`LanceFragment`), bound to it: a later
        write moves this object to a new version, not them."""
        pinned = self._pinned()
        return [LanceFragment(pinned, f) for f in pinned.manifest.fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment of this version with that id, None when it has none."""
        pinned = self._pinned()
        found = next((f for f in pinned.manifest.fragments if f.id == fragment_id), None)
        return None if found is None else LanceFragment(pinned, found)

    def _pinned(self) -> LanceDataset:
        """This object's version as an object no write moves."""
        ref, manifest = self._at
        return self._opened(self.uri, self.store, self.commit_config, ref, manifest)

    def versions(self) -> list[dict[str, Any]]:
        """Every version, as pylance lists them: ``version``, ``timestamp`` (the commit
        time as a naive local datetime, pylance's convention) and ``metadata`` (pylance's
        summary of the version's files and rows, as strings). Extras: ``timestamp_utc``
        (the same instant, timezone-aware), ``operation``, ``num_rows`` and
        ``table_metadata`` (the table's key-value metadata at that version)."""
        out = []
        mine, my_manifest = self._at
        for ref in list_versions(self.store):
            manifest = my_manifest if ref == mine else load_manifest(self.store, ref)
            utc = commit_time(manifest.timestamp_ns)
            out.append(
                {
                    "version": ref.version,
                    "timestamp": _pylance_timestamp(manifest.timestamp_ns),
                    "metadata": version_summary(manifest),
                    "timestamp_utc": utc,
                    "operation": operation_of(self.store, ref),
                    "num_rows": manifest.num_rows,
                    "table_metadata": dict(manifest.table_metadata),
                }
            )
        return out

    @property
    def stats(self) -> Stats:
        """``ds.stats.dataset_stats()``, as in pylance."""
        return Stats(self)

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first ``num_rows`` rows (``scanner`` options apply), as pylance's ``head``."""
        return self.scanner(limit=num_rows, **kwargs).to_table()

    def checkout_version(self, version: int | str | datetime) -> LanceDataset:
        ref = self._resolve(version)
        return self._opened(self.uri, self.store, self.commit_config, ref,
                            load_manifest(self.store, ref))

    # -- reads --------------------------------------------------------------------
    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | None = None,  # pylance's name
        limit: int | None = None,
        offset: int | None = None,
        nearest: object = None,
        batch_size: int | None = None,
        batch_size_bytes: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        fragments: Sequence[LanceFragment | Fragment] | None = None,
        index_segments: object = None,
        full_text_query: object = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
        use_scalar_index: bool | None = None,
        order_by: Sequence[Any] | None = None,
        include_deleted_rows: bool | None = None,
        **hints: Any,
    ) -> Scanner | ProjectingScanner | OrderedScanner:
        """Arguments as pylance's, in its order. ``columns``: names, struct fields
        (``"st.x"``) or ``{name: SQL expression}`` (see
        :mod:`~lance_sql.table.read.projection`). ``filter``: SQL text or a pyarrow
        expression. ``order_by``: the rows sorted by these columns before ``limit`` and
        ``offset`` (see :mod:`~lance_sql.table.read.ordering`). ``use_scalar_index``:
        None (default) answers filters from BTREE indices where they help, scanning with
        an IndexFallbackWarning when an index is unreadable; True raises that error
        instead; False never uses indices.

        pylance's tuning hints (:data:`SCAN_HINTS`: ``prefilter``, ``scan_in_order``,
        ``late_materialization``, read-ahead sizes...) are taken and change nothing: this
        scan filters before limits, returns rows in order and picks its own late
        materialization. Vector search (``nearest``) is answered by the dataset
        ``lance_sql.dataset()`` returns (:class:`~lance_sql.memwal.dataset.MemWalDataset`),
        this layer's tables cannot search."""
        unknown = sorted(set(hints) - SCAN_HINTS)
        if unknown:
            raise TypeError(f"scanner() got an unexpected keyword argument {unknown[0]!r}")
        if full_text_query is not None or index_segments is not None:
            raise InvalidInputError("full-text search and index segments are not supported")
        if nearest is not None:
            raise InvalidInputError("scanner(nearest=...) needs the dataset lance_sql.dataset() "
                                    "returns (or SQL's nearest() table function)")
        if include_deleted_rows:
            raise InvalidInputError("include_deleted_rows=True is not supported: deleted "
                                    "rows are never returned")
        if order_by:
            return self._ordered(columns, filter, limit, offset, batch_size, fragments,
                                 with_row_id, with_row_address, use_scalar_index,
                                 sort_keys(order_by))
        manifest = self._manifest  # one read: a write may move the dataset meanwhile
        projections = None
        if columns is not None:
            arrow = manifest.schema.to_scan_arrow()
            projections = projections_of(columns, arrow)
            if projections is not None:
                columns = read_columns(projections, arrow)
                asked = (with_row_id, with_row_address)
                with_row_id = with_row_id or ROW_ID in columns
                with_row_address = with_row_address or ROW_ADDR in columns
                columns = [c for c in columns if c not in (ROW_ID, ROW_ADDR)]
        scanner = Scanner(
            self.store,
            manifest,
            columns=columns,
            filter=filter,
            batch_size=batch_size,
            limit=limit,
            offset=offset,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
            fragments=None if fragments is None else fragment_values(fragments),
            indexed=indices.index_hook(self.store, manifest, use_scalar_index),
        )
        if projections is None:
            return scanner
        extra = [n for n, on in zip((ROW_ID, ROW_ADDR), asked, strict=True) if on]
        return ProjectingScanner(scanner, projections, extra)

    def _ordered(self, columns: Sequence[str] | None, filter: str | pc.Expression | None,
                 limit: int | None, offset: int | None, batch_size: int | None,
                 fragments: Sequence[LanceFragment | Fragment] | None, with_row_id: bool,
                 with_row_address: bool, use_scalar_index: bool | None,
                 keys: list[tuple[str, str, str]]) -> OrderedScanner:
        """A scan sorted by ``keys``: every matching row read with the sort columns, then
        sorted, sliced and projected (:class:`OrderedScanner`)."""
        missing = [] if columns is None else [k for k, _, _ in keys if k not in columns]
        if missing and isinstance(columns, Mapping):
            raise InvalidInputError(f"order_by columns {missing} must be among the "
                                    "projected columns")
        inner = self.scanner([*(columns or ()), *missing] if missing else columns, filter,
                             batch_size=batch_size, fragments=fragments,
                             with_row_id=with_row_id, with_row_address=with_row_address,
                             use_scalar_index=use_scalar_index)
        # (the sort columns nobody asked for are read too, and dropped after sorting)
        output = [n for n in inner.projected_schema.names if n not in missing]
        return OrderedScanner(inner, keys, output, limit, offset, batch_size)

    def to_table(self, columns: Sequence[str] | None = None,
                 filter: str | pc.Expression | None = None, *args: Any,
                 **kwargs: Any) -> pa.Table:
        return self.scanner(columns, filter, *args, **kwargs).to_table()

    def to_batches(self, columns: Sequence[str] | None = None,
                   filter: str | pc.Expression | None = None, *args: Any, **kwargs: Any):
        return self.scanner(columns, filter, *args, **kwargs).to_batches()

    def to_pandas(self, columns: Sequence[str] | None = None,
                  filter: str | pc.Expression | None = None, *args: Any, **kwargs: Any
                  ) -> Any:
        """:meth:`to_table` as a pandas DataFrame (pandas must be installed)."""
        return self.to_table(columns, filter, *args, **kwargs).to_pandas()

    def count_rows(self, filter: str | pc.Expression | None = None, **kwargs: Any) -> int:
        """Rows where ``filter`` holds (all rows without one); ``kwargs``: scanner options
        (pylance's hints are taken and change nothing)."""
        if filter is None and not kwargs:
            return self._manifest.num_rows
        return self.scanner(columns=[], filter=filter, **kwargs).count_rows()

    def count_deleted_rows(self) -> int:
        return self._manifest.num_deleted_rows

    def take(self, indices: Sequence[int] | np.ndarray,
             columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows at positions ``indices`` of this version (0 .. count_rows-1), in that order;
        ``columns`` as :meth:`scanner` takes them."""
        manifest = self._manifest  # one read: a write may move the dataset meanwhile
        total = manifest.num_rows
        positions = checked_integers(indices, f"take index (the table has {total} rows)",
                                     total - 1).astype(np.int64)
        return self._take_positions(manifest, positions, columns)

    def _take_positions(self, manifest: Manifest, positions: np.ndarray,
                        columns: Sequence[str] | Mapping[str, str] | None) -> pa.Table:
        """:meth:`take` of ``positions`` (int64, checked) from ``manifest``."""
        frags = [f for f in manifest.fragments if f.num_rows]
        starts = np.cumsum([0] + [f.num_rows for f in frags])
        frag_index = np.searchsorted(starts, positions, side="right") - 1
        addresses = np.empty(len(positions), dtype=np.uint64)
        for i in np.unique(frag_index):
            selected = frag_index == i
            addresses[selected] = live_addresses(self.store, manifest, frags[i],
                                                 positions[selected] - starts[i])
        return self._take_addresses(manifest, addresses, columns)

    def sample(self, num_rows: int, columns: Sequence[str] | Mapping[str, str] | None = None,
               randomize_order: bool = True, *, seed: int | None = None) -> pa.Table:
        """``num_rows`` distinct rows picked at random (``seed``: repeatably), in random
        order or, ``randomize_order=False``, in table order (fewer seeks)."""
        manifest = self._manifest  # one read: a write may move the dataset meanwhile
        total = manifest.num_rows
        if isinstance(num_rows, bool) or not isinstance(num_rows, int | np.integer) or not (
                0 <= num_rows <= total):
            raise InvalidInputError(f"sample of {num_rows!r} rows: a whole number from 0 "
                                    f"to the table's {total} rows")
        positions = np.random.default_rng(seed).choice(total, int(num_rows), replace=False)
        if not randomize_order:
            positions.sort()
        return self._take_positions(manifest, positions.astype(np.int64), columns)

    def take_rows(self, row_ids: Sequence[int] | np.ndarray,
                  columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by ``_rowid``, in the order given (pylance's ``_take_rows``).

        Without stable row ids a row id is the row address. With them, ids are looked
        up in the row-id index; ids of deleted or unknown rows are skipped, as in pylance.
        """
        ids = checked_integers(row_ids, "row id", U64_MAX).astype(np.uint64)
        manifest = self._manifest  # one read: a write may move the dataset meanwhile
        if not manifest.uses_stable_row_ids:
            return self._take_addresses(manifest, ids, columns)
        addresses = row_id_index(self.store, manifest).lookup(ids)
        return self._take_addresses(manifest, addresses[addresses != MISSING], columns)

    _take_rows = take_rows

    def take_blobs(self, blob_column: str, ids: Sequence[int] | None = None,
                   addresses: Sequence[int] | None = None,
                   indices: Sequence[int] | None = None) -> list[BlobFile | None]:
        """Blobs of ``blob_column`` as lazy file objects (None for null rows), selected
        by exactly one of row ids, row addresses or positions (see :mod:`blobs`)."""
        return take_blobs(self, blob_column, ids=ids, addresses=addresses, indices=indices)

    def table_changes(self, start: int | str | datetime, end: int | str | datetime | None = None,
                      columns: Sequence[str] | None = None,
                      filter: str | None = None, mode: str = "all") -> pa.Table:
        """Row changes of versions ``start..end`` (inclusive): the table's columns plus
        ``_change_type``, ``_commit_version``, ``_commit_timestamp`` and ``_rowid``;
        ``mode="net"``: one change per row for the whole window, its net effect."""
        return table_changes(self.store, start, end, columns, filter, mode)

    def take_addresses(self, addresses: Sequence[int] | np.ndarray,
                       columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by row address (``fragment_id << 32 | offset``), in the order given.

        Addresses of deleted rows are skipped; an unknown fragment is an error.
        """
        # one read of the manifest: a write may move the dataset meanwhile
        return self._take_addresses(self._manifest, addresses, columns)

    def _take_addresses(self, manifest: Manifest, addresses: Sequence[int] | np.ndarray,
                        columns: Sequence[str] | Mapping[str, str] | None) -> pa.Table:
        """:meth:`take_addresses` from ``manifest`` (this object's, read once); ``columns``
        as :meth:`scanner` takes them (struct fields, SQL expressions)."""
        addresses = checked_integers(addresses, "row address", U64_MAX).astype(np.uint64)
        projections, nested = None, None
        read: Sequence[str] | None = None
        if isinstance(columns, Mapping):
            arrow = manifest.schema.to_scan_arrow()
            projections = projections_of(columns, arrow)
            assert projections is not None  # a mapping always projects
            read = read_columns(projections, arrow)
        elif columns is not None:
            read = columns if isinstance(columns, str) else list(columns)  # a str: refused
            arrow = manifest.schema.to_scan_arrow()
            if projections_of(read, arrow) is not None:  # struct fields: kept nested
                nested = nested_selection(read, arrow)
                read = [n for n in arrow.names if n in nested] + [
                    n for n in nested if n not in arrow.names]
        plan, readers = self._take_plan(manifest, read)
        table = take_addresses(self.store, manifest, addresses, read, plan=plan,
                               readers=readers)
        if projections is not None:
            return Projection(projections, table.schema)(table)
        return table if nested is None else select_nested(table, nested)

    # (this version's manifest, {columns: (the plan of a take of them, its fragment
    # readers)}): see _take_plan
    _take_plans: tuple[Manifest, dict[tuple[str, ...] | None,
                                      tuple[ScanPlan, FragmentReaders]]] | None = None
    _TAKE_PLANS_KEPT = 64

    def _take_plan(self, manifest: Manifest, columns: Sequence[str] | None
                   ) -> tuple[ScanPlan, FragmentReaders | None]:
        """The plan of a take of ``columns`` from ``manifest`` (this version's), made once
        per version and column list (a point lookup repeats the same take), with the
        fragment readers its one-row takes keep (None: not kept); errors are not kept.
        ``columns`` is read once (it may be an iterator)."""
        if isinstance(columns, str):
            return plan_scan(manifest, columns), None  # refused there
        key = None if columns is None else tuple(columns)
        try:
            hash(key)
        except TypeError:  # not names: refused by the planning, as without the cache
            return plan_scan(manifest, list(key or ())), None
        kept = self._take_plans  # one read: another thread may replace it meanwhile
        if kept is None or kept[0] is not manifest or len(kept[1]) >= self._TAKE_PLANS_KEPT:
            kept = self._take_plans = (manifest, {})
        found = kept[1].get(key)
        if found is None:
            found = kept[1][key] = (plan_scan(manifest, None if key is None else list(key)),
                                    {})
        return found

    # -- writes ---------------------------------------------------------------------
    def write_context(self) -> WriteContext:
        """A write on the newest version of this table (NotFoundError if it is gone; refused
        for writer feature flags we do not know). Every write of this class starts here."""
        return WriteContext.open(self.store, self.commit_config, must_exist=True,
                                 known=self._at)

    def _write_context_here(self) -> WriteContext:
        """A write built on this object's own version, as pylance builds compaction and
        new columns: on an old or stale handle the commit rebases over what was committed
        since (a compaction leaves the newer fragments alone) or, for a Merge (new or
        recast columns, which list every fragment), is a :class:`RetryableConflict`."""
        newest = self.write_context()
        if newest.read_version == self.version:
            return newest
        return WriteContext.pinned(self.store, self.commit_config, self.version,
                                   self._ref.naming)

    def at_manifest(self, manifest: Manifest) -> LanceDataset:
        """This table at ``manifest``, a version a write context of it committed (no read)."""
        return self._opened(self.uri, self.store, self.commit_config,
                            VersionRef(manifest.version, self._ref.naming), manifest)

    def _moved_to(self, manifest: Manifest | None) -> None:
        """Move to the version a write through this object committed; never back, when
        threads write through one object and an older commit reports after a newer."""
        if manifest is None:
            return
        with _MOVES:
            if manifest.version >= self._at[1].version:  # the pair replaced at once
                self._at = (VersionRef(manifest.version, self._ref.naming), manifest)

    def insert(self, data: Any, *, mode: str = "append", **kwargs: Any) -> None:
        """Write ``data`` into this table and move to the version that committed, as
        pylance's ``insert``: ``mode`` "append" (default) or "overwrite", the other
        keywords as :func:`write_dataset` takes them."""
        self._moved_to(write_dataset(data, self, mode=mode, **kwargs).manifest)

    @cleanup_is_retryable()
    def delete(self, predicate: str | pc.Expression, *,
               select_rows: updating.RowSelector | None = None) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL, or a pyarrow expression) and move
        to the new version.

        Like pylance, the dataset object advances to the version the delete committed;
        returns ``{"num_deleted_rows": n}``, the rows this delete removed. With
        ``select_rows`` (SQL's subquery conditions) the rows are the addresses it gives
        for the version the delete starts from; ``predicate`` is then only recorded.
        """
        if isinstance(predicate, pc.Expression):  # as pylance takes it
            expression, predicate = predicate, sql_text(predicate)
        elif not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInputError("delete needs a non-empty SQL predicate or a pyarrow "
                                    "expression")
        else:
            expression = predicate
        ctx = self.write_context()
        base = ctx.table
        # Read every fragment before writing anything: a failing read leaves no trace.
        if select_rows is not None:
            found = updating.selected_rows(self.store, base, select_rows)
        else:
            plan = plan_scan(base, columns=[], filter=expression, with_row_address=True)
            found = list(matching_rows(self.store, base, plan,
                                       indices.index_hook(self.store, base)))
        matched = [(frag, offsets.astype(np.uint32)) for frag, offsets in found]
        affected = {frag.id: rows for frag, rows in matched}  # lets the commit rebase
        merged = add_deletions(self.store, base, matched)
        files = merged.files
        with ctx.staging() as staged:
            for key, data in files:
                staged.add(key)
                self.store.put(key, data)
            self._moved_to(ctx.commit(
                Delete(merged.apply(f for f, _ in matched), merged.removed, predicate),
                affected_rows=affected))
        return {"num_deleted_rows": int(sum(len(rows) for rows in affected.values()))}

    @property
    def optimize(self) -> Optimizer:
        return Optimizer(self.compact_files, self._optimize_indices)

    @cleanup_is_retryable()
    def compact_files(self, **options: Any) -> maintenance.CompactionMetrics:
        metrics, manifest = maintenance.compact_files(self._write_context_here(), **options)
        self._moved_to(manifest)
        return metrics

    @cleanup_is_retryable()
    def add_columns(self, transforms: Any, read_columns: Sequence[str] | None = None,
                    reader_schema: pa.Schema | None = None,
                    batch_size: int | None = None) -> None:
        """New columns from SQL expressions (``{"c": "a * 3"}``), Arrow data aligned with
        the rows, a function of each batch, or Arrow fields (all NULL, metadata only)."""
        self._moved_to(schema_evolution.add_columns(self._write_context_here(), transforms,
                                                    read_columns, reader_schema,
                                                    held=self._held_field_id))

    @cleanup_is_retryable()
    def drop_columns(self, columns: Sequence[str]) -> None:
        self._moved_to(schema_evolution.drop_columns(self._write_context_here(), columns))

    @cleanup_is_retryable()
    def alter_columns(self, *alterations: Mapping[str, Any]) -> None:
        """Each alteration: ``{"path": ..., "name"?: ..., "nullable"?: ..., "data_type"?: ...}``."""
        self._moved_to(schema_evolution.alter_columns(self._write_context_here(), alterations,
                                                      held=self._held_field_id))

    def _held_field_id(self, manifest: Manifest) -> int:
        """The highest field id something outside ``manifest`` (a version of this table)
        still holds, so new columns go above it; -1: nothing. The MemWAL layer's
        subclass answers for its generations and writers."""
        return -1

    def merge_insert(self, on: str | Sequence[str]) -> MergeInsertBuilder:
        """Upsert by key: ``.when_matched_update_all()``, ``.when_not_matched_insert_all()``,
        ``.when_not_matched_by_source_delete()``, then ``.execute(data)`` (pylance's API)."""
        return MergeInsertBuilder(on, self.write_context, self._moved_to)

    @cleanup_is_retryable()
    def update(self, updates: Mapping[str, str], where: str | None = None, *,
               update_mode: str = "rewrite_rows",
               select_rows: updating.RowSelector | None = None,
               select_values: updating.ValueSelector | None = None,
               sql_typing: bool = False) -> dict[str, int]:
        """Set columns to SQL expressions for the rows matching ``where`` (all rows when
        None); returns ``{"num_rows_updated": n}`` like pylance. ``update_mode`` is
        ``"rewrite_rows"`` or ``"rewrite_columns"`` (see :mod:`lance_sql.table.ops.update`);
        ``select_rows`` gives the rows instead of ``where`` (SQL's subquery conditions),
        ``select_values`` the rows and their new values (SQL's ``SET c = (SELECT ...)``).
        Values are typed as pylance types them (``i8 + 1`` is an int8 that wraps around)
        or, with ``sql_typing`` (the SQL layer's UPDATE), as DataFusion's SQL does
        (``i8 + 1`` an int64, which must then fit the column)."""
        count, manifest = updating.update(self.write_context(), updates, where, update_mode,
                                          select_rows, select_values,
                                          lance_literals=not sql_typing)
        self._moved_to(manifest)
        return {"num_rows_updated": count}

    def restore(self, version: int | str | None = None) -> None:
        """Make this version (or ``version``) the newest one; pylance's ``restore()``."""
        target = self.version if version is None else self.checkout_version(version).version
        self._moved_to(maintenance.restore(self.write_context(), target))

    def cleanup_old_versions(self, older_than: timedelta | None = None,
                             retain_versions: int | None = None, *,
                             delete_unverified: bool = False,
                             error_if_tagged_old_versions: bool | None = None,
                             keep_tags: bool | None = None,
                             ) -> cleanup.CleanupStats:
        """Remove versions older than ``older_than`` (default 14 days) and the files only
        they need. Tagged versions are never removed. As in pylance, a tagged version in
        range is by default a :class:`TaggedVersionError` (an OSError) and nothing is
        removed; ``error_if_tagged_old_versions=False`` (or lance_sql's older spelling
        ``keep_tags=True``) keeps the tagged versions and removes the others."""
        if error_if_tagged_old_versions is not None and keep_tags is not None \
                and bool(error_if_tagged_old_versions) == bool(keep_tags):
            raise InvalidInputError("error_if_tagged_old_versions and keep_tags disagree; "
                                    "pass one of them")
        refuse = (not keep_tags if keep_tags is not None
                  else error_if_tagged_old_versions is not False)
        return cleanup.cleanup_old_versions(self.store, older_than, retain_versions,
                                            keep_tags=not refuse,
                                            delete_unverified=delete_unverified)

    def shallow_clone(self, target_path: str | os.PathLike[str],
                      reference: int | str | None = None) -> LanceDataset:
        return self.clone(target_path, reference, shallow=True)

    def deep_clone(self, target_path: str | os.PathLike[str],
                   reference: int | str | None = None) -> LanceDataset:
        return self.clone(target_path, reference, shallow=False)

    def clone(self, target: str | os.PathLike[str], reference: int | str | None = None, *,
              shallow: bool = True) -> LanceDataset:
        """Version ``reference`` (number, tag, or None: this version) cloned to ``target``."""
        tag = reference if isinstance(reference, str) and not reference.isdigit() else None
        source = self if reference is None else self.checkout_version(reference)
        store, manifest = cloning.clone(self.store, source.manifest, self._ref.naming,
                                        target, self.commit_config, shallow=shallow,
                                        ref_name=tag)
        return type(self)(os.fspath(target), manifest.version, store=store,
                          commit_config=self.commit_config)

    # -- config and metadata ----------------------------------------------------------
    def config(self) -> dict[str, str]:
        return dict(self._manifest.config)

    @property
    def table_metadata(self) -> dict[str, str]:
        return dict(self._manifest.table_metadata)

    def update_config(self, values: Mapping[str, str | None], *,
                      replace: bool = False) -> dict[str, str]:
        """Set (or with None delete) config keys; returns the new config."""
        self._update_config(maintenance.config_update(values, replace=replace))
        return dict(self._manifest.config)

    def delete_config_keys(self, keys: Iterable[str]) -> None:
        self._update_config(maintenance.delete_keys(keys))

    def update_metadata(self, values: Mapping[str, str | None], *,
                        replace: bool = False) -> dict[str, str]:
        """Edit the table metadata (manifest ``table_metadata``); returns it."""
        self._update_config(maintenance.table_metadata_update(values, replace=replace))
        return dict(self._manifest.table_metadata)

    def update_schema_metadata(self, values: Mapping[str, str | None], *,
                               replace: bool = False) -> dict[str, str]:
        self._update_config(maintenance.schema_metadata_update(values, replace=replace))
        return maintenance.decoded(self._manifest.schema.metadata)

    def replace_schema_metadata(self, new_metadata: Mapping[str, str]) -> None:
        self.update_schema_metadata(new_metadata, replace=True)

    def update_field_metadata(self, field_updates: Mapping[str, Mapping[str, str | None]], *,
                              replace: bool = False) -> None:
        ctx = self.write_context()
        op = maintenance.field_metadata_update(ctx.table, field_updates, replace=replace)
        self._moved_to(maintenance.update_config(ctx, op))

    def replace_field_metadata(self, field_name: str, new_metadata: Mapping[str, str]) -> None:
        self.update_field_metadata({field_name: new_metadata}, replace=True)

    def _update_config(self, op: UpdateConfig) -> None:
        self._moved_to(maintenance.update_config(self.write_context(), op))

    # -- bases and indices --------------------------------------------------------------
    def add_bases(self, new_bases: Sequence[BasePath]) -> None:
        if not all(isinstance(b, BasePath) for b in new_bases):
            raise InvalidInputError("add_bases takes lance_sql BasePath values")
        self._moved_to(self.write_context().commit(UpdateBases(tuple(new_bases))))

    @cleanup_is_retryable()
    def create_scalar_index(self, column: str, index_type: str, name: str | None = None, *,
                            replace: bool = True, **_: Any) -> None:
        """Build a BTREE or BITMAP index of ``column`` (pylance's signature; the type in
        any case) and commit it. As
        pylance's, an index of that name is rebuilt unless ``replace=False``, which
        refuses it (a pipeline step run again rebuilds its index)."""
        self._moved_to(indices.create_scalar_index(self.write_context(), column, index_type,
                                                   name, replace=replace))

    def list_indices(self) -> list[dict]:
        return indices.list_indices(self._manifest)

    @property
    def has_index(self) -> bool:
        return bool(indices.list_indices(self._manifest))

    def describe_indices(self) -> list[indices.IndexDescription]:
        return indices.describe_indices(self.store, self._manifest)

    def drop_index(self, name: str) -> None:
        self._moved_to(indices.drop_index(self.write_context(), name))

    @cleanup_is_retryable()
    def _optimize_indices(self) -> None:
        self._moved_to(indices.optimize_indices(self.write_context()))

    def commit_index_metadata(self, new: Sequence[IndexMetadata],
                              removed: Sequence[IndexMetadata] = ()) -> None:
        """Commit a CreateIndex of ready-made index metadata (no index files are built)."""
        self._moved_to(self.write_context().commit(CreateIndex(tuple(new), tuple(removed))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(uri={self.uri!r}, version={self.version})"

    def __len__(self) -> int:
        return self.count_rows()


def _pylance_timestamp(ns: int) -> datetime:
    """A commit time exactly as pylance's ``versions()`` shows it: naive local time, its
    microseconds computed in floating point (so they may differ from ``timestamp_utc``'s
    by one)."""
    return datetime.fromtimestamp(ns // 1e9) + timedelta(microseconds=(ns % 1e9) // 1e3)


def version_summary(manifest: Manifest) -> dict[str, str]:
    """pylance's per-version summary (``versions()[i]["metadata"]``), from the manifest."""
    frags = manifest.fragments
    # (row counts kept by the manifest; the rest summed by C-level map, not a Python
    # generator per fragment: versions() summarises every version)
    files = list(map(_FILES, frags))
    return {
        "total_data_file_rows": str(manifest.physical_rows),
        "total_data_files": str(sum(map(len, files))),
        "total_deletion_file_rows": str(manifest.num_deleted_rows),
        "total_deletion_files": str(len(frags) - list(map(_DELETION, frags)).count(None)),
        "total_files_size": str(sum(map(_FILE_SIZE, itertools.chain.from_iterable(files)))),
        "total_fragments": str(len(frags)),
        "total_rows": str(manifest.num_rows),
    }


_FILES = operator.attrgetter("files")
_DELETION = operator.attrgetter("deletion_file")
_FILE_SIZE = operator.attrgetter("file_size_bytes")


@dataclass(frozen=True)
class FieldStatistics:
    """pylance's per-field statistics: the field's id and its (compressed) bytes."""

    id: int
    bytes_on_disk: int


@dataclass(frozen=True)
class DataStatistics:
    """``ds.stats.data_stats()``: per-field bytes on disk, as pylance reports them."""
    fields: tuple[FieldStatistics, ...]


LEGACY_FORMATS = ("0.1", "legacy")  # pylance reports 0 bytes for tables of this format


class Stats:
    """``ds.stats``: pylance's dataset statistics, computed from the manifest."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._ds = dataset

    def data_stats(self) -> DataStatistics:
        """Bytes each field's data takes in the data files (every field, in schema order;
        a field with no pages of its own, such as a struct, has 0). Reads each data
        file's footer and column metadata, not its data."""
        manifest = self._ds.manifest
        ids = [f.id for top in manifest.schema.fields for f in top.walk()]
        sizes = dict.fromkeys(ids, 0)
        if manifest.data_format not in LEGACY_FORMATS:
            for frag in manifest.fragments:
                for data_file in frag.files:
                    columns = open_data_file(self._ds.store, manifest,
                                             data_file).column_page_bytes()
                    for field_id, column in zip(data_file.fields, data_file.column_indices,
                                                strict=False):
                        if field_id in sizes and 0 <= column < len(columns):
                            sizes[field_id] += columns[column]
        return DataStatistics(tuple(FieldStatistics(i, sizes[i]) for i in ids))

    def index_stats(self, index_name: str) -> dict:
        """pylance's statistics of index ``index_name`` (coverage, per-segment details;
        see :mod:`lance_sql.table.index.stats`); an IndexNotFoundError, a KeyError as
        pylance's, when there is none."""
        return indices.index_stats(self._ds.store, self._ds.manifest, index_name)

    def dataset_stats(self, max_rows_per_group: int = 1024) -> dict[str, int]:
        """Deleted rows, fragments, and fragments smaller than ``max_rows_per_group``."""
        frags = self._ds.manifest.fragments
        return {
            "num_deleted_rows": self._ds.count_deleted_rows(),
            "num_fragments": len(frags),
            "num_small_files": sum(f.physical_rows < max_rows_per_group for f in frags),
        }


def dataset(
    uri: str | os.PathLike[str],
    version: Version = None,
    *,
    asof: datetime | str | None = None,
    commit_config: CommitConfig | None = None,
) -> LanceDataset:
    """Open a table at its latest version, a version number, a tag name, or as of an
    instant: ``version=datetime`` or pylance's ``asof=`` (a datetime or an ISO string,
    UTC when naive) opens the latest version committed at or before it."""
    if asof is not None:
        if version is not None:
            raise InvalidInputError("give either version or asof, not both")
        version = parse_instant(asof) if isinstance(asof, str) else asof
        if not isinstance(version, datetime):
            raise InvalidInputError(f"asof must be a datetime or an ISO-8601 string, got "
                                    f"{asof!r}")
    return LanceDataset(uri, version, commit_config=commit_config)


def write_dataset(
    data: Any,
    uri: str | os.PathLike[str] | LanceDataset,
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    data_storage_version: str | None = None,
    enable_v2_manifest_paths: bool = True,
    enable_stable_row_ids: bool = False,
    commit_config: CommitConfig | None = None,
    primary_key: Sequence[str] | None = None,
    commit_message: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
) -> LanceDataset:
    """Create, append to or overwrite the table at ``uri`` (pylance's signature).

    ``commit_message`` and ``transaction_properties`` are recorded in the commit's
    transaction file as pylance records them (the message as the property
    ``__lance_commit_message``).

    ``max_rows_per_group`` is accepted for compatibility; format 2.0 sizes pages
    by bytes, so it does not change the files. ``primary_key`` (columns, in key order)
    marks the table's unenforced primary key as pylance does (field metadata
    ``lance-schema:unenforced-primary-key``); the key columns become non-nullable. It is
    chosen when a table is created or overwritten; an append may only repeat it.
    """
    if mode not in WRITE_MODES:
        raise InvalidInputError(f"mode must be one of {WRITE_MODES}, got {mode!r}")
    if isinstance(uri, LanceDataset):  # pylance takes the dataset itself
        uri = uri.uri
    properties = _transaction_properties(commit_message, transaction_properties)
    store = open_store(uri)
    naming = ManifestNaming.V2 if enable_v2_manifest_paths else ManifestNaming.V1
    ctx = WriteContext.open(store, commit_config, naming=naming)
    previous = ctx.base
    if previous is not None and mode == "create":
        raise TableExistsError(f"a Lance table already exists at {store.uri}; use mode='append' "
                                "or mode='overwrite'")
    reader = to_reader(data, schema)
    if previous is not None and enable_stable_row_ids and not previous.uses_stable_row_ids:
        raise InvalidInputError(
            f"{store.uri} was created without stable row ids; they can only be enabled "
            "when a table is created (write it anew to another location to get them)")
    if previous is not None and mode == "append":
        table_schema = previous.schema
        if primary_key and table_schema.primary_key != list(primary_key):
            raise InvalidInputError(f"{store.uri}: the primary key is set when a table is "
                                    "created; appending cannot change it")
        try:
            reader = reader_in_table_order(_with_missing_nullable(reader, table_schema),
                                           table_schema.to_arrow())
            table_schema.check_append_compatible(reader.schema)
        except SchemaError as exc:
            raise AppendSchemaError(f"cannot append to {store.uri}: {exc}") from exc
        data_format = previous.data_format
    else:
        arrow_schema = reader.schema
        check_column_names(arrow_schema.names)
        if primary_key:
            arrow_schema = with_primary_key(arrow_schema, list(primary_key))
        table_schema = LanceSchema.from_arrow(arrow_schema)
        data_format = STORAGE_VERSION_ALIASES.get(
            (data_storage_version or "").lower(), data_storage_version) or (
            previous.data_format if previous is not None else DEFAULT_DATA_FORMAT
        )
    fragments = tuple(write_fragments(
        store, table_schema, reader, max_rows_per_file=max_rows_per_file, data_format=data_format
    ))
    if previous is not None and mode == "append":
        operation: Append | Overwrite = Append(fragments)
    else:
        operation = Overwrite(fragments, table_schema)
    with ctx.staging() as staged:
        staged.add(*(d.key for frag in fragments for d in frag.files))
        new = ctx.commit(operation, data_format=data_format,
                         stable_row_ids=enable_stable_row_ids, properties=properties)
    return LanceDataset._opened(os.fspath(uri), store, ctx.config,  # noqa: SLF001 - same module
                                VersionRef(new.version, ctx.naming), new)


# where pylance records a write's ``commit_message`` among its transaction properties
COMMIT_MESSAGE_PROPERTY = "__lance_commit_message"


def _transaction_properties(message: str | None, given: Mapping[str, str] | None
                            ) -> dict[str, str]:
    """A write's transaction properties: ``given`` and the commit ``message``."""
    properties = dict(given or {})
    if any(not isinstance(k, str) or not isinstance(v, str) for k, v in properties.items()):
        raise InvalidInputError("transaction_properties maps strings to strings")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidInputError(f"commit_message is a string, got {message!r}")
        properties[COMMIT_MESSAGE_PROPERTY] = message
    return properties


def _with_missing_nullable(reader: pa.RecordBatchReader, schema: LanceSchema
                           ) -> pa.RecordBatchReader:
    """``reader`` with a NULL column for each nullable top-level column of the table it
    lacks, as pylance appends such data (a missing column that may not be NULL is left
    for the compatibility check to name)."""
    names = set(reader.schema.names)
    missing = [f.to_arrow() for f in schema.fields if f.name not in names and f.nullable]
    if not missing:
        return reader
    out = pa.schema([*reader.schema, *missing], metadata=reader.schema.metadata)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            nulls = [pa.nulls(batch.num_rows, f.type) for f in missing]
            yield pa.RecordBatch.from_arrays([*batch.columns, *nulls], schema=out)

    return pa.RecordBatchReader.from_batches(out, batches())
