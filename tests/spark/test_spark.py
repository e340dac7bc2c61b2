"""Spark writes and reads through format("lance") and write_dataset(df, uri)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError

lance = pytest.importorskip("lance")


def _frame(spark, start: int, n: int, parts: int = 4):
    return spark.range(start, start + n, numPartitions=parts).selectExpr(
        "id", "cast(id * 1.5 as double) AS x", "concat('s', cast(id as string)) AS s"
    )


def _orphans(uri: str) -> set[str]:
    """Data files that no version of the table refers to."""
    ds = lance_sql.dataset(uri)
    used = {f.path for v in ds.versions() for frag in
            ds.checkout_version(v["version"]).manifest.fragments for f in frag.files}
    return {p.name for p in (Path(uri) / "data").glob("*.lance")} - used


def test_data_source_write_append_read(spark, uri: str) -> None:
    _frame(spark, 0, 5000).write.format("lance").mode("overwrite").save(uri)
    _frame(spark, 5000, 1000).write.format("lance").mode("append").save(uri)
    ours = lance_sql.dataset(uri)
    assert ours.version == 2 and ours.count_rows() == 6000
    expected = pa.table({
        "id": pa.array(range(6000), pa.int64()),
        "x": [i * 1.5 for i in range(6000)],
        "s": [f"s{i}" for i in range(6000)],
    })
    assert ours.to_table().sort_by("id").cast(expected.schema) == expected
    assert lance.dataset(uri).to_table().sort_by("id").cast(expected.schema) == expected
    back = spark.read.format("lance").load(uri)
    assert back.count() == 6000
    assert back.filter("id = 4242").collect()[0]["s"] == "s4242"
    assert back.rdd.getNumPartitions() == 1  # 6000 rows are not worth a second task
    per_fragment = spark.read.format("lance").option("rowsPerPartition", 1 << 20).load(uri)
    assert per_fragment.rdd.getNumPartitions() == len(ours.manifest.fragments)
    assert sorted(r["id"] for r in per_fragment.select("id").collect()) == list(range(6000))


def test_reads_are_cut_by_bytes_across_fragments(spark, uri: str) -> None:
    _frame(spark, 0, 3000, parts=4).write.format("lance").mode("overwrite").save(uri)
    _frame(spark, 3000, 100, parts=1).write.format("lance").mode("append").save(uri)
    fragments = lance_sql.dataset(uri).manifest.fragments
    assert len(fragments) == 5

    def read(**options: str):
        return spark.read.format("lance").options(openCostInBytes="1", **options).load(uri)

    three = read(minPartitions="3")
    assert three.rdd.getNumPartitions() == 3
    # Each partition reads its ranges in table order; together they read every row once.
    parts = three.select("id").rdd.glom().map(lambda rows: [r["id"] for r in rows]).collect()
    assert all(p == sorted(p) and p for p in parts)
    assert sorted(i for p in parts for i in p) == list(range(3100))
    # Cut by bytes, not by files: whole fragments would make 1500 / 1500 / 100 or so.
    assert all(abs(len(p) - 3100 / 3) < 3100 / 3 * 0.2 for p in parts)
    # maxPartitionBytes raises the count, rounded up to a multiple of minPartitions.
    size = sum(f.file_size_bytes for frag in fragments for f in frag.files)
    assert read(minPartitions="2", maxPartitionBytes=str(size // 3)).rdd.getNumPartitions() == 4
    with pytest.raises(Exception, match="minPartitions must be a positive integer"):
        read(minPartitions="0").count()


def test_read_options(spark, uri: str) -> None:
    _frame(spark, 0, 100, parts=2).write.format("lance").mode("overwrite").save(uri)
    first = lance_sql.dataset(uri)
    _frame(spark, 100, 50, parts=1).write.format("lance").mode("append").save(uri)
    def reader():  # a DataFrameReader keeps options, so start fresh each time
        return spark.read.format("lance")

    assert reader().option("version", "1").load(uri).count() == 100
    stamp = first.versions()[0]["timestamp_utc"].isoformat()
    assert reader().option("timestamp", stamp).load(uri).count() == 100
    assert reader().load(uri).count() == 150
    cols = reader().option("columns", "s,id").load(uri)
    assert cols.columns == ["s", "id"]
    rows = reader().option("withRowId", "true").option("withRowAddress", "true").load(uri)
    got = {(r["id"], int(r["_rowid"]), int(r["_rowaddr"])) for r in
           rows.filter("id IN (1, 120)").collect()}
    api = first.checkout_version(2).to_table(filter="id IN (1, 120)", with_row_id=True,
                                              with_row_address=True)
    assert got == {(r["id"], r["_rowid"], r["_rowaddr"]) for r in api.to_pylist()}
    with pytest.raises(Exception, match="stable row ids"):
        reader().option("readChangeFeed", "true").option("startingVersion", "1").load(uri)


def test_pushed_filters_prune_by_row_address(spark, uri: str) -> None:
    _frame(spark, 0, 400, parts=4).write.format("lance").mode("overwrite").save(uri)
    frags = lance_sql.dataset(uri).manifest.fragments
    target = (frags[2].id << 32) | 5
    df = (spark.read.format("lance").option("withRowAddress", "true").load(uri)
          .filter(f"_rowaddr = {target}"))
    assert df.rdd.getNumPartitions() == 1
    assert len(df.collect()) == 1


def test_write_dataset_helper(spark, uri: str) -> None:
    from lance_sql.spark import write_dataset

    ds = write_dataset(_frame(spark, 0, 3000), uri)
    assert ds.version == 1 and ds.count_rows() == 3000
    ds = write_dataset(_frame(spark, 3000, 10), uri, mode="append")
    assert ds.version == 2 and lance.dataset(uri).count_rows() == 3010
    with pytest.raises(lance_sql.InvalidInputError):
        write_dataset(_frame(spark, 0, 1), uri)


def test_types_round_trip_and_mapping(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "types.lance")
    table = pa.table({
        "u8": pa.array([1, 255, None], pa.uint8()),
        "u32": pa.array([0, 2**32 - 1, 7], pa.uint32()),
        "u64": pa.array([0, 2**64 - 1, None], pa.uint64()),
        "h": pa.array([1.5, None, -2.0], pa.float16()),
        "ls": pa.array(["a", None, "c"], pa.large_string()),
        "d": pa.array([dt.date(2026, 1, 1), None, dt.date(1999, 12, 31)], pa.date32()),
        "ts": pa.array([1, 2, None], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([1, None, 3], pa.timestamp("us")),
        "dec": pa.array([Decimal("1.25"), None, Decimal("-3.50")], pa.decimal128(10, 2)),
        "vec": pa.array([[1.0, 2.0], [3.0, 4.0], None], pa.list_(pa.float32(), 2)),
        "lst": pa.array([[1, 2], [], None], pa.list_(pa.int32())),
        "st": pa.array([{"a": 1, "b": "x"}, {"a": None, "b": None}, {"a": 3, "b": "z"}]),
    })
    lance_sql.write_dataset(table, uri)
    rows = spark.read.format("lance").load(uri).orderBy("u32").collect()
    assert rows[2]["u64"] == Decimal(2**64 - 1) and rows[2]["u8"] == 255
    assert rows[1]["vec"] is None and rows[0]["vec"] == [1.0, 2.0]
    assert rows[0]["st"]["b"] == "x" and rows[0]["lst"] == [1, 2]
    # appending Spark's rows back converts to the table's Arrow types, checked
    spark.read.format("lance").load(uri).write.format("lance").mode("append").save(uri)
    back = lance_sql.dataset(uri).to_table()
    assert back.num_rows == 6 and back.schema == table.schema
    assert back.slice(3).sort_by("u32") == table.sort_by("u32")


def test_unsupported_types_name_the_column(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "time.lance")
    lance_sql.write_dataset(pa.table({"t": pa.array([1, 2], pa.time64("us"))}), uri)
    with pytest.raises(Exception, match="'t'"):
        spark.read.format("lance").load(uri).count()
    with pytest.raises(SchemaError, match="'t'"):
        from lance_sql.spark.types import spark_type

        spark_type(pa.time64("us"), "t")


def test_overwrite_with_new_schema(spark, uri: str) -> None:
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(uri)
    spark.range(3).selectExpr("cast(id as int) AS k").write.format("lance").mode(
        "overwrite").save(uri)
    ds = lance_sql.dataset(uri)
    assert ds.version == 2 and ds.schema.names == ["k"] and ds.count_rows() == 3
    assert lance_sql.dataset(uri, version=1).count_rows() == 10


def test_append_with_wrong_schema_fails_cleanly(spark, uri: str) -> None:
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(uri)
    with pytest.raises(Exception, match="not in the table"):
        spark.range(3).selectExpr("id", "id AS extra").write.format("lance").mode(
            "append").save(uri)
    assert lance_sql.dataset(uri).version == 1


def _append_inside_task(uri: str, mode: str):
    def fn(batches):
        for i, batch in enumerate(batches):
            if i == 0 and batch.num_rows and batch.column(0)[0].as_py() == 0:
                data = pa.table({"id": pa.array([-1], pa.int64()), "x": [0.0], "s": ["other"]})
                lance_sql.write_dataset(data, uri, mode=mode)
            yield batch
    return fn


def test_concurrent_append_lands_with_spark_job(spark, uri: str) -> None:
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(uri)
    df = _frame(spark, 0, 100, parts=2)
    df = df.mapInArrow(_append_inside_task(uri, "append"), df.schema)
    df.write.format("lance").mode("append").save(uri)  # commits after the task's append
    ds = lance_sql.dataset(uri)
    assert ds.version == 3 and ds.count_rows() == 10 + 1 + 100
    ops = [v["operation"] for v in ds.versions()]
    assert ops == ["overwrite", "append", "append"]


def test_concurrent_overwrite_fails_the_job(spark, uri: str) -> None:
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(uri)
    df = _frame(spark, 0, 100, parts=2)
    df = df.mapInArrow(_append_inside_task(uri, "overwrite"), df.schema)
    with pytest.raises(Exception, match="overwr"):
        df.write.format("lance").mode("append").save(uri)
    ds = lance_sql.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 1  # only the concurrent overwrite landed
    assert _orphans(uri) == set()


def test_task_failure_leaves_no_version_and_no_files(spark, uri: str) -> None:
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(uri)
    before = sorted(os.listdir(Path(uri) / "data"))

    def explode(batches):
        for batch in batches:
            yield batch
            if batch.column(0)[0].as_py() >= 50:
                raise RuntimeError("task died mid-write")

    df = _frame(spark, 0, 100, parts=2)
    with pytest.raises(Exception, match="task died"):
        df.mapInArrow(explode, df.schema).write.format("lance").mode("append").save(uri)
    assert lance_sql.dataset(uri).version == 1
    assert sorted(os.listdir(Path(uri) / "data")) == before
    assert _orphans(uri) == set()


def test_reader_scans_a_slice_at_a_time(tmp_path: Path, monkeypatch) -> None:
    # In this process, without a Spark session: the reader Spark's workers run.
    from lance_sql.spark import datasource

    uri = str(tmp_path / "t.lance")
    table = pa.table({"id": pa.array(range(23), pa.int64()), "s": [f"s{i}" for i in range(23)]})
    lance_sql.write_dataset(table, uri, max_rows_per_file=10)
    lance_sql.dataset(uri).delete("id IN (4, 15)")
    options = {"path": uri}
    reader = datasource.LanceReader(options, datasource.LanceDataSource(options).schema())
    [partition] = reader.partitions()
    assert [(r.start, r.stop) for r in partition.ranges] == [(0, 10), (0, 10), (0, 3)]
    lengths: list[int] = []
    scan = datasource.scan_fragment
    monkeypatch.setattr(datasource, "SCAN_ROWS", 4)
    monkeypatch.setattr(datasource, "scan_fragment", lambda *a, offset, length: lengths.append(
        length) or scan(*a, offset=offset, length=length))
    got = pa.Table.from_batches(list(reader.read(partition)))
    assert lengths == [4, 4, 2, 4, 4, 2, 3]
    assert got["id"].to_pylist() == [i for i in range(23) if i not in (4, 15)]


def test_pushed_rowid_filters_prune_fragments(tmp_path: Path) -> None:
    # In this process, without a Spark session: Spark hands uint64 values over as decimals.
    from decimal import Decimal

    from pyspark.sql.datasource import EqualTo

    from lance_sql.spark import datasource

    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array(range(23), pa.int64())}), uri,
                            max_rows_per_file=10)
    options = {"path": uri, "withrowid": "true"}
    reader = datasource.FilteringLanceReader(options,
                                             datasource.LanceDataSource(options).schema())
    kept = list(reader.pushFilters([EqualTo(("_rowid",), Decimal((1 << 32) + 3))]))
    assert kept == []
    [partition] = reader.partitions()
    assert [r.key for r in partition.ranges] == [1]  # without stable ids, _rowid is the address
    got = pa.Table.from_batches(list(reader.read(partition)))
    assert got["id"].to_pylist() == [13]


def test_max_rows_per_file_option_is_honoured(spark, uri: str) -> None:
    # PySpark hands a data source its options with lower-cased keys.
    (_frame(spark, 0, 100, parts=1).write.format("lance").option("maxRowsPerFile", 30)
     .mode("overwrite").save(uri))
    fragments = lance_sql.dataset(uri).manifest.fragments
    assert sorted(f.physical_rows for f in fragments) == [10, 30, 30, 30]
    with pytest.raises(Exception, match="maxRowsPerFile must be a positive integer"):
        (_frame(spark, 0, 10, parts=1).write.format("lance").option("maxRowsPerFile", "0")
         .mode("overwrite").save(uri))


def test_created_tables_can_have_stable_row_ids_and_a_primary_key(spark, tmp_path: Path
                                                                   ) -> None:
    """Both write paths: a Spark-made table with a change feed and pylance's key metadata."""
    source_uri, helper_uri = str(tmp_path / "source.lance"), str(tmp_path / "helper.lance")
    (_frame(spark, 0, 100).write.format("lance").option("enableStableRowIds", "true")
     .option("primaryKey", "id").mode("overwrite").save(source_uri))
    from lance_sql.spark import write_dataset

    write_dataset(_frame(spark, 0, 100), helper_uri, enable_stable_row_ids=True,
                  primary_key=["id", "s"])
    for uri, keys in ((source_uri, ["id"]), (helper_uri, ["id", "s"])):
        ds = lance_sql.dataset(uri)
        assert ds.manifest.uses_stable_row_ids
        pk = [f.name for f in lance.dataset(uri).schema
              if (f.metadata or {}).get(b"lance-schema:unenforced-primary-key") == b"true"]
        assert pk == keys
        assert not lance.dataset(uri).schema.field("id").nullable
        ds.update({"x": "x + 1"}, where="id < 3")
        changes = ds.table_changes(2, 2)
        assert sorted(changes.filter(pa.compute.equal(changes["_change_type"],
                                                      "update_postimage"))["id"].to_pylist()) \
            == [0, 1, 2]
    _frame(spark, 100, 10).write.format("lance").mode("append").save(source_uri)
    assert lance_sql.dataset(source_uri).count_rows() == 110
    plain = str(tmp_path / "plain.lance")
    _frame(spark, 0, 10).write.format("lance").mode("overwrite").save(plain)
    with pytest.raises(Exception, match="stable row ids"):
        (_frame(spark, 0, 10).write.format("lance").option("enableStableRowIds", "true")
         .mode("append").save(plain))
    assert lance_sql.dataset(plain).version == 1
