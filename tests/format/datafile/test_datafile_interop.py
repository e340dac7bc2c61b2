"""File-level interop with pylance 14.0.2: its 2.0 files read by us, our files read by it."""

from __future__ import annotations

import glob
import os

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, NULL_MODES, assert_tables, make_column, table_of, write_ours

from lance_sql.format.datafile import BytesSource, LanceFileReader

SMALL_PAGES = {"page_bytes": 64, "max_page_bytes": 256}


def pylance_write(path: str, table: pa.Table, **kw) -> str:
    writer = lance.file.LanceFileWriter(path, table.schema, version="2.0", **kw)
    for batch in table.to_batches():
        writer.write_batch(batch)
    writer.close()
    return path


def pylance_read(path: str) -> pa.Table:
    return lance.file.LanceFileReader(path).read_all().to_table()


def ours_read_file(path: str) -> pa.Table:
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    schema = reader.schema
    cmap = {f.id: i for i, f in enumerate(schema.walk())}  # 2.0: one column per field, pre-order
    return pa.table(reader.read(schema.fields, cmap), schema=schema.to_arrow())


@pytest.mark.parametrize("mode", NULL_MODES)
def test_pylance_reads_ours(tmp_path, mode: str) -> None:
    table = table_of(ALL_KINDS, 300, mode, seed=11)
    for i, kw in enumerate([{}, SMALL_PAGES]):
        data, _, _ = write_ours(table, **kw)
        path = str(tmp_path / f"ours{i}.lance")
        with open(path, "wb") as f:
            f.write(data)
        assert_tables(pylance_read(path), table)


@pytest.mark.parametrize("mode", NULL_MODES)
def test_we_read_pylance(tmp_path, mode: str) -> None:
    table = table_of(ALL_KINDS, 300, mode, seed=12)
    path = pylance_write(str(tmp_path / "theirs.lance"), table)
    assert_tables(ours_read_file(path), table)


def test_we_read_pylance_multi_page(tmp_path) -> None:
    n = 20_000
    # (pylance 14.0.2 panics on sliced struct batches with a small cache: structs below)
    kinds = [
        "int64",
        "string",
        "string_lowcard",
        "list_int32",
        "fsl_f32",
        "list_list",
        "dict_string",
    ]
    table = table_of(kinds, n, "some", seed=4)
    batches = table.to_batches(max_chunksize=1000)
    writer = lance.file.LanceFileWriter(
        str(tmp_path / "t.lance"), table.schema, version="2.0", data_cache_bytes=7 * 20_000
    )
    for b in batches:
        writer.write_batch(b)
    writer.close()
    path = str(tmp_path / "t.lance")
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    assert max(len(c.pages) for c in reader._columns) > 3
    assert_tables(ours_read_file(path), table)
    rows = np.random.default_rng(0).integers(0, n, 500)
    cmap = {f.id: i for i, f in enumerate(reader.schema.walk())}
    got = pa.table(reader.take(reader.schema.fields, cmap, rows), schema=table.schema)
    assert_tables(got, table.take(rows))


def test_we_read_pylance_multi_page_structs(tmp_path) -> None:
    table = table_of(["struct", "list_struct", "struct_with_list"], 20_000, "some", seed=6)
    path = pylance_write(str(tmp_path / "t.lance"), table.combine_chunks(), max_page_bytes=4096)
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    assert max(len(c.pages) for c in reader._columns) > 3
    assert_tables(ours_read_file(path), table)


def test_pylance_encoding_choices_are_read(tmp_path) -> None:
    """Dictionary pages (low-cardinality utf8, all-null utf8) and Binary pages from pylance."""
    table = pa.table(
        {
            "low": make_column("string_lowcard", 1000, "some"),
            "allnull": pa.nulls(1000, pa.string()),
            "fixedlen": make_column("string_fixedlen", 1000, "none"),
            "const": pa.array(np.full(1000, 7, np.int64)),
        }
    )
    path = pylance_write(str(tmp_path / "t.lance"), table)
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    kinds = [c.pages[0].encoding.WhichOneof("array_encoding") for c in reader._columns]
    assert kinds == ["dictionary", "dictionary", "binary", "nullable"]
    assert_tables(ours_read_file(path), table)


def test_dataset_written_by_pylance(tmp_path) -> None:
    table = table_of(["int64", "string", "struct", "list_struct"], 2000, "some", seed=8)
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version="2.0")
    files = glob.glob(os.path.join(uri, "data", "*.lance"))
    assert len(files) == 1
    fragment = lance.dataset(uri).get_fragments()[0]
    data_file = fragment.data_files()[0]
    assert (data_file.file_major_version, data_file.file_minor_version) == (2, 0)
    with open(files[0], "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), files[0]))
    cmap = dict(zip(data_file.fields, data_file.column_indices, strict=True))
    got = pa.table(reader.read(reader.schema.fields, cmap), schema=table.schema)
    assert_tables(got, table)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_newer_versions_are_read(tmp_path, version: str) -> None:
    """2.1/2.2 files open and read (the full coverage is in test_v2_read.py)."""
    path = str(tmp_path / f"v{version}.lance")
    writer = lance.file.LanceFileWriter(path, pa.schema([("a", pa.int64())]), version=version)
    writer.write_batch(pa.table({"a": [1, 2, 3]}))
    writer.close()
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    assert (reader.major, reader.minor) == tuple(int(x) for x in version.split("."))
    assert reader.read(reader.schema.fields, {reader.schema.fields[0].id: 0})[0].to_pylist() == [
        1, 2, 3
    ]


@pytest.mark.parametrize("scheme", ["zstd", "lz4"])
def test_we_read_pylance_compressed_binary(tmp_path, scheme: str) -> None:
    meta = {"lance-encoding:compression": scheme}
    schema = pa.schema(
        [pa.field("s", pa.string(), metadata=meta), pa.field("b", pa.large_binary(), metadata=meta)]
    )
    strings = [str(i) * 3 if i % 5 else None for i in range(3000)]
    table = pa.table(
        [pa.array(strings), pa.array([bytes(i % 7) for i in range(3000)], pa.large_binary())],
        schema=schema,
    )
    path = pylance_write(str(tmp_path / "c.lance"), table)
    with open(path, "rb") as f:
        reader = LanceFileReader(BytesSource(f.read(), path))
    page = reader._columns[0].pages[0]
    assert page.encoding.binary.bytes.flat.compression.scheme == scheme
    assert_tables(ours_read_file(path), table)
    cmap = {f.id: i for i, f in enumerate(reader.schema.walk())}
    rows = np.array([2999, 5, 6, 1000])
    got = pa.table(reader.take(reader.schema.fields, cmap, rows), schema=schema)
    assert_tables(got, table.take(rows))


@pytest.mark.parametrize("mode", NULL_MODES)
def test_fixed_size_binary_pages_both_ways(tmp_path, mode: str) -> None:
    """pylance's 2.0 writer never emits FixedSizeBinary but its reader must take ours."""
    table = pa.table(
        {
            "s": make_column("string_fixedlen", 500, mode, seed=1),
            "b": make_column("string_fixedlen", 500, mode, seed=2).cast(pa.large_binary()),
            "mixed": pa.array([str(i) for i in range(500)]),  # lengths differ: Binary
        }
    )
    data, schema, written = write_ours(table, fixed_size_binary=True)
    reader = LanceFileReader(BytesSource(data))
    kinds = [c.pages[0].encoding.WhichOneof("array_encoding") for c in reader._columns]
    if mode == "all":  # nothing to size: what pylance would write
        assert kinds == ["dictionary", "binary", "binary"]
    else:
        assert kinds == ["nullable", "nullable", "binary"]  # FixedSizeBinary inside Nullable
        page = reader._columns[0].pages[0].encoding.nullable
        inner = page.no_nulls.values if mode == "none" else page.some_nulls.values
        assert inner.fixed_size_binary.byte_width == 8
    cmap = dict(zip(written.fields, written.column_indices, strict=True))
    assert_tables(pa.table(reader.read(schema.fields, cmap), schema=table.schema), table)
    rows = np.array([499, 3, 3, 250, 0])
    got = pa.table(reader.take(schema.fields, cmap, rows), schema=table.schema)
    assert_tables(got, table.take(rows))
    path = str(tmp_path / "fsb.lance")
    with open(path, "wb") as f:
        f.write(data)
    assert_tables(pylance_read(path), table)
