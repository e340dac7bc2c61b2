"""Our writer -> our reader, every supported type, with and without nulls, pages, slices."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import (
    ALL_KINDS,
    NULL_MODES,
    assert_tables,
    colmap,
    make_column,
    page_encoding,
    read_ours,
    rewrite_metadata,
    set_page_encoding,
    table_of,
    write_ours,
)

from lance_sql.format.datafile import (
    BytesSource,
    LanceFileReader,
    LanceFileWriter,
    RandomAccessSource,
)
from lance_sql.format.datafile.container import PAGE_ALIGNMENT
from lance_sql.format.schema import LanceSchema
from lance_sql.io.local import LocalSource

SMALL_PAGES = {"page_bytes": 64, "max_page_bytes": 256}


@pytest.mark.parametrize("mode", NULL_MODES)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_round_trip_each_type(kind: str, mode: str) -> None:
    table = table_of([kind], 257, mode)
    data, schema, written = write_ours(table)
    assert written.num_rows == 257
    assert_tables(read_ours(data, schema, colmap(written)), table)


@pytest.mark.parametrize("mode", NULL_MODES)
def test_round_trip_all_types_small_pages(mode: str) -> None:
    table = table_of(ALL_KINDS, 300, mode, seed=5)
    data, schema, written = write_ours(table, **SMALL_PAGES)
    reader = LanceFileReader(BytesSource(data))
    assert max(len(c.pages) for c in reader._columns) > 10  # really many pages
    assert_tables(read_ours(data, schema), table)


def test_empty_table() -> None:
    table = table_of(ALL_KINDS, 0, "none")
    data, schema, written = write_ours(table)
    assert written.num_rows == 0
    result = read_ours(data, schema)
    assert result.num_rows == 0
    assert result.schema.equals(schema.to_arrow())


def test_no_batches_at_all() -> None:
    schema = LanceSchema.from_arrow(
        pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.string())]))])
    )
    sink = io.BytesIO()
    written = LanceFileWriter(sink, schema).finish()
    assert written.num_rows == 0 and written.size_bytes == len(sink.getvalue())
    assert read_ours(sink.getvalue(), schema).num_rows == 0


@pytest.mark.parametrize("mode", NULL_MODES)
def test_sliced_input(mode: str) -> None:
    big = table_of(ALL_KINDS, 400, mode, seed=3)
    table = big.slice(13, 301)  # non-zero, non-multiple-of-8 offset everywhere
    data, schema, _ = write_ours(table)
    assert_tables(read_ours(data, schema), table.combine_chunks())
    data, schema, _ = write_ours(table, **SMALL_PAGES)
    assert_tables(read_ours(data, schema), table.combine_chunks())


def test_chunked_and_several_batches() -> None:
    table = table_of(ALL_KINDS, 500, "some", seed=9)
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=37))
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, page_bytes=1000, max_page_bytes=5000)
    writer.write_batch(chunked.slice(0, 200))
    for batch in chunked.slice(200).to_batches():
        writer.write_batch(batch)
    written = writer.finish()
    assert written.num_rows == 500
    assert_tables(read_ours(sink.getvalue(), schema), table)


def test_read_ranges() -> None:
    table = table_of(ALL_KINDS, 333, "some", seed=2)
    data, schema, written = write_ours(table, **SMALL_PAGES)
    reader = LanceFileReader(BytesSource(data))
    cmap = colmap(written)
    for offset, length in [(0, 0), (0, 1), (5, 100), (100, 233), (332, 1), (333, 0), (64, 64)]:
        arrays = reader.read(schema.fields, cmap, offset=offset, length=length)
        got = pa.table(arrays, schema=schema.to_arrow())
        assert_tables(got, table.slice(offset, length))


def test_layout_matches_pylance_conventions() -> None:
    table = table_of(["int64", "string", "struct", "list_int32"], 50, "some")
    data, schema, written = write_ours(table)
    reader = LanceFileReader(BytesSource(data))
    assert reader.footer_version == (0, 3)  # what pylance writes for 2.0
    assert (written.major, written.minor) == (2, 0) == (reader.major, reader.minor)
    # one column per field, parents included, pre-order
    assert written.fields == tuple(f.id for f in schema.walk())
    assert written.column_indices == tuple(range(len(written.fields)))
    for column in reader._columns:
        for page in column.pages:
            for offset, _ in page.buffers:
                assert offset % PAGE_ALIGNMENT == 0


def test_page_split_and_priority() -> None:
    n = 100_000
    table = pa.table({"x": np.arange(n, dtype=np.int64)})
    data, schema, _ = write_ours(table, page_bytes=100_000, max_page_bytes=200_000)
    column = LanceFileReader(BytesSource(data))._columns[0]
    lengths = [p.length for p in column.pages]
    assert sum(lengths) == n and len(lengths) == 4  # 800 kB split into parts <= 200 kB
    assert [p.priority for p in column.pages] == list(np.cumsum([0, *lengths[:-1]]))
    # several batches accumulate until the threshold is passed
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, page_bytes=100_000)
    for batch in table.to_batches(max_chunksize=1000):
        writer.write_batch(batch)
    writer.finish()
    column = LanceFileReader(BytesSource(sink.getvalue()))._columns[0]
    assert {p.length for p in column.pages[:-1]} == {13_000}  # 104 kB > 100 kB threshold


def test_missing_fields_read_as_null() -> None:
    table = table_of(["int64", "struct", "list_struct"], 40, "none")
    data, schema, written = write_ours(table)
    cmap = colmap(written)
    st = schema.field("struct")
    lst = schema.field("list_struct")
    a_id = st.children[0].id
    item_x = lst.children[0].children[0].id
    partial = {k: v for k, v in cmap.items() if k not in (a_id, item_x, schema.fields[0].id)}
    reader = LanceFileReader(BytesSource(data))
    i64, struct_arr, list_arr = reader.read(schema.fields, partial)
    assert i64.null_count == 40
    assert struct_arr.field(0).null_count == 40
    assert struct_arr.field(1).equals(table["struct"].combine_chunks().field(1))
    items = list_arr.flatten()
    assert items.field(0).null_count == len(items)
    assert items.field(1).equals(table["list_struct"].combine_chunks().flatten().field(1))


def test_all_null_binary_below_dictionary_threshold() -> None:
    table = pa.table({"s": pa.nulls(7, pa.string()), "b": pa.nulls(300, pa.large_binary())[:7]})
    data, schema, _ = write_ours(table)
    assert_tables(read_ours(data, schema), table)
    reader = LanceFileReader(BytesSource(data))
    assert reader._columns[0].pages[0].encoding.WhichOneof("array_encoding") == "binary"


def test_dictionary_choice_follows_pylance() -> None:
    lowcard = make_column("string_lowcard", 100, "some")
    cols = {
        "low": lowcard,
        "high": pa.array([str(i) for i in range(100)]),
        "large": lowcard.cast(pa.large_string()),
        "allnull": pa.nulls(100, pa.string()),
    }
    table = pa.table(cols)
    data, schema, _ = write_ours(table)
    reader = LanceFileReader(BytesSource(data))
    kinds = [c.pages[0].encoding.WhichOneof("array_encoding") for c in reader._columns]
    assert kinds == ["dictionary", "binary", "binary", "dictionary"]
    assert_tables(read_ours(data, schema), table)
    short = pa.table({"low": lowcard.slice(0, 99)})
    data, schema, _ = write_ours(short)
    reader = LanceFileReader(BytesSource(data))
    assert reader._columns[0].pages[0].encoding.WhichOneof("array_encoding") == "binary"


def test_fixed_size_binary_with_value_sized_flat() -> None:
    """FixedSizeBinary bytes may also be described as width-byte values; both read the same."""
    table = pa.table({"s": make_column("string_fixedlen", 200, "some", seed=4)})
    data, schema, written = write_ours(table, fixed_size_binary=True)

    def widen(metas):
        page = metas[0].pages[0]
        encoding = page_encoding(page)
        fsb = encoding.nullable.some_nulls.values.fixed_size_binary
        fsb.bytes.nullable.no_nulls.values.flat.bits_per_value = 8 * fsb.byte_width
        set_page_encoding(page, encoding)

    wide = rewrite_metadata(data, widen)
    assert_tables(read_ours(wide, schema, colmap(written)), table)
    reader = LanceFileReader(BytesSource(wide))
    rows = np.array([199, 0, 50, 50])
    got = reader.take(schema.fields, colmap(written), rows)[0]
    assert got.to_pylist() == table["s"].take(rows).to_pylist()


def test_sources(tmp_path) -> None:
    table = table_of(["int64", "string", "list_struct"], 100, "some")
    data, schema, written = write_ours(table)
    path = tmp_path / "f.lance"
    path.write_bytes(data)
    assert written.size_bytes == len(data)
    for source in (BytesSource(data, str(path)), LocalSource(str(path))):
        assert isinstance(source, RandomAccessSource)
        reader = LanceFileReader(source)
        got = pa.table(reader.read(schema.fields, colmap(written)), schema=schema.to_arrow())
        assert_tables(got, table)
        assert reader.num_rows == 100 and reader.schema == schema
