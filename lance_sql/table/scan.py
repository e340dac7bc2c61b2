"""Reading a table version: fragments -> Arrow, with projection, filter and system columns.

A scan plans once (which fields, which files, which filter) and then reads each
fragment independently, so fragments can be read in parallel threads. Per
fragment it: reads the needed columns from whichever data files hold them
(columns absent from a fragment read as NULL; tombstoned ids are ignored), drops
deleted rows, adds ``_rowid`` / ``_rowaddr`` when asked, applies the filter and
projects. Everything is vectorised; no per-row Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
)
from lance_sql.format.datafile import LanceFileReader
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.deletion import decode_deletions
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table.cache import LruCache
from lance_sql.table.expr import Expr, parse_predicate, resolve, to_pyarrow
from lance_sql.table.expr import columns as expr_columns
from lance_sql.table.row_ids import load_lineage
from lance_sql.table.workers import WorkerPool
from lance_sql.table.write import refuse_json

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
ROW_CREATED = "_row_created_at_version"
ROW_UPDATED = "_row_last_updated_at_version"
VERSION_COLUMNS = (ROW_CREATED, ROW_UPDATED)
SYSTEM_COLUMNS = (ROW_ID, ROW_ADDR, *VERSION_COLUMNS)
# What a row carries along when rewritten (FragmentLineage's field order).
LINEAGE_COLUMNS = (ROW_ID, *VERSION_COLUMNS)
READABLE_FILE_VERSIONS = {(2, 0), (2, 1), (2, 2)}
DEFAULT_BATCH_SIZE = 8192
# Row counts up to this may size arrays before the data file confirms them (8 MB of
# int64 offsets at most); see checked_rows.
UNCHECKED_ROWS = 1 << 20


# Parsed data-file readers and deletion vectors, shared by all scans (thread safe).
# Open data files (each holds a file descriptor and its parsed metadata).
FILE_CACHE = LruCache(512)
# Decoded deletion vectors (4 bytes a deleted row), bounded by bytes: change feeds over
# many versions visit many of them.
DELETION_CACHE = LruCache(16384, max_weight=256 << 20, weigh=lambda offsets: offsets.nbytes)


def base_store(store: ObjectStore, manifest: Manifest, base_id: int | None) -> ObjectStore:
    """The store a file with ``base_id`` lives in (the table's own when None)."""
    if base_id is None:
        return store
    for base in manifest.base_paths:
        if base.id == base_id:
            return open_store(base.path)
    raise FormatError(f"{store.uri}: manifest refers to unknown base path id {base_id}")


def data_file_key(manifest: Manifest, data_file: DataFile) -> str:
    """A data file's key in its base store: under ``data/``, except in a base path that is
    a data directory itself (``is_dataset_root`` false, e.g. a MemWAL generation's WAL)."""
    if data_file.base_id is not None and any(
            b.id == data_file.base_id and not b.is_dataset_root for b in manifest.base_paths):
        return data_file.path
    return data_file.key


def open_data_file(store: ObjectStore, manifest: Manifest, data_file: DataFile) -> LanceFileReader:
    version = (data_file.file_major_version, data_file.file_minor_version)
    root = base_store(store, manifest, data_file.base_id)
    key = data_file_key(manifest, data_file)
    path = f"{root.uri}/{key}"
    if version not in READABLE_FILE_VERSIONS:
        raise UnsupportedFeatureError(
            f"{path} is Lance file format {data_file.version_string}; lance_sql reads "
            "formats 2.0, 2.1 and 2.2"
        )

    def load() -> LanceFileReader:
        return LanceFileReader(root.open_source(key))

    return FILE_CACHE.get_or_load((root.uri, key), load)


def checked_rows(store: ObjectStore, manifest: Manifest, fragment: Fragment, *,
                 small_ok: bool = False) -> int:
    """``fragment.physical_rows``, once it agrees with the row count in the footer of the
    fragment's first data file (opened and cached as any read would).

    Call before the count sizes anything (masks, row addresses, null columns, lineage):
    a manifest may claim 2**32 rows for a 100-row file. With ``small_ok``, claims of at
    most :data:`UNCHECKED_ROWS` are taken as they are, for callers that must not open
    data files they may never read: what such a claim sizes is small, and reading the
    rows checks the file then. A fragment without data files has nothing to check
    against; the manifest codec bounds its claim.
    """
    if not fragment.files or (small_ok and fragment.physical_rows <= UNCHECKED_ROWS):
        return fragment.physical_rows
    data_file = fragment.files[0]
    reader = open_data_file(store, manifest, data_file)
    if reader.num_rows != fragment.physical_rows:
        root = base_store(store, manifest, data_file.base_id)
        raise FormatError(
            f"{root.uri}/{data_file.key}: has {reader.num_rows} rows but fragment "
            f"{fragment.id} declares {fragment.physical_rows}"
        )
    return fragment.physical_rows


def deleted_offsets(store: ObjectStore, manifest: Manifest, fragment: Fragment) -> np.ndarray:
    """Sorted deleted row offsets of ``fragment`` (empty when it has no deletion file)."""
    deletion = fragment.deletion_file
    if deletion is None:
        return np.empty(0, dtype=np.uint32)
    root = base_store(store, manifest, deletion.base_id)
    key = deletion.key(fragment.id)
    path = f"{root.uri}/{key}"

    def load() -> np.ndarray:
        # bounds what decoding may expand
        rows = checked_rows(store, manifest, fragment, small_ok=True)
        offsets = decode_deletions(deletion.kind, root.read(key), path, rows)
        # 0 means "not recorded" (old writers); otherwise counts and scans must agree
        if deletion.num_deleted_rows and len(offsets) != deletion.num_deleted_rows:
            raise FormatError(
                f"{path}: holds {len(offsets)} deleted rows but the manifest says "
                f"{deletion.num_deleted_rows}"
            )
        return offsets

    return DELETION_CACHE.get_or_load((root.uri, key), load)


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

    @property
    def system_names(self) -> tuple[str, ...]:
        """System columns a fragment scan must produce, in a fixed order."""
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
    filter: str | None = None,  # noqa: A002 - pylance's name
    *,
    with_row_id: bool = False,
    with_row_address: bool = False,
) -> ScanPlan:
    schema = manifest.schema
    data_names = [f.name for f in schema.fields]
    if columns is None:
        wanted = list(data_names)
    else:
        if isinstance(columns, str):
            raise InvalidInputError("columns must be a list of column names")
        wanted = list(columns)
    if with_row_id and ROW_ID not in wanted:
        wanted.append(ROW_ID)
    if with_row_address and ROW_ADDR not in wanted:
        wanted.append(ROW_ADDR)
    for name in wanted:
        if name not in SYSTEM_COLUMNS and name not in data_names:
            raise NotFoundError(
                f"column {name!r} does not exist; columns: {', '.join(data_names)}"
            )
    full_arrow = schema.to_scan_arrow()
    system_fields = [pa.field(name, pa.uint64()) for name in SYSTEM_COLUMNS]
    filter_schema = pa.schema(list(full_arrow) + system_fields)
    expr = None
    predicate = None
    filter_names: set[str] = set()
    if filter is not None and str(filter).strip():
        parsed = parse_predicate(str(filter))
        expr = to_pyarrow(parsed, filter_schema)
        # Resolve first: unquoted names match the schema ignoring case.
        predicate = resolve(parsed, filter_schema)
        filter_names = {path[0] for path in expr_columns(predicate)}
    needed = set(wanted) | filter_names
    read_fields = tuple(f for f in schema.fields if f.name in needed)
    out_fields = []
    for name in wanted:
        if name in SYSTEM_COLUMNS:
            out_fields.append(pa.field(name, pa.uint64()))
        else:
            out_fields.append(full_arrow.field(name))
    return ScanPlan(
        filter_columns=frozenset(filter_names) if expr is not None else None,
        output_fields=tuple(wanted),
        read_fields=read_fields,
        filter=expr,
        filter_text=filter,
        need_row_id=ROW_ID in needed,
        need_row_addr=ROW_ADDR in needed,
        need_row_versions=bool(needed & set(VERSION_COLUMNS)),
        output_schema=pa.schema(out_fields, metadata=full_arrow.metadata),
        predicate=predicate,
    )


def narrowed(plan: ScanPlan, manifest: Manifest, predicate: Expr | None) -> ScanPlan:
    """``plan`` with its filter replaced by ``predicate`` (None: no filter), reading only
    the columns the output and ``predicate`` need."""
    names = set(plan.output_fields)
    expr = None
    filter_names: frozenset[str] | None = None
    if predicate is not None:
        full = manifest.schema.to_scan_arrow()
        schema = pa.schema(list(full) + [pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS])
        expr = to_pyarrow(predicate, schema)
        filter_names = frozenset(path[0] for path in expr_columns(predicate))
        names |= filter_names
    return replace(
        plan, filter=expr, filter_columns=filter_names, predicate=predicate,
        read_fields=tuple(f for f in manifest.schema.fields if f.name in names),
        need_row_id=ROW_ID in names, need_row_addr=ROW_ADDR in names,
        need_row_versions=bool(names & set(VERSION_COLUMNS)),
    )


class FragmentReader:
    """Reads rows of one fragment, columns spread over its data files."""

    def __init__(self, store: ObjectStore, manifest: Manifest, fragment: Fragment) -> None:
        self.store = store
        self.manifest = manifest
        self.fragment = fragment
        self._rows_checked = False
        # field id -> (data file, column index); later files win for a field id.
        self._locations: dict[int, tuple[DataFile, int]] = {}
        for data_file in fragment.files:
            for field_id, column in zip(data_file.fields, data_file.column_indices, strict=False):
                if field_id >= 0:
                    self._locations[field_id] = (data_file, column)

    def data_file_of(self, field: LanceField) -> DataFile | None:
        """The data file holding ``field`` here (None: the fragment has no values for it)."""
        location = self._locations.get(field.id)
        if location is None:
            # Files of format 2.1+ store leaves only: find the field by its first leaf.
            location = next((self._locations[f.id] for f in column_fields(field)
                             if f.id in self._locations), None)
        return location[0] if location else None

    def _groups(self, fields: Sequence[LanceField]) -> list[tuple[DataFile | None, list[int]]]:
        groups: dict[str | None, tuple[DataFile | None, list[int]]] = {}
        for i, field in enumerate(fields):
            refuse_json(field, self.store.uri)
            data_file = self.data_file_of(field)
            key = data_file.path if data_file else None
            groups.setdefault(key, (data_file, []))[1].append(i)
        return list(groups.values())

    def _column_map(self, data_file: DataFile) -> dict[int, int]:
        return {
            fid: col
            for fid, col in zip(data_file.fields, data_file.column_indices, strict=False)
            if fid >= 0
        }

    def read(
        self, fields: Sequence[LanceField], *, offset: int = 0, length: int | None = None
    ) -> list[pa.Array]:
        """Physical rows ``[offset, offset+length)`` of ``fields`` (deleted rows included)."""
        self.check_rows()
        if length is None:
            length = self.fragment.physical_rows - offset
        out: list[pa.Array | None] = [None] * len(fields)
        for data_file, indices in self._groups(fields):
            wanted = [fields[i] for i in indices]
            if data_file is None:
                arrays = [pa.nulls(length, f.to_scan_arrow().type) for f in wanted]
            else:
                reader = open_data_file(self.store, self.manifest, data_file)
                self._check_file_rows(reader, data_file)
                arrays = reader.read(
                    wanted, self._column_map(data_file), offset=offset, length=length,
                    blob_descriptions=True,
                )
            for i, array in zip(indices, arrays, strict=False):
                out[i] = array
        return out  # type: ignore[return-value]

    def take(self, fields: Sequence[LanceField], rows: np.ndarray) -> list[pa.Array]:
        self.check_rows()
        out: list[pa.Array | None] = [None] * len(fields)
        for data_file, indices in self._groups(fields):
            wanted = [fields[i] for i in indices]
            if data_file is None:
                arrays = [pa.nulls(len(rows), f.to_scan_arrow().type) for f in wanted]
            else:
                reader = open_data_file(self.store, self.manifest, data_file)
                self._check_file_rows(reader, data_file)
                arrays = reader.take(wanted, self._column_map(data_file), rows,
                                     blob_descriptions=True)
            for i, array in zip(indices, arrays, strict=False):
                out[i] = array
        return out  # type: ignore[return-value]

    def check_rows(self) -> int:
        """The fragment's row count, checked against its data files (see
        :func:`checked_rows`) once per reader, before it sizes anything."""
        if not self._rows_checked:
            checked_rows(self.store, self.manifest, self.fragment)
            self._rows_checked = True
        return self.fragment.physical_rows

    def _check_file_rows(self, reader: LanceFileReader, data_file: DataFile) -> None:
        if reader.num_rows != self.fragment.physical_rows:
            raise FormatError(
                f"{self.store.uri}/{data_file.key}: has {reader.num_rows} rows but fragment "
                f"{self.fragment.id} declares {self.fragment.physical_rows}"
            )

    def keep_mask(self, *, small_ok: bool = False) -> np.ndarray | None:
        """Boolean mask of live rows, or None when nothing is deleted. ``small_ok``: see
        :func:`checked_rows` (for counts that, like ``count_rows()``, trust the manifest)."""
        deleted = deleted_offsets(self.store, self.manifest, self.fragment)
        if len(deleted) == 0:
            return None
        rows = (checked_rows(self.store, self.manifest, self.fragment, small_ok=True)
                if small_ok else self.check_rows())
        mask = np.ones(rows, dtype=bool)
        mask[deleted] = False
        return mask


def row_addresses(fragment_id: int, offsets: np.ndarray) -> pa.Array:
    base = np.uint64(fragment_id) << np.uint64(32)
    addresses = offsets.astype(np.uint64)  # a copy: the caller's offsets stay as they are
    addresses |= base
    return pa.array(addresses, pa.uint64())


def row_offsets(addresses: pa.Array | np.ndarray) -> np.ndarray:
    """The row offsets (low 32 bits, int64) of row addresses."""
    if isinstance(addresses, pa.Array | pa.ChunkedArray):
        addresses = addresses.to_numpy()
    return (np.asarray(addresses, np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def by_fragment(manifest: Manifest, addresses: np.ndarray
                ) -> Iterator[tuple[Fragment, np.ndarray, np.ndarray]]:
    """Row addresses grouped by fragment: (fragment, its row offsets sorted, the positions
    of those addresses in ``addresses``), fragments in address order."""
    addresses = np.asarray(addresses, np.uint64)
    order = np.argsort(addresses, kind="stable")
    fragment_ids = addresses[order] >> np.uint64(32)
    bounds = np.flatnonzero(np.diff(fragment_ids)) + 1
    by_id = {f.id: f for f in manifest.fragments}
    for positions in np.split(order, bounds) if len(order) else []:
        frag_id = int(addresses[positions[0]] >> np.uint64(32))
        frag = by_id.get(frag_id)
        if frag is None:
            raise NotFoundError(f"row address refers to fragment {frag_id}, which does not exist")
        yield frag, row_offsets(addresses[positions]), positions


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


def system_arrays(store: ObjectStore, manifest: Manifest, fragment: Fragment,
                  rows: slice | np.ndarray, names: Sequence[str]) -> list[pa.Array]:
    """System columns ``names`` for physical ``rows`` (a slice or offsets) of a fragment.

    ``_rowid`` is the row address unless the table has stable row ids; the row
    versions exist only on such tables.
    """
    stable = manifest.uses_stable_row_ids
    out = []
    for name in names:
        if name == ROW_ADDR or (name == ROW_ID and not stable):
            if isinstance(rows, slice):  # consecutive addresses, made in one pass
                first = (fragment.id << 32) | rows.start
                out.append(pa.array(np.arange(first, first + rows.stop - rows.start,
                                              dtype=np.uint64), pa.uint64()))
            else:
                out.append(row_addresses(fragment.id, rows))
            continue
        if not stable:
            raise UnsupportedFeatureError(
                f"{store.uri}: {name} exists only on tables created with stable row ids "
                "(write_dataset(..., enable_stable_row_ids=True))")
        lineage = load_lineage(store, manifest, fragment)
        values_at = {ROW_ID: lineage.ids_at, ROW_CREATED: lineage.created_at,
                     ROW_UPDATED: lineage.updated_at}[name]
        out.append(pa.array(values_at(rows), pa.uint64()))
    return out


def scan_fragment(
    store: ObjectStore,
    manifest: Manifest,
    fragment: Fragment,
    plan: ScanPlan,
    *,
    offset: int = 0,
    length: int | None = None,
) -> pa.Table:
    """The plan applied to physical rows ``[offset, offset+length)`` of one fragment."""
    reader = FragmentReader(store, manifest, fragment)
    rows = reader.check_rows()  # before the count sizes row addresses or empty columns
    if length is None:
        length = rows - offset
    late = plan.late_fields()
    if late:
        return _scan_late(store, manifest, fragment, plan, late, offset, length)
    arrays = reader.read(plan.read_fields, offset=offset, length=length)
    names = [f.name for f in plan.read_fields]
    system = plan.system_names
    if system:
        arrays.extend(system_arrays(store, manifest, fragment,
                                    slice(offset, offset + length), system))
        names.extend(system)
    if names:
        table = pa.Table.from_arrays(arrays, names=names)
    else:  # count-only scans: a table with rows but no columns
        table = pa.table({"_": pa.nulls(length, pa.null())}).select([])
    mask = reader.keep_mask()
    if mask is not None:
        table = table.filter(pa.array(mask[offset : offset + length]))
    if plan.filter is not None:
        table = table.filter(plan.filter)
    table = table.select(list(plan.output_fields))
    if not plan.output_fields:
        return table  # casting a table without columns would lose its row count
    return cast_output(table, plan.output_schema, store, fragment)


def scan_rows(store: ObjectStore, manifest: Manifest, fragment: Fragment, plan: ScanPlan,
              rows: np.ndarray) -> pa.Table:
    """The plan applied to the physical ``rows`` (sorted offsets) of one fragment; deleted
    rows are dropped. Only the pages holding those rows are read."""
    reader = FragmentReader(store, manifest, fragment)
    mask = reader.keep_mask()
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
        table = table.filter(plan.filter)
    table = table.select(list(plan.output_fields))
    if not plan.output_fields:
        return table
    return cast_output(table, plan.output_schema, store, fragment)


def _scan_late(store: ObjectStore, manifest: Manifest, fragment: Fragment, plan: ScanPlan,
               late: tuple[LanceField, ...], offset: int, length: int) -> pa.Table:
    """Filter on the filter's columns first, then fetch ``late`` columns for matches only."""
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
    )
    matched = scan_fragment(store, manifest, fragment, probe, offset=offset, length=length)
    if matched.num_rows == 0:
        return plan.output_schema.empty_table()
    rows = row_offsets(matched.column(ROW_ADDR))
    fetched = FragmentReader(store, manifest, fragment).take(late, rows)
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
    try:
        columns = []
        for column, field in zip(table.columns, schema, strict=True):
            if column.type.equals(field.type):
                # No cast: it would refuse the nulls pylance leaves in non-nullable
                # children under null rows (blob descriptions); check the top level only.
                if not field.nullable and column.null_count:
                    raise ValueError(f"column {field.name!r} is not nullable but holds "
                                     f"{column.null_count} null value(s)")
            else:
                column = column.cast(field.type)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=schema)
    except (ValueError, pa.ArrowException) as exc:
        files = ", ".join(f.key for f in fragment.files) or "no data files"
        raise FormatError(f"{store.uri}: fragment {fragment.id} ({files}): {exc}") from exc


class IndexedRead(Protocol):
    """Fragments an index answers (see :mod:`lance_sql.table.index.planner`)."""

    description: str

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
        filter: str | None = None,  # noqa: A002
        batch_size: int | None = None,
        limit: int | None = None,
        offset: int | None = None,
        with_row_id: bool = False,
        with_row_address: bool = False,
        fragments: Sequence[Fragment] | None = None,
        num_threads: int | None = None,
        indexed: Callable[[ScanPlan, Sequence[Fragment]], IndexedRead | None] | None = None,
    ) -> None:
        """``indexed``, given the plan and the fragments, may answer some fragments from an
        index (see :class:`IndexedRead`); the others are scanned."""
        self.store = store
        self.manifest = manifest
        self.plan = plan_scan(
            manifest, columns, filter, with_row_id=with_row_id, with_row_address=with_row_address
        )
        _check_count(batch_size, "batch_size", low=1)
        _check_count(limit, "limit")
        _check_count(offset, "offset")
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE
        self.limit = limit
        self.offset = offset or 0
        self.fragments = tuple(manifest.fragments if fragments is None else fragments)
        self.num_threads = num_threads or min(8, os.cpu_count() or 1)
        self.indexed = indexed(self.plan, self.fragments) if indexed is not None else None

    def _read_fragment(self, fragment: Fragment) -> pa.Table:
        if self.indexed is not None and self.indexed.covers(fragment.id):
            return self.indexed.read(fragment)
        return scan_fragment(self.store, self.manifest, fragment, self.plan)

    def explain_plan(self) -> str:
        """How this scan reads: which fragments an index answers, which it scans."""
        lines = [f"LanceScan: {len(self.fragments)} fragments, "
                 f"projection=[{', '.join(self.plan.output_fields)}], "
                 f"filter=[{self.plan.filter_text or ''}]"]
        if self.indexed is not None:
            lines.append(f"  {self.indexed.description}")
        return "\n".join(lines) + "\n"

    @property
    def projected_schema(self) -> pa.Schema:
        return self.plan.output_schema

    def _fragment_tables(self) -> Iterator[pa.Table]:
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
        if len(frags) <= 1 or self.num_threads <= 1:
            for frag in frags:
                yield self._read_fragment(frag)
            return
        with WorkerPool("scan", self.num_threads) as pool:
            yield from pool.ordered(self._read_fragment, frags, self.num_threads)

    def _limited_tables(self) -> Iterator[pa.Table]:
        skip = self.offset
        remaining = self.limit
        if remaining == 0:
            return
        for table in self._fragment_tables():
            if skip:
                if table.num_rows <= skip:
                    skip -= table.num_rows
                    continue
                table = table.slice(skip)
                skip = 0
            if remaining is not None:
                table = table.slice(0, remaining)
                remaining -= table.num_rows
            if table.num_rows:
                yield table
            if remaining == 0:
                return

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for table in self._limited_tables():
            yield from table.combine_chunks().to_batches(max_chunksize=self.batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        tables = list(self._limited_tables())
        if not tables:
            return self.projected_schema.empty_table()
        if not self.plan.output_fields:  # concatenating column-less tables loses their rows
            return pa.table({"_": pa.nulls(sum(t.num_rows for t in tables))}).select([])
        return pa.concat_tables(tables)

    def count_rows(self) -> int:
        if self.plan.filter is None and self.limit is None and not self.offset:
            return sum(f.num_rows for f in self.fragments)
        return sum(t.num_rows for t in self._limited_tables())


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
