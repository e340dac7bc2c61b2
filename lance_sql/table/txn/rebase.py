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
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.sorted_sets import sorted_intersection
from lance_sql.table.files.deletions import add_deletions
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
    ours_by_fragment: list[tuple[Fragment, np.ndarray]] = []
    for frag_id in sorted(fragment_ids):
        frag = current.get(frag_id)
        if frag is None:
            raise RetryableConflict(f"{store.uri}: fragment {frag_id} vanished concurrently; "
                                    f"retry the {op.name}")
        theirs = deleted_offsets(store, latest, frag)
        ours = np.asarray(affected_rows.get(frag_id, ()), dtype=np.uint32)
        both = sorted_intersection(theirs, ours)
        if len(both):
            sample = [(frag_id << 32) | int(r) for r in both[:5]]
            raise RetryableConflict(
                f"{store.uri}: this {op.name} and version {latest.version} both modified rows "
                f"at addresses {sample}; retry the {op.name}"
            )
        ours_by_fragment.append((frag, ours))
    merged = add_deletions(store, latest, ours_by_fragment)
    for key, data in merged.files:
        written.append(key)
        store.put(key, data)
    if isinstance(op, Delete):
        new_op: Delete | Update = replace(
            op, updated_fragments=merged.apply(op.updated_fragments),
            deleted_fragment_ids=op.deleted_fragment_ids + merged.removed)
    else:
        new_op = replace(op, updated_fragments=merged.apply(op.updated_fragments),
                         removed_fragment_ids=op.removed_fragment_ids + merged.removed)
    return replace(txn, operation=new_op, read_version=latest.version)
