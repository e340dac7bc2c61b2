"""Taking a handful of rows of a 2.1/2.2 leaf column (the point-lookup path).

A ``take`` of a few rows (what an index lookup asks for) spends most of its time in
per-call overhead of the general range machinery: page spans, chunk selection masks,
rep/def unravelling, field assembly. For a leaf column whose touched pages are mini-block
pages without lists, whose values can be located inside a chunk (see :mod:`sparse`), this
module goes straight from row numbers to values: page and chunk of each row from the
cached page metadata, one read per chunk, the chunk headers parsed together, then only
the wanted values (and def levels) unpacked. Anything else returns None and the caller
takes the general path, which gives the same values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile import sparse
from lance_sql.format.datafile.blocks import inflate
from lance_sql.format.datafile.compressive import ChunkBuffers
from lance_sql.format.datafile.decode_v2_1 import LeafColumn
from lance_sql.format.datafile.miniblock import MiniBlockPage
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

# Takes of at most this many rows use this path; larger ones the general one (whose
# vectorised chunk handling wins once the rows are many).
MAX_ROWS = 64


def take_leaf(column: LeafColumn, rows: np.ndarray) -> pa.Array | None:
    """Rows ``rows`` (sorted, unique, in range) of a leaf column, as its leaf type; None
    when a touched page does not suit this path."""
    row_starts = column.info.row_starts
    if row_starts.size == 2:  # one page
        return _take_page(column, 0, rows)
    pages = np.searchsorted(row_starts, rows, "right") - 1
    first, last = int(pages[0]), int(pages[-1])
    if first == last:
        return _take_page(column, first, rows - int(row_starts[first]))
    cuts = np.flatnonzero(pages[1:] != pages[:-1]) + 1
    pieces = []
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), rows.size], strict=True):
        p = int(pages[lo])
        piece = _take_page(column, p, rows[lo:hi] - int(row_starts[p]))
        if piece is None:
            return None
        pieces.append(piece)
    return pa.concat_arrays(pieces)


def suits(page: object) -> bool:
    """Whether ``page`` (a page decoder) can be taken from by this module."""
    if not isinstance(page, MiniBlockPage) or page.has_rep:
        return False
    return _values(page.layout.value_compression) is not None


def _values(enc: pb.CompressiveEncoding) -> tuple[pb.CompressiveEncoding, int | None] | None:
    """(encoding to locate values in, general compression scheme around it or None), or
    None when values cannot be located inside a chunk."""
    if cz.kind(enc) == "general" and sparse.supported(enc.general.values) and \
            cz.kind(enc.general.values) in ("flat", "variable"):
        return enc.general.values, int(enc.general.compression.scheme)
    if sparse.supported(enc):
        return enc, None
    return None


def _take_page(column: LeafColumn, p: int, rows: np.ndarray) -> pa.Array | None:
    page = column.page(p)
    if not suits(page):
        return None
    assert isinstance(page, MiniBlockPage)
    page.load()
    where = page.where
    n = page.chunk_sizes.size
    if page.shift is not None:  # every chunk but a shorter last one holds 2**shift rows
        cid = rows >> page.shift
        pos = rows & ((1 << page.shift) - 1)
    else:
        cid = np.searchsorted(page.row_end, rows, "right")
        if int(cid[-1]) >= n:
            raise FormatError(f"{where}: row {int(rows[-1])} past the page's chunks")
        pos = rows - page.first_row[cid]
    if int(cid[-1]) >= n:
        raise FormatError(f"{where}: row {int(rows[-1])} past the page's chunks")
    if rows.size == 1 or int(cid[0]) == int(cid[-1]):  # one chunk (rows are sorted)
        chunks = cid[:1]
        sel = np.zeros(rows.size, np.int64)
        raw = np.frombuffer(_read_chunk(page, int(chunks[0])), np.uint8)
        cstart = np.zeros(1, np.int64)
    else:
        chunks, sel = np.unique(cid, return_inverse=True)
        raw, cstart = page.chunk_bytes(chunks)
    counts = page.chunk_values[chunks]
    bufs, num_levels = _split(page, raw, cstart, page.chunk_sizes[chunks])
    valid = None
    if page.has_def:
        levels = cz.decode_levels(page.layout.def_compression, bufs[0], num_levels, where)
        if levels.size != int(num_levels.sum()) or not np.array_equal(num_levels, counts):
            raise FormatError(f"{where}: def levels do not match the chunk values")
        at = pos if chunks.size == 1 else (np.cumsum(num_levels) - num_levels)[sel] + pos
        valid = levels[at] == 0
        bufs = bufs[1:]
    found = _values(page.layout.value_compression)
    assert found is not None
    enc, scheme = found
    if scheme is not None:  # each chunk's value buffer compressed on its own
        first = bufs[0]
        bufs = [ChunkBuffers.join([inflate(scheme, raw[a : a + n], where) for a, n in
                                   zip(first.pos.tolist(), first.sizes.tolist(), strict=True)]),
                *bufs[1:]]
    block = sparse.decode(enc, bufs, counts, sel, pos, where)
    if block is None:
        return None
    values = page.values_to_arrow(block, valid)
    return values if values.type == column.leaf_type else None


def _read_chunk(page: MiniBlockPage, chunk: int) -> bytes | memoryview:
    start = int(page.chunk_offsets[chunk])
    return page.read(page.buffers[1][0] + start, int(page.chunk_sizes[chunk]))


def _split(page: MiniBlockPage, raw: np.ndarray, cstart: np.ndarray,
           csize: np.ndarray) -> tuple[list[ChunkBuffers], np.ndarray]:
    """The buffers (def levels if any, then values) of the chunks at ``cstart`` in
    ``raw``, and each chunk's level count; checked to lie inside their chunks."""
    where = page.where
    nlev = int(page.has_def)  # no rep here
    width = 4 if page.large else 2
    nsizes = nlev + page.nbuf
    head = (2 + 2 * nlev + width * page.nbuf + 7) & ~7
    if int(csize.min()) < head:
        raise FormatError(f"{where}: chunk smaller than its header")
    # the headers side by side: (chunks, head) bytes, read as little-endian words
    header = raw[cstart[:, None] + np.arange(head)].astype(np.int64)
    words = header[:, 0::2] | (header[:, 1::2] << 8)
    num_levels = words[:, 0]
    if width == 2:
        sizes = words[:, 1 : 1 + nsizes]
    else:
        level_sizes = words[:, 1 : 1 + nlev]
        big = words[:, 1 + nlev : 1 + nlev + 2 * page.nbuf]
        sizes = np.concatenate([level_sizes, big[:, 0::2] | (big[:, 1::2] << 16)], axis=1)
    padded = (sizes + 7) & ~7
    ends = np.cumsum(padded, axis=1) + head
    starts = ends - padded
    if np.any(ends[:, -1] > csize):
        raise FormatError(f"{where}: chunk buffers run past the chunk")
    if nlev and int(num_levels.min()) <= 0:
        raise FormatError(f"{where}: chunk with levels has no level count")
    bufs = [ChunkBuffers(raw, cstart + starts[:, i], sizes[:, i]) for i in range(nsizes)]
    return bufs, num_levels
