"""Row lineage of fragments: stable row ids and per-row created / last-updated versions.

On a table with stable row ids (reader/writer flag 2) every fragment carries, per
physical row (deleted rows included), its row id and the versions that created and
last updated it. This module turns those sequences into numpy arrays
(:func:`load_lineage`, cached and thread safe) and back (:func:`with_lineage`), and
stamps the fragments of a commit (:func:`stamp_fragments`).

Writers do not know the version their commit will get (a rebase can move it), so they
leave it open: a fragment without a row-id sequence gets fresh ids from
``next_row_id``, as do rows whose id is :data:`PENDING_VERSION`; a missing version
sequence, or a run holding :data:`PENDING_VERSION`, becomes the commit's version when
the transaction is applied. That keeps rebasing a
matter of re-applying the same transaction.

External sequences are read wherever they appear. Writing them is opt-in, per table,
with the config key ``lance_sql.external_row_ids = "true"``: then row-id sequences
above :data:`INLINE_LIMIT` bytes go to ``_row_ids/`` files referenced by range
(:func:`externalize`). Off by default because pylance 14.0.2 refuses to open a table
holding one ("All fragments must have row ids"), and staying readable by the
reference matters more than a smaller manifest. Version sequences always stay inline
(run-length encoded they are small, and the reference cannot load external ones).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable
from dataclasses import replace

import numpy as np

from lance_sql.errors import FormatError
from lance_sql.format.fragment import ExternalFile, Fragment, Sequence
from lance_sql.format.manifest import Manifest
from lance_sql.format.row_ids import (
    RowIdPieces,
    VersionRuns,
    decode_row_id_pieces,
    decode_row_ids,
    decode_version_runs,
    decode_versions,
    encode_row_ids,
    encode_versions,
)
from lance_sql.io.store import ObjectStore
from lance_sql.table.runtime.cache import LINEAGE, LINEAGE_ARRAYS
from lance_sql.table.runtime.context import current_runtime

# The version of the commit that applies the transaction, not yet known to its writer;
# as a row id: a fresh id from next_row_id.
PENDING_VERSION = (1 << 64) - 1
# Sequences larger than this live in a separate file (the reference's threshold).
INLINE_LIMIT = 200 * 1024
ROW_IDS_DIR = "_row_ids"
EXTERNAL_ROW_IDS_CONFIG = "lance_sql.external_row_ids"
# Version assumed for rows of fragments written without version sequences (as the
# reference does).
UNKNOWN_VERSION = 1

__all__ = [
    "FragmentLineage",
    "INLINE_LIMIT",
    "PENDING_VERSION",
    "attach_lineage",
    "externalize",
    "writes_external_row_ids",
    "load_lineage",
    "sequence_keys",
    "stamp_fragments",
    "with_lineage",
]


class FragmentLineage:
    """Row ids and versions of every physical row of one fragment (``uint64`` arrays).

    Built either from arrays or, by :func:`load_lineage`, from a fragment's sequences
    kept compact (:class:`RowIdPieces`, :class:`VersionRuns`): then ``take`` and the
    ``*_at`` lookups answer by arithmetic, and the full arrays (24 bytes a row) are
    built only when asked for, and cached (bounded by bytes) for the next caller.
    """

    __slots__ = ("_arrays", "_compact", "_key")

    def __init__(self, row_ids: np.ndarray, created: np.ndarray, updated: np.ndarray,
                 *, compact: tuple[RowIdPieces, VersionRuns, VersionRuns] | None = None,
                 key: Hashable = None) -> None:
        """From arrays, or (``compact``, with the ``key`` of the array cache) from
        sequences, the arrays then being built on demand."""
        self._arrays: tuple[np.ndarray, ...] | None = \
            None if compact is not None else (row_ids, created, updated)
        self._compact = compact
        self._key: Hashable = key

    @classmethod
    def from_sequences(cls, key: Hashable, row_ids: RowIdPieces, created: VersionRuns,
                       updated: VersionRuns) -> FragmentLineage:
        """Lineage read from sequences; ``key`` names them in the array cache."""
        empty = np.empty(0, np.uint64)
        return cls(empty, empty, empty, compact=(row_ids, created, updated), key=key)

    def _array(self, i: int) -> np.ndarray:
        if self._arrays is not None:
            return self._arrays[i]
        compact = self._compact
        assert compact is not None
        return current_runtime().cache.get_or_load(LINEAGE_ARRAYS, (self._key, i),
                                                   compact[i].materialize)

    @property
    def row_ids(self) -> np.ndarray:
        return self._array(0)

    @property
    def created(self) -> np.ndarray:
        return self._array(1)

    @property
    def updated(self) -> np.ndarray:
        return self._array(2)

    @property
    def nbytes(self) -> int:
        parts = self._compact if self._compact is not None else self._arrays
        assert parts is not None
        return sum(int(p.nbytes) for p in parts)

    def _at(self, i: int, positions: np.ndarray | slice) -> np.ndarray:
        if self._arrays is not None:
            return self._arrays[i][positions]
        compact = self._compact
        assert compact is not None
        if isinstance(positions, slice):
            positions = np.arange(compact[i].num_rows, dtype=np.int64)[positions]
        else:
            positions = np.asarray(positions)
            if positions.dtype == bool:
                positions = np.flatnonzero(positions)
        return compact[i].take(positions.astype(np.int64, copy=False))

    def id_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(first id, first row, length)`` of each stretch of consecutive ids at
        consecutive rows, when the sequence is made of ranges only (else None)."""
        if self._compact is None:
            return None
        return self._compact[0].ranges()

    def ids_at(self, positions: np.ndarray | slice) -> np.ndarray:
        """Row ids of rows ``positions`` (offsets, a mask or a slice)."""
        return self._at(0, positions)

    def created_at(self, positions: np.ndarray | slice) -> np.ndarray:
        return self._at(1, positions)

    def updated_at(self, positions: np.ndarray | slice) -> np.ndarray:
        return self._at(2, positions)

    def take(self, positions: np.ndarray | slice) -> FragmentLineage:
        return FragmentLineage(self.ids_at(positions), self.created_at(positions),
                               self.updated_at(positions))

    @staticmethod
    def concat(parts: list[FragmentLineage]) -> FragmentLineage:
        if not parts:
            empty = np.empty(0, np.uint64)
            return FragmentLineage(empty, empty, empty)
        return FragmentLineage(*(np.concatenate([getattr(p, name) for p in parts])
                                 for name in ("row_ids", "created", "updated")))


def _sequence_bytes(store: ObjectStore, seq: Sequence, what: str) -> bytes:
    if isinstance(seq, ExternalFile):
        data = bytes(store.open_source(seq.path).read_at(seq.offset, seq.size))
        if len(data) != seq.size:
            raise FormatError(f"{store.uri}/{seq.path}: {what} is truncated "
                              f"({len(data)} of {seq.size} bytes)")
        return data
    assert seq is not None
    return seq


def load_lineage(store: ObjectStore, manifest: Manifest, fragment: Fragment) -> FragmentLineage:
    """The fragment's per-row ids and versions; a FormatError names what is wrong."""
    seqs = (fragment.row_id_sequence, fragment.created_at_version_sequence,
            fragment.last_updated_at_version_sequence)
    key = (store.uri, fragment.id, fragment.physical_rows) + seqs
    where = f"{store.uri}: fragment {fragment.id}"

    def load() -> FragmentLineage:
        n = fragment.physical_rows
        if fragment.row_id_sequence is None:
            raise FormatError(f"{where} has no row id sequence, but the table uses stable "
                              "row ids")
        ids = decode_row_id_pieces(
            _sequence_bytes(store, fragment.row_id_sequence, "row ids"), f"{where} row ids", n)
        if ids.num_rows != n:
            raise FormatError(f"{where}: row id sequence holds {ids.num_rows} ids for {n} rows")
        versions = []
        for seq, what in ((seqs[1], "created-at versions"), (seqs[2], "last-updated versions")):
            if seq is None:
                versions.append(VersionRuns.uniform(UNKNOWN_VERSION, n))
            else:
                versions.append(decode_version_runs(_sequence_bytes(store, seq, what), n,
                                                    f"{where} {what}"))
        return FragmentLineage.from_sequences(key, ids, versions[0], versions[1])

    # cached per (table, fragment, sequences), compact: sequences are immutable
    return current_runtime().cache.get_or_load(LINEAGE, key, load)


def with_lineage(fragment: Fragment, row_ids: np.ndarray, created: np.ndarray | None,
                 updated: np.ndarray | None) -> Fragment:
    """``fragment`` carrying these sequences; ``None`` versions are left for the commit."""
    return replace(
        fragment,
        row_id_sequence=encode_row_ids(row_ids),
        created_at_version_sequence=None if created is None else encode_versions(created),
        last_updated_at_version_sequence=None if updated is None else encode_versions(updated),
    )


def _resolve(seq: bytes, n: int, version: int) -> bytes:
    if not (decode_version_runs(seq, n).versions == np.uint64(PENDING_VERSION)).any():
        return seq
    versions = decode_versions(seq, n)
    pending = versions == np.uint64(PENDING_VERSION)
    versions[pending] = version
    return encode_versions(versions)


def _may_hold_pending(ids: RowIdPieces) -> bool:
    """Whether a placeholder id can be among ``ids`` (ranges never reach it: their end
    would overflow u64)."""
    pending = np.uint64(PENDING_VERSION)
    return bool((ids.values == pending).any() or ((ids.offset < 0) & (ids.first == pending)).any())


def _full(n: int, version: int) -> bytes:
    return encode_versions(np.full(n, version, np.uint64))


def _check_room(next_row_id: int, count: int) -> None:
    """Fresh ids stay below :data:`PENDING_VERSION` (a damaged ``next_row_id`` would
    overflow u64 or hand out the placeholder)."""
    if next_row_id + count > PENDING_VERSION:
        raise FormatError(f"the table's next row id {next_row_id} leaves no room for {count} "
                          "new row ids below 2**64 - 1 (a damaged manifest?)")


def stamp_fragments(fragments: tuple[Fragment, ...], next_row_id: int,
                    version: int, *, new: bool = True) -> tuple[tuple[Fragment, ...], int]:
    """Fill in what writers left open; returns the fragments and the next free row id.

    Fresh ids from ``next_row_id`` for fragments without a sequence (in order), and the
    commit's ``version`` for missing version sequences and pending runs. Fragments that
    already existed (``new=False``) keep their ids unread.
    """
    out = []
    for frag in fragments:
        n = frag.physical_rows
        if frag.row_id_sequence is None:
            _check_room(next_row_id, n)
            frag = replace(frag, row_id_sequence=encode_row_ids(
                np.arange(next_row_id, next_row_id + n, dtype=np.uint64)))
            next_row_id += n
        elif new and isinstance(frag.row_id_sequence, bytes) and _may_hold_pending(
                decode_row_id_pieces(frag.row_id_sequence)):
            ids = decode_row_ids(frag.row_id_sequence)
            fresh = ids == np.uint64(PENDING_VERSION)
            if fresh.any():  # rows written alongside kept ones (merge_insert's inserts)
                count = int(fresh.sum())
                _check_room(next_row_id, count)
                ids[fresh] = np.arange(next_row_id, next_row_id + count, dtype=np.uint64)
                frag = replace(frag, row_id_sequence=encode_row_ids(ids))
                next_row_id += count
        created, updated = frag.created_at_version_sequence, frag.last_updated_at_version_sequence
        created = _full(n, version) if created is None else (
            _resolve(created, n, version) if isinstance(created, bytes) else created)
        updated = _full(n, version) if updated is None else (
            _resolve(updated, n, version) if isinstance(updated, bytes) else updated)
        out.append(replace(frag, created_at_version_sequence=created,
                           last_updated_at_version_sequence=updated))
    return tuple(out), next_row_id


def writes_external_row_ids(manifest: Manifest) -> bool:
    """Whether the table opted in to external row-id files (see the module docstring)."""
    return manifest.config.get(EXTERNAL_ROW_IDS_CONFIG, "").lower() == "true"


def externalize(store: ObjectStore, fragment: Fragment, *,
                enabled: bool = True) -> tuple[Fragment, list[str]]:
    """Move a row-id sequence over :data:`INLINE_LIMIT` bytes to its own file.

    Returns the fragment (pointing at the file) and the keys written, for clean-up
    if the commit fails. Does nothing unless ``enabled``.
    """
    seq = fragment.row_id_sequence
    if not enabled or not isinstance(seq, bytes) or len(seq) <= INLINE_LIMIT:
        return fragment, []
    key = f"{ROW_IDS_DIR}/{uuid.uuid4()}.binpb"
    store.put(key, seq)
    return replace(fragment, row_id_sequence=ExternalFile(key, 0, len(seq))), [key]


def attach_lineage(store: ObjectStore, base: Manifest, fragments: Iterable[Fragment],
                   lineage: FragmentLineage) -> tuple[tuple[Fragment, ...], list[str]]:
    """Give fragments written in order their slices of ``lineage`` (one entry per row of
    all of them); returns the fragments and the keys of any external sequence files."""
    out, keys, start = [], [], 0
    for frag in fragments:
        end = start + frag.physical_rows
        frag, written = externalize(
            store, with_lineage(frag, lineage.row_ids[start:end], lineage.created[start:end],
                                lineage.updated[start:end]),
            enabled=writes_external_row_ids(base))
        out.append(frag)
        keys.extend(written)
        start = end
    return tuple(out), keys


def sequence_keys(fragment: Fragment) -> list[str]:
    """Keys of external files a fragment's sequences point at (for clean-up)."""
    return [s.path for s in (fragment.row_id_sequence, fragment.created_at_version_sequence,
                             fragment.last_updated_at_version_sequence)
            if isinstance(s, ExternalFile)]
