"""Whole mini-block pages of many files decoded together, in one vectorised pass.

A table of many small fragments holds, per column, many small pages of the same shape
and encoding (one per fragment, written by the same writer). Decoding each alone costs a
fixed few hundred microseconds of interpreter work (chunk headers, unpacking, Arrow
conversion) for a thousand values; decoding their chunks together costs that once. The
chunks of a mini-block page are self-contained (their own headers, sizes and level and
value buffers; the page's layout gives only the encodings), so the chunks of pages with
the same :meth:`MiniBlockPage.batch_key` decode as the chunks of one page. A list's rows
may cross chunks but never pages, so whole pages of lists decode together too, into the
levels of all their rows (:func:`decode_whole_levels`).

Pure logic over the pages' own read callables: the caller picks the pages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.format.datafile import repdef
from lance_sql.format.datafile.miniblock import MiniBlockPage
from lance_sql.format.datafile.reader import UNEXPECTED


def decode_whole(pages: Sequence[MiniBlockPage]) -> pa.Array | None:
    """Every row of ``pages`` (all of one :meth:`~MiniBlockPage.batch_key`), page after
    page, as one array. None when anything does not add up or fails to decode: the pages
    are then read one by one, whose decoders raise the error naming the file and page."""
    try:
        return _decode(pages)
    except (LanceError, *UNEXPECTED):
        return None


def decode_whole_levels(pages: Sequence[MiniBlockPage]
                        ) -> tuple[list[repdef.LayerData], pa.Array] | None:
    """Every row of ``pages`` (all of one ``batch_key(levels=True)``: lists and nullable
    items allowed), page after page, as the nesting layers (outermost first) and the
    leaf values a field is built from. Pages hold whole rows, so the levels of their
    chunks one after another are the levels of all their rows. None as
    :func:`decode_whole`."""
    try:
        return _decode_levels(pages)
    except (LanceError, *UNEXPECTED):
        return None


def _decode(pages: Sequence[MiniBlockPage]) -> pa.Array | None:
    first = pages[0]
    key = first.batch_key()
    if key is None:
        return None
    if any(page.batch_key() != key for page in pages):
        return None
    rep, def_, block, num_levels, rows = _decode_chunks(pages)
    total = int(num_levels.sum())
    if total != rows or block.n != total or (def_ is not None and def_.size != total):
        return None
    if repdef.visible(def_, first.layers) is not None:
        return None  # value slots are not rows (the general path sorts them out)
    out = first.values_to_arrow(block, None if def_ is None else def_ == 0)
    return out if len(out) == rows else None


def _decode_levels(pages: Sequence[MiniBlockPage]
                   ) -> tuple[list[repdef.LayerData], pa.Array] | None:
    first = pages[0]
    key = first.batch_key(levels=True)
    if key is None or any(page.batch_key(levels=True) != key for page in pages):
        return None
    rep, def_, block, num_levels, rows = _decode_chunks(pages)
    total = int(num_levels.sum())
    if (rep is not None and rep.size != total) or (def_ is not None and def_.size != total):
        return None
    vis = repdef.visible(def_, first.layers)
    if block.n != (total if vis is None else int(np.count_nonzero(vis))):
        return None
    slot_valid = None
    if def_ is not None:
        slot_valid = def_ == 0 if vis is None else def_[vis] == 0
    values = first.values_to_arrow(block, slot_valid)
    layers = repdef.unravel(rep, def_, first.layers, total, first.where)
    if layers[0].count != rows or layers[-1].count != len(values):
        return None
    return layers, values


def _decode_chunks(pages: Sequence[MiniBlockPage]):
    """(rep, def, value block, level counts per chunk, rows) of all the chunks of
    ``pages``, read straight into one buffer (no bytes object per page and no joining
    copy: a page of a 1,000-row fragment is a few KiB) and decoded as one page's."""
    first = pages[0]
    spans = [page.chunk_span() for page in pages]
    raw = np.empty(sum(size for _, size in spans), np.uint8)
    starts, sizes, counts = [], [], []
    base = rows = 0
    for page, (offset, size) in zip(pages, spans, strict=True):
        if size:
            into = getattr(page.read, "into", None)
            if into is not None:
                into(offset, raw[base : base + size])
            else:
                raw[base : base + size] = np.frombuffer(page.read(offset, size), np.uint8)
        starts.append(page.chunk_offsets + base)
        sizes.append(page.chunk_sizes)
        counts.append(page.chunk_values)
        base += size
        rows += page.num_rows
    num_levels, values, joined = first.split_chunks(
        raw, np.concatenate(starts), np.concatenate(sizes), np.concatenate(counts))
    rep, def_, block, num_levels, _ = first.decode_split(num_levels, values, joined)
    return rep, def_, block, num_levels, rows
