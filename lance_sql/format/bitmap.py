"""Lance's scalar BITMAP index, as pylance 14.0.2 lays it out (pure: arrays in, bytes out).

Facts measured against pylance 14.0.2 (``ds.create_scalar_index(col, "BITMAP")``):

* The manifest entry is named ``{column}_idx`` (by default), ``fields = [field id]``,
  ``index_version = 0`` (also on stable-row-id tables), ``index_details`` an empty Any
  of type ``/lance.table.BitmapIndexDetails``, and ``files`` lists one file.
* ``_indices/{uuid}/bitmap_page_lookup.lance`` (Lance file 2.2) has one row per distinct
  value of the covered rows: ``keys: <key type>`` (nullable; the NULL key first, then
  the values in ascending order) and ``bitmaps: binary`` (nullable, never NULL), with
  schema metadata ``lance:index_stats`` = ``{"num_bitmaps":N}`` (N = rows).
* A bitmap is a *row-address tree map*: ``u32 count`` then, per fragment in ascending
  order, ``u32 fragment id``, ``u32 size`` and ``size`` bytes of a portable 32-bit
  Roaring bitmap of row offsets; a size of 0 means every row of the fragment (pylance
  writes it on no fragment we built, but readers must take it). The 64-bit values are
  row addresses (``fragment << 32 | offset``), except on stable-row-id tables, where
  they are stable row ids (split the same way).
* ``optimize_indices`` after appends writes one new bitmap index covering old and new
  fragments (as for BTREE).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lance_sql.errors import FormatError
from lance_sql.float_order import total_order
from lance_sql.format.btree import sort_entries
from lance_sql.numpy_arrow import array_from_numpy, numpy_of

TYPE_URL = "/lance.table.BitmapIndexDetails"
LOOKUP_FILE = "bitmap_page_lookup.lance"
INDEX_FILES = (LOOKUP_FILE,)
KEYS, BITMAPS = "keys", "bitmaps"
STATS_KEY = "lance:index_stats"
INDEX_VERSION = 0
_HEADER = struct.Struct("<II")  # fragment id, bitmap size


def lookup_schema(key_type: pa.DataType, num_bitmaps: int) -> pa.Schema:
    """Schema of the bitmap file: one key and its serialized row set a row."""
    return pa.schema([pa.field(KEYS, key_type), pa.field(BITMAPS, pa.binary())],
                     metadata={STATS_KEY: json.dumps({"num_bitmaps": num_bitmaps},
                                                     separators=(",", ":"))})


def num_bitmaps(schema_metadata: Mapping[bytes, bytes] | None, rows: int) -> int:
    """The bitmap count the file's stats metadata records (its row count when absent
    or unreadable: each row is one bitmap)."""
    raw = (schema_metadata or {}).get(STATS_KEY.encode())
    if raw is None:
        return rows
    try:
        found = json.loads(raw).get("num_bitmaps")
    except (ValueError, AttributeError):
        return rows
    return found if isinstance(found, int) and not isinstance(found, bool) else rows


def encode_row_set(values: np.ndarray) -> bytes:
    """A sorted, unique uint64 array as a row-address tree map (one Roaring bitmap per
    distinct high word; no run containers, which every Roaring reader takes)."""
    values = np.asarray(values, np.uint64)
    highs = (values >> np.uint64(32)).astype(np.uint32)
    lows = (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    cuts = np.flatnonzero(np.diff(highs)) + 1 if values.size else np.empty(0, np.int64)
    starts = [0, *cuts.tolist()] if values.size else []
    ends = [*cuts.tolist(), int(values.size)] if values.size else []
    parts = [struct.pack("<I", len(starts))]
    for start, end in zip(starts, ends, strict=True):  # once a fragment, not a row
        body = BitMap(lows[start:end]).serialize()
        parts.append(_HEADER.pack(int(highs[start]), len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_row_set(data: bytes, path: str, fragment_rows: Mapping[int, int] | None,
                   id_limit: int = 0) -> np.ndarray:
    """The sorted uint64 values of a row-address tree map. ``fragment_rows`` gives the
    physical rows of each fragment still in the table: entries of other fragments are
    skipped (never expanded), and an entry naming a row past its fragment's end, a size
    past the data's end or an undecodable bitmap is a FormatError naming ``path``.
    ``fragment_rows`` None: the values are stable row ids, each below ``id_limit``
    (the table's next row id; checked likewise, an entry of "every row" refused)."""
    view = memoryview(data)
    if len(view) < 4:
        raise FormatError(f"{path}: bitmap of {len(view)} bytes has no entry count")
    (count,) = struct.unpack_from("<I", view, 0)
    if count * _HEADER.size > len(view) - 4:  # checked before anything is sized by it
        raise FormatError(f"{path}: bitmap claims {count} fragments in {len(view)} bytes")
    pos, out = 4, []
    for _ in range(count):  # once a fragment
        if pos + _HEADER.size > len(view):
            raise FormatError(f"{path}: bitmap entry header past the data's end")
        fragment, size = _HEADER.unpack_from(view, pos)
        pos += _HEADER.size
        if size > len(view) - pos:
            raise FormatError(f"{path}: bitmap of fragment {fragment} claims {size} bytes, "
                              f"{len(view) - pos} are left")
        body, pos = view[pos:pos + size], pos + size
        if fragment_rows is None:  # row ids: the "fragment" is their high word
            rows = min(max(id_limit - (fragment << 32), 0), 1 << 32)
            if size == 0:
                raise FormatError(f"{path}: a bitmap of row ids selects a whole range "
                                  f"(high word {fragment}); the index is corrupt")
        else:
            found = fragment_rows.get(fragment)
            if found is None:
                continue
            rows = found
        if size == 0:  # the whole fragment
            offsets = np.arange(rows, dtype=np.uint64)
        else:
            try:
                bitmap = BitMap.deserialize(bytes(body))
            except Exception as exc:  # pyroaring raises several exception types
                raise FormatError(f"{path}: corrupt bitmap of fragment {fragment} ({exc})"
                                  ) from exc
            if len(bitmap) and bitmap.max() >= rows:
                raise FormatError(f"{path}: bitmap names row {bitmap.max()} of fragment "
                                  f"{fragment}, which has {rows} rows; the index is corrupt")
            offsets = np.asarray(bitmap.to_array(), np.uint64)
        out.append((np.uint64(fragment) << np.uint64(32)) | offsets)
    if not out:
        return np.empty(0, np.uint64)
    joined = np.concatenate(out)
    if joined.size > 1 and not bool((joined[1:] > joined[:-1]).all()):
        joined = np.unique(joined)  # (fragments listed out of order: a foreign writer)
    return joined


def build_bitmaps(values: pa.Array, ids: np.ndarray) -> pa.Table:
    """The bitmap file's rows for entries (``values[i]`` held at ``ids[i]``, a row address
    or row id): one row per distinct value, NULL first then ascending (floats by IEEE total
    order: -0.0 and 0.0, NaNs of other bits, are separate keys, as pylance keeps them)."""
    entries = sort_entries(values, ids)
    keys, sorted_ids = entries.column(0).combine_chunks(), numpy_of(entries.column(1))
    n = len(keys)
    if not n:
        return lookup_schema(values.type, 0).empty_table()
    valid = numpy_of(keys.is_valid())
    if pa.types.is_floating(keys.type):
        order = total_order(numpy_of(keys.fill_null(pa.scalar(0, keys.type))))
        changed = order[1:] != order[:-1]
    else:
        changed = numpy_of(pc.not_equal(keys[1:], keys[:-1]).fill_null(False))
    changed = changed | (valid[1:] != valid[:-1])
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
    group = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
    order = np.lexsort((sorted_ids, group))  # each key's ids ascending
    sorted_ids = sorted_ids[order]
    bounds = np.append(starts, n).tolist()
    # one tree map a distinct value (a bitmap index is for columns of few values)
    bitmaps = [encode_row_set(sorted_ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:],
                                                                 strict=True)]
    schema = lookup_schema(values.type, len(bitmaps))
    return pa.Table.from_arrays([keys.take(array_from_numpy(starts)),
                                 pa.array(bitmaps, pa.binary())], schema=schema)
