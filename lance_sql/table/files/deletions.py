"""Adding deleted rows to fragments' deletion vectors: the one merge that deletes, row
rewrites (updates, merge_insert) and rebases over a concurrent delete all use.

Pure of writes: the new deletion files come back as bytes for the caller to write (and to
remove again if its commit fails).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lance_sql.format.deletion import merged_deletion
from lance_sql.format.fragment import DeletionFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import deleted_offsets


@dataclass(frozen=True)
class DeletionMerge:
    """New deletion vectors of some fragments of one version."""

    deletions: Mapping[int, DeletionFile]  # fragment id -> its new deletion file
    removed: tuple[int, ...]               # fragments whose rows are now all deleted
    files: tuple[tuple[str, bytes], ...]   # the new deletion files: (key, bytes)

    def apply(self, fragments: Iterable[Fragment]) -> tuple[Fragment, ...]:
        """``fragments`` with their new deletion vectors; wholly deleted ones dropped."""
        return tuple(f.with_deletion(self.deletions[f.id]) if f.id in self.deletions else f
                     for f in fragments if f.id not in self.removed)


def add_deletions(store: ObjectStore, manifest: Manifest,
                    deleted: Sequence[tuple[Fragment, np.ndarray]]) -> DeletionMerge:
    """Deletion vectors of ``manifest``'s fragments with the row offsets ``deleted`` adds
    to each, in the order given; the files are named for ``manifest``'s version."""
    deletions: dict[int, DeletionFile] = {}
    removed: list[int] = []
    files: list[tuple[str, bytes]] = []
    for frag, offsets in deleted:
        merged = merged_deletion(deleted_offsets(store, manifest, frag), offsets,
                                 frag.physical_rows, manifest.version)
        if merged is None:
            removed.append(frag.id)
            continue
        deletion, data = merged
        files.append((deletion.key(frag.id), data))
        deletions[frag.id] = deletion
    return DeletionMerge(deletions, tuple(removed), tuple(files))
