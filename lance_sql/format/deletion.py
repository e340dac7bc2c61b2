"""Deletion vectors: the row offsets of a fragment that are deleted.

Two encodings, chosen by size as the reference does:

* ``arrow``  — an Arrow IPC *file* with one ``row_id: uint32 not null`` column,
  for fewer than :data:`BITMAP_THRESHOLD` rows;
* ``bitmap`` — a portable 32-bit Roaring bitmap (``.bin``), for the rest.

Decoding returns a sorted, unique ``uint32`` numpy array either way.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_sql.errors import FormatError
from lance_sql.format.fragment import DeletionFile, DeletionKind
from lance_sql.sorted_sets import sorted_unique

BITMAP_THRESHOLD = 5000
_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def choose_kind(num_deleted: int) -> DeletionKind:
    """The deletion-file kind the reference picks for ``num_deleted`` rows."""
    return "bitmap" if num_deleted >= BITMAP_THRESHOLD else "arrow"


def encode_deletions(offsets: np.ndarray) -> tuple[DeletionKind, bytes]:
    """Serialize a set of deleted row offsets (any order, duplicates allowed)."""
    values = sorted_unique(np.asarray(offsets, dtype=np.uint32))
    kind = choose_kind(len(values))
    if kind == "bitmap":
        bitmap = BitMap(values)
        bitmap.run_optimize()
        return kind, bitmap.serialize()
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, _SCHEMA, options=options) as writer:
        writer.write_batch(pa.record_batch([pa.array(values, pa.uint32())], schema=_SCHEMA))
    return kind, sink.getvalue().to_pybytes()


def decode_deletions(kind: DeletionKind, data: bytes, path: str,
                     physical_rows: int) -> np.ndarray:
    """Deleted row offsets from a deletion file's bytes; FormatError if corrupt.

    Every offset must lie below ``physical_rows`` (the fragment's row count). Sizes in
    the file are checked against it *before* anything is expanded: a hostile file can
    claim a 2**40-row batch or a bitmap of all 2**32 offsets in a few bytes.
    """
    if kind == "bitmap":
        return _decode_bitmap(data, path, physical_rows)
    return _decode_arrow(data, path, physical_rows)


def _decode_bitmap(data: bytes, path: str, physical_rows: int) -> np.ndarray:
    try:
        bitmap = BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError/OverflowError variants
        raise FormatError(f"{path}: corrupt roaring deletion bitmap ({exc})") from exc
    if len(bitmap) and bitmap.max() >= physical_rows:
        raise FormatError(f"{path}: deletes row {bitmap.max()} but the fragment has "
                          f"{physical_rows} rows")
    return np.asarray(bitmap.to_array(), dtype=np.uint32)


def _decode_arrow(data: bytes, path: str, physical_rows: int) -> np.ndarray:
    try:
        reader = pa.ipc.open_file(pa.py_buffer(data))
        types = [f.type for f in reader.schema]
        if len(types) != 1 or not pa.types.is_integer(types[0]):
            raise FormatError(f"{path}: deletion file must hold one integer column, got "
                              f"{types}")
        chunks, rows = [], 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            rows += batch.num_rows
            if rows > physical_rows:  # an offset is deleted at most once
                raise FormatError(f"{path}: deletion file holds {rows} or more rows but the "
                                  f"fragment has {physical_rows}")
            # Lengths in the IPC metadata are not checked against the buffers by the
            # reader: a patched one would read far past them. Check before touching.
            batch.validate(full=True)
            chunks.append(batch.column(0))  # reads the (UTF-8) name
    # corrupt IPC metadata surfaces as any Arrow error (incl. huge allocations) or bad UTF-8
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: corrupt Arrow deletion file ({exc})") from exc
    column = pa.chunked_array(chunks, types[0])
    if column.null_count:
        raise FormatError(f"{path}: deletion file contains nulls")
    values = column.to_numpy()
    if len(values) and (values.min() < 0 or values.max() >= physical_rows):
        bad = int(values.min()) if values.min() < 0 else int(values.max())
        raise FormatError(f"{path}: deletes row {bad} but the fragment has {physical_rows} rows")
    return sorted_unique(values.astype(np.uint32))


def merged_deletion(existing: np.ndarray, new: np.ndarray, physical_rows: int,
                    read_version: int) -> tuple[DeletionFile, bytes] | None:
    """A fragment's next deletion vector: its ``existing`` deleted offsets plus ``new``.

    Returns the file's metadata (a fresh random id) and bytes, or None when every row
    of the fragment is then deleted (the fragment is dropped instead).
    """
    merged = sorted_unique(np.concatenate([np.asarray(existing, np.uint32),
                                           np.asarray(new, np.uint32)]))
    if len(merged) >= physical_rows:
        return None
    kind, data = encode_deletions(merged)
    return DeletionFile(kind, read_version, random.getrandbits(63), len(merged)), data
