"""Pruning a scan by row address: the rows a filter on ``_rowaddr`` or ``_rowid`` can match.

Shared by the SQL provider and the Spark reader, which both cut a version's fragments into
units of work and skip those (or the parts of them) such a filter cannot reach.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

import numpy as np

from lance_sql.expr import Expr, intersect_ranges, rowaddr_bounds
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.sorted_sets import sorted_unique
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID
from lance_sql.table.files.row_id_index import MISSING, row_id_index

# A `_rowid` filter on a table with stable ids is resolved through the row-id index when
# it names at most this many ids; wider ones prune nothing.
MAX_INDEXED_IDS = 1 << 20

Ranges = list[tuple[int, int]]


def address_ranges(store: ObjectStore, manifest: Manifest, predicate: Expr) -> Ranges | None:
    """Sorted, disjoint half-open row-address ranges outside of which ``predicate`` cannot
    hold; None when it may hold anywhere.

    Conditions on ``_rowaddr`` bound addresses directly, and so do those on ``_rowid``
    where ids are addresses; on a table with stable row ids, the ids are looked up in the
    row-id index.
    """
    ranges = rowaddr_bounds(predicate, ROW_ADDR)
    by_id = rowaddr_bounds(predicate, ROW_ID)
    if by_id is not None and manifest.uses_stable_row_ids:
        by_id = _id_ranges_to_addresses(store, manifest, by_id)
    if by_id is not None:
        ranges = by_id if ranges is None else intersect_ranges(ranges, by_id)
    return ranges


def _id_ranges_to_addresses(store: ObjectStore, manifest: Manifest,
                            ranges: Ranges) -> Ranges | None:
    """Stable row-id ranges as the address ranges of their live rows (via the index)."""
    if sum(hi - lo for lo, hi in ranges) > MAX_INDEXED_IDS:
        return None
    ids = np.concatenate([np.arange(lo, hi, dtype=np.uint64) for lo, hi in ranges]
                         or [np.empty(0, np.uint64)])
    addresses = row_id_index(store, manifest).lookup(ids)
    addresses = sorted_unique(addresses[addresses != MISSING])
    if addresses.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(addresses) != 1) + 1
    starts = addresses[np.concatenate(([0], breaks))]
    ends = addresses[np.append(breaks, addresses.size) - 1] + np.uint64(1)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def fragment_spans(fragments: Iterable[Fragment],
                   ranges: Ranges | None) -> list[tuple[Fragment, int, int]]:
    """``(fragment, start, stop)``: the physical rows of each fragment with live rows that
    span every part of it ``ranges`` reach (None: the whole fragment), in fragment order.

    ``ranges`` must be sorted and disjoint (as :func:`address_ranges` gives them).
    """
    lows = [lo for lo, _ in ranges or ()]
    highs = [hi for _, hi in ranges or ()]
    out = []
    for frag in fragments:
        if frag.physical_rows == 0 or frag.num_rows == 0:
            continue
        if ranges is None:
            out.append((frag, 0, frag.physical_rows))
            continue
        base = frag.id << 32
        end = base + frag.physical_rows
        first, last = bisect_right(highs, base), bisect_left(lows, end)  # reaching: [first, last)
        if first < last:
            out.append((frag, max(lows[first], base) - base, min(highs[last - 1], end) - base))
    return out
