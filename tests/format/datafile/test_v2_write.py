"""Our Lance 2.2 writer: pylance reads every file we write, row for row, and so do we."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, NULL_MODES, assert_same, table_of
from test_v2_read import special_table
from v2_helpers import census, open_ours, random_rows

from lance_sql.errors import SchemaError, UnsupportedFeatureError
from lance_sql.format.datafile import LanceFileWriter
from lance_sql.format.schema import LanceSchema

lance_file = pytest.importorskip("lance.file")

SMALL_PAGES = {"page_bytes": 16 * 1024, "max_page_bytes": 64 * 1024}


def write_22(table: pa.Table, path, batch_rows: int | None = None, version: str = "2.2",
             **kw) -> bytes:
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, version=version, **kw)
    batches = table.to_batches(max_chunksize=batch_rows) if batch_rows else [table]
    for batch in batches:
        writer.write_batch(batch)
    written = writer.finish()
    data = sink.getvalue()
    assert written.size_bytes == len(data)
    assert f"{written.major}.{written.minor}" == version
    path.write_bytes(data)
    return data


def roundtrip(tmp_path, table: pa.Table, **kw) -> bytes:
    """Write ``table`` (``version=`` and the writer's options in ``kw``) and check that
    pylance and we read every column, and pylance takes random rows, as written."""
    path = tmp_path / "ours.lance"
    data = write_22(table, path, **kw)
    reference = lance_file.LanceFileReader(str(path))
    theirs = reference.read_all().to_table()
    reader, cmap = open_ours(data)
    rows = np.unique(random_rows(table.num_rows, 40, 1)) if table.num_rows else np.array([], int)
    taken = reference.take_rows(rows.tolist()).to_table() if rows.size else None
    for field in reader.schema.fields:
        expected = table.column(field.name)
        assert_same(theirs.column(field.name), expected, f"pylance reads {field.name}")
        assert_same(reader.read([field], cmap)[0], expected, f"we read {field.name}")
        if taken is not None:
            assert_same(taken.column(field.name), expected.take(pa.array(rows)),
                        f"pylance take {field.name}")  # fmt: skip
    return data


@pytest.mark.parametrize("mode", NULL_MODES)
def test_every_kind_round_trips_through_pylance(tmp_path, mode: str) -> None:
    table = table_of(ALL_KINDS, 3000, mode, seed=21)
    data = roundtrip(tmp_path, table, batch_rows=700, **SMALL_PAGES)
    seen = census(data)
    pages = seen["mini_block_layout"] + seen["constant_layout"] + seen["full_zip_layout"]
    assert pages > 2 * len(ALL_KINDS)  # several pages per column
    if mode == "all":
        assert seen["constant_layout"]
    else:
        assert seen["inline_bitpacking"] and seen["out_of_line_bitpacking"]


def test_special_shapes_round_trip_through_pylance(tmp_path) -> None:
    table = special_table(2000)
    keep = [f.name for f in table.schema  # packed structs and blobs are not writable
            if not {b"lance-encoding:packed", b"lance-encoding:blob"} & set(f.metadata or {})]
    data = roundtrip(tmp_path, table.select(keep))
    seen = census(data)
    for kind in ("mini_block_layout", "full_zip_layout", "constant_layout", "page_dictionary",
                 "inline_bitpacking", "fixed_size_list", "variable"):  # fmt: skip
        assert seen[kind], f"our writer never used {kind}: {seen}"


def test_null_structs_and_lists_of_them(tmp_path) -> None:
    """What 2.0 cannot store: null structs, at the top and inside lists."""
    st = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    values = [None if i % 3 == 0 else {"a": None if i % 5 == 0 else i,
                                       "b": None if i % 7 == 0 else [str(i)] * (i % 3)}
              for i in range(500)]  # fmt: skip
    table = pa.table({
        "s": pa.array(values, st),
        "ls": pa.array([None if i % 4 == 0 else [values[(i + j) % 500] for j in range(i % 4)]
                        for i in range(500)], pa.list_(st)),
    })  # fmt: skip
    roundtrip(tmp_path, table)


def test_levels_that_do_not_fit_a_chunk_fall_back_to_full_zip(tmp_path) -> None:
    lists = [[]] * 70_000 + [[1, 2, 3]] + [None] * 10 + [[4]]
    table = pa.table({"l": pa.array(lists, pa.list_(pa.int32()))})
    data = roundtrip(tmp_path, table)
    assert census(data)["full_zip_layout"]


def test_large_vectors_and_long_strings_use_full_zip(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n = 600
    table = pa.table({
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 128, np.float32)), 128),
        "s": pa.array(["y" * (256 + i % 40) if i % 5 else None for i in range(n)]),
        "ls": pa.array([["z" * 300] * (i % 3) if i % 4 else None for i in range(n)],
                       pa.list_(pa.large_string())),
    })  # fmt: skip
    data = roundtrip(tmp_path, table)
    assert census(data)["full_zip_layout"] == 3


def test_compression_pays_where_it_should(tmp_path) -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    table = pa.table({
        "small": pa.array(rng.integers(0, 100, n)),
        "cats": pa.array([f"category-{i}" for i in rng.integers(0, 20, n)]),
        "const": pa.array(np.full(n, 3.5)),
    })  # fmt: skip
    data = roundtrip(tmp_path, table)
    raw = sum(c.nbytes for c in table.columns)
    assert len(data) < raw / 4, (len(data), raw)


def test_written_file_lists_leaf_columns(tmp_path) -> None:
    arrow = pa.schema([
        ("id", pa.int64()), ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("l", pa.list_(pa.int64())),
    ])  # fmt: skip
    schema = LanceSchema.from_arrow(arrow)
    writer = LanceFileWriter(io.BytesIO(), schema, version="2.2")
    writer.write_batch(pa.table({"id": [1], "st": [{"a": 1, "b": "x"}], "l": [[1]]}, arrow))
    written = writer.finish()
    leaves = [f.id for f in schema.walk() if not f.children]
    assert written.fields == tuple(leaves) and written.column_indices == tuple(range(len(leaves)))


def test_writer_errors() -> None:
    schema = LanceSchema.from_arrow(pa.schema([("a", pa.int64())]))
    with pytest.raises(UnsupportedFeatureError, match="2.3"):
        LanceFileWriter(io.BytesIO(), schema, version="2.3")
    meta = {"lance-encoding:packed": "true"}
    packed = pa.field("p", pa.struct([("a", pa.int32()), ("s", pa.string())]), metadata=meta)
    with pytest.raises(UnsupportedFeatureError, match="'p'.*packed"):
        LanceFileWriter(io.BytesIO(), LanceSchema.from_arrow(pa.schema([packed])), version="2.2")
    strict = LanceSchema.from_arrow(pa.schema([pa.field("a", pa.int64(), nullable=False)]))
    writer = LanceFileWriter(io.BytesIO(), strict, version="2.2")
    with pytest.raises(SchemaError, match="'a' is not nullable"):
        writer.write_batch(pa.table({"a": pa.array([1, None])}))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("arrow", [pa.binary(0), pa.list_(pa.binary(0), 2),
                                   pa.struct([("l", pa.list_(pa.binary(0)))])])
def test_zero_width_binary_is_refused(version: str, arrow: pa.DataType) -> None:
    """``fixed_size_binary(0)`` is an UnsupportedFeatureError (it was a ZeroDivisionError
    sizing the mini-block chunks)."""
    schema = LanceSchema.from_arrow(pa.schema([("c", arrow)]))
    with pytest.raises(UnsupportedFeatureError, match="'c.*fixed_size_binary"):
        LanceFileWriter(io.BytesIO(), schema, version=version)


def test_json_and_empty_structs_are_refused() -> None:
    for arrow in (pa.json_(pa.string()), pa.struct([])):
        schema = LanceSchema.from_arrow(pa.schema([("c", arrow)]))
        with pytest.raises(UnsupportedFeatureError, match="'c'"):
            LanceFileWriter(io.BytesIO(), schema, version="2.2")


def test_json_is_refused_on_read(tmp_path) -> None:
    """pylance stores lance.json as JSONB; we refuse rather than return the raw bytes."""
    from v2_helpers import pylance_write

    table = pa.table({"j": pa.array(['{"a": 1}'], pa.json_(pa.string()))})
    reader, cmap = open_ours(pylance_write(tmp_path / "j.lance", table, "2.2"))
    with pytest.raises(UnsupportedFeatureError, match="JSONB"):
        reader.read(reader.schema.fields, cmap)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_dictionary_entries_that_are_null_stay_null(tmp_path, version: str) -> None:
    """A NULL inside a dictionary (not in its indices: Arrow's validity does not count
    it) is written as a NULL, as pylance writes it; it was written as an empty string."""
    words = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 2, 1, 0], pa.int32()),
                                           pa.array(["x", None, "z"]))
    assert words.null_count == 0
    listed = pa.ListArray.from_arrays(pa.array([0, 2, 2, 6]), words)
    nested = pa.StructArray.from_arrays([words], names=["w"])
    table = pa.table({"words": words, "listed": pa.concat_arrays([listed, listed]),
                      "nested": nested})
    data = write_22(table, tmp_path / "ours.lance", version=version)
    theirs = lance_file.LanceFileReader(str(tmp_path / "ours.lance")).read_all().to_table()
    reader, cmap = open_ours(data)
    words_out = ["x", None, "z", "z", None, "x"]
    expected = {"words": words_out, "listed": [words_out[:2], [], words_out[2:]] * 2,
                "nested": [{"w": w} for w in words_out]}
    for i, field in enumerate(reader.schema.fields):
        ours = reader.read([field], cmap)[0]
        for got in (ours, theirs.column(i)):
            assert pa.Table.from_arrays([got], ["c"]).cast(
                pa.schema([("c", _decoded(got.type))])).column(0).to_pylist() == (
                    expected[field.name]), field.name


def _decoded(t: pa.DataType) -> pa.DataType:
    """``t`` with its dictionaries replaced by their value types."""
    if pa.types.is_dictionary(t):
        return t.value_type
    if pa.types.is_list(t):
        return pa.list_(_decoded(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([(t.field(i).name, _decoded(t.field(i).type))
                          for i in range(t.num_fields)])
    return t
