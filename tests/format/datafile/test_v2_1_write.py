"""Our Lance 2.1 files: within 2.1's grammar (pylance checks it as it opens a file: no
large mini-block chunks, no inline constants), read row for row by pylance and by us."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, NULL_MODES, table_of
from google.protobuf import any_pb2
from test_v2_read import special_table
from test_v2_write import roundtrip
from v2_helpers import census, page_layouts

from lance_sql.format.datafile import container
from lance_sql.format.pb import encodings_v2_1_pb2 as e21
from lance_sql.format.pb import file2_pb2

pytest.importorskip("lance.file")  # pylance reads what we write

SMALL_PAGES = {"page_bytes": 16 * 1024, "max_page_bytes": 64 * 1024}


def _within_2_1_grammar(data: bytes) -> None:
    for pages in page_layouts(data):
        for layout in pages:
            if isinstance(layout, str):
                continue
            kind = layout.WhichOneof("layout")
            if kind == "mini_block_layout":
                assert not layout.mini_block_layout.has_large_chunk
            if kind == "constant_layout":
                assert not layout.constant_layout.HasField("inline_value")
                assert not layout.constant_layout.HasField("rep_compression")
                assert not layout.constant_layout.HasField("def_compression")


def _roundtrip(tmp_path, table: pa.Table, **kw) -> bytes:
    data = roundtrip(tmp_path, table, version="2.1", **kw)
    _within_2_1_grammar(data)
    return data


@pytest.mark.parametrize("mode", NULL_MODES)
def test_every_kind_round_trips_through_pylance(tmp_path, mode: str) -> None:
    table = table_of(ALL_KINDS, 3000, mode, seed=21)
    seen = census(_roundtrip(tmp_path, table, batch_rows=700, **SMALL_PAGES))
    assert seen["mini_block_layout"] > len(ALL_KINDS) or mode == "all"


def test_special_shapes_round_trip_through_pylance(tmp_path) -> None:
    table = special_table(2000)
    keep = [f.name for f in table.schema  # packed structs and blobs are not writable
            if not {b"lance-encoding:packed", b"lance-encoding:blob"} & set(f.metadata or {})]
    keep = [n for n in keep if not pa.types.is_map(table.schema.field(n).type)]  # 2.2 only
    seen = census(_roundtrip(tmp_path, table.select(keep)))
    for kind in ("mini_block_layout", "full_zip_layout", "page_dictionary",
                 "inline_bitpacking", "fixed_size_list", "variable"):  # fmt: skip
        assert seen[kind], f"our writer never used {kind}: {seen}"


def test_repeated_values_go_to_mini_blocks_not_inline_constants(tmp_path) -> None:
    n = 5000
    table = pa.table({"i": pa.array(np.full(n, 7)), "f": pa.array(np.full(n, 1.5)),
                      "b": pa.array([True] * n), "s": pa.array(["same"] * n),
                      "none": pa.array([None] * n, pa.int64())})
    seen = census(_roundtrip(tmp_path, table))
    assert seen["constant_layout"] == 1  # the all-null column only
    assert seen["mini_block_layout"] == 4


def test_chunks_stay_within_the_small_framing(tmp_path) -> None:
    """Chunk sizes live in u16s in 2.1: strings that do not compress, asked to be
    compressed, and long lists still fit (or fall back to full-zip pages)."""
    rng = np.random.default_rng(5)
    n = 6000

    def random_text(lo: int, hi: int) -> list[str]:
        return [rng.bytes(int(k)).hex()[: int(k)] for k in rng.integers(lo, hi, n)]

    def asks(name: str, codec: str) -> pa.Field:
        return pa.field(name, pa.string(), metadata={"lance-encoding:compression": codec})

    schema = pa.schema([asks("lz4", "lz4"), asks("zstd", "zstd"), asks("fsst", "fsst"),
                        pa.field("plain", pa.string()), pa.field("l", pa.list_(pa.int64())),
                        pa.field("v", pa.list_(pa.float64(), 30))])
    table = pa.table([
        random_text(200, 256), random_text(100, 256),
        [f"https://example.com/{int(k)}/page" for k in rng.integers(0, 1 << 30, n)],
        random_text(0, 255),
        [list(range(int(k))) for k in rng.integers(0, 60, n)],
        pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 30)), 30),
    ], schema=schema)
    data = _roundtrip(tmp_path, table)
    assert census(data)["general"] >= 2  # the asked-for compression was used
    chunked = 0
    for buf0, buf1 in _mini_block_chunk_buffers(data):
        words = np.frombuffer(buf0, "<u2")  # one u16 a chunk, each (8-byte words - 1) << 4
        assert int((((words >> 4).astype(np.int64) + 1) * 8).sum()) == len(buf1)
        chunked += words.size
    assert chunked > 100


def _mini_block_chunk_buffers(data: bytes) -> list[tuple[bytes, bytes]]:
    """(chunk metadata, chunks) of every mini-block page of the file."""
    out = []
    footer = container.parse_footer(data[-container.FOOTER_SIZE:], len(data), "x")
    cms = footer.column_meta_start
    region = memoryview(data[cms : len(data) - container.FOOTER_SIZE])
    for pos, length in container.read_offset_table(
            region, footer.cmo_table_start - cms, footer.num_columns, len(data), "column", "x"):
        meta = file2_pb2.ColumnMetadata()
        meta.ParseFromString(data[pos : pos + length])
        for page in meta.pages:
            wrapped = any_pb2.Any()
            wrapped.ParseFromString(page.encoding.direct.encoding)
            layout = e21.PageLayout()
            layout.ParseFromString(wrapped.value)
            if layout.WhichOneof("layout") == "mini_block_layout":
                (a, b), (n, m) = page.buffer_offsets[:2], page.buffer_sizes[:2]
                out.append((data[a : a + n], data[b : b + m]))
    return out
