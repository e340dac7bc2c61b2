"""Decoded data blocks of Lance 2.1/2.2 pages and their conversion to Arrow.

Compressive encodings turn bytes into one of two shapes, mirroring what the reference
reader passes around:

* :class:`Fixed`: ``n`` values of ``bits`` bits each, back to back (bit-packed LSB first
  when ``bits`` is not a multiple of 8). Fixed-size lists flatten into their items; each
  list layer that has item validity carries it as a boolean array.
* :class:`Variable`: ``n`` byte strings given by ``n + 1`` offsets into ``data``.

:func:`to_arrow` turns either into an Arrow array of the table's leaf type, and the
``general_*`` helpers undo LZ4 / ZSTD buffer compression through pyarrow's codecs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TypeVar

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import lz4_frames, parallel

MAX_INFLATE = 1 << 31  # refuse to allocate more than this for one decompressed buffer
_INFLATE_GROUP = 32  # buffers inflated per task when many are inflated in threads
_PARALLEL_BYTES = 1 << 20  # compressed bytes from which buffers inflate in threads


@dataclass
class Fixed:
    """A block of fixed-width values (``bits`` each), possibly under fixed-size lists."""
    data: np.ndarray  # uint8
    bits: int  # bits per item (after flattening fixed-size lists)
    n: int  # number of values (rows of the outermost fixed-size list, if any)
    # fixed-size list layers, outermost first: (dimension, item validity or None)
    fsl: tuple[tuple[int, np.ndarray | None], ...] = field(default=())

    @property
    def items_per_value(self) -> int:
        out = 1
        for dim, _ in self.fsl:
            out *= dim
        return out


@dataclass
class Variable:
    """A block of variable-width values: ``n`` byte strings given by ``offsets``."""
    offsets: np.ndarray  # int64, n + 1 entries, offsets[0] == 0
    data: np.ndarray  # uint8
    n: int


Block = Fixed | Variable


# --------------------------------------------------------------------------- general
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _zstd_frame_size(buf: bytes | memoryview) -> int | None:
    """Frame_Content_Size from a zstd frame header (RFC 8878 3.1.1.1), if recorded."""
    if len(buf) < 6:
        return None
    fhd = buf[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    did_flag = fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(buf) < pos + size:
        return None
    value = int.from_bytes(bytes(buf[pos : pos + size]), "little")
    return value + 256 if size == 2 else value


def inflate(scheme: int, buf: bytes | memoryview | np.ndarray, where: str, *,
            buffer: bool = False) -> bytes | pa.Buffer:
    """Undo Lance's general compression of one buffer (1 = LZ4 block, 2 = ZSTD frame).

    ``buffer``: return the codec's Arrow buffer as is (no copy into ``bytes``; for callers
    that join or view the result anyway).

    LZ4 buffers start with a u32 uncompressed size; ZSTD buffers with a u64 size or,
    from older writers, directly with a frame that records its content size.
    """
    buf = (buf.data if isinstance(buf, np.ndarray) else memoryview(buf)).cast("B")
    try:
        if scheme == 1:
            if len(buf) < 4:
                raise FormatError(f"{where}: LZ4 buffer of {len(buf)} bytes has no size prefix")
            size = struct.unpack_from("<I", buf)[0]
            if size == 0:
                return b""
            if size > min(MAX_INFLATE, 255 * len(buf) + 64):
                raise FormatError(f"{where}: LZ4 buffer claims {size} bytes from {len(buf)}")
            [out] = lz4_frames.inflate_exact([buf[4:]], [size], where)
            return out if buffer or isinstance(out, bytes) else out.to_pybytes()
        if scheme == 2:
            if not len(buf):
                return b""
            frame = buf
            size = None
            if bytes(buf[:4]) == _ZSTD_MAGIC and len(buf) > 4 and not buf[4] & 0x08:
                size = _zstd_frame_size(buf)
            if size is None:
                if len(buf) < 8:
                    raise FormatError(f"{where}: ZSTD buffer of {len(buf)} bytes is truncated")
                size = struct.unpack_from("<Q", buf)[0]
                frame = buf[8:]
            if size == 0:
                return b""
            if size > zstd_bound(len(frame)):
                raise FormatError(f"{where}: ZSTD buffer of {len(frame)} bytes claims {size}")
            return _codec("zstd").decompress(frame, decompressed_size=size, asbytes=not buffer)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise FormatError(f"{where}: corrupt compressed buffer: {exc}") from exc
    raise UnsupportedFeatureError(f"{where}: unknown general compression scheme {scheme}")


ZSTD_BLOCK = 128 << 10  # zstd's largest block (RFC 8878's Block_Maximum_Size)


def zstd_bound(compressed: int) -> int:
    """The most a zstd frame of ``compressed`` bytes can inflate to: a block inflates to
    at most 128 KiB and takes at least 4 bytes (an RLE block), within MAX_INFLATE. A
    claimed size is checked against it before it sizes an allocation."""
    return min(MAX_INFLATE, (compressed // 4 + 1) * ZSTD_BLOCK)


def inflate_many(scheme: int, raw: memoryview, pos: list[int], sizes: list[int],
                 where: str) -> list[bytes | memoryview | pa.Buffer]:  # fmt: skip
    """:func:`inflate` of the buffers ``raw[pos[i] : pos[i] + sizes[i]]`` (views of the
    codec's output, not copies).

    ZSTD buffers in the framing pylance writes (u64 size, then a frame recording the same
    content size) are joined and inflated in one codec call: each call costs ~25 us of
    context set-up, as much as inflating a 64 KiB chunk. zstd checks every frame's output
    against its recorded size, so a lying prefix still fails; anything else goes one by one.
    """
    if scheme == 2 and len(pos) > 1:
        frames = []
        total = 0
        for s, n in zip(pos, sizes, strict=True):
            buf = raw[s : s + n]
            if n < 14 or bytes(buf[8:12]) != _ZSTD_MAGIC or bytes(buf[:4]) == _ZSTD_MAGIC \
                    or buf[12] & 0x08:  # fmt: skip
                break
            size = int.from_bytes(bytes(buf[:8]), "little")
            if size == 0 or _zstd_frame_size(buf[8:]) != size:
                break
            frames.append(buf[8:])
            total += size
            if size > zstd_bound(n - 8):
                raise FormatError(f"{where}: ZSTD buffer of {n - 8} bytes claims {size}")
        else:
            if total > MAX_INFLATE:
                raise FormatError(f"{where}: ZSTD buffers claim {total} bytes")
            try:
                out = _codec("zstd").decompress(b"".join(frames), decompressed_size=total,
                                                asbytes=True)  # fmt: skip
            except (OSError, pa.ArrowException, ValueError) as exc:
                raise FormatError(f"{where}: corrupt compressed buffer: {exc}") from exc
            if len(out) != total:
                raise FormatError(f"{where}: ZSTD buffers inflate to {len(out)} bytes, not "
                                  f"{total}")  # fmt: skip
            view = memoryview(out)
            bounds = np.cumsum([int.from_bytes(bytes(raw[s : s + 8]), "little") for s in pos])
            starts = [0, *bounds[:-1].tolist()]
            return [view[a:b] for a, b in zip(starts, bounds.tolist(), strict=True)]
    if len(pos) < 2 * _INFLATE_GROUP or sum(sizes) < _PARALLEL_BYTES:
        return [inflate(scheme, raw[s : s + n], where, buffer=True)
                for s, n in zip(pos, sizes, strict=True)]  # fmt: skip
    # the codec releases the GIL: groups of buffers inflate side by side
    groups = range(0, len(pos), _INFLATE_GROUP)
    done = parallel.map_parts(
        lambda g: [inflate(scheme, raw[s : s + n], where, buffer=True)
                   for s, n in zip(pos[g : g + _INFLATE_GROUP], sizes[g : g + _INFLATE_GROUP],
                                   strict=True)], groups)  # fmt: skip
    return [piece for group in done for piece in group]


@cache
def _codec(name: str, level: int | None = None) -> pa.Codec:
    return pa.Codec(name) if level is None else pa.Codec(name, compression_level=level)


def _framing(scheme: int, level: int | None) -> tuple[pa.Codec, int]:
    """The codec of ``scheme`` (1: LZ4 blocks, else zstd) and the width of the size word
    before each compressed buffer (u32 for LZ4, u64 for zstd: the framing pylance writes)."""
    return (_codec("lz4_raw", level), 4) if scheme == 1 else (_codec("zstd", level), 8)


def deflate(scheme: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Inverse of :func:`inflate` (the framing pylance writes)."""
    data = memoryview(data).cast("B")
    codec, word = _framing(scheme, level)
    return len(data).to_bytes(word, "little") + codec.compress(data, asbytes=True)


def deflate_slices(scheme: int, data: memoryview, bounds: Sequence[int], which: Iterable[int],
                   level: int | None = None) -> list[bytes]:  # fmt: skip
    """:func:`deflate` of ``data[bounds[c] : bounds[c + 1]]`` for each ``c`` of ``which``,
    in order: one codec call each and no other Python around it (a page of small string
    chunks makes thousands of them)."""
    codec, word = _framing(scheme, level)
    return [(bounds[c + 1] - bounds[c]).to_bytes(word, "little")
            + codec.compress(data[bounds[c] : bounds[c + 1]], asbytes=True)
            for c in which]  # fmt: skip


DEFLATE_THREAD_MIN_BYTES = 1 << 20  # below this, one thread compresses everything
T = TypeVar("T")
R = TypeVar("R")


def in_two_halves(work: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
    """``work(items)``, with the two halves of ``items`` done side by side (for work that
    mostly runs without the interpreter lock, such as codecs) when the call has the cores
    to itself: :func:`parallel.map_parts`'s threads and rules (helpers joined before it
    returns, the first error raised here)."""
    mid = len(items) // 2
    first, second = parallel.map_parts(work, [items[:mid], items[mid:]])
    return first + second


def deflate_many(scheme: int, chunks: Sequence[bytes | memoryview], level: int | None = None
                 ) -> list[bytes]:  # fmt: skip
    """:func:`deflate` of every chunk, in order; from :data:`DEFLATE_THREAD_MIN_BYTES`
    on two threads (:func:`in_two_halves`: pylance compresses on all cores too)."""
    def work(part: Sequence[bytes | memoryview]) -> list[bytes]:
        return [deflate(scheme, c, level) for c in part]

    total = sum(len(memoryview(c)) for c in chunks)
    if total < DEFLATE_THREAD_MIN_BYTES or len(chunks) < 2:
        return work(chunks)
    return in_two_halves(work, chunks)


# --------------------------------------------------------------------------- to Arrow
def _storage(t: pa.DataType) -> pa.DataType:
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def _validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or bool(valid.all()):
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def fixed_width_bits(t: pa.DataType) -> int | None:
    """Bits per value of a fixed-width Arrow type (None: variable width)."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return t.byte_width * 8
    try:
        return t.bit_width
    except ValueError:
        return None


def to_arrow(block: Block, t: pa.DataType, valid: np.ndarray | None, where: str) -> pa.Array:
    """Arrow array of type ``t`` from a decoded block; ``valid`` marks non-null values."""
    storage = _storage(t)
    out = _to_storage(block, storage, valid, where)
    if isinstance(t, pa.BaseExtensionType):
        out = pa.ExtensionArray.from_storage(t, out)
    return out


def _to_storage(block: Block, t: pa.DataType, valid: np.ndarray | None, where: str) -> pa.Array:
    n = block.n
    if valid is not None and valid.size != n:
        raise FormatError(f"{where}: {valid.size} validity bits for {n} values")
    vbuf = _validity_buffer(valid)
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_dictionary(t):
        values = _to_storage(block, t.value_type, valid, where)
        return values.dictionary_encode().cast(t)
    if (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        if not isinstance(block, Variable):
            raise FormatError(f"{where}: fixed-width data for a {t} column")
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        offs = block.offsets
        if offs.size != n + 1:
            raise FormatError(f"{where}: {offs.size} string offsets for {n} values")
        if n and (int(offs[0]) < 0 or int(offs[-1]) > block.data.size):
            raise FormatError(f"{where}: string offsets run past the data")
        if not large and int(offs[-1]) >= 2**31:
            raise FormatError(f"{where}: {int(offs[-1])} bytes overflow 32-bit string offsets")
        if n and np.any(offs[1:] < offs[:-1]):
            raise FormatError(f"{where}: string offsets decrease")
        offs = offs.astype(np.int64 if large else np.int32, copy=False)
        arr = pa.Array.from_buffers(t, n, [vbuf, pa.py_buffer(offs), pa.py_buffer(block.data)])
        if (pa.types.is_string(t) or pa.types.is_large_string(t)) and not _ascii(block.data):
            try:  # offsets are checked above; what is left to check is the UTF-8 itself
                arr.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise FormatError(f"{where}: invalid UTF-8 in a string column") from exc
        return arr
    if pa.types.is_fixed_size_list(t):
        if isinstance(block, Fixed) and not block.fsl and block.bits == 0:
            # no data at all: the lists are all null (pylance stores an outer layer whose
            # items are all null lists so, without the inner layers)
            if valid is not None and valid.any():
                raise FormatError(f"{where}: {int(valid.sum())} {t} values have no data")
            return pa.nulls(n, t)
        if not isinstance(block, Fixed) or not block.fsl:
            raise FormatError(f"{where}: column of {t} is not stored as a fixed-size list")
        dim, item_valid = block.fsl[0]
        if dim != t.list_size:
            raise FormatError(f"{where}: fixed-size list of {dim} items, the schema says {t}")
        inner = Fixed(block.data, block.bits, n * dim, block.fsl[1:])
        items = _to_storage(inner, _storage(t.value_type), item_valid, where)
        if isinstance(t.value_type, pa.BaseExtensionType):
            items = pa.ExtensionArray.from_storage(t.value_type, items)
        return pa.Array.from_buffers(t, n, [vbuf], children=[items])
    if isinstance(block, Variable):
        raise FormatError(f"{where}: variable-width data for a {t} column")
    if pa.types.is_struct(t):
        return _packed_struct(block, t, valid, vbuf, where)
    if block.fsl:
        raise FormatError(f"{where}: fixed-size list data for a {t} column")
    bits = fixed_width_bits(t)
    if bits == 0 and block.bits == 0:  # a zero-width type (fixed_size_binary(0)): no bytes
        return pa.Array.from_buffers(t, n, [vbuf, pa.py_buffer(b"")])
    if block.bits == 0:  # items stored as "all null" (no data)
        return pa.nulls(n, t)
    if bits is None:
        raise UnsupportedFeatureError(f"{where}: cannot decode values of type {t}")
    if bits == 1 and block.bits == 8:  # a byte a bool (pylance's full-zip pages)
        if block.data.size < n:
            raise FormatError(f"{where}: {block.data.size} bytes hold fewer than {n} values")
        packed = np.packbits(block.data[:n] != 0, bitorder="little")
        return pa.Array.from_buffers(t, n, [vbuf, pa.py_buffer(packed)])
    if block.bits != bits:
        raise FormatError(f"{where}: {block.bits}-bit values for a {t} column")
    need = (n * bits + 7) // 8
    if block.data.size < need:
        raise FormatError(f"{where}: {block.data.size} bytes hold fewer than {n} values")
    return pa.Array.from_buffers(t, n, [vbuf, pa.py_buffer(block.data[:need])])


def _ascii(data: np.ndarray) -> bool:
    """Whether every byte is below 0x80: then any split of ``data`` is valid UTF-8, and the
    per-value UTF-8 check (the dearest part of decoding short strings) can be skipped."""
    if data.size == 0:
        return True
    usable = data.size & ~7
    top = int(np.bitwise_or.reduce(data[:usable].view(np.uint64))) if usable else 0
    tail = int(np.bitwise_or.reduce(data[usable:])) if usable < data.size else 0
    return not ((top & 0x8080808080808080) or (tail & 0x80))


def _packed_struct(block: Fixed, t: pa.StructType, valid: np.ndarray | None,
                   vbuf: pa.Buffer | None, where: str) -> pa.Array:  # fmt: skip
    """A struct stored row by row (packed): split each row into its fixed-width children.

    Children take the struct's nulls, as pylance returns them.
    """
    n = block.n
    found = [fixed_width_bits(_storage(f.type)) for f in t]
    widths = [w for w in found if w is not None and w % 8 == 0]
    if block.fsl or len(widths) != len(found):
        raise UnsupportedFeatureError(f"{where}: packed struct {t} with non-byte-wide children")
    if sum(widths) != block.bits:
        raise FormatError(f"{where}: packed rows of {block.bits} bits for {t}")
    row = block.bits // 8
    if block.data.size < n * row:
        raise FormatError(f"{where}: packed struct data is truncated")
    rows = block.data[: n * row].reshape(n, row)
    children, col = [], 0
    for f, w in zip(t, widths, strict=True):
        part = np.ascontiguousarray(rows[:, col : col + w // 8]).reshape(-1)
        children.append(to_arrow(Fixed(part, w, n), f.type, valid, where))
        col += w // 8
    return pa.StructArray.from_buffers(t, n, [vbuf], children=children)
