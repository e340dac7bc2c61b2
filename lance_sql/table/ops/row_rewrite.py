"""The write side of an Update transaction in rewrite-rows mode (update, merge_insert).

Rows leave their fragments through deletion vectors and come back, with new values,
in new fragments; new rows (merge_insert's inserts) are written alongside. On a table
with stable row ids a rewritten row keeps its row id and creation version, and its
last-updated version becomes the commit's; inserted rows get fresh ids. Both are
expressed with :data:`~lance_sql.table.files.lineage.PENDING_VERSION` placeholders that
the commit resolves, so a rebased commit stays correct.

Nothing is written to the table until :meth:`RowRewrite.commit`; on any failure the
files written so far are removed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_sql.expr.casts import cast_table_like_datafusion
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MergedGeneration
from lance_sql.sorted_sets import sorted_union
from lance_sql.table.files.deletions import add_deletions
from lance_sql.table.files.lineage import (
    PENDING_VERSION,
    FragmentLineage,
    attach_lineage,
    load_lineage,
)
from lance_sql.table.txn.commit import WinnerCheck
from lance_sql.table.txn.operations import Update
from lance_sql.table.txn.writer import WriteContext
from lance_sql.table.write.fragments import FragmentWriter

_PENDING = np.uint64(PENDING_VERSION)


class RowRewrite:
    """Collects removed rows and (re)written rows of one Update; commits them at once."""

    def __init__(self, ctx: WriteContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.base = base = ctx.table
        self.stable = base.uses_stable_row_ids
        self.writer = FragmentWriter(ctx.store, base.schema, data_format=base.data_format)
        self.arrow = base.schema.to_arrow()
        self._removed: dict[int, np.ndarray] = {}     # fragment id -> offsets leaving it
        self._lineage: list[FragmentLineage] = []    # per written piece, in write order
        self._written = 0
        self._extra_keys: list[str] = []

    @property
    def rows_written(self) -> int:
        return self._written

    def remove(self, fragment: Fragment, offsets: np.ndarray) -> None:
        """Delete physical rows ``offsets`` of ``fragment`` in this commit."""
        if len(offsets) == 0:
            return
        old = self._removed.get(fragment.id)
        offsets = np.asarray(offsets, dtype=np.uint32)
        self._removed[fragment.id] = offsets if old is None else sorted_union(old, offsets)

    def rewrite(self, fragment: Fragment, offsets: np.ndarray, table: pa.Table) -> None:
        """Write ``table`` as the new contents of rows ``offsets`` of ``fragment``."""
        self.remove(fragment, offsets)
        lineage = None
        if self.stable:
            old = load_lineage(self.store, self.base, fragment).take(
                np.asarray(offsets, dtype=np.int64))
            lineage = FragmentLineage(old.row_ids, old.created,
                                      np.full(len(offsets), _PENDING, np.uint64))
        self._write(table, lineage)

    def insert(self, table: pa.Table) -> None:
        """Write ``table`` as new rows."""
        lineage = None
        if self.stable:
            pending = np.full(table.num_rows, _PENDING, np.uint64)
            lineage = FragmentLineage(pending, pending, pending)
        self._write(table, lineage)

    def _write(self, table: pa.Table, lineage: FragmentLineage | None) -> None:
        if table.num_rows == 0:
            return
        for batch in cast_table_like_datafusion(table, self.arrow).to_batches():
            if batch.num_rows:
                self.writer.write(batch)
        self._written += table.num_rows
        if lineage is not None:
            self._lineage.append(lineage)

    def _new_fragments(self) -> tuple[Fragment, ...]:
        fragments = self.writer.finish()
        if not self.stable:
            return tuple(fragments)
        out, keys = attach_lineage(self.store, self.base, fragments,
                                   FragmentLineage.concat(self._lineage))
        self._extra_keys.extend(keys)
        return out

    def commit(self, fields_modified: tuple[int, ...] = (),
               check_winners: WinnerCheck | None = None,
               merged_generations: tuple[MergedGeneration, ...] = ()) -> Manifest:
        """Publish the Update. One that changed no row is still a version (an empty
        Update), as pylance commits one for an update or merge_insert matching nothing,
        so tools counting versions agree.

        ``fields_modified``: the fields (leaves too) whose values the new rows change.
        As pylance records a rewrite of rows, they are the fields whose indices do not
        cover the new fragments (``fields_for_preserving_frag_bitmap``), not fields
        modified in the old ones, which only gain deletions: their indices stay valid.

        ``check_winners`` is passed to the commit loop (see ``commit_transaction``).
        """
        with self.ctx.staging() as staged:
            staged.on_abort(self.writer.abort)
            new_fragments = self._new_fragments()
            staged.add(*self._extra_keys)
            by_id = {f.id: f for f in self.base.fragments}
            merged = add_deletions(self.store, self.base,
                                   [(by_id[i], rows) for i, rows in self._removed.items()])
            deletion_files = list(merged.files)
            op = Update(removed_fragment_ids=merged.removed,
                        updated_fragments=merged.apply(by_id[i] for i in self._removed),
                        new_fragments=new_fragments,
                        fields_for_preserving_frag_bitmap=fields_modified,
                        merged_generations=merged_generations, update_mode="rewrite_rows")
            for key, data in deletion_files:
                staged.add(key)
                self.store.put(key, data)
            return self.ctx.commit(op, affected_rows=dict(self._removed),
                                   check_winners=check_winners)
