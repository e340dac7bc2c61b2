"""Puts, deletes and key lookups cast values within a kind only: a wider integer, large
strings, a dictionary's values, finer timestamps. Text parsed as numbers, numbers made
text or booleans, timestamps cut to dates are refused, as an append refuses them (a put
took them: ``"51"`` landed in an integer column, a timestamp lost its time of day)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.type_kinds import same_kind

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("a", pa.int64()), pa.field("d", pa.date32()),
                    pa.field("s", pa.large_string()), pa.field("f", pa.float64()),
                    pa.field("t", pa.timestamp("ns")),
                    pa.field("st", pa.struct([("x", pa.int32()), ("y", pa.string())]))])
ROW = {"id": pa.array([2], pa.int64()), "a": pa.array([20], pa.int64()),
       "d": pa.array([dt.date(2021, 5, 6)], pa.date32()),
       "s": pa.array(["s"], pa.large_string()), "f": pa.array([1.5], pa.float64()),
       "t": pa.array([1], pa.timestamp("ns")),
       "st": pa.array([{"x": 1, "y": "y"}], SCHEMA.field("st").type)}


@pytest.fixture
def mw(tmp_path: Path):
    base = dict(ROW, id=pa.array([1], pa.int64()))
    ds = lance_sql.write_dataset(pa.table(base, schema=SCHEMA), str(tmp_path / "t.lance"))
    mem_wal = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    yield mem_wal


@pytest.mark.parametrize(("column", "given"), [
    ("a", pa.array(["51"])),  # text parsed as a number
    ("a", pa.array([True])),
    ("s", pa.array([5])),  # a number made text
    ("f", pa.array(["0.5"])),
    ("d", pa.array([dt.datetime(2021, 5, 6, 23, 59)], pa.timestamp("us"))),  # cut to a day
    ("t", pa.array(["2021-05-06"])),
    ("t", pa.array([5], pa.int64())),
    ("st", pa.array([{"x": "1", "y": "y"}])),  # a member of another kind
    ("st", pa.array([{"x": 1, "q": "y"}])),  # a member the table lacks
])
def test_a_value_of_another_kind_is_refused(mw, column: str, given: pa.Array) -> None:
    with mw.writer() as writer:
        with pytest.raises(SchemaError, match=f"column '{column}'.*one kind"):
            writer.put(pa.table(dict(ROW, **{column: given})))
        writer.put(pa.table(ROW))  # the writer goes on; nothing of the refused put landed
    got = mw.scanner(["id", "a"]).to_table().sort_by("id").to_pylist()
    assert got == [{"id": 1, "a": 20}, {"id": 2, "a": 20}]


def test_values_of_the_same_kind_are_cast(mw) -> None:
    row = dict(ROW, id=pa.array([3], pa.int32()), a=pa.array([7], pa.int8()),
               s=pa.array(["x"]).dictionary_encode(), f=pa.array([2], pa.int64()),
               t=pa.array([dt.datetime(2020, 1, 1)], pa.timestamp("ms")),
               st=pa.array([{"x": 4}], pa.struct([("x", pa.int64())])),
               d=pa.array([dt.date(2020, 1, 2)], pa.date64()))
    with mw.writer() as writer:
        writer.put(pa.table(row))
    got = mw.get(pa.table({"id": pa.array([3], pa.int64())})).to_pylist()
    assert got == [{"id": 3, "a": 7, "d": dt.date(2020, 1, 2), "s": "x", "f": 2.0,
                    "t": dt.datetime(2020, 1, 1), "st": {"x": 4, "y": None}}]


def test_keys_of_another_kind_are_refused_by_deletes_and_lookups(mw) -> None:
    with mw.writer() as writer:
        writer.put(pa.table(ROW))
        with pytest.raises(SchemaError, match="column 'id'.*one kind"):
            writer.delete(pa.table({"id": ["2"]}))
    with pytest.raises(InvalidInputError, match="another kind of value"):
        mw.get(pa.table({"id": ["2"]}))
    assert mw.get(pa.table({"id": pa.array([2], pa.int32())})).column("a").to_pylist() == [20]


@pytest.mark.parametrize(("given", "target", "fits"), [
    (pa.int8(), pa.uint64(), True), (pa.int64(), pa.float16(), True),
    (pa.float64(), pa.decimal128(10, 2), True), (pa.string(), pa.large_string(), True),
    (pa.dictionary(pa.int8(), pa.string()), pa.string(), True),
    (pa.string(), pa.dictionary(pa.int8(), pa.string()), True),
    (pa.timestamp("s"), pa.timestamp("ns", "UTC"), True), (pa.date64(), pa.date32(), True),
    (pa.null(), pa.list_(pa.int8()), True), (pa.list_(pa.null()), pa.list_(pa.int8()), True),
    (pa.list_(pa.int8()), pa.large_list(pa.int64()), True),
    (pa.list_(pa.string()), pa.list_(pa.int64()), False),
    (pa.list_(pa.float32(), 2), pa.list_(pa.float32(), 3), False),
    (pa.list_(pa.float32()), pa.list_(pa.float32(), 3), False),
    (pa.map_(pa.string(), pa.int8()), pa.map_(pa.string(), pa.int64()), True),
    (pa.map_(pa.string(), pa.int8()), pa.map_(pa.int8(), pa.int64()), False),
    (pa.binary(), pa.string(), False), (pa.binary(4), pa.binary(), False),
    (pa.binary(4), pa.binary(4), True), (pa.bool_(), pa.int8(), False),
    (pa.timestamp("us"), pa.date32(), False), (pa.date32(), pa.timestamp("us"), False),
    (pa.time64("ns"), pa.time32("s"), True), (pa.duration("s"), pa.int64(), False),
    (pa.struct([("a", pa.int8())]), pa.struct([("a", pa.int64()), ("b", pa.string())]), True),
    (pa.struct([("b", pa.int8())]), pa.struct([("a", pa.int64())]), False),
    (pa.struct([("a", pa.int8())]), pa.int64(), False),
])
def test_kinds(given: pa.DataType, target: pa.DataType, fits: bool) -> None:
    assert same_kind(given, target) is fits
