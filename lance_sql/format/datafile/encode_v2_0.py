"""Encode one page of one column as Lance file format 2.0 ``ArrayEncoding`` + buffers.

Choices follow what pylance 14.0.2 writes for 2.0, so files look the same to any reader:

* fixed-width values (bool, ints, floats, decimals, dates, times, timestamps, durations,
  fixed_size_binary) -> ``Nullable(NoNulls | SomeNulls(validity) | AllNulls)`` over ``Flat``;
* fixed_size_list -> ``Nullable(FixedSizeList(dim, items))`` with the items encoded the same way;
* string/binary (+large) -> ``Binary`` (u64 *end* offsets, nulls shifted by ``null_adjustment``);
  utf8 pages of >= 100 rows with fewer than 100 distinct values -> ``Dictionary`` (u8 indices,
  0 = null, k = item k-1, items in first-occurrence order);
* arrow dictionary columns -> ``Dictionary`` (key-width indices, nulls point at a null item).

Buffers are returned as zero-copy views of the Arrow buffers wherever the layout allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import UnsupportedFeatureError
from lance_sql.format.datafile.encode_v2_2 import packed_values
from lance_sql.format.pb import encodings_v2_0_pb2 as enc

DICT_MIN_ROWS = 100  # pylance: no dictionary below this many rows in a page
DICT_MAX_CARDINALITY = 100  # pylance: dictionary only if distinct values < this
_DICT_PROBE_ROWS = 4096  # a prefix with >= 100 distinct values rules the page out cheaply

BufferLike: TypeAlias = pa.Buffer | memoryview | bytes | np.ndarray


@dataclass
class EncodedPage:
    """Buffers in buffer-index order plus the encoding that names them."""

    encoding: enc.ArrayEncoding
    buffers: list[BufferLike] = field(default_factory=list)

    def add(self, buf: BufferLike) -> int:
        self.buffers.append(buf)
        return len(self.buffers) - 1


def storage(arr: pa.Array) -> pa.Array:
    """Extension arrays are stored as their storage array (the schema keeps the extension)."""
    while isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    return arr


def fixed_bit_width(t: pa.DataType) -> int | None:
    """Bits per value of a type Lance stores as Flat, or None."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return t.byte_width * 8
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        and not pa.types.is_interval(t)
    ):
        return t.bit_width
    return None


def is_binary_like(t: pa.DataType) -> bool:
    """True for the (large) string and binary types, which 2.0 stores as offsets and bytes."""
    return (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    )


def check_encodable(t: pa.DataType, name: str) -> None:
    """Raise UnsupportedFeatureError for leaf types 2.0 pages cannot hold."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_null(t) or fixed_bit_width(t) is not None or is_binary_like(t):
        return
    if pa.types.is_fixed_size_list(t):
        check_encodable(t.value_type, name)
        if is_binary_like(t.value_type) or pa.types.is_dictionary(t.value_type):
            raise UnsupportedFeatureError(
                f"column {name!r}: fixed_size_list of {t.value_type} is not supported in "
                f"Lance file format 2.0"
            )
        return
    if pa.types.is_dictionary(t):
        v = t.value_type
        if is_binary_like(v) or fixed_bit_width(v) is not None:
            return
    raise UnsupportedFeatureError(
        f"column {name!r}: type {t} is not supported by Lance file format 2.0 in lance_sql"
    )


# --------------------------------------------------------------------------- bit helpers
def bits_slice(buf: pa.Buffer, offset: int, n: int) -> BufferLike:
    """Bits ``[offset, offset+n)`` of a bitmap as a fresh LSB-first bitmap starting at bit 0."""
    nbytes = (n + 7) // 8
    if offset % 8 == 0:
        return buf.slice(offset // 8, nbytes)
    start = offset // 8
    raw = np.frombuffer(buf, dtype=np.uint8, count=(offset % 8 + n + 7) // 8, offset=start)
    bits = np.unpackbits(raw, bitorder="little")[offset % 8 : offset % 8 + n]
    return np.packbits(bits, bitorder="little")


def validity_mask(arr: pa.Array) -> np.ndarray:
    """Boolean numpy mask, True = valid (arr must have a validity bitmap)."""
    buf = arr.buffers()[0]
    raw = np.frombuffer(buf, dtype=np.uint8, count=(arr.offset + len(arr) + 7) // 8)
    return np.unpackbits(raw, bitorder="little")[arr.offset : arr.offset + len(arr)].view(bool)


def _flat(page: EncodedPage, bits: int, buf: BufferLike) -> enc.ArrayEncoding:
    index = page.add(buf)
    return enc.ArrayEncoding(
        flat=enc.Flat(bits_per_value=bits, buffer=enc.Buffer(buffer_index=index))
    )


def _values_flat(page: EncodedPage, arr: pa.Array, bits: int) -> enc.ArrayEncoding:
    values = arr.buffers()[1]
    if bits == 1:
        return _flat(page, 1, bits_slice(values, arr.offset, len(arr)))
    width = bits // 8
    return _flat(page, bits, values.slice(arr.offset * width, len(arr) * width))


def _nullable(page: EncodedPage, arr: pa.Array, encode_values) -> enc.ArrayEncoding:
    """Wrap ``encode_values(page)`` in the Nullable encoding pylance's BasicEncoder uses."""
    nulls = arr.null_count
    if nulls and nulls == len(arr):
        return enc.ArrayEncoding(nullable=enc.Nullable(all_nulls=enc.Nullable.AllNull()))
    if nulls:
        validity = _flat(page, 1, bits_slice(arr.buffers()[0], arr.offset, len(arr)))
        some = enc.Nullable.SomeNull(validity=validity, values=encode_values(page))
        return enc.ArrayEncoding(nullable=enc.Nullable(some_nulls=some))
    no = enc.Nullable.NoNull(values=encode_values(page))
    return enc.ArrayEncoding(nullable=enc.Nullable(no_nulls=no))


# --------------------------------------------------------------------------- binary
def _binary_ends(arr: pa.Array) -> tuple[np.ndarray, int, int]:
    """u64 end offsets (relative to the first value), first byte, last byte of the data."""
    n = len(arr)
    off_type = (
        np.int64
        if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
        else np.int32
    )
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type, count=arr.offset + n + 1)
    offsets = offsets[arr.offset :]
    ends = offsets[1:].astype(np.uint64)
    ends -= np.uint64(offsets[0])
    return ends, int(offsets[0]), int(offsets[-1])


def encode_binary(page: EncodedPage, arr: pa.Array) -> enc.ArrayEncoding:
    """``Binary``: end offsets (nulls add ``null_adjustment`` = total bytes + 1) and the bytes."""
    ends, first, last = _binary_ends(arr)
    adjustment = last - first + 1
    if arr.null_count:
        ends[~validity_mask(arr)] += np.uint64(adjustment)
    data = arr.buffers()[2]
    data = data.slice(first, last - first) if data is not None else b""
    indices = enc.ArrayEncoding(
        nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=_flat(page, 64, ends)))
    )
    bytes_enc = _flat(page, 8, data)
    binary = enc.Binary(indices=indices, bytes=bytes_enc, null_adjustment=adjustment)
    return enc.ArrayEncoding(binary=binary)


def fixed_width_of(arr: pa.Array) -> int | None:
    """The common length of a binary-like array's values if FixedSizeBinary can store it.

    Every non-null value must have the same, non-zero length; null slots may be empty.
    """
    arr = storage(arr)
    if not is_binary_like(arr.type) or not len(arr) or arr.null_count == len(arr):
        return None
    ends, first, _ = _binary_ends(arr)
    lengths = np.diff(ends, prepend=np.uint64(0))
    valid = validity_mask(arr) if arr.null_count else None
    width = int(lengths[valid][0] if valid is not None else lengths[0])
    if width == 0:
        return None
    ok = (lengths == width) | ((lengths == 0) & ~valid) if valid is not None else lengths == width
    return width if bool(ok.all()) else None


def encode_fixed_size_binary(page: EncodedPage, arr: pa.Array, width: int) -> enc.ArrayEncoding:
    """``FixedSizeBinary``: the values as a byte Flat of ``n * width`` bytes (nulls zero-filled).

    The bytes are described as 8-bit values: pylance's reader scales row ranges by the
    width itself and again by the Flat's value size, so only 8 bits reads back right.
    """
    arr = storage(arr)
    ends, first, last = _binary_ends(arr)
    data = arr.buffers()[2].slice(first, last - first)
    if last - first != len(arr) * width:  # some null slots are empty: spread the values out
        out = np.zeros((len(arr), width), np.uint8)
        out[validity_mask(arr)] = np.frombuffer(data, np.uint8).reshape(-1, width)
        data = out.reshape(-1)
    flat = _flat(page, 8, data)
    inner = enc.ArrayEncoding(nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=flat)))
    return enc.ArrayEncoding(fixed_size_binary=enc.FixedSizeBinary(bytes=inner, byte_width=width))


def wants_dictionary(arr: pa.Array) -> bool:
    """pylance's rule for 2.0 utf8 pages: >= 100 rows and < 100 distinct non-null values."""
    if not pa.types.is_string(arr.type) or len(arr) < DICT_MIN_ROWS:
        return False
    if len(arr) > _DICT_PROBE_ROWS:
        probe = pc.count_distinct(arr.slice(0, _DICT_PROBE_ROWS), mode="only_valid").as_py()
        if probe >= DICT_MAX_CARDINALITY:
            return False
    return pc.count_distinct(arr, mode="only_valid").as_py() < DICT_MAX_CARDINALITY


def encode_string_dictionary(page: EncodedPage, arr: pa.Array) -> enc.ArrayEncoding:
    """pylance's utf8 dictionary: u8 indices with 0 = null, items in first-occurrence order."""
    encoded = pc.dictionary_encode(arr)
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    indices = (codes + 1).astype(np.uint8)
    items = encoded.dictionary
    if len(items) == 0:
        items = pa.nulls(1, pa.string())  # pylance stores one null item for an all-null page
    index_enc = enc.ArrayEncoding(
        nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=_flat(page, 8, indices)))
    )
    items_enc = encode_binary(page, items)
    return enc.ArrayEncoding(
        dictionary=enc.Dictionary(
            indices=index_enc, items=items_enc, num_dictionary_items=len(items)
        )
    )


def encode_arrow_dictionary(page: EncodedPage, arr: pa.DictionaryArray) -> enc.ArrayEncoding:
    """An arrow dictionary column: indices keep the key width; null keys point at a null item."""
    indices, items = arr.indices, arr.dictionary
    if indices.null_count:
        null_pos = None
        if items.null_count:
            null_pos = int(np.flatnonzero(~validity_mask(items))[0])
        if null_pos is None:
            items = pa.concat_arrays([items, pa.nulls(1, items.type)])
            null_pos = len(items) - 1
        key_type = indices.type
        if null_pos > np.iinfo(key_type.to_pandas_dtype()).max:
            key_type = pa.uint32()  # widen like pylance; the reader casts back
        indices = indices.cast(key_type).fill_null(pa.scalar(null_pos, key_type))
    bits = indices.type.bit_width
    index_enc = _nullable(page, indices, lambda p: _values_flat(p, indices, bits))
    items_enc = encode_array(page, items)
    return enc.ArrayEncoding(
        dictionary=enc.Dictionary(
            indices=index_enc, items=items_enc, num_dictionary_items=len(items)
        )
    )


# --------------------------------------------------------------------------- entry point
def encode_array(
    page: EncodedPage, arr: pa.Array, *, allow_dict: bool = False
) -> enc.ArrayEncoding:
    """Encode a whole leaf array into ``page`` (appending buffers) and return its encoding."""
    arr = storage(arr)
    t = arr.type
    if pa.types.is_null(t):
        return enc.ArrayEncoding(nullable=enc.Nullable(all_nulls=enc.Nullable.AllNull()))
    bits = fixed_bit_width(t)
    if bits is not None:
        return _nullable(page, arr, lambda p: _values_flat(p, arr, bits))
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        child = arr.values.slice(arr.offset * dim, len(arr) * dim)

        def fsl(p: EncodedPage) -> enc.ArrayEncoding:
            items = encode_array(p, child)
            return enc.ArrayEncoding(fixed_size_list=enc.FixedSizeList(dimension=dim, items=items))

        return _nullable(page, arr, fsl)
    if is_binary_like(t):
        if allow_dict and wants_dictionary(arr):
            return encode_string_dictionary(page, arr)
        return encode_binary(page, arr)
    if pa.types.is_dictionary(t):
        return encode_arrow_dictionary(page, arr)
    if pa.types.is_struct(t):  # (a packed struct: other structs are columns of their own)
        return encode_packed_struct(page, arr)
    raise UnsupportedFeatureError(f"type {t} cannot be stored in a Lance 2.0 page")


def encode_packed_struct(page: EncodedPage, arr: pa.StructArray) -> enc.ArrayEncoding:
    """A packed struct's rows in one buffer, each child's bytes side by side, as pylance's
    2.0 writer packs them (``inner`` describes the children; it names no buffer)."""
    if arr.null_count:
        raise UnsupportedFeatureError(
            f"packed struct {arr.type} has NULL rows, which Lance file format 2.0 cannot "
            f"store (use format 2.2)")
    from_rows = packed_values(arr)
    inner = [enc.ArrayEncoding(nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(
        values=enc.ArrayEncoding(flat=enc.Flat(bits_per_value=bits, buffer=enc.Buffer())))))
        for bits in from_rows.packed]
    index = page.add(from_rows.data)
    return enc.ArrayEncoding(packed_struct=enc.PackedStruct(
        inner=inner, buffer=enc.Buffer(buffer_index=index)))


def encode_leaf_page(arr: pa.Array, *, fixed_size_binary: bool = False) -> EncodedPage:
    """One page of a leaf column (dictionary encoding allowed, as pylance does per page)."""
    page = EncodedPage(enc.ArrayEncoding())
    width = fixed_width_of(arr) if fixed_size_binary else None
    if width is not None:
        page.encoding = _nullable(page, arr, lambda p: encode_fixed_size_binary(p, arr, width))
    else:
        page.encoding = encode_array(page, arr, allow_dict=True)
    return page


def encode_list_page(offsets: np.ndarray, validity: np.ndarray | None) -> tuple[EncodedPage, int]:
    """A ``List`` page from Arrow offsets (n+1, any int) and an optional valid-mask.

    Stores n u64 *end* offsets relative to ``offsets[0]``; a null list stores its end plus
    ``null_offset_adjustment`` (= items in the page + 1). Returns the page and its item count.
    """
    ends = offsets[1:].astype(np.uint64)
    ends -= np.uint64(offsets[0])
    num_items = int(offsets[-1] - offsets[0])
    adjustment = num_items + 1
    if validity is not None:
        ends[~validity] += np.uint64(adjustment)
    page = EncodedPage(enc.ArrayEncoding())
    flat = _flat(page, 64, ends)
    page.encoding = enc.ArrayEncoding(
        list=enc.List(
            offsets=enc.ArrayEncoding(
                nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=flat))
            ),
            null_offset_adjustment=adjustment,
            num_items=num_items,
        )
    )
    return page, num_items


def struct_page_encoding() -> enc.ArrayEncoding:
    """The array encoding of a struct column's (bufferless) page."""
    return enc.ArrayEncoding(struct=enc.SimpleStruct())
