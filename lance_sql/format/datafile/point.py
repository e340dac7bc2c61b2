"""Taking a handful of rows of a 2.1/2.2 leaf column (the point-lookup path).

A ``take`` of a few rows (what an index lookup asks for) spends most of its time in
per-call overhead of the general range machinery: page spans, chunk selection masks,
rep/def unravelling, field assembly. For a leaf column whose touched pages are mini-block
pages without lists, whose values can be located inside a chunk (see :mod:`sparse`; LZ4 /
ZSTD chunks of flat or variable values are inflated one by one first), this module goes
straight from row numbers to values: page and chunk of each row from the cached page
metadata, one read per chunk, the chunk headers parsed together, then only the wanted
values (and def levels) unpacked. A single row skips arrays altogether: its chunk header
is parsed with ``struct`` and its value found with integer arithmetic, what the page's
layout gives for that derived once and kept on the page (as for the single integers a
sorted search reads, :func:`search_sorted`). :func:`read_run`
is the same idea for a short run of consecutive rows (a page of an index): the chunks
holding it decoded in one call.

Anything else returns None and the caller takes the general path, which gives the same
values (tests compare the two).
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile import fsst, lz4_frames, memory, sparse
from lance_sql.format.datafile.blocks import MAX_INFLATE, Block, Fixed, Variable, inflate
from lance_sql.format.datafile.compressive import ChunkBuffers, fsst_decode
from lance_sql.format.datafile.decode_v2_1 import LeafColumn
from lance_sql.format.datafile.miniblock import MiniBlockPage
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

# Takes of at most this many rows use this path; larger ones the general one (whose
# vectorised chunk handling wins once the rows are many).
MAX_ROWS = 64
# Reads of at most this many consecutive rows within one page use :func:`read_run`.
MAX_RUN = 8192
# Larger takes of scattered rows (mostly isolated, at most this many) use this path too:
# their chunks are read and parsed together and only the wanted values unpacked, which
# beats the general path's range machinery.
MAX_SCATTERED = 16384
# Scattered chunks less than this many bytes apart are read in one read. A read costs
# about as much as copying ~16 KiB more, and the general path's 64 KiB gap would make a
# take of 100 rows spread over a 1M-row column read nearly all of it.
SCATTERED_GAP = 16 * 1024
# Searches of a sorted string / binary run answered in the file (see search_sorted): a
# count tests read to tell that path from a decode of the whole run.
SORTED_BYTES_SEARCHES = [0]

K = TypeVar("K", int, bytes)  # a key of a sorted search: integers or byte strings


def scattered(rows: int, runs: int) -> bool:
    """Whether a take of ``rows`` rows in ``runs`` runs of consecutive rows is a scattered
    one this module handles whatever the chunks' compression."""
    return rows <= MAX_SCATTERED and 2 * runs >= rows


def take_leaf(column: LeafColumn, rows: np.ndarray, *,
              compressed_only: bool = False) -> pa.Array | None:
    """Rows ``rows`` (sorted, unique, in range) of a leaf column, as its leaf type; None
    when a touched page does not suit this path.

    ``compressed_only`` (for larger takes): only when every touched page holds LZ4 / ZSTD
    chunks, where the general path would decode every value of each chunk inflated
    (this path locates just the wanted ones); None otherwise, before reading anything.
    """
    row_starts = column.info.row_starts
    if compressed_only:  # every page the rows span (a cheap superset of those touched)
        ends = np.searchsorted(row_starts, [rows[0], rows[-1]], "right") - 1
        if not all(_compressed(column.page(p)) for p in range(int(ends[0]), int(ends[1]) + 1)
                   if row_starts[p + 1] > row_starts[p]):
            return None
    if row_starts.size == 2:  # one page
        pages = np.zeros(1, np.int64)
    else:
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


def take_row(column: LeafColumn, row: int) -> pa.Array | None:
    """Row ``row`` (in range) of a leaf column, as its leaf type: :func:`take_leaf` of one
    row without the row arrays (its page found by a scalar search); None when its page
    does not suit this path."""
    row_starts = column.info.row_starts
    p = 0 if row_starts.size == 2 else int(row_starts.searchsorted(row, "right")) - 1
    page = column.page(p)
    plain = _row_page(page)
    if plain is not None:  # (made from the column: the page's type is the column's)
        one = _take_plain(page, plain, row - int(row_starts[p]))
        return one if page.leaf_type is column.leaf_type or one.type == column.leaf_type \
            else None
    if not suits(page):
        return None
    assert isinstance(page, MiniBlockPage)
    page.load()
    at = row - int(row_starts[p])
    one = _take_one(page, at)
    if one is not None:
        return one if one.type == column.leaf_type else None
    return _take_page(column, p, np.array([at], np.int64))


def read_run(column: LeafColumn, start: int, stop: int) -> pa.Array | None:
    """Rows ``[start, stop)`` of a leaf column (a short run, e.g. one page of an index),
    as its leaf type: the chunks holding them decoded in one call; None when the run
    leaves its page or the page is not a mini-block page without lists."""
    row_starts = column.info.row_starts
    p = int(np.searchsorted(row_starts, start, "right")) - 1
    if stop > int(row_starts[p + 1]):
        return None
    page = column.page(p)
    if not isinstance(page, MiniBlockPage) or page.has_rep:
        return None
    page.load()
    a, b = start - int(row_starts[p]), stop - int(row_starts[p])
    c0, c1 = _chunk_span(page, a, b)
    raw, cstart = page.chunk_bytes(np.arange(c0, c1 + 1))
    counts = page.chunk_values[c0 : c1 + 1]
    values = _decode_read_chunks(page, raw, cstart, counts, page.chunk_sizes[c0 : c1 + 1])
    if values.type != column.leaf_type:
        return None
    first = a - int(page.first_row[c0])
    return values if first == 0 and b - a == len(values) else values.slice(first, b - a)


def read_runs(column: LeafColumn, starts: np.ndarray, stops: np.ndarray
              ) -> list[pa.Array | None]:
    """:func:`read_run` of many runs ``[starts[i], stops[i])`` (sorted, disjoint, non-empty;
    many pages of an index, say): the chunks of all the runs within one page read
    together and decoded in one call, each run a slice of the values. A run that leaves
    its page, or lies in a page this path does not take, is None (the caller reads it
    alone)."""
    row_starts = column.info.row_starts
    out: list[pa.Array | None] = [None] * len(starts)
    pages = np.searchsorted(row_starts, starts, "right") - 1
    inside = stops <= row_starts[pages + 1]
    for p in np.unique(pages[inside]).tolist():
        at = np.flatnonzero(inside & (pages == p))
        page = column.page(p)
        if not isinstance(page, MiniBlockPage) or page.has_rep:
            continue
        page.load()
        where = page.where
        a, b = starts[at] - int(row_starts[p]), stops[at] - int(row_starts[p])
        if page.shift is not None:
            c0, c1 = a >> page.shift, (b - 1) >> page.shift
        else:
            c0 = np.searchsorted(page.row_end, a, "right")
            c1 = np.searchsorted(page.row_end, b - 1, "right")
        if int(c1.max()) >= page.chunk_sizes.size:
            raise FormatError(f"{where}: row {int(b.max()) - 1} past the page's chunks")
        wanted = np.zeros(page.chunk_sizes.size, bool)
        wanted[cz.range_indices(c0, c1 - c0 + 1)] = True
        chunks = np.flatnonzero(wanted)
        raw, cstart = page.chunk_bytes(chunks, SCATTERED_GAP)
        counts = page.chunk_values[chunks]
        values = _decode_read_chunks(page, raw, cstart, counts, page.chunk_sizes[chunks])
        if values.type != column.leaf_type:
            continue
        # where each run starts among the values of the chunks read
        before = np.cumsum(counts) - counts
        first = before[np.searchsorted(chunks, c0)] + a - page.first_row[c0]
        for i, f, n in zip(at.tolist(), first.tolist(), (b - a).tolist(), strict=True):
            out[i] = values.slice(f, n)
    return out


def suits(page: object) -> bool:
    """Whether ``page`` (a page decoder) can be taken from by this module."""
    if not isinstance(page, MiniBlockPage) or page.has_rep:
        return False
    return page_values(page) is not None


def page_values(page: MiniBlockPage) -> tuple[pb.CompressiveEncoding, int | None] | None:
    """:func:`_values` of the page's value encoding, found once per page (kept on it)."""
    layout = page.point_layout
    if layout is None:  # (two threads may both find it: the same answer)
        layout = page.point_layout = (_values(page.layout.value_compression),)
    return layout[0]


def _compressed(page: object) -> bool:
    """A page this module takes from whose chunks are compressed (LZ4 / ZSTD)."""
    if not suits(page):
        return False
    assert isinstance(page, MiniBlockPage)
    found = page_values(page)
    return found is not None and found[1] is not None


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
    if rows.size == 1:
        one = _take_one(page, int(rows[0]))
        if one is not None:
            return one if one.type == column.leaf_type else None
    where = page.where
    n = page.chunk_sizes.size
    if page.shift is not None:  # every chunk but a shorter last one holds 2**shift rows
        cid = rows >> page.shift
        pos = rows & ((1 << page.shift) - 1)
    else:
        cid = np.searchsorted(page.row_end, rows, "right")
        pos = rows - page.first_row[np.minimum(cid, n - 1)]
    if int(cid[-1]) >= n:
        raise FormatError(f"{where}: row {int(rows[-1])} past the page's chunks")
    if rows.size == 1 or int(cid[0]) == int(cid[-1]):  # one chunk (rows are sorted)
        chunks = cid[:1]
        sel = np.zeros(rows.size, np.int64)
        heads = sel[:1]
        raw = np.frombuffer(_read_chunk(page, int(chunks[0])), np.uint8)
        cstart = np.zeros(1, np.int64)
    else:
        # rows ascend, so their chunks do: each new chunk where the chunk id changes
        new = np.empty(cid.size, bool)
        new[0] = True
        np.not_equal(cid[1:], cid[:-1], out=new[1:])
        heads = new.nonzero()[0]  # the first row of each chunk
        chunks = cid[heads]
        sel = new.cumsum() - 1
        raw, cstart = page.chunk_bytes(chunks, SCATTERED_GAP)
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
    found = page_values(page)
    assert found is not None
    enc, scheme = found
    if scheme is not None:  # each chunk's value buffer compressed on its own
        first = bufs[0]
        if scheme == 1:
            pieces = inflate_lz4(raw, first.pos, first.sizes, where)
        else:
            pieces = [inflate(scheme, raw[a : a + size], where, buffer=True) for a, size in
                      zip(first.pos.tolist(), first.sizes.tolist(), strict=True)]
        if len(bufs) == 1 and cz.kind(enc) in ("variable", "fsst"):
            block = inflated_strings(enc, pieces, counts, sel, pos, heads, where)
            return _arrow(page, column, block, valid)
        bufs = [ChunkBuffers.join(listed(pieces)), *bufs[1:]]
    return _arrow(page, column, sparse.decode(enc, bufs, counts, sel, pos, where), valid)


def inflate_lz4(raw: np.ndarray, pos: np.ndarray, sizes: np.ndarray, where: str
                 ) -> list[pa.Buffer | bytes] | lz4_frames.Inflated:
    """:func:`~.blocks.inflate` of the LZ4 buffers ``raw[pos[i] : pos[i] + sizes[i]]``
    (each a u32 size, then a block): :func:`inflate_lz4_runs` of one run."""
    done = inflate_lz4_runs([(raw, pos, sizes, where)])
    assert not isinstance(done, lz4_frames.Inflating)  # (only when begun)
    return done


def inflate_lz4_runs(runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, str]],
                     *, begin: bool = False
                     ) -> list[pa.Buffer | bytes] | lz4_frames.Inflated | lz4_frames.Inflating:
    """The LZ4 buffers ``raw[pos[i] : pos[i] + sizes[i]]`` of every run ``(raw, pos,
    sizes, where)`` (the chunks of one page each, say) inflated, in order: their prefixes
    read and bounded (:func:`lz4_claims`), then one codec call per frame for them all
    (a take of 1000 strings inflates ~900 chunks: per-chunk calls add up), by
    :func:`~.lz4_frames.inflate_runs` (back to back, in one or two parts), or by
    :func:`~.lz4_frames.inflate_exact` (a list) for a single buffer or buffers no frame
    holds. With ``begin``, the frames of :func:`~.lz4_frames.inflate_runs` are only
    begun (an :class:`~.lz4_frames.Inflating`, see there); a list is inflated already."""
    claims = _all_claims(runs)
    if sum(c.size for c in claims) > 1:
        ends = np.cumsum([r[1].size for r in runs])
        done = lz4_frames.inflate_runs(
            [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs], claims,
            runs[0][3] if len(runs) == 1 else  # (each buffer named by its run's place)
            lambda i: runs[int(np.searchsorted(ends, i, "right"))][3], begin=begin)
        if done is not None:
            return done
    blocks: list[memoryview] = []
    for raw, pos, sizes, _ in runs:
        view = raw.data
        blocks.extend(view[a + 4 : a + n] for a, n in zip(pos.tolist(), sizes.tolist(),
                                                          strict=True))
    return lz4_frames.inflate_exact(blocks, np.concatenate(claims).tolist(), runs[0][3])


def _all_claims(runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, str]]
                ) -> list[np.ndarray]:
    """:func:`lz4_claims` of every run: the bounds checked once for all the runs (a take
    of many keys has a run per page it touches), each run's prefixes read; when a check
    fails, run by run, for the error of the first run at fault."""
    if len(runs) < 2:
        return [lz4_claims(*run) for run in runs]
    pos = np.concatenate([r[1] for r in runs]).astype(np.int64, copy=False)
    sizes = np.concatenate([r[2] for r in runs]).astype(np.int64, copy=False)
    ends = np.repeat(np.fromiter((r[0].size for r in runs), np.int64, len(runs)),
                     [r[1].size for r in runs])
    if pos.size and not ((sizes < 4).any() or (pos < 0).any() or (pos + sizes > ends).any()):
        full = np.concatenate([lz4_frames.prefixes(raw, p) for raw, p, _, _ in runs])
        if not (full > np.minimum(MAX_INFLATE, 255 * sizes + 64)).any():
            return np.split(full, np.cumsum([r[1].size for r in runs[:-1]]))
    return [lz4_claims(*run) for run in runs]


def lz4_claims(raw: np.ndarray, pos: np.ndarray, sizes: np.ndarray, where: str
               ) -> np.ndarray:
    """The sizes the prefixes of the LZ4 buffers ``raw[pos[i] : pos[i] + sizes[i]]``
    claim, read and bounded for all of them at once."""
    if not pos.size:
        return np.zeros(0, np.int64)
    if (sizes < 4).any():
        raise FormatError(f"{where}: LZ4 buffer of {int(sizes.min())} bytes has no size prefix")
    if int(pos.min()) < 0 or int((pos + sizes).max()) > raw.size:
        raise FormatError(f"{where}: an LZ4 buffer lies outside its page")
    full = lz4_frames.prefixes(raw, pos)
    over = full > np.minimum(MAX_INFLATE, 255 * sizes + 64)
    if over.any():
        i = int(over.argmax())
        raise FormatError(f"{where}: LZ4 buffer claims {int(full[i])} bytes from "
                          f"{int(sizes[i])}")
    return full


def _arrow(page: MiniBlockPage, column: LeafColumn, block: Block | None,
           valid: np.ndarray | None) -> pa.Array | None:
    """The taken values as the column's leaf type (None: not handled here)."""
    if block is None:
        return None
    values = page.values_to_arrow(block, valid)
    return values if values.type == column.leaf_type else None


def listed(pieces: list | lz4_frames.Inflated) -> list:
    """Inflated chunks as a list of buffers."""
    return pieces.pieces() if isinstance(pieces, lz4_frames.Inflated) else pieces


def inflated_strings(enc: pb.CompressiveEncoding, pieces: list | lz4_frames.Inflated,
                     counts: np.ndarray, sel: np.ndarray, pos: np.ndarray, heads: np.ndarray,
                     where: str) -> Block:
    """Strings ``pos[i]`` of inflated chunk ``pieces[sel[i]]`` (each its offsets, then its
    bytes; ``sel`` non-decreasing, ``pos`` increasing within a chunk; ``heads``: the
    first ``i`` of each chunk): only the offsets of the wanted rows and the bytes between
    them are copied out of the chunks. When each chunk holds one wanted row (keys spread
    over a big table) those bytes are the strings themselves, joined straight."""
    block = _gathered_strings(enc, pieces, counts, sel, pos, heads, where)
    return block if cz.kind(enc) == "variable" else fsst_decode(enc.fsst.symbol_table, block,
                                                                where)


def _gathered_strings(enc: pb.CompressiveEncoding, pieces: list | lz4_frames.Inflated,
                      counts: np.ndarray, sel: np.ndarray, pos: np.ndarray,
                      heads: np.ndarray, where: str) -> Variable:
    """:func:`inflated_strings` before any FSST decoding: the wanted strings as stored."""
    wb = sparse.string_offset_bytes(enc, where)
    if isinstance(pieces, lz4_frames.Inflated):
        sizes = pieces.sizes
    else:
        sizes = np.fromiter(map(len, pieces), np.int64, len(pieces))
    if (pos >= counts[sel]).any():
        raise FormatError(f"{where}: row past the values of its chunk")
    floor = (counts + 1) * wb  # the offsets' bytes: every string lies after them
    if (sizes < floor).any():
        raise FormatError(f"{where}: string chunk too small for its offsets")
    if isinstance(pieces, lz4_frames.Inflated):
        return _parts_strings(pieces, wb, floor, sel, pos, where)
    tiled = _tiled(pieces, sizes)
    if tiled is not None:
        return _tiled_strings(*tiled, wb, sizes, floor, sel, pos, where)
    views = [memoryview(p) for p in pieces]
    single = heads.size == sel.size
    # the offset words each chunk's rows need: from its first row's to its last row's + 1
    p0 = pos if single else pos[heads]
    p1 = (pos if single else pos[np.append(heads[1:], sel.size) - 1]) + 2
    words = np.frombuffer(b"".join([v[a:b] for v, a, b in
                                    zip(views, (p0 * wb).tolist(), (p1 * wb).tolist(),
                                        strict=True)]),
                          f"<u{wb}").astype(np.int64)
    if single:
        lo, hi = words[0::2], words[1::2]
        limit = sizes
    else:
        at = ((p1 - p0).cumsum() - (p1 - p0))[sel] + pos - p0[sel]
        lo, hi = words[at], words[at + 1]
        limit, floor = sizes[sel], floor[sel]
    if (hi < lo).any() or (hi > limit).any() or (lo < floor).any():
        raise FormatError(f"{where}: string offsets point outside their chunk")
    lens = hi - lo
    offsets = np.zeros(pos.size + 1, np.int64)
    lens.cumsum(out=offsets[1:])
    if single:  # the strings themselves
        data = np.frombuffer(b"".join([v[a:b] for v, a, b in
                                       zip(views, lo.tolist(), hi.tolist(), strict=True)]),
                             np.uint8)
    else:  # the bytes each chunk's rows span, then the strings out of them
        d0 = np.minimum.reduceat(lo, heads)
        d1 = np.maximum.reduceat(hi, heads)
        spans = np.frombuffer(b"".join([v[a:b] for v, a, b in
                                        zip(views, d0.tolist(), d1.tolist(), strict=True)]),
                              np.uint8)
        start = ((d1 - d0).cumsum() - (d1 - d0))[sel] + lo - d0[sel]
        data = spans[cz.range_indices(start, lens)]
    return Variable(offsets, data, pos.size)


# Counts of :func:`inflated_strings` calls answered from one tiled buffer (tests).
TILED_CALLS = [0]
_ADDRESS = operator.attrgetter("address")


def _tiled(pieces: list, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``pieces`` as one byte array and where each starts in it, when they are Arrow
    buffers lying back to back in memory (the slices of one inflated frame that
    :func:`~.lz4_frames.inflate_exact` returns); else None. The array views memory the
    pieces themselves cover (each starts where the one before ends), and keeps them
    alive, so no copy and no per-piece slicing is needed."""
    if len(pieces) < 2 or set(map(type, pieces)) != {pa.Buffer}:
        return None
    addr = np.fromiter(map(_ADDRESS, pieces), np.int64, len(pieces))
    if not np.array_equal(addr[1:], addr[:-1] + sizes[:-1]):
        return None
    whole = pa.foreign_buffer(int(addr[0]), int(sizes.sum()), base=pieces)
    TILED_CALLS[0] += 1
    return np.frombuffer(whole, np.uint8), addr - addr[0]


def _parts_strings(inflated: lz4_frames.Inflated, wb: int, floor: np.ndarray,
                   sel: np.ndarray, pos: np.ndarray, where: str) -> Variable:
    """:func:`_tiled_strings` of the chunks of each part of ``inflated``, joined (the rows
    of a part's chunks are a run of rows: ``sel`` is non-decreasing)."""
    TILED_CALLS[0] += 1
    bounds = inflated.bounds
    rows = np.searchsorted(sel, bounds).tolist()
    blocks = [_tiled_strings(np.frombuffer(part, np.uint8), inflated.starts[a:b], wb,
                             inflated.sizes[a:b], floor[a:b], sel[r0:r1] - a, pos[r0:r1],
                             where)
              for part, a, b, r0, r1 in zip(inflated.parts, bounds[:-1], bounds[1:],
                                            rows[:-1], rows[1:], strict=True)]
    if len(blocks) == 1:
        return blocks[0]
    ends = np.cumsum([int(b.offsets[-1]) for b in blocks])
    offsets = np.concatenate([blocks[0].offsets[:1]] + [
        b.offsets[1:] + (int(e) - int(b.offsets[-1])) for b, e in zip(blocks, ends, strict=True)])
    return Variable(offsets, np.concatenate([b.data for b in blocks]), pos.size)


def _tiled_strings(data: np.ndarray, base: np.ndarray, wb: int, sizes: np.ndarray,
                   floor: np.ndarray, sel: np.ndarray, pos: np.ndarray, where: str
                   ) -> Variable:
    """:func:`inflated_strings` of chunks lying back to back in ``data`` (chunk ``c`` at
    ``base[c]``): each row's two offset words and then its bytes gathered by index, with
    the same checks (callers have bounded ``pos`` by the counts, the sizes by the
    offsets they hold)."""
    at = base[sel] + pos * wb  # each row's offset word, then the next row's
    words = memory.words_at(data, np.dtype(f"<u{wb}"))
    lo, hi = words[at].astype(np.int64), words[at + wb].astype(np.int64)
    if (hi < lo).any() or (hi > sizes[sel]).any() or (lo < floor[sel]).any():
        raise FormatError(f"{where}: string offsets point outside their chunk")
    lens = hi - lo
    offsets = np.zeros(pos.size + 1, np.int64)
    lens.cumsum(out=offsets[1:])
    return Variable(offsets, data[cz.range_indices(base[sel] + lo, lens)], pos.size)


def _read_chunk(page: MiniBlockPage, chunk: int) -> bytes | memoryview:
    """The bytes of one chunk: a view of a mapped file (no copy), else read."""
    start = page.buffers[1][0] + int(page.chunk_offsets[chunk])
    size = int(page.chunk_sizes[chunk])
    viewer = getattr(page.read, "view", None)
    if viewer is not None:
        raw = viewer(start, size)
        if raw is not None:
            return raw.data
    return page.read(start, size)


def _decode_read_chunks(page: MiniBlockPage, raw: np.ndarray, cstart: np.ndarray,
                        counts: np.ndarray, csize: np.ndarray) -> pa.Array:
    """The values of the chunks read into ``raw`` (at ``cstart``, of ``csize`` bytes and
    ``counts`` values each), decoded in one call, nulls from the def levels."""
    where = page.where
    bufs, num_levels = _split(page, raw, cstart, csize)
    total = int(counts.sum())
    valid = None
    if page.has_def:
        levels = cz.decode_levels(page.layout.def_compression, bufs[0], num_levels, where)
        if levels.size != total or not np.array_equal(num_levels, counts):
            raise FormatError(f"{where}: def levels do not match the chunk values")
        valid = levels == 0
        bufs = bufs[1:]
    block = cz.decode_chunks(page.layout.value_compression, bufs, counts, where)
    if block.n != total:
        raise FormatError(f"{where}: {block.n} values for {total} value slots")
    return page.values_to_arrow(block, valid)


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
    # the headers side by side as (chunks, u16 words): the gathered bytes are contiguous,
    # so they view as little-endian words whatever each chunk's alignment
    nwords = 1 + nlev + (width // 2) * page.nbuf
    words = raw[cstart[:, None] + np.arange(2 * nwords)].view("<u2").astype(np.int64)
    num_levels = words[:, 0]
    if nlev and int(num_levels.min()) <= 0:
        raise FormatError(f"{where}: chunk with levels has no level count")
    if nsizes == 1:  # one buffer (values, no levels): it starts right after the header
        size = words[:, 1] if width == 2 else words[:, 1] | (words[:, 2] << 16)
        end = (size + 7) & ~7
        end += head
        if (end > csize).any():
            raise FormatError(f"{where}: chunk buffers run past the chunk")
        return [ChunkBuffers(raw, cstart + head, size)], num_levels
    if width == 2:
        sizes = words[:, 1 : 1 + nsizes]
    else:
        level_sizes = words[:, 1 : 1 + nlev]
        big = words[:, 1 + nlev :]
        sizes = np.concatenate([level_sizes, big[:, 0::2] | (big[:, 1::2] << 16)], axis=1)
    padded = (sizes + 7) & ~7
    ends = padded.cumsum(axis=1) + head
    starts = ends - padded
    if (ends[:, -1] > csize).any():
        raise FormatError(f"{where}: chunk buffers run past the chunk")
    bufs = [ChunkBuffers(raw, cstart + starts[:, i], sizes[:, i]) for i in range(nsizes)]
    return bufs, num_levels


# ------------------------------------------------------------------ one row
def _row_page(page: object) -> _RowPage | None:
    """The :class:`_RowPage` of a page whose one row :func:`_take_plain` takes (loaded,
    made once and kept on the page), else None (:func:`_take_one` or the general path)."""
    if not isinstance(page, MiniBlockPage):
        return None
    found = page.point_row
    if found is None:  # (two threads may both make it: the same answer)
        found = page.point_row = _RowPage.of(page) or False
    return found if isinstance(found, _RowPage) else None


class _RowPage:
    """A loaded mini-block page of non-null plain values (numbers of their type's width,
    flat or inline-bitpacked; strings / binaries of flat offsets; LZ4 / ZSTD around flat
    or variable values), one value buffer, no levels, no dictionary: what taking one row
    of it needs, derived once (:func:`_take_one` derives it on every take)."""

    def __init__(self, page: MiniBlockPage, kind: str, enc: pb.CompressiveEncoding,
                 scheme: int | None) -> None:
        # (no reference to the page, which keeps this: no cycle holding its file open)
        self.kind, self.scheme = kind, scheme
        self.t = page.leaf_type
        self.head, self.fmt = _plain_header(page)
        self.width = self.bits = self.wb = 0
        if kind == "flat":
            self.width = int(enc.flat.bits_per_value) // 8
        elif kind == "inline_bitpacking":
            self.bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
            self.wb = self.bits // 8
        else:
            self.wb = sparse.string_offset_bytes(enc, page.where)

    @classmethod
    def of(cls, page: MiniBlockPage) -> _RowPage | None:
        """The page's layout when it is such a page, else None."""
        if page.has_rep or page.has_def or page.nbuf != 1:
            return None
        found = page_values(page)
        if found is None:
            return None
        enc, scheme = found
        kind = cz.kind(enc)
        t = page.leaf_type
        if kind == "flat":
            bits = int(enc.flat.bits_per_value)
        elif kind == "inline_bitpacking":
            bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
            if bits not in (8, 16, 32, 64):
                return None  # (_take_one reports it)
        elif kind != "variable" or t not in _PLAIN_BYTES:
            return None
        if kind != "variable" and not ((pa.types.is_integer(t) or pa.types.is_floating(t)
                                        or pa.types.is_temporal(t)) and t.bit_width == bits
                                       and bits % 8 == 0 and bits):
            return None
        page.load()
        if page.dictionary is not None:
            return None
        return cls(page, kind, enc, scheme)


def _take_plain(page: MiniBlockPage, plain: _RowPage, row: int) -> pa.Array:
    """Row ``row`` of a page through its :class:`_RowPage`: :func:`_take_one` with the
    layout's steps done (same value, same checks and errors)."""
    where = page.where
    c, p = _row_chunk(page, row)
    csize, count = int(page.chunk_sizes[c]), int(page.chunk_values[c])
    data = memoryview(_read_chunk(page, c)).cast("B")
    head = plain.head
    if csize < head:
        raise FormatError(f"{where}: chunk smaller than its header")
    _, size = struct.unpack_from(plain.fmt, data)
    if head + ((size + 7) & ~7) > csize:
        raise FormatError(f"{where}: chunk buffers run past the chunk")
    if p >= count:
        raise FormatError(f"{where}: row past the values of its chunk")
    values: bytes | memoryview = data
    start = head
    if plain.scheme is not None:
        values = memoryview(inflate(plain.scheme, data[head : head + size], where,
                                    buffer=True))  # (the codec's buffer: not copied)
        start, size = 0, len(values)
    kind = plain.kind
    if kind == "flat":
        width = plain.width
        if (p + 1) * width > size:
            raise FormatError(f"{where}: chunk holds fewer bytes than its values need")
        j = start + p * width
        return pa.Array.from_buffers(plain.t, 1, [None, pa.py_buffer(bytes(values[j : j + width]))])
    if kind == "inline_bitpacking":
        bits = plain.bits
        width = _lane_width(values, start, size, bits, where)
        value = _lane_value(_unsigned_word(bits), values, start, p, width, bits) \
            if width else 0
        return pa.Array.from_buffers(plain.t, 1, [None, pa.py_buffer(
            value.to_bytes(plain.wb, "little"))])
    lo, hi = _string_bounds(values, start, size, count, p, plain.wb, where)
    return _bytes_array(bytes(values[start + lo : start + hi]), plain.t, where)


def _take_one(page: MiniBlockPage, row: int) -> pa.Array | None:
    """Row ``row`` of a loaded page: the one chunk read and its header parsed with
    ``struct``, the value located with integer arithmetic (no arrays until the end)."""
    where = page.where
    found = page_values(page)
    assert found is not None
    enc, scheme = found
    c, p = _row_chunk(page, row)
    csize, count = int(page.chunk_sizes[c]), int(page.chunk_values[c])
    data = memoryview(_read_chunk(page, c)).cast("B")
    nlev = int(page.has_def)
    head = (2 + 2 * nlev + (4 if page.large else 2) * page.nbuf + 7) & ~7
    if csize < head:
        raise FormatError(f"{where}: chunk smaller than its header")
    fmt = "<H" + "H" * nlev + ("I" if page.large else "H") * page.nbuf
    num_levels, *sizes = struct.unpack_from(fmt, data)
    starts, at = [], head
    for size in sizes:
        starts.append(at)
        at += (size + 7) & ~7
    if at > csize:
        raise FormatError(f"{where}: chunk buffers run past the chunk")
    if p >= count:
        raise FormatError(f"{where}: row past the values of its chunk")
    valid = None
    if nlev:
        if num_levels <= 0:
            raise FormatError(f"{where}: chunk with levels has no level count")
        raw = np.frombuffer(data, np.uint8)
        levels = cz.decode_levels(page.layout.def_compression,
                                  ChunkBuffers(raw, np.array([starts[0]]), np.array([sizes[0]])),
                                  np.array([num_levels]), where)
        if levels.size != num_levels or num_levels != count:
            raise FormatError(f"{where}: def levels do not match the chunk values")
        valid = np.array([levels[p] == 0])
    vstart, vsize = starts[nlev], sizes[nlev]
    values: bytes | memoryview = data
    if scheme is not None:
        values = inflate(scheme, data[vstart : vstart + vsize], where)
        vstart, vsize = 0, len(values)
    block = _one_value(enc, values, vstart, vsize, count, p, where)
    if block is None:
        return None
    t = page.leaf_type
    if isinstance(block, Fixed) and page.dictionary is None and not block.fsl and (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)) \
            and t.bit_width == block.bits:  # a plain number: straight to Arrow
        null = valid is not None and not valid[0]
        return pa.Array.from_buffers(t, 1, [pa.py_buffer(b"\x00") if null else None,
                                            pa.py_buffer(block.data)])
    if isinstance(block, Variable) and page.dictionary is None and t in _PLAIN_BYTES:
        return _one_bytes(block, t, valid is not None and not valid[0], where)
    return page.values_to_arrow(block, valid)


_PLAIN_BYTES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def _one_bytes(block: Variable, t: pa.DataType, null: bool, where: str) -> pa.Array:
    """The one string / binary value of ``block`` as an array of ``t``, made from its
    buffers (the general conversion checks offsets and UTF-8 with several array passes,
    its cost for one value; ``pa.array`` of the Python value costs several times more
    than the buffers); invalid UTF-8 is the same FormatError."""
    lo, hi = (int(o) for o in block.offsets[:2])
    if block.n != 1 or lo < 0 or hi < lo or hi > block.data.size:
        raise FormatError(f"{where}: string offsets run past the data")
    if null:
        return pa.nulls(1, t)
    return _bytes_array(block.data[lo:hi].tobytes(), t, where)


def _bytes_array(value: bytes, t: pa.DataType, where: str) -> pa.Array:
    """One string / binary ``value`` as an array of ``t`` made from its buffers, a
    string's UTF-8 checked first (the array is not validated): invalid is a FormatError."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{where}: invalid UTF-8 in a string column") from exc
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    offsets = struct.pack("<qq" if large else "<ii", 0, len(value))
    return pa.Array.from_buffers(t, 1, [None, pa.py_buffer(offsets), pa.py_buffer(value)])


def _row_chunk(page: MiniBlockPage, row: int) -> tuple[int, int]:
    """:func:`_chunk_of` with the row checked to lie in the page's chunks."""
    shift = page.shift
    if shift is not None:
        c, p = row >> shift, row & ((1 << shift) - 1)
    else:
        c = int(np.searchsorted(page.row_end, row, "right"))
        p = row - int(page.first_row[c]) if c < page.chunk_sizes.size else 0
    if c >= page.chunk_sizes.size:
        raise FormatError(f"{page.where}: row {row} past the page's chunks")
    return c, p


def _plain_header(page: MiniBlockPage) -> tuple[int, str]:
    """(the padded header size, its ``struct`` format: the level count and the one value
    buffer's size) of a chunk of a page with no levels and one buffer."""
    return (2 + (4 if page.large else 2) + 7) & ~7, ("<HI" if page.large else "<HH")


@functools.cache
def _unsigned_word(bits: int) -> Callable[[bytes | memoryview, int], tuple[int]]:
    """The ``struct`` reader of one little-endian unsigned word of ``bits`` at an offset."""
    return struct.Struct("<" + _WORD_CODES[bits].upper()).unpack_from


def _lane_width(buf: bytes | memoryview, start: int, size: int, bits: int, where: str
                ) -> int:
    """The bit width of an inline-bitpacked chunk of ``bits``-bit words filling
    ``buf[start : start + size]`` (its first word), checked against the chunk's size."""
    wb = bits // 8
    if size < wb:
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    width = int.from_bytes(buf[start : start + wb], "little")
    if width > bits:
        raise FormatError(f"{where}: bit width {width} over {bits} bits")
    if size != (1 + width * (1024 // bits)) * wb:
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    return width


def _lane_value(word: Callable[[bytes | memoryview, int], tuple[int]],
                data: bytes | memoryview, start: int, p: int, width: int, bits: int) -> int:
    """Value ``p`` (unsigned) of an inline-bitpacked chunk of ``bits``-bit words whose
    width word lies at ``start``, packed in ``width`` > 0 bits (FastLanes: its row and
    lane, see :func:`sparse.row_lane`); ``word`` reads an unsigned word at an offset."""
    row_of, lane_of = _row_lane_lists(bits)
    lanes, wb = 1024 // bits, bits // 8
    w0, shift = divmod(row_of[p] * width, bits)
    j = start + (1 + w0 * lanes + lane_of[p]) * wb
    value = word(data, j)[0] >> shift
    if shift + width > bits:  # continues in the next word of its lane
        value |= word(data, j + lanes * wb)[0] << (bits - shift)
    return value & ((1 << width) - 1)


def _string_bounds(buf: bytes | memoryview, start: int, size: int, count: int, p: int,
                   wb: int, where: str) -> tuple[int, int]:
    """The byte range of value ``p`` of ``count`` strings whose ``wb``-byte offsets (then
    bytes) fill ``buf[start : start + size]``, relative to ``start``, checked to lie
    in it."""
    if size < (count + 1) * wb:
        raise FormatError(f"{where}: string chunk too small for its offsets")
    lo, hi = struct.unpack_from("<II" if wb == 4 else "<QQ", buf, start + p * wb)
    if hi < lo or hi > size or lo < (count + 1) * wb:
        raise FormatError(f"{where}: string offsets point outside their chunk")
    return lo, hi


def _one_value(enc: pb.CompressiveEncoding, buf: bytes | memoryview, start: int, size: int,
               count: int, p: int, where: str) -> Block | None:
    """Value ``p`` of the ``count`` values in ``buf[start:start+size]`` (one chunk's value
    buffer, encoded as ``enc``), or None for encodings not handled here."""
    k = cz.kind(enc)
    if k == "flat":
        width = int(enc.flat.bits_per_value) // 8
        if width == 0:
            raise FormatError(f"{where}: flat values of {enc.flat.bits_per_value} bits")
        if (p + 1) * width > size:
            raise FormatError(f"{where}: chunk holds fewer bytes than its values need")
        return Fixed(np.frombuffer(buf, np.uint8, width, start + p * width), width * 8, 1)
    if k == "inline_bitpacking":
        bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        if bits not in (8, 16, 32, 64):
            raise FormatError(f"{where}: inline bitpacking of {bits}-bit values")
        width = _lane_width(buf, start, size, bits, where)
        value = _lane_value(_unsigned_word(bits), buf, start, p, width, bits) if width else 0
        return Fixed(np.frombuffer(value.to_bytes(bits // 8, "little"), np.uint8), bits, 1)
    if k in ("variable", "fsst"):
        lo, hi = _string_bounds(buf, start, size, count, p,
                                sparse.string_offset_bytes(enc, where), where)
        block = Variable(np.array([0, hi - lo], np.int64),
                         np.frombuffer(buf, np.uint8, hi - lo, start + lo), 1)
        return block if k == "variable" else fsst_decode(enc.fsst.symbol_table, block, where)
    return None


# ------------------------------------------------------------------ sorted search
def search_sorted(column: LeafColumn, start: int, stop: int, key: int | bytes,
                  ends: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The rows ``[lo, hi)`` of ``[start, stop)`` whose value equals ``key``, in a run of
    ascending integers (one page of a BTREE index's values): two binary searches
    reading single values out of the run's chunks (one read), instead of decoding the
    whole run. None when the run leaves its page or the page is not a mini-block page
    of plain (flat or inline-bitpacked, uncompressed, non-null) integers: the caller
    decodes the run. A ``bytes`` key searches a run of strings / binaries in byte order
    instead (see :func:`_search_bytes`). ``ends``: the run's first and last values when
    the caller knows them (an index page's bounds), which only place the first probe
    (see :func:`_lower_bound`)."""
    if isinstance(key, bytes):
        return _search_bytes(column, start, stop, key)
    found = _plain_ints(column, start, stop)
    if found is None:
        return None
    page, ints, a, c0, c1 = found
    base = start - a
    b = a + stop - start
    value = _SortedValues.of(page, ints, c0, c1)
    lo = _lower_bound(value, a, b, key, ends)
    return base + lo, base + _run_end(value, lo, b, key)


def _run_end(value: Callable[[int], K], lo: int, b: int, key: K) -> int:
    """The end of the run of rows equal to ``key`` starting at ``lo`` (its lower bound
    in ``[lo, b)``). The run is short (one entry for a unique key): gallop to its end,
    probing lo, lo + 1, lo + 2, lo + 4, ...; the last probe found equal is
    lo + step // 4."""
    step, hi = 1, lo
    while hi < b and value(hi) == key:
        hi = min(lo + step, b)
        step *= 2
    if hi > lo:
        hi = _bisect(value, lo + step // 4 + 1, hi, key, right=True)
    return hi


def _plain_ints(column: LeafColumn, start: int, stop: int
                ) -> tuple[MiniBlockPage, _IntPage, int, int, int] | None:
    """(the page, its :class:`_IntPage`, page row of ``start``, first and last chunk) when
    rows ``[start, stop)`` lie in one mini-block page of plain non-null integers (flat or
    inline-bitpacked, no dictionary, no general compression), else None."""
    if stop <= start:
        return None
    row_starts = column.info.row_starts
    p = 0 if row_starts.size == 2 else int(row_starts.searchsorted(start, "right")) - 1
    base = int(row_starts[p])
    if stop > int(row_starts[p + 1]):
        return None
    page = column.page(p)
    ints = _int_page(page)
    if ints is None:
        return None
    a, b = start - base, stop - base
    c0, c1 = _chunk_span(page, a, b)
    return page, ints, a, c0, c1


def _int_page(page: object) -> _IntPage | None:
    """The :class:`_IntPage` of a page of plain non-null integers (loaded, made once and
    kept on the page), else None."""
    if not isinstance(page, MiniBlockPage):
        return None
    found = page.point_ints
    if found is None:  # (two threads may both make it: the same answer)
        found = page.point_ints = _IntPage.of(page) or False
    return found if isinstance(found, _IntPage) else None


_WORD_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}  # struct codes (upper case: unsigned)


@functools.cache
def _row_lane_lists(bits: int) -> tuple[list[int], list[int]]:
    """:func:`sparse.row_lane` as Python lists (one value at a time: no numpy scalars)."""
    row_of, lane_of = sparse.row_lane(bits)
    return row_of.tolist(), lane_of.tolist()


class _IntPage:
    """A loaded mini-block page of plain non-null integers as single values are read from
    it (:func:`search_sorted`, :func:`ints_at`): what its layout gives, derived once."""

    def __init__(self, page: MiniBlockPage, flat: bool, bits: int) -> None:
        # (no reference to the page, which keeps this: no cycle holding its file open)
        self.flat, self.bits, self.wb = flat, bits, bits // 8
        self.signed = pa.types.is_signed_integer(page.leaf_type)
        self.head, self.fmt = _plain_header(page)
        self.lanes = 1024 // bits
        # a value (flat) or word (bitpacked) at a byte offset: one struct call
        self.word = _unsigned_word(bits)
        if flat and self.signed:
            self.word = struct.Struct("<" + _WORD_CODES[bits]).unpack_from

    @classmethod
    def of(cls, page: MiniBlockPage) -> _IntPage | None:
        """The page's layout when its values are plain non-null integers of the page's
        type, in one value buffer without levels, else None."""
        t = page.leaf_type
        if not pa.types.is_integer(t) or page.has_rep or page.has_def or page.nbuf != 1:
            return None
        enc = page.layout.value_compression
        kind = cz.kind(enc)
        if kind == "flat":
            bits = int(enc.flat.bits_per_value)
        elif kind == "inline_bitpacking":
            bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        else:
            return None
        if bits != t.bit_width:
            return None
        page.load()
        if page.dictionary is not None:
            return None
        return cls(page, kind == "flat", bits)


def _one_flat_page(column: LeafColumn, start: int, stop: int
                   ) -> tuple[MiniBlockPage, int] | None:
    """The mini-block page holding all of rows ``[start, stop)`` and its first row, when
    its values are non-null and not nested (one value buffer), else None."""
    row_starts = column.info.row_starts
    p = int(np.searchsorted(row_starts, start, "right")) - 1
    if stop > int(row_starts[p + 1]):
        return None
    page = column.page(p)
    if not isinstance(page, MiniBlockPage) or page.has_rep or page.has_def or page.nbuf != 1:
        return None
    return page, int(row_starts[p])


def _chunk_of(page: MiniBlockPage, row: int) -> tuple[int, int]:
    """The chunk of a loaded page holding page row ``row``, and the row's place in it."""
    if page.shift is not None:
        return row >> page.shift, row & ((1 << page.shift) - 1)
    c = int(np.searchsorted(page.row_end, row, "right"))
    return c, row - int(page.first_row[c])


def _chunk_span(page: MiniBlockPage, a: int, b: int) -> tuple[int, int]:
    """The first and last chunk holding rows ``[a, b)`` of a loaded page (``b > a``)."""
    if page.shift is not None:
        c0, c1 = a >> page.shift, (b - 1) >> page.shift
    else:
        c0, c1 = np.searchsorted(page.row_end, [a, b - 1], "right").tolist()
    if c1 >= page.chunk_sizes.size:
        raise FormatError(f"{page.where}: row {b - 1} past the page's chunks")
    return int(c0), int(c1)


def ints_at(column: LeafColumn, start: int, stop: int) -> list[int] | None:
    """The values of rows ``[start, stop)`` (a few) of a column of plain integers, read
    one by one from their chunks (one read); None when the rows are not of such a page
    (see :func:`search_sorted`)."""
    found = _plain_ints(column, start, stop)
    if found is None:
        return None
    page, ints, a, c0, c1 = found
    value = _SortedValues.of(page, ints, c0, c1)
    return [value(r) for r in range(a, a + stop - start)]


_INTERPOLATE_FROM = 16  # rows: shorter ranges are bisected straight away


def _lower_bound(value: _SortedValues, lo: int, hi: int, key: int,
                 ends: tuple[int, int] | None = None) -> int:
    """:func:`_bisect` (the first row of ``[lo, hi)`` not below ``key``) guessing first:
    the row interpolated between the values at the range's ends (a page of an index on
    ids holds evenly spread keys: the guess lands on the row), checked with its
    neighbour; bisection of what is left otherwise. Four probes for evenly spread keys
    instead of ~12 for a page of 4096; at most four more than bisection. ``ends``: those
    two values as the caller knows them, when ``key`` lies above the first and not above
    the last: two probes (and their chunks) fewer; they only place the guess, the row
    is still found by the values read (:func:`_from_guess`)."""
    if hi - lo < _INTERPOLATE_FROM:
        return _bisect(value, lo, hi, key, right=False)
    if ends is not None and ends[0] < key <= ends[1]:
        span = hi - 1 - lo
        guess = lo + min(span, -(-(key - ends[0]) * span // (ends[1] - ends[0])))
        return _from_guess(value, lo, hi, key, guess)
    first, last = value(lo), value(hi - 1)
    if first >= key:
        return lo
    if last < key:
        return hi
    # first < key <= last: the row is in (lo, hi - 1]; Python ints: no overflow
    span = hi - 1 - lo
    guess = lo + min(span, max(1, -(-(key - first) * span // (last - first))))
    if value(guess) >= key:  # the row is in (lo, guess]
        if guess - 1 == lo or value(guess - 1) < key:
            return guess
        return _bisect(value, lo + 1, guess - 1, key, right=False)
    if guess + 1 == hi - 1 or value(guess + 1) >= key:  # the row is in (guess, hi - 1]
        return guess + 1
    return _bisect(value, guess + 2, hi - 1, key, right=False)


def _from_guess(value: _SortedValues, lo: int, hi: int, key: int, guess: int) -> int:
    """The first row of ``[lo, hi)`` not below ``key``, probing ``guess`` (in the range)
    and its neighbour first, then bisecting what is left; every step decided by the
    values read (nothing assumed of the range's ends)."""
    if value(guess) >= key:  # the row is in [lo, guess]
        if guess == lo or value(guess - 1) < key:
            return guess
        return _bisect(value, lo, guess - 1, key, right=False)
    if guess + 1 == hi or value(guess + 1) >= key:  # the row is in (guess, hi]
        return guess + 1
    return _bisect(value, guess + 2, hi, key, right=False)


def _bisect(value: Callable[[int], K], lo: int, hi: int, key: K, *, right: bool) -> int:
    """The first row of ``[lo, hi)`` whose value is above ``key`` (``right``) or not
    below it."""
    while lo < hi:
        mid = (lo + hi) // 2
        v = value(mid)
        if v < key or (right and v == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


class _SortedValues:
    """Single integer values of a page's chunks read back to back (see
    :func:`search_sorted`), by page row; each chunk's header parsed on first use."""

    def __init__(self, page: MiniBlockPage, ints: _IntPage, data: memoryview,
                 cstart: list[int], c0: int) -> None:
        self.ints, self.page = ints, page
        self.data, self.cstart, self.c0 = data, cstart, c0
        self.chunks: dict[int, tuple[int, int, int]] = {}  # chunk -> (start, count, width)
        self.read: dict[int, int] = {}  # row -> its value, read already (a search repeats some)

    @classmethod
    def of(cls, page: MiniBlockPage, ints: _IntPage, c0: int, c1: int) -> _SortedValues:
        """The values of chunks ``c0..c1`` of the page, their bytes read at once (a view
        of a mapped file: nothing copied)."""
        if c0 == c1:  # (a few ids: one chunk)
            return cls(page, ints, memoryview(_read_chunk(page, c0)), [0], c0)
        raw, cstart = page.chunk_bytes(np.arange(c0, c1 + 1))
        return cls(page, ints, raw.data, cstart.tolist(), c0)

    def _chunk(self, c: int) -> tuple[int, int, int]:
        found = self.chunks.get(c)
        if found is not None:
            return found
        ints, page = self.ints, self.page
        where = page.where
        at = self.cstart[c - self.c0]
        csize, count = int(page.chunk_sizes[c]), int(page.chunk_values[c])
        if csize < ints.head:
            raise FormatError(f"{where}: chunk smaller than its header")
        _, size = struct.unpack_from(ints.fmt, self.data, at)
        if ints.head + ((size + 7) & ~7) > csize:
            raise FormatError(f"{where}: chunk buffers run past the chunk")
        start, wb, width = at + ints.head, ints.wb, 0
        if ints.flat:
            if size < count * wb:
                raise FormatError(f"{where}: chunk holds fewer bytes than its values need")
        else:
            if size < wb:
                raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
            width = int.from_bytes(self.data[start : start + wb], "little")
            if width > ints.bits or size != (1 + width * ints.lanes) * wb:
                raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
        found = self.chunks[c] = (start, count, width)
        return found

    def __call__(self, row: int) -> int:
        known = self.read.get(row)
        if known is None:
            known = self.read[row] = self._value(row)
        return known

    def _value(self, row: int) -> int:
        page, ints = self.page, self.ints
        shift = page.shift
        if shift is not None:
            c, p = row >> shift, row & ((1 << shift) - 1)
        else:
            c, p = _chunk_of(page, row)
        start, count, width = self._chunk(c)
        if p >= count:
            raise FormatError(f"{page.where}: row past the values of its chunk")
        data, wb, word = self.data, ints.wb, ints.word
        if ints.flat:
            return word(data, start + p * wb)[0]
        value = _lane_value(word, data, start, p, width, ints.bits) if width else 0
        if ints.signed and value >> (ints.bits - 1):
            value -= 1 << ints.bits
        return value


def _search_bytes(column: LeafColumn, start: int, stop: int, key: bytes
                  ) -> tuple[int, int] | None:
    """:func:`search_sorted` of a run of strings / binaries in byte order (UTF-8 byte
    order is code point order, the order a BTREE index sorts strings by): a binary
    search comparing the bytes of single values, each chunk it probes decoded alone (its
    offsets and bytes; LZ4 / ZSTD inflated, FSST expanded), never the whole run nor a
    Python string. None when the run leaves its page or the page is not a mini-block
    page of non-null, non-dictionary variable-width values."""
    found = _plain_bytes(column, start, stop)
    if found is None:
        return None
    page, a, c0, c1 = found
    base, b = start - a, a + stop - start
    value = _ChunkBytes.of(page, c0, c1)
    lo = _bisect(value, a, b, key, right=False)
    hi = _run_end(value, lo, b, key)
    SORTED_BYTES_SEARCHES[0] += 1
    return base + lo, base + hi


def _plain_bytes(column: LeafColumn, start: int, stop: int
                 ) -> tuple[MiniBlockPage, int, int, int] | None:
    """(page, page row of ``start``, first and last chunk) when rows ``[start, stop)``
    lie in one mini-block page of non-null strings / binaries without a dictionary,
    stored as variable-width values (plain, FSST, and / or LZ4 / ZSTD), else None."""
    if column.leaf_type not in _PLAIN_BYTES or stop <= start:
        return None
    found = _one_flat_page(column, start, stop)
    if found is None:
        return None
    page, base = found
    if not _variable_width(page.layout.value_compression):
        return None
    page.load()
    if page.dictionary is not None:
        return None
    a = start - base
    c0, c1 = _chunk_span(page, a, a + stop - start)
    return page, a, c0, c1


def _variable_width(enc: pb.CompressiveEncoding) -> bool:
    """Whether ``enc`` decodes a chunk to variable-width values (offsets and bytes)."""
    k = cz.kind(enc)
    if k == "variable":
        return True
    if k == "fsst":
        return cz.kind(enc.fsst.values) == "variable"
    return k == "general" and _variable_width(enc.general.values)


class _ChunkBytes:
    """Single values of a page's chunks as ``bytes``, by page row (see
    :func:`_search_bytes`): the chunks read at once, each made ready on first use. A
    chunk of variable-width values (LZ4 / ZSTD inflated first) is used as stored: a
    value is located by its two offsets (``struct``), as :func:`_take_one` does, and an
    FSST value expanded alone (a few codes); other chunks (FSST under LZ4 / ZSTD) are
    decoded whole and laid out the same way."""

    def __init__(self, page: MiniBlockPage, raw: np.ndarray, cstart: list[int],
                 c0: int) -> None:
        self.page, self.raw, self.cstart, self.c0 = page, raw, cstart, c0
        found = page_values(page)
        # plain values: the chunk's value buffer as is (inflated with ``scheme`` first),
        # offsets of ``wb`` bytes, each value FSST-expanded with ``symbols`` if given;
        # else each chunk is decoded whole
        self.plain, self.scheme, self.wb = False, None, 8
        self.symbols: tuple[bytes, ...] | None = None
        if found is not None and cz.kind(found[0]) in ("variable", "fsst"):
            self.plain, self.scheme = True, found[1]
            self.wb = sparse.string_offset_bytes(found[0], page.where)
            if cz.kind(found[0]) == "fsst":
                self.symbols = _fsst_symbols(found[0].fsst.symbol_table, page.where)
        self.head = (2 + (4 if page.large else 2) + 7) & ~7
        self.fmt = "<HI" if page.large else "<HH"
        # chunk -> (its values' buffer, value count, offset width, offset format)
        self.chunks: dict[int, tuple[bytes, int, int, str]] = {}

    @classmethod
    def of(cls, page: MiniBlockPage, c0: int, c1: int) -> _ChunkBytes:
        """The values of chunks ``c0..c1`` of ``page``, their bytes read at once."""
        raw, cstart = page.chunk_bytes(np.arange(c0, c1 + 1))
        return cls(page, raw, cstart.tolist(), c0)

    def _chunk(self, c: int) -> tuple[bytes, int, int, str]:
        found = self.chunks.get(c)
        if found is not None:
            return found
        page, where, i = self.page, self.page.where, c - self.c0
        count, csize = int(page.chunk_values[c]), int(page.chunk_sizes[c])
        if not self.plain:  # decoded whole
            found = self._expanded(i, c, count)
        else:
            at = self.cstart[i]
            if csize < self.head:
                raise FormatError(f"{where}: chunk smaller than its header")
            _, size = struct.unpack_from(self.fmt, self.raw.data, at)
            if self.head + ((size + 7) & ~7) > csize:
                raise FormatError(f"{where}: chunk buffers run past the chunk")
            start = at + self.head
            values: bytes | memoryview = self.raw[start : start + size].data
            if self.scheme is not None:
                values = inflate(self.scheme, values, where)
            found = (bytes(values), count, self.wb, "<II" if self.wb == 4 else "<QQ")
        if len(found[0]) < (count + 1) * found[2]:
            raise FormatError(f"{where}: string chunk too small for its offsets")
        self.chunks[c] = found
        return found

    def _expanded(self, i: int, c: int, count: int) -> tuple[bytes, int, int, str]:
        """Chunk ``c`` decoded whole, laid out as a chunk of plain values (8-byte
        offsets from the start of the offsets, then the bytes)."""
        page = self.page
        cstart = np.array(self.cstart[i : i + 1], np.int64)
        bufs, _ = _split(page, self.raw, cstart, page.chunk_sizes[c : c + 1])
        block = cz.decode_chunks(page.layout.value_compression, bufs,
                                 page.chunk_values[c : c + 1], page.where)
        if not isinstance(block, Variable) or block.n != count or \
                int(block.offsets[-1]) > block.data.size:
            raise FormatError(f"{page.where}: a chunk of strings does not decode to its "
                              f"{count} values")
        offsets = block.offsets.astype("<u8") + (count + 1) * 8
        return offsets.tobytes() + block.data.tobytes(), count, 8, "<QQ"

    def __call__(self, row: int) -> bytes:
        page = self.page
        c, p = _chunk_of(page, row)
        data, count, wb, fmt = self._chunk(c)
        if p >= count:
            raise FormatError(f"{page.where}: row past the values of its chunk")
        lo, hi = struct.unpack_from(fmt, data, p * wb)
        if hi < lo or hi > len(data) or lo < (count + 1) * wb:
            raise FormatError(f"{page.where}: string offsets point outside their chunk")
        if self.symbols is None:
            return data[lo:hi]
        return _fsst_expand(data[lo:hi], self.symbols, page.where)


@functools.lru_cache(maxsize=64)  # a page's table, parsed once for all its searches
def _fsst_symbols(table: bytes, where: str) -> tuple[bytes, ...] | None:
    """The bytes of each FSST code 0..254 of a symbol table (None: the table stores
    strings raw)."""
    parsed = fsst.parse_symbol_table(table, where)
    if not parsed.enabled:
        return None
    words = parsed.symbols[:255].astype("<u8").tobytes()
    lengths = parsed.lengths[:255].tolist()
    return tuple(words[8 * c : 8 * c + n] for c, n in enumerate(lengths))


def _fsst_expand(codes: bytes, symbols: tuple[bytes, ...], where: str) -> bytes:
    """One FSST-compressed value expanded: each code its symbol's bytes, an escape
    (255) the byte after it (a few codes: one value a binary search probes)."""
    if 255 not in codes:
        return b"".join([symbols[c] for c in codes])
    out, i, n = [], 0, len(codes)
    while i < n:
        c = codes[i]
        if c == 255:
            if i + 1 == n:
                raise FormatError(f"{where}: an FSST escape ends a value")
            out.append(codes[i + 1 : i + 2])
            i += 2
        else:
            out.append(symbols[c])
            i += 1
    return b"".join(out)
