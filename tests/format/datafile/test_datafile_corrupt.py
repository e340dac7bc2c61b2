"""Bad bytes always give FormatError naming the file, never another exception or a hang."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import (
    assert_tables,
    colmap,
    rewrite_metadata,
    set_page_encoding,
    table_of,
    write_ours,
)
from google.protobuf import any_pb2

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import BytesSource, LanceFileReader
from lance_sql.format.datafile.container import FOOTER_SIZE
from lance_sql.format.pb import encodings_v2_0_pb2 as enc

PATH = "bad/file.lance"
KINDS = [
    "int32", "bool", "string", "string_lowcard", "dict_string", "fsl_f32", "list_int32",
    "struct", "list_struct", "large_binary",
]  # fmt: skip


@pytest.fixture(scope="module")
def good():
    table = table_of(KINDS, 150, "some", seed=31)
    data, schema, written = write_ours(table, page_bytes=500, max_page_bytes=1000)
    return table, data, schema, colmap(written)


def _load(data: bytes, schema, cmap):
    reader = LanceFileReader(BytesSource(data, PATH))
    full = pa.table(reader.read(schema.fields, cmap), schema=schema.to_arrow())
    rows = np.array([149, 0, 77, 77, 3])
    taken = pa.table(reader.take(schema.fields, cmap, rows), schema=schema.to_arrow())
    return full, taken


def _check(good, data: bytes) -> str:
    """'error' if a FormatError naming the file was raised, 'ok' if the values are right."""
    table, _, schema, cmap = good
    try:
        full, taken = _load(data, schema, cmap)
    except FormatError as exc:
        assert PATH in str(exc), str(exc)
        return "error"
    assert_tables(full, table)
    assert_tables(taken, table.take(pa.array([149, 0, 77, 77, 3])))
    return "ok"


def test_good_file_reads(good) -> None:
    assert _check(good, good[1]) == "ok"


def test_truncated_everywhere(good) -> None:
    data = good[1]
    cuts = sorted(set(range(0, len(data), 97)) | set(range(max(0, len(data) - 3000), len(data))))
    for cut in cuts:
        assert _check(good, data[:cut]) == "error", cut
    for cut in range(1, 4000, 61):  # bytes missing at the start instead
        assert _check(good, data[cut:]) == "error", cut


def _descriptor_start(data: bytes) -> int:
    """Where global buffer 0 (the FileDescriptor) starts; the metadata follows it."""
    _, _, gbo, *_ = struct.unpack_from("<QQQIIHH4s", data, len(data) - FOOTER_SIZE)
    return struct.unpack_from("<Q", data, gbo)[0]


@pytest.mark.slow
def test_flipped_bytes_in_footer_and_metadata(good) -> None:
    data = good[1]
    start = _descriptor_start(data)
    outcomes = {"error": 0, "ok": 0}
    masks = (0xFF, 0x01, 0x10)
    for pos in range(start, len(data)):
        # every byte flipped, the flips taking turns (all three at every byte cost ~3x
        # the suite time for the same bytes covered)
        bad = bytearray(data)
        bad[pos] ^= masks[pos % len(masks)]
        outcomes[_check(good, bytes(bad))] += 1
    assert outcomes["error"] > outcomes["ok"] > 0  # some flips hit unused fields (priority)


def _column(good, name: str) -> int:
    return good[3][good[2].field(name).id]


def _first_page(metas, col):
    return metas[col].pages[0]


def test_buffer_past_end(good) -> None:
    col = _column(good, "int32")

    def mutate(metas):
        _first_page(metas, col).buffer_offsets[0] = 10**9

    with pytest.raises(FormatError, match="past the data region"):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


def test_negative_buffer_size(good) -> None:
    col = _column(good, "string")

    def mutate(metas):
        _first_page(metas, col).buffer_sizes[1] = 2**64 - 8  # -8 as u64

    with pytest.raises(FormatError):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


def test_buffer_size_mismatch(good) -> None:
    col = _column(good, "int32")

    def mutate(metas):
        _first_page(metas, col).buffer_sizes[-1] -= 4

    with pytest.raises(FormatError, match="expected"):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("struct", "has 151 rows but the file descriptor says 150"),  # top level: at open
        ("struct.a", "has 151 values where 150 were expected"),  # a child: when read
    ],
)
def test_page_length_wrong(good, name: str, message: str) -> None:
    col = _column(good, name)

    def mutate(metas):
        _first_page(metas, col).length += 1

    with pytest.raises(FormatError, match=message):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


def _patch_buffer(good, name: str, buffer: int, patch) -> bytes:
    """Apply ``patch(numpy view)`` to a page buffer of the first page of column ``name``."""
    data = bytearray(good[1])
    reader = LanceFileReader(BytesSource(bytes(data)))
    offset, size = reader._columns[_column(good, name)].pages[0].buffers[buffer]
    patch(np.frombuffer(memoryview(data)[offset : offset + size], dtype=np.uint8))
    return bytes(data)


def test_binary_offsets_decreasing(good) -> None:
    def patch(raw):
        ends = raw.view(np.uint64)
        ends[3], ends[4] = ends[4] + 1, ends[3]

    bad = _patch_buffer(good, "string", 0, patch)
    with pytest.raises(FormatError, match="decreasing|past the end"):
        _load(bad, good[2], good[3])


def test_binary_offsets_past_data(good) -> None:
    def patch(raw):
        raw.view(np.uint64)[5] = 2**40

    with pytest.raises(FormatError, match="past the end|decreasing"):
        _load(_patch_buffer(good, "string", 0, patch), good[2], good[3])


def test_list_offsets_past_items(good) -> None:
    def patch(raw):
        raw.view(np.uint64)[-1] += 1000

    with pytest.raises(FormatError):
        _load(_patch_buffer(good, "list_int32", 0, patch), good[2], good[3])


@pytest.mark.parametrize("name", ["string_lowcard", "dict_string"])
def test_dictionary_index_out_of_range(name: str) -> None:
    table = table_of([name], 300, "some", seed=3)
    data, schema, written = write_ours(table)
    good = (table, data, schema, colmap(written))
    assert LanceFileReader(BytesSource(data))._columns[0].pages[0].encoding.HasField("dictionary")

    def patch(raw):
        raw[:] = 0
        raw[0] = 200

    with pytest.raises(FormatError, match="out of range"):
        _load(_patch_buffer(good, name, 0, patch), schema, good[3])


def test_unknown_encoding_names_column(good) -> None:
    col = _column(good, "int32")

    def mutate(metas):
        page = _first_page(metas, col)
        encoding = enc.ArrayEncoding(
            bitpacked=enc.Bitpacked(
                compressed_bits_per_value=3, uncompressed_bits_per_value=32, buffer=enc.Buffer()
            )
        )
        del page.buffer_offsets[1:]
        del page.buffer_sizes[1:]
        set_page_encoding(page, encoding)

    with pytest.raises(UnsupportedFeatureError, match=rf"{PATH}: column {col} page 0.*bitpacked"):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


def test_other_page_layout_url(good) -> None:
    col = _column(good, "bool")

    def mutate(metas):
        page = _first_page(metas, col)
        any_msg = any_pb2.Any(type_url="/lance.encodings21.PageLayout", value=b"")
        page.encoding.direct.encoding = any_msg.SerializeToString()

    with pytest.raises(UnsupportedFeatureError, match="encodings21"):
        _load(rewrite_metadata(good[1], mutate), good[2], good[3])


@pytest.mark.parametrize(
    ("footer", "error", "message"),
    [
        ((0, 2), UnsupportedFeatureError, "legacy"),
        ((7, 9), UnsupportedFeatureError, "unknown Lance file format version 7.9"),
    ],
)
def test_versions(good, footer, error, message) -> None:
    data = bytearray(good[1])
    struct.pack_into("<HH", data, len(data) - 8, *footer)
    with pytest.raises(error, match=message) as info:
        LanceFileReader(BytesSource(bytes(data), PATH))
    assert PATH in str(info.value)


@pytest.mark.parametrize("footer", [(2, 1), (2, 2), (2, 3)])
def test_2_0_pages_under_a_newer_footer(good, footer) -> None:
    """A 2.1+ footer means 2.1 page layouts; 2.0 pages there are refused by name."""
    data = bytearray(good[1])
    struct.pack_into("<HH", data, len(data) - 8, *footer)
    reader = LanceFileReader(BytesSource(bytes(data), PATH))
    assert (reader.major, reader.minor) == footer
    leaf = next(f for f in reader.schema.fields if not f.children)
    with pytest.raises(UnsupportedFeatureError, match="lance.encodings.ArrayEncoding") as info:
        reader.read([leaf], {leaf.id: 0})
    assert PATH in str(info.value)


def test_tiny_and_empty_files() -> None:
    for data in (b"", b"LANC", bytes(39), bytes(40), bytes(100) + b"LANC"):
        with pytest.raises(FormatError, match=PATH):
            LanceFileReader(BytesSource(data, PATH))


@pytest.mark.slow
def test_flipped_bytes_in_a_pylance_file(tmp_path) -> None:
    lance_file = pytest.importorskip("lance.file")
    table = table_of(["int64", "string_lowcard", "list_struct", "fsl_f32"], 150, "some", seed=2)
    path = str(tmp_path / "p.lance")
    writer = lance_file.LanceFileWriter(path, table.schema, version="2.0")
    writer.write_batch(table)
    writer.close()
    with open(path, "rb") as f:
        data = f.read()
    reader = LanceFileReader(BytesSource(data))
    good = (table, data, reader.schema, {f.id: i for i, f in enumerate(reader.schema.walk())})
    assert _check(good, data) == "ok"
    for pos in range(_descriptor_start(data), len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        _check(good, bytes(bad))
