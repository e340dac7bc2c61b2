"""Bad Lance 2.1/2.2 input: typed errors naming file and column, never a crash or a hang.

Targeted corruptions (truncated pages, chunk sizes past the buffer, bit widths over 64,
dictionary indices out of range, unsupported layouts) plus a few seconds of random byte
mutation over pylance-written files. ``bench/bench_file_v2.py --fuzz-seconds`` runs the
same fuzzer for longer.
"""

from __future__ import annotations

import random
import struct
import time

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import rewrite_metadata
from google.protobuf import any_pb2
from test_v2_read import special_table
from v2_helpers import open_ours, page_layouts, pylance_write

from lance_sql.errors import FormatError, LanceError, UnsupportedFeatureError
from lance_sql.format.datafile import BytesSource, LanceFileReader
from lance_sql.format.pb import encodings_v2_1_pb2 as e21

pytest.importorskip("lance")

PATH = "corrupt.lance"
FUZZ_SECONDS = 3.0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corrupt")
    out = {}
    for version in ("2.1", "2.2"):
        table = special_table(600, version)
        out[version] = pylance_write(tmp / f"{version}.lance", table, version, batch_rows=200,
                                     data_cache_bytes=16 * 1024)  # fmt: skip
    ints = pa.table({"i": pa.array(np.arange(5000, dtype=np.int64) * 7),
                     "s": pa.array([f"cat{i % 9}" for i in range(5000)])})  # fmt: skip
    out["ints"] = pylance_write(tmp / "ints.lance", ints, "2.2")
    return out


def _read_all(data: bytes) -> None:
    reader, cmap = open_ours(data, PATH)
    for field in reader.schema.fields:
        reader.read([field], cmap)
        reader.take([field], cmap, np.array([0, reader.num_rows - 1, 3]))


def _column_of(data: bytes, name: str) -> int:
    reader, cmap = open_ours(data, PATH)
    field = next(f for f in reader.schema.fields if f.name == name)
    return cmap[field.id if not field.children else field.children[0].id]


def _page_buffer(data: bytes, col: int, page: int, buf: int) -> tuple[int, int]:
    reader = LanceFileReader(BytesSource(data, PATH))
    return reader._columns[col].pages[page].buffers[buf]


def _mutate_layout(data: bytes, col: int, edit) -> bytes:
    def mutate(metas):
        page = metas[col].pages[0]
        any_msg = any_pb2.Any()
        any_msg.ParseFromString(page.encoding.direct.encoding)
        layout = e21.PageLayout()
        layout.ParseFromString(any_msg.value)
        edit(layout)
        any_msg.value = layout.SerializeToString()
        page.encoding.direct.encoding = any_msg.SerializeToString()

    return rewrite_metadata(data, mutate)


def _expect(data: bytes, error=FormatError, match: str | None = None) -> str:
    with pytest.raises(error, match=match) as info:
        _read_all(data)
    assert PATH in str(info.value)
    return str(info.value)


def test_good_files_read(files) -> None:
    for data in files.values():
        _read_all(data)


def test_truncated_files(files) -> None:
    data = files["2.2"]
    for cut in (1, 40, 41, 1000, len(data) // 2, len(data) - 100):
        with pytest.raises(FormatError, match=PATH):
            _read_all(data[: len(data) - cut])


def test_page_buffer_shorter_than_its_chunks(files) -> None:
    data = files["ints"]

    def mutate(metas):
        page = metas[0].pages[0]
        page.buffer_sizes[1] = page.buffer_sizes[1] // 2

    message = _expect(rewrite_metadata(data, mutate), match="chunk")
    assert "column 0" in message


def test_chunk_size_past_the_buffer(files) -> None:
    data = bytearray(files["ints"])
    off, _ = _page_buffer(bytes(data), 0, 0, 0)
    struct.pack_into("<I", data, off, (0xFFFF << 4) | 10)  # a huge first chunk
    _expect(bytes(data), match="chunk sizes add up")


def test_bit_width_over_64(files) -> None:
    data = bytearray(files["ints"])
    off, _ = _page_buffer(bytes(data), 0, 0, 1)
    struct.pack_into("<Q", data, off + 8, 65)  # the width word after the 8-byte chunk header
    _expect(bytes(data), match="bit width 65 over 64")


def test_dictionary_index_out_of_range(files) -> None:
    data = files["ints"]
    col = _column_of(data, "s")
    assert page_layouts(data)[col][0].mini_block_layout.HasField("dictionary")

    def edit(layout):
        layout.mini_block_layout.num_dictionary_items = 3

    # fewer items than the indices use: either the dictionary block or an index is wrong
    message = _expect(_mutate_layout(data, col, edit))
    assert f"column {col}" in message


def test_dictionary_items_out_of_range_by_index(files) -> None:
    data = bytearray(files["ints"])
    col = _column_of(bytes(data), "s")
    off, _ = _page_buffer(bytes(data), col, 0, 1)
    # first chunk: 8-byte header, the u32 width word (4 bits for 9 items), packed indices
    width = struct.unpack_from("<I", data, off + 8)[0]
    assert 0 < width < 8
    data[off + 12 : off + 12 + 128 * width] = b"\xff" * (128 * width)  # every index 2**w - 1
    message = _expect(bytes(data), match=r"dictionary index \d+ out of range \(9 items\)")
    assert f"column {col}" in message


def test_repetition_index_that_does_not_add_up(files) -> None:
    data = files["2.2"]
    col = _column_of(data, "lists")
    layout = page_layouts(data)[col][0].mini_block_layout
    patched = bytearray(data)
    off, size = _page_buffer(data, col, 0, len(_page_buffer_list(data, col)) - 1)
    assert layout.repetition_index_depth == 1 and size % 16 == 0
    struct.pack_into("<Q", patched, off, 10**9)
    _expect(bytes(patched), match="repetition index")


def _page_buffer_list(data: bytes, col: int):
    reader = LanceFileReader(BytesSource(data, PATH))
    return reader._columns[col].pages[0].buffers


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (lambda m: setattr(m, "num_buffers", 5), FormatError, "buffers per chunk"),
        (lambda m: m.value_compression.CopyFrom(e21.CompressiveEncoding(
            variable_packed_struct=e21.VariablePackedStruct())), UnsupportedFeatureError,
         "'variable_packed_struct' encoding"),
        (lambda m: m.layers.__setitem__(0, 2), FormatError, "innermost rep/def layer is a list"),
        (lambda m: m.value_compression.inline_bitpacking.__setattr__(
            "uncompressed_bits_per_value", 12), FormatError, "12-bit"),
    ],
)  # fmt: skip
def test_layout_edits(files, edit, error, match) -> None:
    data = files["ints"]
    _expect(_mutate_layout(data, 0, lambda layout: edit(layout.mini_block_layout)), error, match)


def test_planar_layout_is_refused_by_name(tmp_path) -> None:
    table = pa.table({"a": pa.array(np.arange(100)), "s": pa.array([str(i) for i in range(100)])})
    data = pylance_write(tmp_path / "v23.lance", table, "2.3")
    reader, cmap = open_ours(data, PATH)
    for i, field in enumerate(reader.schema.fields):
        with pytest.raises(UnsupportedFeatureError, match="PlanarLayout") as info:
            reader.read([field], cmap)
        assert f"column {i}" in str(info.value) and field.name in str(info.value)


def fuzz(
    datas: list[bytes], seconds: float, seed: int, min_cases: int = 0
) -> tuple[int, list[str]]:
    """Mutate random bytes, read everything; returns (cases, unexpected exception reprs).

    Runs for `seconds` and at least `min_cases` cases, so a loaded machine still fuzzes enough.
    """
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    cases, bad = 0, []
    while time.monotonic() < deadline or cases < min_cases:
        data = bytearray(rng.choice(datas))
        tail = rng.random() < 0.5  # metadata lives at the end
        for _ in range(rng.choice((1, 2, 4, 16))):
            lo = int(len(data) * 0.7) if tail else 0
            pos = rng.randrange(lo, len(data) - 40)
            if rng.random() < 0.5:
                data[pos] ^= 1 << rng.randrange(8)
            else:
                data[pos] = rng.randrange(256)
        try:
            _read_all(bytes(data))
        except LanceError:
            pass
        except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
            bad.append(f"{type(exc).__name__}: {exc}"[:300])
        cases += 1
    return cases, bad


def test_bounded_fuzz(files) -> None:
    cases, bad = fuzz(list(files.values()), FUZZ_SECONDS, seed=12345, min_cases=21)
    assert not bad, bad[:5]


@pytest.mark.parametrize("scheme", ["lz4", "zstd"])
def test_corrupt_compressed_buffer_of_a_2_0_file(tmp_path, monkeypatch, scheme: str) -> None:
    """A 2.0 page's whole-buffer compression (pylance's ``lance-encoding:compression``)
    with a damaged block is a FormatError (pyarrow reports a bad LZ4 block as a plain
    OSError), and a size prefix claiming far more than the page's expected bytes is
    refused before that much is allocated."""
    from lance_sql.format.datafile import decode_v2_0

    prefix = "<I" if scheme == "lz4" else "<Q"
    width = struct.calcsize(prefix)
    words = [f"word {i} " * (1 + i % 7) for i in range(3000)]
    schema = pa.schema([pa.field("s", pa.string(),
                                 metadata={"lance-encoding:compression": scheme})])
    data = pylance_write(tmp_path / f"{scheme}.lance", pa.table({"s": words}, schema=schema),
                         "2.0")
    seen: list[bytes] = []
    real = decode_v2_0._decompress

    def spied(ctx, scheme, raw, expect):
        seen.append(bytes(raw))
        return real(ctx, scheme, raw, expect)

    with monkeypatch.context() as m:
        m.setattr(decode_v2_0, "_decompress", spied)
        reader, cmap = open_ours(data)
        assert reader.read(reader.schema.fields, cmap)[0].to_pylist() == words
    raw = max(seen, key=len)  # the strings' bytes, compressed: the size, then the block
    at = data.index(raw)
    assert struct.unpack_from(prefix, raw)[0] > len(raw)  # compressed indeed

    def read(damaged: bytes) -> None:
        reader, cmap = open_ours(damaged, "bad.lance")
        reader.read(reader.schema.fields, cmap)

    block = bytearray(data)
    block[at + width : at + width + 64] = b"\xff" * 64  # (an LZ4 literal run past the end)
    with pytest.raises(FormatError, match="bad.lance"):
        read(bytes(block))
    claim = bytearray(data)
    claim[at : at + width] = struct.pack(prefix, 0xFFFF_FF00)  # ~4 GiB
    allocated: list[int] = []
    real_decompress = pa.decompress

    def counted(buf, decompressed_size=None, **kw):
        allocated.append(decompressed_size)
        return real_decompress(buf, decompressed_size=decompressed_size, **kw)

    monkeypatch.setattr(decode_v2_0.pa, "decompress", counted)
    with pytest.raises(FormatError, match="bad.lance"):
        read(bytes(claim))
    assert not allocated or max(allocated) < 1 << 20


@pytest.mark.parametrize("scheme", ["lz4", "zstd", "zstd-bare"])
def test_2_0_compressed_buffer_too_small_for_the_page_allocates_nothing(scheme: str) -> None:
    """A 2.0 page whose row count claims far more bytes than its compressed buffer can
    inflate to (the buffer's own prefix agreeing) is refused before the claim sizes the
    output: 1-3 GiB were allocated from a few bytes before."""
    from lance_sql.format.datafile import decode_v2_0

    expect = 1 << 30
    frame = pa.Codec("zstd").compress(b"abc", asbytes=True)
    raw = {"lz4": struct.pack("<I", expect) + b"\x10abc",
           "zstd": struct.pack("<Q", expect) + frame, "zstd-bare": frame}[scheme]
    ctx = decode_v2_0.PageContext(lambda a, n: b"", (), (), (), "page")
    pool = pa.default_memory_pool()
    before = pool.max_memory()
    with pytest.raises(FormatError, match="page: .*(claims|cannot hold)"):
        decode_v2_0._decompress(ctx, scheme.split("-")[0], memoryview(raw), expect)
    assert pool.max_memory() - before < 64 << 20


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_large_string_offset_past_2_63_is_a_format_error(tmp_path, version: str) -> None:
    """A 64-bit string offset of 2^63 or more in a mini-block chunk is a FormatError with
    no numpy warning on the way (uint64 words plus int64 bases once went through float64,
    warning "invalid value encountered in cast" before the check caught the offsets)."""
    strings = pa.array([f"{i:05d}" for i in range(50)], pa.large_string())
    field = pa.field("s", pa.large_string(), metadata={"lance-encoding:compression": "none"})
    data = bytearray(pylance_write(tmp_path / "big.lance",
                                   pa.table([strings], schema=pa.schema([field])), version))
    first = 51 * 8  # one chunk of 50 strings: 51 offsets, then the bytes
    at = bytes(data).find(struct.pack("<QQ", first + 5, first + 10))
    assert at > 0
    struct.pack_into("<Q", data, at, 0x8000_0000_0000_0000 | (first + 5))
    _expect(bytes(data), match="offsets")
