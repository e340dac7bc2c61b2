"""The binary search of a sorted string / binary run in the file (one page of a BTREE
index's values, ``point.search_sorted`` with a ``bytes`` key) gives the rows a search of
the decoded run gives: plain, LZ4 and ZSTD chunks (lance_sql's writer), FSST ones
(pylance's); strings, large strings and binaries; empty values, non-ASCII text, NUL and
0xFF bytes, repeated values across chunk edges; keys present, between values, before the
first and after the last; runs at chunk and page edges."""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import write_sorted_runs_file

from lance_sql.format.datafile import BytesSource, LanceFileReader, point
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile.miniblock import MiniBlockPage

N = 12_000
COMPRESSIONS = ("none", "lz4", "zstd")


def _sorted_values(rng: np.random.Generator) -> list[bytes]:
    """N byte strings in byte order: repeated ids, empty values, non-ASCII text and
    prefixes of one another."""
    # mostly distinct (a column of few distinct values is dictionary-encoded: declined),
    # with runs of repeats, some longer than a chunk
    ids = [f"k{int(i):07d}".encode() for i in rng.choice(10 * N, N - 1500, replace=False)]
    ids += [b"k0500000"] * 700 + [b"k0900000"] * 3 + [f"k{int(i):07d}".encode()
                                                     for i in rng.integers(0, 10 * N, 797)]
    odd = ["", "", "", "a", "ab", "a\x01", "é", "éa", "é\u00ff", "日本", "日本語", "z",
           "\u00ff", "\U0001f600", "k", "k000000", "k0000005", "~", " ", "Ω"]
    values = ids + [s.encode() for s in odd] * 2
    return sorted(values)[:N]


def _binary_values(rng: np.random.Generator) -> list[bytes]:
    raw = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 6, N)]
    return sorted(raw + [b"", b"\x00", b"\x00\x00", b"\xff", b"\xff\xff\xff"])[:N]


def _table(compression: str) -> pa.Table:
    rng = np.random.default_rng(13)
    strings = _sorted_values(rng)
    meta = {"lance-encoding:compression": compression}
    return pa.Table.from_arrays(
        [pa.array([v.decode() for v in strings], pa.string()),
         pa.array([v.decode() for v in strings], pa.large_string()),
         pa.array(_binary_values(rng), pa.binary())],
        schema=pa.schema([pa.field("s", pa.string(), metadata=meta),
                          pa.field("ls", pa.large_string(), metadata=meta),
                          pa.field("b", pa.binary(), metadata=meta)]))


@pytest.fixture(scope="module",
                params=[("2.1", "none"), *(("2.2", c) for c in COMPRESSIONS)])
def written(request, tmp_path_factory) -> tuple[LanceFileReader, pa.Table, str, str]:
    version, compression = request.param
    table = _table(compression)
    data = write_sorted_runs_file(table, version, tmp_path_factory.mktemp("sorted_bytes"))
    return LanceFileReader(BytesSource(data)), table, version, compression


def _runs(reader: LanceFileReader, index: int) -> list[tuple[int, int]]:
    starts = reader._columns[index].row_starts
    runs = [(0, 1), (0, 4096), (1000, 1100), (1023, 1025), (N - 4096, N), (N - 1, N)]
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        runs += [(a, min(b, a + 4096)), (max(a, b - 4096), b), (a, b)]
    return [(a, b) for a, b in runs if 0 <= a < b <= N]


def _keys(run: list[bytes], rng: np.random.Generator) -> set[bytes]:
    picked = {run[0], run[-1], run[len(run) // 2],
              *(run[int(i)] for i in rng.integers(0, len(run), 6))}
    # just above each (a NUL appended), just below a non-empty one (its last byte cut)
    near = {k + b"\x00" for k in picked} | {k[:-1] for k in picked if k}
    return picked | near | {b"", b"\x00", b"\xff\xff\xff\xff", "é".encode(), b"k5"}


def _kind(reader: LanceFileReader, index: int, start: int) -> str:
    field = reader.schema.fields[index]
    column = reader._leaf_column(index, field, field.arrow_type)
    p = int(np.searchsorted(column.info.row_starts, start, "right")) - 1
    page = column.page(p)
    if not isinstance(page, MiniBlockPage):
        return type(page).__name__
    enc = page.layout.value_compression
    return cz.kind(enc) if cz.kind(enc) != "general" else \
        f"general({int(enc.general.compression.scheme)})"


def test_bytes_search_equals_a_search_of_the_decoded_run(written) -> None:
    reader, table, version, compression = written
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    rng = np.random.default_rng(8)
    answered, kinds = 0, set()
    before = point.SORTED_BYTES_SEARCHES[0]
    for index, field in enumerate(reader.schema.fields):
        column = table.column(field.name).combine_chunks()
        values = [v.encode() if isinstance(v, str) else v for v in column.to_pylist()]
        assert values == sorted(values)  # byte order: what the search relies on
        for a, b in _runs(reader, index):
            run = values[a:b]
            for key in sorted(_keys(run, rng)):
                got = reader.search_sorted(field, colmap, a, b, key)
                if got is None:  # a run leaving its page: the caller decodes it
                    continue
                answered += 1
                kinds.add(_kind(reader, index, a))
                assert got == (a + bisect.bisect_left(run, key),
                               a + bisect.bisect_right(run, key)), (field.name, a, b, key)
    assert answered > 500
    assert point.SORTED_BYTES_SEARCHES[0] == before + answered
    # the encoding asked for was searched (pylance FSST-encodes the strings)
    expected = "fsst" if version == "2.1" else {
        "none": "variable", "lz4": "general(1)", "zstd": "general(2)"}[compression]
    assert expected in kinds, kinds


def test_bytes_search_declines_what_it_cannot_search(tmp_path: Path) -> None:
    """A page with nulls (def levels), a dictionary-encoded page, a run leaving its page,
    a column of numbers: None (the caller decodes the run)."""
    table = pa.table({"s": pa.array([None] + [f"{i:04d}" for i in range(1, 5000)]),
                      "d": pa.array(sorted(f"v{i % 7}" for i in range(5000))),
                      "f": pa.array(np.arange(5000, dtype=np.float64))})
    reader = LanceFileReader(BytesSource(write_sorted_runs_file(table, "2.2", tmp_path)))
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    page = reader._leaf_column(1, reader.schema.fields[1], pa.string()).page(0)
    assert isinstance(page, MiniBlockPage)
    page.load()
    assert page.dictionary is not None  # what the test is about
    for field in reader.schema.fields:
        assert reader.search_sorted(field, colmap, 0, 100, b"v3") is None
    long = pa.table({"s": pa.array([f"{i:06d}" for i in range(40_000)])})
    reader = LanceFileReader(BytesSource(write_sorted_runs_file(long, "2.2", tmp_path)))
    starts = reader._columns[0].row_starts
    assert starts.size > 2
    edge = int(starts[1])  # a run across the first page's end
    assert reader.search_sorted(reader.schema.fields[0], {reader.schema.fields[0].id: 0},
                                edge - 10, edge + 10, b"000005") is None


def test_bytes_search_of_a_corrupt_chunk_is_a_format_error(tmp_path: Path) -> None:
    from lance_sql.errors import FormatError

    table = pa.table({"s": pa.array([f"{i:06d}" for i in range(5000)])})
    data = bytearray(write_sorted_runs_file(table, "2.2", tmp_path))
    reader = LanceFileReader(BytesSource(bytes(data)))
    field = reader.schema.fields[0]
    column = reader._leaf_column(0, field, pa.string())
    page = column.page(0)
    assert isinstance(page, MiniBlockPage)
    page.load()
    assert point.search_sorted(column, 0, 4096, b"000100") == (100, 101)
    # the first chunk's first string offset, pointed past its chunk
    head = (2 + (4 if page.large else 2) + 7) & ~7
    at = page.buffers[1][0] + int(page.chunk_offsets[0]) + head
    data[at : at + 4] = (0xFFFFFF00).to_bytes(4, "little")
    broken = LanceFileReader(BytesSource(bytes(data)))
    with pytest.raises(FormatError):
        broken.search_sorted(broken.schema.fields[0], {field.id: 0}, 0, 4096, b"")


def test_every_value_read_alone_equals_the_column(written) -> None:
    """Each value as the search reads it (located in its chunk, inflated / expanded
    alone: FSST escapes included; or its chunk decoded whole) equals the column's value,
    on every page."""
    reader, table, _, _ = written
    for index, field in enumerate(reader.schema.fields):
        column = reader._leaf_column(index, field, field.arrow_type)
        values = [v.encode() if isinstance(v, str) else v
                  for v in table.column(field.name).to_pylist()]
        starts = column.info.row_starts.tolist()
        for p in range(len(starts) - 1):
            page = column.page(p)
            assert isinstance(page, MiniBlockPage)
            page.load()
            value = point._ChunkBytes.of(page, 0, page.chunk_sizes.size - 1)
            got = [value(r) for r in range(starts[p + 1] - starts[p])]
            assert got == values[starts[p] : starts[p + 1]], (field.name, p)
            # the chunks decoded whole instead (the way of encodings whose values
            # cannot be located in their chunk, e.g. FSST under LZ4): the same values
            whole = point._ChunkBytes.of(page, 0, page.chunk_sizes.size - 1)
            whole.plain, whole.symbols = False, None
            assert [whole(r) for r in range(len(got))] == got, (field.name, p)
