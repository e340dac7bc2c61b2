"""The I/O half of a rebase: merge deletion vectors with a concurrent delete/update.

The pure rules (:mod:`lance_sql.table.txn.conflicts`) decide *that* our Delete or Update
may be rebased by merging its deletion vectors of some fragments with the winners';
here we read the winners' vectors from the newest version, check that no row was
deleted or updated by both sides (that would be a retryable conflict: the outcome of
re-running the operation may differ), and write the merged vectors as new deletion
files. A fragment whose rows are then all deleted is removed instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from lance_sql.errors import RetryableConflict
from lance_sql.format.deletion import merged_deletion
from lance_sql.format.fragment import DeletionFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import deleted_offsets
from lance_sql.table.txn.operations import Delete, Transaction, Update

AffectedRows = Mapping[int, np.ndarray]  # fragment id -> row offsets we deleted/updated


def merge_deletions(
    store: ObjectStore,
    latest: Manifest,
    txn: Transaction,
    fragment_ids: frozenset[int],
    affected_rows: AffectedRows,
    written: list[str],
) -> Transaction:
    """``txn`` rebased onto ``latest``; new deletion files' keys are appended to ``written``."""
    op = txn.operation
    assert isinstance(op, Delete | Update)
    current = {f.id: f for f in latest.fragments}
    new_deletions: dict[int, DeletionFile] = {}
    emptied: list[int] = []
    pending: list[tuple[str, bytes]] = []
    for frag_id in sorted(fragment_ids):
        frag = current.get(frag_id)
        if frag is None:
            raise RetryableConflict(f"{store.uri}: fragment {frag_id} vanished concurrently; "
                                    f"retry the {op.name}")
        theirs = deleted_offsets(store, latest, frag)
        ours = np.asarray(affected_rows.get(frag_id, ()), dtype=np.uint32)
        both = np.intersect1d(theirs, ours)
        if len(both):
            sample = [(frag_id << 32) | int(r) for r in both[:5]]
            raise RetryableConflict(
                f"{store.uri}: this {op.name} and version {latest.version} both modified rows "
                f"at addresses {sample}; retry the {op.name}"
            )
        merged = merged_deletion(theirs, ours, frag.physical_rows, latest.version)
        if merged is None:
            emptied.append(frag_id)
            continue
        deletion, data = merged
        pending.append((deletion.key(frag_id), data))
        new_deletions[frag_id] = deletion
    for key, data in pending:
        written.append(key)
        store.put(key, data)

    def updated(frags: tuple[Fragment, ...]) -> tuple[Fragment, ...]:
        return tuple(f.with_deletion(new_deletions[f.id]) if f.id in new_deletions else f
                     for f in frags if f.id not in emptied)

    if isinstance(op, Delete):
        new_op: Delete | Update = replace(
            op, updated_fragments=updated(op.updated_fragments),
            deleted_fragment_ids=op.deleted_fragment_ids + tuple(emptied))
    else:
        new_op = replace(op, updated_fragments=updated(op.updated_fragments),
                         removed_fragment_ids=op.removed_fragment_ids + tuple(emptied))
    return replace(txn, operation=new_op, read_version=latest.version)
