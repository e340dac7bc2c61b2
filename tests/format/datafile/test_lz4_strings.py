"""String pages of our default files (LZ4 chunks over offsets and bytes) read by the
threaded path that inflates groups of chunks in one call each and places each group as
it is inflated: the same table as the one-chunk-at-a-time path, over nulls, empty
strings, non-ASCII text, binary values, large strings, several pages, chunks of 16 KiB
to 64 KiB and chunks that do not end on a word boundary; a chunk whose size prefix lies
(either way, or two that make up for each other) is a FormatError."""

from __future__ import annotations

import io
import threading

import numpy as np
import pyarrow as pa
import pytest
from v2_helpers import open_ours, page_layouts

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.datafile import (
    LanceFileWriter,
    compressive,
    encode_miniblock,
    lz4_frames,
    parallel,
)
from lance_sql.format.datafile.blocks import deflate, inflate
from lance_sql.format.datafile.compressive import ChunkBuffers
from lance_sql.format.pb import encodings_v2_1_pb2 as pb
from lance_sql.format.schema import LanceSchema


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["item", "cart", "bücher", "日本語", "ñandú", "", "😀", "https://x.io/"])
    parts = words[rng.integers(0, words.size, (n, 5))]
    text = ["".join(p) + (str(i) if i % 4 else "") for i, p in enumerate(parts)]
    nulls = rng.random(n) < 0.1
    raw = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 30, n)]
    return pa.table({"s": pa.array(text, mask=nulls), "b": pa.array(raw, pa.binary()),
                     "l": pa.array(text, pa.large_string())})


def _write(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2",
                             page_bytes=256 * 1024, max_page_bytes=1024 * 1024)
    for batch in table.to_batches(max_chunksize=20_000):
        writer.write_batch(pa.Table.from_batches([batch]))
    writer.finish()
    return sink.getvalue()


def _read(data: bytes, schema: pa.Schema) -> pa.Table:
    reader, cmap = open_ours(data)
    return pa.table(reader.read(reader.schema.fields, cmap), schema=schema)


@pytest.fixture(scope="module", params=[16 * 1024, 64 * 1024])
def written(request: pytest.FixtureRequest) -> tuple[pa.Table, bytes]:
    """The table, written with LZ4 string chunks of the given target size."""
    table = _table(80_000)
    saved = encode_miniblock.DEFAULT_CHUNK_TARGET
    encode_miniblock.DEFAULT_CHUNK_TARGET = request.param
    try:
        return table, _write(table)
    finally:
        encode_miniblock.DEFAULT_CHUNK_TARGET = saved


@pytest.fixture
def placed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Chunks read by the threaded path (each call's count), with 3 threads, groups of
    100 kB inflated (a few of the file's 64 KiB chunks) and no size threshold."""
    calls: list[int] = []
    original = compressive._lz4_variable

    def counted(var, buf, counts, where):
        out = original(var, buf, counts, where)
        if out is not None:
            calls.append(int(counts.size))
        return out

    monkeypatch.setattr(compressive, "_lz4_variable", counted)
    monkeypatch.setattr(compressive, "LZ4_STRINGS_MIN_BYTES", 0)
    monkeypatch.setattr(compressive, "LZ4_GROUP_BYTES", 100_000)
    monkeypatch.setattr(parallel, "threads", lambda: 3)
    return calls


def test_threaded_lz4_strings_match_the_general_path(written, placed, monkeypatch) -> None:
    table, data = written
    kinds = [{p.mini_block_layout.value_compression.WhichOneof("compression") for p in col}
             for col in page_layouts(data)]  # fmt: skip
    assert kinds[0] == kinds[2] == {"general"} and len(page_layouts(data)[0]) > 1, kinds
    fast = _read(data, table.schema)
    assert placed and sum(placed) > 3 * len(placed)  # many chunks, several groups each
    monkeypatch.setattr(compressive, "LZ4_STRINGS_MIN_BYTES", 1 << 62)
    calls = len(placed)
    general = _read(data, table.schema)
    assert len(placed) == calls  # the general path this time
    assert fast.equals(general) and fast.equals(table)
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def _chunks(strings: list[list[bytes]], pad: list[int]) -> tuple[ChunkBuffers, np.ndarray]:
    """LZ4 chunks (offsets, bytes, ``pad`` bytes of padding), 8 bytes apart in one buffer."""
    packed = []
    for chunk, extra in zip(strings, pad, strict=True):
        ends = np.cumsum([0] + [len(s) for s in chunk]) + 4 * (len(chunk) + 1)
        body = ends.astype("<u4").tobytes() + b"".join(chunk) + b"\0" * extra
        packed.append(deflate(1, body))
    raw, pos = b"", []
    for piece in packed:
        pos.append(len(raw))
        raw += piece + b"\x07" * 8
    sizes = np.array([len(p) for p in packed])
    counts = np.array([len(c) for c in strings])
    return ChunkBuffers(np.frombuffer(raw, np.uint8), np.array(pos), sizes), counts


_VAR = pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))


@pytest.fixture
def groups_inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Chunks in each group inflated by one codec call (groups of ~1 kB)."""
    sizes: list[int] = []
    original = lz4_frames.FrameGroups.inflate

    def counted(self, g):
        out = original(self, g)
        sizes.append(self._bounds[g + 1] - self._bounds[g])
        return out

    monkeypatch.setattr(lz4_frames.FrameGroups, "inflate", counted)
    monkeypatch.setattr(compressive, "LZ4_GROUP_BYTES", 1000)
    return sizes


@pytest.mark.parametrize("aligned", [True, False])
def test_lz4_chunks_placed_as_inflated_equal_the_pieces_path(placed, groups_inflated,
                                                             aligned) -> None:  # fmt: skip
    rng = np.random.default_rng(7)
    strings = [[rng.bytes(int(k)) for k in rng.integers(0, 20, int(c))]
               for c in rng.integers(1, 40, 25)]  # fmt: skip
    pads = [int(p) for p in rng.integers(0, 4, 25)]
    if aligned:  # every chunk a whole number of offsets: they are read in place
        pads = [-sum(map(len, c)) % 4 for c in strings]
    buf, counts = _chunks(strings, pads)
    block = compressive._lz4_variable(_VAR, buf, counts, "t")
    assert block is not None and placed == [25]
    assert sum(groups_inflated) == 25 and len(groups_inflated) > 3  # several in a group
    pieces = [inflate(1, buf.raw[a : a + n], "t") for a, n in zip(buf.pos, buf.sizes, strict=True)]
    general = compressive._variable_pieces(_VAR, pieces, counts, "t")
    assert block.n == general.n == int(counts.sum())
    np.testing.assert_array_equal(block.offsets, general.offsets)
    np.testing.assert_array_equal(block.data, general.data)
    got = [bytes(block.data[a:b]) for a, b in zip(block.offsets[:-1], block.offsets[1:],
                                                   strict=True)]  # fmt: skip
    assert got == [s for c in strings for s in c]


def test_lz4_chunks_of_few_string_bytes_are_gathered_like_long_ones(placed,
                                                                   groups_inflated) -> None:
    """Chunks whose strings hold 0 to 13 bytes in all (held in their binary view up to
    12, see memory.byte_views) among longer ones, over several groups: the strings back."""
    rng = np.random.default_rng(9)
    strings = [[b""], [b"", b""], [b"abcdefghijkl"], [b"abcdefghijklm"], [b"x", b"yz"],
               [rng.bytes(300), b""], [b"", b"123456789012"], [rng.bytes(13)]] * 12
    buf, counts = _chunks(strings, [-sum(map(len, c)) % 4 for c in strings])
    block = compressive._lz4_variable(_VAR, buf, counts, "t")
    assert block is not None and placed == [len(strings)] and len(groups_inflated) > 3
    got = [bytes(block.data[a:b]) for a, b in zip(block.offsets[:-1], block.offsets[1:],
                                                   strict=True)]  # fmt: skip
    assert got == [s for c in strings for s in c]


def test_lz4_chunks_with_a_lying_prefix_or_offsets_are_refused(placed) -> None:
    strings = [[b"abc", b"", b"de"]] * 10
    buf, counts = _chunks(strings, [0] * 10)
    raw = buf.raw.copy()
    at = int(buf.pos[6])
    raw[at : at + 4] = np.frombuffer(np.uint32(18).tobytes(), np.uint8)  # 21 bytes inflated
    with pytest.raises(FormatError, match="t"):
        compressive._lz4_variable(_VAR, ChunkBuffers(raw, buf.pos, buf.sizes), counts, "t")
    raw[at : at + 4] = np.frombuffer(np.uint32(29).tobytes(), np.uint8)  # 8 bytes too many
    with pytest.raises(FormatError, match="t"):
        compressive._lz4_variable(_VAR, ChunkBuffers(raw, buf.pos, buf.sizes), counts, "t")
    raw[at : at + 4] = np.frombuffer(np.uint32(25).tobytes(), np.uint8)  # and the next 4 short
    nxt = int(buf.pos[7])
    raw[nxt : nxt + 4] = np.frombuffer(np.uint32(17).tobytes(), np.uint8)
    with pytest.raises(FormatError, match="offsets point outside"):
        compressive._lz4_variable(_VAR, ChunkBuffers(raw, buf.pos, buf.sizes), counts, "t")
    raw[nxt : nxt + 4] = np.frombuffer(np.uint32(21).tobytes(), np.uint8)
    raw[at : at + 4] = np.frombuffer(np.uint32(3).tobytes(), np.uint8)  # too small: general
    assert compressive._lz4_variable(_VAR, ChunkBuffers(raw, buf.pos, buf.sizes), counts,
                                     "t") is None  # fmt: skip
    buf, counts = _chunks(strings, [0] * 10)
    counts[-1] = 2  # the last chunk claims fewer strings than its offsets hold
    with pytest.raises(FormatError, match="t"):
        compressive._lz4_variable(_VAR, buf, counts, "t")
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_lz4_prefixes_claiming_more_than_their_bytes_size_no_output(monkeypatch) -> None:
    """Chunks of 6 bytes each claiming 4 MiB (what a frame's block may hold): refused
    before the claims size the output (they asked 16 GiB of it from 24 kB before)."""
    k = 4000
    chunk = (4 << 20).to_bytes(4, "little") + b"\0\0"
    buf = ChunkBuffers(np.frombuffer(chunk * k, np.uint8), np.arange(k) * 6, np.full(k, 6))
    asked: list[int] = []
    allocate = compressive.pool_bytes
    monkeypatch.setattr(compressive, "pool_bytes", lambda n: (asked.append(n), allocate(n))[1])
    with pytest.raises(FormatError, match="claims more bytes than it can inflate to"):
        compressive._lz4_variable(_VAR, buf, np.ones(k, np.int64), "t")
    assert max(asked, default=0) <= 255 * buf.raw.size + 64


def test_pylance_lz4_string_pages_read_by_groups_equal_the_general_path(tmp_path, placed,
                                                                        monkeypatch) -> None:
    """pylance's own LZ4 string pages (metadata-asked) go through the grouped path too."""
    lance = pytest.importorskip("lance")
    table = _table(60_000, seed=4).select(["s", "b"])
    schema = pa.schema([f.with_metadata({"lance-encoding:compression": "lz4"})
                        for f in table.schema])  # fmt: skip
    uri = str(tmp_path / "theirs.lance")
    lance.write_dataset(table.cast(schema), uri)
    fast = lance_sql.dataset(uri).to_table()
    assert placed and sum(placed) > len(placed)  # pylance's chunks, several a page
    monkeypatch.setattr(compressive, "LZ4_STRINGS_MIN_BYTES", 1 << 62)
    calls = len(placed)
    general = lance_sql.dataset(uri).to_table()
    assert len(placed) == calls
    assert fast.equals(general) and fast.cast(table.schema).equals(table)
