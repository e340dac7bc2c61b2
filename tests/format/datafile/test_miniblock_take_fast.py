"""``take`` fast paths of mini-block pages (2.1/2.2): chunk of a row by shift, word gathers.

Every take is compared with a full read plus Arrow indexing (and the source table), for
flat, bitpacked, nullable, string and dictionary columns; counters make sure the fast
paths actually ran, and forcing them off gives the same rows.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import assert_same

from lance_sql.errors import FormatError
from lance_sql.format.datafile import (
    BytesSource,
    LanceFileReader,
    LanceFileWriter,
    point,
    point_pages,
    sparse,
)
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import miniblock as mb
from lance_sql.format.datafile.compressive import ChunkBuffers
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.pb import encodings_v2_1_pb2 as pb
from lance_sql.format.schema import LanceSchema

N = 70_001  # not a multiple of any chunk size: the last chunk is partial
FIXED = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64")  # fmt: skip


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {}
    some_null = rng.random(n) < 0.25
    for name in FIXED:
        dt = np.dtype(name)
        if dt.kind == "f":
            vals = rng.standard_normal(n).astype(dt)
        else:
            info = np.iinfo(dt)
            vals = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        cols[name] = pa.array(vals)
        cols[f"{name}_null"] = pa.array(vals, mask=some_null)
    for bits in (8, 16, 32, 64):  # small values: inline bitpacked chunks
        dt = np.dtype(f"int{bits}")
        vals = rng.integers(0, 100, n).astype(dt)
        vals[rng.random(n) < 0.01] = np.iinfo(dt).max // 3  # a few wider chunks
        cols[f"packed{bits}"] = pa.array(vals)
        cols[f"packed{bits}_null"] = pa.array(vals, mask=some_null)
    lengths = rng.integers(0, 40, n)
    lengths[rng.random(n) < 0.002] = 250  # (under the full-zip size)
    lengths[n // 3 : n // 3 + 40] = 250  # a cluster of long strings: chunks of uneven counts
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    data = alphabet[rng.integers(0, alphabet.size, int(lengths.sum()))].tobytes().decode()
    offs = np.r_[0, np.cumsum(lengths)]
    strings = [data[a:b] for a, b in zip(offs[:-1], offs[1:], strict=True)]
    cols["string"] = pa.array(strings)
    cols["string_null"] = pa.array(strings, mask=some_null)
    cols["category"] = pa.array([f"cat-{i}" for i in rng.integers(0, 50, n)],
                                mask=some_null)  # fmt: skip
    table = pa.table(cols)
    # "string" stays plain 4 KiB chunks of uneven counts (the writer's default would zstd
    # these random letters into even 64 KiB chunks); "string_null" takes the default
    plain = table.schema.field("string").with_metadata({"lance-encoding:compression": "none"})
    return table.cast(table.schema.set(table.schema.get_field_index("string"), plain))


def _write(table: pa.Table, **kw) -> tuple[bytes, LanceSchema]:
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, version="2.2", **kw)
    writer.write_batch(table)
    writer.finish()
    return sink.getvalue(), schema


class Counters:
    def __init__(self) -> None:
        self.shift_rows = 0  # rows placed in chunks by shift
        self.search_rows = 0  # rows placed by searchsorted
        self.words = 0  # values gathered as whole words
        self.sparse = 0  # sparse (single value) decodes


@pytest.fixture
def counters(monkeypatch) -> Counters:
    c = Counters()
    row_chunks = mb.MiniBlockPage._row_chunks
    gather = sparse.gather_words
    decode_sparse = mb.MiniBlockPage._decode_sparse

    def counted_row_chunks(self, rows):
        if self.shift is None:
            c.search_rows += rows.size
        else:
            c.shift_rows += rows.size
        return row_chunks(self, rows)

    def counted_gather(*args):
        out = gather(*args)
        if out is not None:
            c.words += args[-1].size
        return out

    def counted_sparse(self, *args):
        c.sparse += 1
        return decode_sparse(self, *args)

    monkeypatch.setattr(mb.MiniBlockPage, "_row_chunks", counted_row_chunks)
    monkeypatch.setattr(sparse, "gather_words", counted_gather)
    monkeypatch.setattr(mb.MiniBlockPage, "_decode_sparse", counted_sparse)
    return c


@pytest.fixture(scope="module")
def written():
    table = _table(N)
    data, schema = _write(table, page_bytes=64 * 1024, max_page_bytes=256 * 1024)
    reader = LanceFileReader(BytesSource(data))
    fields = [c for f in reader.schema.fields for c in column_fields(f)]
    cmap = {f.id: i for i, f in enumerate(fields)}
    full = pa.table(reader.read(schema.fields, cmap), schema=schema.to_arrow())
    for name in table.column_names:
        assert_same(full.column(name), table.column(name), f"full read of {name}")
    page_starts = sorted({int(r) for col in reader._columns for r in col.row_starts[:-1]})
    assert len(page_starts) > 3  # several pages per column
    return table, data, schema, cmap, full, page_starts


def _check(written, rows, names=None) -> None:
    table, data, schema, cmap, full, _ = written
    rows = np.asarray(rows, np.int64)
    reader = LanceFileReader(BytesSource(data))
    fields = [f for f in schema.fields if names is None or f.name in names]
    got = reader.take(fields, cmap, rows)
    idx = pa.array(rows)
    for field, arr in zip(fields, got, strict=True):
        assert_same(arr, full.column(field.name).take(idx), f"take of {field.name}")
        assert_same(arr, table.column(field.name).take(idx), f"take of {field.name} (source)")


def _row_sets(page_starts: list[int]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    edges = np.array(page_starts)
    sets = [
        np.array([0]),
        np.array([N - 1]),
        np.array([N // 2]),
        np.arange(0, N, 100),  # every 100th: all chunks touched, one row each
        np.arange(37, N, 1000),
        np.r_[edges, edges[1:] - 1, N - 1],  # first and last row of every page
        np.r_[np.arange(0, N, 4096), np.arange(4095, N, 4096), np.arange(1023, N, 1024)],
        np.unique(np.r_[np.arange(0, N, 3000)[:, None] + np.arange(5)].clip(0, N - 1)),
        np.arange(N - 300, N),  # a dense run into the partial last chunk
        np.arange(10_000, 30_000),  # dense, across chunks and pages
        np.arange(0, N, 3),  # too dense for the sparse path
    ]
    for count in (1, 2, 17, 250, 3000):
        sets.append(np.sort(rng.choice(N, count, replace=False)))
    sets.append(rng.integers(0, N, 500))  # unsorted, with repeats
    return sets


def test_take_matches_full_read(written, counters: Counters) -> None:
    for rows in _row_sets(written[5]):
        _check(written, rows)
    assert counters.sparse > 0
    assert counters.shift_rows > 0
    assert counters.search_rows > 0  # the page of uneven string chunks
    assert counters.words > 0


def test_searchsorted_path_matches(written, counters: Counters, monkeypatch) -> None:
    """Without the shift (chunks of uneven sizes) rows are placed by searchsorted."""
    monkeypatch.setattr(mb, "_uniform_shift", lambda logs, values: None)
    for rows in _row_sets(written[5]):
        _check(written, rows)
    assert counters.shift_rows == 0 and counters.search_rows > 0
    assert counters.sparse > 0


def test_byte_gather_path_matches(written, monkeypatch) -> None:
    """With the word gather refused, the byte-matrix fallback gives the same values."""
    monkeypatch.setattr(sparse, "word_view", lambda raw, starts, nbytes: None)
    for rows in _row_sets(written[5])[:8]:
        _check(written, rows)


def test_unaligned_chunk_bytes(written, counters: Counters, monkeypatch) -> None:
    """Chunk bytes at an odd address: the word views are unaligned and still exact."""
    read_chunks = mb.MiniBlockPage._read_chunks

    def shifted(self, chunks, *coalesce):
        raw, starts = read_chunks(self, chunks, *coalesce)
        buf = np.zeros(raw.size + 1, np.uint8)[1:]
        buf[:] = raw
        assert buf.ctypes.data % 2 == 1
        return buf, starts

    monkeypatch.setattr(mb.MiniBlockPage, "_read_chunks", shifted)
    for rows in _row_sets(written[5])[:8]:
        _check(written, rows)
    assert counters.words > 0


def test_fixed_pages_have_a_shift(written) -> None:
    table, data, schema, cmap, *_ = written
    reader = LanceFileReader(BytesSource(data))
    seen = {}
    orig = mb.MiniBlockPage._load

    def spy(self):
        orig(self)
        seen[self.where] = self.shift

    mb.MiniBlockPage._load = spy
    try:
        reader.take(schema.fields, cmap, np.arange(0, N, 50))
    finally:
        mb.MiniBlockPage._load = orig
    assert seen and sum(s is not None for s in seen.values()) > len(seen) // 2


@pytest.mark.parametrize("n", [1, 5, 1023, 1024, 1025, 4096, 4097])
def test_small_pages(n: int) -> None:
    """Single-chunk pages, exact multiples of the chunk size and one row over."""
    table = _table(n, seed=n)
    data, schema = _write(table)
    reader = LanceFileReader(BytesSource(data))
    fields = [c for f in reader.schema.fields for c in column_fields(f)]
    cmap = {f.id: i for i, f in enumerate(fields)}
    full = pa.table(reader.read(schema.fields, cmap), schema=schema.to_arrow())
    rng = np.random.default_rng(n)
    for rows in ([0], [n - 1], [0, n - 1], np.unique(rng.integers(0, n, 3)), np.arange(n)):
        got = reader.take(schema.fields, cmap, np.asarray(rows))
        for field, arr in zip(schema.fields, got, strict=True):
            assert_same(arr, full.column(field.name).take(pa.array(rows)), field.name)


def test_pylance_v21_file(tmp_path, counters: Counters, monkeypatch) -> None:
    lance_file = pytest.importorskip("lance.file")
    # the general path's fast paths on a pylance file (scattered takes would otherwise go
    # through format/datafile/point.py, compared with this path in test_point_take.py)
    monkeypatch.setattr(point, "take_leaf", lambda *a, **k: None)
    monkeypatch.setattr(point_pages, "take_pages", lambda parts: None)
    n = 20_011
    table = _table(n, seed=3)
    path = tmp_path / "f.lance"
    with lance_file.LanceFileWriter(str(path), table.schema, version="2.1") as writer:
        for batch in table.to_batches(max_chunksize=6000):
            cols = [pa.concat_arrays([c, c.slice(0, 0)]) for c in batch.columns]
            writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=batch.schema))
    reader = LanceFileReader(BytesSource(path.read_bytes()))
    fields = [c for f in reader.schema.fields for c in column_fields(f)]
    cmap = {f.id: i for i, f in enumerate(fields)}
    top = reader.schema.fields
    full = reader.read(top, cmap)
    rng = np.random.default_rng(5)
    for rows in (np.arange(0, n, 97), np.sort(rng.choice(n, 40, replace=False)), [n - 1], [0]):
        got = reader.take(top, cmap, np.asarray(rows))
        for field, arr, whole in zip(top, got, full, strict=True):
            assert_same(arr, whole.take(pa.array(rows)), field.name)
            assert_same(arr, table.column(field.name).take(pa.array(rows)), field.name)
    assert counters.sparse > 0 and counters.shift_rows > 0 and counters.words > 0


# ---------------------------------------------------------------------- helpers directly
def test_uniform_shift() -> None:
    def shift(values):
        values = np.array(values, np.int64)
        logs = np.array([max(int(v).bit_length() - 1, 0) for v in values], np.int64)
        logs[-1] = 0  # the writer leaves the last chunk's log at 0
        return mb._uniform_shift(logs, values)

    assert shift([512, 512, 100]) == 9
    assert shift([512, 512, 512]) == 9
    assert shift([4096, 1]) == 12
    assert shift([700]) is not None  # one chunk: every row in chunk 0
    assert (np.arange(700) >> shift([700]) == 0).all()
    assert shift([512, 256, 100]) is None
    assert shift([256, 512, 100]) is None
    assert mb._uniform_shift(np.array([9, 9, 10]), np.array([512, 512, 1024])) is None
    assert mb._uniform_shift(np.array([9, 9]), np.array([512, 600])) is None
    assert mb._uniform_shift(np.zeros(0, np.int64), np.zeros(0, np.int64)) is None


def test_selected_index() -> None:
    chunks = np.array([3, 4, 5, 6])
    assert mb._selected_index(chunks, 10)(np.array([3, 6, 5])).tolist() == [0, 3, 2]
    chunks = np.array([0, 2, 7])
    assert mb._selected_index(chunks, 10)(np.array([7, 0, 2, 2])).tolist() == [2, 0, 1, 1]


@pytest.mark.parametrize("width", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_gather_words(width: int, offset: int) -> None:
    rng = np.random.default_rng(width * 10 + offset)
    mem = rng.integers(0, 256, 4000 + offset, dtype=np.uint8)
    raw = mem[offset:]  # odd addresses when offset > 0
    starts = np.array([8, 200, 1000, 2048]) + 3  # same remainder modulo every width
    chunk = rng.integers(0, 4, 300)
    pos = rng.integers(0, 100, 300)
    expected = raw[(starts[chunk] + pos * width)[:, None] + np.arange(width)].reshape(-1)
    got = sparse.gather_words(raw, starts, width, chunk, pos)
    if width == 3:
        assert got is None
        return
    assert got is not None and got.dtype == np.uint8
    assert np.array_equal(got, expected)
    if width > 1:  # starts at different remainders: no word view
        assert sparse.gather_words(raw, starts + np.array([0, 1, 0, 0]), width, chunk, pos) is None


def _flat_bufs(raw: np.ndarray, starts, sizes) -> list[ChunkBuffers]:
    return [ChunkBuffers(raw, np.array(starts), np.array(sizes))]


def _flat(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


@pytest.mark.parametrize("dtype", ["u1", "<i2", "<f4", "<i8", "<f8"])
def test_sparse_flat_decode(dtype: str) -> None:
    rng = np.random.default_rng(1)
    vals = [rng.integers(-100, 100, c).astype(dtype) for c in (16, 16, 9)]
    raw = np.concatenate([np.frombuffer(v.tobytes() + bytes(-v.nbytes % 8 + 8), np.uint8)
                          for v in vals])  # fmt: skip
    sizes = [v.nbytes for v in vals]
    starts = np.cumsum([0] + [s + (-s % 8) + 8 for s in sizes[:-1]])
    counts = np.array([16, 16, 9])
    chunk = np.array([0, 0, 1, 2, 2])
    pos = np.array([0, 15, 7, 0, 8])
    width = np.dtype(dtype).itemsize
    block = sparse.decode(_flat(8 * width), _flat_bufs(raw, starts, sizes), counts, chunk, pos, "x")
    got = block.data.view(dtype)
    assert got.tolist() == [vals[c][p] for c, p in zip(chunk, pos, strict=True)]
    with pytest.raises(FormatError, match="row past"):
        sparse.decode(_flat(8 * width), _flat_bufs(raw, starts, sizes), counts, np.array([2]),
                      np.array([9]), "x")  # fmt: skip
    short = [sizes[0], sizes[1], sizes[2] - width]
    with pytest.raises(FormatError, match="fewer bytes"):
        sparse.decode(_flat(8 * width), _flat_bufs(raw, starts, short), counts, np.array([2]),
                      np.array([8]), "x")  # fmt: skip


def _inline_chunks(values: np.ndarray, widths: list[int], bits: int):
    """Bitpacked 1024-value chunks (width word + block) back to back, 8-byte aligned."""
    dt = bp.dtype_for(bits)
    parts, starts, sizes = [], [], []
    at = 0
    for i, w in enumerate(widths):
        block = values[i * 1024 : (i + 1) * 1024].astype(dt)
        body = np.array([w], dt).tobytes() + bp.pack(block[None, :], w, bits).tobytes()
        parts.append(body + bytes(-len(body) % 8))
        starts.append(at)
        sizes.append(len(body))
        at += len(parts[-1])
    raw = np.frombuffer(b"".join(parts), np.uint8)
    return raw, np.array(starts), np.array(sizes)


def _inline(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits)
    )


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_sparse_inline_every_width(bits: int) -> None:
    rng = np.random.default_rng(bits)
    widths = list(range(bits + 1))
    values = np.zeros(1024 * len(widths), np.uint64)
    for i, w in enumerate(widths):
        hi = (1 << w) - 1
        chunk_vals = rng.integers(0, 2**63, 1024, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        chunk_vals &= np.uint64(hi)
        chunk_vals[:2] = [0, hi]
        values[i * 1024 : (i + 1) * 1024] = chunk_vals
    raw, starts, sizes = _inline_chunks(values, widths, bits)
    counts = np.full(len(widths), 1024)
    chunk = np.repeat(np.arange(len(widths)), 1024)
    pos = np.tile(np.arange(1024), len(widths))
    block = sparse.decode(_inline(bits), [ChunkBuffers(raw, starts, sizes)], counts, chunk, pos,
                          "x")  # fmt: skip
    assert np.array_equal(block.data.view(bp.dtype_for(bits)), values.astype(bp.dtype_for(bits)))
    # a few values, unaligned in memory
    mem = np.zeros(raw.size + 1, np.uint8)[1:]
    mem[:] = raw
    some = rng.integers(0, chunk.size, 50)
    block = sparse.decode(_inline(bits), [ChunkBuffers(mem, starts, sizes)], counts, chunk[some],
                          pos[some], "x")  # fmt: skip
    assert np.array_equal(block.data.view(bp.dtype_for(bits)),
                          values[some].astype(bp.dtype_for(bits)))  # fmt: skip


def test_sparse_inline_corrupt() -> None:
    bits = 16
    values = np.arange(2048, dtype=np.uint64) % 100
    raw, starts, sizes = _inline_chunks(values, [7, 7], bits)
    counts = np.array([1024, 1024])
    one = (np.array([1]), np.array([5]))

    def dec(raw, starts, sizes):
        return sparse.decode(_inline(bits), [ChunkBuffers(raw, starts, sizes)], counts, *one, "x")

    assert int(dec(raw, starts, sizes).data.view("<u2")[0]) == 1024 + 5 - 1000
    bad = raw.copy()
    bad[starts[1]] = 17  # width word over 16 bits
    with pytest.raises(FormatError, match="bit width"):
        dec(bad, starts, sizes)
    bad[starts[1]] = 8  # width no longer matches the chunk size
    with pytest.raises(FormatError, match="size does not match"):
        dec(bad, starts, sizes)
    with pytest.raises(FormatError, match="size does not match"):
        dec(raw, starts, np.array([sizes[0], 1]))
    with pytest.raises(FormatError, match="row past"):
        sparse.decode(_inline(bits), [ChunkBuffers(raw, starts, sizes)], counts, np.array([0]),
                      np.array([1024]), "x")  # fmt: skip
