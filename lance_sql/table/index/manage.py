"""Building and maintaining scalar indices: create, list, describe, drop, optimize.

Each change is one CreateIndex transaction, as pylance commits it: a new index is a new
entry (fresh uuid, files under ``_indices/{uuid}/``); replacing or optimizing one lists
the old entry in ``removed_indices``; dropping one removes it without adding anything.
``optimize_indices`` merges the rows of fragments appended since the build into one new
index (pylance 14.0.2 does the same: no delta indices); a BITMAP index is rebuilt from its
column's live rows (what the merge would hold).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_sql.errors import InvalidInputError, NotFoundError, UnsupportedFeatureError
from lance_sql.format import bitmap as bitmap_format
from lance_sql.format.btree import (
    INDEX_FILES,
    INDEX_VERSION,
    ROW_ADDRESS_IDS,
    TYPE_URL,
    sort_entries,
)
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.pb import table_pb2
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID, deleted_offsets
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.index.bitmap import write_bitmap
from lance_sql.table.index.btree import BTreeIndex, index_key, write_btree
from lance_sql.table.read.scan import Scanner
from lance_sql.table.txn.operations import CreateIndex
from lance_sql.table.txn.writer import WriteContext

INDEX_TYPES = {"BTREE": "BTree", "BITMAP": "Bitmap"}
# pylance's name of each index type (``list_indices``' "type", ``index_type``)
TYPE_NAMES = {TYPE_URL: "BTree", bitmap_format.TYPE_URL: "Bitmap"}


def type_name(type_url: str) -> str:
    """pylance's name for an index of ``type_url`` (the details message's name, less
    ``IndexDetails``, for types lance_sql does not build)."""
    known = TYPE_NAMES.get(type_url)
    if known is not None:
        return known
    name = type_url.rsplit(".", 1)[-1]
    return name.removesuffix("IndexDetails") or name


@dataclass(frozen=True)
class IndexSegment:
    """One entry (segment) of an index, as pylance's ``IndexSegmentDescription``."""

    uuid: str
    fragment_ids: frozenset[int]
    index_version: int
    size_bytes: int
    created_at: datetime | None
    dataset_version_at_last_update: int
    base_id: int | None


@dataclass(frozen=True)
class IndexDescription:
    """One index as ``describe_indices`` reports it (pylance's field names)."""

    name: str
    type_url: str
    num_rows_indexed: int
    fields: tuple[int, ...]
    field_names: tuple[str, ...]
    num_segments: int
    total_size_bytes: int
    index_type: str = ""
    details: Mapping[str, object] = field(default_factory=dict, hash=False)
    segments: tuple[IndexSegment, ...] = ()


def key_type_supported(t: pa.DataType) -> bool:
    """True for the key types a BTREE index of lance_sql can hold."""
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_date(t) or pa.types.is_timestamp(t))


def _field(manifest: Manifest, column: str) -> LanceField:
    """The top-level column ``column`` names: exactly, else case-insensitively when one
    column matches so (pylance indexes ``id`` for "ID", and names the index after it)."""
    for f in manifest.schema.fields:
        if f.name == column:
            return f
    folded = [f for f in manifest.schema.fields if f.name.lower() == column.lower()]
    if len(folded) == 1:
        return folded[0]
    try:
        nested = len(manifest.schema.path(column)) > 1
    except (NotFoundError, InvalidInputError):
        nested = False
    if nested:  # (pylance indexes struct fields; our index paths take top-level columns)
        raise UnsupportedFeatureError(f"cannot index {column!r}: lance_sql indexes top-level "
                                      "columns only, not fields of a struct")
    raise NotFoundError(f"cannot index column {column!r}: no such top-level column "
                        f"({', '.join(f.name for f in manifest.schema.fields)})")


def _field_names(manifest: Manifest, index: IndexMetadata) -> list[str]:
    """The indexed fields' paths (``st.x`` for a struct's field, as pylance names them)."""
    paths: dict[int, str] = {}
    stack = [(f, "") for f in manifest.schema.fields]
    while stack:
        field, prefix = stack.pop()
        paths[field.id] = prefix + field.name
        stack.extend((child, f"{paths[field.id]}.") for child in field.children)
    return [paths.get(i, f"<field {i}>") for i in index.fields]


def _entries(store: ObjectStore, manifest: Manifest, column: str,
             fragments: Sequence[Fragment]) -> pa.Table:
    """(values, row addresses) of the live rows of ``fragments``."""
    scanner = Scanner(store, manifest, columns=[column], with_row_address=True,
                      fragments=fragments)
    table = scanner.to_table()
    return sort_entries(table.column(column).combine_chunks(),
                        table.column(ROW_ADDR).to_numpy())


def _metadata(index_uuid: str, name: str, field_id: int, dataset_version: int,
              fragment_ids: set[int], files: tuple[tuple[str, int], ...],
              stable_row_ids: bool, type_url: str = TYPE_URL) -> IndexMetadata:
    """The manifest entry; on stable-row-id tables a BTREE's version says "ids are
    addresses" (a BITMAP's is 0 there too: it holds row ids, as pylance's does)."""
    version = ROW_ADDRESS_IDS if stable_row_ids and type_url == TYPE_URL else INDEX_VERSION
    pb = table_pb2.IndexMetadata(name=name, dataset_version=dataset_version,
                                 index_version=version,
                                 created_at=int(time.time() * 1000))
    pb.uuid.uuid = uuidlib.UUID(index_uuid).bytes
    pb.fields.append(field_id)
    bitmap = BitMap(sorted(fragment_ids))
    bitmap.run_optimize()
    pb.fragment_bitmap = bitmap.serialize()
    pb.index_details.type_url = type_url
    for path, size in files:
        pb.files.add(path=path, size_bytes=size)
    return IndexMetadata.from_proto(pb)


def _commit(ctx: WriteContext, new: Sequence[IndexMetadata],
            removed: Sequence[IndexMetadata], written: Sequence[str]) -> Manifest:
    with ctx.staging() as staged:
        staged.add(*written)
        return ctx.commit(CreateIndex(tuple(new), tuple(removed)))


def write_btree_index(store: ObjectStore, manifest: Manifest, column: str, name: str,
                      entries: pa.Table, *, page_bytes: int | None = None) -> IndexMetadata:
    """Write a BTREE index of ``column`` from ``entries`` -- every row of ``manifest``'s
    fragments as (value, row address), sorted by :func:`sort_entries` -- and return its
    entry, to commit. For writers that already hold the values (a MemWAL flush);
    ``page_bytes`` bounds the file pages (and the memory encoding one takes)."""
    field = _field(manifest, column)
    if not key_type_supported(field.to_arrow().type):
        raise InvalidInputError(f"a BTREE index cannot be built on column {column!r} of type "
                                f"{field.to_arrow().type}")
    index_uuid = str(uuidlib.uuid4())
    files = write_btree(store, index_uuid, entries, page_bytes=page_bytes)
    return _metadata(index_uuid, name, field.id, manifest.version,
                     {f.id for f in manifest.fragments}, files, manifest.uses_stable_row_ids)


def create_scalar_index(ctx: WriteContext, column: str, index_type: str,
                        name: str | None = None, *, replace: bool = False) -> Manifest:
    """Build a BTREE or BITMAP index of ``column`` over every fragment and commit it."""
    kind = str(index_type).upper()
    if kind not in INDEX_TYPES:
        raise UnsupportedFeatureError(f"index type {index_type!r} is not supported "
                                      f"(supported: {', '.join(INDEX_TYPES)})")
    base, store = ctx.table, ctx.store
    field = _field(base, column)
    column = field.name
    key_type = field.to_arrow().type
    if not key_type_supported(key_type):
        raise InvalidInputError(f"a {kind} index cannot be built on column {column!r} of "
                                f"type {key_type}")
    name = name or f"{column}_idx"
    existing = [i for i in decode_index_section(base.index_section) if i.name == name]
    if existing and not replace:
        raise InvalidInputError(f"an index named {name!r} already exists on {store.uri} "
                                "(pass replace=True to rebuild it)")
    if any(i.fields != (field.id,) for i in existing):
        # (replace rebuilds an index of the same column, as pylance's; it refuses a name
        # another column's index holds rather than dropping that index)
        others = sorted({f for i in existing for f in _field_names(base, i)})
        raise InvalidInputError(f"an index named {name!r} already exists on other fields "
                                f"({', '.join(others)}); give the index of {column!r} "
                                "another name")
    index_uuid = str(uuidlib.uuid4())
    fragment_ids = {f.id for f in base.fragments}
    if kind == "BITMAP":
        files = _write_bitmap(store, base, column, index_uuid)
        meta = _metadata(index_uuid, name, field.id, base.version, fragment_ids, files,
                         base.uses_stable_row_ids, bitmap_format.TYPE_URL)
        return _commit(ctx, [meta], existing, [index_key(index_uuid, f) for f, _ in files])
    data = _entries(store, base, column, base.fragments)
    files = write_btree(store, index_uuid, data)
    meta = _metadata(index_uuid, name, field.id, base.version, fragment_ids,
                     files, base.uses_stable_row_ids)
    return _commit(ctx, [meta], existing, [index_key(index_uuid, f) for f in INDEX_FILES])


def _write_bitmap(store: ObjectStore, manifest: Manifest, column: str, index_uuid: str
                  ) -> tuple[tuple[str, int], ...]:
    """The bitmap file of ``column``'s live rows in every fragment: keyed by row
    address, by stable row id on stable-row-id tables (as pylance keys them)."""
    stable = manifest.uses_stable_row_ids
    scanner = Scanner(store, manifest, columns=[column], with_row_address=not stable,
                      with_row_id=stable, fragments=manifest.fragments)
    table = scanner.to_table()
    ids = table.column(ROW_ID if stable else ROW_ADDR).to_numpy()
    return write_bitmap(store, index_uuid, table.column(column).combine_chunks(), ids)


def list_indices(manifest: Manifest) -> list[dict]:
    """Indices as pylance's ``list_indices`` reports them."""
    out = []
    for index in decode_index_section(manifest.index_section):
        out.append({"name": index.name, "type": type_name(index.type_url), "uuid": index.uuid,
                    "fields": _field_names(manifest, index), "version": index.dataset_version,
                    "fragment_ids": set(index.fragment_ids or ()), "base_id": index.base_id})
    return out


def describe_indices(store: ObjectStore, manifest: Manifest) -> list[IndexDescription]:
    """One description per index name (segments: entries sharing the name)."""
    by_name: dict[str, list[IndexMetadata]] = {}
    for index in decode_index_section(manifest.index_section):
        by_name.setdefault(index.name, []).append(index)
    live = {f.id: f.num_rows for f in manifest.fragments}
    out = []
    for name, segments in by_name.items():
        covered = set().union(*(s.fragment_ids or set() for s in segments))
        first = segments[0]
        out.append(IndexDescription(
            name=name, type_url=first.type_url,
            num_rows_indexed=sum(live.get(f, 0) for f in covered),
            fields=first.fields, field_names=tuple(_field_names(manifest, first)),
            num_segments=len(segments),
            total_size_bytes=sum(size for s in segments for _, size in s.files),
            index_type=type_name(first.type_url), details={},
            segments=tuple(_segment(s) for s in segments)))
    return out


def _segment(index: IndexMetadata) -> IndexSegment:
    created = index.created_at_ms
    return IndexSegment(
        uuid=index.uuid, fragment_ids=frozenset(index.fragment_ids or ()),
        index_version=index.index_version, size_bytes=sum(size for _, size in index.files),
        created_at=None if created is None else (datetime.fromtimestamp(created // 1000, UTC)
                                                 + timedelta(milliseconds=created % 1000)),
        dataset_version_at_last_update=index.dataset_version, base_id=index.base_id)


def drop_index(ctx: WriteContext, name: str) -> Manifest:
    """Commit the table without index ``name``; a NotFoundError if there is none."""
    existing = [i for i in decode_index_section(ctx.table.index_section) if i.name == name]
    if not existing:
        raise NotFoundError(f"{ctx.store.uri} has no index named {name!r}")
    return _commit(ctx, [], existing, [])


def optimize_indices(ctx: WriteContext) -> Manifest | None:
    """Fold fragments appended since each BTREE / BITMAP index was built into a new
    index; None when every index is up to date (nothing committed)."""
    base, store = ctx.table, ctx.store
    new, removed, written = [], [], []
    live = {f.id: f for f in base.fragments}
    top = {f.id: f for f in base.schema.fields}
    for index in decode_index_section(base.index_section):
        if index.type_url not in TYPE_NAMES or len(index.fields) != 1 or \
                index.fields[0] not in top:
            continue
        covered = set(index.fragment_ids or ()) & set(live)
        missing = [f for f in base.fragments if f.id not in covered]
        if not missing:
            continue
        field = top[index.fields[0]]
        index_uuid = str(uuidlib.uuid4())
        if index.type_url == bitmap_format.TYPE_URL:  # rebuilt from the live rows
            files = _write_bitmap(store, base, field.name, index_uuid)
            written += [index_key(index_uuid, f) for f, _ in files]
            new.append(_metadata(index_uuid, index.name, field.id, index.dataset_version,
                                 set(live), files, base.uses_stable_row_ids,
                                 bitmap_format.TYPE_URL))
            removed.append(index)
            continue
        old = BTreeIndex.open(store, base, index, field.to_arrow().type).entries()
        if base.uses_stable_row_ids and index.index_version < ROW_ADDRESS_IDS:
            old = _ids_to_addresses(store, base, old)
        old = _live_entries(store, base, old, covered)
        fresh = _entries(store, base, field.name, missing)
        merged = pa.concat_tables([old, fresh])
        data = sort_entries(merged.column(0).combine_chunks(), merged.column(1).to_numpy())
        files = write_btree(store, index_uuid, data)
        written += [index_key(index_uuid, f) for f in INDEX_FILES]
        new.append(_metadata(index_uuid, index.name, field.id, index.dataset_version,
                             covered | {f.id for f in missing}, files,
                             base.uses_stable_row_ids))
        removed.append(index)
    return _commit(ctx, new, removed, written) if new else None


def _live_entries(store: ObjectStore, manifest: Manifest, entries: pa.Table,
                  covered: set[int]) -> pa.Table:
    """``entries`` without rows of fragments no longer covered and without deleted rows."""
    ids = entries.column(1).to_numpy()
    frags = (ids >> np.uint64(32)).astype(np.int64)
    keep = np.isin(frags, np.fromiter(covered, np.int64, len(covered)))
    for frag in manifest.fragments:
        if frag.id in covered and frag.deletion_file is not None:
            deleted = deleted_offsets(store, manifest, frag).astype(np.uint64)
            gone = (np.uint64(frag.id) << np.uint64(32)) | deleted
            keep &= ~np.isin(ids, gone)
    return entries.filter(pa.array(keep))


def _ids_to_addresses(store: ObjectStore, manifest: Manifest, entries: pa.Table) -> pa.Table:
    """Entries of an index holding stable row ids, moved to row addresses (rows no longer
    in the table dropped)."""
    addresses = row_id_index(store, manifest).lookup(entries.column(1).to_numpy())
    keep = addresses != MISSING
    return pa.table({entries.column_names[0]: entries.column(0).filter(pa.array(keep)),
                     entries.column_names[1]: pa.array(addresses[keep], pa.uint64())})
