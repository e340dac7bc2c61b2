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

BITMAP_THRESHOLD = 5000
_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def choose_kind(num_deleted: int) -> DeletionKind:
    return "bitmap" if num_deleted >= BITMAP_THRESHOLD else "arrow"


def encode_deletions(offsets: np.ndarray) -> tuple[DeletionKind, bytes]:
    """Serialize a set of deleted row offsets (any order, duplicates allowed)."""
    values = np.unique(np.asarray(offsets, dtype=np.uint32))
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


def decode_deletions(kind: DeletionKind, data: bytes, path: str) -> np.ndarray:
    """Deleted row offsets from a deletion file's bytes; FormatError if corrupt."""
    if kind == "bitmap":
        try:
            bitmap = BitMap.deserialize(data)
        except Exception as exc:  # pyroaring raises ValueError/OverflowError variants
            raise FormatError(f"{path}: corrupt roaring deletion bitmap ({exc})") from exc
        return np.asarray(bitmap.to_array(), dtype=np.uint32)
    try:
        reader = pa.ipc.open_file(pa.py_buffer(data))
        table = reader.read_all()
        types = [f.type for f in table.schema]
        column = table.column(0) if len(types) == 1 else None  # reads the (UTF-8) name
    # corrupt IPC metadata surfaces as any Arrow error (incl. huge allocations) or bad UTF-8
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: corrupt Arrow deletion file ({exc})") from exc
    if column is None or not pa.types.is_integer(types[0]):
        raise FormatError(f"{path}: deletion file must hold one integer column, got {types}")
    if column.null_count:
        raise FormatError(f"{path}: deletion file contains nulls")
    values = column.to_numpy()
    if len(values) and (values.min() < 0 or values.max() > np.iinfo(np.uint32).max):
        raise FormatError(f"{path}: deletion file has offsets outside the u32 range")
    return np.unique(values.astype(np.uint32))


def merged_deletion(existing: np.ndarray, new: np.ndarray, physical_rows: int,
                    read_version: int) -> tuple[DeletionFile, bytes] | None:
    """A fragment's next deletion vector: its ``existing`` deleted offsets plus ``new``.

    Returns the file's metadata (a fresh random id) and bytes, or None when every row
    of the fragment is then deleted (the fragment is dropped instead).
    """
    merged = np.union1d(existing, new).astype(np.uint32)
    if len(merged) >= physical_rows:
        return None
    kind, data = encode_deletions(merged)
    return DeletionFile(kind, read_version, random.getrandbits(63), len(merged)), data
