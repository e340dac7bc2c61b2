"""Decoders for Lance 2.1/2.2 ``CompressiveEncoding`` trees.

The same encoding message is read in three contexts:

* **mini-block**: each chunk of a page holds a few buffers; :func:`decode_chunks` decodes
  one buffer set for *all* selected chunks at once (chunks are grouped by shape, so the
  numpy work is per group, not per chunk);
* **block**: one whole buffer (rep/def levels of a chunk, a page's dictionary, the levels
  of a constant page); :func:`decode_block`; :func:`decode_levels` is its vectorised
  form for the levels of many chunks;
* **per value** (full-zip pages), handled in :mod:`fullzip` with the helpers here.

Every size, width and offset is checked before use; anything inconsistent raises
:class:`FormatError`, valid encodings we do not implement raise
:class:`UnsupportedFeatureError` naming the encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import fsst, lz4_frames, memory, parallel
from lance_sql.format.datafile.blocks import Block, Fixed, Variable, inflate, inflate_many
from lance_sql.format.datafile.memory import join_slices, pool_bytes
from lance_sql.format.pb import encodings_v2_1_pb2 as pb


def kind(enc: pb.CompressiveEncoding) -> str:
    """Which compression ``enc`` names (``none`` when unset)."""
    return enc.WhichOneof("compression") or "none"


def _unsupported(enc: pb.CompressiveEncoding, context: str, where: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{where}: the {kind(enc)!r} encoding is not supported in a {context} page"
    )


def range_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorised."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    before = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(
        starts.astype(np.int64, copy=False) - before, lengths
    )


# From this many buffers, buffers in whole 8-byte words are joined by one gather of words
# (a slice per buffer costs ~1 us of interpreter time; the gather a few ns a word).
_WORD_GATHER_MIN = 64


class ChunkBuffers:
    """One buffer of every selected chunk: where each lies in ``raw`` and its size.

    ``data``/``starts`` give the buffers back to back (joined on first use, or a plain
    slice of ``raw`` when they already touch); decoders that can work in place use
    ``raw``/``pos`` and skip the copy.
    """

    def __init__(self, raw: np.ndarray, pos: np.ndarray, sizes: np.ndarray) -> None:
        self.raw = raw
        self.pos = pos.astype(np.int64, copy=False)
        self.sizes = sizes.astype(np.int64, copy=False)
        self._data: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.sizes) - self.sizes

    @property
    def data(self) -> np.ndarray:
        if self._data is None:
            n = self.pos.size
            if n == 0:
                self._data = self.raw[:0]
            elif n == 1 or np.array_equal(self.pos[1:], self.pos[:-1] + self.sizes[:-1]):
                a = int(self.pos[0])
                self._data = self.raw[a : a + int(self.sizes.sum())]
            else:
                self._data = self._gather()
        return self._data

    def _gather(self) -> np.ndarray:
        """The buffers copied back to back: as rows of a strided view when they are evenly
        spaced and (but the last) of one size, as mini-block pages of fixed-width values
        are; else one join of slices."""
        pos, sizes, raw = self.pos, self.sizes, self.raw
        n = pos.size
        size0, step = int(sizes[0]), int(pos[1] - pos[0])
        last_end = int(pos[-1] + sizes[-1])
        if (n > 2 and step >= size0 and last_end <= raw.size
                and np.all(sizes[:-1] == size0) and np.all(np.diff(pos) == step)):  # fmt: skip
            out = np.empty(int(sizes.sum()), np.uint8)
            rows = np.lib.stride_tricks.as_strided(
                raw[int(pos[0]) :], shape=(n - 1, size0), strides=(step, 1), writeable=False)
            out[: (n - 1) * size0].reshape(n - 1, size0)[...] = rows
            out[(n - 1) * size0 :] = raw[int(pos[-1]) : last_end]
            return out
        if n >= _WORD_GATHER_MIN and not np.any((pos | sizes) & 7):
            # whole 8-byte words (chunks of many pages, say): one gather of words
            # instead of a slice per buffer
            usable = raw.size & ~7
            if last_end <= usable:
                words = raw[:usable].view(np.uint64)
                return words[range_indices(pos >> 3, sizes >> 3)].view(np.uint8)
        mv = raw.data
        lo, hi = pos.tolist(), (pos + sizes).tolist()
        return np.frombuffer(b"".join([mv[a:b] for a, b in zip(lo, hi, strict=True)]), np.uint8)

    @staticmethod
    def of(data: np.ndarray, sizes: np.ndarray) -> ChunkBuffers:
        """Buffers already back to back in ``data``."""
        sizes = sizes.astype(np.int64, copy=False)
        return ChunkBuffers(data, np.cumsum(sizes) - sizes, sizes)

    @staticmethod
    def join(pieces: Sequence[bytes | memoryview | pa.Buffer]) -> ChunkBuffers:
        """One buffer holding ``pieces`` back to back."""
        sizes = np.fromiter((len(p) for p in pieces), np.int64, len(pieces))
        return ChunkBuffers.of(np.frombuffer(b"".join(pieces), np.uint8), sizes)


def _words(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    usable = data.size - data.size % dtype.itemsize
    return data[:usable].view(dtype)


# --------------------------------------------------------------------------- mini-block
def buffers_used(enc: pb.CompressiveEncoding, where: str) -> int:
    """How many chunk buffers a mini-block value encoding reads."""
    k = kind(enc)
    if k in ("flat", "inline_bitpacking", "variable", "byte_stream_split", "packed_struct"):
        return 1
    if k == "fsst":
        return buffers_used(enc.fsst.values, where)
    if k == "rle":
        return 2
    if k == "general":
        return buffers_used(enc.general.values, where)
    if k == "fixed_size_list":
        count, inner = 0, enc
        while kind(inner) == "fixed_size_list":
            count += int(inner.fixed_size_list.has_validity)
            inner = inner.fixed_size_list.values
        null_items = kind(inner) == "constant" and not inner.constant.HasField("value")
        return count + (0 if null_items else 1)
    raise _unsupported(enc, "mini-block", where)


def decode_chunks(
    enc: pb.CompressiveEncoding,
    bufs: list[ChunkBuffers],
    counts: np.ndarray,
    where: str,
) -> Block:
    """Decode the values of a set of mini-block chunks (``counts[i]`` values in chunk i)."""
    k = kind(enc)
    if k == "flat":
        return _mb_flat(enc.flat, bufs[0], counts, where)
    if k == "inline_bitpacking":
        return _mb_inline(enc.inline_bitpacking, bufs[0], counts, where)
    if k == "variable":
        return _mb_variable(enc.variable, bufs[0], counts, where)
    if k == "fsst":
        inner = decode_chunks(enc.fsst.values, bufs, counts, where)
        return fsst_decode(enc.fsst.symbol_table, inner, where)
    if k == "general":
        comp = enc.general.compression
        first = bufs[0]
        raw = first.raw.data  # each chunk's buffer in place: no gather first
        if (comp.scheme == 1 and kind(enc.general.values) == "variable" and len(bufs) == 1
                and int(first.sizes.sum()) >= LZ4_STRINGS_MIN_BYTES):  # fmt: skip
            strings = _lz4_variable(enc.general.values.variable, first, counts, where)
            if strings is not None:
                return strings
        pieces = inflate_many(comp.scheme, raw, first.pos.tolist(), first.sizes.tolist(), where)
        if kind(enc.general.values) == "variable" and len(bufs) == 1:
            return _variable_pieces(enc.general.values.variable, pieces, counts, where)
        return decode_chunks(enc.general.values, [ChunkBuffers.join(pieces), *bufs[1:]], counts,
                             where)  # fmt: skip
    if k == "rle":
        return _mb_rle(enc.rle, bufs, counts, where)
    if k == "byte_stream_split":
        return _mb_bss(enc.byte_stream_split, bufs[0], counts, where)
    if k == "fixed_size_list":
        return _mb_fsl(enc, bufs, counts, where)
    if k == "packed_struct":
        return _mb_flat_bits(_packed_bits(enc.packed_struct, where), bufs[0], counts, where)
    raise _unsupported(enc, "mini-block", where)


def _packed_bits(ps: pb.PackedStruct, where: str) -> int:
    if kind(ps.values) != "flat":
        raise _unsupported(ps.values, "packed-struct", where)
    return int(ps.values.flat.bits_per_value)


def _check_bits(bits: int, where: str) -> int:
    if bits <= 0 or bits > 1 << 16:
        raise FormatError(f"{where}: implausible width of {bits} bits per value")
    return bits


def _mb_flat(flat: pb.Flat, buf: ChunkBuffers, counts: np.ndarray, where: str) -> Fixed:
    if flat.HasField("data"):
        raise UnsupportedFeatureError(f"{where}: compressed Flat buffers in a mini-block chunk")
    return _mb_flat_bits(int(flat.bits_per_value), buf, counts, where)


def _mb_flat_bits(bits: int, buf: ChunkBuffers, counts: np.ndarray, where: str) -> Fixed:
    bits = _check_bits(bits, where)
    need = (counts * bits + 7) // 8
    if np.any(buf.sizes < need):
        raise FormatError(f"{where}: a chunk holds fewer bytes than its {bits}-bit values need")
    n = int(counts.sum())
    if bits % 8 == 0 or counts.size <= 1:
        if np.array_equal(buf.sizes, need):
            return Fixed(buf.data, bits, n)
        keep = range_indices(buf.starts, need)
        return Fixed(buf.data[keep], bits, n)
    # bit-packed values whose chunks do not end on byte boundaries
    nbits = counts * bits
    bitarr = np.unpackbits(buf.data, bitorder="little")
    picked = bitarr[range_indices(buf.starts * 8, nbits)]
    return Fixed(np.packbits(picked, bitorder="little"), bits, n)


def _mb_inline(ib: pb.InlineBitpacking, buf: ChunkBuffers, counts: np.ndarray, where: str) -> Fixed:
    bits = int(ib.uncompressed_bits_per_value)
    if bits not in (8, 16, 32, 64):
        raise FormatError(f"{where}: inline bitpacking of {bits}-bit values")
    if ib.HasField("values"):
        raise UnsupportedFeatureError(f"{where}: compressed inline-bitpacked buffers")
    if np.any(counts > bp.BLOCK):
        raise FormatError(f"{where}: a bitpacked chunk claims more than {bp.BLOCK} values")
    dt = bp.dtype_for(bits)
    wbytes = bits // 8
    if np.any(buf.sizes % wbytes) or np.any(buf.sizes < wbytes):
        raise FormatError(f"{where}: bitpacked chunk sizes are not whole {bits}-bit words")
    raw, pos = buf.raw, buf.pos
    if np.any(pos % wbytes) or raw.ctypes.data % wbytes:
        raw, pos = buf.data, buf.starts
    words = _words(raw, dt)
    first = pos // wbytes
    widths = words[first].astype(np.int64)
    if np.any(widths > bits):
        raise FormatError(f"{where}: bit width {int(widths.max())} over {bits} bits")
    expect = (1 + widths * (bp.BLOCK // bits)) * wbytes
    if not np.array_equal(buf.sizes, expect):
        raise FormatError(f"{where}: bitpacked chunk size does not match its bit width")
    out = np.empty((counts.size, bp.BLOCK), dt)
    _inline_unpack(words, first + 1, widths, bits, out)
    n = int(counts.sum())
    if np.all(counts[:-1] == bp.BLOCK):
        values = out.reshape(-1)[: (counts.size - 1) * bp.BLOCK + int(counts[-1])]
    else:
        values = out[np.arange(bp.BLOCK)[None, :] < counts[:, None]]
    return Fixed(values.view(np.uint8), bits, n)


# Inline-bitpacked blocks are unpacked either a width at a time (bp.unpack: a few numpy calls
# per row of the lane, cheap per value) or all widths at once (bp.unpack_blocks: a fixed
# number of numpy calls, dearer per value). One width for every block goes the first way
# from _INLINE_ALONE_MIN blocks; in a mix of widths, a width needs _INLINE_GROUP_MIN[bits]
# blocks (its blocks must then be gathered and scattered back) and the rest go together.
# (64-bit: a run of 32 blocks of one width unpacks in place at ~2.1 ns a value, against
# ~3.7 mixed with others, measured with the 32-bit-halves unpack of bp.unpack)
_INLINE_ALONE_MIN = 64
_INLINE_GROUP_MIN = {8: 64, 16: 192, 32: 192, 64: 32}


def _inline_unpack(words: np.ndarray, starts: np.ndarray, widths: np.ndarray, bits: int,
                   out: np.ndarray) -> None:  # fmt: skip
    """Unpack validated inline-bitpacked blocks (packed words at ``words[starts[i]:]``)."""
    n = widths.size
    if n == 0:
        return
    per_width = np.bincount(widths, minlength=bits + 1)
    if n >= _INLINE_ALONE_MIN and widths[0] == widths[-1] and per_width[widths[0]] == n:
        bp.unpack(_inline_packed(words, starts, int(widths[0]), bits), int(widths[0]), bits,
                  out=out)  # fmt: skip
        return
    big = np.flatnonzero(per_width >= _INLINE_GROUP_MIN[bits])
    if big.size == 0:
        bp.unpack_blocks(words, starts, widths, bits, out=out)
        return
    for w in big.tolist():
        rows = np.flatnonzero(widths == w)
        packed = _inline_packed(words, starts[rows], w, bits)
        first, last = int(rows[0]), int(rows[-1])
        if last - first + 1 == rows.size:  # one run of blocks: unpacked in place
            bp.unpack(packed, w, bits, out=out[first : last + 1])
        else:
            out[rows] = bp.unpack(packed, w, bits)
    rest = np.flatnonzero(per_width[widths] < _INLINE_GROUP_MIN[bits])
    if rest.size:
        out[rest] = bp.unpack_blocks(words, starts[rest], widths[rest], bits)


def _inline_packed(words: np.ndarray, starts: np.ndarray, width: int, bits: int) -> np.ndarray:
    """``(blocks, packed words)`` of blocks packed to ``width`` bits starting at ``starts``."""
    nwords = bp.packed_words(width, bits)
    if nwords == 0:
        return np.zeros((starts.size, 0), words.dtype)
    step = np.diff(starts)
    if starts.size > 1 and np.all(step == step[0]) and step[0] >= nwords:
        return np.lib.stride_tricks.as_strided(
            words[int(starts[0]) :], shape=(starts.size, nwords),
            strides=(int(step[0]) * words.strides[0], words.strides[0]), writeable=False,
        )  # fmt: skip
    # gather lanes-wide rows of words (cheaper than word by word)
    lanes = bp.BLOCK // bits
    view = np.lib.stride_tricks.as_strided(
        words, shape=(words.size - lanes + 1, lanes),
        strides=(words.strides[0], words.strides[0]), writeable=False,
    )  # fmt: skip
    rows = starts[:, None] + np.arange(0, nwords, lanes)[None, :]
    return view[rows].reshape(starts.size, nwords)


def _offset_dtype(var: pb.Variable, where: str) -> np.dtype:
    if kind(var.offsets) != "flat" or var.HasField("values"):
        raise UnsupportedFeatureError(f"{where}: variable-width chunks with compressed offsets")
    width = int(var.offsets.flat.bits_per_value)
    if width not in (32, 64):
        raise FormatError(f"{where}: {width}-bit string offsets")
    return np.dtype("<u4") if width == 32 else np.dtype("<u8")


def _variable_pieces(var: pb.Variable, pieces: Sequence[bytes | memoryview | pa.Buffer],
                     counts: np.ndarray, where: str) -> Variable:  # fmt: skip
    """String chunks that were each inflated on their own (General over Variable).

    Each piece is its offsets then its bytes; the bytes of all pieces are joined once and
    the offsets apart, instead of joining whole pieces and then their bytes again.
    """
    dt = _offset_dtype(var, where)
    wb = dt.itemsize
    sizes = np.fromiter(map(len, pieces), np.int64, len(pieces))
    if sizes.size != counts.size or np.any(sizes < (counts + 1) * wb):
        raise FormatError(f"{where}: string chunk too small for its offsets")
    # read as unsigned: a 64-bit word of 2^63 or more is out of its chunk, not an overflow
    fmt = "<I" if wb == 4 else "<Q"
    first = np.fromiter((struct.unpack_from(fmt, p)[0] for p in pieces), np.uint64, sizes.size)
    last = np.fromiter((struct.unpack_from(fmt, p, c * wb)[0]
                        for p, c in zip(pieces, counts.tolist(), strict=True)),
                       np.uint64, sizes.size)  # fmt: skip
    if np.any(first > np.uint64(1 << 62)) or np.any(last > np.uint64(1 << 62)):
        raise FormatError(f"{where}: string offsets point outside their chunk")
    first, last = first.astype(np.int64), last.astype(np.int64)
    if np.any(first != (counts + 1) * wb) or np.any(last > sizes) or np.any(last < first):
        raise FormatError(f"{where}: string offsets point outside their chunk")
    arrays = [np.frombuffer(p, np.uint8) for p in pieces]
    lo, hi = first.tolist(), last.tolist()
    lens = last - first
    data = pool_bytes(int(lens.sum()))
    np.concatenate([a[x:y] for a, x, y in zip(arrays, lo, hi, strict=True)], out=data)
    n = int(counts.sum())
    words = pool_bytes(n * wb).view(dt)
    np.concatenate([a[wb:x].view(dt) for a, x in zip(arrays, lo, strict=True)], out=words)
    out_dt = np.dtype(np.int32 if int(lens.sum()) < 2**31 and wb == 4 else np.int64)
    rebased = pool_bytes((n + 1) * out_dt.itemsize).view(out_dt)
    rebased[0] = 0
    _gather_runs(words, np.cumsum(counts) - counts, counts, np.cumsum(lens) - lens - first,
                 rebased[1:])  # fmt: skip
    return Variable(rebased, data, n)


# compressed bytes from which _lz4_variable is used: below, its fixed cost (a few dozen
# numpy calls) exceeds what the general path spends per chunk (measured on 16 KiB chunks
# of ids, URLs and JSON: 1.2-1.4x the general path's CPU below ~140 kB, even at ~200-260
# kB, 0.7-0.8x at 400-550 kB)
LZ4_STRINGS_MIN_BYTES = 256 << 10
# inflated bytes per group of chunks (a group is inflated in one codec call and its
# offsets placed while it is still in the core's cache; groups spread over the decode's
# threads)
LZ4_GROUP_BYTES = 4 << 20


def _lz4_variable(var: pb.Variable, buf: ChunkBuffers, counts: np.ndarray,
                  where: str) -> Variable | None:  # fmt: skip
    """String chunks each compressed with LZ4 (our default files): inflated by groups of
    about :data:`LZ4_GROUP_BYTES`, one codec call a group (:mod:`lz4_frames`), each
    group's offsets rebased into the output right after (one row gather per run of
    chunks of one count, :func:`_gather_runs`), then the strings' bytes of every group
    gathered in one pass by Arrow (:func:`memory.join_views`): no Python work per chunk,
    so small chunks cost little more to scan than large ones. (The groups' inflated bytes
    are held until that gather: about the page's inflated size, more than the group or two
    in flight of a gather per group, which measured slower: a second copy.)

    A chunk is its offsets then its bytes (then up to a few bytes of padding), and its
    LZ4 prefix says how many bytes it inflates to, which places it in its group's output
    and bounds its bytes. liblz4 checks that a group inflates to the sum of its prefixes;
    a chunk inflating to another size than its own prefix (and another making up for it)
    moves the chunks after it, which the check of their first offsets catches unless the
    file was made to pass it (the strings are then wrong, but never bytes from outside
    what was inflated: prefixes claiming more bytes than were inflated fail). The exact
    place of a group's bytes is known once the groups before it are inflated (see
    :func:`parallel.produce_then_place`). None (the general path decides, and words any
    error) when a chunk's size prefix cannot hold its offsets or a chunk cannot be framed.
    """
    dt = _offset_dtype(var, where)
    wb = dt.itemsize
    raw, pos, sizes = buf.raw, buf.pos, buf.sizes
    if np.any(sizes < 4):
        return None
    full = lz4_frames.prefixes(raw, pos)
    first = (counts + 1) * wb
    if np.any(full < first) or not lz4_frames.fits(sizes, full):
        return None
    starts = np.cumsum(full) - full  # where each chunk inflates to, all groups back to back
    firsts = [0, *(np.flatnonzero(np.diff(starts // LZ4_GROUP_BYTES)) + 1).tolist()]
    bounds = [*firsts, counts.size]  # group g is chunks bounds[g] to bounds[g + 1] - 1
    # (made first: it refuses prefixes claiming more than their bytes can inflate to
    # before those prefixes size the output)
    frames = lz4_frames.FrameGroups(raw, pos, sizes, full, firsts, where)
    n = int(counts.sum())
    room = full - first  # each chunk's bytes and padding
    out_dt = np.dtype(np.int32 if int(room.sum()) < 2**31 and wb == 4 else np.int64)
    rebased = pool_bytes((n + 1) * out_dt.itemsize).view(out_dt)
    rebased[0] = 0
    dst = np.cumsum(counts) - counts + 1  # where each chunk's offsets go in ``rebased``
    inflated_groups: list[np.ndarray] = [raw[:0]] * len(firsts)
    lasts_all = np.empty(counts.size, np.int64)  # each chunk's last offset, once inflated

    def produce(g: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
        a, b = bounds[g], bounds[g + 1]
        inflated = np.frombuffer(frames.inflate(g), np.uint8)
        at = starts[a:b] - starts[a]  # each chunk in ``inflated``
        heads = _words_at(inflated, at, dt)
        lasts = _words_at(inflated, at + counts[a:b] * wb, dt)
        if (np.any(heads != first[a:b]) or np.any(lasts > full[a:b])
                or np.any(lasts < first[a:b])):  # fmt: skip
            raise FormatError(f"{where}: string offsets point outside their chunk")
        return (inflated, at, lasts), int((lasts - first[a:b]).sum())

    def place(g: int, got: tuple[np.ndarray, np.ndarray, np.ndarray], to: int) -> None:
        a, b = bounds[g], bounds[g + 1]
        inflated, at, lasts = got
        inflated_groups[g] = inflated
        lasts_all[a:b] = lasts
        lens = lasts - first[a:b]
        add = to + np.cumsum(lens) - lens - first[a:b]  # chunk's offset -> output position
        cnt = counts[a:b]
        out = rebased[int(dst[a]) : int(dst[a]) + int(cnt.sum())]
        if np.all(at % wb == 0):  # offsets read in place
            words = inflated[: inflated.size - inflated.size % wb].view(dt)
            _gather_runs(words, at // wb + 1, cnt, add, out)
        else:
            words = join_slices(inflated, at + wb, at + first[a:b]).view(dt)
            _gather_runs(words, np.cumsum(cnt) - cnt, cnt, add, out)

    total = parallel.produce_then_place(produce, place, range(len(firsts)))
    # the chunks' bytes gathered out of their groups in one pass in C (see memory.byte_views)
    lo = starts + first - np.repeat(starts[firsts], np.diff(bounds))  # in its group
    view = memory.byte_views(inflated_groups,
                             [lo[x:y] for x, y in zip(bounds[:-1], bounds[1:], strict=True)],
                             lasts_all - first)  # fmt: skip
    data = np.frombuffer(memory.join_views(view, inflated_groups), np.uint8, total)
    return Variable(rebased, data, n)


def _words_at(data: np.ndarray, at: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The ``dt`` values at byte positions ``at`` of ``data`` (any alignment), as int64."""
    picked = data[at[:, None] + np.arange(dt.itemsize)[None, :]]
    return picked.view(dt).reshape(-1).astype(np.int64)


def _mb_variable(var: pb.Variable, buf: ChunkBuffers, counts: np.ndarray, where: str) -> Variable:
    dt = _offset_dtype(var, where)
    wb = dt.itemsize
    width = wb * 8
    raw, starts = buf.raw, buf.pos
    if np.any(starts % wb) or raw.ctypes.data % wb:
        raw, starts = buf.data, buf.starts
    if np.any(buf.sizes % wb) or np.any(buf.sizes < (counts + 1) * wb):
        raise FormatError(f"{where}: string chunk too small for its offsets")
    words = _words(raw, dt)
    heads = starts // wb  # word index of each chunk's first offset
    first = words[heads].astype(np.int64)
    last = words[heads + counts].astype(np.int64)
    if np.any(first != (counts + 1) * wb) or np.any(last > buf.sizes):
        raise FormatError(f"{where}: string offsets point outside their chunk")
    lens = last - first
    if counts.size > 1:
        data = join_slices(raw, starts + first, starts + last)
    else:
        data = raw[int(starts[0] + first[0]) : int(starts[0] + last[0])]
    # every offset but the chunk heads, rebased onto the joined data; a chunk's head equals
    # the previous chunk's last offset once rebased, so the output starts with one 0.
    # Offsets may still decrease inside a chunk: to_arrow checks that for every block.
    base = np.cumsum(lens) - lens - first
    n = int(counts.sum())
    small = int(lens.sum()) < 2**31 and width == 32
    out_dt = np.dtype(np.int32 if small else np.int64)
    rebased = pool_bytes((n + 1) * out_dt.itemsize).view(out_dt)
    rebased[0] = 0
    _gather_runs(words, heads + 1, counts, base, rebased[1:])
    return Variable(rebased, data, n)


def _gather_runs(words: np.ndarray, src: np.ndarray, counts: np.ndarray, add: np.ndarray,
                 out: np.ndarray) -> None:  # fmt: skip
    """``out`` = the runs ``words[src[i] : src[i] + counts[i]] + add[i]`` back to back.

    Runs of one length are copied as rows of a strided view (one row gather and one add
    per distinct length, a handful in mini-block pages), so no per-value index array is
    built. Callers check that every run lies inside ``words``. 64-bit words are added as
    signed (numpy would take ``uint64 + int64`` through float64): a corrupt word of 2^63
    or more comes out negative, for the caller's check that offsets never decrease.
    """
    if words.dtype == np.uint64:
        words = words.view(np.int64)
    if counts.size == 1:
        a, c = int(src[0]), int(counts[0])
        np.add(words[a : a + c], add[0], out=out, casting="unsafe")
        return
    dst = np.cumsum(counts) - counts
    step_in, step_out = words.strides[0], out.strides[0]
    for c in np.unique(counts).tolist():
        if c == 0:
            continue
        rows = np.flatnonzero(counts == c) if counts.size else counts
        rows_in = np.lib.stride_tricks.as_strided(
            words, shape=(words.size - c + 1, c), strides=(step_in, step_in), writeable=False)
        rows_out = np.lib.stride_tricks.as_strided(
            out, shape=(out.size - c + 1, c), strides=(step_out, step_out))
        if rows.size == counts.size:  # every run of this length: no selection needed
            values, values_add, target = rows_in[src], add[:, None], dst
        else:
            values, values_add, target = rows_in[src[rows]], add[rows][:, None], dst[rows]
        first = int(target[0])
        if int(target[-1]) - first == (target.size - 1) * c:  # the runs follow each other
            block = out[first : first + target.size * c].reshape(target.size, c)
            np.add(values, values_add, out=block, casting="unsafe")
        else:
            rows_out[target] = values + values_add


def fsst_decode(table_bytes: bytes, inner: Block, where: str) -> Variable:
    """Expand FSST-compressed strings ``inner`` with the symbol table ``table_bytes``."""
    if not isinstance(inner, Variable):
        raise FormatError(f"{where}: FSST over fixed-width data")
    table = fsst.parse_symbol_table(table_bytes, where)
    data, offsets = fsst.decompress(table, inner.data, inner.offsets, where)
    return Variable(offsets, data, inner.n)


def _flat_bits(enc: pb.CompressiveEncoding, where: str) -> int:
    if kind(enc) != "flat" or enc.flat.HasField("data"):
        raise _unsupported(enc, "nested flat", where)
    return _check_bits(int(enc.flat.bits_per_value), where)


def _mb_rle(rle: pb.Rle, bufs: list[ChunkBuffers], counts: np.ndarray, where: str) -> Fixed:
    bits = _flat_bits(rle.values, where)
    if _flat_bits(rle.run_lengths, where) != 8 or bits % 8 or bits > 64:
        raise FormatError(f"{where}: RLE needs byte-wide values and 8-bit run lengths")
    vals, lens = bufs[0], bufs[1]
    width = bits // 8
    if np.any(vals.sizes % width) or not np.array_equal(vals.sizes // width, lens.sizes):
        raise FormatError(f"{where}: RLE chunk has {vals.sizes} value bytes for {lens.sizes} runs")
    dt = bp.dtype_for(bits)
    expanded = np.repeat(vals.data.view(dt), lens.data)
    per_chunk = np.zeros(counts.size, np.int64)
    nonempty = lens.sizes > 0
    if nonempty.any():
        sums = np.add.reduceat(lens.data.astype(np.int64), lens.starts[nonempty])
        per_chunk[nonempty] = sums
    if np.any(per_chunk < counts):
        raise FormatError(f"{where}: RLE runs cover fewer values than the chunk holds")
    if not np.array_equal(per_chunk, counts):
        expanded = expanded[range_indices(np.cumsum(per_chunk) - per_chunk, counts)]
    return Fixed(expanded.view(np.uint8), bits, int(counts.sum()))


def _mb_bss(bss: pb.ByteStreamSplit, buf: ChunkBuffers, counts: np.ndarray, where: str) -> Fixed:
    bits = _flat_bits(bss.values, where)
    if bits % 8:
        raise FormatError(f"{where}: byte stream split of {bits}-bit values")
    width = bits // 8
    if not np.array_equal(buf.sizes, counts * width):
        raise FormatError(f"{where}: byte-stream-split chunk size does not match its values")
    out = np.empty(int(buf.sizes.sum()), np.uint8)
    starts = buf.starts
    for c in np.unique(counts).tolist():
        rows = np.flatnonzero(counts == c)
        idx = starts[rows][:, None] + np.arange(c * width)[None, :]
        streams = buf.data[idx].reshape(rows.size, width, c)
        out[idx] = streams.transpose(0, 2, 1).reshape(rows.size, c * width)
    return Fixed(out, bits, int(counts.sum()))


def fsl_layers(enc: pb.CompressiveEncoding, where: str) -> tuple[list[tuple[int, bool]], int]:
    """The fixed-size-list layers around ``enc`` (dimension, has validity), outermost first, and the
    bits of the innermost item."""
    layers = []
    while kind(enc) == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.items_per_value)
        if dim <= 0 or dim > 1 << 24:
            raise FormatError(f"{where}: fixed-size list of {dim} items")
        layers.append((dim, bool(fsl.has_validity)))
        enc = fsl.values
    if kind(enc) == "constant" and not enc.constant.HasField("value"):
        return layers, 0  # every item null: no item data at all
    return layers, _flat_bits(enc, where)


def _mb_fsl(
    enc: pb.CompressiveEncoding, bufs: list[ChunkBuffers], counts: np.ndarray, where: str
) -> Fixed:
    layers, bits = fsl_layers(enc, where)
    cum = 1
    out_layers = []
    used = 0
    for dim, has_validity in layers:
        cum *= dim
        valid = None
        if has_validity:
            vb = bufs[used]
            used += 1
            nbits = counts * cum
            if np.any(vb.sizes * 8 < nbits):
                raise FormatError(f"{where}: fixed-size list validity chunk is too small")
            bitarr = np.unpackbits(vb.data, bitorder="little")
            valid = bitarr[range_indices(vb.starts * 8, nbits)].astype(bool)
        out_layers.append((dim, valid))
    if bits == 0:
        return Fixed(np.zeros(0, np.uint8), 0, int(counts.sum()), tuple(out_layers))
    data = _mb_flat_bits(bits * cum, bufs[used], counts, where)
    return Fixed(data.data, bits, data.n, tuple(out_layers))


# --------------------------------------------------------------------------- block
def decode_block(enc: pb.CompressiveEncoding, buf: bytes | memoryview | np.ndarray, n: int,
                 where: str) -> Block:  # fmt: skip
    """Decode one whole buffer holding ``n`` values."""
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    k = kind(enc)
    if k == "flat":
        flat = enc.flat
        if flat.HasField("data"):
            data = np.frombuffer(inflate(flat.data.scheme, data, where), np.uint8)
        bits = _check_bits(int(flat.bits_per_value), where)
        if data.size * 8 < n * bits:
            raise FormatError(f"{where}: {data.size} bytes hold fewer than {n} values")
        return Fixed(data, bits, n)
    if k == "general":
        raw = np.frombuffer(inflate(enc.general.compression.scheme, data, where), np.uint8)
        return decode_block(enc.general.values, raw, n, where)
    if k == "variable":
        return _block_variable(data, n, where)
    if k == "out_of_line_bitpacking":
        return _block_out_of_line(enc.out_of_line_bitpacking, data, n, where)
    if k == "inline_bitpacking":
        counts = np.array([n], np.int64)
        if n > bp.BLOCK:
            raise FormatError(f"{where}: inline-bitpacked block of {n} values")
        return _mb_inline(enc.inline_bitpacking, ChunkBuffers.of(data, np.array([data.size])),
                          counts, where)  # fmt: skip
    if k == "constant":
        value = np.frombuffer(enc.constant.value, np.uint8)
        if not value.size:
            raise FormatError(f"{where}: constant encoding without a value")
        return Fixed(np.tile(value, n), value.size * 8, n)
    if k == "rle":
        return _block_rle(enc.rle, data, n, where)
    if k == "fixed_size_list":
        layers, bits = fsl_layers(enc, where)
        if any(v for _, v in layers):
            raise UnsupportedFeatureError(f"{where}: fixed-size list validity in a block")
        cum = int(np.prod([d for d, _ in layers]))
        if data.size * 8 < n * cum * bits:
            raise FormatError(f"{where}: fixed-size list block is too small")
        return Fixed(data, bits, n, tuple((d, None) for d, _ in layers))
    raise _unsupported(enc, "block", where)


def _block_variable(data: np.ndarray, n: int, where: str) -> Variable:
    header = data.data  # for struct
    if data.size < 9:
        raise FormatError(f"{where}: variable-width block of {data.size} bytes")
    if data[1] or data[2] or data[3]:  # older framing: u8 width, count, data start
        width = int(data[0])
        if width == 32:
            count, start = struct.unpack_from("<II", header, 1)
            off0 = 9
        elif width == 64 and data.size >= 17:
            count, start = struct.unpack_from("<QQ", header, 1)
            off0 = 17
        else:
            raise FormatError(f"{where}: {width}-bit offsets in a variable-width block")
        if count != n:
            raise FormatError(f"{where}: variable-width block of {count} values, expected {n}")
    else:
        width = int(struct.unpack_from("<I", header)[0])
        if width == 32:
            start = struct.unpack_from("<I", header, 4)[0]
            off0 = 8
        elif width == 64 and data.size >= 16:
            start = struct.unpack_from("<Q", header, 8)[0]
            off0 = 16
        else:
            raise FormatError(f"{where}: {width}-bit offsets in a variable-width block")
    wb = width // 8
    if start > data.size or (start - off0) != (n + 1) * wb:
        raise FormatError(f"{where}: variable-width block offsets do not cover {n} values")
    offs = data[off0:start].copy().view(f"<u{wb}").astype(np.int64)
    body = data[start:]
    if n and (offs[0] != 0 or np.any(np.diff(offs) < 0) or offs[-1] > body.size):
        raise FormatError(f"{where}: variable-width block offsets are corrupt")
    return Variable(offs - (offs[0] if n else 0), body, n)


def _ool_parts(ool: pb.OutOfLineBitpacking, where: str) -> tuple[int, int]:
    bits = int(ool.uncompressed_bits_per_value)
    if bits not in (8, 16, 32, 64):
        raise FormatError(f"{where}: out-of-line bitpacking of {bits}-bit values")
    values = ool.values
    if kind(values) == "flat" and not values.flat.HasField("data") \
            and values.flat.bits_per_value == 0:
        width = 0  # every value 0 (pylance packs def levels so when a page has no empty list)
    else:
        width = _flat_bits(values, where)
    if width > bits:
        raise FormatError(f"{where}: bit width {width} over {bits} bits")
    return bits, width


def _block_out_of_line(ool: pb.OutOfLineBitpacking, data: np.ndarray, n: int,
                       where: str) -> Fixed:  # fmt: skip
    bits, width = _ool_parts(ool, where)
    vals = _ool_unpack(data, np.array([data.size], np.int64), np.array([n], np.int64),
                       bits, width, where)  # fmt: skip
    return Fixed(vals.view(np.uint8), bits, n)


def _ool_unpack(data: np.ndarray, sizes: np.ndarray, counts: np.ndarray, bits: int, width: int,
                where: str) -> np.ndarray:  # fmt: skip
    """Out-of-line bitpacked runs back to back (sizes in bytes), vectorised over runs."""
    dt = bp.dtype_for(bits)
    wb = bits // 8
    if np.any(sizes % wb):
        raise FormatError(f"{where}: bitpacked buffer is not whole {bits}-bit words")
    words = _words(data, dt)
    nwords = bp.packed_words(width, bits)
    full = counts // bp.BLOCK
    tail = counts % bp.BLOCK
    size_words = sizes // wb
    raw_tail = (tail > 0) & (size_words == full * nwords + tail)
    packed_tail = (tail > 0) & ~raw_tail
    expect = full * nwords + np.where(raw_tail, tail, 0) + np.where(packed_tail, nwords, 0)
    if width == 0:
        expect = np.where(tail > 0, np.where(size_words == tail, tail, 0), 0)
        raw_tail = (tail > 0) & (size_words == tail) & (tail > 0)
        packed_tail = (tail > 0) & ~raw_tail
    if not np.array_equal(size_words, expect):
        raise FormatError(f"{where}: bitpacked buffer size does not match {counts.sum()} values")
    word_starts = np.cumsum(size_words) - size_words
    nblocks = full + packed_tail
    block_word_starts = range_indices(np.zeros(counts.size, np.int64), nblocks) * nwords
    block_word_starts += np.repeat(word_starts, nblocks)
    if nwords:
        idx = block_word_starts[:, None] + np.arange(nwords)[None, :]
        decoded = bp.unpack(words[idx], width, bits).reshape(-1)
    else:
        decoded = np.zeros(int(nblocks.sum()) * bp.BLOCK, dt)
    if not raw_tail.any():
        if np.all(counts[:-1] % bp.BLOCK == 0):
            return decoded[: int(counts.sum())]
        first_block = np.cumsum(nblocks) - nblocks
        return decoded[range_indices(first_block * bp.BLOCK, counts)]
    # some runs end with raw values: append them after the decoded blocks and gather
    raw_starts = word_starts + full * nwords
    raw_vals = words[range_indices(raw_starts[raw_tail], tail[raw_tail])]
    source = np.concatenate([decoded, raw_vals])
    first_block = np.cumsum(nblocks) - nblocks
    raw_base = decoded.size + np.cumsum(np.where(raw_tail, tail, 0)) - np.where(raw_tail, tail, 0)
    pieces_start = np.stack([first_block * bp.BLOCK, raw_base], 1).reshape(-1)
    pieces_len = np.stack([np.where(raw_tail, full * bp.BLOCK, counts),
                           np.where(raw_tail, tail, 0)], 1).reshape(-1)  # fmt: skip
    return source[range_indices(pieces_start, pieces_len)]


def _block_rle(rle: pb.Rle, data: np.ndarray, n: int, where: str) -> Fixed:
    bits = _flat_bits(rle.values, where)
    if _flat_bits(rle.run_lengths, where) != 8 or bits % 8 or bits > 64:
        raise FormatError(f"{where}: RLE needs byte-wide values and 8-bit run lengths")
    if data.size < 8:
        raise FormatError(f"{where}: RLE block of {data.size} bytes")
    vbytes = int(struct.unpack_from("<Q", data.data)[0])
    width = bits // 8
    if vbytes % width or 8 + vbytes > data.size or (data.size - 8 - vbytes) != vbytes // width:
        raise FormatError(f"{where}: RLE block sizes are inconsistent")
    vals = data[8 : 8 + vbytes].copy().view(bp.dtype_for(bits))
    lens = data[8 + vbytes :]
    if int(lens.sum(dtype=np.int64)) < n:
        raise FormatError(f"{where}: RLE runs cover fewer than {n} values")
    return Fixed(np.repeat(vals, lens)[:n].view(np.uint8), bits, n)


def decode_levels(enc: pb.CompressiveEncoding, buf: ChunkBuffers, counts: np.ndarray,
                  where: str) -> np.ndarray:  # fmt: skip
    """Rep or def levels (u16) of many chunks, concatenated."""
    k = kind(enc)
    total = int(counts.sum())
    if k == "out_of_line_bitpacking":
        bits, width = _ool_parts(enc.out_of_line_bitpacking, where)
        if bits != 16:
            raise FormatError(f"{where}: levels bitpacked from {bits} bits")
        return _ool_unpack(buf.data, buf.sizes, counts, bits, width, where)
    if k == "flat" and enc.flat.bits_per_value == 16 and not enc.flat.HasField("data"):
        if not np.array_equal(buf.sizes, counts * 2):
            raise FormatError(f"{where}: level buffer sizes do not match the level counts")
        return buf.data.view("<u2")
    pieces = []
    for s, size, n in zip(buf.starts.tolist(), buf.sizes.tolist(), counts.tolist(), strict=True):
        block = decode_block(enc, buf.data[s : s + size], n, where)
        if not isinstance(block, Fixed) or block.bits != 16 or block.fsl:
            raise FormatError(f"{where}: levels are not 16-bit values")
        pieces.append(block.data[: 2 * n].view("<u2"))
    out = np.concatenate(pieces) if pieces else np.zeros(0, np.uint16)
    if out.size != total:
        raise FormatError(f"{where}: decoded {out.size} levels, expected {total}")
    return out
