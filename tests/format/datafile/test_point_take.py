"""The point-take path (``format/datafile/point.py``): small takes of 2.1/2.2 leaf columns.

Every take is compared with the general path (the point path switched off) and with a
full read, over integer, float, string (plain and LZ4), binary, boolean, timestamp and
dictionary columns with and without nulls, rows at chunk and page edges and in several
pages, sorted or not, with repeats; files of format 2.0, 2.1 and 2.2 (2.0 has no point
path and must still agree). A counter checks the point path really answered.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import assert_same

from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.format.datafile import (
    BytesSource,
    LanceFileReader,
    LanceFileWriter,
    point,
    point_pages,
)
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.schema import LanceSchema

N = 50_003


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    some_null = rng.random(n) < 0.2
    ints = rng.integers(-(2**40), 2**40, n)
    small = rng.integers(0, 300, n).astype(np.int32)
    words = [f"key-{i}-{'x' * (i % 7)}" for i in rng.integers(0, 10**6, n)]
    return pa.table({
        "i64": pa.array(ints),
        "i32_null": pa.array(small, mask=some_null),
        "u8": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        "f64": pa.array(rng.standard_normal(n)),
        "f32_null": pa.array(rng.standard_normal(n).astype(np.float32), mask=some_null),
        "s": pa.array(words),
        "s_null": pa.array(words, mask=some_null),
        "s_lz4": pa.array([w * 4 for w in words]),
        "bin": pa.array([w.encode() for w in words], pa.binary()),
        "flag": pa.array(rng.random(n) < 0.5),
        "ts": pa.array(ints % 10**15, pa.timestamp("us")),
        "cat": pa.array([f"c{i}" for i in rng.integers(0, 20, n)], mask=some_null),
    })


def _schema(table: pa.Table) -> LanceSchema:
    fields = [f.with_metadata({"lance-encoding:compression": "lz4"}) if f.name == "s_lz4"
              else f for f in table.schema]
    return LanceSchema.from_arrow(pa.schema(fields))


def _write(table: pa.Table, version: str, tmp: Path) -> bytes:
    if version == "2.1":  # lance_sql writes 2.0 and 2.2; pylance writes 2.1
        import lance.file

        path = tmp / "f.lance"
        arrow = _schema(table).to_arrow()
        with lance.file.LanceFileWriter(str(path), arrow, version="2.1") as writer:
            for batch in table.to_batches(max_chunksize=20_000):
                writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=arrow))
        return path.read_bytes()
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, _schema(table), version=version, page_bytes=32 * 1024,
                             max_page_bytes=128 * 1024)
    for batch in table.to_batches(max_chunksize=20_000):
        writer.write_batch(pa.Table.from_batches([batch]))
    writer.finish()
    return sink.getvalue()


def _open(data: bytes) -> tuple[LanceFileReader, dict[int, int]]:
    reader = LanceFileReader(BytesSource(data))
    fields = [c for f in reader.schema.fields for c in column_fields(f)]
    if reader.major == 2 and reader.minor == 0:
        fields = list(reader.schema.walk())
    return reader, {f.id: i for i, f in enumerate(fields)}


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def written(request, tmp_path_factory):
    table = _table(N)
    data = _write(table, request.param, tmp_path_factory.mktemp("point"))
    reader, cmap = _open(data)
    full = pa.table(reader.read(reader.schema.fields, cmap), schema=reader.schema.to_arrow())
    for name in table.column_names:
        assert_same(full.column(name), table.column(name), f"full read of {name}")
    edges = sorted({int(r) for col in reader._columns for r in col.row_starts[1:-1]})
    return request.param, table, data, full, edges


def _row_sets(edges: list[int]) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    sets = [np.array([r]) for r in (0, 1, 1023, 1024, 1025, 4095, 4096, N // 2, N - 1)]
    sets += [np.array([e]) for e in edges[:6]] + [np.array([e - 1]) for e in edges[:6]]
    sets += [np.array(edges[:3]), np.array([0, N - 1]), np.arange(1020, 1030)]
    for count in (2, 3, 8, 31, point.MAX_ROWS):
        sets.append(np.sort(rng.choice(N, count, replace=False)))
    sets.append(rng.integers(0, N, 20))  # unsorted, may repeat
    sets.append(np.array([7, 7, 3]))  # repeats
    sets.append(np.arange(100, 100 + point.MAX_ROWS + 1))  # just over: compressed pages only
    sets.append(np.sort(rng.choice(N, 3000, replace=False)))  # many chunks, many pages
    return sets


@pytest.fixture
def answered(monkeypatch) -> list[str]:
    """Names of the columns the point path answered."""
    seen: list[str] = []
    take_leaf = point.take_leaf

    def counted(column, rows, **kw):
        out = take_leaf(column, rows, **kw)
        if out is not None:
            seen.append(column.where + (" large" if kw.get("compressed_only") else ""))
        return out

    monkeypatch.setattr(point, "take_leaf", counted)
    return seen


def test_point_take_matches_general_path(written, answered, monkeypatch) -> None:
    version, table, data, full, edges = written
    fields = LanceFileReader(BytesSource(data)).schema.fields
    for rows in _row_sets(edges):
        reader, cmap = _open(data)  # fresh: no page decoder cached by an earlier take
        got = reader.take(fields, cmap, rows)
        with monkeypatch.context() as m:
            m.setattr(point, "take_leaf", lambda *a, **k: None)  # the general path
            m.setattr(point_pages, "take_pages", lambda parts: None)
            general = _open(data)[0].take(fields, cmap, rows)
        idx = pa.array(rows.astype(np.int64))
        for field, a, b in zip(fields, got, general, strict=True):
            assert_same(a, b, f"{version} take of {field.name} at {rows[:5]}")
            assert_same(a, full.column(field.name).take(idx), f"{version} {field.name}")
            assert_same(a, table.column(field.name).take(idx), f"{version} {field.name}")
    if version == "2.0":
        assert not answered
    else:
        names = " ".join(answered)
        for name in ("i64", "i32_null", "f64", "f32_null", "s", "s_null", "s_lz4", "bin",
                     "ts"):
            assert f"(field {name!r})" in names, name
        # larger takes: LZ4 chunks on this path, other pages on the general one
        assert "(field 's_lz4') large" in names
        assert "(field 'i64') large" not in names


def test_lz4_strings_are_compressed(written) -> None:
    """The LZ4 column really is General(LZ4) chunks in 2.1+ (so that path is exercised)."""
    version, _, data, _, _ = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s_lz4")
    column = reader._leaf_column(cmap[field.id], field, field.arrow_type)
    assert column.page(0).layout.value_compression.WhichOneof("compression") == "general"


def test_corrupt_chunk_header_is_a_format_error(written) -> None:
    """A chunk whose buffer sizes run past the chunk: a typed error, not a crash."""
    version, table, data, _, _ = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s")
    column = reader._leaf_column(cmap[field.id], field, field.arrow_type)
    page = column.page(0)
    page._load()
    start = page.buffers[1][0] + int(page.chunk_offsets[0])
    damaged = bytearray(data)
    damaged[start + 2 : start + 4] = (0xFFFF).to_bytes(2, "little")  # value buffer size
    reader, cmap = _open(bytes(damaged))
    with pytest.raises(FormatError):
        reader.take([field], cmap, np.array([0]))


def test_short_reads_match_general_read(written, monkeypatch) -> None:
    """``read_short`` (chunks decoded in one call) gives what ``read`` gives, for runs
    inside a chunk, across chunks, whole chunks, at and across page edges, and over
    :data:`point.MAX_RUN` (the general path)."""
    version, table, data, full, edges = written
    fields = LanceFileReader(BytesSource(data)).schema.fields
    answered: list[str] = []
    read_run = point.read_run

    def counted(column, start, stop):
        out = read_run(column, start, stop)
        if out is not None:
            answered.append(column.where)
        return out

    monkeypatch.setattr(point, "read_run", counted)
    runs = [(0, 1), (5, 10), (1000, 48), (1024, 1024), (0, 4096), (4000, 300), (N - 3, 3),
            (N - 5000, 5000), (123, point.MAX_RUN), (77, point.MAX_RUN + 1)]
    runs += [(e - 2, 4) for e in edges[:5]] + [(e, 1000) for e in edges[:5]]
    for offset, length in runs:
        reader, cmap = _open(data)
        got = reader.read_short(fields, cmap, offset, length)
        want = _open(data)[0].read(fields, cmap, offset=offset, length=length)
        for field, a, b in zip(fields, got, want, strict=True):
            assert_same(a, b, f"{version} {field.name} rows {offset}+{length}")
            assert_same(a, table.column(field.name).slice(offset, length), field.name)
    names = " ".join(answered)
    if version == "2.0":
        assert not answered
    else:
        for name in ("i64", "i32_null", "f64", "s_null", "s_lz4", "flag", "cat"):
            assert f"(field {name!r})" in names, name
    with pytest.raises(InvalidInputError):
        _open(data)[0].read_short(fields, _open(data)[1], N - 1, 2)


def _scattered_sets(edges: list[int]) -> list[np.ndarray]:
    """Takes of many scattered rows (over :data:`point.MAX_ROWS`), 10 to 5000 rows."""
    rng = np.random.default_rng(23)
    sets = [np.sort(rng.choice(N, count, replace=False)) for count in (10, 65, 200, 1000, 5000)]
    sets.append(rng.integers(0, N, 2000))  # unsorted, with repeats
    sets.append(np.array(sorted({0, N - 1, *edges, *(e - 1 for e in edges)})))  # page edges
    sets.append(np.arange(1, N, 37))  # a regular stride: every chunk, each row alone
    return sets


@pytest.fixture
def sizes_answered(monkeypatch) -> list[tuple[str, int, bool]]:
    """(column, rows, compressed_only) of each take the point path answered (page by
    page, or a take of rows in several pages in one pass)."""
    seen: list[tuple[str, int, bool]] = []
    take_leaf, take_pages = point.take_leaf, point_pages.take_pages

    def counted(column, rows, **kw):
        out = take_leaf(column, rows, **kw)
        if out is not None:
            seen.append((column.where, int(rows.size), bool(kw.get("compressed_only"))))
        return out

    def counted_pages(parts):
        out = take_pages(parts)
        if out is not None:
            [(column, rows)] = parts
            seen.append((column.where, int(rows.size), False))
        return out

    monkeypatch.setattr(point, "take_leaf", counted)
    monkeypatch.setattr(point_pages, "take_pages", counted_pages)
    return seen


def test_scattered_takes_match_general_path(written, sizes_answered, monkeypatch) -> None:
    """Takes of tens to thousands of scattered rows go through the point path for every
    leaf column of 2.1/2.2 files (not only compressed ones) and equal the general path."""
    version, table, data, full, edges = written
    fields = LanceFileReader(BytesSource(data)).schema.fields
    for rows in _scattered_sets(edges):
        reader, cmap = _open(data)
        got = reader.take(fields, cmap, rows)
        with monkeypatch.context() as m:
            m.setattr(point, "take_leaf", lambda *a, **k: None)
            m.setattr(point_pages, "take_pages", lambda parts: None)
            general = _open(data)[0].take(fields, cmap, rows)
        idx = pa.array(rows.astype(np.int64))
        for field, a, b in zip(fields, got, general, strict=True):
            assert_same(a, b, f"{version} take of {field.name}, {rows.size} rows")
            assert_same(a, table.column(field.name).take(idx), f"{version} {field.name}")
    if version == "2.0":
        assert not sizes_answered
        return
    for name in ("i64", "i32_null", "u8", "f64", "f32_null", "s", "s_null", "s_lz4", "bin",
                 "ts"):
        big = [n for where, n, only in sizes_answered
               if f"(field {name!r})" in where and not only and n > point.MAX_ROWS]
        assert big and max(big) >= 4000, name


def test_scattered_takes_over_several_pages_take_them_together(written, monkeypatch
                                                               ) -> None:
    """A scattered take of a plain column's rows in several pages (the BTREE's ids of a
    many-key lookup) takes the pages in one pass through point_pages.take_pages (counted,
    and answering): the same values as page by page (take_pages off), the general path
    and the table."""
    version, table, data, _, _ = written
    if version == "2.0":
        return  # (no point path)
    inner, answers = point_pages.take_pages, []
    monkeypatch.setattr(point_pages, "take_pages",
                        lambda parts: answers.append(inner(parts) is not None) or inner(parts))
    fields = [f for f in LanceFileReader(BytesSource(data)).schema.fields
              if f.name in ("i64", "u8", "f64", "s_lz4")]
    rows = np.sort(np.random.default_rng(4).choice(N, 2000, replace=False))
    idx = pa.array(rows)
    for field in fields:
        reader, cmap = _open(data)
        column = reader.point_column(field, cmap)
        assert column is not None
        if column.info.row_starts.size == 2:  # one page (pylance's 2.1 pages are big)
            assert version == "2.1", field.name
            continue
        answers.clear()
        [together] = reader.take([field], cmap, rows)
        assert answers == [True], field.name
        with monkeypatch.context() as m:
            m.setattr(point_pages, "take_pages", lambda parts: None)
            [apart] = _open(data)[0].take([field], cmap, rows)
            m.setattr(point, "take_leaf", lambda *a, **k: None)
            m.setattr(point_pages, "take_pages", lambda parts: None)
            [general] = _open(data)[0].take([field], cmap, rows)
        assert_same(together, apart, field.name)
        assert_same(together, general, field.name)
        assert_same(together, table.column(field.name).take(idx), field.name)


def test_dense_large_takes_stay_on_the_general_path(written, sizes_answered) -> None:
    """Long runs of consecutive rows are not scattered: uncompressed columns keep the
    general path (only LZ4 pages are taken on the point path)."""
    version, _, data, full, _ = written
    reader, cmap = _open(data)
    rows = np.arange(500, 6500)
    got = reader.take(reader.schema.fields, cmap, rows)
    for field, a in zip(reader.schema.fields, got, strict=True):
        assert_same(a, full.column(field.name).slice(500, 6000), field.name)
    assert not [w for w, _, only in sizes_answered if "'i64'" in w and not only]


@pytest.mark.parametrize("name", ["s", "s_lz4", "i64", "s_lz4 size"])
def test_scattered_take_of_a_corrupt_chunk_is_a_format_error(written, name) -> None:
    """A damaged chunk among many touched: a typed error from the many-row path."""
    version, _, data, _, _ = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    lying_size = name == "s_lz4 size"  # an LZ4 size prefix claiming more than it can hold
    name = name.split()[0]
    field = next(f for f in reader.schema.fields if f.name == name)
    column = reader._leaf_column(cmap[field.id], field, field.arrow_type)
    page = column.page(0)
    page._load()
    start = page.buffers[1][0] + int(page.chunk_offsets[1])
    damaged = bytearray(data)
    if lying_size:  # the u32 after the chunk's 8-byte header
        damaged[start + 8 : start + 12] = (0xFFFFFFF0).to_bytes(4, "little")
    elif name == "s_lz4":  # the LZ4 payload itself (past the chunk header and size prefix)
        size = int(page.chunk_sizes[1])
        damaged[start + 16 : start + size] = b"\xff" * (size - 16)
    else:  # a value buffer size running past the chunk
        damaged[start + 2 : start + 4] = (0xFFFF).to_bytes(2, "little")
    reader, cmap = _open(bytes(damaged))
    rows = np.sort(np.random.default_rng(5).choice(N, 1000, replace=False))
    rows = np.union1d(rows, [int(page.first_row[1]) if page.first_row.size > 1 else 1])
    with pytest.raises(FormatError):
        reader.take([field], cmap, rows)


@pytest.mark.parametrize("extra", [1, 16, 3000])
def test_an_lz4_prefix_claiming_more_than_its_block_holds_is_refused(written, extra) -> None:
    """pyarrow's raw LZ4 codec returns a buffer of the size it is asked for even when the
    block inflates to less, the rest uninitialised memory: a chunk whose size prefix
    overstates (within what its bytes could hold) is a FormatError for a one-row take, a
    scattered take and a full read alike, never bytes that were not inflated."""
    version, _, data, full, _ = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s_lz4")
    column = reader._leaf_column(cmap[field.id], field, field.arrow_type)
    page = column.page(0)
    page._load()
    start = page.buffers[1][0] + int(page.chunk_offsets[1])
    claimed = int.from_bytes(data[start + 8 : start + 12], "little")
    damaged = bytearray(data)
    damaged[start + 8 : start + 12] = (claimed + extra).to_bytes(4, "little")
    row = int(page.first_row[1])
    reader, cmap = _open(bytes(damaged))
    for rows in (np.array([row]), np.union1d(
            np.sort(np.random.default_rng(6).choice(N, 1000, replace=False)), [row])):
        with pytest.raises(FormatError):
            reader.take([field], cmap, rows)
    with pytest.raises(FormatError):
        reader.read([field], cmap)
    intact, cmap = _open(data)  # the same reads of the file as written succeed
    assert intact.take([field], cmap, np.array([row]))[0].to_pylist() == \
        full.column("s_lz4").slice(row, 1).to_pylist()


def test_scattered_take_with_deletions(tmp_path) -> None:
    """A 2.2 table with deleted rows: a take of many scattered positions equals the same
    positions of a full read."""
    import lance_sql

    table = _table(30_000, seed=3)
    ds = lance_sql.write_dataset(table, str(tmp_path / "t"), data_storage_version="2.2",
                                 max_rows_per_file=12_000)
    ds.delete("i32_null < 40 OR u8 = 7")
    full = ds.to_table()
    rng = np.random.default_rng(9)
    for count in (10, 300, 3000):
        pos = rng.choice(full.num_rows, count, replace=False)
        got = ds.take(pos)
        expected = full.take(pa.array(pos))
        for name in table.column_names:
            assert_same(got.column(name), expected.column(name), f"{name}, {count} rows")


def test_scattered_lz4_strings_copy_only_the_wanted_rows(written, monkeypatch) -> None:
    """LZ4 string chunks of a scattered take go through ``inflated_strings`` (offsets and
    bytes of the wanted rows only) and equal the source rows."""
    version, table, data, _, _ = written
    if version == "2.0":
        return
    calls: list[int] = []
    inner = point.inflated_strings

    def counted(enc, pieces, counts, sel, pos, heads, where):
        calls.append(int(pos.size))
        return inner(enc, pieces, counts, sel, pos, heads, where)

    monkeypatch.setattr(point, "inflated_strings", counted)
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s_lz4")
    rows = np.sort(np.random.default_rng(4).choice(N, 3000, replace=False))
    [got] = reader.take([field], cmap, rows)
    assert_same(got, table.column("s_lz4").take(pa.array(rows)), "s_lz4")
    assert sum(calls) == rows.size


def test_lz4_strings_one_row_a_chunk_join_the_strings(written, monkeypatch) -> None:
    """A take with at most one row in each LZ4 string chunk (rows far apart, as 1000
    keys over a big table ask) joins the wanted strings straight, and equals the
    general path and the source rows."""
    version, table, data, _, _ = written
    if version == "2.0":
        return
    shapes: list[tuple[int, int]] = []
    inner = point.inflated_strings

    def counted(enc, pieces, counts, sel, pos, heads, where):
        shapes.append((int(heads.size), int(sel.size)))
        return inner(enc, pieces, counts, sel, pos, heads, where)

    monkeypatch.setattr(point, "inflated_strings", counted)
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s_lz4")
    rows = np.arange(3, N, N // 40)  # 40 rows, each far from the next
    [got] = reader.take([field], cmap, rows)
    assert_same(got, table.column("s_lz4").take(pa.array(rows)), "s_lz4")
    # (a page asked for one row takes it alone, without inflated_strings)
    assert all(h == n for h, n in shapes) and max(n for _, n in shapes) >= 2
    monkeypatch.setattr(point, "take_leaf", lambda *a, **k: None)  # the general path
    monkeypatch.setattr(point_pages, "take_pages", lambda parts: None)
    [general] = _open(data)[0].take([field], cmap, rows)
    assert_same(got, general, "s_lz4 general")


def test_inflated_strings_with_bad_offsets_are_a_format_error() -> None:
    """Offsets running backwards or past their chunk: a typed error, whether a chunk
    holds several wanted rows or one (the strings then joined straight)."""
    from lance_sql.format.pb import encodings_v2_1_pb2 as pb

    enc = pb.CompressiveEncoding()
    enc.variable.offsets.flat.bits_per_value = 32
    good = np.array([12, 14, 17], "<u4").tobytes() + b"abcde"
    counts, sel, pos, heads = np.array([2]), np.array([0, 0]), np.array([0, 1]), np.array([0])
    block = point.inflated_strings(enc, [good], counts, sel, pos, heads, "t")
    assert block.data.tobytes() == b"abcde" and block.offsets.tolist() == [0, 2, 5]
    one_each = (np.array([2, 2]), np.array([0, 1]), np.array([1, 0]), np.array([0, 1]))
    block = point.inflated_strings(enc, [good, good], *one_each, "t")
    assert block.data.tobytes() == b"cdeab" and block.offsets.tolist() == [0, 3, 5]
    for bad, row in ((np.array([12, 18, 17], "<u4").tobytes() + b"abcde", 1),  # backwards
                     (np.array([12, 14, 40], "<u4").tobytes() + b"abcde", 1),  # past the chunk
                     (np.array([4, 14, 17], "<u4").tobytes() + b"abcde", 0),  # into offsets
                     (np.array([12, 14], "<u4").tobytes(), 0)):  # too small for its offsets
        with pytest.raises(FormatError):
            point.inflated_strings(enc, [bad], counts, sel, pos, heads, "t")
        with pytest.raises(FormatError):  # the bad chunk's row: the one its fault touches
            point.inflated_strings(enc, [good, bad], one_each[0], one_each[1],
                                    np.array([1, row]), one_each[3], "t")
    with pytest.raises(FormatError):  # a row past the chunk's values
        point.inflated_strings(enc, [good], counts, sel, np.array([0, 2]), heads, "t")
    with pytest.raises(FormatError):
        point.inflated_strings(enc, [good, good], one_each[0], one_each[1],
                                np.array([2, 0]), one_each[3], "t")


def test_inflated_strings_one_row_a_chunk_and_several_give_the_strings() -> None:
    """One wanted row in every chunk (the strings joined straight) and several in some
    (each chunk's span copied, then gathered): both give exactly the wanted strings."""
    from lance_sql.format.pb import encodings_v2_1_pb2 as pb

    enc = pb.CompressiveEncoding()
    enc.variable.offsets.flat.bits_per_value = 32
    rng = np.random.default_rng(7)
    pieces, words = [], []
    for c in range(40):
        strings = [f"c{c}-{'y' * int(k)}".encode() for k in rng.integers(0, 9, 30)]
        lens = np.array([len(x) for x in strings])
        offs = 31 * 4 + np.concatenate(([0], lens.cumsum()))
        pieces.append(offs.astype("<u4").tobytes() + b"".join(strings))
        words.append(strings)
    counts = np.full(40, 30)
    pos = rng.integers(0, 30, 40)
    block = point.inflated_strings(enc, pieces, counts, np.arange(40), pos, np.arange(40), "t")
    assert block.data.tobytes() == b"".join(words[c][p] for c, p in enumerate(pos.tolist()))
    assert block.offsets.tolist() == [0, *np.cumsum([len(words[c][p]) for c, p in
                                                     enumerate(pos.tolist())]).tolist()]
    # chunks 0 and 5 with three rows each, the others one
    sel = np.concatenate(([0, 0], np.arange(5), [5, 5], np.arange(5, 40)))
    pos = np.concatenate([np.sort(rng.choice(30, 3, replace=False)) if c in (0, 5)
                          else rng.integers(0, 30, 1) for c in range(40)])
    heads = np.flatnonzero(np.concatenate(([True], sel[1:] != sel[:-1])))
    block = point.inflated_strings(enc, pieces, counts, sel, pos, heads, "t")
    assert block.data.tobytes() == b"".join(words[c][p] for c, p in
                                            zip(sel.tolist(), pos.tolist(), strict=True))
    assert block.n == sel.size == 44


def test_inflated_strings_of_one_buffers_slices_equal_separate_copies() -> None:
    """Chunks that are back-to-back slices of one Arrow buffer (what one inflated LZ4
    frame gives) are read as one array (counted): the same strings as the same chunks
    as separate bytes, for one wanted row a chunk and several; bad offsets in one of them
    are still a FormatError; buffers not back to back take the per-chunk path."""
    from lance_sql.format.pb import encodings_v2_1_pb2 as pb

    enc = pb.CompressiveEncoding()
    enc.variable.offsets.flat.bits_per_value = 32
    rng = np.random.default_rng(11)
    chunks = []
    for c in range(30):
        strings = [f"k{c}-{'z' * int(k)}".encode() for k in rng.integers(0, 12, 20)]
        offs = 21 * 4 + np.concatenate(([0], np.cumsum([len(x) for x in strings])))
        chunks.append(offs.astype("<u4").tobytes() + b"".join(strings))
    whole = pa.py_buffer(b"".join(chunks))
    starts = np.concatenate(([0], np.cumsum([len(x) for x in chunks])))
    sliced = [whole.slice(int(a), len(x)) for a, x in zip(starts, chunks, strict=False)]
    counts = np.full(30, 20)
    sel = np.concatenate(([0, 0, 0], np.arange(1, 30)))
    pos = np.concatenate(([2, 7, 19], rng.integers(0, 20, 29)))
    heads = np.flatnonzero(np.concatenate(([True], sel[1:] != sel[:-1])))
    cases = [(np.arange(30), rng.integers(0, 20, 30), np.arange(30)), (sel, pos, heads)]
    for s, p, h in cases:
        before = point.TILED_CALLS[0]
        tiled = point.inflated_strings(enc, sliced, counts, s, p, h, "t")
        assert point.TILED_CALLS[0] == before + 1
        apart = point.inflated_strings(enc, chunks, counts, s, p, h, "t")
        assert point.TILED_CALLS[0] == before + 1
        assert tiled.data.tobytes() == apart.data.tobytes() == b"".join(
            chunks[c][int(w[0]):int(w[1])] for c, w in
            ((c, np.frombuffer(chunks[c], "<u4", 21)[q : q + 2]) for c, q in
             zip(s.tolist(), p.tolist(), strict=True)))
        assert tiled.offsets.tolist() == apart.offsets.tolist()
    # separate Arrow buffers (not back to back): not read as one
    before = point.TILED_CALLS[0]
    point.inflated_strings(enc, [pa.py_buffer(x) for x in chunks], counts, *cases[0], "t")
    assert point.TILED_CALLS[0] == before
    bad = bytearray(b"".join(chunks))
    at = int(starts[4]) + 4 * 3
    bad[at : at + 4] = (10**6).to_bytes(4, "little")  # chunk 4's row 3 ends past it
    whole = pa.py_buffer(bytes(bad))
    sliced = [whole.slice(int(a), len(x)) for a, x in zip(starts, chunks, strict=False)]
    pos = np.zeros(30, np.int64)
    pos[4] = 2
    with pytest.raises(FormatError, match="outside their chunk"):
        point.inflated_strings(enc, sliced, counts, np.arange(30), pos, np.arange(30), "t")


class _CountingSource(BytesSource):
    """Counts the bytes read (``read_at``) so a test can bound a take's I/O."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read_at(self, offset: int, length: int) -> memoryview:
        self.bytes_read += length
        return super().read_at(offset, length)


def test_scattered_take_reads_about_the_chunks_it_needs() -> None:
    """Rows ~40 KiB apart in one big page: each row's chunk is read on its own, not the
    whole span between the first and the last (a 64 KiB coalescing gap would read
    nearly all of it), and the values equal the general path's."""
    n = 400_000
    values = np.random.default_rng(2).integers(-(2**62), 2**62, n)
    table = pa.table({"i64": pa.array(values), "f": pa.array(values.astype(np.float64))})
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2")
    writer.write_batch(table)
    writer.finish()
    data = sink.getvalue()
    rows = np.arange(17, n, 5000)  # 5000 rows of 8 bytes apart: ~40 KiB gaps
    for name in ("i64", "f"):
        source = _CountingSource(data)
        reader = LanceFileReader(source)
        fields = [f for f in reader.schema.fields if f.name == name]
        cmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
        reader.take(fields, cmap, rows[:1])  # page metadata loaded and counted apart
        column = reader._leaf_column(cmap[fields[0].id], fields[0], fields[0].arrow_type)
        assert column.info.row_starts.size == 2, "one page expected"
        page = column.page(0)
        before = source.bytes_read
        [got] = reader.take(fields, cmap, rows)
        read = source.bytes_read - before
        assert read <= 2 * rows.size * int(page.chunk_sizes.max()), (name, read)
        assert_same(got, table.column(name).take(pa.array(rows)), name)


def test_read_runs_match_read_short(written, monkeypatch) -> None:
    """Many short runs of every column at once (index pages, say): each equals
    ``read_short`` of the run alone and the table's rows; runs leaving their page (small
    pages here) still come out right, and the batched path answered most runs."""
    version, table, data, full, edges = written
    reader, cmap = _open(data)
    starts = np.array([0, 5, 1023, 1024, 4000, *(e - 3 for e in edges[:8]), N - 10])
    starts = np.unique(starts[(starts >= 0) & (starts < N)])
    stops = np.minimum(np.r_[starts[1:], N], starts + np.array([1, 7, 600, 64] * 20)
                       [: starts.size])
    batched = point.read_runs
    answered: list[int] = []

    def counted(column, a, b):
        out = batched(column, a, b)
        answered.append(sum(x is not None for x in out))
        return out

    monkeypatch.setattr(point, "read_runs", counted)
    for field in reader.schema.fields:
        got = reader.read_runs(field, cmap, starts, stops)
        assert len(got) == starts.size
        for array, s, e in zip(got, starts.tolist(), stops.tolist(), strict=True):
            [alone] = _open(data)[0].read_short([field], cmap, s, e - s)
            assert_same(array, alone, f"{version} {field.name} [{s}, {e})")
            assert_same(array, table.column(field.name).slice(s, e - s).combine_chunks(),
                        f"{version} {field.name}")
    if version != "2.0":
        assert sum(answered) > len(reader.schema.fields) * starts.size // 2
    with pytest.raises(InvalidInputError):
        reader.read_runs(reader.schema.fields[0], cmap, np.array([5, 3]), np.array([6, 4]))


def test_takes_from_a_mapped_file_use_views_and_equal_copies(written, tmp_path,
                                                               monkeypatch) -> None:
    """Point takes, scattered takes and short runs of a mapped local file read their chunks
    as views of the mapping (``view_range``; nothing copied by ``read_ranges``) and give
    what the same takes of the bytes in memory give, and the general path; a damaged
    chunk read through a view is still a typed error."""
    from lance_sql.io.local import LocalSource

    version, table, data, _, edges = written
    if version == "2.0":
        return
    path = tmp_path / "f.lance"
    path.write_bytes(data)
    views: list[int] = []
    copies: list[int] = []
    view_range, read_ranges = LocalSource.view_range, LocalSource.read_ranges

    def viewed(self, offset, length):
        views.append(length)
        return view_range(self, offset, length)

    def copied(self, offsets, lengths):
        copies.append(int(lengths.sum()))
        return read_ranges(self, offsets, lengths)

    monkeypatch.setattr(LocalSource, "view_range", viewed)
    monkeypatch.setattr(LocalSource, "read_ranges", copied)
    fields = LanceFileReader(BytesSource(data)).schema.fields
    singles, scattered = _row_sets(edges), _scattered_sets(edges)
    sets = [singles[0], singles[5], singles[-1], *scattered[2:4], *scattered[-3:]]
    for rows in sets:
        mapped = LanceFileReader(LocalSource(str(path), mapped=True))
        cmap = _open(data)[1]
        got = mapped.take(fields, cmap, rows)
        in_memory = _open(data)[0].take(fields, cmap, rows)
        with monkeypatch.context() as m:
            m.setattr(point, "take_leaf", lambda *a, **k: None)
            m.setattr(point_pages, "take_pages", lambda parts: None)
            general = _open(data)[0].take(fields, cmap, rows)
        idx = pa.array(rows.astype(np.int64))
        for field, a, b, c in zip(fields, got, in_memory, general, strict=True):
            assert_same(a, b, f"{version} mapped take of {field.name}, {rows.size} rows")
            assert_same(a, c, f"{version} general take of {field.name}, {rows.size} rows")
            assert_same(a, table.column(field.name).take(idx), field.name)
    for offset, length in [(0, 1), (1000, 48), (4000, 300), (N - 5000, 5000)]:
        mapped = LanceFileReader(LocalSource(str(path), mapped=True))
        got = mapped.read_short(fields, cmap, offset, length)
        for field, a in zip(fields, got, strict=True):
            assert_same(a, table.column(field.name).slice(offset, length), field.name)
    assert len(views) > 10 * len(sets)  # chunks of every leaf column, many takes
    assert not copies  # nothing copied out of the mapping
    # a damaged LZ4 chunk read through a view: a typed error, as from a copy
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == "s_lz4")
    page = reader._leaf_column(cmap[field.id], field, field.arrow_type).page(0)
    page._load()
    start, size = page.buffers[1][0] + int(page.chunk_offsets[1]), int(page.chunk_sizes[1])
    damaged = bytearray(data)
    damaged[start + 16 : start + size] = b"\xff" * (size - 16)
    (tmp_path / "bad.lance").write_bytes(bytes(damaged))
    bad = LanceFileReader(LocalSource(str(tmp_path / "bad.lance"), mapped=True))
    for rows in (np.array([int(page.first_row[1])]), np.arange(0, N, 97)):
        with pytest.raises(FormatError):
            bad.take([field], cmap, rows)


def test_one_row_takes_of_a_reused_reader(written, answered, monkeypatch) -> None:
    """One-row takes (the reader's point-take shortcut) through one reader, its pages'
    layouts found once and kept: each equals the full read and pylance-written 2.1 files
    included; after the first takes no page derives its value encoding again; rows out
    of range, or not integers, are refused as the general path refuses them."""
    version, table, data, full, edges = written
    reader, cmap = _open(data)
    fields = reader.schema.fields
    rows = [0, 1, 1023, 1024, 4095, 4096, N // 2, N - 1, *edges[:6],
            *(e - 1 for e in edges[:6])]
    for row in rows:  # the pages these rows touch find their layouts here
        reader.take(fields, cmap, np.array([row], np.int64))
    found_again = []
    values = point._values
    monkeypatch.setattr(point, "_values", lambda enc: found_again.append(enc) or values(enc))
    for row in rows:
        for dtype in (np.int64, np.uint32):
            got = reader.take(fields, cmap, np.array([row], dtype))
            for field, array in zip(fields, got, strict=True):
                assert_same(array, full.column(field.name).slice(row, 1),
                            f"{version} {field.name} row {row}")
    assert not found_again  # kept on the pages
    if version != "2.0":
        assert answered
    for bad in (np.array([-1]), np.array([N]), np.array([N + 5], np.uint64)):
        with pytest.raises(InvalidInputError, match="out of range"):
            reader.take(fields, cmap, bad)
    for bad in (np.array([1.0]), np.array([True])):
        with pytest.raises(InvalidInputError, match="integer row offsets"):
            reader.take(fields, cmap, bad)


@pytest.mark.parametrize("has_def", [False, True])
@pytest.mark.parametrize("nbuf", [1, 2])
@pytest.mark.parametrize("large", [False, True])
def test_split_reads_every_header_layout(has_def: bool, nbuf: int, large: bool) -> None:
    """``_split`` of chunks at odd and even offsets, with and without levels, one or two
    value buffers, u16 or u32 sizes: each buffer where the header (parsed here with
    ``struct``) puts it; a buffer running past its chunk is a FormatError."""
    import struct
    from types import SimpleNamespace

    page = SimpleNamespace(has_def=has_def, nbuf=nbuf, large=large, where="t")
    nlev = int(has_def)
    fmt = "<H" + "H" * nlev + ("I" if large else "H") * nbuf
    head = (struct.calcsize(fmt) + 7) & ~7
    rng = np.random.default_rng(3)
    raw, cstart, csize, expect = bytearray(b"\x05"), [], [], []
    for _ in range(9):
        sizes = rng.integers(1, 300 if not large else 70_000, nlev + nbuf).tolist()
        levels = int(rng.integers(1, 4000))
        chunk = bytearray(struct.pack(fmt, levels, *sizes).ljust(head, b"\0"))
        starts = []
        for size in sizes:
            starts.append(len(raw) + len(chunk))
            chunk += bytes(rng.integers(0, 255, size, dtype=np.uint8)) + b"\0" * (-size % 8)
        cstart.append(len(raw))
        csize.append(len(chunk))
        expect.append((levels, starts, sizes))
        raw += chunk + b"\x07" * int(rng.integers(0, 3))  # odd gaps: unaligned chunks
    arr = np.frombuffer(bytes(raw), np.uint8)
    bufs, num_levels = point._split(page, arr, np.array(cstart), np.array(csize))
    assert num_levels.tolist() == [e[0] for e in expect]
    assert len(bufs) == nlev + nbuf
    for i, buf in enumerate(bufs):
        assert buf.pos.tolist() == [e[1][i] for e in expect]
        assert buf.sizes.tolist() == [e[2][i] for e in expect]
    short = np.array(csize)
    short[-1] -= 8  # the last chunk's buffers (padded to 8 bytes) now run past it
    with pytest.raises(FormatError):
        point._split(page, arr, np.array(cstart), short)


def test_take_row_equals_take_of_one_row(written, monkeypatch) -> None:
    """The fused one-row take (every field of the row in one pass) equals the one-row
    ``take`` and the general path, at chunk and page edges, for every column kind and
    format 2.0 / 2.1 (pylance-written) / 2.2; the point path answers the 2.1+ leaves."""
    version, table, data, full, edges = written
    reader, cmap = _open(data)
    fields = reader.schema.fields
    rows = [0, 1, 1023, 1024, 4095, 4096, N // 2, N - 1, *edges[:6], *(e - 1 for e in edges[:6])]
    answered: list[str] = []
    take_row = point.take_row

    def counted(column, row):
        out = take_row(column, row)
        if out is not None:
            answered.append(column.where)
        return out

    monkeypatch.setattr(point, "take_row", counted)
    for row in rows:
        got = reader.take_row(fields, cmap, row)
        one = _open(data)[0].take(fields, cmap, np.array([row], np.int64))
        with monkeypatch.context() as m:
            m.setattr(point, "take_row", lambda *a: None)  # the general path
            general = _open(data)[0].take_row(fields, cmap, row)
        for field, a, b, c in zip(fields, got, one, general, strict=True):
            where = f"{version} {field.name} row {row}"
            assert_same(a, b, where)
            assert_same(a, c, where)
            assert_same(a, table.column(field.name).slice(row, 1), where)
    names = " ".join(answered)
    if version == "2.0":
        assert not answered  # no point path for 2.0 files
    else:
        for name in ("i64", "i32_null", "f64", "f32_null", "s", "s_null", "s_lz4", "bin", "ts"):
            assert f"(field {name!r})" in names, name
    for bad in (-1, N):
        with pytest.raises(InvalidInputError, match="out of range"):
            reader.take_row(fields, cmap, bad)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_one_string_value_equals_the_general_conversion(version, tmp_path, monkeypatch) -> None:
    """One string / binary value of a one-row take is made from its buffers: equal to
    the full read for string, large_string, binary and large_binary columns (multi-byte
    UTF-8, empty values, nulls; pylance-written 2.1 too); invalid UTF-8 is the FormatError
    the general conversion raises."""
    from lance_sql.format.datafile.blocks import Variable, to_arrow

    n = 3000
    words = [None if i % 9 == 0 else "" if i % 7 == 0 else f"wört-{i}-ñ✓{'é' * (i % 5)}"
             for i in range(n)]
    table = pa.table({"s": pa.array(words), "ls": pa.array(words, pa.large_string()),
                      "b": pa.array([None if w is None else w.encode() for w in words]),
                      "lb": pa.array([None if w is None else w.encode() for w in words],
                                     pa.large_binary())})
    data = _write(table, version, tmp_path)
    reader, cmap = _open(data)
    fields = reader.schema.fields
    made: list[str] = []
    one_bytes = point._one_bytes
    monkeypatch.setattr(point, "_one_bytes",
                        lambda block, t, null, where: made.append(str(t)) or one_bytes(
                            block, t, null, where))
    for row in (0, 1, 7, 9, 63, 64, 1000, 1024, n - 1):
        got = reader.take_row(fields, cmap, row)
        for field, array in zip(fields, got, strict=True):
            assert_same(array, table.column(field.name).slice(row, 1), f"{field.name} {row}")
            array.validate(full=True)  # (made from buffers: offsets and UTF-8 hold)
    assert {"string", "large_string", "binary", "large_binary"} <= set(made)
    bad = Variable(np.array([0, 2], np.int64), np.frombuffer(b"\xff\xfe", np.uint8), 1)
    for t in (pa.string(), pa.large_string()):
        with pytest.raises(FormatError, match="invalid UTF-8"):
            point._one_bytes(bad, t, False, "here")
        with pytest.raises(FormatError, match="invalid UTF-8"):
            to_arrow(bad, t, None, "here")
    assert point._one_bytes(bad, pa.binary(), False, "here").to_pylist() == [b"\xff\xfe"]
    past = Variable(np.array([0, 5], np.int64), np.frombuffer(b"ab", np.uint8), 1)
    with pytest.raises(FormatError, match="run past"):
        point._one_bytes(past, pa.string(), False, "here")


def test_pages_of_one_take_share_each_mapped_file(written, tmp_path, monkeypatch) -> None:
    """Columns taken through point_pages with one MappedFiles (a many-key take) view each
    mapped file once, whole, not once per page, and give the rows a take of each column
    alone gives; bytes in memory have no whole view (their pages read their chunks as
    before); a file that shrank since it was opened gives none either: rows still inside
    it are taken as before, rows past its end are the FormatError they were."""
    from lance_sql.io.local import LocalSource

    version, table, data, _, _ = written
    if version == "2.0":
        return  # (no point path)
    path = tmp_path / "f.lance"
    path.write_bytes(data)
    views: list[int] = []
    view_range = LocalSource.view_range
    monkeypatch.setattr(LocalSource, "view_range",
                        lambda self, offset, length: views.append(length)
                        or view_range(self, offset, length))
    cmap = _open(data)[1]
    names = ("i64", "u8", "f64", "s_lz4")
    rows = np.sort(np.random.default_rng(5).choice(N, 3000, replace=False))

    def taken(reader: LanceFileReader, files: point_pages.MappedFiles, picked: np.ndarray
              ) -> list[pa.Array]:
        out = []
        for field in [f for f in reader.schema.fields if f.name in names]:
            column = reader.point_column(field, cmap)
            assert column is not None
            for p in range(column.info.row_starts.size - 1):
                column.page(p).load()  # (page metadata read before counting)
            taking = point_pages.begin_pages([(column, picked)], files)
            assert taking is not None
            try:
                out.append(taking.finish())
            finally:
                taking.close()
        return out

    reader = LanceFileReader(LocalSource(str(path), mapped=True))
    shared = point_pages.MappedFiles()
    views.clear()
    got = taken(reader, shared, rows)
    assert views == [len(data)]  # the whole file, once, for every page of every column
    idx = pa.array(rows)
    for name, a in zip(names, got, strict=True):
        assert_same(a, table.column(name).take(idx), f"{version} {name}")
    in_memory = LanceFileReader(BytesSource(data))
    memory_files = point_pages.MappedFiles()
    for name, a in zip(names, taken(in_memory, memory_files, rows), strict=True):
        assert_same(a, table.column(name).take(idx), f"{version} {name} from bytes")
    assert memory_files.whole(_page_reads(in_memory, cmap)) is None
    # the file cut short after it was opened (and mapped)
    shrunk = LanceFileReader(LocalSource(str(path), mapped=True))
    early = rows[rows < 2000]
    first = taken(shrunk, point_pages.MappedFiles(), early)  # (pages loaded while whole)
    with open(path, "r+b") as f:
        f.truncate(len(data) // 2)
    files = point_pages.MappedFiles()
    assert files.whole(_page_reads(shrunk, cmap)) is None
    for name, a, b in zip(names, taken(shrunk, files, early), first, strict=True):
        assert_same(a, b, f"{version} {name} of a shrunk file")
        assert_same(a, table.column(name).take(pa.array(early)), f"{version} {name}")
    with pytest.raises(FormatError):
        taken(shrunk, point_pages.MappedFiles(), rows[rows > N - 2000])


def _page_reads(reader: LanceFileReader, cmap: dict[int, int]) -> object:
    """The reads of a page of ``reader`` (what MappedFiles keys its files by)."""
    field = reader.schema.fields[0]
    column = reader.point_column(field, cmap)
    assert column is not None
    return column.page(0).read


PLAIN_ROW_COLUMNS = ("i64", "u8", "f64", "s", "s_lz4", "bin", "ts")  # non-null, no dictionary


def test_one_row_of_a_plain_page_uses_its_kept_layout(written, monkeypatch) -> None:
    """A one-row take of a page of non-null plain values goes through the page's kept
    layout (``_take_plain``) and equals the per-take path (``_take_one``) and the general
    path, at chunk and page edges; nullable and dictionary columns are left to
    ``_take_one``."""
    version, table, data, _, edges = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    answered: list[str] = []
    take_plain = point._take_plain

    def counted(page, plain, row):
        answered.append(page.where)
        return take_plain(page, plain, row)

    monkeypatch.setattr(point, "_take_plain", counted)
    rows = [0, 1, 511, 512, 1023, 1024, 4095, 4096, N // 2, N - 1, *edges[:6],
            *(e - 1 for e in edges[:6])]
    for field in reader.schema.fields:
        column = reader.point_column(field, cmap)
        if column is None:
            continue
        pages = [column.page(p) for p in range(column.info.row_starts.size - 1)]
        for row in rows:
            del answered[:]
            got = point.take_row(column, row)
            kept = bool(answered)
            for page in pages:  # the per-take path for the same row
                page.point_row = False
            before = point.take_row(column, row)
            for page in pages:
                page.point_row = None
            where = f"{version} {field.name} row {row}"
            if got is None:
                assert before is None and not kept, where
                continue
            # (pylance's 2.1 writer stores ``s`` as FSST: _take_one's)
            plain = field.name in PLAIN_ROW_COLUMNS and (version, field.name) != ("2.1", "s")
            assert kept == plain, where
            assert before is not None, where
            assert_same(got, before, where)
            assert_same(got, table.column(field.name).slice(row, 1), where)


@pytest.mark.parametrize("name", ["i64", "f64", "ts", "strings", "s_lz4"])
def test_one_row_of_a_corrupt_plain_chunk_is_a_format_error(written, name) -> None:
    """A chunk whose value buffer runs past it, or (uncompressed strings) whose offsets
    point outside it: a one-row take is a FormatError naming the column, not a wrong
    value."""
    version, _, data, _, _ = written
    if version == "2.0":
        return
    # strings: LZ4-compressed in 2.2 (``s``), plain in 2.1 (``bin``; its ``s`` is FSST)
    name = {"strings": "bin" if version == "2.1" else "s"}.get(name, name)
    reader, cmap = _open(data)
    field = next(f for f in reader.schema.fields if f.name == name)
    column = reader.point_column(field, cmap)
    assert column is not None
    page = column.page(0)
    assert point._row_page(page) is not None  # (the kept layout's path)
    start = page.buffers[1][0] + int(page.chunk_offsets[1])
    width = 4 if page.large else 2
    damaged = bytearray(data)
    damaged[start + 2 : start + 2 + width] = (0xFFFF).to_bytes(width, "little")
    broken, bmap = _open(bytes(damaged))
    bad = broken.point_column(field, bmap)
    assert bad is not None
    with pytest.raises(FormatError, match=f"field {name!r}"):
        point.take_row(bad, int(page.first_row[1]) + 3)
    assert_same(point.take_row(bad, 3), point.take_row(column, 3), name)  # chunk 0 intact
    values = point.page_values(page)
    assert values is not None
    if values[1] is not None or point.cz.kind(values[0]) != "variable":
        return  # (compressed, or numbers: no offsets stored as is)
    # an offset of the first chunk's values pointing past the chunk
    head = (2 + width + 7) & ~7
    at = page.buffers[1][0] + int(page.chunk_offsets[0]) + head + 4 * 4
    damaged = bytearray(data)
    damaged[at : at + 4] = (10**6).to_bytes(4, "little")
    broken, bmap = _open(bytes(damaged))
    with pytest.raises(FormatError, match="offsets point outside"):
        point.take_row(broken.point_column(field, bmap), 3)


def test_kept_layouts_refer_to_no_page(written) -> None:
    """The layouts a page keeps for one-row takes and single-integer reads do not refer
    back to it (no cycle): a page its column lets go of is freed at once, with what it
    holds of its file, not at the next garbage collection."""
    import gc
    import weakref

    version, table, data, _, _ = written
    if version == "2.0":
        return
    reader, cmap = _open(data)
    gc.collect()
    gc.disable()
    try:
        for field in reader.schema.fields:
            if field.name not in ("i64", "ts", "s_lz4"):
                continue
            column = reader.point_column(field, cmap)
            assert column is not None
            assert_same(point.take_row(column, 5), table.column(field.name).slice(5, 1),
                        field.name)
            page = column.page(0)
            assert isinstance(page.point_row, point._RowPage)
            if field.name == "i64":  # (integers: read one by one too)
                assert point.ints_at(column, 3, 5) == table.column("i64")[3:5].to_pylist()
                assert isinstance(page.point_ints, point._IntPage)
            ref = weakref.ref(page)
            column._pages.clear()
            del page
            assert ref() is None, field.name
    finally:
        gc.enable()
