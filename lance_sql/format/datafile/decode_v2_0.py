"""Decode a row span of one Lance file format 2.0 page into an Arrow array.

Every decoder takes ``(encoding, type, n, a, b)``: the page holds ``n`` values at this level
and rows ``[a, b)`` are wanted. Only the bytes of that span are read (``Flat`` values are
fixed width, ``Binary`` reads end offsets ``[a-1, b)`` and then just the bytes they cover),
and flat buffers become Arrow buffers without a copy.

Corrupt input (buffer too short, offsets decreasing or past the data, indices out of
range, a type that does not match the encoding) raises :class:`FormatError`; valid
encodings this module does not implement raise :class:`UnsupportedFeatureError`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import fsst, lz4_frames
from lance_sql.format.datafile.blocks import zstd_bound
from lance_sql.format.datafile.encode_v2_0 import fixed_bit_width, is_binary_like
from lance_sql.format.pb import encodings_v2_0_pb2 as enc

_LARGE = (pa.large_string(), pa.large_binary())


class PageContext:
    """The buffers one page may reference and a way to read byte ranges of them."""

    def __init__(
        self,
        read: Callable[[int, int], bytes | memoryview],
        page_buffers: tuple[tuple[int, int], ...],
        column_buffers: tuple[tuple[int, int], ...],
        file_buffers: tuple[tuple[int, int], ...],
        where: str,
    ) -> None:
        self._read = read
        self._buffers = (page_buffers, column_buffers, file_buffers)
        self.where = where  # "<path>: column 3 page 0", prefix of every error
        self._inflated: dict[tuple[int, int], memoryview] = {}

    def error(self, message: str) -> FormatError:
        return FormatError(f"{self.where}: {message}")

    def locate(self, desc: enc.Buffer) -> tuple[int, int]:
        kind = desc.buffer_type
        if kind not in (0, 1, 2):
            raise self.error(f"unknown buffer type {kind}")
        table = self._buffers[kind]
        if desc.buffer_index >= len(table):
            raise self.error(f"buffer {desc.buffer_index} does not exist (has {len(table)})")
        return table[desc.buffer_index]

    def read(self, desc: enc.Buffer, start: int, length: int, expect: int | None) -> memoryview:
        """Bytes ``[start, start+length)`` of a buffer that should hold ``expect`` bytes.

        Writers size every buffer exactly, so any other size means corrupt metadata.
        """
        offset, size = self.locate(desc)
        if expect is not None and size != expect:
            raise self.error(f"buffer of {size} bytes where {expect} were expected")
        if start + length > size:
            raise self.error(f"read of {start + length} bytes from a buffer of {size}")
        if not length:
            return memoryview(b"")
        data = self._read(offset + start, length)
        if len(data) != length:
            raise self.error(f"short read ({len(data)} of {length} bytes)")
        return memoryview(data)

    def read_flat(self, flat: enc.Flat, start: int, length: int, expect: int) -> memoryview:
        """Like :meth:`read` but through Flat's optional whole-buffer compression."""
        scheme = flat.compression.scheme.lower() if flat.HasField("compression") else ""
        if scheme in ("", "none"):
            return self.read(flat.buffer, start, length, expect)
        key = (flat.buffer.buffer_type, flat.buffer.buffer_index)
        data = self._inflated.get(key)
        if data is None:
            _, size = self.locate(flat.buffer)
            data = _decompress(self, scheme, self.read(flat.buffer, 0, size, None), expect)
            self._inflated[key] = data
        if len(data) != expect or start + length > len(data):
            raise self.error(f"decompressed {len(data)} bytes where {expect} were expected")
        return data[start : start + length]


def _decompress(ctx: PageContext, scheme: str, raw: memoryview, expect: int) -> memoryview:
    """pylance's general compression: lz4 = u32 size + block; zstd = u64 size + frame."""
    try:
        if scheme == "lz4":
            if len(raw) < 4:
                raise ctx.error("truncated lz4 buffer")
            size = int.from_bytes(raw[:4], "little")
            if size != expect:  # checked before it sizes the output
                raise ctx.error(f"lz4 buffer claims {size} bytes where {expect} were expected")
            if size > 255 * len(raw) + 64:  # (the page's row count sizes ``expect``)
                raise ctx.error(f"lz4 buffer of {len(raw)} bytes claims {size}")
            [out] = lz4_frames.inflate_exact([raw[4:]], [size], ctx.where)
        elif scheme == "zstd":
            # a zstd block inflates to at most 128 KiB and takes at least 4 bytes (an RLE
            # block): ``expect`` (from the page's row count) is bounded before it sizes
            # the output
            if expect > zstd_bound(len(raw)):
                raise ctx.error(f"zstd buffer of {len(raw)} bytes cannot hold {expect}")
            if bytes(raw[:4]) == b"\x28\xb5\x2f\xfd":  # a bare frame (older writers)
                out = pa.decompress(raw, decompressed_size=expect, codec="zstd")
            else:
                if len(raw) < 8:
                    raise ctx.error("truncated zstd buffer")
                size = int.from_bytes(raw[:8], "little")
                if size != expect:  # checked before it sizes the output
                    raise ctx.error(f"zstd buffer claims {size} bytes where {expect} were "
                                    "expected")
                out = pa.decompress(raw[8:], decompressed_size=size, codec="zstd")
        else:
            raise UnsupportedFeatureError(f"{ctx.where}: compression scheme {scheme!r}")
    except (pa.ArrowException, OSError, ValueError, OverflowError) as exc:
        # (a damaged LZ4 block is an OSError from pyarrow)
        raise ctx.error(f"cannot decompress {scheme} buffer: {exc}") from exc
    return memoryview(out)


def check_buffer_references(ctx: PageContext, encoding: enc.ArrayEncoding, count: int) -> None:
    """Every page buffer must be referenced exactly once by the page's encoding.

    A cheap structural check: a bit flip that turns e.g. ``some_nulls`` into ``all_nulls``
    or renumbers a buffer leaves a buffer unreferenced (or referenced twice).
    """
    seen: list[int] = []
    stack: list = [encoding]
    while stack:
        msg = stack.pop()
        if isinstance(msg, enc.Buffer):
            if msg.buffer_type == 0:
                seen.append(msg.buffer_index)
            continue
        if isinstance(msg, enc.PackedStruct):  # its children's encodings name no buffer
            stack.append(msg.buffer)
            continue
        for fd, value in msg.ListFields():
            if fd.message_type is None:
                continue
            if fd.is_repeated:
                stack.extend(value)
            else:
                stack.append(value)
    if sorted(seen) != list(range(count)):
        raise ctx.error(f"encoding references buffers {sorted(seen)} but the page has {count}")


def _kind(encoding: enc.ArrayEncoding) -> str | None:
    return encoding.WhichOneof("array_encoding")


def decode(
    ctx: PageContext, encoding: enc.ArrayEncoding, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    """Rows ``[a, b)`` of a page (or nested part of one) holding ``n`` values."""
    if isinstance(dtype, pa.BaseExtensionType):
        inner = decode(ctx, encoding, dtype.storage_type, n, a, b)
        return pa.ExtensionArray.from_storage(dtype, inner)
    if not 0 <= a <= b <= n:
        raise ctx.error(f"rows {a}..{b} requested from a page of {n}")
    if a == b:
        return pa.array([], dtype)
    kind = _kind(encoding)
    if kind == "nullable":
        return _nullable(ctx, encoding.nullable, dtype, n, a, b)
    if pa.types.is_null(dtype):
        return pa.nulls(b - a)
    if pa.types.is_dictionary(dtype) and kind in ("flat", "binary", "fixed_size_binary"):
        return plain_to_dictionary(decode(ctx, encoding, dtype.value_type, n, a, b), dtype)
    if kind == "flat":
        return _flat(ctx, encoding.flat, dtype, n, a, b)
    if kind == "fixed_size_list":
        return _fixed_size_list(ctx, encoding.fixed_size_list, dtype, n, a, b)
    if kind == "binary":
        return _binary(ctx, encoding.binary, dtype, n, a, b)
    if kind == "fsst":
        return _fsst(ctx, encoding.fsst, dtype, n, a, b)
    if kind == "dictionary":
        return _dictionary(ctx, encoding.dictionary, dtype, n, a, b)
    if kind == "fixed_size_binary":
        return _fixed_size_binary(ctx, encoding.fixed_size_binary, dtype, n, a, b)
    if kind == "packed_struct":
        return _packed_struct(ctx, encoding.packed_struct, dtype, n, a, b)
    if kind is None:
        raise ctx.error("page has an empty array encoding")
    if kind in ("list", "struct"):
        raise ctx.error(f"{kind} encoding where a {dtype} value was expected")
    raise UnsupportedFeatureError(f"{ctx.where}: encoding {kind!r} is not supported (type {dtype})")


# --------------------------------------------------------------------------- validity
def _bitmap(ctx: PageContext, flat: enc.Flat, n: int, a: int, b: int) -> tuple[pa.Buffer, int]:
    """Bits ``[a, b)`` of a 1-bit Flat buffer: the covering bytes and the bit offset in them."""
    if flat.bits_per_value != 1:
        raise ctx.error(f"validity with {flat.bits_per_value} bits per value")
    first, last = a // 8, (b + 7) // 8
    data = ctx.read_flat(flat, first, last - first, (n + 7) // 8)
    return pa.py_buffer(data), a % 8


def _with_validity(arr: pa.Array, bits: pa.Buffer, bit_offset: int) -> pa.Array:
    """``arr`` with ``bits`` (starting at ``bit_offset``) as validity, ANDed with its own."""
    n = len(arr)
    if arr.null_count or arr.offset != bit_offset:
        raw = np.frombuffer(bits, dtype=np.uint8, count=(bit_offset + n + 7) // 8)
        mask = np.unpackbits(raw, bitorder="little")[bit_offset : bit_offset + n].view(bool)
        if arr.null_count:
            mask = mask & arr.is_valid().to_numpy(zero_copy_only=False)
        bits = pa.py_buffer(
            np.packbits(np.concatenate([np.zeros(arr.offset, bool), mask]), bitorder="little")
        )
    t = arr.type
    if pa.types.is_dictionary(t):
        indices = _with_validity(arr.indices, bits, arr.offset)
        return pa.DictionaryArray.from_arrays(indices, arr.dictionary, ordered=t.ordered)
    buffers = arr.buffers()
    if pa.types.is_fixed_size_list(t):
        return pa.Array.from_buffers(t, n, [bits], offset=arr.offset, children=[arr.values])
    return pa.Array.from_buffers(t, n, [bits, *buffers[1:]], offset=arr.offset)


def _nullable(
    ctx: PageContext, nullable: enc.Nullable, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    which = nullable.WhichOneof("nullability")
    if which == "no_nulls":
        return decode(ctx, nullable.no_nulls.values, dtype, n, a, b)
    if which == "all_nulls":
        return pa.nulls(b - a, dtype)
    if which != "some_nulls":
        raise ctx.error("nullable encoding without a nullability")
    some = nullable.some_nulls
    if _kind(some.validity) != "flat":
        raise UnsupportedFeatureError(
            f"{ctx.where}: validity encoded as {_kind(some.validity)!r} is not supported"
        )
    values = decode(ctx, some.values, dtype, n, a, b)
    if pa.types.is_null(dtype):
        return values
    bits, offset = _bitmap(ctx, some.validity.flat, n, a, b)
    return _with_validity(values, bits, offset)


# --------------------------------------------------------------------------- fixed width
def _flat(ctx: PageContext, flat: enc.Flat, dtype: pa.DataType, n: int, a: int, b: int) -> pa.Array:
    bits = fixed_bit_width(dtype)
    if bits is None:
        raise ctx.error(f"flat encoding where a {dtype} value was expected")
    if flat.bits_per_value != bits:
        raise ctx.error(f"flat values of {flat.bits_per_value} bits for type {dtype} ({bits} bits)")
    if bits == 1:
        data, offset = _bitmap(ctx, flat, n, a, b)
        return pa.Array.from_buffers(dtype, b - a, [None, data], offset=offset)
    width = bits // 8
    data = ctx.read_flat(flat, a * width, (b - a) * width, n * width)
    return pa.Array.from_buffers(dtype, b - a, [None, pa.py_buffer(data)])


def _fixed_size_list(
    ctx: PageContext, fsl: enc.FixedSizeList, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    if not pa.types.is_fixed_size_list(dtype) or dtype.list_size != fsl.dimension:
        raise ctx.error(f"fixed_size_list of dimension {fsl.dimension} for type {dtype}")
    if fsl.has_validity:
        raise UnsupportedFeatureError(
            f"{ctx.where}: fixed_size_list with has_validity is not a 2.0 encoding"
        )
    dim = fsl.dimension
    items = decode(ctx, fsl.items, dtype.value_type, n * dim, a * dim, b * dim)
    return pa.Array.from_buffers(dtype, b - a, [None], children=[items])


def _packed_struct(ctx: PageContext, packed: enc.PackedStruct, dtype: pa.DataType, n: int,
                   a: int, b: int) -> pa.Array:  # fmt: skip
    """A struct stored row by row (pylance's ``lance-encoding:packed``): one buffer of
    fixed-width rows, each child's bytes side by side; ``inner`` describes each child's
    values (flat, without nulls: pylance 2.0 packs nothing else)."""
    if not pa.types.is_struct(dtype):
        raise ctx.error(f"packed struct encoding where a {dtype} value was expected")
    if len(packed.inner) != dtype.num_fields:
        raise ctx.error(f"packed struct of {len(packed.inner)} children for type {dtype}")
    widths = []
    for child, inner in zip(dtype, packed.inner, strict=True):
        bits = _leaf_flat_bits(inner)
        want = fixed_bit_width(child.type)
        if bits is None or want is None or bits % 8:
            raise UnsupportedFeatureError(
                f"{ctx.where}: packed struct child {child.name!r} ({child.type}) is not a "
                f"byte-wide flat value")
        if bits != want:
            raise ctx.error(f"packed child {child.name!r} of {bits} bits for {child.type}")
        widths.append(bits // 8)
    row = sum(widths)
    raw = ctx.read(packed.buffer, a * row, (b - a) * row, n * row)
    rows = np.frombuffer(raw, np.uint8).reshape(b - a, row)
    children, col = [], 0
    for child, width in zip(dtype, widths, strict=True):
        part = np.ascontiguousarray(rows[:, col : col + width])
        children.append(pa.Array.from_buffers(child.type, b - a, [None, pa.py_buffer(part)]))
        col += width
    return pa.StructArray.from_buffers(dtype, b - a, [None], children=children)


def _u64_values(
    ctx: PageContext, encoding: enc.ArrayEncoding, n: int, a: int, b: int
) -> np.ndarray:
    arr = decode(ctx, encoding, pa.uint64(), n, a, b)
    if arr.null_count:
        raise UnsupportedFeatureError(f"{ctx.where}: offsets with nulls are not supported")
    if not len(arr):
        return np.zeros(0, np.uint64)
    return np.frombuffer(arr.buffers()[1], dtype=np.uint64, count=len(arr), offset=arr.offset * 8)


def end_offsets(
    ctx: PageContext, encoding: enc.ArrayEncoding, adjustment: int, n: int, a: int, b: int
) -> tuple[int, np.ndarray, np.ndarray | None]:
    """Decode Lance's "end offset + null adjustment" scheme (Binary and List) for rows [a, b).

    Returns the start of row ``a``, the ends of rows ``a..b-1`` (uint64) and a valid-mask
    (None when no row is null). Ends are checked to be non-decreasing and below
    ``adjustment`` (every end is at most the page's total, which is adjustment - 1).
    """
    if adjustment < 1:
        raise ctx.error(f"invalid null adjustment {adjustment}")
    lo = a - 1 if a > 0 else a
    raw = _u64_values(ctx, encoding, n, lo, b)
    adj = np.uint64(adjustment)
    nulls = raw >= adj
    any_null = bool(nulls.any())
    real = raw - adj * nulls if any_null else raw
    if real.size and int(real.max()) >= adjustment:
        raise ctx.error("offsets past the end of the data")
    start = int(real[0]) if a > 0 else 0
    ends = real[1:] if a > 0 else real
    if ends.size and (int(ends[0]) < start or bool(np.any(ends[1:] < ends[:-1]))):
        raise ctx.error("offsets are decreasing")
    valid = None
    if any_null:
        valid = ~(nulls[1:] if a > 0 else nulls)
        if valid.all():
            valid = None
    return start, ends, valid


def _offsets_buffer(ctx: PageContext, start: int, ends: np.ndarray, large: bool) -> pa.Buffer:
    out = np.empty(len(ends) + 1, dtype=np.int64 if large else np.int32)
    out[0] = 0
    if len(ends):
        span = int(ends[-1]) - start
        if not large and span >= 2**31:
            raise ctx.error(f"{span} bytes in one read do not fit 32-bit offsets")
        np.subtract(ends, np.uint64(start), out=out[1:], casting="unsafe")
    return pa.py_buffer(out)


def _packed(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _binary(
    ctx: PageContext, binary: enc.Binary, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    if not is_binary_like(dtype):
        raise ctx.error(f"binary encoding where a {dtype} value was expected")
    start, ends, valid = end_offsets(ctx, binary.indices, binary.null_adjustment, n, a, b)
    total = binary.null_adjustment - 1
    end = int(ends[-1]) if len(ends) else start
    if _kind(binary.bytes) != "flat" or binary.bytes.flat.bits_per_value != 8:
        raise UnsupportedFeatureError(
            f"{ctx.where}: binary bytes encoded as {_kind(binary.bytes)!r}"
        )
    data = ctx.read_flat(binary.bytes.flat, start, end - start, total if n else 0)
    offsets = _offsets_buffer(ctx, start, ends, dtype in _LARGE)
    return pa.Array.from_buffers(dtype, b - a, [_packed(valid), offsets, pa.py_buffer(data)])


def _fsst(ctx: PageContext, encoding: enc.Fsst, dtype: pa.DataType, n: int, a: int, b: int
          ) -> pa.Array:
    """Strings or binaries compressed with FSST: the compressed values (a binary
    array), expanded with the page's symbol table."""
    if not (is_binary_like(dtype) and not pa.types.is_fixed_size_binary(dtype)):
        raise ctx.error(f"fsst encoding where a {dtype} value was expected")
    codes = decode(ctx, encoding.binary, pa.large_binary(), n, a, b)
    table = fsst.parse_symbol_table(encoding.symbol_table, ctx.where)
    offsets = np.frombuffer(codes.buffers()[1], np.int64, len(codes) + 1, codes.offset * 8)
    data = np.frombuffer(codes.buffers()[2], np.uint8) if len(codes) else np.zeros(0, np.uint8)
    values, ends = fsst.decompress(table, data, offsets, ctx.where)
    large = dtype in _LARGE
    if not large and len(ends) and int(ends[-1]) >= 2**31:
        raise ctx.error(f"{int(ends[-1])} bytes overflow 32-bit offsets")
    valid = np.asarray(codes.is_valid()) if codes.null_count else None
    out = pa.Array.from_buffers(dtype, len(codes), [
        _packed(valid), pa.py_buffer(ends.astype(np.int64 if large else np.int32, copy=False)),
        pa.py_buffer(values)])
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        try:
            out.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise ctx.error("invalid UTF-8 in an FSST string page") from exc
    return out


def _fixed_size_binary(
    ctx: PageContext, fsb: enc.FixedSizeBinary, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    if not is_binary_like(dtype):
        raise ctx.error(f"fixed_size_binary encoding where a {dtype} value was expected")
    width = fsb.byte_width
    if width == 0 or width >= 2**31:
        raise ctx.error(f"invalid fixed_size_binary width {width}")
    if _leaf_flat_bits(fsb.bytes) == 8:  # a byte stream of n * width bytes
        raw = decode(ctx, fsb.bytes, pa.uint8(), n * width, a * width, b * width)
        data = raw.buffers()[1].slice(raw.offset, len(raw))
        bits, bit_offset = None, 0
    else:  # n values of width bytes each
        raw = decode(ctx, fsb.bytes, pa.binary(width), n, a, b)
        data = raw.buffers()[1].slice(raw.offset * width, len(raw) * width)
        bits, bit_offset = (raw.buffers()[0], raw.offset) if raw.null_count else (None, 0)
    count = b - a
    large = dtype in _LARGE
    if not large and count * width >= 2**31:
        raise ctx.error("fixed_size_binary span does not fit 32-bit offsets")
    offsets = np.arange(count + 1, dtype=np.int64 if large else np.int32) * width
    out = pa.Array.from_buffers(dtype, count, [None, pa.py_buffer(offsets), data])
    return out if bits is None else _with_validity(out, bits, bit_offset)


# --------------------------------------------------------------------------- dictionaries
def _leaf_flat_bits(encoding: enc.ArrayEncoding) -> int | None:
    while _kind(encoding) == "nullable":
        which = encoding.nullable.WhichOneof("nullability")
        if which == "no_nulls":
            encoding = encoding.nullable.no_nulls.values
        elif which == "some_nulls":
            encoding = encoding.nullable.some_nulls.values
        else:
            return None
    return encoding.flat.bits_per_value if _kind(encoding) == "flat" else None


def _dictionary(
    ctx: PageContext, dictionary: enc.Dictionary, dtype: pa.DataType, n: int, a: int, b: int
) -> pa.Array:
    count = dictionary.num_dictionary_items
    if pa.types.is_dictionary(dtype):
        items = decode(ctx, dictionary.items, dtype.value_type, count, 0, count)
        return _arrow_dictionary(ctx, dictionary, dtype, items, n, a, b)
    if not is_binary_like(dtype):
        raise ctx.error(f"dictionary encoding where a {dtype} value was expected")
    # pylance's utf8 scheme: u8 indices, 0 = null, k = item k - 1
    items = decode(ctx, dictionary.items, dtype, count, 0, count)
    codes = decode(ctx, dictionary.indices, pa.uint8(), n, a, b)
    if codes.null_count:
        raise ctx.error("dictionary indices with nulls in a utf8 dictionary page")
    idx = codes.to_numpy(zero_copy_only=False).astype(np.int64) - 1
    if idx.size and int(idx.max()) >= count:
        raise ctx.error(f"dictionary index {int(idx.max()) + 1} out of range ({count} items)")
    missing = idx < 0
    take = pa.array(idx, mask=missing) if missing.any() else pa.array(idx)
    return items.take(take)


def _arrow_dictionary(
    ctx: PageContext,
    dictionary: enc.Dictionary,
    dtype: pa.DictionaryType,
    items: pa.Array,
    n: int,
    a: int,
    b: int,
) -> pa.Array:
    key_type = dtype.index_type
    bits = _leaf_flat_bits(dictionary.indices)
    stored = key_type
    if bits is not None and bits != key_type.bit_width:
        stored = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}.get(bits)
        if stored is None:
            raise ctx.error(f"dictionary indices of {bits} bits")
    keys = decode(ctx, dictionary.indices, stored, n, a, b)
    values = keys.to_numpy(zero_copy_only=False) if not keys.null_count else None
    if values is None:
        values = keys.fill_null(0).to_numpy(zero_copy_only=False)
    count = len(items)
    if values.size and (int(values.max()) >= count or int(values.min()) < 0):
        raise ctx.error(f"dictionary index out of range ({count} items)")
    valid = (
        np.ones(len(values), bool)
        if keys.null_count == 0
        else keys.is_valid().to_numpy(zero_copy_only=False)
    )
    if items.null_count:
        # pylance stores null keys as a key to a null item; Arrow cannot concatenate
        # dictionaries holding nulls, so drop the null items and null those keys instead
        item_valid = items.is_valid().to_numpy(zero_copy_only=False)
        valid &= item_valid[values]
        values = (np.cumsum(item_valid) - 1)[values]
        values[~valid] = 0
        items = items.filter(pa.array(item_valid))
    if stored != key_type:
        if values.size and int(values.max()) > np.iinfo(key_type.to_pandas_dtype()).max:
            raise ctx.error(f"dictionary index does not fit {key_type}")
    arr = pa.array(values.astype(key_type.to_pandas_dtype(), copy=False), key_type)
    if not valid.all():
        arr = pa.Array.from_buffers(key_type, len(arr), [_packed(valid), arr.buffers()[1]])
    return pa.DictionaryArray.from_arrays(arr, items, ordered=dtype.ordered)


def plain_to_dictionary(arr: pa.Array, dtype: pa.DictionaryType) -> pa.Array:
    """A dictionary column stored without a Dictionary page (not written by pylance)."""
    out = pc.dictionary_encode(arr)
    return pa.DictionaryArray.from_arrays(
        out.indices.cast(dtype.index_type), out.dictionary, ordered=dtype.ordered
    )
