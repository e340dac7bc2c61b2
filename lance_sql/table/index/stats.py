"""``ds.stats.index_stats(name)``: pylance's statistics of one index, from its entries
and files.

The shape is pylance 14.0.2's: coverage counts over the table's live fragments (rows
net of deletions), one statistics dict per segment (entry of that name) in ``indices``
and, again, ``segments``. A BTREE segment reports its page count and its smallest and
largest key as pylance prints them (the first and last page holding a non-NULL key:
``"NULL"`` when that page starts with NULLs, ``"N/A"`` when every key is NULL); a BITMAP
segment its number of bitmaps (distinct keys, NULL included).
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from lance_sql.errors import IndexNotFoundError
from lance_sql.format.bitmap import TYPE_URL as BITMAP_TYPE_URL
from lance_sql.format.btree import TYPE_URL as BTREE_TYPE_URL
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import numpy_of
from lance_sql.table.index.bitmap import BitmapIndex
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.manage import type_name

_EPOCH_DAY = dt.date(1970, 1, 1)


def index_stats(store: ObjectStore, manifest: Manifest, name: str) -> dict:
    """pylance's ``index_stats`` dict of index ``name``; IndexNotFoundError (a
    KeyError, as pylance raises) when there is none."""
    segments = [i for i in decode_index_section(manifest.index_section) if i.name == name]
    if not segments:
        raise IndexNotFoundError(f'Index "{name}" not found')
    live = {f.id: f.num_rows for f in manifest.fragments}
    covered = set().union(*(set(s.fragment_ids or ()) for s in segments)) & set(live)
    per_segment = [_segment_stats(store, manifest, s) for s in segments]
    created = [s.created_at_ms for s in segments if s.created_at_ms is not None]
    return {
        "index_type": type_name(segments[0].type_url),
        "name": name,
        "num_indices": len(segments),
        "num_segments": len(segments),
        "indices": per_segment,
        "segments": [dict(s) for s in per_segment],
        "num_indexed_fragments": len(covered),
        "num_indexed_rows": sum(live[f] for f in covered),
        "num_unindexed_fragments": len(live) - len(covered),
        "num_unindexed_rows": sum(r for f, r in live.items() if f not in covered),
        "num_indexed_rows_per_delta": [
            sum(live[f] for f in set(s.fragment_ids or ()) & set(live)) for s in segments],
        "updated_at_timestamp_ms": max(created) if created else None,
    }


def _segment_stats(store: ObjectStore, manifest: Manifest, index: IndexMetadata) -> dict:
    """One segment's own statistics (empty for index types lance_sql does not read)."""
    top = {f.id: f for f in manifest.schema.fields}
    field = top.get(index.fields[0]) if len(index.fields) == 1 else None
    if field is None:
        return {}
    key_type = field.to_scan_arrow().type
    if index.type_url == BITMAP_TYPE_URL:
        return {"num_bitmaps": BitmapIndex.open(store, manifest, index, key_type).num_bitmaps}
    if index.type_url != BTREE_TYPE_URL:
        return {}
    lookup = BTreeIndex.open(store, manifest, index, key_type).lookup
    keyed = np.flatnonzero(numpy_of(lookup.maxs.is_valid()))
    if not keyed.size:
        low = high = "N/A"
    else:
        low, high = display(lookup.mins[int(keyed[0])]), display(lookup.maxs[int(keyed[-1])])
    return {"min": low, "max": high, "num_pages": lookup.num_pages}


def display(value: pa.Scalar) -> str:
    """A key as pylance's statistics print it (DataFusion's ``ScalarValue`` text):
    ``NULL``, ``true``, integers and floats in plain positional notation (``3``,
    ``0.0000001``, ``NaN``, ``inf``), strings as they are, binary as lower-case hex,
    dates as ISO dates, timestamps as their raw count of units."""
    if not value.is_valid:
        return "NULL"
    t = value.type
    if pa.types.is_boolean(t):
        return "true" if value.as_py() else "false"
    if pa.types.is_floating(t):
        number = np.float32(value.as_py()) if t.bit_width == 32 else np.float64(value.as_py())
        if np.isnan(number):
            return "NaN"
        if np.isinf(number):
            return "inf" if number > 0 else "-inf"
        return np.format_float_positional(number, trim="-")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes(value.as_py()).hex()
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        return str(value.cast(pa.int64()).as_py())
    if pa.types.is_date32(t):
        return (_EPOCH_DAY + dt.timedelta(days=value.cast(pa.int32()).as_py())).isoformat()
    return str(value.as_py())
