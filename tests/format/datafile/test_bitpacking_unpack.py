"""The two FastLanes unpackers agree with each other and with ``pack``, on every width.

``bitpacking.unpack`` unpacks blocks of one width; ``bitpacking.unpack_blocks`` unpacks
blocks of any mix of widths at once (small reads). ``compressive._inline_unpack`` picks
one or both for inline-bitpacked chunks; the tests here force each choice.
"""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import compressive
from lance_sql.format.datafile.compressive import ChunkBuffers
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

BITS = (8, 16, 32, 64)


def _values(rng: np.random.Generator, n: int, width: int, bits: int) -> np.ndarray:
    """``(n, 1024)`` values of at most ``width`` bits, the top bit set somewhere."""
    dt = bp.dtype_for(bits)
    if width == 0:
        return np.zeros((n, bp.BLOCK), dt)
    raw = rng.integers(0, 2**64 - 1, (n, bp.BLOCK), dtype=np.uint64, endpoint=True)
    raw >>= np.uint64(64 - width)
    raw[:, 0] = (1 << width) - 1  # all ones: every bit of the field must survive
    raw[:, -1] = 1 << (width - 1)
    return raw.astype(dt)


def _inline_stream(blocks: np.ndarray, widths: list[int], bits: int):
    """The inline framing: per block a width word then its packed words."""
    dt = bp.dtype_for(bits)
    pieces, starts, pos = [], [], 0
    for block, w in zip(blocks, widths, strict=True):
        packed = bp.pack(block[None, :], w, bits).reshape(-1)
        pieces += [np.array([w], dt), packed]
        starts.append(pos + 1)
        pos += 1 + packed.size
    return np.concatenate(pieces).astype(dt), np.array(starts, np.int64)


@pytest.mark.parametrize("bits", BITS)
def test_unpack_blocks_matches_pack_for_every_width(bits: int) -> None:
    rng = np.random.default_rng(bits)
    for width in range(bits + 1):
        values = _values(rng, 3, width, bits)
        packed = bp.pack(values, width, bits)
        assert np.array_equal(bp.unpack(packed, width, bits), values)
        words, starts = _inline_stream(values, [width] * 3, bits)
        got = bp.unpack_blocks(words, starts, np.full(3, width), bits)
        assert got.dtype == bp.dtype_for(bits)
        assert np.array_equal(got, values), f"{bits} bits, width {width}"
        # the same blocks packed back to back without the width words
        flat = packed.reshape(-1)
        got = bp.unpack_blocks(flat, np.arange(3) * packed.shape[1], np.full(3, width), bits)
        assert np.array_equal(got, values), f"{bits} bits, width {width}, no headers"


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("with_full_width", [True, False])
def test_unpack_blocks_mixes_every_width_in_one_call(bits: int, with_full_width: bool) -> None:
    rng = np.random.default_rng(100 + bits)
    top = bits if with_full_width else bits - 1
    widths = [int(w) for w in rng.permutation(np.repeat(np.arange(top + 1), 2))]
    values = np.concatenate([_values(rng, 1, w, bits) for w in widths])
    words, starts = _inline_stream(values, widths, bits)
    out = np.full((len(widths), bp.BLOCK), 7, bp.dtype_for(bits))
    got = bp.unpack_blocks(words, starts, np.array(widths), bits, out=out)
    assert got is out
    assert np.array_equal(got, values)
    for i, w in enumerate(widths):  # and block by block, as the slice-based unpack sees it
        packed = words[starts[i] : starts[i] + bp.packed_words(w, bits)]
        assert np.array_equal(bp.unpack(packed[None, :], w, bits)[0], values[i])


@pytest.mark.parametrize("bits", BITS)
def test_unpack_blocks_single_block_and_trailing_zero_width(bits: int) -> None:
    rng = np.random.default_rng(200 + bits)
    for width in (1, bits // 2 + 1, bits):
        values = _values(rng, 1, width, bits)
        words, starts = _inline_stream(values, [width], bits)
        assert np.array_equal(bp.unpack_blocks(words, starts, np.array([width]), bits), values)
    # a zero-width block last: its start is past the end of the words (nothing is read)
    values = np.concatenate([_values(rng, 1, 3, bits), _values(rng, 1, 0, bits)])
    words, starts = _inline_stream(values, [3, 0], bits)
    assert starts[-1] == words.size
    assert np.array_equal(bp.unpack_blocks(words, starts, np.array([3, 0]), bits), values)
    # only zero-width blocks: fewer words than a row of lanes
    words, starts = _inline_stream(np.zeros((2, bp.BLOCK), bp.dtype_for(bits)), [0, 0], bits)
    assert not bp.unpack_blocks(words, starts, np.array([0, 0]), bits).any()
    empty = bp.unpack_blocks(words, starts[:0], np.zeros(0, np.int64), bits)
    assert empty.shape == (0, bp.BLOCK)


def test_unpack_blocks_batches_many_blocks() -> None:
    rng = np.random.default_rng(7)
    widths = [int(w) for w in rng.integers(0, 65, 150)]
    values = np.concatenate([_values(rng, 1, w, 64) for w in widths])
    words, starts = _inline_stream(values, widths, 64)
    assert len(widths) > bp._MIXED_BATCH_BYTES // (bp.BLOCK * 8)
    assert np.array_equal(bp.unpack_blocks(words, starts, np.array(widths), 64), values)


def test_unpack_blocks_rejects_words_it_cannot_view() -> None:
    words = np.zeros((4, 16), np.uint64)
    with pytest.raises(ValueError):
        bp.unpack_blocks(words, np.array([0]), np.array([1]), 64)
    with pytest.raises(ValueError):
        bp.unpack_blocks(np.zeros(16, np.uint32), np.array([0]), np.array([1]), 64)
    with pytest.raises(ValueError):
        bp.unpack_blocks(np.zeros(3, np.uint64), np.array([0]), np.array([1]), 64)


# ------------------------------------------------------------------ through _mb_inline
def _chunks(values: np.ndarray, widths: list[int], bits: int, counts: list[int]):
    words, _ = _inline_stream(values, widths, bits)
    sizes = np.array([(1 + bp.packed_words(w, bits)) * (bits // 8) for w in widths])
    buf = ChunkBuffers.of(words.view(np.uint8), sizes)
    enc = pb.InlineBitpacking(uncompressed_bits_per_value=bits)
    return enc, buf, np.array(counts, np.int64)


def _decoded(enc, buf, counts, bits: int) -> np.ndarray:
    block = compressive._mb_inline(enc, buf, counts, "test")
    return np.asarray(block.data).view(bp.dtype_for(bits))


PATHS = {
    # every width on its own, via bp.unpack
    "slices": {"alone": 1, "group": {b: 1 for b in BITS}},
    # everything in one bp.unpack_blocks call
    "mixed": {"alone": 10**9, "group": {b: 10**9 for b in BITS}},
    # a width with many blocks on its own, the rest mixed
    "hybrid": {"alone": 10**9, "group": {b: 4 for b in BITS}},
}


@pytest.fixture(params=sorted(PATHS))
def path(request, monkeypatch) -> str:
    choice = PATHS[request.param]
    monkeypatch.setattr(compressive, "_INLINE_ALONE_MIN", choice["alone"])
    monkeypatch.setattr(compressive, "_INLINE_GROUP_MIN", choice["group"])
    return request.param


@pytest.mark.parametrize("bits", BITS)
def test_inline_chunks_decode_the_same_on_every_path(bits: int, path: str) -> None:
    rng = np.random.default_rng(300 + bits)
    widths = [5] * 6 + [int(w) for w in rng.permutation(bits + 1)] + [5, 0, bits, 1]
    values = np.concatenate([_values(rng, 1, w, bits) for w in widths])
    counts = [bp.BLOCK] * (len(widths) - 1) + [37]  # the last chunk is partial
    expect = values.reshape(-1)[: (len(widths) - 1) * bp.BLOCK + 37]
    assert np.array_equal(_decoded(*_chunks(values, widths, bits, counts), bits), expect)
    # one width only, then one block only
    w = bits - 3
    same = _values(rng, 8, w, bits)
    counts = [bp.BLOCK] * 7 + [1000]
    got = _decoded(*_chunks(same, [w] * 8, bits, counts), bits)
    assert np.array_equal(got, same.reshape(-1)[: 7 * bp.BLOCK + 1000])
    got = _decoded(*_chunks(same[:1], [w], bits, [3]), bits)
    assert np.array_equal(got, same[0, :3])


def test_inline_chunks_with_partial_chunks_inside(path: str) -> None:
    rng = np.random.default_rng(5)
    widths = [12, 40, 12, 12, 12, 63, 0, 12]
    values = np.concatenate([_values(rng, 1, w, 64) for w in widths])
    counts = [1024, 500, 1024, 1, 1024, 1024, 10, 99]
    expect = np.concatenate([v[:c] for v, c in zip(values, counts, strict=True)])
    assert np.array_equal(_decoded(*_chunks(values, widths, 64, counts), 64), expect)


def test_inline_chunks_not_back_to_back(path: str) -> None:
    """Chunks scattered in a larger buffer (the no-copy path over ``raw``/``pos``)."""
    rng = np.random.default_rng(6)
    widths = [3, 17, 3, 64, 3, 0, 3]
    values = np.concatenate([_values(rng, 1, w, 64) for w in widths])
    words, _ = _inline_stream(values, widths, 64)
    sizes = np.array([(1 + bp.packed_words(w, 64)) * 8 for w in widths])
    gap = 24
    raw = bytearray()
    pos = []
    offset = 0
    for size in sizes.tolist():
        raw += bytes(gap)
        pos.append(len(raw))
        raw += words.view(np.uint8)[offset : offset + size].tobytes()
        offset += size
    buf = ChunkBuffers(np.frombuffer(bytes(raw), np.uint8), np.array(pos), sizes)
    enc = pb.InlineBitpacking(uncompressed_bits_per_value=64)
    counts = np.array([1024] * 6 + [700])
    got = _decoded(enc, buf, counts, 64)
    assert np.array_equal(got, values.reshape(-1)[: 6 * 1024 + 700])


# ------------------------------------------------------------------ whole reads
@pytest.mark.parametrize("arrow_type", [pa.int64(), pa.int32(), pa.uint16(), pa.uint8()])
def test_small_read_goes_through_unpack_blocks(arrow_type, monkeypatch) -> None:
    """A 20-chunk column of a few widths: read through the mixed-width unpacker, exactly."""
    bits = arrow_type.bit_width
    rows = 20 * bp.BLOCK + 300
    top = bits // 2 + 2  # block k holds values up to about (k + 1) / 20 * 2**top
    i = np.arange(rows, dtype=np.uint64)
    values = i * np.uint64(2**top) // np.uint64(rows) + i % np.uint64(3)
    values = values.astype(arrow_type.to_pandas_dtype())
    assert len(set(bp.block_widths(np.resize(values, (21, bp.BLOCK))).tolist())) >= 4
    table = pa.table({"x": pa.array(values, arrow_type)})
    path = tempfile.mkdtemp()
    lance_sql.write_dataset(table, path)

    calls = {"mixed": 0, "inline": 0}
    real_mixed, real_inline = bp.unpack_blocks, compressive._mb_inline

    def spy_mixed(*args, **kwargs):
        calls["mixed"] += 1
        return real_mixed(*args, **kwargs)

    def spy_inline(*args, **kwargs):
        calls["inline"] += 1
        return real_inline(*args, **kwargs)

    monkeypatch.setattr(bp, "unpack_blocks", spy_mixed)
    monkeypatch.setattr(compressive, "_mb_inline", spy_inline)
    got = lance_sql.dataset(path).to_table(columns=["x"]).column("x").to_numpy()
    assert calls["inline"] and calls["mixed"]
    assert np.array_equal(got, values)
    # and the same file through the slice-based unpacker only
    monkeypatch.setattr(compressive, "_INLINE_ALONE_MIN", 1)
    monkeypatch.setattr(compressive, "_INLINE_GROUP_MIN", {b: 1 for b in BITS})
    calls["mixed"] = 0
    got = lance_sql.dataset(path).to_table(columns=["x"]).column("x").to_numpy()
    assert calls["mixed"] == 0
    assert np.array_equal(got, values)


@pytest.mark.parametrize("width", [1, 7, 17, 24, 31])
def test_narrow_64_bit_unpack_over_many_batches(width: int) -> None:
    """64-bit blocks under 32 bits wide are unpacked as 32-bit halves, in batches: many
    blocks (several batches, the last one partial) from contiguous and strided words."""
    rng = np.random.default_rng(400 + width)
    n = 3 * (bp._NARROW_BATCH_BYTES // (bp.BLOCK * 8)) + 5
    values = _values(rng, n, width, 64)
    packed = bp.pack(values, width, 64)
    got = bp.unpack(packed, width, 64)
    assert got.dtype == np.uint64 and np.array_equal(got, values)
    padded = np.zeros((n, packed.shape[1] + 3), np.uint64)
    padded[:, 1 : 1 + packed.shape[1]] = packed
    out = np.full((n, bp.BLOCK), 9, np.uint64)
    assert bp.unpack(padded[:, 1 : 1 + packed.shape[1]], width, 64, out=out) is out
    assert np.array_equal(out, values)
    # the same blocks through the mixed-width unpacker
    words, starts = _inline_stream(values[:40], [width] * 40, 64)
    assert np.array_equal(bp.unpack_blocks(words, starts, np.full(40, width), 64), values[:40])


@pytest.mark.parametrize("bits", BITS)
def test_inline_run_of_one_width_among_others(bits: int, path: str) -> None:
    """A run of blocks of one width between blocks of others (unpacked in place on the
    hybrid path) and the same width again later (not one run: gathered and scattered)."""
    rng = np.random.default_rng(500 + bits)
    w = bits // 2 + 1
    for widths in ([1] + [w] * 9 + [2, 3], [1] + [w] * 5 + [2] + [w] * 4 + [3]):
        values = np.concatenate([_values(rng, 1, x, bits) for x in widths])
        counts = [bp.BLOCK] * (len(widths) - 1) + [100]
        expect = values.reshape(-1)[: (len(widths) - 1) * bp.BLOCK + 100]
        assert np.array_equal(_decoded(*_chunks(values, widths, bits, counts), bits), expect)


def test_narrow_unpack_of_words_strided_along_a_row() -> None:
    """Packed words whose rows are not contiguous (every other word) are copied first."""
    rng = np.random.default_rng(9)
    values = _values(rng, 5, 13, 64)
    packed = bp.pack(values, 13, 64)
    spread = np.zeros((5, packed.shape[1] * 2), np.uint64)
    spread[:, ::2] = packed
    assert np.array_equal(bp.unpack(spread[:, ::2], 13, 64), values)
