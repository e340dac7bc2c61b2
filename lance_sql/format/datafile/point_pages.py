"""Rows of many mini-block pages taken in one pass (a lookup of many keys).

A take of 1000 keys from a table of 10 fragments touches ~50 pages (10 files x 4
columns, some rows past a page edge), ~100 rows each. :mod:`point` takes each page on
its own, and its ~60 numpy calls per page (microseconds each) cost more than the rows.
Here the pages of one column in every file are taken together: per page only what needs
its own bytes (the chunks of its rows, their header bytes, the words of its values; LZ4 /
ZSTD chunks inflated), then the headers parsed, the checks made and the values put
together once for all the pages, into one array.

For pages of one plain mini-block layout only: no levels (no nulls stored), one value
buffer of flat values or inline-bitpacked integers, or of compressed chunks of those or
of strings; one encoding and type for every page. Anything
else returns None and the caller takes the pages one by one (tests compare the two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import cast

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile import lz4_frames, memory, point, sparse
from lance_sql.format.datafile.blocks import Block, Fixed, inflate
from lance_sql.format.datafile.compressive import ChunkBuffers
from lance_sql.format.datafile.decode_v2_1 import LeafColumn
from lance_sql.format.datafile.miniblock import MiniBlockPage

__all__ = ["take_pages"]

_HEAD = 8  # header bytes of a chunk without levels and one value buffer (u16 or u32 size)


def take_pages(parts: Sequence[tuple[LeafColumn, np.ndarray]]) -> pa.Array | None:
    """Rows ``rows`` (sorted, unique, in range) of each leaf column of ``parts`` (one
    field in several files, say), one after the other, as one array of their leaf type;
    None when a touched page does not suit this path (see the module docstring). Bad
    data is a FormatError, or (a safety net, as for every decoder) an error of the kinds
    the readers turn into one."""
    taking = begin_pages(parts)
    if taking is None:
        return None
    try:
        return taking.finish()
    finally:
        taking.close()


# Counts of takes whose LZ4 chunks were begun and finished later (tests).
BEGUN_CALLS = [0]


class Taking:
    """A :func:`take_pages` begun by :func:`begin_pages`: its LZ4 chunks inflating (on a
    helper thread when :func:`~.parallel.threads_for` allows one) while the caller does
    other work. :meth:`finish` gives the array (None: see :func:`take_pages`);
    :meth:`close`, in a ``finally``, joins the helper whether or not it was finished."""

    def __init__(self, inflating: lz4_frames.Inflating | None,
                 then: Callable[[lz4_frames.Inflated | None], pa.Array | None]) -> None:
        self._inflating, self._then = inflating, then

    def finish(self) -> pa.Array | None:
        if self._inflating is None:
            return self._then(None)
        BEGUN_CALLS[0] += 1
        return self._then(self._inflating.result())

    def close(self) -> None:
        if self._inflating is not None:
            self._inflating.close()


def begin_pages(parts: Sequence[tuple[LeafColumn, np.ndarray]],
                files: MappedFiles | None = None) -> Taking | None:
    """:func:`take_pages` begun: the pages read and checked, their LZ4 chunks (when they
    inflate by one frame or more) begun (see :class:`Taking`), the rest done at once;
    None when a touched page does not suit this path. ``files``: the mapped files of a
    take of several columns, shared by their calls (see :class:`MappedFiles`)."""
    pieces: list[tuple[MiniBlockPage, np.ndarray, str]] = []
    leaf_type = parts[0][0].leaf_type if parts else None
    for column, rows in parts:
        if not rows.size:
            continue
        if not column.leaf_type.equals(leaf_type):
            return None
        for p, page_rows in _by_page(column, rows):
            page = column.page(p)
            if not isinstance(page, MiniBlockPage):
                return None
            pieces.append((page, page_rows, page.where))
    if not pieces or not _uniform([page for page, _, _ in pieces]):
        return None
    return _begin(pieces, leaf_type, MappedFiles() if files is None else files)


class MappedFiles:
    """The whole mapped bytes of each file a take of many pages reads, viewed once for
    the take (one check that the file still holds them all), so each page's chunks are a
    slice of them: a view per page cost ~5-20 us, for ~40 pages a 1000-key take touches
    in 3 columns. A file not mapped, or no longer of its size, gives None: its pages read
    their chunks as before (:meth:`MiniBlockPage.chunk_bytes`, with its errors)."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[object, np.ndarray | None, bool]] = {}

    def whole(self, read: object) -> np.ndarray | None:
        """The bytes of the file ``read`` (a page's reads) reads, when mapped."""
        return self._found(read)[1]

    def aligned(self, read: object) -> bool:
        """Whether :meth:`whole` of ``read`` starts at an address that is a multiple
        of 8 (a mapping starts on a page), so that words at multiples of their size in
        it are aligned (see :meth:`_Chunks.words`)."""
        return self._found(read)[2]

    def _found(self, read: object) -> tuple[object, np.ndarray | None, bool]:
        got = self._held.get(id(read))
        if got is None:
            whole = None
            viewer = getattr(read, "view", None)
            size = getattr(getattr(read, "source", None), "size", None)
            if viewer is not None and type(size) is int:
                try:
                    whole = viewer(0, size)
                except FormatError:
                    whole = None  # (the pages' own reads then meet the error)
            aligned = whole is not None and whole.__array_interface__["data"][0] % 8 == 0
            # (read kept: its id stays its own)
            got = self._held[id(read)] = (read, whole, aligned)
        return got

    def chunk_bytes(self, page: MiniBlockPage, chunks: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`MiniBlockPage.chunk_bytes` of ``chunks`` (sorted): the file's
        bytes from the first chunk to the end of the last, a slice of its whole mapping."""
        whole = self.whole(page.read)
        if whole is not None and chunks.size:
            offs = page.chunk_offsets[chunks]
            first = int(offs[0])
            at = int(page.buffers[1][0])
            end = at + int(offs[-1]) + int(page.chunk_sizes[chunks[-1]])
            if 0 <= at + first <= end <= whole.size:
                return whole[at + first : end], offs - first
        return page.chunk_bytes(chunks, point.SCATTERED_GAP)


def _by_page(column: LeafColumn, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``rows`` of a column split by page: (page, its rows relative to the page)."""
    row_starts = column.info.row_starts
    if row_starts.size == 2:
        return [(0, rows)]
    pages = row_starts.searchsorted(rows, "right") - 1
    first, last = int(pages[0]), int(pages[-1])
    if first == last:
        return [(first, rows - int(row_starts[first]))]
    cuts = (np.flatnonzero(pages[1:] != pages[:-1]) + 1).tolist()
    out = []
    for lo, hi in zip([0, *cuts], [*cuts, rows.size], strict=True):
        p = int(pages[lo])
        out.append((p, rows[lo:hi] - int(row_starts[p])))
    return out


def _uniform(pages: list[MiniBlockPage]) -> bool:
    """Whether every page is a plain mini-block page (see the module docstring) of the
    first one's value encoding and chunk header width."""
    first = pages[0]
    found = None
    for page in pages:
        if page.has_rep or page.has_def or page.nbuf != 1 or page.large != first.large:
            return False
        values = point.page_values(page) if point.suits(page) else None
        if values is None:
            return False
        if found is None:
            found = values
            enc, scheme = values
            k = cz.kind(enc)
            if scheme is None and k not in ("flat", "inline_bitpacking"):
                return False
        elif values[1] != found[1] or values[0] != found[0]:
            return False
        page.load()
        if page.dictionary is not None:
            return False
    return True


def _rows_in_chunks(pieces: list[tuple[MiniBlockPage, np.ndarray, str]]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's chunk (in its page) and place in that chunk, for every piece's rows one
    after the other, and the pieces' row counts. Pages whose chunks (but a shorter last
    one) all hold ``2**shift`` rows, the usual case, are done in a few calls for all the
    pieces together; others by a search of their chunks' row ends. A row past its
    page's chunks is a FormatError."""
    lengths = np.fromiter((rows.size for _, rows, _ in pieces), np.int64, len(pieces))
    shifts = [page.shift for page, _, _ in pieces]
    rows = np.concatenate([rows for _, rows, _ in pieces])
    if None not in shifts:
        shift = np.repeat(np.array(shifts, np.int64), lengths)
        cid = rows >> shift
        pos = rows & ((1 << shift) - 1)
    else:
        cids, places = [], []
        for page, page_rows, _ in pieces:
            if page.shift is not None:
                cids.append(page_rows >> page.shift)
                places.append(page_rows & ((1 << page.shift) - 1))
            else:
                c = page.row_end.searchsorted(page_rows, "right")
                cids.append(c)
                places.append(page_rows - page.first_row[np.minimum(
                    c, page.first_row.size - 1)])
        cid, pos = np.concatenate(cids), np.concatenate(places)
    limit = np.repeat(np.fromiter((page.chunk_sizes.size for page, _, _ in pieces),
                                  np.int64, len(pieces)), lengths)
    past = cid >= limit
    if past.any():
        i = int(past.argmax())
        piece = int(np.searchsorted(lengths.cumsum(), i, "right"))
        raise FormatError(f"{pieces[piece][2]}: row {int(rows[i])} past the page's chunks")
    return cid, pos, lengths


@dataclass(frozen=True)
class _ChunkPlaces:
    """Where the chunks of a :class:`_Chunks` lie: per piece its raw (``raws``), and per
    chunk its start in its piece's raw, value count and size; the raws :meth:`_Chunks.words`
    reads (a file's, shared by its pieces, or a piece's) with the chunks and rows of each,
    and whether every chunk starts at a multiple of 8 of an 8-aligned raw."""

    raws: list[np.ndarray]
    starts: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    aligned: bool
    group_raws: list[np.ndarray]
    group_chunks: list[tuple[int, int]]
    group_rows: list[tuple[int, int]]


class _Chunks:
    """The chunks of every piece's rows: per piece its bytes (``raws``: the whole mapped
    file, shared by the pieces of one file, or else a view or copy of its chunks) and
    where its chunks lie in them; for all pieces together the chunk sizes, value counts,
    header words, and each row's chunk (``sel``) and place in it. Reads of words go
    file by file (:meth:`words`), not page by page: ~1000 rows of 10 files touch ~40
    pages in 3 columns, and each gather is a numpy call or two."""

    def __init__(self, pieces: list[tuple[MiniBlockPage, np.ndarray, str]],
                 files: MappedFiles) -> None:
        large = pieces[0][0].large
        # the header's buffer size: a u16 (u32 when large) after the level count (u16)
        size_word = np.dtype("<u4" if large else "<u2")
        cid, pos, lengths = _rows_in_chunks(pieces)  # (cid: each row's chunk in its page)
        new = np.empty(cid.size, bool)  # rows ascend in a piece: a new chunk where the
        new[0] = True  # chunk id changes, or a piece starts
        np.not_equal(cid[1:], cid[:-1], out=new[1:])
        row_ends = lengths.cumsum()
        new[row_ends[:-1]] = True
        heads = new.nonzero()[0]  # the first row of each chunk
        all_chunks = cid[heads]
        first_chunks = np.searchsorted(heads, row_ends - lengths)
        chunk_ends = [*first_chunks[1:].tolist(), heads.size]
        self.pieces = pieces
        self.chunk_ends = chunk_ends
        self.row_ends = row_ends.tolist()
        self.sel = new.cumsum() - 1  # each row's chunk among all the pieces' chunks
        self.heads = heads
        self.pos = pos
        found = self._in_files(files, all_chunks) or self._by_pieces(files, all_chunks)
        self.raws, self.counts = found.raws, found.counts
        self._aligned = found.aligned
        self._group_raws, self._group_chunks, self._group_rows = \
            found.group_raws, found.group_chunks, found.group_rows
        cstart, csize = found.starts, found.sizes
        if int(csize.min()) < _HEAD:
            raise FormatError(f"{self.where(int(csize.argmin()))}: chunk smaller than its header")
        if self._aligned:  # the header's first 8 bytes as one aligned word
            head = self.words(cstart, np.dtype("<u8"), self.chunk_spans())
            size = ((head >> np.uint64(16)) & np.uint64(
                0xFFFFFFFF if large else 0xFFFF)).astype(np.int64)
        else:
            size = self.words(cstart, size_word, self.chunk_spans(), skip=2).astype(np.int64)
        end = (size + 7) & ~7
        end += _HEAD
        over = end > csize
        if over.any():
            raise FormatError(f"{self.where(int(over.argmax()))}: chunk buffers run past "
                              "the chunk")
        past = self.pos >= self.counts[self.sel]
        if past.any():
            raise FormatError(f"{self.where(int(self.sel[past.argmax()]))}: row past the "
                              "values of its chunk")
        self.vstart = cstart + _HEAD  # each value buffer, in its raw
        self.vsize = size

    def _in_files(self, files: MappedFiles, all_chunks: np.ndarray) -> _ChunkPlaces | None:
        """Per piece its file's whole mapping, and the chunks' starts in it, value counts
        and sizes; the pieces of one file (in a row) grouped for :meth:`words`. None
        when a file is not mapped, is too large for a binary view into it (the LZ4 frames
        are built from such views: see :func:`~.lz4_frames.inflate_joined`) or a chunk
        lies past its file's end (each piece then reads its chunks on its own, meeting
        its errors)."""
        starts, counts, sizes, raws = [], [], [], []
        groups: list[tuple[int, int, int, np.ndarray]] = []  # pieces [a, b), rows end, raw
        last = None
        aligned = True
        for k, ((page, _, _), a, b) in enumerate(zip(self.pieces, [0, *self.chunk_ends],
                                                     self.chunk_ends, strict=False)):
            chunks = all_chunks[a:b]
            if page.read is not last:
                whole = files.whole(page.read)
                if whole is None or whole.size >= memory.VIEW_LIMIT:
                    return None
                last = page.read
                aligned = aligned and files.aligned(page.read)
                groups.append((k, k + 1, self.row_ends[k], whole))
            else:
                g0, _, _, whole = groups[-1]
                groups[-1] = (g0, k + 1, self.row_ends[k], whole)
            raws.append(whole)
            starts.append(page.chunk_offsets[chunks] + int(page.buffers[1][0]))
            counts.append(page.chunk_values[chunks])
            sizes.append(page.chunk_sizes[chunks])
        cstart = np.concatenate(starts)
        csize = np.concatenate(sizes)
        limit = np.repeat(np.fromiter((g[3].size for g in groups), np.int64, len(groups)),
                          np.diff([0, *(self.chunk_ends[g[1] - 1] for g in groups)]))
        if not ((cstart >= 0).all() and (cstart + csize <= limit).all()):
            return None
        # chunks start at multiples of 8 of their page's buffer, which usually starts at
        # one of the file: then the header and value words read at multiples of their
        # size are aligned, and numpy gathers those ~40% faster from memory not in cache
        return _ChunkPlaces(
            raws, cstart, np.concatenate(counts), csize,
            aligned=aligned and not (cstart & 7).any(),
            group_raws=[g[3] for g in groups],
            group_chunks=[(self.chunk_ends[g[0] - 1] if g[0] else 0,
                           self.chunk_ends[g[1] - 1]) for g in groups],
            group_rows=[(self.row_ends[g[0] - 1] if g[0] else 0, g[2]) for g in groups])

    def _by_pieces(self, files: MappedFiles, all_chunks: np.ndarray) -> _ChunkPlaces:
        """:meth:`_in_files` piece by piece: each piece's chunks read on their own
        (:meth:`MappedFiles.chunk_bytes`)."""
        raws, cstarts, sizes, counts = [], [], [], []
        for (page, _, _), a, b in zip(self.pieces, [0, *self.chunk_ends], self.chunk_ends,
                                      strict=False):
            chunks = all_chunks[a:b]
            raw, cstart = files.chunk_bytes(page, chunks)
            raws.append(raw)
            cstarts.append(cstart)
            sizes.append(page.chunk_sizes[chunks])
            counts.append(page.chunk_values[chunks])
        return _ChunkPlaces(
            raws, np.concatenate(cstarts), np.concatenate(counts), np.concatenate(sizes),
            aligned=False, group_raws=raws, group_chunks=self.piece_chunk_spans(),
            group_rows=list(zip([0, *self.row_ends[:-1]], self.row_ends, strict=True)))

    def where(self, chunk: int) -> str:
        """The page of chunk ``chunk`` (among all the pieces' chunks), for errors."""
        return self.pieces[int(np.searchsorted(self.chunk_ends, chunk, "right"))][2]

    def piece_chunk_spans(self) -> list[tuple[int, int]]:
        """Each piece's chunks (a span of all the pieces' chunks)."""
        return list(zip([0, *self.chunk_ends[:-1]], self.chunk_ends, strict=True))

    def chunk_spans(self) -> list[tuple[int, int]]:
        """The chunks of each raw read by :meth:`words` (a file's, or a piece's)."""
        return self._group_chunks

    def row_spans(self) -> list[tuple[int, int]]:
        """The rows of each raw read by :meth:`words` (a file's, or a piece's)."""
        return self._group_rows

    def group_raws(self) -> list[np.ndarray]:
        """The raws :meth:`chunk_spans` and :meth:`row_spans` delimit the entries of."""
        return self._group_raws

    def words(self, at: np.ndarray, dt: np.dtype, spans: list[tuple[int, int]],
              skip: int = 0) -> np.ndarray:
        """The little-endian unsigned words ``dt`` at ``skip + at[i]`` of the raw holding
        entry ``i`` (rows or chunks, as ``spans`` from :meth:`row_spans` or
        :meth:`chunk_spans` delimit them): one gather per raw (see
        :func:`~.memory.words_at`), not one per byte of the word; of an aligned view when
        every word is aligned."""
        width = dt.itemsize
        if self._aligned and width > 1 and not skip % width and not (at & (width - 1)).any():
            at = (at + skip) >> (width.bit_length() - 1)  # each word's index, aligned
            pick = memory.aligned_words
        else:
            pick = partial(memory.words_at, skip=skip)
        if len(spans) == 1:
            return pick(self._group_raws[0], dt)[at]
        out = np.empty(at.size, dt)
        for raw, (a, b) in zip(self._group_raws, spans, strict=True):
            out[a:b] = pick(raw, dt)[at[a:b]]
        return out

    def gather(self, at: np.ndarray, width: int, spans: list[tuple[int, int]]) -> np.ndarray:
        """``width`` bytes at ``at[i]`` of the raw holding entry ``i`` (rows or chunks, as
        ``spans`` delimit them), as ``(len(at), width)`` bytes."""
        out = np.empty((at.size, width), np.uint8)
        step = np.arange(width)
        for raw, (a, b) in zip(self._group_raws, spans, strict=True):
            out[a:b] = raw[at[a:b, None] + step]
        return out


def _begin(pieces: list[tuple[MiniBlockPage, np.ndarray, str]], leaf_type: pa.DataType,
           files: MappedFiles) -> Taking:
    first = pieces[0][0]
    found = point.page_values(first)
    assert found is not None
    enc, scheme = found
    c = _Chunks(pieces, files)
    where = pieces[0][2]

    def arrow(block: Block | None) -> pa.Array | None:
        if block is None:
            return None
        values = first.values_to_arrow(block, None)
        return values if values.type == leaf_type else None

    def values(inflated: list | lz4_frames.Inflated) -> pa.Array | None:
        if cz.kind(enc) in ("variable", "fsst"):
            return arrow(point.inflated_strings(enc, inflated, c.counts, c.sel, c.pos,
                                                c.heads, where))
        return arrow(sparse.decode(enc, [ChunkBuffers.join(point.listed(inflated))],
                                   c.counts, c.sel, c.pos, where))

    if scheme is not None:  # each chunk's value buffer compressed on its own
        spans = list(zip(c.raws, c.piece_chunk_spans(), pieces, strict=True))
        inflated: list | lz4_frames.Inflated | lz4_frames.Inflating
        if scheme == 1:  # every page's blocks inflated together (begun, when framed)
            begun = _lz4_begun(c)
            if begun is not None:
                return Taking(begun, lambda done: None if done is None else values(done))
            inflated = point.inflate_lz4_runs(  # (not framed, or an error to name a page)
                [(raw, c.vstart[a:b], c.vsize[a:b], piece_where)
                 for raw, (a, b), (_, _, piece_where) in spans], begin=True)
            if isinstance(inflated, lz4_frames.Inflating):
                return Taking(inflated, lambda done: None if done is None else values(done))
        else:
            inflated = [inflate(scheme, raw[s : s + n], piece_where, buffer=True)
                        for raw, (a, b), (_, _, piece_where) in spans
                        for s, n in zip(c.vstart[a:b].tolist(), c.vsize[a:b].tolist(),
                                        strict=True)]
        got = values(inflated)
    elif cz.kind(enc) == "flat":
        got = arrow(_flat(enc, c))
    else:
        got = arrow(_bitpacked(enc, c))
    return Taking(None, lambda _: got)


_U32 = np.dtype("<u4")


def _lz4_begun(c: _Chunks) -> lz4_frames.Inflating | None:
    """The LZ4 value buffers of every chunk of ``c`` begun as frames
    (:func:`~.lz4_frames.inflate_joined`), their size prefixes read file by file; None
    when :func:`~.point.inflate_lz4_runs` must decide (a buffer with no prefix or
    claiming too much, for its error naming the page; one buffer; buffers no frame
    holds). The chunks' checks have placed each buffer inside its raw already."""
    sizes = c.vsize
    if sizes.size < 2 or int(sizes.min()) < 4:
        return None
    full = c.words(c.vstart, _U32, c.chunk_spans()).astype(np.int64)
    if (full > np.minimum(point.MAX_INFLATE, 255 * sizes + 64)).any():
        return None
    spans = c.chunk_spans()
    got = lz4_frames.inflate_joined(c.group_raws(), [b - a for a, b in spans], c.vstart,
                                    sizes, full, c.where, begin=True)
    return cast("lz4_frames.Inflating | None", got)  # (begun: never an Inflated)


def _flat(enc, c: _Chunks) -> Fixed:
    """Flat values: ``width`` bytes at each row's place in its chunk's value buffer."""
    width = int(enc.flat.bits_per_value) // 8
    sel, pos = c.sel, c.pos
    short = (pos + 1) * width > c.vsize[sel]
    if short.any():
        raise FormatError(f"{c.where(int(sel[short.argmax()]))}: chunk holds fewer bytes "
                          "than its values need")
    at = c.vstart[sel] + pos * width
    if width in (1, 2, 4, 8):
        data = c.words(at, np.dtype(f"<u{width}"), c.row_spans()).view(np.uint8)
    else:
        data = c.gather(at, width, c.row_spans()).reshape(-1)
    return Fixed(data, width * 8, pos.size)


def _bitpacked(enc, c: _Chunks) -> Fixed:
    """Inline FastLanes bitpacking (see :func:`sparse._sparse_inline`): each chunk's bit
    width from its first word, then the (at most) two words of each row's value."""
    bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
    if bits not in (8, 16, 32, 64):
        raise FormatError(f"{c.pieces[0][2]}: inline bitpacking of {bits}-bit values")
    wb, lanes = bits // 8, 1024 // bits
    sizes = c.vsize
    if int(sizes.min()) < wb:
        raise FormatError(f"{c.where(int(sizes.argmin()))}: bitpacked chunk size does not "
                          "match its bit width")
    dt = np.dtype(f"<u{wb}")
    width_c = c.words(c.vstart, dt, c.chunk_spans()).astype(np.int64)
    bad = (width_c > bits) | (sizes != (1 + width_c * lanes) * wb)
    if bad.any():
        raise FormatError(f"{c.where(int(bad.argmax()))}: bitpacked chunk size does not "
                          "match its bit width")
    row_of, lane_of = sparse.row_lane(bits)
    sel, pos = c.sel, c.pos
    width = width_c[sel]
    start = row_of[pos] * width
    w0, shift = start // bits, start % bits
    j = np.where(width > 0, 1 + w0 * lanes + lane_of[pos], 0)  # 0 bits: read the header
    j_hi = np.where(shift + width > bits, j + lanes, j)  # continues in the lane's next word
    base = c.vstart[sel]
    spans = c.row_spans()
    lo = c.words(base + j * wb, dt, spans)
    hi = c.words(base + j_hi * wb, dt, spans)
    sh = shift.astype(dt)
    # without a spill the high part lands at bits >= width and is masked off; two shifts
    # keep each below the word size
    val = (lo >> sh) | ((hi << dt.type(1)) << (dt.type(bits - 1) - sh))
    mask = (np.uint64(1) << np.minimum(width, 63).astype(np.uint64)) - np.uint64(1)
    mask = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF), mask).astype(dt)
    val &= mask
    return Fixed(val.view(np.uint8), bits, pos.size)
