"""The change data feed through Spark (readChangeFeed), checked against table_changes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.changes.feed import table_changes

KEY = ["_commit_version", "_change_type", "_rowid"]


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": [f"{tag}{i}" for i in ids],
                     "n": pa.array(list(ids), pa.uint32())})


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> str:
    """v1 create 0..9, v2 append 10..14, v3 update ids 1 and 11, v4 delete 2, 3 and 12,
    v5 append 15..16."""
    path = str(tmp_path_factory.mktemp("cdf") / "t.lance")
    lance_sql.write_dataset(_rows(range(10), "a"), path, max_rows_per_file=4,
                            enable_stable_row_ids=True)
    lance_sql.write_dataset(_rows(range(10, 15), "b"), path, mode="append")
    assert lance_sql.dataset(path).update({"v": "'upd'"}, where="id IN (1, 11)") == {
        "num_rows_updated": 2}
    lance_sql.dataset(path).delete("id IN (2, 3, 12)")
    lance_sql.write_dataset(_rows(range(15, 17), "c"), path, mode="append")
    assert lance_sql.dataset(path).version == 5
    return path


def _feed(spark, path: str, **options: object):
    reader = spark.read.format("lance").option("readChangeFeed", "true")
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load(path)


def _normal(table: pa.Table) -> list[tuple]:
    """Rows as sortable tuples; uint64 (Spark's decimal) as int, instants in UTC."""
    out = []
    for row in table.to_pylist():
        values = []
        for name in table.column_names:
            value = row[name]
            if name in ("_rowid", "_commit_version", "n"):
                value = int(value)
            elif isinstance(value, dt.datetime):
                value = value.astimezone(dt.UTC)
            values.append((name, value))
        out.append(tuple(values))
    return sorted(out, key=repr)


@pytest.mark.parametrize("window", [(1, 5), (2, 4), (3, 3), (4, None), (5, 5)])
def test_feed_matches_table_changes(spark, history: str, window) -> None:
    start, end = window
    options = {"startingVersion": start} | ({} if end is None else {"endingVersion": end})
    df = _feed(spark, history, **options)
    ours = table_changes(history, start, end)
    assert df.columns == ours.column_names
    assert _normal(df.toArrow()) == _normal(ours)
    assert df.rdd.getNumPartitions() == 1  # a few change rows are not worth a second task


def test_feed_types_and_known_changes(spark, history: str) -> None:
    from pyspark.sql import types as T

    df = _feed(spark, history, startingVersion=1)
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["_commit_timestamp"] == T.TimestampType()
    assert types["_change_type"] == T.StringType()
    assert types["_commit_version"] == types["_rowid"] == T.DecimalType(20, 0)
    assert types["n"] == T.LongType()
    rows = df.collect()
    by_version: dict[int, dict[str, set]] = {}
    for r in rows:
        kinds = by_version.setdefault(int(r["_commit_version"]), {})
        kinds.setdefault(r["_change_type"], set()).add((r["id"], r["v"]))
    assert by_version[1] == {"insert": {(i, f"a{i}") for i in range(10)}}
    assert by_version[2] == {"insert": {(i, f"b{i}") for i in range(10, 15)}}
    assert by_version[3] == {"update_preimage": {(1, "a1"), (11, "b11")},
                             "update_postimage": {(1, "upd"), (11, "upd")}}
    assert by_version[4] == {"delete": {(2, "a2"), (3, "a3"), (12, "b12")}}
    assert by_version[5] == {"insert": {(15, "c15"), (16, "c16")}}
    # Row ids are stable: an update's pre- and post-image share the row's id.
    ids = {(r["_change_type"], r["id"]): int(r["_rowid"]) for r in rows}
    assert ids[("update_preimage", 1)] == ids[("update_postimage", 1)] == ids[("insert", 1)]


def test_feed_by_timestamp(spark, history: str) -> None:
    versions = {v["version"]: v["timestamp_utc"] for v in lance_sql.dataset(history).versions()}
    df = _feed(spark, history, startingTimestamp=versions[3].isoformat(),
               endingTimestamp=versions[4].isoformat())
    assert _normal(df.toArrow()) == _normal(table_changes(history, 3, 4))
    got = {(r["_change_type"], r["id"]) for r in df.collect()}
    assert ("delete", 12) in got and ("update_postimage", 11) in got
    assert all(int(r["_commit_version"]) in (3, 4) for r in df.collect())


def test_feed_pushdown_prunes_versions_and_rows(spark, history: str) -> None:
    df = _feed(spark, history, startingVersion=1, rowsPerPartition=100).filter(
        "_change_type = 'delete' AND _commit_version >= 3")
    assert df.rdd.getNumPartitions() == 1  # a commit a partition, and only 4 has deletes left
    assert sorted(r["id"] for r in df.collect()) == [2, 3, 12]
    df = _feed(spark, history, startingVersion=1).filter(
        "_commit_version IN (2, 5) AND NOT (_change_type = 'update_preimage') AND id > 13")
    assert sorted(r["id"] for r in df.collect()) == [14, 15, 16]
    ours = table_changes(history, 1, None,
                         filter="_change_type LIKE 'update%' AND _commit_version = 3")
    df = _feed(spark, history, startingVersion=1).filter(
        "_change_type LIKE 'update%' AND _commit_version = 3")
    assert _normal(df.toArrow()) == _normal(ours) and ours.num_rows == 4


def test_feed_columns_and_chunked_partitions(spark, history: str) -> None:
    df = _feed(spark, history, startingVersion=1, columns="_rowid,id,_change_type",
               rowsPerPartition=3)
    assert df.columns == ["_rowid", "id", "_change_type"]
    # 10 + 5 inserts, 4 update rows, 3 deletes, 2 inserts, in chunks of three per version
    assert df.rdd.getNumPartitions() == 4 + 2 + 2 + 1 + 1
    ours = table_changes(history, 1, columns=["_rowid", "id", "_change_type"])
    assert _normal(df.toArrow()) == _normal(ours)


def test_feed_partitions_pack_commits_by_size(spark, history: str) -> None:
    # 24 change rows over 5 commits, cut into 3 parts of about 8 rows: parts span commits.
    df = _feed(spark, history, startingVersion=1, minPartitions=3, openCostInBytes=1)
    assert df.rdd.getNumPartitions() == 3
    parts = df.select("_commit_version").rdd.glom().map(
        lambda rows: [int(r["_commit_version"]) for r in rows]).collect()
    assert [len(p) for p in parts] == [8, 8, 8]
    assert [sorted(set(p)) for p in parts] == [[1], [1, 2, 3], [3, 4, 5]]
    assert _normal(df.toArrow()) == _normal(table_changes(history, 1))
    pruned = _feed(spark, history, startingVersion=1, minPartitions=3,
                   openCostInBytes=1).filter("_change_type = 'update_postimage'")
    assert pruned.rdd.getNumPartitions() == 2  # the two post-images only
    assert sorted(r["id"] for r in pruned.collect()) == [1, 11]


def test_feed_errors(spark, history: str, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="startingVersion or startingTimestamp"):
        _feed(spark, history).collect()
    with pytest.raises(Exception, match="start version 4 is after end version 2"):
        _feed(spark, history, startingVersion=4, endingVersion=2).collect()
    with pytest.raises(Exception, match="not both"):
        _feed(spark, history, startingVersion=1, startingTimestamp="2020-01-01").collect()
    plain = str(tmp_path / "plain.lance")
    lance_sql.write_dataset(_rows(range(3), "x"), plain)
    with pytest.raises(Exception, match="stable row ids"):
        _feed(spark, plain, startingVersion=1).collect()


def test_row_version_columns_in_normal_reads(spark, history: str) -> None:
    df = spark.read.format("lance").option("withRowVersions", "true").load(history)
    assert df.columns == ["id", "v", "n", "_row_created_at_version",
                          "_row_last_updated_at_version"]
    got = {r["id"]: (int(r["_row_created_at_version"]), int(r["_row_last_updated_at_version"]))
           for r in df.collect()}
    assert got[1] == (1, 3) and got[11] == (2, 3) and got[0] == (1, 1) and got[16] == (5, 5)
    assert 2 not in got
    picked = (spark.read.format("lance")
              .option("columns", "id,_rowid,_row_last_updated_at_version").load(history)
              .filter("_row_last_updated_at_version = 3"))
    assert picked.columns == ["id", "_rowid", "_row_last_updated_at_version"]
    api = lance_sql.dataset(history).to_table(
        columns=["id", "_rowid"], filter="_row_last_updated_at_version = 3")
    assert {(r["id"], int(r["_rowid"])) for r in picked.collect()} == {
        (r["id"], r["_rowid"]) for r in api.to_pylist()}
    # Default schema has no system columns.
    assert spark.read.format("lance").load(history).columns == ["id", "v", "n"]


def test_reader_answers_a_slice_at_a_time(history: str, monkeypatch) -> None:
    # In this process, without a Spark session: the reader Spark's workers run.
    from lance_sql.spark import datasource
    from lance_sql.table import read_query

    options = {"path": history, "readchangefeed": "true", "startingversion": "1"}
    reader = datasource.ChangeFeedReader(options, datasource.LanceDataSource(options).schema())
    [partition] = reader.partitions()
    whole = pa.Table.from_batches(list(reader.read(partition)))
    sizes: list[int] = []
    monkeypatch.setattr(datasource, "SCAN_ROWS", 5)
    monkeypatch.setattr(datasource, "read_query",
                        lambda window, query, rows: sizes.append(len(rows)) or
                        read_query(window, query, rows))
    sliced = pa.Table.from_batches(list(reader.read(partition)))
    assert sizes == [5, 5, 5, 5, 4]
    assert sliced == whole and whole.num_rows == table_changes(history, 1).num_rows == 24


@pytest.mark.parametrize("window", [(1, 5), (2, 5), (3, 4)])
def test_net_feed_matches_table_changes(spark, history: str, window) -> None:
    start, end = window
    ours = table_changes(history, start, end, mode="net")
    for chunk in ({}, {"rowsPerPartition": 2}):
        df = _feed(spark, history, startingVersion=start, endingVersion=end,
                   changeMode="net", **chunk)
        assert _normal(df.toArrow()) == _normal(ours)
        if chunk:
            assert df.rdd.getNumPartitions() == -(-ours.num_rows // 2)
    # v2 appended 10..14, v4 deleted 12: inserted and deleted in the window, so absent
    ids = {r["id"] for r in _feed(spark, history, startingVersion=2, changeMode="net")
           .collect()}
    assert 12 not in ids and {10, 11, 13, 14} <= ids


def test_net_feed_pushed_filters_apply_to_net_rows(spark, history: str) -> None:
    """Row 11 (appended in v2, updated in v3) is a net insert of v3: a pushed
    ``_commit_version = 2`` must not see v2's insert of it."""
    df = _feed(spark, history, startingVersion=2, changeMode="net").filter(
        "_commit_version = 2")
    assert sorted(r["id"] for r in df.collect()) == [10, 13, 14]
    with pytest.raises(Exception, match="change mode"):
        _feed(spark, history, startingVersion=2, changeMode="latest").collect()
