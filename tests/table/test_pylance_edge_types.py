"""Tables pylance writes with types at the edge of what the format holds, read by lance_sql
as pylance reads them."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_struct_without_fields_reads_as_empty_structs(tmp_path: Path, version: str) -> None:
    """Its column holds no values: every row is ``{}`` (it read as NULL)."""
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "v": pa.array([{}, {}, {}], pa.struct([]))}),
                        path, data_storage_version=version)
    want = lance.dataset(path).to_table()
    ds = lance_sql.dataset(path)
    assert ds.to_table().equals(want)
    assert ds.to_table()["v"].null_count == 0
    assert ds.take([1]).to_pylist() == [{"id": 2, "v": {}}]
    assert ds.to_table(filter="id > 1").to_pylist() == want.slice(1).to_pylist()
    got = lance_sql.connect(str(tmp_path)).sql("SELECT v FROM t WHERE id = 2").to_arrow_table()
    assert got.to_pylist() == [{"v": {}}]


@pytest.mark.parametrize("writer", ["pylance", "lance_sql"])
def test_update_beside_null_structs_with_a_required_child(tmp_path: Path, writer: str) -> None:
    """A NULL struct whose child may not be NULL: an update of another column rewrote
    the row and refused the struct (pyarrow's cast checked the child under the NULL)."""
    st = pa.struct([pa.field("x", pa.int32(), nullable=False)])
    data = pa.table({"id": pa.array([0, 1, 2], pa.int64()),
                     "s": pa.array([{"x": 1}, None, {"x": 3}], st)})
    path = str(tmp_path / "t.lance")
    (lance if writer == "pylance" else lance_sql).write_dataset(data, path)
    assert lance_sql.dataset(path).update({"id": "id + 10"}, "id = 1") == {"num_rows_updated": 1}
    want = [{"id": 0, "s": {"x": 1}}, {"id": 2, "s": {"x": 3}}, {"id": 11, "s": None}]
    assert lance_sql.dataset(path).to_table().to_pylist() == want
    assert lance.dataset(path).to_table().to_pylist() == want
    with pytest.raises(lance_sql.LanceError):  # a required column still refuses NULLs
        lance_sql.write_dataset(pa.table({"id": pa.array([None], pa.int64()),
                                          "s": pa.array([None], st)}),
                                str(tmp_path / "n.lance"),
                                schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                  pa.field("s", st)]))


def test_appending_data_without_a_nullable_column_fills_nulls(tmp_path: Path) -> None:
    """As pylance appends it; a missing column that may not be NULL is still refused."""
    st = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                        pa.field("f", pa.float64()), pa.field("st", st)])
    full = pa.table({"id": [1, 2], "s": ["a", "b"], "f": [1.0, 2.0],
                     "st": pa.array([{"a": 1, "b": "x"}, None], st)}, schema=schema)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_sql.write_dataset(full, ours)
    lance.write_dataset(full, theirs)
    part = pa.table({"s": ["c"], "id": pa.array([3], pa.int64())})
    lance_sql.write_dataset(part, ours, mode="append")
    lance.write_dataset(part, theirs, mode="append")
    assert lance_sql.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert lance.dataset(ours).to_table().to_pylist()[-1] == \
        {"id": 3, "s": "c", "f": None, "st": None}
    with pytest.raises(lance_sql.SchemaError, match="'id' is missing"):
        lance_sql.write_dataset(pa.table({"s": ["d"]}), ours, mode="append")
    assert lance_sql.dataset(ours).count_rows() == 3


def test_packed_structs_are_written_packed_as_pylance_writes_them(tmp_path: Path) -> None:
    """A struct marked ``lance-encoding:packed`` is stored row by row in one column (it
    was refused: written unpacked with the hint kept, pylance could read neither it nor
    the columns after it); pylance appends to it and reads it back."""
    st = pa.struct([("a", pa.int32()), ("b", pa.float64())])
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("st", st, metadata={"lance-encoding:packed": "true"}),
                        pa.field("after", pa.string())])
    data = pa.table({"id": [1, 2], "st": [{"a": 1, "b": 1.5}, {"a": -2, "b": 0.0}],
                     "after": ["x", "y"]}, schema=schema)
    for version in ("2.0", "2.1", "2.2"):
        path = str(tmp_path / version)
        lance_sql.write_dataset(data, path, data_storage_version=version)
        lance.write_dataset(data, path, mode="append")
        lance_sql.write_dataset(data, path, mode="append")
        expected = pa.concat_tables([data] * 3)
        assert lance_sql.dataset(path).to_table().equals(expected), version
        assert lance.dataset(path).to_table().equals(expected), version


@pytest.mark.parametrize(("column", "value"), [
    ("dec", "7"), ("dec", "-12345678"), ("dec", "id * 3"), ("ts", "'2024-01-02T03:04:05'"),
    ("ny", "'2024-07-02 03:04:05'"), ("ny", "'2024-01-02T03:04:05Z'"),
])
def test_update_casts_values_as_pylance(tmp_path: Path, column: str, value: str) -> None:
    """An integer into a decimal column (pyarrow wanted a precision for every int64), text
    without an offset into a zoned timestamp (the zone's wall-clock time)."""
    data = pa.table({"id": [1, 2],
                     "dec": pa.array([None, None], pa.decimal128(10, 2)),
                     "ts": pa.array([0, 1], pa.timestamp("us", "UTC")),
                     "ny": pa.array([0, 1], pa.timestamp("us", "America/New_York"))})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance.write_dataset(data, ours)
    lance.write_dataset(data, theirs)
    assert lance_sql.dataset(ours).update({column: value}) == \
        lance.dataset(theirs).update({column: value})
    assert lance_sql.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())


def test_update_refuses_an_integer_its_decimal_cannot_hold(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"dec": pa.array([None], pa.decimal128(4, 2))}), path)
    with pytest.raises(lance_sql.InvalidInputError, match="'dec'"):
        lance_sql.dataset(path).update({"dec": "100"})
    assert lance_sql.dataset(path).version == 1


def test_columns_may_be_struct_fields_or_sql_expressions(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"],
                                  "st": [{"x": 1, "y": "p"}, {"x": 2, "y": "q"}, None]}),
                        path, max_rows_per_file=2)
    theirs, ours = lance.dataset(path), lance_sql.dataset(path)
    for columns, kwargs in ((["st.x", "id"], {}), (["st.y"], {"filter": "id > 1"}),
                            ({"b": "id * 2", "u": "upper(s)"}, {}),
                            ({"b": "id * 2"}, {"filter": "s <> 'a'", "limit": 1}),
                            ({"x": "st.x + id"}, {"offset": 1})):
        want = theirs.to_table(columns=columns, **kwargs)
        assert ours.to_table(columns=columns, **kwargs).to_pylist() == want.to_pylist()
        batches = list(ours.to_batches(columns=columns, **kwargs))
        assert pa.Table.from_batches(batches).to_pylist() == want.to_pylist()
    got = ours.to_table(columns={"b": "id * 2"}, with_row_id=True)
    assert got.column_names == ["b", "_rowid"] and got.column("b").to_pylist() == [2, 4, 6]
    assert ours.scanner(columns={"b": "id * 2"}, filter="id > 1").count_rows() == 2
    with pytest.raises(lance_sql.NotFoundError):
        ours.to_table(columns={"b": "nope * 2"})


def test_fsst_pages_of_2_0_files(tmp_path: Path) -> None:
    """pylance 2.0 files compress strings and binaries with FSST when asked: read (they
    were refused as an unsupported encoding)."""
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "ünï", ""]
    strings = [None if i % 11 == 0 else " ".join(rng.choice(words, 4)) for i in range(3000)]
    blobs = [None if i % 13 == 0 else bytes(rng.integers(97, 100, int(k)).astype(np.uint8))
             for i, k in enumerate(rng.integers(0, 200, 3000))]
    meta = {"lance-encoding:compression": "fsst"}
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string(), metadata=meta),
                        pa.field("b", pa.binary(), metadata=meta)])
    data = pa.table({"id": list(range(3000)), "s": strings, "b": blobs}, schema=schema)
    path = str(tmp_path / "t")
    lance.write_dataset(data, path, data_storage_version="2.0", max_rows_per_file=1000)
    ours, theirs = lance_sql.dataset(path), lance.dataset(path)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table().select(["s", "b"]).equals(data.select(["s", "b"]))
    assert ours.take([5, 1999, 11, 2500]).equals(theirs.take([5, 1999, 11, 2500]))
    assert ours.to_table(limit=7, offset=995).equals(theirs.to_table(limit=7, offset=995))
    assert ours.to_table(filter="s LIKE 'beta%'").equals(
        theirs.to_table(filter="s LIKE 'beta%'"))


def test_a_fixed_size_list_of_structs_reads_beside_other_columns(tmp_path: Path) -> None:
    """pylance stores such a list's struct fields item by item (two entries a row here),
    and cannot read the list together with the table's other columns itself; lance_sql
    reads the whole table (the list was refused before)."""
    item = pa.struct([("a", pa.int32()), ("b", pa.string())])
    path = str(tmp_path / "t")
    data = pa.table({
        "id": [0, 1, 2], "v": pa.array([[{"a": i, "b": "x"}, {"a": 2, "b": None}]
                                        for i in range(3)], pa.list_(item, 2)),
        "after": [7, 8, 9]})
    lance.write_dataset(data, path)
    ds = lance_sql.dataset(path)
    assert ds.to_table().equals(data)
    assert ds.to_table(columns=["v"]).equals(lance.dataset(path).to_table(columns=["v"]))
    assert ds.to_table(filter="id > 0").equals(data.slice(1))
    assert ds.take([2, 0]).equals(data.take([2, 0]))
    with pytest.raises(Exception, match="differing lengths"):  # pylance 14 itself
        lance.dataset(path).to_table()


def test_halffloat_columns_in_filters_and_updates(tmp_path: Path) -> None:
    """Arrow compares and computes no float16: such a column is read as float32 there."""
    path, twin = str(tmp_path / "t"), str(tmp_path / "u")
    data = pa.table({"id": [0, 1, 2], "h": pa.array(np.array([1, 2, 3], np.float16))})
    lance.write_dataset(data, path)
    lance.write_dataset(data, twin)
    ours, theirs = lance_sql.dataset(path), lance.dataset(twin)
    for where in ("h = 2.0", "h <> h", "h > 1", "h * 2 > 3", "h IN (1.0, 3.0)"):
        assert ours.to_table(filter=where).equals(theirs.to_table(filter=where)), where
    assert ours.update({"h": "h * 2.5"}, "id > 0") == theirs.update({"h": "h * 2.5"}, "id > 0")
    assert lance_sql.dataset(path).to_table().equals(lance.dataset(twin).to_table())


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
def test_2_0_lists_whose_null_slots_hide_null_structs(tmp_path: Path, list_type) -> None:
    """Items under a NULL list are no values: a NULL struct among them was refused as a
    struct NULL, which 2.0 cannot store; written as an empty list, as pylance writes it."""
    st = pa.struct([("a", pa.int32())])
    values = pa.array([{"a": 1}, None, {"a": 3}, {"a": 4}], st)
    offsets = pa.array([0, 1, 2, 4], pa.int32() if list_type is pa.list_ else pa.int64())
    cls = pa.ListArray if list_type is pa.list_ else pa.LargeListArray
    lists = cls.from_arrays(offsets, values, mask=pa.array([False, True, False]))
    data = pa.table({"id": [0, 1, 2], "l": lists})
    path = str(tmp_path / "t")
    lance_sql.write_dataset(data, path, data_storage_version="2.0")
    want = [[{"a": 1}], None, [{"a": 3}, {"a": 4}]]
    assert lance_sql.dataset(path).to_table().column("l").to_pylist() == want
    assert lance.dataset(path).to_table().column("l").to_pylist() == want
    assert lance_sql.dataset(path).take([2, 1]).column("l").to_pylist() == want[:0:-1]


def test_projections_keep_the_scanner_api_and_system_columns(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": [1, 2], "st": [{"x": 1}, {"x": 2}]}), path)
    ds = lance_sql.dataset(path)
    scanner = ds.scanner(columns=["st.x"], filter="id > 1")
    assert "LanceScan" in scanner.explain_plan()
    assert [t.to_pylist() for t in scanner.to_tables()] == [[{"st.x": 2}]]
    got = ds.to_table(columns=["st.x", "_rowid"])
    assert got.to_pylist() == [{"st.x": 1, "_rowid": 0}, {"st.x": 2, "_rowid": 1}]
    assert ds.to_table(columns={"r": "_rowaddr + 1"}).column("r").to_pylist() == [1, 2]
    assert ds.to_table(columns={"r": "_rowaddr"}).column_names == ["r"]
