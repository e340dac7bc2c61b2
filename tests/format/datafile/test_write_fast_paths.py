"""Fast paths of the 2.2 writer give what the general paths give, and are taken.

* ``bitpacking.pack``: row by row (many blocks) and with ``reduceat`` (few blocks) agree
  with each other, with a bit-by-bit reference and with ``unpack``;
* ``shred``: a top-level leaf skips the general walk and gets the same levels;
* mini-block pages whose chunks are all one size (fixed-width values, bitpacked blocks of
  one width, dictionary indices) are framed at once, byte for byte as chunk by chunk;
  pylance and we read them back.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from v2_helpers import open_ours

from lance_sql.format.datafile import LanceFileWriter
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import encode_miniblock as em
from lance_sql.format.datafile import shred as shred_mod
from lance_sql.format.schema import LanceSchema

lance_file = pytest.importorskip("lance.file")


def _reference_pack(values: np.ndarray, width: int, bits: int) -> np.ndarray:
    """FastLanes packing spelled out: lane ``l``'s bit stream is its rows' low ``width``
    bits back to back; word ``w`` of the lane is bits ``[w*bits, (w+1)*bits)``."""
    lanes = bp.BLOCK // bits
    order = (0, 4, 2, 6, 1, 5, 3, 7)
    out = np.zeros((values.shape[0], width * lanes), bp.dtype_for(bits))
    for b, block in enumerate(values.astype(np.uint64)):
        for lane in range(lanes):
            stream = 0
            for r in range(bits):
                v = int(block[order[r // 8] * 16 + (r % 8) * 128 + lane]) & ((1 << width) - 1)
                stream |= v << (r * width)
            for w in range(width):
                out[b, w * lanes + lane] = (stream >> (w * bits)) & ((1 << bits) - 1)
    return out


def _random_blocks(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    raw = rng.integers(0, 2**64 - 1, (n, bp.BLOCK), dtype=np.uint64, endpoint=True)
    return raw.astype(bp.dtype_for(bits))


@pytest.mark.parametrize("bits", (8, 16, 32, 64))
def test_pack_matches_a_bit_by_bit_reference(bits: int) -> None:
    rng = np.random.default_rng(bits)
    values = _random_blocks(rng, 1, bits)
    for width in sorted({0, 1, 3, bits // 2 - 1, bits // 2, bits // 2 + 1, bits - 1, bits}):
        assert np.array_equal(bp.pack(values, width, bits), _reference_pack(values, width, bits))


@pytest.mark.parametrize("bits", (8, 16, 32, 64))
def test_pack_row_loop_and_reduceat_agree_on_every_width(bits: int, monkeypatch) -> None:
    rng = np.random.default_rng(10 + bits)
    blocks = bp._ROW_LOOP_MIN_BLOCKS + 3
    for width in range(bits + 1):
        wide = _random_blocks(rng, blocks, bits)  # bits above the width are dropped
        fitting = wide & bp.dtype_for(bits).type((1 << width) - 1)
        monkeypatch.setattr(bp, "_ROW_LOOP_MIN_BLOCKS", 1)
        rows = bp.pack(wide, width, bits)
        rows_fit = bp.pack(fitting, width, bits, fits=True)
        monkeypatch.setattr(bp, "_ROW_LOOP_MIN_BLOCKS", 1 << 30)
        grouped = bp.pack(wide, width, bits)
        assert rows.shape == (blocks, width * bp.BLOCK // bits)
        assert np.array_equal(rows, grouped), f"{bits} bits, width {width}"
        assert np.array_equal(rows_fit, grouped)
        assert np.array_equal(bp.unpack(rows, width, bits), fitting)


# --------------------------------------------------------------------------- shred
def _leaves_by_walk(field, arr: pa.Array) -> list:
    n = len(arr)
    out: list = []
    state = shred_mod._State(np.arange(n, dtype=np.int64), np.full(n, shred_mod._NO_LIST, np.int32),
                             np.zeros(n, np.int32), [])  # fmt: skip
    shred_mod._walk(field, arr, state, out, n)
    return out


_TOP_LEVEL = {
    "int": pa.array(np.arange(50)),
    "int_nulls": pa.array(np.arange(50), mask=np.arange(50) % 3 == 0),
    "str_nulls": pa.array([None if i % 4 == 0 else f"s{i}" for i in range(50)]),
    "all_null": pa.array([None] * 20, pa.int32()),
    "null_type": pa.nulls(20),
    "empty": pa.array([], pa.int64()),
    "bool": pa.array([i % 3 == 0 for i in range(50)]),
    "fsl": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40.0)), 4),
    "fsl_nulls": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40.0)), 4,
                                                   mask=pa.array([i % 3 == 0 for i in range(10)])),
    "dict": pa.array(["a", "b", None, "a"] * 10).dictionary_encode(),
    "sliced": pa.array(np.arange(100), mask=np.arange(100) % 5 == 0).slice(7, 60),
}


@pytest.mark.parametrize("name", sorted(_TOP_LEVEL))
def test_top_level_leaf_skips_the_walk_and_matches_it(name: str, monkeypatch) -> None:
    arr = _TOP_LEVEL[name]
    field = LanceSchema.from_arrow(pa.schema([pa.field("c", arr.type)])).fields[0]
    expected = _leaves_by_walk(field, arr)

    def no_walk(*args, **kwargs):
        raise AssertionError("the general walk ran for a top-level leaf")

    monkeypatch.setattr(shred_mod, "_walk", no_walk)
    (got,) = shred_mod.shred(field, arr)
    (want,) = expected
    assert list(got.layers) == list(want.layers)
    for a, b in ((got.rep, want.rep), (got.def_, want.def_)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got.values.equals(want.values) and got.num_rows == want.num_rows


# --------------------------------------------------------------------------- uniform chunks
def _write(table: pa.Table, version: str = "2.2") -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version=version)
    writer.write_batch(table)
    writer.finish()
    return sink.getvalue()


def _uniform_table(n: int) -> pa.Table:
    rng = np.random.default_rng(n)
    return pa.table({
        "ids": pa.array(np.arange(n, dtype=np.int64) % 1000 + 1000),  # bitpacked, one width
        "x": pa.array(rng.random(n)),  # plain fixed width, 512 values a chunk
        "f32": pa.array(rng.random(n), pa.float32()),
        "b": pa.array(rng.random(n) < 0.5),  # bits
        "cat": pa.array(rng.integers(0, 30, n)).cast(pa.string()).dictionary_encode(),
        "catnum": pa.array(rng.integers(0, 30, n).astype(np.int16)).dictionary_encode(),
        "fsb": pa.array([bytes([i % 251]) * 3 for i in range(n)], pa.binary(3)),
    })  # fmt: skip


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("n", [300, 4096, 5000, 70_001])
def test_uniform_chunks_frame_like_chunk_by_chunk(n: int, version: str, monkeypatch,
                                                  tmp_path) -> None:
    table = _uniform_table(n)
    calls = []
    real = em._assemble_uniform

    def spy(*args, **kwargs):
        calls.append(args[1].rows.shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(em, "_assemble_uniform", spy)
    fast = _write(table, version)
    assert len(calls) >= len(table.column_names), "uniform chunks were not framed at once"

    def chunk_by_chunk(layout, chunks, logs, dict_buf, large):
        counts = np.array([1 << int(x) for x in logs.tolist()], np.int64)
        return em._assemble(layout, None, None, [], counts, None, chunks.as_lists(), dict_buf,
                            large)

    monkeypatch.setattr(em, "_assemble_uniform", chunk_by_chunk)
    assert _write(table, version) == fast  # same bytes either way

    path = tmp_path / "uniform.lance"
    path.write_bytes(fast)
    theirs = lance_file.LanceFileReader(str(path)).read_all().to_table()
    reader, cmap = open_ours(fast)
    for field in reader.schema.fields:
        want = table.column(field.name).combine_chunks()
        assert theirs.column(field.name).combine_chunks().equals(want), field.name
        assert reader.read([field], cmap)[0].equals(want), field.name


# --------------------------------------------------------------------------- LZ4 strings
def _strings(n: int, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    digits = pa.array(rng.integers(100_000_000, 999_999_999, n)).cast(pa.string())
    return pa.compute.binary_join_element_wise("user-", digits, "")


def test_lz4_chunks_match_chunk_by_chunk_and_use_two_threads(monkeypatch) -> None:
    from lance_sql.format.datafile.blocks import deflate
    from lance_sql.format.datafile.encode_v2_2 import values_of

    values = values_of(_strings(200_000, 3))  # ~3.5 MB: over the two-thread threshold
    counts = em._variable_counts(values.var_offsets, 4, em.LZ4_CHUNK_TARGET)
    halves = []
    real = em.in_two_halves

    def spy(work, items):
        halves.append(len(items))
        return real(work, items)

    monkeypatch.setattr(em, "in_two_halves", spy)
    got = em._deflated_chunks(values, counts, 4)
    assert halves, "the chunks were not compressed on two threads"
    plain = em._variable_chunks(values, counts, 4)
    assert got is not None and len(got) == len(plain) == counts.size
    assert [bytes(c) for c in got] == [deflate(1, c) for c in plain]


def test_lz4_chunks_refuse_what_does_not_compress() -> None:
    from lance_sql.format.datafile.encode_v2_2 import values_of

    rng = np.random.default_rng(4)
    noise = rng.integers(0, 256, 50_000 * 20, dtype=np.uint8)
    arr = pa.Array.from_buffers(pa.binary(), 50_000, [None, pa.py_buffer(
        np.arange(0, 50_001 * 20, 20, dtype=np.int32)), pa.py_buffer(noise)])  # fmt: skip
    values = values_of(arr)
    counts = em._variable_counts(values.var_offsets, 4, em.LZ4_CHUNK_TARGET)
    assert em._deflated_chunks(values, counts, 4) is None


def test_in_two_halves_keeps_order_raises_the_helpers_error_and_leaves_no_thread() -> None:
    import threading

    from lance_sql.format.datafile.blocks import in_two_halves

    before = threading.active_count()
    assert in_two_halves(lambda part: [x * 2 for x in part], list(range(11))) == [
        x * 2 for x in range(11)]  # fmt: skip

    def fail_late(part):
        if 10 in part:
            raise ValueError("helper failed")
        return list(part)

    with pytest.raises(ValueError, match="helper failed"):
        in_two_halves(fail_late, list(range(11)))
    assert threading.active_count() == before


def test_large_lz4_string_pages_round_trip_through_pylance(tmp_path) -> None:
    from v2_helpers import census

    table = pa.table({"s": _strings(300_000, 5), "n": pa.array(
        [None if i % 9 == 0 else f"name-{i % 977}-{i}" for i in range(300_000)])})  # fmt: skip
    data = _write(table)
    assert census(data)["general"] >= 2  # LZ4 chunks in both columns
    path = tmp_path / "lz4.lance"
    path.write_bytes(data)
    theirs = lance_file.LanceFileReader(str(path)).read_all().to_table()
    reader, cmap = open_ours(data)
    for field in reader.schema.fields:
        want = table.column(field.name).combine_chunks()
        assert theirs.column(field.name).combine_chunks().equals(want), field.name
        assert reader.read([field], cmap)[0].equals(want), field.name


# --------------------------------------------------------------------------- overlapped writes
class _Sink(io.BytesIO):
    """A sink that records which threads wrote to it and can fail on its n-th write."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.threads: set[str] = set()
        self.writes = 0
        self.fail_at = fail_at

    def write(self, data) -> int:
        import threading

        self.writes += 1
        if self.fail_at is not None and self.writes >= self.fail_at:
            raise OSError("disk full")
        self.threads.add(threading.current_thread().name)
        return super().write(data)


def _write_to(sink, table: pa.Table) -> None:
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2")
    for batch in table.to_batches(max_chunksize=100_000):
        writer.write_batch(batch)
    writer.finish()


def test_overlapped_writes_land_like_direct_ones_and_leave_no_thread(monkeypatch) -> None:
    import threading

    from lance_sql.format.datafile import writer as writer_mod

    table = pa.table({"s": _strings(300_000, 6), "i": pa.array(np.arange(300_000) * 7)})
    before = threading.active_count()
    overlapped = _Sink()
    _write_to(overlapped, table)
    assert "lance-sql-write" in overlapped.threads, "no write went through the helper"
    assert threading.active_count() == before
    monkeypatch.setattr(writer_mod, "OVERLAP_MIN_BYTES", 1 << 62)
    direct = _Sink()
    _write_to(direct, table)
    assert direct.threads == {threading.main_thread().name}
    assert overlapped.getvalue() == direct.getvalue()


def test_a_failed_overlapped_write_is_raised_by_the_writer() -> None:
    import threading

    table = pa.table({"s": _strings(300_000, 7)})
    before = threading.active_count()
    with pytest.raises(OSError, match="disk full"):
        _write_to(_Sink(fail_at=2), table)
    assert threading.active_count() == before


def _plain_chunks(strings: list[bytes], counts: list[int], width: int) -> list[bytes]:
    """Mini-block string chunks spelled out: offsets from the chunk start, bytes, padding."""
    out, i = [], 0
    for count in counts:
        part = strings[i : i + count]
        i += count
        pos = [(count + 1) * width]
        for s in part:
            pos.append(pos[-1] + len(s))
        body = b"".join(p.to_bytes(width, "little") for p in pos) + b"".join(part)
        out.append(body + bytes(-len(body) % width))
    return out


@pytest.mark.parametrize("views", [True, False])
@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("target", [4096, 64 * 1024])
def test_string_chunks_match_a_plain_reference(large: bool, target: int, views: bool,
                                               monkeypatch) -> None:  # fmt: skip
    """Chunks joined by Arrow from binary views, or from slices (a page too large for
    views): the chunks spelled out one by one, strings of 0 to 40 bytes."""
    from lance_sql.format.datafile import memory
    from lance_sql.format.datafile.encode_v2_2 import values_of

    if not views:
        monkeypatch.setattr(memory, "VIEW_LIMIT", 0)

    rng = np.random.default_rng(8)
    words = [bytes(rng.integers(97, 123, int(k), dtype=np.uint8))
             for k in rng.integers(0, 40, 9000)]  # fmt: skip
    arr = pa.array(words, pa.large_binary() if large else pa.binary()).slice(123, 8000)
    values = values_of(arr)  # sliced: its offsets are rebased to start at 0
    assert int(values.var_offsets[0]) == 0
    width = 8 if large else 4
    counts = em._variable_counts(values.var_offsets, width, target)
    want = _plain_chunks(words[123 : 123 + 8000], counts.tolist(), width)
    assert [bytes(c) for c in em._variable_chunks(values, counts, width)] == want
    stream, bounds = em._StringChunks(values, counts, width).joined()
    assert bytes(stream) == b"".join(want) and np.diff(bounds).tolist() == list(map(len, want))


# --------------------------------------------------------------------------- levels, framing
@pytest.mark.parametrize(("per_chunk", "width"), [
    ([2048] * 5 + [700], 1),  # whole blocks
    ([512] * 7 + [3], 1),  # one padded block per chunk
    ([64] * 9 + [64], 12),  # kept raw (padding would cost more than packing saves)
    ([1024, 512, 2048, 77], 2),  # uneven: one by one
    ([300], 3),  # a single chunk
    ([2048 + 64, 1024 + 5, 4096, 64], 12),  # whole blocks then a raw tail
])
def test_chunk_levels_match_ool_pack_chunk_by_chunk(per_chunk: list[int], width: int) -> None:
    from lance_sql.format.datafile.encode_v2_2 import ool_pack

    rng = np.random.default_rng(width)
    bounds = np.r_[0, np.cumsum(per_chunk)]
    levels = rng.integers(0, 1 << width, int(bounds[-1])).astype(np.uint16)
    got = em._chunk_levels(levels, bounds, width)
    want = [ool_pack(levels[a:b], width) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert [bytes(g) for g in got] == want


def _framed_reference(level_parts, value_bufs, per_chunk) -> list[bytes]:
    """Mini-block chunks framed one by one: u16 level count, u16 level buffer sizes, u32
    value buffer sizes, padding to 8, then each buffer padded to 8 (with 0xFE)."""
    import struct

    out = []
    for c, values in enumerate(value_bufs):
        levels = [p[c] for p in level_parts]
        head = struct.pack("<H", per_chunk[c]) + b"".join(struct.pack("<H", len(x)) for x in levels)
        head += b"".join(struct.pack("<I", len(v)) for v in values)
        parts = [head + b"\xfe" * (-len(head) % 8)]
        parts += [bytes(b) + b"\xfe" * (-len(b) % 8) for b in (*levels, *values)]
        out.append(b"".join(parts))
    return out


def test_chunks_with_levels_are_framed_like_one_by_one() -> None:
    from lance_sql.format.pb import encodings_v2_1_pb2 as pb

    rng = np.random.default_rng(9)
    counts = np.array([512] * 6 + [100])
    n = int(counts.sum())
    def_ = (rng.random(n) < 0.2).astype(np.uint16)
    bounds = np.r_[0, np.cumsum(counts)]
    values = [[bytes(rng.integers(0, 256, int(c) // 8 + 1, dtype=np.uint8)),
               bytes(rng.integers(0, 256, int(c) * 3, dtype=np.uint8))] for c in counts]
    layout = pb.MiniBlockLayout(num_items=n, has_large_chunk=True)
    page = em._assemble(layout, None, def_, [1], counts, None, values, None)
    meta = np.frombuffer(page.buffers[0], "<u4")
    levels = em._chunk_levels(def_, bounds, 1)
    want = _framed_reference([levels], values, counts.tolist())
    assert bytes(page.buffers[1]) == b"".join(want)
    assert ((meta >> 4) + 1).tolist() == [len(w) // 8 for w in want]
    assert (meta & 15).tolist() == [9] * 6 + [0]


def _rep_index_reference(rep: np.ndarray, bounds: np.ndarray, max_rep: int) -> np.ndarray:
    """The repetition index chunk by chunk: rows finished, items left over."""
    nchunks = bounds.size - 1
    out = np.zeros((nchunks, 2), np.uint64)
    starts = rep == max_rep
    for c in range(nchunks):
        a, b = int(bounds[c]), int(bounds[c + 1])
        seg = starts[a:b]
        rows = int(np.count_nonzero(seg[1:]))
        hits = np.flatnonzero(seg)
        left = 0 if c == nchunks - 1 else (b - a) - int(hits[-1]) if hits.size else (b - a)
        if c and seg[0] and out[c - 1, 1]:
            out[c - 1] = (out[c - 1, 0] + 1, 0)
        out[c] = (rows + (c == nchunks - 1), left)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_rep_index_matches_chunk_by_chunk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    rep = rng.integers(0, 3, n).astype(np.uint16)  # max_rep 2: a row starts at each 2
    if seed % 2:
        rep[0] = 2
    cuts = np.unique(rng.integers(1, n, int(rng.integers(0, 12)))) if n > 1 else []
    bounds = np.r_[0, cuts, n].astype(np.int64)
    assert np.array_equal(em._rep_index(rep, bounds, 2), _rep_index_reference(rep, bounds, 2))


def test_list_items_that_follow_each_other_are_sliced_not_taken() -> None:
    lists = pa.array([[1, 2], None, [], [3, None, 4], [5]] * 200, pa.list_(pa.int64()))
    part = lists.slice(7, 600)  # starts inside the item array
    field = LanceSchema.from_arrow(pa.schema([pa.field("l", part.type)])).fields[0]
    (leaf,) = shred_mod.shred(field, part)
    first, last = part.offsets[0].as_py(), part.offsets[-1].as_py()
    want = part.values.slice(first, last - first)
    assert leaf.values.equals(want)
    assert leaf.values.offset == part.values.offset + first  # a slice: no copy was taken
    # items that do not follow each other (a null list hiding items) are taken instead
    hidden = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), pa.array([1, 2, 9, 9, 3]),
                                      mask=pa.array([False, True, False]))
    (leaf,) = shred_mod.shred(
        LanceSchema.from_arrow(pa.schema([pa.field("l", hidden.type)])).fields[0], hidden)
    assert leaf.values.to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("scheme", [1, 2])
def test_deflate_slices_equal_deflate_of_each_slice(scheme: int) -> None:
    """LZ4 (u32 prefix) and zstd (u64 prefix) buffers of the picked slices, in order, each
    what :func:`deflate` makes of it and :func:`inflate` reads back."""
    from lance_sql.format.datafile.blocks import deflate, deflate_slices, inflate

    rng = np.random.default_rng(scheme)
    data = bytes(rng.integers(97, 105, 20_000, dtype=np.uint8))
    bounds = np.r_[0, np.cumsum(rng.integers(1, 900, 30))].tolist()
    which = [0, 3, 4, 17, 29, 5]
    got = deflate_slices(scheme, memoryview(data), bounds, which, None)
    want = [deflate(scheme, data[bounds[c] : bounds[c + 1]]) for c in which]
    assert got == want
    assert [bytes(inflate(scheme, np.frombuffer(g, np.uint8), "t")) for g in got] == [
        data[bounds[c] : bounds[c + 1]] for c in which]  # fmt: skip
    assert deflate_slices(scheme, memoryview(data), bounds, [], 3) == []
