"""The vectorised shortcuts of 2.1/2.2 decoding agree with the plain definitions and still
refuse bad input: run gathers of string offsets, the ASCII shortcut of UTF-8 checking,
the one-call bitpacking unpack."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import FormatError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import blocks, memory, parallel
from lance_sql.format.datafile.blocks import Variable, deflate, to_arrow
from lance_sql.format.datafile.compressive import (
    ChunkBuffers,
    _gather_runs,
    _variable_pieces,
    range_indices,
)
from lance_sql.format.pb import encodings_v2_1_pb2 as pb


@pytest.mark.parametrize("counts", [[5], [4, 4, 4, 2], [8, 2, 8, 1, 2, 8], [0, 3, 0, 3]])
def test_gather_runs_matches_a_plain_loop(counts):
    rng = np.random.default_rng(len(counts))
    words = rng.integers(0, 1 << 20, 64, dtype=np.uint64).astype(np.uint32)
    counts = np.array(counts, np.int64)
    src = rng.integers(0, 64 - int(counts.max()), counts.size)
    add = rng.integers(-100, 100, counts.size)
    expected = np.concatenate([words[s : s + c].astype(np.int64) + a
                               for s, c, a in zip(src, counts, add, strict=True)])
    for dtype in (np.int32, np.int64):
        out = np.full(int(counts.sum()), -1, dtype)
        _gather_runs(words, src, counts, add, out)
        np.testing.assert_array_equal(out, expected)


def _strings(data: bytes, offsets: list[int]) -> pa.Array:
    block = Variable(np.array(offsets, np.int32), np.frombuffer(data, np.uint8), len(offsets) - 1)
    return to_arrow(block, pa.string(), None, "test")


def test_string_blocks_ascii_and_utf8_are_read():
    assert _strings(b"abcdef", [0, 2, 2, 6]).to_pylist() == ["ab", "", "cdef"]
    text = "héllo wörld €".encode()
    assert _strings(text, [0, 6, len(text)]).to_pylist() == ["héllo", " wörld €"]
    # an ASCII tail shorter than a word is checked too
    assert _strings(b"abcdefghi", [0, 9]).to_pylist() == ["abcdefghi"]


@pytest.mark.parametrize("data,offsets", [
    (b"ab\xffcdefgh", [0, 3, 9]),          # not UTF-8 at all
    (b"abcdefgh\xc3", [0, 9]),             # a truncated sequence in the tail
    ("é".encode() + b"abcdefg", [0, 1, 9]),  # a split inside a two-byte character
])
def test_string_blocks_with_bad_utf8_are_refused(data, offsets):
    with pytest.raises(FormatError, match="UTF-8"):
        _strings(data, offsets)


@pytest.mark.parametrize("offsets", [[0, 4, 2, 6], [0, 2, 7], [-1, 2, 6]])
def test_string_blocks_with_bad_offsets_are_refused(offsets):
    with pytest.raises(FormatError, match="offsets"):
        _strings(b"abcdef", offsets)


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_unpack_matches_pack_for_every_width_across_batches(bits):
    rng = np.random.default_rng(bits)
    dt = bp.dtype_for(bits)
    n = bp._BATCH_BYTES // (bp.BLOCK * dt.itemsize) + 2  # two batches, the last short
    for width in range(bits + 1):
        values = rng.integers(0, 1 << width, (n, bp.BLOCK), dtype=np.uint64).astype(dt)
        packed = bp.pack(values, width, bits)
        np.testing.assert_array_equal(bp.unpack(packed, width, bits), values)
        # the inline framing hands over a strided view (one width word before each block)
        framed = np.concatenate([np.full((n, 1), width, dt), packed], axis=1)
        np.testing.assert_array_equal(bp.unpack(framed[:, 1:], width, bits), values)


@pytest.mark.parametrize("sizes,gaps", [
    ([16, 16, 16, 5], [8, 8, 8, 8]),    # evenly spaced, one size but the last: strided rows
    ([16, 16, 16, 16], [8, 8, 8, 8]),
    ([16, 12, 16, 5], [8, 8, 8, 8]),    # sizes differ: joined slices
    ([16, 16, 16, 5], [8, 3, 8, 8]),    # spacing differs
    ([4, 4], [2, 2]),
])
def test_chunk_buffers_gather_their_bytes_in_order(sizes, gaps):
    rng = np.random.default_rng(sum(sizes))
    raw = rng.integers(0, 256, sum(sizes) + sum(gaps) + 3, dtype=np.uint8)
    pos = np.cumsum(np.array(gaps) + np.r_[0, sizes[:-1]])
    buf = ChunkBuffers(raw, pos, np.array(sizes))
    expected = np.concatenate([raw[p : p + s] for p, s in zip(pos, sizes, strict=True)])
    np.testing.assert_array_equal(buf.data, expected)


def _piece(strings: list[bytes]) -> bytes:
    """One string chunk as the writer lays it out: offsets (from the chunk start), bytes."""
    head = 4 * (len(strings) + 1)
    ends = np.cumsum([0] + [len(s) for s in strings]) + head
    body = ends.astype("<u4").tobytes() + b"".join(strings)
    return body + bytes(-len(body) % 4)


def test_inflated_string_pieces_join_their_bytes_and_offsets():
    var = pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))
    chunks = [[b"ab", b"", b"cde", b"f"], [b"ghij", b"k", b"", b"l"], [b"xyz"]]
    block = _variable_pieces(var, [_piece(c) for c in chunks], np.array([4, 4, 1]), "t")
    expected = [s.decode() for c in chunks for s in c]
    assert to_arrow(block, pa.string(), None, "t").to_pylist() == expected


@pytest.mark.parametrize("damage", ["short", "first", "last"])
def test_inflated_string_pieces_with_bad_offsets_are_refused(damage):
    var = pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))
    piece = bytearray(_piece([b"ab", b"cd"]))
    if damage == "short":
        piece = piece[:8]
    elif damage == "first":
        piece[0] = 99
    else:
        piece[8] = 200  # the last offset points past the chunk
    with pytest.raises(FormatError, match="offsets|too small"):
        _variable_pieces(var, [bytes(piece)], np.array([2]), "t")


@pytest.mark.parametrize("scheme", [1, 2])
def test_inflating_many_buffers_in_threads_matches_one_by_one(monkeypatch, scheme):
    """Past the thresholds, groups of buffers inflate on a few threads: same pieces, in
    order; a corrupt buffer among them is still a FormatError."""
    rng = np.random.default_rng(scheme)
    raws = [bytes(rng.integers(0, 4, int(k), dtype=np.uint8)) for k in rng.integers(0, 3000, 150)]
    if scheme == 2:  # one framing zstd buffers joined in one call do not use: one by one
        packed = [deflate(2, r)[8:] if r else deflate(2, r) for r in raws]
    else:
        packed = [deflate(1, r) for r in raws]
    joined = np.frombuffer(b"".join(packed), np.uint8)
    sizes = [len(p) for p in packed]
    pos = np.cumsum([0, *sizes[:-1]]).tolist()
    serial = blocks.inflate_many(scheme, joined.data, pos, sizes, "t")
    monkeypatch.setattr(blocks, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(blocks, "_INFLATE_GROUP", 4)
    monkeypatch.setattr(parallel, "threads", lambda: 3)
    calls: list[str] = []
    original = blocks.inflate

    def counted(*args, **kwargs):
        calls.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(blocks, "inflate", counted)
    threaded = blocks.inflate_many(scheme, joined.data, pos, sizes, "t")
    assert len(calls) == len(raws)  # the grouped path ran
    assert [bytes(p) for p in threaded] == [bytes(p) for p in serial] == raws
    bad = bytearray(joined)
    bad[pos[100] + 4 : pos[100] + sizes[100]] = b"\xff" * (sizes[100] - 4)
    with pytest.raises(FormatError, match="t"):
        blocks.inflate_many(scheme, memoryview(bytes(bad)), pos, sizes, "t")
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_gather_runs_equals_an_index_gather_or_declines():
    rng = np.random.default_rng(3)
    source = rng.integers(0, 256, 5000, dtype=np.uint8)
    lengths = rng.integers(0, 40, 100)
    gaps = rng.integers(0, 6, 100)
    starts = np.cumsum(gaps + np.r_[0, lengths[:-1]])
    got = memory.gather_runs(source, starts, lengths)
    np.testing.assert_array_equal(got, source[range_indices(starts, lengths)])
    assert memory.gather_runs(source, starts[::-1].copy(), lengths[::-1].copy()) is None
    assert memory.gather_runs(source, np.array([0, 3]), np.array([4, 2])) is None  # overlap
    assert memory.gather_runs(source, np.array([4990]), np.array([20])) is None  # past end
    assert memory.gather_runs(source, np.zeros(0, np.int64), np.zeros(0, np.int64)).size == 0


def test_full_zip_strings_gather_their_bytes_in_one_call(tmp_path, monkeypatch):
    """Long strings (full-zip pages, FSST over them in pylance's files) read the same
    with the one-call gather as with the per-byte index, which the gather declining
    falls back to."""
    lance = pytest.importorskip("lance")
    rng = np.random.default_rng(5)
    words = np.array(["lorem", "ipsum", "dölor", "日本", "", "sit", "amet\xff"])
    text = [" ".join(words[rng.integers(0, words.size, int(k))])
            for k in rng.integers(0, 200, 3000)]  # fmt: skip
    table = pa.table({"s": pa.array(text, mask=rng.random(3000) < 0.1)})
    path = tmp_path / "t.lance"
    lance.write_dataset(table, str(path))
    import lance_sql
    from lance_sql.format.datafile import fullzip

    calls: list[int] = []
    original = fullzip.gather_runs

    def counted(source, starts, lengths):
        out = original(source, starts, lengths)
        calls.append(0 if out is None else 1)
        return out

    monkeypatch.setattr(fullzip, "gather_runs", counted)
    fast = lance_sql.dataset(path).to_table()
    assert calls and all(calls)
    monkeypatch.setattr(fullzip, "gather_runs", lambda *a: None)
    general = lance_sql.dataset(path).to_table()
    assert fast.equals(general) and fast.equals(table)


def test_byte_views_of_many_sources_join_to_their_runs():
    """Runs of 0 to 40 bytes (held in their view up to 12, else pointing into their
    source), some ending at their source's last byte, over three sources (one empty),
    joined back to back by Arrow: what slicing each run gives."""
    rng = np.random.default_rng(11)
    sources = [rng.integers(0, 256, 700, dtype=np.uint8), np.zeros(0, np.uint8),
               rng.integers(0, 256, 13, dtype=np.uint8)]  # fmt: skip
    lengths = np.r_[rng.integers(0, 40, 60), 11, 12, 13, 5, 0, 0, 12, 13, 3]
    starts = [np.r_[rng.integers(0, 660, 60), 689, 688, 687, 695, 700],
              np.array([0]), np.array([1, 0, 10])]  # the last runs end at their source's end
    views = memory.byte_views(sources, starts, lengths)
    assert views.shape == (lengths.size, 4) and views.dtype == np.dtype("<i4")
    want = b"".join(bytes(src[a : a + n]) for src, s, ls in zip(
        sources, starts, np.split(lengths, [61 + 4, 66]), strict=True)
        for a, n in zip(s.tolist(), ls.tolist(), strict=True))  # fmt: skip
    got = memory.join_views(views, sources)
    assert got.size == len(want) and got.to_pybytes() == want
    held = views.view(np.uint8)[:, 4:]  # a run of up to 12 bytes is in its view, zeros after
    assert bytes(held[-1]) == bytes(sources[2][10:13]) + bytes(9)
    assert memory.join_views(memory.byte_views([sources[0]], [np.array([3, 9])],
                                               np.zeros(2, np.int64)), [sources[0]]).size == 0


def test_inflated_string_pieces_with_64_bit_offsets_past_2_63_are_refused():
    """A 64-bit offset word of 2^63 or more (a chunk whose value count reaches into its
    string bytes) is a FormatError, not an integer overflow."""
    var = pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=64)))
    piece = np.array([16, 24], "<u8").tobytes() + b"\xff" * 8  # one value; 0xff.. bytes
    with pytest.raises(FormatError, match="offsets"):
        _variable_pieces(var, [piece], np.array([2]), "t")  # the count claims two


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("skip", [0, 2, 3])
def test_words_at_read_the_words_at_any_byte_offset(width, skip):
    """memory.words_at: the word at each offset (aligned or not) equals the bytes there
    read as a little-endian integer, as the byte gather it replaces gave; an offset whose
    word runs past the bytes is out of range for both."""
    rng = np.random.default_rng(width * 10 + skip)
    source = rng.integers(0, 256, 301, dtype=np.uint8)[1:]  # (an odd start in memory)
    dt = np.dtype(f"<u{width}")
    last = source.size - skip - width  # the last offset whose word fits
    at = np.array([0, 1, 5, 7, last // 2, last - 1, last], np.int64)
    got = memory.words_at(source, dt, skip)[at]
    gathered = source[skip + at[:, None] + np.arange(width)].view(dt)[:, 0]
    assert got.dtype == dt and np.array_equal(got, gathered)
    assert [int(v) for v in got] == [
        int.from_bytes(source[skip + a : skip + a + width].tobytes(), "little") for a in at]
    with pytest.raises(IndexError):
        memory.words_at(source, dt, skip)[np.array([last + 1])]
    with pytest.raises(IndexError):
        source[skip + np.array([last + 1])[:, None] + np.arange(width)]
    assert memory.words_at(source[:width - 1], dt).size == 0  # no whole word
