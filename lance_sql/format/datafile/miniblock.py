"""Mini-block pages of Lance 2.1/2.2: chunk metadata, repetition index, row selection.

Page buffers: 0 = chunk metadata (one u16 per chunk, u32 when ``has_large_chunk``:
``((bytes / 8 - 1) << 4) | log2(values)``, the last chunk's count implied by the page's
item count), 1 = the chunks, 2 = the dictionary (if any), then the repetition index (if
``repetition_index_depth > 0``: ``depth + 1`` u64 per chunk, rows finished in the chunk
and items left over after the last finished row).

A chunk starts with ``u16 levels``, ``u16`` rep and def sizes (when present) and one size
per value buffer (u16, or u32 with large chunks), padded to 8 bytes; then rep, def and
each value buffer, each padded to 8 bytes.

Reads decode only the chunks that hold the requested rows (a ``take`` reads just those
chunks' bytes) and all of them in one vectorised pass. Without lists a row is one item of
one chunk; when every chunk but a shorter last one holds the same ``2**k`` items (checked
once per page) a row's chunk is ``row >> k``, otherwise a ``searchsorted`` finds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile import repdef, sparse
from lance_sql.format.datafile.blocks import Fixed, to_arrow
from lance_sql.format.datafile.compressive import ChunkBuffers, range_indices
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

Reader = Callable[[int, int], bytes | memoryview]
COALESCE = 64 * 1024  # join chunk reads separated by less than this
SPARSE_RATIO = 8  # unpack single values when rows are this much fewer than chunk values


def _u16(raw: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return raw[pos].astype(np.int64) | (raw[pos + 1].astype(np.int64) << 8)


def _u32(raw: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _u16(raw, pos) | (_u16(raw, pos + 2) << 16)


def _pad8(n: np.ndarray | np.integer) -> np.ndarray:
    return (n + 7) & ~7


class MiniBlockPage:
    """Reads a mini-block page: small chunks of levels and values, decoded per chunk."""
    def __init__(
        self,
        read: Reader,
        buffers: tuple[tuple[int, int], ...],
        layout: pb.MiniBlockLayout,
        num_rows: int,
        leaf_type: pa.DataType,
        where: str,
    ) -> None:
        self.read = read
        self.buffers = buffers
        self.layout = layout
        self.num_rows = num_rows
        self.leaf_type = leaf_type
        self.where = where
        self.layers = list(layout.layers)
        repdef.check_layers(self.layers, where)
        self.has_rep = layout.HasField("rep_compression")
        self.has_def = layout.HasField("def_compression")
        self.max_rep = repdef.max_rep(self.layers)
        if self.has_rep != (self.max_rep > 0):
            raise FormatError(f"{where}: repetition levels do not match the list layers")
        self.nbuf = int(layout.num_buffers)
        if self.nbuf != cz.buffers_used(layout.value_compression, where):
            raise FormatError(f"{where}: {self.nbuf} buffers per chunk do not fit the encoding")
        self.large = bool(layout.has_large_chunk)
        self._loaded = False
        # a page decoder is shared by the threads scanning its file: the first use parses
        # the metadata under this lock, and ``_loaded`` is set only once all of it is in place
        self._load_lock = threading.Lock()
        # what point takes derive from the layout (lance_sql.format.datafile.point),
        # made on first use: a page's layout never changes
        self.point_layout: tuple | None = None
        # (point: the page as plain integers read one by one; False: not such a page)
        self.point_ints: object = None
        # (point: the page as one row is taken from it; False: not such a page)
        self.point_row: object = None
        # (batch_key: what pages decoded together must share; False: not batchable)
        self._batch_key: tuple | bool | None = None

    # ------------------------------------------------------------------ metadata
    def _buffer(self, i: int) -> bytes | memoryview:
        if i >= len(self.buffers):
            raise FormatError(f"{self.where}: mini-block page has no buffer {i}")
        off, size = self.buffers[i]
        return self.read(off, size) if size else b""

    def _load(self) -> None:
        if self._loaded:
            return
        with self._load_lock:
            if not self._loaded:
                self._load_metadata()

    def _load_metadata(self) -> None:
        where = self.where
        meta = np.frombuffer(self._buffer(0), np.uint8)
        width = 4 if self.large else 2
        if meta.size % width:
            raise FormatError(f"{where}: chunk metadata of {meta.size} bytes")
        words = meta.view("<u4" if self.large else "<u2").astype(np.int64)
        n = words.size
        num_items = int(self.layout.num_items)
        if n == 0:
            if num_items or self.num_rows:
                raise FormatError(f"{where}: mini-block page without chunks holds items")
        sizes = ((words >> 4) + 1) * 8
        logs = words & 0xF
        values = np.left_shift(np.ones(n, np.int64), logs)
        if n:
            values[-1] = num_items - int(values[:-1].sum())
            if values[-1] <= 0 and num_items:
                raise FormatError(f"{where}: chunk value counts exceed the page's {num_items}")
        chunk_bytes = self.buffers[1][1] if len(self.buffers) > 1 else 0
        if int(sizes.sum()) > chunk_bytes:
            raise FormatError(
                f"{where}: chunk sizes add up to {int(sizes.sum())} bytes, buffer has {chunk_bytes}"
            )
        self.chunk_sizes = sizes
        self.chunk_offsets = np.cumsum(sizes) - sizes
        self.chunk_values = values
        nxt = 2
        self.dictionary = None
        if self.layout.HasField("dictionary"):
            nitems = int(self.layout.num_dictionary_items)
            block = cz.decode_block(self.layout.dictionary, self._buffer(2), nitems, where)
            self.dictionary = to_arrow(block, self.leaf_type, None, f"{where} dictionary")
            nxt = 3
        depth = int(self.layout.repetition_index_depth)
        if self.has_rep:
            if depth < 1:
                raise FormatError(f"{where}: list page without a repetition index")
            raw = np.frombuffer(self._buffer(nxt), np.uint8)
            if raw.size != 8 * (depth + 1) * n:
                raise FormatError(f"{where}: repetition index of {raw.size} bytes for {n} chunks")
            idx = raw.view("<u8").reshape(n, depth + 1).astype(np.int64)
            ends, partial = idx[:, 0], idx[:, -1]
            trailer = partial > 0
            preamble = np.r_[False, trailer[:-1]]
            starts = ends + trailer - preamble
            if np.any(starts < 0) or int(starts.sum()) != self.num_rows:
                raise FormatError(f"{where}: repetition index does not add up to the page rows")
            self.preamble = preamble
        else:
            starts = values
            self.preamble = np.zeros(n, bool)
            if int(values.sum()) != self.num_rows and n:
                raise FormatError(f"{where}: {int(values.sum())} items for {self.num_rows} rows")
        self.row_starts = starts  # rows starting in each chunk
        self.first_row = np.cumsum(starts) - starts
        self.row_end = self.first_row + starts
        self.shift = None if self.has_rep else _uniform_shift(logs, values)
        self._loaded = True

    # ------------------------------------------------------------------ chunks
    def _row_chunks(self, rows: np.ndarray) -> np.ndarray:
        """Chunk id of each row (pages without lists: a row is one item of one chunk)."""
        if self.shift is not None:  # every chunk but a shorter last one holds 2**shift rows
            return rows >> self.shift
        return np.searchsorted(self.row_end, rows, "right")

    def _flat_chunks_for(self, starts: np.ndarray, ends: np.ndarray):
        """Pages without lists: (sorted chunk ids, chunk of each start, chunk of each end).

        Range ``[s, e)`` spans chunks ``chunk(s)..chunk(e - 1)``.
        """
        c0 = self._row_chunks(starts)
        c1 = self._row_chunks(ends - 1)
        n = self.chunk_sizes.size
        if c0.size and int(c1[-1]) >= n:
            raise FormatError(f"{self.where}: row {int(ends[-1]) - 1} past the page's chunks")
        wanted = np.zeros(n, dtype=bool)  # chunk ids are small: a mask beats sorting
        if np.array_equal(c0, c1):  # each range inside one chunk (e.g. single rows)
            wanted[c0] = True
        else:
            wanted[range_indices(c0, c1 - c0 + 1)] = True
        return np.flatnonzero(wanted), c0, c1

    def _chunks_for(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Sorted chunk ids holding rows [starts[i], ends[i])."""
        if not self.has_rep:
            return self._flat_chunks_for(starts, ends)[0]
        row_end = self.row_end
        n = self.chunk_sizes.size
        c0 = np.searchsorted(row_end, starts, "right")
        last_row = ends - 1
        c1 = np.searchsorted(row_end, last_row, "right")
        # a row may continue into following chunks (up to where the next row starts)
        c_next = np.searchsorted(row_end, ends, "right")
        nxt_valid = ends < self.num_rows
        c_hi = np.where(
            nxt_valid,
            np.where(self.preamble[np.minimum(c_next, n - 1)], c_next, c_next - 1),
            n - 1,
        )
        c_hi = np.maximum(c_hi, c1)
        runs = range_indices(c0, c_hi - c0 + 1)
        wanted = np.zeros(n, dtype=bool)  # chunk ids are small: a mask beats sorting
        wanted[runs] = True
        return np.flatnonzero(wanted)

    def _read_chunks(self, chunks: np.ndarray, coalesce: int = COALESCE
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Bytes of the given chunks back to back, and each chunk's start in them (reads
        of chunks less than ``coalesce`` bytes apart joined into one)."""
        off0 = self.buffers[1][0]
        offs = self.chunk_offsets[chunks]
        sizes = self.chunk_sizes[chunks]
        ends = offs + sizes
        gap = offs[1:] - ends[:-1]
        cut = np.flatnonzero(gap > coalesce) + 1
        lo = np.concatenate(([0], cut))  # (np.r_ is slow for these)
        hi = np.concatenate((cut, [chunks.size]))
        ranges = getattr(self.read, "ranges", None)
        if ranges is not None and lo.size > 1:  # many reads straight into one buffer
            starts, stops = offs[lo], ends[hi - 1]
            raw = ranges(off0 + starts, stops - starts)
            base = np.cumsum(stops - starts) - (stops - starts)
            which = np.repeat(np.arange(lo.size), hi - lo)
            return raw, offs - starts[which] + base[which]
        pieces = []
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            start, stop = int(offs[a]), int(ends[b - 1])
            pieces.append((start, self.read(off0 + start, stop - start)))
        if len(pieces) == 1:
            start, data = pieces[0]
            raw = np.frombuffer(data, np.uint8)
            return raw, offs - start
        raw = np.frombuffer(b"".join(p[1] for p in pieces), np.uint8)
        # position of each chunk inside the joined reads
        read_starts = np.array([p[0] for p in pieces], np.int64)
        read_base = np.cumsum([0] + [len(p[1]) for p in pieces[:-1]])
        which = np.searchsorted(read_starts, offs, "right") - 1
        return raw, offs - read_starts[which] + read_base[which]

    def _parse_chunks(self, chunks: np.ndarray):
        """Read and split the given chunks: (level counts, value counts, buffers)."""
        raw, cstart = self._read_chunks(chunks)
        return self.split_chunks(raw, cstart, self.chunk_sizes[chunks],
                                 self.chunk_values[chunks])

    def split_chunks(self, raw: np.ndarray, cstart: np.ndarray, csize: np.ndarray,
                     counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[ChunkBuffers]]:
        """Chunks of this page's shape (levels, buffers, chunk-size width) at ``cstart``
        in ``raw``, ``csize`` bytes and ``counts`` values each, split into their buffers:
        (level counts, value counts, one :class:`ChunkBuffers` per buffer). The chunks
        may come from several pages of that shape (see :mod:`.batched`)."""
        where = self.where
        width = 4 if self.large else 2
        nlev = (int(self.has_rep) + int(self.has_def))
        hl = int(_pad8(np.int64(2 + 2 * nlev + width * self.nbuf)))
        if np.any(csize < hl):
            raise FormatError(f"{where}: chunk smaller than its header")
        num_levels = _u16(raw, cstart)
        sizes = [_u16(raw, cstart + 2 + 2 * i) for i in range(nlev)]
        base = cstart + 2 + 2 * nlev
        read_size = _u32 if self.large else _u16
        sizes += [read_size(raw, base + width * i) for i in range(self.nbuf)]
        pos = cstart + hl
        bufs = []
        for size in sizes:
            bufs.append((pos, size))
            pos = pos + _pad8(size)
        if np.any(pos - cstart > csize) or np.any(
            bufs[-1][0] + bufs[-1][1] - cstart > csize
        ):
            raise FormatError(f"{where}: chunk buffers run past the chunk")
        joined = [ChunkBuffers(raw, start, size) for start, size in bufs]
        if nlev and np.any(num_levels <= 0):
            raise FormatError(f"{where}: chunk with levels has no level count")
        return num_levels, counts, joined

    def _decode_chunks(self, chunks: np.ndarray):
        return self.decode_split(*self._parse_chunks(chunks))

    def decode_split(self, num_levels: np.ndarray, counts: np.ndarray,
                     joined: list[ChunkBuffers]):  # fmt: skip
        """(rep, def, value block, level counts, value counts) of chunks split by
        :meth:`split_chunks`."""
        where = self.where
        nlev = int(self.has_rep) + int(self.has_def)
        rep = def_ = None
        i = 0
        if self.has_rep:
            rep = cz.decode_levels(self.layout.rep_compression, joined[i], num_levels, where)
            i += 1
        if self.has_def:
            def_ = cz.decode_levels(self.layout.def_compression, joined[i], num_levels, where)
            i += 1
        if not nlev:
            num_levels = counts
        values = cz.decode_chunks(self.layout.value_compression, joined[i:], counts, where)
        return rep, def_, values, num_levels, counts

    # ------------------------------------------------------------------ rows
    def _decode_sparse(self, chunks: np.ndarray, c: np.ndarray,
                       p: np.ndarray) -> repdef.LeafPiece | None:  # fmt: skip
        """Just item ``p[i]`` of chunk ``chunks[c[i]]`` for each row (no lists): only those
        values are unpacked inside the chunks."""
        where = self.where
        num_levels, counts, joined = self._parse_chunks(chunks)
        def_ = None
        i = 0
        if self.has_def:
            levels = cz.decode_levels(self.layout.def_compression, joined[0], num_levels, where)
            if levels.size != int(num_levels.sum()) or not np.array_equal(num_levels, counts):
                raise FormatError(f"{where}: def levels do not match the chunk values")
            level_start = np.cumsum(num_levels) - num_levels
            def_ = levels[level_start[c] + p]
            i = 1
        block = sparse.decode(self.layout.value_compression, joined[i:], counts, c, p, where)
        if block is None:
            return None
        valid = None if def_ is None else def_ == 0
        values = self._to_arrow(block, valid)
        return repdef.LeafPiece(None, def_, values, self.layers, int(p.size))

    def decode(self, starts: np.ndarray, ends: np.ndarray) -> repdef.LeafPiece:
        """Rows ``[starts[i], ends[i])`` (page-local, sorted, disjoint, non-empty)."""
        self._load()
        if starts.size == 1 and self.shift is not None and not self.has_def:
            piece = self._decode_range(int(starts[0]), int(ends[0]))
            if piece is not None:
                return piece
        where = self.where
        if self.has_rep:
            chunks = self._chunks_for(starts, ends)
        else:
            chunks, cid0, cid1 = self._flat_chunks_for(starts, ends)
            to_sel = _selected_index(chunks, self.chunk_sizes.size)
        wanted = int((ends - starts).sum())
        if (not self.has_rep and wanted * SPARSE_RATIO < int(self.chunk_values[chunks].sum())
                and sparse.supported(self.layout.value_compression)):  # fmt: skip
            if wanted == starts.size:  # single rows: their chunks are known already
                rows, cid = starts, cid0
            else:
                rows = range_indices(starts, ends - starts)
                cid = self._row_chunks(rows)
            if self.shift is not None:
                p = rows & ((1 << self.shift) - 1)
            else:
                p = rows - self.first_row[cid]
            piece = self._decode_sparse(chunks, to_sel(cid), p)
            if piece is not None:
                return piece
        rep, def_, block, num_levels, counts = self._decode_chunks(chunks)
        total_levels = int(num_levels.sum())
        if rep is not None and rep.size != total_levels:
            raise FormatError(f"{where}: decoded {rep.size} rep levels, expected {total_levels}")
        if def_ is not None and def_.size != total_levels:
            raise FormatError(f"{where}: decoded {def_.size} def levels, expected {total_levels}")
        vis = repdef.visible(def_, self.layers)
        nvis = total_levels if vis is None else int(np.count_nonzero(vis))
        if nvis != block.n:
            raise FormatError(f"{where}: {block.n} values for {nvis} value slots")
        level_start = np.cumsum(num_levels) - num_levels
        # level span of each requested range
        if rep is None:
            c0, c1 = to_sel(cid0), to_sel(cid1)
            lo = level_start[c0] + (starts - self.first_row[cid0])
            hi = level_start[c1] + (ends - 1 - self.first_row[cid1]) + 1
        else:
            lo, hi = self._row_spans(rep, chunks, level_start, num_levels, starts, ends)
        span_len = hi - lo
        if np.any(span_len <= 0) or np.any(hi > total_levels):
            raise FormatError(f"{where}: rows map outside the decoded chunks")
        # value slots of each span
        if vis is None:
            vlo, vhi = lo, hi
        else:
            cum = np.zeros(total_levels + 1, np.int64)
            np.cumsum(vis.astype(np.int64), out=cum[1:])
            vlo, vhi = cum[lo], cum[hi]
        whole = lo.size == 1 and int(lo[0]) == 0 and int(hi[0]) == total_levels
        slot_valid = None
        if def_ is not None:
            slot_valid = def_ == 0 if vis is None else def_[vis] == 0
        values = self._to_arrow(block, slot_valid)
        if not whole:
            take = range_indices(lo, span_len)
            rep = None if rep is None else rep[take]
            def_ = None if def_ is None else def_[take]
            values = select(values, vlo, vhi)
        return repdef.LeafPiece(rep, def_, values, self.layers, int(span_len.sum()))

    def _row_spans(self, rep, chunks, level_start, num_levels, starts, ends):
        where = self.where
        found = np.flatnonzero(rep == self.max_rep)
        first_row = self.first_row[chunks]
        # first row start inside each decoded chunk
        first_found = np.searchsorted(found, level_start, "left")
        # end (in levels) of the contiguous run of chunks each decoded chunk belongs to
        run_break = np.r_[np.flatnonzero(np.diff(chunks) != 1), chunks.size - 1]
        run_end_chunk = run_break[np.searchsorted(run_break, np.arange(chunks.size), "left")]
        run_end = level_start[run_end_chunk] + num_levels[run_end_chunk]
        row_end = first_row + self.row_starts[chunks]
        c0 = np.searchsorted(row_end, starts, "right")
        c1 = np.searchsorted(row_end, ends - 1, "right")
        if np.any(c0 >= chunks.size) or np.any(c1 >= chunks.size):
            raise FormatError(f"{where}: repetition index points past the decoded chunks")
        i0 = first_found[c0] + (starts - first_row[c0])
        i1 = first_found[c1] + (ends - 1 - first_row[c1])
        if np.any(i0 >= found.size) or np.any(i1 >= found.size):
            raise FormatError(f"{where}: fewer row starts than the repetition index claims")
        lo = found[i0]
        total = int(level_start[-1] + num_levels[-1])
        nxt = np.where(i1 + 1 < found.size, found[np.minimum(i1 + 1, found.size - 1)], total)
        hi = np.minimum(nxt, run_end[c1])
        return lo, hi

    def _to_arrow(self, block, slot_valid: np.ndarray | None) -> pa.Array:
        where = self.where
        if self.dictionary is None:
            return to_arrow(block, self.leaf_type, slot_valid, where)
        if not isinstance(block, Fixed) or block.fsl or block.bits not in (8, 16, 32, 64):
            raise FormatError(f"{where}: dictionary indices are not integers")
        indices = block.data[: block.n * block.bits // 8].view(f"<u{block.bits // 8}")
        check = indices if slot_valid is None else indices[slot_valid]
        if check.size and int(check.max()) >= len(self.dictionary):
            raise FormatError(
                f"{where}: dictionary index {int(check.max())} out of range "
                f"({len(self.dictionary)} items)"
            )
        if slot_valid is None:  # the indices as they are (no widening copy)
            return self.dictionary.take(pa.array(indices))
        return self.dictionary.take(pa.array(indices, mask=~slot_valid))

    def batch_key(self, levels: bool = False) -> tuple | None:
        """What pages whose chunks are decoded together in one pass (:mod:`.batched`)
        must share: chunk shape, value and level encodings, leaf type. None for pages
        that cannot be: a dictionary (one per page), or lists unless ``levels`` (their
        rows cross chunks, so only whole pages decode together, into levels)."""
        key = self._batch_key
        if key is None:
            self._load()
            if self.dictionary is not None:
                key = False
            else:
                layout = self.layout
                key = (self.leaf_type, self.large, self.has_rep, self.has_def, self.nbuf,
                       tuple(self.layers), layout.value_compression.SerializeToString(),
                       layout.rep_compression.SerializeToString() if self.has_rep else b"",
                       layout.def_compression.SerializeToString() if self.has_def else b"")
            self._batch_key = key  # (racing threads: an equal key)
        if not isinstance(key, tuple) or (self.has_rep and not levels):
            return None
        return key

    def chunk_span(self) -> tuple[int, int]:
        """(file offset, bytes) of all the page's chunks (metadata loaded)."""
        n = self.chunk_sizes.size
        size = int(self.chunk_offsets[-1] + self.chunk_sizes[-1]) if n else 0
        return self.buffers[1][0] if len(self.buffers) > 1 else 0, size

    # the pieces the point-take path (:mod:`point`) builds on
    def load(self) -> None:
        """Parse the chunk metadata (once)."""
        self._load()

    def chunk_bytes(self, chunks: np.ndarray, coalesce: int = COALESCE
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Bytes holding the sorted ``chunks``, and each chunk's start in them: a view of
        the file from the first chunk to the end of the last when the source is a mapped
        file (nothing copied, however far apart the chunks), else the chunks read back to
        back, those less than ``coalesce`` bytes apart together."""
        viewer = getattr(self.read, "view", None)
        if viewer is not None and chunks.size:
            offs = self.chunk_offsets[chunks]
            first = int(offs[0])
            end = int(offs[-1]) + int(self.chunk_sizes[chunks[-1]])
            raw = viewer(self.buffers[1][0] + first, end - first)
            if raw is not None:
                return raw, offs - first
        return self._read_chunks(chunks, coalesce)

    def values_to_arrow(self, block, slot_valid: np.ndarray | None) -> pa.Array:
        """Decoded values (dictionary indices included) as the leaf type."""
        return self._to_arrow(block, slot_valid)


    def _decode_range(self, start: int, end: int) -> repdef.LeafPiece | None:
        """Rows ``[start, end)`` of a page without levels whose chunks hold ``2**shift``
        values each (the last fewer): a scan's slice, in a fixed handful of numpy calls
        (one read, the chunk headers at once, one decode of the value buffers).

        None when the general path must decide: few rows of big chunks (single values
        are unpacked there), several value buffers, or any header that does not add up
        (the general path then raises its usual error).
        """
        k = self.shift
        assert k is not None and not self.has_rep and not self.has_def
        n = self.chunk_sizes.size
        c0, c1 = start >> k, (end - 1) >> k
        if self.nbuf != 1 or end <= start or c1 >= n:
            return None
        counts = self.chunk_values[c0 : c1 + 1]
        total = int(counts.sum())
        if (end - start) * SPARSE_RATIO < total and sparse.supported(
                self.layout.value_compression):  # fmt: skip
            return None
        offs = self.chunk_offsets[c0 : c1 + 1]
        csize = self.chunk_sizes[c0 : c1 + 1]
        first = int(offs[0])
        data = self.read(self.buffers[1][0] + first, int(offs[-1] + csize[-1]) - first)
        raw = np.frombuffer(data, np.uint8)
        cstart = offs - first
        width = 4 if self.large else 2
        hl = int(_pad8(np.int64(2 + width)))
        if np.any(csize < hl):
            return None
        size = (_u32 if self.large else _u16)(raw, cstart + 2)
        if np.any(hl + _pad8(size) > csize):
            return None
        where = self.where
        block = cz.decode_chunks(self.layout.value_compression,
                                 [ChunkBuffers(raw, cstart + hl, size)], counts, where)
        if block.n != total:
            return None
        values = self._to_arrow(block, None)
        lo = start - (c0 << k)
        if lo or end - start != total:
            values = values.slice(lo, end - start)
        return repdef.LeafPiece(None, None, values, self.layers, end - start)


def _uniform_shift(logs: np.ndarray, values: np.ndarray) -> int | None:
    """``k`` when every chunk but the last holds ``2**k`` values and the last at most that
    many (then a row's chunk is ``row >> k``), else None."""
    n = values.size
    if n == 0 or int(values[-1]) <= 0:
        return None
    if n == 1:
        return 62  # all rows in chunk 0
    k = int(logs[0])
    if np.any(logs[:-1] != k) or int(values[-1]) > (1 << k):
        return None
    return k


def _selected_index(chunks: np.ndarray, n: int) -> Callable[[np.ndarray], np.ndarray]:
    """Maps chunk ids (all in ``chunks``) to their index in the sorted ``chunks``."""
    if chunks.size == 0:
        return lambda cid: cid
    first = int(chunks[0])
    if int(chunks[-1]) - first + 1 == chunks.size:  # a contiguous run
        return lambda cid: cid - first if first else cid
    lut = np.zeros(n, np.int64)
    lut[chunks] = np.arange(chunks.size, dtype=np.int64)
    return lambda cid: lut[cid]


def select(values: pa.Array, lo: np.ndarray, hi: np.ndarray) -> pa.Array:
    """Values in the ranges ``[lo[i], hi[i])``, concatenated."""
    if lo.size == 1:
        return values.slice(int(lo[0]), int(hi[0] - lo[0]))
    return values.take(pa.array(range_indices(lo, hi - lo)))
