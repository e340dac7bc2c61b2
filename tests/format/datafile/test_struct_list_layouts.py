"""Structs pylance stores in layouts of their own: fixed-size lists of structs (2.2 keeps
each struct field item by item, ``k`` entries a row in every repdef layer) and packed
structs (2.0: one buffer of fixed-width rows). pylance 14 writes them but cannot read some
of them back itself, so lance_sql's reads are compared with the data written."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.datafile import BytesSource, LanceFileReader, LanceFileWriter
from lance_sql.format.datafile.decode_v2_1 import column_fields, elements_per_row
from lance_sql.format.schema import LanceSchema

lance = pytest.importorskip("lance")

ITEM = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _item(r: random.Random) -> dict | None:
    if r.random() < 0.1:
        return None
    return {"a": None if r.random() < 0.2 else r.randint(-5, 5),
            "b": None if r.random() < 0.2 else "x" * r.randint(0, 4)}


def _fixed(r: random.Random, k: int, inner: Callable[[random.Random], object]) -> list | None:
    return None if r.random() < 0.15 else [inner(r) for _ in range(k)]


LAYOUTS: dict[str, tuple[pa.DataType, Callable[[random.Random], object]]] = {
    "fsl<struct>": (pa.list_(ITEM, 3), lambda r: _fixed(r, 3, _item)),
    "struct<fsl<struct>>": (
        pa.struct([("z", pa.int64()), ("f", pa.list_(ITEM, 2))]),
        lambda r: None if r.random() < 0.1 else {"z": r.randint(0, 9), "f": _fixed(r, 2, _item)}),
    "fsl<struct<list>>": (
        pa.list_(pa.struct([("l", pa.list_(pa.int32()))]), 2),
        lambda r: _fixed(r, 2, lambda r: None if r.random() < 0.1 else {
            "l": None if r.random() < 0.2 else [r.randint(0, 9) for _ in range(r.randint(0, 3))]})),
    "fsl<struct<fsl<float>>>": (
        pa.list_(pa.struct([("v", pa.list_(pa.float32(), 2))]), 2),
        lambda r: _fixed(r, 2, lambda r: None if r.random() < 0.1 else {
            "v": None if r.random() < 0.2 else [r.random(), r.random()]})),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_fixed_size_lists_of_structs_written_by_pylance(tmp_path: Path, layout: str) -> None:
    dtype, make = LAYOUTS[layout]
    r = random.Random(7)
    n = 3000
    data = pa.table({"id": pa.array(range(n), pa.int64()),
                     "x": pa.array([make(r) for _ in range(n)], dtype),
                     "after": pa.array([f"s{i}" for i in range(n)])})
    path = str(tmp_path / "t")
    lance.write_dataset(data, path, data_storage_version="2.2", max_rows_per_file=1200)
    ds = lance_sql.dataset(path)
    assert ds.to_table().equals(data)
    rows = np.array(sorted(r.sample(range(n), 40)))
    assert ds.take(rows).equals(data.take(rows))
    assert ds.take([2999, 0, 1234]).equals(data.take([2999, 0, 1234]))
    assert ds.to_table(filter="id % 7 = 3").equals(data.filter(np.arange(n) % 7 == 3))
    assert ds.to_table(offset=1190, limit=20).equals(data.slice(1190, 20))
    ds.delete("id < 100")
    assert lance_sql.dataset(path).to_table().equals(data.slice(100))


def test_fixed_size_list_of_structs_through_sql(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 2, 3],
                     "x": pa.array([[{"a": 1, "b": "p"}, {"a": 2, "b": None}], None,
                                    [None, {"a": 5, "b": "q"}]], pa.list_(ITEM, 2))})
    lance.write_dataset(data, str(tmp_path / "t"), data_storage_version="2.2")
    got = lance_sql.connect(str(tmp_path)).sql(
        "SELECT id, x FROM t WHERE x IS NOT NULL ORDER BY id").to_arrow_table()
    assert got.to_pylist() == [row for row in data.to_pylist() if row["x"] is not None]


def test_elements_per_row_multiplies_the_sizes_of_lists_of_structs() -> None:
    schema = LanceSchema.from_arrow(pa.schema([
        pa.field("x", pa.struct([("z", pa.int64()),
                                 ("f", pa.list_(pa.struct([("a", pa.int32()),
                                                           ("v", pa.list_(pa.float32(), 4))]),
                                                3))]))]))
    x = schema.fields[0]
    by_name = {f.name: f for f in x.walk()}
    assert elements_per_row(x, by_name["z"].id) == 1
    assert elements_per_row(x, by_name["a"].id) == 3
    assert elements_per_row(x, by_name["v"].id) == 3  # a list of floats is one entry


@pytest.mark.parametrize("shape", ["struct", "fsl<struct>", "fsl<struct> with nulls"])
def test_packed_structs_of_lance_2_0(tmp_path: Path, shape: str) -> None:
    """pylance 2.0 packs fixed-width structs without nulls (fixed-size lists of structs
    always): the rows were refused as a corrupt page before."""
    st = pa.struct([("a", pa.int32()), ("b", pa.float64())])
    n = 2000
    if shape == "struct":
        values = pa.array([{"a": i, "b": i / 2} for i in range(n)], st)
        field = pa.field("p", st, metadata={"lance-encoding:packed": "true"})
    else:
        values = pa.array([None if shape.endswith("nulls") and i % 5 == 1 else
                           [{"a": i, "b": 0.5}, {"a": -i, "b": 1.5}] for i in range(n)],
                          pa.list_(st, 2))
        field = pa.field("p", values.type)
    data = pa.table([pa.array(range(n), pa.int64()), values],
                    schema=pa.schema([pa.field("id", pa.int64()), field]))
    path = str(tmp_path / "t")
    lance.write_dataset(data, path, data_storage_version="2.0", max_rows_per_file=700)
    ds = lance_sql.dataset(path)
    assert ds.to_table().cast(data.schema).equals(data)
    assert ds.take([1999, 3, 700]).cast(data.schema).equals(data.take([1999, 3, 700]))
    assert ds.to_table(filter="id BETWEEN 690 AND 710").cast(data.schema).equals(
        data.slice(690, 21))
    if shape == "struct":
        assert ds.to_table().equals(lance.dataset(path).to_table())


# layouts pylance 14 reads back itself (a list read alone: beside other columns it fails)
PYLANCE_READS = {"fsl<struct>", "fsl<struct<fsl<float>>>"}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_fixed_size_lists_of_structs_written_by_lance_sql(tmp_path: Path, layout: str) -> None:
    """Written as pylance writes them: pylance reads the list back where it reads its own,
    and the file's bytes decode to the data (small pages: rows cross page edges; a slice
    of the table: the list array has an offset)."""
    dtype, make = LAYOUTS[layout]
    r = random.Random(11)
    n = 4000
    data = pa.table({"id": pa.array(range(n), pa.int64()),
                     "x": pa.array([make(r) for _ in range(n)], dtype)}).slice(3, n - 10)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(data.schema), version="2.2",
                             page_bytes=4 * 1024, max_page_bytes=16 * 1024)
    writer.write_batch(data)
    writer.finish()
    reader = LanceFileReader(BytesSource(sink.getvalue(), "f.lance"))
    x = reader.schema.fields[1]
    assert len(reader._column(1).pages) > 1
    got = reader.read([reader.schema.fields[0], x], {f.id: i for i, f in enumerate(
        f for top in reader.schema.fields for f in column_fields(top))})
    assert pa.table(got, names=["id", "x"]).equals(data)

    path = str(tmp_path / "t")
    lance_sql.write_dataset(data, path)
    assert lance_sql.dataset(path).to_table().equals(data)
    if layout in PYLANCE_READS:
        assert lance.dataset(path).to_table(columns=["x"]).equals(data.select(["x"]))


def test_lance_sql_writes_into_a_pylance_table_of_fixed_size_lists_of_structs(
        tmp_path: Path) -> None:
    data = pa.table({"id": pa.array(range(6), pa.int64()),
                     "x": pa.array([[{"a": i, "b": str(i)}, None] if i % 3 else None
                                    for i in range(6)], pa.list_(ITEM, 2))})
    path = str(tmp_path / "t")
    lance.write_dataset(data, path)
    lance_sql.write_dataset(data.slice(0, 2), path, mode="append")
    ds = lance_sql.dataset(path)
    ds.update({"id": "id + 100"}, where="id = 4")
    ds.delete("id = 5")
    ds.optimize.compact_files()
    expected = [*(row for row in data.to_pylist() if row["id"] not in (4, 5)),
                {**data.to_pylist()[4], "id": 104}, *data.slice(0, 2).to_pylist()]
    key = lambda row: (row["id"], str(row["x"]))  # noqa: E731
    got = lance_sql.dataset(path).to_table().to_pylist()
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert sorted(lance.dataset(path).to_table(columns=["x"]).to_pylist(), key=str) == \
        sorted(({"x": row["x"]} for row in expected), key=str)


@pytest.mark.parametrize(("dtype", "version", "error", "match"), [
    (pa.list_(ITEM, 2), "2.1", lance_sql.UnsupportedFeatureError, "need Lance 2.2"),
    (pa.list_(pa.list_(ITEM, 2)), "2.2", lance_sql.UnsupportedFeatureError,
     "inside lists or other such lists"),
    (pa.list_(pa.list_(ITEM, 2), 2), "2.2", lance_sql.SchemaError, "unsupported Arrow"),
])
def test_fixed_size_lists_of_structs_pylance_cannot_write_are_refused(
        tmp_path: Path, dtype: pa.DataType, version: str, error: type, match: str) -> None:
    """As pylance refuses them (it panics on the list of lists of structs)."""
    data = pa.table({"x": pa.array([None], dtype)})
    with pytest.raises(error, match=match):
        lance_sql.write_dataset(data, str(tmp_path / "t"), data_storage_version=version)
    assert not (tmp_path / "t" / "_versions").exists()


PACKED = {"lance-encoding:packed": "true"}


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_packed_structs_written_by_lance_sql(tmp_path: Path, version: str) -> None:
    """Rows of byte-wide children side by side in one column, NULL rows too (2.1+):
    pylance reads them as it reads its own packed structs."""
    st = pa.struct([("a", pa.int32()), ("b", pa.float64()), ("t", pa.timestamp("us")),
                    ("c", pa.int8()), ("d", pa.date32()), ("fb", pa.binary(3))])
    n = 3000
    nulls = version != "2.0"  # (2.0 stores no struct validity)
    values = pa.array([None if nulls and i % 7 == 3 else
                       {"a": i, "b": i / 2, "t": i * 1000, "c": i % 100, "d": i,
                        "fb": bytes([i % 256] * 3)} for i in range(n)], st)
    data = pa.table([pa.array(range(n), pa.int64()), values],
                    schema=pa.schema([pa.field("id", pa.int64()),
                                      pa.field("p", st, metadata=PACKED)]))
    path = str(tmp_path / "t")
    lance_sql.write_dataset(data, path, data_storage_version=version, max_rows_per_file=1100)
    assert lance_sql.dataset(path).to_table().equals(data)
    assert lance.dataset(path).to_table().equals(data)
    rows = [2999, 3, 1100]
    assert lance.dataset(path).take(rows).equals(data.take(rows))


@pytest.mark.parametrize(("version", "value", "match"), [
    ("2.2", {"a": None, "s": 1.0}, "field 'a' has NULLs"),
    ("2.0", None, "NULL rows"),
])
def test_packed_structs_pylance_cannot_pack_are_refused(tmp_path: Path, version: str,
                                                        value: dict | None, match: str) -> None:
    st = pa.struct([("a", pa.int32()), ("s", pa.float64())])
    data = pa.table([pa.array([{"a": 1, "s": 2.0}, value], st)],
                    schema=pa.schema([pa.field("p", st, metadata=PACKED)]))
    with pytest.raises(lance_sql.UnsupportedFeatureError, match=match):
        lance_sql.write_dataset(data, str(tmp_path / "t"), data_storage_version=version)
    assert not (tmp_path / "t" / "_versions").exists()
    wide = pa.schema([pa.field("p", pa.struct([("a", pa.int32()), ("s", pa.string())]),
                               metadata=PACKED)])
    with pytest.raises(lance_sql.UnsupportedFeatureError, match="byte-wide fixed-width"):
        lance_sql.write_dataset(pa.table([pa.array([{"a": 1, "s": "x"}], wide[0].type)],
                                         schema=wide), str(tmp_path / "u"),
                                data_storage_version=version)


def test_a_map_of_structs_with_a_null_value(tmp_path: Path) -> None:
    """A NULL value struct puts NULLs in its fields, also in fields that take none: the
    map's entries were cast to the map's type, which refuses them (the file could not be
    read, whoever wrote it)."""
    value = pa.struct([pa.field("f1", pa.int32(), nullable=False)])
    values = pa.StructArray.from_arrays([pa.array([1, 2], pa.int32())], fields=list(value),
                                        mask=pa.array([True, False]))
    data = pa.table({"m": pa.MapArray.from_arrays(pa.array([0, 2], pa.int32()),
                                                  pa.array([1, 2], pa.int64()), values)})
    for writer in (lance, lance_sql):  # (maps need 2.2 files: pylance writes none in 2.1)
        path = str(tmp_path / f"{writer.__name__}")
        writer.write_dataset(data, path, data_storage_version="2.2")
        assert lance_sql.dataset(path).to_table().equals(data)
