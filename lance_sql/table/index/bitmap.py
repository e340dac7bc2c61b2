"""BITMAP index files on a store: write them, open them, search them.

An opened index keeps its keys column in memory (one value per distinct key) and reads
the serialized row sets of the keys a query selects, only the pages holding them. The
opened index is cached process-wide (bounded, thread safe) by uuid, as BTREE's is: index
files never change once written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, LanceError
from lance_sql.format.bitmap import (
    BITMAPS,
    KEYS,
    LOOKUP_FILE,
    build_bitmaps,
    decode_row_set,
    num_bitmaps,
)
from lance_sql.format.btree import KeyQuery, matches, page_data_schema
from lance_sql.format.datafile import LanceFileReader
from lance_sql.format.index import IndexMetadata
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.index.btree import (
    file_columns,
    index_key,
    index_store,
    open_index_file,
    write_file,
)
from lance_sql.table.runtime.cache import INDEX_FILES
from lance_sql.table.runtime.context import current_runtime


def write_bitmap(store: ObjectStore, uuid: str, values: pa.Array, ids: np.ndarray
                 ) -> tuple[tuple[str, int], ...]:
    """Write the bitmap file of entries (``values[i]`` at ``ids[i]``) under
    ``_indices/{uuid}``; (name, size) of it."""
    table = build_bitmaps(values, ids)
    return ((LOOKUP_FILE, write_file(store, index_key(uuid, LOOKUP_FILE), table)),)


def fragment_rows(manifest: Manifest) -> dict[int, int]:
    """Physical rows of each fragment of ``manifest``, by id."""
    return {f.id: f.physical_rows for f in manifest.fragments}


@dataclass(frozen=True)
class BitmapIndex:
    """An opened BITMAP index: its keys in memory, the row sets read on demand."""

    uuid: str
    path: str
    data: LanceFileReader
    keys: pa.Array
    key_type: pa.DataType
    num_bitmaps: int

    @classmethod
    def open(cls, store: ObjectStore, manifest: Manifest, meta: IndexMetadata,
             key_type: pa.DataType) -> BitmapIndex:
        """Open (or take from the cache) the file of ``meta``; a missing, truncated or
        foreign file is a NotFoundError / FormatError naming it."""
        root = index_store(store, manifest, meta)

        def load() -> BitmapIndex:
            return cls._load(root, meta, key_type)

        return current_runtime().cache.get_or_load(
            INDEX_FILES, (root.uri, meta.uuid, "bitmap", str(key_type)), load)

    @classmethod
    def _load(cls, root: ObjectStore, meta: IndexMetadata, key_type: pa.DataType
              ) -> BitmapIndex:
        key = index_key(meta.uuid, LOOKUP_FILE)
        path = f"{root.uri}/{key}"
        data = open_index_file(root, key)
        try:
            schema = data.schema.to_arrow()
            if schema.names != [KEYS, BITMAPS] or schema.field(KEYS).type != key_type or \
                    schema.field(BITMAPS).type != pa.binary():
                raise FormatError(f"{path}: not a BITMAP index file of a {key_type} key "
                                  f"(schema {schema.to_string(show_schema_metadata=False)!r})")
            keys = data.read([data.schema.fields[0]], file_columns(data))[0]
        except FormatError:
            raise
        except LanceError as exc:
            raise FormatError(f"{path}: {exc}") from exc
        return cls(meta.uuid, path, data, keys, key_type,
                   num_bitmaps(schema.metadata, data.num_rows))

    def nbytes(self) -> int:
        """Memory the index holds while open (its keys)."""
        return self.keys.nbytes

    def positions(self, query: KeyQuery) -> np.ndarray:
        """Rows of the file (keys) ``query`` selects, ascending."""
        return np.flatnonzero(matches(self.keys, query))

    def row_sets(self, positions: np.ndarray) -> list[bytes]:
        """The serialized row sets at ``positions`` of the file."""
        if not positions.size:
            return []
        try:
            got = self.data.take([self.data.schema.fields[1]], file_columns(self.data),
                                 positions)[0]
        except LanceError as exc:
            raise FormatError(f"{self.path}: {exc}") from exc
        if got.null_count:
            raise FormatError(f"{self.path}: a key without a bitmap")
        return got.to_pylist()  # one bytes object a selected key

    def search(self, query: KeyQuery, rows: Mapping[int, int] | None, id_limit: int = 0
               ) -> np.ndarray:
        """Sorted unique values (row addresses; stable row ids when ``rows`` is None)
        of the keys ``query`` selects (see :func:`decode_row_set`)."""
        found = [decode_row_set(b, self.path, rows, id_limit)
                 for b in self.row_sets(self.positions(query))]
        if not found:
            return np.empty(0, np.uint64)
        if len(found) == 1:
            return found[0]
        return np.unique(np.concatenate(found))  # (keys' rows are disjoint: a sort)

    def entries(self, rows: Mapping[int, int] | None, id_limit: int = 0) -> pa.Table:
        """Every (value, row address) entry of fragments in ``rows``, shaped as a BTREE's
        page data (for rebuilding the index when rows move); ``rows`` None: every
        (value, stable row id) entry, the ids below ``id_limit``."""
        sets = [decode_row_set(b, self.path, rows, id_limit)
                for b in self.row_sets(np.arange(len(self.keys)))]
        counts = np.array([s.size for s in sets], np.int64)
        owner = np.repeat(np.arange(len(sets), dtype=np.int64), counts)
        ids = np.concatenate(sets) if sets else np.empty(0, np.uint64)
        return pa.Table.from_arrays([self.keys.take(array_from_numpy(owner)),
                                     array_from_numpy(ids, pa.uint64())],
                                    schema=page_data_schema(self.key_type))


def bitmap_addresses(store: ObjectStore, manifest: Manifest, meta: IndexMetadata,
                     key_type: pa.DataType, query: KeyQuery) -> np.ndarray:
    """Sorted unique row addresses of the rows ``query`` selects through BITMAP index
    ``meta``; on stable-row-id tables the index holds row ids, found in the row-id
    index (rows no longer in the table dropped)."""
    index = BitmapIndex.open(store, manifest, meta, key_type)
    if not manifest.uses_stable_row_ids:
        return index.search(query, fragment_rows(manifest))
    ids = index.search(query, None, manifest.next_row_id)
    addresses = row_id_index(store, manifest).lookup(ids)
    return np.unique(addresses[addresses != MISSING])
