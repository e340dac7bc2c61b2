"""Net changes: one change per row for a whole window, its net effect (pure, vectorised).

The change rows of every version of the window are grouped by ``_rowid`` (the spec's
``DeduplicateExec`` partitioned by ``_rowid``, ordered by ``_commit_version``: a stable
sort by row id of rows already in version order). Per row id, its first change tells
whether the row existed before the window (a pre-image or a delete: yes; an insert: no)
and where its values were then; its last change tells whether it exists at the end (an
insert or a post-image: yes; a delete: no) and where its values are now. So:

* absent before, present at the end: ``insert`` (the end values);
* present before, absent at the end: ``delete`` (the values from before the window);
* present at both ends: ``update_preimage`` (before the window) and
  ``update_postimage`` (the end) — whenever the row was changed in the window, even if
  a later change put its old values back (a rule on metadata only, as Delta's "latest
  change per key" recipe; Iceberg's ``net_changes`` would compare values and drop it);
* inserted and deleted inside the window: nothing.

Each net row carries the version (and so the timestamp) of the row's last change in the
window. Nothing here reads data: the result is :class:`ChangeRows` pointing at the old
and new files, read like any other change rows.
"""

from __future__ import annotations

import numpy as np

from lance_sql.errors import InvalidInputError
from lance_sql.table.changes.rows import DELETE, INSERT, POSTIMAGE, PREIMAGE, ChangeRows

__all__ = ["CHANGE_MODES", "check_mode", "net_changes"]

CHANGE_MODES = ("all", "net")


def check_mode(mode: object) -> bool:
    """Whether ``mode`` (one of :data:`CHANGE_MODES`) asks for net changes."""
    if not isinstance(mode, str) or mode.lower() not in CHANGE_MODES:
        raise InvalidInputError(f"change mode must be one of {CHANGE_MODES}, got {mode!r}")
    return mode.lower() == "net"


def net_changes(rows: ChangeRows) -> ChangeRows:
    """The net effect of ``rows`` (every change of a window, in version order) per row id,
    laid out in the feed's usual order (by version; inserts, update pairs, deletes; by id).
    """
    n = len(rows)
    if not n:
        return rows
    order = np.argsort(rows.row_id, kind="stable")  # version order kept within an id
    ids = rows.row_id[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], n] - 1
    first, last = order[starts], order[ends]
    before = np.isin(rows.kind[first], (PREIMAGE, DELETE))
    after = np.isin(rows.kind[last], (INSERT, POSTIMAGE))
    version = rows.version[last]
    inserted = ~before & after
    deleted = before & ~after
    updated = before & after
    ins, dels, upd = np.flatnonzero(inserted), np.flatnonzero(deleted), np.flatnonzero(updated)
    # rows of the result: (where the values are, the kind, the group)
    take = np.concatenate([last[ins], first[dels], first[upd], last[upd]])
    kind = np.concatenate([np.full(ins.size, INSERT, np.int8),
                           np.full(dels.size, DELETE, np.int8),
                           np.full(upd.size, PREIMAGE, np.int8),
                           np.full(upd.size, POSTIMAGE, np.int8)])
    group = np.concatenate([ins, dels, upd, upd])
    out_version = version[group]
    # A pre-image may read unmodified columns at its post-image (``alt_*``) only when
    # both come from the same commit: that commit's modified columns decide it.
    same = rows.version[take] == out_version
    alt_fragment = np.where(same, rows.alt_fragment[take], -1)
    alt_offset = np.where(same, rows.alt_offset[take], -1)
    rank = np.where(kind == INSERT, 0, np.where(kind == DELETE, 2, 1))
    row_id = rows.row_id[take]
    at = np.lexsort((kind, row_id, rank, out_version))
    return ChangeRows(out_version[at], kind[at], row_id[at], rows.source[take][at],
                      rows.fragment[take][at], rows.offset[take][at], alt_fragment[at],
                      alt_offset[at])
