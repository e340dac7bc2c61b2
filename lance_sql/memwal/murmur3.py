"""Murmur3 (x86, 32-bit, seed 0) over whole Arrow arrays, and the bytes values are hashed as.

Region specs route rows with ``bucket`` and ``multi_bucket`` transforms, so every row a
writer accepts is hashed: this module hashes a whole column per call with numpy (no
per-value Python). A value's hash input follows Iceberg's bucket transform, which is what
makes equal values of different widths land in the same bucket (int32(5) and int64(5)):

==========================  ==============================================================
Arrow type                  bytes hashed
==========================  ==============================================================
int8..int64, uint8..uint64  the value as an 8-byte little-endian integer (two's complement)
bool                        like the integers 0 and 1
date32 / date64             days since the epoch, as above (date64 is truncated to days)
time32 / time64             microseconds since midnight, as above
timestamp (any unit / zone) microseconds since the epoch (UTC), as above
float16 / float32 / float64 the value widened to float64, its 8 IEEE bytes little-endian;
                            -0.0 hashes as 0.0 and every NaN as the canonical NaN
decimal128 / decimal256     the unscaled value, big-endian two's complement, in the fewest
                            bytes that keep its sign (Iceberg's ``decimal`` bytes)
string / binary (any size)  the UTF-8 / raw bytes
fixed_size_binary           the raw bytes
==========================  ==============================================================

Iceberg defines no bucket for floats or booleans; the rows above extend it in the same
spirit (a value's bytes do not depend on its storage width). Nulls have no bytes: their
hash is null.
"""

from __future__ import annotations

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.memwal.byte_rows import padded_rows, ranges
from lance_sql.numpy_arrow import array_from_numpy, numpy_of, scalar, true_mask

__all__ = ["bucket", "bucket_numbers_of", "hash_input", "murmur3_32", "murmur3_32_concat",
           "scalar_hash"]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_N = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _scramble(k: np.ndarray) -> np.ndarray:
    k = k * _C1
    return _rotl(k, 15) * _C2


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * _F1
    h = h ^ (h >> np.uint32(13))
    h = h * _F2
    return h ^ (h >> np.uint32(16))


def _hash_words(words: np.ndarray) -> np.ndarray:
    """Hashes of values that are whole 4-byte words: ``words`` is ``(n, k)`` uint32."""
    n, k = words.shape
    h = np.zeros(n, np.uint32)
    for j in range(k):
        h ^= _scramble(words[:, j])
        h = _rotl(h, 13) * np.uint32(5) + _N
    return _fmix(h ^ np.uint32(4 * k))


_LONG_VALUE = 256  # bytes; longer values are hashed one by one (their bytes dominate)


def _hash_binary(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hashes of variable-length values: value ``i`` is ``data[offsets[i]:offsets[i+1]]``.

    Values up to ``_LONG_VALUE`` bytes are laid out as rows of a zero-padded word matrix,
    so block ``j`` of every value is one column and the zero padding is exactly murmur3's
    tail word; rows are grouped by length so padding stays bounded. Longer values are
    rare and costly per byte, not per value: mmh3 hashes them one at a time.
    """
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    n = lengths.size
    out = np.empty(n, np.uint32)
    long_rows = np.flatnonzero(lengths > _LONG_VALUE)
    for row in long_rows.tolist():
        start = int(starts[row])
        out[row] = mmh3.hash(data[start : start + int(lengths[row])].tobytes(), 0,
                             signed=False)
    if long_rows.size == 0:
        short = None
    else:
        short = np.flatnonzero(lengths <= _LONG_VALUE)
    if short is None:
        _hash_groups(starts, lengths, data, out, None)
    elif short.size:
        _hash_groups(starts[short], lengths[short], data, out, short)
    return out


def _hash_groups(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray, out: np.ndarray,
                 rows: np.ndarray | None) -> None:
    """Hash short values into ``out[rows]``, in groups of similar block counts."""
    blocks = lengths // 4
    widest = int(blocks.max(initial=0))
    if widest <= 4 or widest <= 2 * int(blocks.min(initial=0)) + 1:
        hashed = _hash_dense(starts, lengths, data)
        if rows is None:
            out[:] = hashed
        else:
            out[rows] = hashed
        return
    for lo, hi in ((0, 4), (5, 16), (17, _LONG_VALUE // 4)):
        group = np.flatnonzero((blocks >= lo) & (blocks <= hi))
        if group.size:
            hashed = _hash_dense(starts[group], lengths[group], data)
            out[group if rows is None else rows[group]] = hashed


def _hash_dense(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hashes of values ``data[starts[i]:starts[i]+lengths[i]]`` via a padded word matrix."""
    n = lengths.size
    blocks = lengths // 4
    width = int(blocks.max(initial=0)) + 1
    dense = padded_rows(starts, lengths, data, 4)
    words = dense.view("<u4").reshape(n, width)
    h = np.zeros(n, np.uint32)
    for j in range(width - 1):
        mixed = h ^ _scramble(words[:, j])
        mixed = _rotl(mixed, 13) * np.uint32(5) + _N
        h = mixed if j < int(blocks.min(initial=0)) else np.where(blocks > j, mixed, h)
    tail = words[np.arange(n), blocks]
    h = np.where(lengths % 4 > 0, h ^ _scramble(tail), h)
    return _fmix(h ^ lengths.astype(np.uint32))


def _as_int64(values: pa.Array) -> np.ndarray:
    """Non-null slots of an integer-like array as int64 (nulls become 0; masked later)."""
    if values.null_count:
        zero = scalar(0, values.type) if pa.types.is_integer(values.type) else 0
        values = pc.fill_null(values, zero)
    return np.asarray(numpy_of(values)).astype(np.int64)


def _timestamp_micros(values: pa.Array) -> np.ndarray:
    unit = values.type.unit
    raw = _as_int64(values.cast(pa.int64()))
    factor = _MICROS[unit]
    if factor is None:  # nanoseconds: floor to microseconds, as Iceberg does
        return np.floor_divide(raw, 1000)
    return raw * factor


def _time_micros(values: pa.Array) -> np.ndarray:
    unit = values.type.unit
    storage = pa.int32() if pa.types.is_time32(values.type) else pa.int64()
    raw = _as_int64(values.cast(storage))
    factor = _MICROS[unit]
    return np.floor_divide(raw, 1000) if factor is None else raw * factor


def _long_words(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values.astype("<i8")).view("<u4").reshape(-1, 2)


def _decimal_bytes(values: pa.Array) -> pa.Array:
    """Unscaled decimal values as minimal big-endian two's-complement bytes."""
    width = values.type.byte_width
    storage = values.cast(values.type)  # a plain copy when sliced: buffers start at offset 0
    buf = storage.buffers()[1]
    raw = np.frombuffer(buf, np.uint8, count=width * (len(storage) + storage.offset))
    le = raw.reshape(-1, width)[storage.offset:]
    be = le[:, ::-1]
    negative = be[:, 0] >= 0x80
    fill = np.where(negative, 0xFF, 0x00).astype(np.uint8)
    redundant = be == fill[:, None]
    # A leading fill byte can go when the byte after it still carries the sign.
    sign_next = (be[:, 1:] >= 0x80) == negative[:, None]
    droppable = redundant[:, :-1] & sign_next
    drop = np.argmin(np.concatenate([droppable, np.zeros((len(be), 1), bool)], axis=1),
                     axis=1)
    lengths = width - drop
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    take = (np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)
            + np.repeat(drop, lengths))
    rows = np.repeat(np.arange(len(be)), lengths)
    data = np.ascontiguousarray(be)[rows, take] if len(rows) else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(pa.large_binary(), len(be),
                                 [storage.buffers()[0] if storage.offset == 0 else None,
                                  pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=-1 if storage.offset == 0 else 0)


def _float_words(values: pa.Array) -> np.ndarray:
    as_double = np.asarray(numpy_of(pc.fill_null(values.cast(pa.float64()), scalar(0.0))),
                           np.float64)
    as_double = np.where(as_double == 0.0, 0.0, as_double)  # -0.0 -> 0.0
    as_double = np.where(np.isnan(as_double), np.nan, as_double)  # one NaN
    return np.ascontiguousarray(as_double.astype("<f8")).view("<u4").reshape(-1, 2)


def hash_input(values: pa.Array) -> pa.Array:
    """The bytes each value is hashed as (see the module table), as a large_binary array."""
    words = _fixed_words(values)
    if words is not None:
        data = np.ascontiguousarray(words).view(np.uint8).reshape(-1)
        offsets = np.arange(0, 8 * (len(values) + 1), 8, dtype=np.int64)
        out = pa.Array.from_buffers(pa.large_binary(), len(values),
                                    [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pc.if_else(pc.is_null(values), scalar(None, pa.large_binary()), out)
    return _variable_bytes(values)


def _fixed_words(values: pa.Array) -> np.ndarray | None:
    """``(n, 2)`` uint32 words of values hashed as 8 bytes, or None for byte strings."""
    t = values.type
    if pa.types.is_integer(t):
        return _long_words(_as_int64(values))
    if pa.types.is_boolean(t):
        return _long_words(_as_int64(values.cast(pa.int8())))
    if pa.types.is_date32(t):
        return _long_words(_as_int64(values.cast(pa.int32())))
    if pa.types.is_date64(t):
        return _long_words(np.floor_divide(_as_int64(values.cast(pa.int64())), 86_400_000))
    if pa.types.is_timestamp(t):
        return _long_words(_timestamp_micros(values))
    if pa.types.is_time(t):
        return _long_words(_time_micros(values))
    if pa.types.is_floating(t):
        return _float_words(values)
    return None


def _variable_bytes(values: pa.Array) -> pa.Array:
    t = values.type
    if pa.types.is_decimal(t):
        return _decimal_bytes(values)
    if pa.types.is_dictionary(t):
        return hash_input(values.dictionary_decode())
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        return values.cast(pa.large_binary())
    raise InvalidInputError(f"values of type {t} cannot be hashed into buckets")


def murmur3_32(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Murmur3 x86 32-bit hashes (seed 0) of ``values``' hash inputs, as int32; null stays null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    if pa.types.is_null(values.type):
        return pa.nulls(n, pa.int32())
    words = _fixed_words(values)
    if words is not None:
        hashes = _hash_words(words) if n else np.zeros(0, np.uint32)
    else:
        binary = _variable_bytes(values)
        binary = binary.cast(binary.type)  # offsets start at 0 for slices too
        offsets = np.frombuffer(binary.buffers()[1], np.int64, count=n + 1 + binary.offset)
        offsets = offsets[binary.offset:]
        data_buf = binary.buffers()[2]
        data = (np.frombuffer(data_buf, np.uint8) if data_buf is not None
                else np.zeros(0, np.uint8))
        hashes = _hash_binary(offsets, data) if n else np.zeros(0, np.uint32)
    out = array_from_numpy(hashes.view(np.int32))
    if values.null_count:
        out = pc.if_else(pc.is_valid(values), out, scalar(None, pa.int32()))
    return out


_MASK64 = (1 << 64) - 1


def scalar_hash(value: object, t: pa.DataType) -> int | None:
    """:func:`murmur3_32` of one non-null Python ``value`` of Arrow type ``t`` (signed),
    for integers, strings and binaries; None for other types. Routing a single key this
    way skips building Arrow arrays; tests hold it equal to the vectorised hash."""
    if pa.types.is_integer(t) and isinstance(value, int):
        data = (value & _MASK64).to_bytes(8, "little")
    elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and isinstance(value, str):
        data = value.encode("utf-8")
    elif (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and isinstance(value, bytes):
        data = value
    else:
        return None
    return int(mmh3.hash(data, 0, signed=True))


def _binary_parts(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, data) of a large_binary array, slices included."""
    values = values.cast(values.type)
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int64, count=n + 1 + values.offset)
    offsets = offsets[values.offset:]
    data_buf = values.buffers()[2]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


def murmur3_32_concat(columns: list[pa.Array]) -> pa.Array:
    """Hash of each row's non-null values' bytes, concatenated in column order.

    Null values add no bytes; a row whose values are all null hashes to null. With one
    column this is :func:`murmur3_32`.
    """
    n = len(columns[0])
    lengths, parts = [], []
    for column in columns:
        offsets, data = _binary_parts(hash_input(_combined(column)))
        valid = true_mask(pc.is_valid(column))
        length = np.where(valid, offsets[1:] - offsets[:-1], 0).astype(np.int64)
        lengths.append(length)
        parts.append((offsets[:-1].astype(np.int64), data, valid))
    total = np.sum(lengths, axis=0) if lengths else np.zeros(n, np.int64)
    out_offsets = np.concatenate([[0], np.cumsum(total)]).astype(np.int64)
    out = np.empty(int(out_offsets[-1]), np.uint8)
    written = out_offsets[:-1].copy()
    for (starts, data, _), length in zip(parts, lengths, strict=True):
        out[ranges(written, length)] = data[ranges(starts, length)]
        written += length
    hashes = _hash_binary(out_offsets, out) if n else np.zeros(0, np.uint32)
    any_valid = np.logical_or.reduce([valid for _, _, valid in parts])
    return array_from_numpy(hashes.view(np.int32), mask=~any_valid)


def _combined(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def bucket_numbers_of(values: pa.Array, num_buckets: int) -> np.ndarray:
    """``bucket(murmur3_32(values), num_buckets)`` of integers without nulls, as int64
    numbers, in numpy alone (tests hold it equal to the Arrow steps)."""
    words = _long_words(_as_int64(values))
    hashes = _hash_words(words) if len(values) else np.zeros(0, np.uint32)
    return _bucket_numbers(hashes.view(np.int32), num_buckets)


def bucket(hashes: pa.Array, num_buckets: int) -> pa.Array:
    """``abs(hash) % num_buckets`` as int32, computed in 64 bits (no overflow at INT_MIN)."""
    wide = _bucket_numbers(_as_int64(hashes), num_buckets)
    return array_from_numpy(wide.astype(np.int32), mask=true_mask(pc.is_null(hashes)))


def _bucket_numbers(hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """``abs(hash) % num_buckets`` of signed 32-bit hashes, as int64."""
    if not 0 < num_buckets < 2**31:
        raise InvalidInputError(f"num_buckets must be in [1, 2^31 - 1], got {num_buckets}")
    return np.abs(hashes.astype(np.int64, copy=False)) % num_buckets
