"""The primary-key bloom filter of a generation (``bloom_filter.bin``), vectorised.

Readers ask "may this generation hold key k?" before opening it (point lookups) and to
drop stale search candidates, so the filter must never answer "no" for a key it holds.

Layout, the same bytes the reference writes (checked bit for bit against pylance 14.0.2):
a split-block bloom filter as Parquet defines it — 1024 blocks of eight little-endian
32-bit words, 32 KiB, no header. A key's 64-bit hash ``h`` picks block
``((h >> 32) * blocks) >> 32`` and sets one bit in each of its words: bit
``((h & 0xFFFFFFFF) * SALT[i] mod 2^32) >> 27`` of word ``i``.

The hash is SipHash-1-3 with a zero key over the key's bytes: for each primary-key column
in key order a null marker byte (0 = a value follows, 1 = null) and then the value —
integers as little-endian bytes of their own width, booleans as one byte, floats as the
little-endian bytes of their IEEE value, decimals as the little-endian bytes of their
unscaled value (16 or 32 of them), fixed-size binaries as their bytes, strings and
binaries as their bytes followed by 0xFF (the reference hashes int32, int64, strings and
composite keys this way; the other encodings are ours, chosen in the same spirit).

Key identity follows these bytes: two keys are the same key when their bytes are
(:func:`identity_keys`). For floats that is their IEEE bits: every NaN of one bit
pattern is one key, and -0.0 is another key than 0.0. The spec defines no other equality
of keys, and it is the one merge_insert matches keys by (pylance 14.0.2's and ours), so
the merged base holds what every read shows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.memwal.byte_rows import padded_rows, ranges

__all__ = ["BLOOM_BYTES", "PrimaryKeyBloom", "hashable_key_type", "identity_keys", "key_hash_one",
           "key_hashes"]

BLOCKS = 1024
BLOOM_BYTES = BLOCKS * 32
_SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B,
                  0x9EFC4947, 0x5C6BFB31], np.uint32)
_SALT_INTS = tuple(int(v) for v in _SALT)
_U64 = np.uint64
_INIT = (_U64(0x736F6D6570736575), _U64(0x646F72616E646F6D), _U64(0x6C7967656E657261),
         _U64(0x7465646279746573))


def _rotl(x: np.ndarray, b: int) -> np.ndarray:
    return (x << _U64(b)) | (x >> _U64(64 - b))


def _sip_round(v0: np.ndarray, v1: np.ndarray, v2: np.ndarray, v3: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    v0 = v0 + v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = v2 + v3
    v3 = _rotl(v3, 16) ^ v2
    v0 = v0 + v3
    v3 = _rotl(v3, 21) ^ v0
    v2 = v2 + v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def _siphash13(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """SipHash-1-3, key 0, of every message ``data[offsets[i]:offsets[i+1]]``.

    Messages are hashed in groups whose longest is at most twice the shortest (in words),
    so one long key never makes every short one pay for its padding.
    """
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    starts = offsets[:-1].astype(np.int64)
    words = lengths // 8 + 1
    order = np.argsort(words, kind="stable")
    sorted_words = words[order]
    out = np.empty(lengths.size, np.uint64)
    cut = 0
    while cut < lengths.size:
        stop = int(np.searchsorted(sorted_words, 2 * int(sorted_words[cut]), side="right"))
        rows = order[cut:stop]
        out[rows] = _siphash13_dense(starts[rows], lengths[rows], data)
        cut = stop
    return out


def _siphash13_dense(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray
                     ) -> np.ndarray:
    """SipHash-1-3 of messages laid out as zero-padded rows of 64-bit words: word ``j``
    of every message is one column, one numpy step per word position."""
    n = lengths.size
    words_full = lengths // 8
    width = int(words_full.max(initial=0)) + 1
    dense = padded_rows(starts, lengths, data, 8)
    words = dense.view("<u8").reshape(n, width)
    v0, v1, v2, v3 = (np.full(n, v, np.uint64) for v in _INIT)
    with np.errstate(over="ignore"):
        for j in range(width - 1):
            live = words_full > j
            m = words[:, j]
            r0, r1, r2, r3 = _sip_round(v0, v1, v2, v3 ^ m)
            r0 = r0 ^ m
            v0, v1, v2, v3 = (np.where(live, r, v) for r, v in
                              ((r0, v0), (r1, v1), (r2, v2), (r3, v3)))
        last = words[np.arange(n), words_full] | (
            (lengths & 0xFF).astype(np.uint64) << _U64(56))
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3 ^ last)
        v0 = v0 ^ last
        v2 = v2 ^ _U64(0xFF)
        for _ in range(3):
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def _column_bytes(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, bytes) each value contributes: the null marker, then the value."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = column.type
    n = len(column)
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), bool)
    if pa.types.is_dictionary(t):
        return _column_bytes(column.dictionary_decode())
    if pa.types.is_boolean(t):
        column, t = column.cast(pa.uint8()), pa.uint8()
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t)):
        width = t.bit_width // 8
        raw = column.cast(t)  # buffers start at the slice's first value
        values = np.frombuffer(raw.buffers()[1], np.uint8,
                               count=width * (n + raw.offset))[width * raw.offset:]
        values = values.reshape(n, width)
        body = np.zeros((n, width + 1), np.uint8)
        body[:, 1:] = values
        body[~valid] = 0
        body[~valid, 0] = 1
        lengths = np.where(valid, width + 1, 1).astype(np.int64)
        keep = np.arange(width + 1)[None, :] < lengths[:, None]
        return lengths, body[keep]
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        big = column.cast(pa.large_binary())
        big = big.cast(big.type)
        offsets = np.frombuffer(big.buffers()[1], np.int64, count=n + 1 + big.offset)
        offsets = offsets[big.offset:]
        data_buf = big.buffers()[2]
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(
            0, np.uint8)
        sizes = np.where(valid, offsets[1:] - offsets[:-1], 0).astype(np.int64)
        lengths = np.where(valid, sizes + 2, 1).astype(np.int64)
        out = np.empty(int(lengths.sum()), np.uint8)
        starts = np.cumsum(lengths) - lengths
        out[starts] = np.where(valid, 0, 1).astype(np.uint8)
        value_at = ranges(starts + 1, sizes)
        out[value_at] = data[ranges(offsets[:-1].astype(np.int64), sizes)]
        out[(starts + 1 + sizes)[valid]] = 0xFF
        return lengths, out
    raise InvalidInputError(f"primary-key column of type {t} cannot go in a bloom filter")


_FLOAT_BITS = {16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}


def identity_keys(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column as keys are told apart (compare, sort and group these, never the
    floats): a float column as its IEEE bits, an unsigned integer of its width (see the
    module docstring; SQL's ``=`` has NaN unequal to itself and -0.0 equal to 0.0, which
    would make a NaN key never found and two keys one); others as they are."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_floating(column.type):
        return column.view(_FLOAT_BITS[column.type.bit_width])
    return column


def hashable_key_type(t: pa.DataType) -> bool:
    """Whether a primary-key column of Arrow type ``t`` can be hashed into the filter
    (a writer checks before it claims a region, rather than fail after a put)."""
    try:
        _column_bytes(pa.nulls(0, t))  # (pa.array([], t) would import pandas)
    except (InvalidInputError, pa.ArrowException):
        return False
    return True


def _fixed_width_bits(column: pa.Array) -> tuple[np.ndarray, int] | None:
    """A fixed-width column's values as zero-extended little-endian bits (uint64) and
    their width in bytes; None for other types."""
    t = column.type
    if pa.types.is_boolean(t):
        column, t = column.cast(pa.uint8()), pa.uint8()
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)):
        return None
    width = t.bit_width // 8
    if width not in (1, 2, 4, 8):
        return None
    n = len(column)
    data = column.buffers()[1]
    values = np.frombuffer(data, f"<u{width}", count=n + column.offset)[column.offset:]
    return values.astype(np.uint64), width


def _siphash13_words(full: np.ndarray | None, last: np.ndarray) -> np.ndarray:
    """SipHash-1-3 (key 0) of messages of at most one full 64-bit word (``full``) and the
    tail word ``last`` (with the length in its top byte), vectorised."""
    v0, v1, v2, v3 = (np.full(len(last), v, np.uint64) for v in _INIT)
    with np.errstate(over="ignore"):
        if full is not None:
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3 ^ full)
            v0 ^= full
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3 ^ last)
        v0 ^= last
        v2 ^= _U64(0xFF)
        for _ in range(3):
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def _fixed_width_hashes(column: pa.Array) -> np.ndarray | None:
    """:func:`key_hashes` of a one-column key of a fixed width up to 8 bytes, straight
    from its values: a message is the marker byte and the value (at most 9 bytes, so at
    most one full word), no byte layout needed. None for other columns."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    found = _fixed_width_bits(column)
    if found is None:
        return None
    values, width = found
    length = _U64(width + 1) << _U64(56)
    if width == 8:  # marker 0 and the low 7 bytes, then the top byte in the tail
        hashes = _siphash13_words(values << _U64(8), (values >> _U64(56)) | length)
    else:
        hashes = _siphash13_words(None, (values << _U64(8)) | length)
    if column.null_count:
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
        null_message = np.array([1 | (1 << 56)], np.uint64)  # marker 1, length 1
        hashes[~valid] = _siphash13_words(None, null_message)[0]
    return hashes


def key_hashes(columns: Sequence[pa.Array]) -> np.ndarray:
    """The 64-bit hash of every row's primary key (columns in key order)."""
    if not columns:
        raise InvalidInputError("a primary key needs at least one column")
    if len(columns) == 1 and (fast := _fixed_width_hashes(columns[0])) is not None:
        return fast
    return _key_hashes_of_bytes(columns)


def _key_hashes_of_bytes(columns: Sequence[pa.Array]) -> np.ndarray:
    """:func:`key_hashes` for any key: each row's message laid out as bytes, hashed."""
    n = len(columns[0])
    parts = [_column_bytes(c) for c in columns]
    lengths = np.sum([p[0] for p in parts], axis=0).astype(np.int64) if n else np.zeros(
        0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.empty(int(offsets[-1]), np.uint8)
    written = offsets[:-1].copy()
    for column_lengths, column_bytes in parts:
        source_starts = np.cumsum(column_lengths) - column_lengths
        data[ranges(written, column_lengths)] = column_bytes[
            ranges(source_starts, column_lengths)]
        written += column_lengths
    return _siphash13(offsets, data) if n else np.zeros(0, np.uint64)


_M64 = (1 << 64) - 1
_INIT_INTS = tuple(int(v) for v in _INIT)


def _siphash13_one(message: bytes) -> int:
    """SipHash-1-3 (key 0) of one message, in Python ints: :func:`_siphash13` for a
    single key without numpy's per-call overhead."""
    n = len(message)
    full = n - n % 8
    words = [int.from_bytes(message[j: j + 8], "little") for j in range(0, full, 8)]
    words.append(int.from_bytes(message[full:], "little") | ((n & 0xFF) << 56))
    return _siphash13_of_words(words)


def _siphash13_of_words(words: list[int]) -> int:
    """:func:`_siphash13_one` of the message whose 64-bit little-endian words (the last
    one holding the message's length in its top byte) are ``words``. One loop runs the
    compression round of each word and then the three finalization rounds (the same
    round, by a word of 0), written out: a call and a tuple per round cost about as much
    as the round itself. Each rotation left by b is ``((x << b) | (x >> (64 - b))) & m``."""
    m = _M64
    v0, v1, v2, v3 = _INIT_INTS
    last = len(words) - 1
    for i, word in enumerate([*words, 0, 0, 0]):
        v3 ^= word
        v0 = (v0 + v1) & m
        v1 = (((v1 << 13) | (v1 >> 51)) & m) ^ v0
        v0 = ((v0 << 32) | (v0 >> 32)) & m
        v2 = (v2 + v3) & m
        v3 = (((v3 << 16) | (v3 >> 48)) & m) ^ v2
        v0 = (v0 + v3) & m
        v3 = (((v3 << 21) | (v3 >> 43)) & m) ^ v0
        v2 = (v2 + v1) & m
        v1 = (((v1 << 17) | (v1 >> 47)) & m) ^ v2
        v2 = ((v2 << 32) | (v2 >> 32)) & m
        v0 ^= word
        if i == last:  # the message is in: finalization follows
            v2 ^= 0xFF
    return v0 ^ v1 ^ v2 ^ v3


def key_hash_one(values: Sequence[object], types: Sequence[pa.DataType]) -> int | None:
    """:func:`key_hashes` of one key given as Python values (non-null integers, strings
    or binaries, of Arrow ``types``), or None for other keys (hash them with
    :func:`key_hashes`). A single-key lookup meets several bloom filters; this hashes
    its key without building arrays."""
    one = values[0] if len(values) == 1 else None
    if type(one) is int and pa.types.is_integer(types[0]):
        # one integer: the message (a 0 byte, the value's bytes) as words, no bytes made
        width = types[0].bit_width // 8
        if not -(1 << (8 * width)) < one < (1 << (8 * width)):
            return None
        u = one & ((1 << (8 * width)) - 1)
        if width == 8:  # nine bytes: one full word, then the last byte and the length
            return _siphash13_of_words([(u << 8) & _M64, (u >> 56) | (9 << 56)])
        return _siphash13_of_words([(u << 8) | ((width + 1) << 56)])
    parts = []
    for value, t in zip(values, types, strict=True):
        if pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool):
            width = t.bit_width // 8
            if not -(1 << (8 * width)) < value < (1 << (8 * width)):
                return None
            parts.append(b"\x00" + (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little"))
        elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and isinstance(value, str):
            parts.append(b"\x00" + value.encode("utf-8") + b"\xff")
        elif (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and isinstance(
                value, bytes):
            parts.append(b"\x00" + value + b"\xff")
        else:
            return None
    return _siphash13_one(b"".join(parts)) if parts else None


class PrimaryKeyBloom:
    """A split-block bloom filter over primary keys (never a false "no")."""

    def __init__(self, words: np.ndarray | None = None) -> None:
        self.words = (np.zeros((BLOCKS, 8), np.uint32) if words is None
                      else words.reshape(BLOCKS, 8).astype(np.uint32, copy=True))

    @property
    def nbytes(self) -> int:
        """Memory the filter holds."""
        return int(self.words.nbytes)

    @staticmethod
    def _bits(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each key's block and the bit (0-31) it sets in each of the block's 8 words."""
        block = (((hashes >> _U64(32)) * _U64(BLOCKS)) >> _U64(32)).astype(np.int64)
        key = (hashes & _U64(0xFFFFFFFF)).astype(np.uint32)
        with np.errstate(over="ignore"):
            bits = (key[:, None] * _SALT[None, :]) >> np.uint32(27)
        return block, bits.astype(np.int64)

    def add(self, columns: Sequence[pa.Array]) -> None:
        """Insert every row's key."""
        self.add_hashes(key_hashes(columns))

    def add_hashes(self, hashes: np.ndarray) -> None:
        """Insert keys by their :func:`key_hashes` (computed once, shared with an index)."""
        if not hashes.size:
            return
        block, bits = self._bits(hashes)
        # Setting bits in a flat boolean map is idempotent, so keys sharing a block need no
        # read-modify-write; the map is packed back into words LSB first.
        flat = np.zeros(BLOCKS * 8 * 32, bool)
        flat[(block[:, None] * 8 + np.arange(8)[None, :]) * 32 + bits] = True
        packed = np.packbits(flat, bitorder="little").view("<u4").reshape(BLOCKS, 8)
        self.words |= packed

    def might_contain(self, columns: Sequence[pa.Array]) -> np.ndarray:
        """For each row's key: False means the key is certainly absent."""
        return self.might_contain_hashes(key_hashes(columns))

    def might_contain_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """:meth:`might_contain` for keys given by their :func:`key_hashes` (hashed once,
        checked against many filters)."""
        block, bits = self._bits(hashes)
        masks = np.left_shift(np.uint32(1), bits.astype(np.uint32))
        return np.all((self.words[block] & masks) == masks, axis=1)

    def might_contain_hash(self, h: int) -> bool:
        """:meth:`might_contain_hashes` of one key's hash, in Python ints."""
        block = ((h >> 32) * BLOCKS) >> 32
        key = h & 0xFFFFFFFF
        words = self.words[block].tolist()
        for word, salt in zip(words, _SALT_INTS, strict=True):
            if not (word >> (((key * salt) & 0xFFFFFFFF) >> 27)) & 1:
                return False
        return True

    def to_bytes(self) -> bytes:
        return self.words.astype("<u4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> PrimaryKeyBloom:
        if len(data) != BLOOM_BYTES:
            raise FormatError(f"{path}: a primary-key bloom filter is {BLOOM_BYTES} bytes, "
                              f"this one has {len(data)}")
        return cls(np.frombuffer(data, "<u4"))
