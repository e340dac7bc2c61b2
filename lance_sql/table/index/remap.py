"""Keeping BTREE and BITMAP indices through compaction: rows that moved get their new
addresses.

A compaction (Rewrite) copies the live rows of each group's old fragments, in order,
into its new fragments. For every BTREE or BITMAP index covering any of those old fragments this
writes a new index (fresh uuid) whose entries for moved rows hold their new addresses
(entries of deleted rows are dropped) and lists it in the Rewrite's
``rewritten_indices``, as pylance does; applying the Rewrite then swaps the entry and
moves its fragment coverage from the old fragments to the new ones. An index holding
stable row ids (a BITMAP, or an old BTREE, on a stable-row-id table) is written again
with the same ids, less those of deleted rows: the ids do not move.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_sql.format.bitmap import TYPE_URL as BITMAP_TYPE_URL
from lance_sql.format.btree import ROW_ADDRESS_IDS, TYPE_URL, sort_entries
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.pb import transaction_pb2
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.sorted_sets import sorted_difference
from lance_sql.table.files.reader import deleted_offsets
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.index.bitmap import BitmapIndex, fragment_rows, write_bitmap
from lance_sql.table.index.btree import BTreeIndex, index_key, write_btree
from lance_sql.table.txn.operations import RewrittenIndex

Group = tuple[Sequence[Fragment], Sequence[Fragment]]


def _moves(store: ObjectStore, manifest: Manifest, groups: Sequence[Group]
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """(old addresses sorted, their new addresses) of every moved row; None when a
    group's row counts do not line up (then indices just lose the old fragments)."""
    olds, news = [], []
    for old_frags, new_frags in groups:
        old = []
        for frag in old_frags:
            live = sorted_difference(np.arange(frag.physical_rows, dtype=np.uint64),
                                     deleted_offsets(store, manifest, frag).astype(np.uint64))
            old.append((np.uint64(frag.id) << np.uint64(32)) | live)
        new = [(np.uint64(f.id) << np.uint64(32)) | np.arange(f.physical_rows, dtype=np.uint64)
               for f in new_frags]
        old_all = np.concatenate(old) if old else np.empty(0, np.uint64)
        new_all = np.concatenate(new) if new else np.empty(0, np.uint64)
        if len(old_all) != len(new_all):
            return None
        olds.append(old_all)
        news.append(new_all)
    old_all, new_all = np.concatenate(olds), np.concatenate(news)
    order = np.argsort(old_all, kind="stable")
    return old_all[order], new_all[order]


def remap_indices(store: ObjectStore, manifest: Manifest, groups: Sequence[Group]
                  ) -> tuple[tuple[RewrittenIndex, ...], list[str]]:
    """New index files for the BTREE indices a rewrite of ``groups`` touches; returns the
    Rewrite's ``rewritten_indices`` and the keys written (to delete if the commit fails)."""
    rewritten = {f.id for old, _ in groups for f in old}
    top = {f.id: f for f in manifest.schema.fields}
    live = {f.id for f in manifest.fragments}
    out: list[RewrittenIndex] = []
    written: list[str] = []
    for index in decode_index_section(manifest.index_section):
        covered = set(index.fragment_ids or ()) & live
        bitmap = index.type_url == BITMAP_TYPE_URL
        if (index.type_url not in (TYPE_URL, BITMAP_TYPE_URL) or len(index.fields) != 1
                or index.fields[0] not in top or not covered & rewritten):
            continue
        # only groups whose fragments were all indexed stay covered (as Rewrite applies it)
        whole = [g for g in groups if {f.id for f in g[0]} <= covered]
        if not whole:
            continue
        key_type = top[index.fields[0]].to_arrow().type
        if manifest.uses_stable_row_ids and (bitmap or index.index_version < ROW_ADDRESS_IDS):
            # entries of stable row ids: they do not move, so the index is written again
            # without the rewrite's deleted rows and covers the new fragments, as
            # pylance's compaction keeps it (it once dropped the rewritten fragments)
            held = (BitmapIndex.open(store, manifest, index, key_type).entries(
                        None, manifest.next_row_id) if bitmap
                    else BTreeIndex.open(store, manifest, index, key_type).entries())
            data = _without_deleted(store, manifest, held)
        else:
            moves = _moves(store, manifest, whole)
            if moves is None:
                continue
            held = (BitmapIndex.open(store, manifest, index, key_type).entries(
                        fragment_rows(manifest)) if bitmap
                    else BTreeIndex.open(store, manifest, index, key_type).entries())
            data = _remapped(held, moves, covered, rewritten)
        new_uuid = str(uuidlib.uuid4())
        files = (write_bitmap(store, new_uuid, data.column(0).combine_chunks(),
                              data.column(1).to_numpy()) if bitmap
                 else write_btree(store, new_uuid, data))
        written += [index_key(new_uuid, name) for name, _ in files]
        out.append(_rewritten(index, new_uuid, files))
    return tuple(out), written


def _without_deleted(store: ObjectStore, manifest: Manifest, entries: pa.Table) -> pa.Table:
    """``entries`` (value, stable row id) of live rows only: the row-id index leaves
    out deleted rows (and an updated row's old copy), which a compaction drops."""
    ids = entries.column(1).to_numpy()
    keep = row_id_index(store, manifest).lookup(ids) != MISSING
    if keep.all():
        return entries
    return sort_entries(entries.column(0).combine_chunks().filter(array_from_numpy(keep)),
                        ids[keep])


def _remapped(entries: pa.Table, moves: tuple[np.ndarray, np.ndarray], covered: set[int],
              rewritten: set[int]) -> pa.Table:
    old_sorted, new_of = moves
    ids = entries.column(1).to_numpy()
    frags = (ids >> np.uint64(32)).astype(np.int64)
    keep = np.isin(frags, np.fromiter(covered, np.int64, len(covered)))
    moved = np.isin(frags, np.fromiter(rewritten, np.int64, len(rewritten))) & keep
    at = np.searchsorted(old_sorted, ids[moved])
    found = at < len(old_sorted)
    found[found] = old_sorted[at[found]] == ids[moved][found]
    new_ids = ids.copy()
    moved_positions = np.flatnonzero(moved)
    new_ids[moved_positions[found]] = new_of[at[found]]
    keep[moved_positions[~found]] = False  # rows deleted before the rewrite
    values = entries.column(0).combine_chunks().filter(pa.array(keep))
    return sort_entries(values, new_ids[keep])


def _rewritten(index: IndexMetadata, new_uuid: str, files: tuple[tuple[str, int], ...]
               ) -> RewrittenIndex:
    pb = transaction_pb2.Transaction.Rewrite.RewrittenIndex()
    pb.old_id.uuid = uuidlib.UUID(index.uuid).bytes
    pb.new_id.uuid = uuidlib.UUID(new_uuid).bytes
    pb.new_index_details.type_url = index.type_url
    pb.new_index_version = index.index_version
    for name, size in files:
        pb.new_index_files.add(path=name, size_bytes=size)
    return RewrittenIndex.from_proto(pb)
