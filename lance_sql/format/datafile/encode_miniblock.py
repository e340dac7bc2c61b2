"""Mini-block pages of the Lance 2.2 writer.

Values are cut into chunks of a few KiB (1024 values when bitpacked, as the format
requires), each carrying its slice of the rep/def levels, out-of-line bitpacked with one
width per page. Compression is applied where it pays: FastLanes bitpacking for integers
(when it saves 10%), a page dictionary for low-cardinality strings (always for Arrow
dictionary columns, with indices of the key's width), LZ4 over string chunks of up to
16 KiB when it shows a 15% gain (else over 64 KiB chunks when those do). A string
column's field metadata may ask for its compression as pylance honours it
(``lance-encoding:compression`` = ``fsst``, ``zstd``, ``lz4`` or ``none``,
``lance-encoding:compression-level``): see :class:`StringCompression`.
FSST (a symbol table learnt per page, :mod:`fsst_encode`) gives files as small as
pylance's and faster row takes, but our numpy encoder writes ~3x slower than pylance and
full scans of FSST pages cost ~2x those of LZ4 pages, so it is not the default
(:data:`DEFAULT_FSST`); asked for, it is used wherever it saves 15%. Chunks use
the 2.2 framing (``has_large_chunk``: u32 sizes and metadata), or for 2.1 files the
small framing (u16 sizes and metadata: a chunk holds at most 32 KiB, so string chunks
aim at :data:`SMALL_CHUNK_TARGET`); lists get a repetition index (rows finished per
chunk, items left over).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, UnsupportedFeatureError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import fsst_encode as fe
from lance_sql.format.datafile import memory, repdef
from lance_sql.format.datafile.blocks import (
    DEFLATE_THREAD_MIN_BYTES,
    deflate,
    deflate_many,
    deflate_slices,
    in_two_halves,
)
from lance_sql.format.datafile.encode_v2_2 import (
    CHUNK_TARGET,
    LZ4,
    MAX_CHUNK_LEVELS,
    PAD_BYTE,
    EncodedPage,
    Values,
    encoding,
    flat_enc,
    fsl_encoding,
    fsst_table,
    fsst_values,
    levels_encoding,
)
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

LZ4_CHUNK_TARGET = 64 * 1024  # string chunks that get LZ4 when the metadata asks for it, or
# by default when the default's smaller chunks do not save 15% (2.2 chunk sizes are u32):
# 5-8% smaller than 16 KiB chunks on text
ZSTD = pb.COMPRESSION_ALGORITHM_ZSTD
FSST_LZ4_MARGIN = 1.05  # with DEFAULT_FSST, LZ4 is kept when within 5% of FSST's size: it
# writes and scans faster (FSST takes rows faster and is as small as pylance's files)

# The default general compression of string chunks (the metadata asking none): codec, level
# (None: the codec's fastest; not recorded in the file) and chunk size. LZ4 level 1 is the
# only codec measured (bench/bench_string_defaults.py) that keeps writes, scans and takes
# as fast as they are. 16 KiB chunks: a take inflates one chunk per row it wants, so
# 100-row takes cost 0.65-0.83x CPU those of 32 KiB chunks (1M-row corpus columns;
# 1000-row takes of bench_lsm-like short strings, 2M rows, 0.74-0.76x), for files
# 2.4-4.6% larger, scans of 0.99-1.02x CPU (JSON 1.02-1.07x) and writes of 0.94-1.06x
# (medians of 21-31 interleaved rounds; neither does Python work per chunk any more, see
# compressive._lz4_variable and _deflated_chunks). 8 KiB chunks take rows faster still
# (0.53-0.72x) but make URL and JSON files 8-11% larger; at 4 KiB LZ4 itself compresses
# ~25% slower a byte (json writes 1.5x). LZ4 HC (levels 2-3, same block format) shrinks
# URL and JSON text 10-20% but costs 2-4x the codec's CPU; zstd (level 3, 64 KiB) and
# FSST reach pylance's sizes but full scans cost 1.5-2x (zstd) and 2.3-3.9x (FSST) those
# of LZ4 pages. LZ4 has no entropy coding, so short high-entropy strings (ids, names) stay
# at 1.16x pylance's FSST files or more at any level and chunk size.
# the 2.1 framing's limits: a chunk's size is stored in 12 bits of 8-byte words, each of
# its buffers' sizes in a u16
SMALL_CHUNK_BYTES = 4096 * 8
SMALL_BUFFER_BYTES = 0xFFFF
# string chunks that get general compression in 2.1 files: at most twice this raw
# (:func:`_variable_counts`), so compressed, even when it does not pay, they fit
SMALL_CHUNK_TARGET = 8 * 1024
DEFAULT_SCHEME = LZ4
DEFAULT_LEVEL: int | None = None
DEFAULT_CHUNK_TARGET = 16 * 1024
DEFAULT_FSST = False  # FSST only when a column's metadata asks for it (see the docstring)
COMPRESSION_KEY = "lance-encoding:compression"
COMPRESSION_LEVEL_KEY = "lance-encoding:compression-level"
ZSTD_DEFAULT_LEVEL = 3  # zstd's own default, used when the metadata names no level


@dataclass(frozen=True)
class StringCompression:
    """What a column's field metadata asks for its string chunks: ``fsst``, or ``scheme``
    None for no general compression (``none``), else LZ4 or ZSTD at ``level`` (recorded in
    the file only when the metadata gave one, as pylance does)."""

    scheme: int | None
    level: int | None = None
    fsst: bool = False

    @staticmethod
    def from_metadata(metadata: Mapping[str, bytes | str], column: str
                      ) -> StringCompression | None:  # fmt: skip
        """None when the metadata says nothing (the writer then decides)."""
        def text(key: str) -> str | None:
            value = metadata.get(key)
            return value.decode() if isinstance(value, bytes) else value

        name, level = text(COMPRESSION_KEY), text(COMPRESSION_LEVEL_KEY)
        if name is None:
            return None
        schemes = {"none": None, "lz4": LZ4, "zstd": ZSTD, "fsst": None}
        if name.strip().lower() not in schemes:
            raise InvalidInputError(
                f"column {column!r}: {COMPRESSION_KEY}={name!r} is not one of "
                f"{', '.join(schemes)}")
        if name.strip().lower() == "fsst":
            return StringCompression(None, fsst=True)
        scheme = schemes[name.strip().lower()]
        parsed = None
        if level is not None and scheme == ZSTD:
            try:
                parsed = int(level)
            except ValueError:
                parsed = None
            if parsed is None or not -7 <= parsed <= 22:
                raise InvalidInputError(
                    f"column {column!r}: {COMPRESSION_LEVEL_KEY}={level!r} is not a zstd "
                    f"level (-7..22)")
        return StringCompression(scheme, parsed)

    @staticmethod
    def wants_fsst(compression: StringCompression | None) -> bool:
        """Whether FSST is tried for a column with this metadata choice (None: none made)."""
        return DEFAULT_FSST if compression is None else compression.fsst


@dataclass(frozen=True)
class UniformChunks:
    """The single value buffer of every chunk of a page when all but the last are the
    same size: the rows of ``rows`` (uint8, one row a chunk), then ``last`` (or None).
    Such pages (fixed-width values, bitpacked blocks of one width, dictionary indices)
    are assembled in a few numpy calls instead of chunk by chunk."""

    rows: np.ndarray
    last: bytes | None

    def as_lists(self) -> list[list[Chunk]]:
        """The chunks one by one (for pages that also carry levels)."""
        out = [[row.tobytes()] for row in self.rows]
        return out + [[self.last]] if self.last is not None else out


Chunk = bytes | memoryview  # one buffer of a chunk


@dataclass(frozen=True)
class OneBufferChunks:
    """The single value buffer of each chunk of a page (strings), in chunk order: kept
    as one list, as no list per chunk is made (thousands of small lists cost a garbage
    collection pass or more each page)."""

    buffers: list[Chunk]


ChunkValues = list[list[Chunk]] | UniformChunks | OneBufferChunks  # each chunk's buffers


def _fixed_chunks(data: np.ndarray, n: int, per: int, bits: int) -> UniformChunks:
    """Chunks of ``per`` values of ``bits`` bits (``per * bits`` a multiple of 8), the
    last holding what is left: views of ``data``, no copy."""
    size = per * bits // 8
    full = n // per
    rows = data[: full * size].reshape(full, size)
    rest = (n * bits + 7) // 8 - full * size
    last = data[full * size : full * size + rest].tobytes() if n % per else None
    return UniformChunks(rows, last)


def _chunk_counts(n: int, per_chunk: int) -> np.ndarray:
    full, rest = divmod(n, per_chunk)
    counts = np.full(full, per_chunk, np.int64)
    return np.r_[counts, rest] if rest else counts


def _variable_counts(offsets: np.ndarray, width: int, target: int = CHUNK_TARGET) -> np.ndarray:
    """Power-of-two value counts whose chunk (offsets + bytes) stays near ``target`` bytes.

    One count for the whole page when the strings are even enough; otherwise greedily.
    """
    n = offsets.size - 1
    avg = (int(offsets[-1]) - int(offsets[0])) / max(n, 1) + width
    k = 1
    while 2 * k <= 4096 and 2 * k * avg + width <= target:
        k *= 2
    counts = _chunk_counts(n, k)
    bounds = np.r_[0, np.cumsum(counts)]
    sizes = offsets[bounds[1:]] - offsets[bounds[:-1]] + (counts + 1) * width
    if n and int(sizes.max()) <= 2 * target:
        return counts
    greedy: list[int] = []
    i = 0
    while i < n:
        k = 1
        while i + 2 * k <= n and (offsets[i + 2 * k] - offsets[i]) + (2 * k + 1) * width \
                <= target and 2 * k <= 4096:  # fmt: skip
            k *= 2
        if i + 2 * k > n and i + k < n:
            rest = n - i
            if (offsets[n] - offsets[i]) + (rest + 1) * width <= target:
                k = rest
        greedy.append(k)
        i += k
    return np.array(greedy, np.int64)


class _StringChunks:
    """The mini-block chunks of a page of strings: each its ``count + 1`` offsets
    (relative to the chunk), its bytes and zero padding to the offset width. The offsets
    of all chunks are worked out at once and the chunks joined in one copy
    (:meth:`joined`)."""

    def __init__(self, values: Values, counts: np.ndarray, width: int) -> None:
        bounds = np.r_[0, np.cumsum(counts)]
        offs = values.var_offsets
        per = counts + 1
        # chunk c's offsets: offs[bounds[c] : bounds[c + 1] + 1] - first[c]; all but the
        # last of each are one pass over the page's offsets, the last ones are inserted
        first = offs[bounds[:-1]] - per * width
        rel = np.repeat(first, counts)
        np.subtract(offs[:-1], rel, out=rel)
        dt = f"<u{width}"
        heads = np.insert(rel.astype(dt), bounds[1:], (offs[bounds[1:]] - first).astype(dt))
        self.heads = heads.view(np.uint8)
        self.data = np.ascontiguousarray(values.data).view(np.uint8)
        self.lo, self.hi = offs[bounds[:-1]], offs[bounds[1:]]
        self.pads = -(self.hi - self.lo) % width
        self.head_bytes = per * width
        self.head_start = np.cumsum(self.head_bytes) - self.head_bytes
        self.sizes = self.head_bytes + (self.hi - self.lo) + self.pads

    @property
    def count(self) -> int:
        return int(self.sizes.size)

    def joined(self) -> tuple[pa.Buffer | bytes, list[int]]:
        """All chunks back to back, and their starts followed by the end: gathered by
        Arrow from binary views (each chunk's offsets, its bytes, its padding inline; no
        Python per chunk), or joined from slices when the page is too large for views."""
        bounds = np.r_[0, np.cumsum(self.sizes)].tolist()
        n = self.count
        if max(self.heads.size, self.data.size) >= memory.VIEW_LIMIT:
            heads, data = self.heads.data, self.data.data
            zeros = bytes(8)
            parts: list[bytes | memoryview] = []
            for hs, h, a, b, pad in zip(self.head_start.tolist(), self.head_bytes.tolist(),
                                        self.lo.tolist(), self.hi.tolist(), self.pads.tolist(),
                                        strict=True):  # fmt: skip
                parts += (heads[hs : hs + h], data[a:b], zeros[:pad])
            return b"".join(parts), bounds
        views = memory.byte_views([self.heads, self.data], [self.head_start, self.lo],
                                  np.r_[self.head_bytes, self.hi - self.lo])  # fmt: skip
        rows = np.zeros((3 * n, 4), "<i4")
        rows[0::3], rows[1::3] = views[:n], views[n:]
        rows[2::3, 0] = self.pads  # zero bytes, inline
        return memory.join_views(rows, [self.heads, self.data]), bounds


def _variable_chunks(values: Values, counts: np.ndarray, width: int) -> list[Chunk]:
    """Each chunk: its ``count + 1`` offsets (relative to the chunk) then its bytes,
    padded to the offset width (views of one buffer)."""
    stream, bounds = _StringChunks(values, counts, width).joined()
    view = memoryview(stream)
    return [view[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _deflated_chunks(values: Values, counts: np.ndarray, width: int, scheme: int = LZ4,
                     level: int | None = None) -> list[Chunk] | None:
    """The page's string chunks compressed with ``scheme`` (LZ4 or zstd, at ``level``)
    when it saves 15%, else None.

    A sample of chunks (every 16th) is compressed first and, when it saves 15%, the rest
    (the sample is not compressed twice); the whole must save 15% too. The chunks are
    joined in one copy first (:meth:`_StringChunks.joined`), then compressed one codec
    call each (:func:`deflate_slices`), on two threads from
    :data:`DEFLATE_THREAD_MIN_BYTES` (:func:`in_two_halves`).
    """
    src = _StringChunks(values, counts, width)
    stream, bounds = src.joined()
    view = memoryview(stream)

    def work(which: Sequence[int]) -> list[bytes]:
        return deflate_slices(scheme, view, bounds, which, level)

    def run(which: list[int]) -> list[bytes]:
        if len(which) < 2 or int(src.sizes[which].sum()) < DEFLATE_THREAD_MIN_BYTES:
            return work(which)
        return in_two_halves(work, which)

    step = max(1, src.count // 16)
    sample = run(list(range(0, src.count, step)))
    if not sum(map(len, sample)) < 0.85 * int(src.sizes[::step].sum()):
        return None
    out: list[Chunk] = [b""] * src.count
    rest = [c for c in range(src.count) if c % step]
    out[::step] = sample
    for c, chunk in zip(rest, run(rest), strict=True):
        out[c] = chunk
    if sum(map(len, out)) < 0.85 * int(src.sizes.sum()):
        return out
    return None


def _bitpack_chunks(vals: np.ndarray, bits: int) -> tuple[ChunkValues, bool]:
    """Inline-bitpacked 1024-value chunks (width word + packed block), and whether it pays.

    When every block has the same width (the usual case) the chunks are the rows of one
    array, built in a few numpy calls."""
    dt = bp.dtype_for(bits)
    n = vals.size
    nblocks = (n + bp.BLOCK - 1) // bp.BLOCK
    if n == nblocks * bp.BLOCK:
        blocks = vals.reshape(nblocks, bp.BLOCK)
    else:
        blocks = np.zeros((nblocks, bp.BLOCK), dt)
        blocks.reshape(-1)[:n] = vals
    widths = bp.block_widths(blocks)
    size = int(((1 + widths * (bp.BLOCK // bits)) * (bits // 8)).sum())
    if size > 0.9 * n * bits // 8:
        return [], False
    if nblocks and int(widths.min()) == int(widths.max()):
        w = int(widths[0])
        words = np.empty((nblocks, 1 + bp.packed_words(w, bits)), dt)
        words[:, 0] = w
        words[:, 1:] = bp.pack(blocks, w, bits, fits=True)
        return UniformChunks(words.view(np.uint8), None), True
    out: list[list[Chunk]] = [[b""]] * nblocks
    for w in np.unique(widths).tolist():
        rows = np.flatnonzero(widths == w)
        packed = bp.pack(blocks[rows], w, bits, fits=True)
        head = np.array([w], dt).tobytes()
        for i, r in enumerate(rows.tolist()):
            out[r] = [head + packed[i].tobytes()]
    return out, True


def _fsst_chunks(values: Values, width: int, against_lz4: bool
                 ) -> tuple[fe.SymbolTable, np.ndarray, list[Chunk]] | None:  # fmt: skip
    """FSST-compressed string chunks, when a sample says FSST saves 15% (and, with
    ``against_lz4``, beats LZ4).

    FSST's ratio (offsets counted) is measured on the sample it learnt from, LZ4's on two
    of the page's 64 KiB chunks; FSST is taken when LZ4 would be more than
    :data:`FSST_LZ4_MARGIN` times larger.
    """
    offsets = values.var_offsets
    learnt = fsst_table(values)
    if learnt is None:
        return None
    table, fsst_ratio = learnt
    if not against_lz4:
        packed = fsst_values(values, table)
        counts = _variable_counts(packed.var_offsets, width)
        return table, counts, _variable_chunks(packed, counts, width)
    # LZ4 as the page would get it: 64 KiB chunks from the page's start and middle
    big_counts = _variable_counts(offsets, width, LZ4_CHUNK_TARGET)
    picks = np.unique([0, big_counts.size // 2])
    bounds = np.r_[0, np.cumsum(big_counts)]
    raw = lz4 = 0
    for c in picks.tolist():
        a, b = int(bounds[c]), int(bounds[c + 1])
        part = Values(b - a, offsets=offsets[a : b + 1] - offsets[a],
                      data=values.data[int(offsets[a]) : int(offsets[b])])
        block = _variable_chunks(part, np.array([b - a]), width)[0]
        raw += len(block)
        lz4 += len(deflate(LZ4, block))
    if lz4 / raw <= FSST_LZ4_MARGIN * fsst_ratio:
        return None
    packed = fsst_values(values, table)
    counts = _variable_counts(packed.var_offsets, width)
    return table, counts, _variable_chunks(packed, counts, width)


def _rep_index(rep: np.ndarray, level_bounds: np.ndarray, max_rep: int) -> np.ndarray:
    """Per chunk: rows finished in the chunk, items left after its last row start.

    A chunk finishes the rows that start after its first level (the last chunk also its
    last row); a chunk whose rows all end inside it leaves nothing over, so when the next
    chunk starts on a new row, the row left over is counted as finished instead.
    """
    nchunks = level_bounds.size - 1
    a, b = level_bounds[:-1].astype(np.int64), level_bounds[1:].astype(np.int64)
    starts = rep == max_rep
    before = np.r_[0, np.cumsum(starts)]  # row starts before each level
    rows = before[b] - before[np.minimum(a + 1, b)]
    # the last row start at or before each level (-1: none yet)
    last = np.maximum.accumulate(np.where(starts, np.arange(starts.size), -1))
    h = last[b - 1]
    left = np.where(h >= a, b - h, b - a)
    if nchunks:
        left[-1] = 0
        rows[-1] += 1
    moved = np.zeros(nchunks, bool)
    moved[:-1] = starts[a[1:]] & (left[:-1] != 0)
    rows[moved] += 1
    left[moved] = 0
    return np.stack([rows, left], axis=1).astype(np.uint64)


def mini_block_page(rep, def_, layers, values: Values, visible: np.ndarray | None,
                    *, key_bits: int | None = None,
                    compression: StringCompression | None = None,
                    large_chunks: bool = True,
                    ) -> EncodedPage | None:  # fmt: skip
    """A mini-block page, or None when the levels (or, without ``large_chunks``, the
    chunks) do not fit mini-block chunks.

    ``key_bits`` (Arrow dictionary columns) forces a page dictionary whose indices have
    the key's width, as pylance's reader requires. ``compression`` (from the field's
    metadata) overrides the choice of general compression for string chunks.
    ``large_chunks``: the 2.2 framing; False: 2.1's (see the module docstring).
    """
    n = values.n
    layout = pb.MiniBlockLayout(layers=layers, num_items=n, has_large_chunk=large_chunks)
    general_targets = ((DEFAULT_CHUNK_TARGET, LZ4_CHUNK_TARGET) if large_chunks
                       else (SMALL_CHUNK_TARGET,))
    buffers_per_chunk: ChunkValues = []  # value buffers of each chunk
    dict_buf = None
    if values.variable:
        dict_plan = _dictionary(values, force=key_bits is not None)
        if dict_plan is not None:
            indices, items, nitems = dict_plan
            kb = key_bits or 32
            indices = indices.astype(bp.dtype_for(kb))
            packed, ok = _bitpack_chunks(indices, kb)
            if ok:
                counts = _chunk_counts(n, bp.BLOCK)
                layout.value_compression.CopyFrom(
                    encoding(inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=kb)))
                buffers_per_chunk = packed
            else:
                counts = _chunk_counts(n, 1024)
                buffers_per_chunk = _fixed_chunks(indices.view(np.uint8), n, 1024, kb)
                layout.value_compression.CopyFrom(flat_enc(kb))
            layout.dictionary.CopyFrom(items[0])
            layout.num_dictionary_items = nitems
            dict_buf = items[1]
        else:
            width = 8 if values.wide_offsets else 4
            counts = _variable_counts(values.var_offsets, width)
            var = encoding(variable=pb.Variable(offsets=flat_enc(width * 8)))
            layout.value_compression.CopyFrom(var)
            chunks: list[Chunk] | None = None
            offsets = values.var_offsets
            raw_size = int(offsets[-1] - offsets[0]) + (n + counts.size) * width
            if compression is not None and compression.scheme is not None:
                counts, chunks = _general_chunks(values, width, compression,
                                                 general_targets[-1])
                layout.value_compression.CopyFrom(_general_encoding(compression, var))
            elif StringCompression.wants_fsst(compression) and (
                    fsst := _fsst_chunks(values, width, compression is None)) is not None:
                table, counts, chunks = fsst
                layout.value_compression.CopyFrom(encoding(fsst=pb.Fsst(
                    symbol_table=table.serialize(), values=var)))  # fmt: skip
            elif compression is None and raw_size > 4096:
                # general compression does better, and costs fewer calls, on larger
                # chunks; the plain chunks are only built when it does not pay. When the
                # default chunks are smaller than LZ4_CHUNK_TARGET and do not pay, chunks
                # of that size are tried before plain ones (only their sample, 1/16 of
                # the page, is compressed twice)
                for target in dict.fromkeys(general_targets):
                    big_counts = _variable_counts(values.var_offsets, width, target)
                    squeezed = _deflated_chunks(values, big_counts, width, DEFAULT_SCHEME,
                                                DEFAULT_LEVEL)
                    if squeezed is not None:
                        chunks, counts = squeezed, big_counts
                        layout.value_compression.CopyFrom(
                            _general_encoding(StringCompression(DEFAULT_SCHEME), var))
                        break
            if chunks is None:
                chunks = _variable_chunks(values, counts, width)
            buffers_per_chunk = OneBufferChunks(chunks)
    elif key_bits is not None:
        plan = _fixed_dictionary(values)
        indices, (items_enc, items_buf), nitems = plan
        indices = indices.astype(bp.dtype_for(key_bits))
        counts = _chunk_counts(n, 1024)
        buffers_per_chunk = _fixed_chunks(indices.view(np.uint8), n, 1024, key_bits)
        layout.value_compression.CopyFrom(flat_enc(key_bits))
        layout.dictionary.CopyFrom(items_enc)
        layout.num_dictionary_items = nitems
        dict_buf = items_buf
    else:
        bits = values.bits
        packed, ok = [], False
        if values.int_like and not values.fsl and n >= 256:
            packed, ok = _bitpack_chunks(values.data[: n * bits // 8].view(bp.dtype_for(bits)),
                                         bits)  # fmt: skip
        if ok:
            counts = _chunk_counts(n, bp.BLOCK)
            layout.value_compression.CopyFrom(
                encoding(inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits)))
            buffers_per_chunk = packed
        else:
            per = max(8, 1 << max(0, int(np.log2(max(1, CHUNK_TARGET * 8 // bits)))))
            per = min(per, 4096)
            counts = _chunk_counts(n, per)
            layout.value_compression.CopyFrom(fsl_encoding(values))
            if not values.has_fsl_nulls:
                buffers_per_chunk = _fixed_chunks(values.data, n, per, bits)
            else:
                buffers_per_chunk = _fsl_validity_chunks(values, counts)
    if isinstance(buffers_per_chunk, UniformChunks | OneBufferChunks):
        layout.num_buffers = 1
    else:
        layout.num_buffers = len(buffers_per_chunk[0]) if buffers_per_chunk else 1
    return _assemble(layout, rep, def_, layers, counts, visible, buffers_per_chunk, dict_buf,
                     large_chunks)


def _fsl_validity_chunks(values: Values, counts: np.ndarray) -> list[list[Chunk]]:
    """Chunks of fixed-size lists with null items: per chunk the validity bits of each
    layer's items that has any (outer layer first), then its values."""
    bits, data = values.bits, values.data
    layers = []  # (items per row, validity) of the layers with nulls
    cum = 1
    for dim, valid in zip(values.fsl, values.layer_validity, strict=True):
        cum *= dim
        if valid is not None:
            layers.append((cum, valid))
    bounds = np.r_[0, np.cumsum(counts)]
    out: list[list[Chunk]] = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        chunk: list[Chunk] = [np.packbits(valid[a * per : b * per], bitorder="little").tobytes()
                              for per, valid in layers]
        chunk.append(data[(a * bits) // 8 : (b * bits + 7) // 8].tobytes())
        out.append(chunk)
    return out


def _general_chunks(values: Values, width: int, compression: StringCompression,
                    target: int = LZ4_CHUNK_TARGET) -> tuple[np.ndarray, list[Chunk]]:
    """String chunks of up to ``target`` bytes, each compressed as the metadata asks."""
    scheme = compression.scheme
    if scheme is None:
        raise ValueError("_general_chunks needs a compression scheme")
    counts = _variable_counts(values.var_offsets, width, target)
    level = compression.level
    if scheme == ZSTD and level is None:
        level = ZSTD_DEFAULT_LEVEL
    chunks: list[Chunk] = [*deflate_many(scheme, _variable_chunks(values, counts, width), level)]
    return counts, chunks


def _general_encoding(compression: StringCompression, var: pb.CompressiveEncoding
                      ) -> pb.CompressiveEncoding:  # fmt: skip
    buffer = pb.BufferCompression(scheme=pb.CompressionScheme.Name(compression.scheme or 0))
    if compression.level is not None:
        buffer.level = compression.level
    return encoding(general=pb.General(compression=buffer, values=var))


def _dictionary(values: Values, force: bool = False):
    n = values.n
    if n < 100 and not force:
        return None
    small = int(values.var_offsets[-1]) < 2**31
    arr = pa.Array.from_buffers(
        pa.binary() if small else pa.large_binary(), n,
        [None, pa.py_buffer(values.var_offsets.astype(np.int32) if small else values.var_offsets),
         pa.py_buffer(values.data)])  # fmt: skip
    if not force:
        probe = arr.slice(0, 4096)
        if len(pc.unique(probe)) * 2 > len(probe):
            return None  # cheap early exit: a high-cardinality prefix
    encoded = pc.dictionary_encode(arr)
    items = encoded.dictionary
    nitems = len(items)
    if nitems * 2 > n and not force:
        return None
    ow = 4 if small else 8
    item_offs = np.frombuffer(items.buffers()[1], f"<i{ow}", nitems + 1, items.offset * ow)
    item_offs = item_offs.astype(np.int64)
    item_data = np.frombuffer(items.buffers()[2], np.uint8) if items.buffers()[2] else (
        np.zeros(0, np.uint8))  # fmt: skip
    base = int(item_offs[0])
    item_offs = item_offs - base
    item_data = item_data[base : base + int(item_offs[-1])]
    if int(item_offs[-1]) < 2**31 and not values.wide_offsets:  # large types need u64
        block = (struct.pack("<II", 32, 8 + 4 * (nitems + 1)) + item_offs.astype("<u4").tobytes()
                 + item_data.tobytes())  # fmt: skip
        var = encoding(variable=pb.Variable(offsets=flat_enc(32)))
    else:
        block = (struct.pack("<QQ", 64, 16 + 8 * (nitems + 1)) + item_offs.astype("<u8").tobytes()
                 + item_data.tobytes())  # fmt: skip
        var = encoding(variable=pb.Variable(offsets=flat_enc(64)))
    if len(block) > 4096:
        squeezed = deflate(1, block)
        if len(squeezed) < 0.85 * len(block):
            block = squeezed
            var = encoding(general=pb.General(compression=pb.BufferCompression(scheme=LZ4),
                                          values=var))  # fmt: skip
    indices = np.asarray(encoded.indices).astype(np.uint32)
    return indices, (var, block), nitems


def _fixed_dictionary(values: Values):
    """Page dictionary of byte-wide fixed values (Arrow dictionary columns of numbers)."""
    if values.bits % 8 or values.fsl:
        raise UnsupportedFeatureError(f"dictionary of {values.bits}-bit values")
    width = values.bits // 8
    arr = pa.Array.from_buffers(pa.binary(width), values.n,
                                [None, pa.py_buffer(values.data[: values.n * width])])  # fmt: skip
    encoded = pc.dictionary_encode(arr)
    items = encoded.dictionary
    start = items.offset * width
    block = np.frombuffer(items.buffers()[1], np.uint8, len(items) * width, start).tobytes()
    return (np.asarray(encoded.indices).astype(np.uint32), (flat_enc(values.bits), block),
            len(items))  # fmt: skip


def _chunk_levels(levels: np.ndarray, bounds: np.ndarray, width: int) -> list[Chunk]:
    """:func:`ool_pack` of each chunk's levels ``levels[bounds[c] : bounds[c + 1]]``, for
    all chunks at once: every chunk's whole blocks, and its tail zero-padded to a block
    where :func:`ool_pack` packs it, are packed in one call; tails it keeps raw follow
    their chunk's packed blocks."""
    n = np.diff(bounds)
    full, tail = n // bp.BLOCK, n % bp.BLOCK
    packed_tail = (tail > 0) & (width * (bp.BLOCK - tail) < (16 - width) * tail)
    rows_per_chunk = full + packed_tail
    first_row = np.cumsum(rows_per_chunk) - rows_per_chunk
    # level index where each packed row starts, chunk by chunk
    row_chunk = np.repeat(np.arange(n.size), rows_per_chunk)
    row_in_chunk = np.arange(row_chunk.size) - first_row[row_chunk]
    row_start = bounds[:-1][row_chunk] + row_in_chunk * bp.BLOCK
    padded = np.zeros(levels.size + bp.BLOCK, np.uint16)
    padded[: levels.size] = levels
    blocks = np.lib.stride_tricks.sliding_window_view(padded, bp.BLOCK)[row_start]
    is_tail = np.zeros(row_chunk.size, bool)
    is_tail[(first_row + full)[packed_tail]] = True
    if is_tail.any():  # zero what lies past each packed tail
        limit = np.where(is_tail, tail[row_chunk], bp.BLOCK)
        np.copyto(blocks, 0, where=np.arange(bp.BLOCK)[None, :] >= limit[:, None])
    packed = bp.pack(blocks, width, 16).astype("<u2", copy=False).tobytes()  # sliced to bytes
    row_bytes = bp.packed_words(width, 16) * 2
    raw = levels.astype("<u2", copy=False)
    raw_view = np.ascontiguousarray(raw).view(np.uint8).data
    raw_tail = (tail > 0) & ~packed_tail
    out: list[Chunk] = []
    starts = (first_row * row_bytes).tolist()
    ends = ((first_row + rows_per_chunk) * row_bytes).tolist()
    for c, (a, b) in enumerate(zip(starts, ends, strict=True)):
        if raw_tail[c]:
            t0 = 2 * (int(bounds[c + 1]) - int(tail[c]))
            out.append(bytes(packed[a:b]) + raw_view[t0 : 2 * int(bounds[c + 1])])
        else:
            out.append(packed[a:b])
    return out


def _uniform_header_rows(k: int, size: int, large: bool = True) -> np.ndarray:
    """``k`` chunks of one ``size``-byte value buffer and no levels, framed: per row the
    8-byte header (no levels, the size as a u32, or ``large`` False a u16, padding), the
    value bytes (left to fill) and the padding to 8 bytes."""
    pad = -size % 8
    rows = np.empty((k, 8 + size + pad), np.uint8)
    rows[:, :2] = 0
    w = 4 if large else 2
    rows[:, 2 : 2 + w] = np.frombuffer(struct.pack("<I" if large else "<H", size), np.uint8)
    rows[:, 2 + w : 8] = PAD_BYTE
    rows[:, 8 + size :] = PAD_BYTE
    return rows


def _assemble_uniform(layout, chunks: UniformChunks, logs: np.ndarray, dict_buf,
                      large: bool = True) -> EncodedPage | None:
    """:func:`_assemble` of a page without levels whose chunks are :class:`UniformChunks`:
    the chunk rows are framed in one copy."""
    k, size = chunks.rows.shape
    row_bytes = 8 + size + (-size % 8)
    last = chunks.last
    last_bytes = 0 if last is None else 8 + len(last) + (-len(last) % 8)
    if not large and max(row_bytes, last_bytes) > SMALL_CHUNK_BYTES:
        return None
    out = np.empty(k * row_bytes + last_bytes, np.uint8)
    framed = out[: k * row_bytes].reshape(k, row_bytes)
    framed[...] = _uniform_header_rows(1, size, large)
    framed[:, 8 : 8 + size] = chunks.rows
    meta = np.full(k + (last is not None), (row_bytes // 8 - 1) << 4, np.uint32)
    if last is not None:
        tail = _uniform_header_rows(1, len(last), large)
        tail[0, 8 : 8 + len(last)] = np.frombuffer(last, np.uint8)
        out[k * row_bytes :] = tail.reshape(-1)
        meta[-1] = (last_bytes // 8 - 1) << 4
    meta |= logs
    buffers: list[bytes | memoryview | np.ndarray] = [
        meta.astype("<u4" if large else "<u2").tobytes(), out]
    if dict_buf is not None:
        buffers.append(dict_buf)
    return EncodedPage(pb.PageLayout(mini_block_layout=layout), buffers)


def _assemble(layout, rep, def_, layers, counts, visible, value_bufs, dict_buf, large=True):
    nchunks = counts.size
    has_levels = rep is not None or def_ is not None
    if has_levels:
        nlev = (rep if rep is not None else def_).size
        slot_pos = np.flatnonzero(visible) if visible is not None else np.arange(nlev)
        first_slot = np.cumsum(counts) - counts
        level_bounds = np.r_[0, slot_pos[first_slot[1:]], nlev] if nchunks else np.r_[0, nlev]
        per_chunk = np.diff(level_bounds)
        if nchunks == 0 or int(per_chunk.max()) > MAX_CHUNK_LEVELS:
            return None
    level_parts = []
    for levels, name in ((rep, "rep_compression"), (def_, "def_compression")):
        if levels is None:
            continue
        width = max(1, int(levels.max()).bit_length())
        getattr(layout, name).CopyFrom(levels_encoding(width))
        level_parts.append(_chunk_levels(levels.astype(np.uint16), level_bounds, width))
    meta = np.zeros(nchunks, np.uint32)
    pad = bytes([PAD_BYTE]) * 8
    # log2 of each chunk's value count (powers of two but the last, whose log is 0)
    logs = np.floor(np.log2(np.maximum(counts, 1))).astype(np.uint32)
    if nchunks:
        logs[-1] = 0
    if isinstance(value_bufs, UniformChunks):
        if not level_parts:
            return _assemble_uniform(layout, value_bufs, logs, dict_buf, large)
        value_bufs = value_bufs.as_lists()
    # every chunk: a header (u16 level count, u16 size of each level buffer, u32 size of
    # each value buffer (u16 in the small framing), padding to 8 bytes) then each buffer
    # padded to 8 bytes; headers
    # are built for all chunks at once and everything joined in one copy
    if isinstance(value_bufs, OneBufferChunks):
        bufs = [*level_parts, value_bufs.buffers]
    else:
        bufs = [*level_parts, *([v[j] for v in value_bufs] for j in range(len(value_bufs[0])))]
    sizes = [np.fromiter(map(len, b), np.int64, nchunks) for b in bufs]
    value_width = 4 if large else 2
    if any(int(s.max()) > 0xFFFF for s in (sizes if not large else sizes[: len(level_parts)])):
        return None
    head = 2 + 2 * len(level_parts) + value_width * (len(bufs) - len(level_parts))
    head += -head % 8
    hdr = np.full((nchunks, head), PAD_BYTE, np.uint8)
    hdr[:, :2] = (per_chunk if has_levels else np.zeros(nchunks)).astype("<u2")[:, None].view(
        np.uint8)  # fmt: skip
    at = 2
    for i, size in enumerate(sizes):
        w = 2 if i < len(level_parts) else value_width
        hdr[:, at : at + w] = size.astype(f"<u{w}")[:, None].view(np.uint8)
        at += w
    hb = hdr.tobytes()  # sliced to bytes, not memoryviews: those the collector tracks
    # the pieces in page order, laid out a kind at a time by slice assignments (each
    # chunk's header, then each buffer and its padding), then joined in one copy
    k = 1 + 2 * len(bufs)
    out: list[bytes | memoryview] = [b""] * (k * nchunks)
    out[::k] = [hb[a : a + head] for a in range(0, nchunks * head, head)]
    pad_of = [pad[:p] for p in range(8)]
    for j, (b, size) in enumerate(zip(bufs, sizes, strict=True)):
        out[1 + 2 * j :: k] = b
        out[2 + 2 * j :: k] = [pad_of[p] for p in (-size % 8).tolist()]
    total = np.full(nchunks, head, np.int64)
    for size in sizes:
        total += size + (-size % 8)
    if not large and int(total.max()) > SMALL_CHUNK_BYTES:
        return None
    meta = ((total // 8 - 1) << 4).astype(np.uint32) | logs
    buffers: list[bytes | memoryview | np.ndarray] = [
        meta.astype("<u4" if large else "<u2").tobytes(), b"".join(out)]
    if dict_buf is not None:
        buffers.append(dict_buf)
    if rep is not None:
        layout.repetition_index_depth = 1
        buffers.append(_rep_index(rep, level_bounds, repdef.max_rep(layers)).astype("<u8")
                       .tobytes())  # fmt: skip
    return EncodedPage(pb.PageLayout(mini_block_layout=layout), buffers)
