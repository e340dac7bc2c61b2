"""Spark reads and appends against pylance tables: ``NOT (x <=> v)`` keeps NULL rows,
nanosecond times read (rounded down to Spark's microseconds), DataFrames whose nested
values are declared NOT NULL append to nullable columns, and values that do not fit a
narrower column fail naming it (a float16 overflow stored +inf)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_sql.spark import write_dataset


def test_not_null_safe_equal_keeps_null_rows(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3, 4], "x": [4, None, 5, 4]}), uri)
    read = spark.read.format("lance").load(uri)
    local = spark.createDataFrame(lance.dataset(uri).to_table().to_pandas())
    for condition in (~F.col("x").eqNullSafe(4), F.col("x").eqNullSafe(4),
                      ~F.col("x").eqNullSafe(None)):
        got = sorted(r.id for r in read.filter(condition).collect())
        want = sorted(r.id for r in local.filter(condition).collect())
        assert got == want
    assert sorted(r.id for r in read.filter(~F.col("x").eqNullSafe(4)).collect()) == [2, 3]


def test_nanosecond_times_read_rounded_down_to_microseconds(spark, tmp_path: Path) -> None:
    import datetime as dt

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({
        "id": [1, 2, 3],
        "ts": pa.array([1_700_000_000_123_456_789, -1, None], pa.timestamp("ns", "UTC")),
        "d": pa.array([1_999, -1, None], pa.duration("ns")),
        "l": pa.array([[1_500], None, []], pa.list_(pa.timestamp("ns")))}), uri)
    rows = {r.id: r for r in spark.read.format("lance").load(uri).collect()}
    utc = dt.UTC
    assert rows[1].ts.astimezone(utc) == dt.datetime(2023, 11, 14, 22, 13, 20, 123456,
                                                     tzinfo=utc)
    assert rows[2].ts.astimezone(utc) == dt.datetime(1969, 12, 31, 23, 59, 59, 999999,
                                                     tzinfo=utc)  # (rounded down)
    assert rows[3].ts is None and rows[3].d is None
    assert rows[1].d == dt.timedelta(microseconds=1) and rows[2].d == dt.timedelta(
        microseconds=-1)
    assert rows[1].l == [dt.datetime(1970, 1, 1, 0, 0, 0, 1)] and rows[3].l == []


def test_non_null_nested_values_append_to_nullable_columns(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({
        "id": pa.array([1], pa.int64()), "a": pa.array([[1, None]], pa.list_(pa.int64())),
        "st": pa.array([{"p": None}], pa.struct([("p", pa.int64())]))}), uri)
    df = spark.range(2, 4).selectExpr("id", "array(id, id) AS a", "named_struct('p', id) AS st")
    write_dataset(df, uri, mode="append")
    assert lance.dataset(uri).to_table().sort_by("id").to_pylist() == [
        {"id": 1, "a": [1, None], "st": {"p": None}}, {"id": 2, "a": [2, 2], "st": {"p": 2}},
        {"id": 3, "a": [3, 3], "st": {"p": 3}}]


@pytest.mark.parametrize(("column", "row", "says"), [
    ("h", (2, 1e6, 1, Decimal(1)), "out of the range"),
    ("flags", (2, 1.0, -1, Decimal(1)), "not in range"),
    ("big", (2, 1.0, 1, Decimal(2**64)), "out of bounds"),
])
def test_a_value_that_does_not_fit_names_its_column(spark, tmp_path: Path, column: str,
                                                    row: tuple, says: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({
        "id": pa.array([1], pa.int64()), "h": pa.array([1.0], pa.float16()),
        "flags": pa.array([1], pa.uint8()), "big": pa.array([1], pa.uint64())}), uri)
    df = spark.createDataFrame([row], "id long, h float, flags short, big decimal(20,0)")
    with pytest.raises(Exception, match=f"SchemaError: column '{column}'.*{says}") as caught:
        df.write.format("lance").mode("append").save(uri)
    assert "SchemaError" in str(caught.value)
    assert lance.dataset(uri).version == 1
    assert lance.dataset(uri).count_rows() == 1


def test_maps_read_and_write_both_ways(spark, tmp_path: Path) -> None:
    """Arrow maps are Spark's MapType (they were refused both ways)."""
    uri = str(tmp_path / "m.lance")
    lance.write_dataset(pa.table({
        "id": [1, 2, 3], "m": pa.array([[("a", 1), ("b", None)], None, []],
                                       pa.map_(pa.string(), pa.int64()))}), uri,
        data_storage_version="2.2")
    read = spark.read.format("lance").load(uri)
    assert {r.id: r.m for r in read.collect()} == {1: {"a": 1, "b": None}, 2: None, 3: {}}
    spark.createDataFrame([(4, {"x": 9})], "id long, m map<string,bigint>") \
        .write.format("lance").mode("append").save(uri)
    assert lance.dataset(uri).to_table().sort_by("id").column("m").to_pylist() == [
        [("a", 1), ("b", None)], None, [], [("x", 9)]]
    created = str(tmp_path / "n.lance")
    write_dataset(spark.createDataFrame([(1, {"k": [1.5]}), (2, None)],
                                        "id long, m map<string,array<double>>"), created)
    table = lance.dataset(created).to_table().sort_by("id")
    assert table.schema.field("m").type == pa.map_(
        pa.field("key", pa.string(), False), pa.field("value", pa.list_(pa.float64())))
    assert table.column("m").to_pylist() == [[("k", [1.5])], None]
    assert {r.id: r.m for r in spark.read.format("lance").load(created).collect()} == {
        1: {"k": [1.5]}, 2: None}
