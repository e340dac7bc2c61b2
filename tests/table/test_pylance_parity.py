"""Where pylance users notice: the same inputs, names and return values, side by side."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import lance
import pandas as pd
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.table.meta.versions import list_versions, load_transaction_bytes
from lance_sql.table.txn.operations import Transaction

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def inputs() -> dict[str, object]:
    rows = [{"id": 1, "name": "a"}, {"id": 2, "name": None}, {"id": 3, "name": "c"}]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return {
        "list of dicts": rows,
        "pandas": pd.DataFrame({"id": [1, 2, 3], "name": ["a", None, "c"]}),
        "reader": pa.RecordBatchReader.from_batches(SCHEMA, table.to_batches(max_chunksize=2)),
        "iterable": iter(table.to_batches(max_chunksize=1)),
    }


@pytest.mark.parametrize("kind", list(inputs()))
def test_write_dataset_accepts_what_pylance_accepts(kind: str, tmp_path: Path) -> None:
    ours = lance_sql.write_dataset(inputs()[kind], tmp_path / "ours", schema=SCHEMA)
    theirs = lance.write_dataset(inputs()[kind], tmp_path / "theirs", schema=SCHEMA)
    assert ours.to_table() == theirs.to_table()
    assert ours.schema.names == theirs.schema.names
    assert [f.type for f in ours.schema] == [f.type for f in theirs.schema]
    assert lance.dataset(tmp_path / "ours").to_table() == theirs.to_table()


def test_list_of_dicts_infers_the_schema_like_pylance(tmp_path: Path) -> None:
    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    ours = lance_sql.write_dataset(rows, tmp_path / "ours")
    theirs = lance.write_dataset(rows, tmp_path / "theirs")
    assert ours.to_table() == theirs.to_table()


def test_an_iterable_of_batches_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    rows, batches = 500_000, 40  # 4 MB per batch, 160 MB in all
    schema = pa.schema([("x", pa.int64())])
    peak = 0

    def produce() -> Iterator[pa.RecordBatch]:
        nonlocal peak
        for i in range(batches):
            peak = max(peak, pa.total_allocated_bytes())
            yield pa.record_batch([pa.array(range(i * rows, (i + 1) * rows), pa.int64())],
                                  schema=schema)

    base = pa.total_allocated_bytes()
    ds = lance_sql.write_dataset(produce(), tmp_path / "t", schema=schema,
                                 max_rows_per_file=2 * rows)
    assert ds.count_rows() == rows * batches
    assert peak - base < 64 * 1024 * 1024, f"{(peak - base) / 2**20:.0f} MiB held at once"


def test_delete_returns_what_pylance_returns(tmp_path: Path) -> None:
    data = pa.table({"id": list(range(10))})
    ours = lance_sql.write_dataset(data, tmp_path / "ours")
    theirs = lance.write_dataset(data, tmp_path / "theirs")
    for predicate in ("id < 3", "id < 5", "id > 100"):
        assert ours.delete(predicate) == theirs.delete(predicate)


def test_insert_appends_and_overwrites_as_pylance_does(tmp_path: Path) -> None:
    """``ds.insert`` (pylance's) writes into the table and moves the handle there; the
    other library reads the result, row for row."""
    data = pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA)
    more = pa.table({"id": [3], "name": ["c"]}, schema=SCHEMA)
    for name, (write, opened, other) in {
            "ours": (lance_sql.write_dataset, lance_sql.dataset, lance.dataset),
            "theirs": (lance.write_dataset, lance.dataset, lance_sql.dataset)}.items():
        uri = str(tmp_path / name)
        ds = write(data, uri)
        assert ds.insert(more) is None
        assert ds.version == 2 and ds.to_table().column("id").to_pylist() == [1, 2, 3]
        ds.insert(more.to_pylist(), mode="overwrite")
        assert ds.version == 3 and ds.to_table().equals(more)
        assert other(uri).to_table().equals(more) and opened(uri).version == 3
    with pytest.raises(lance_sql.errors.SchemaError):
        lance_sql.dataset(tmp_path / "ours").insert(pa.table({"other": [1]}))


@pytest.fixture
def history(tmp_path: Path) -> str:
    """A pylance-written table with appends, a delete and a new column."""
    uri = str(tmp_path / "h.lance")
    lance.write_dataset(pa.table({"id": list(range(3000))}), uri, max_rows_per_file=2000)
    lance.write_dataset(pa.table({"id": [5000, 5001]}), uri, mode="append")
    ds = lance.dataset(uri)
    ds.delete("id < 10")
    ds.add_columns({"twice": "id * 2"})
    return uri


def test_versions_match_pylance(history: str) -> None:
    ours = lance_sql.dataset(history).versions()
    theirs = lance.dataset(history).versions()
    assert [{k: v[k] for k in ("version", "timestamp", "metadata")} for v in ours] == theirs
    for ours_v in ours:
        assert ours_v["timestamp"].tzinfo is None
        assert ours_v["timestamp_utc"].tzinfo is dt.UTC
        local = ours_v["timestamp_utc"].astimezone().replace(tzinfo=None)
        assert abs(local - ours_v["timestamp"]) <= dt.timedelta(microseconds=1)
    assert [v["operation"] for v in ours] == ["overwrite", "append", "delete", "merge"]


def test_versions_of_our_tables_summarise_like_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": list(range(100))}), uri, max_rows_per_file=60)
    ds.delete("id < 5")
    assert lance_sql.dataset(uri).versions()[-1]["metadata"] == \
        lance.dataset(uri).versions()[-1]["metadata"]


def test_head_and_stats_match_pylance(history: str) -> None:
    ours, theirs = lance_sql.dataset(history), lance.dataset(history)
    assert ours.head(5) == theirs.head(5)
    assert ours.head(3, columns=["twice"]) == theirs.head(3, columns=["twice"])
    for rows in (1024, 1500, 5000):
        assert ours.stats.dataset_stats(max_rows_per_group=rows) == \
            theirs.stats.dataset_stats(max_rows_per_group=rows)
    assert ours.stats.dataset_stats() == theirs.stats.dataset_stats()


@pytest.mark.parametrize("name", ["ok", "v1.2", "a-b_c", "_x", "x-", "A" * 200])
def test_tag_names_pylance_accepts_work_in_both(name: str, tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"a": [1]}), tmp_path / "t")
    ds.tags.create(name, 1)
    assert lance.dataset(tmp_path / "t").tags.list()[name]["version"] == 1


@pytest.mark.parametrize("name", ["", "bad tag", "a/b", "../up", ".x", "x.", "a..b", "x.lock",
                                  "x~", "a@b", "A" * 201, "日本"])
def test_tag_names_pylance_cannot_use_are_refused(name: str, tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"a": [1]}), tmp_path / "t")
    with pytest.raises(InvalidInputError, match="tag name"):
        ds.tags.create(name, 1)
    with pytest.raises(InvalidInputError):
        ds.tags.update(name, 1)
    assert ds.tags.list() == {}
    if name.isascii() and len(name) <= 200:
        theirs = lance.write_dataset(pa.table({"a": [1]}), tmp_path / "theirs")
        with pytest.raises(Exception, match="[Rr]ef"):
            theirs.tags.create(name, 1)


def _field_bytes(stats: object) -> list[tuple[int, int]]:
    return [(f.id, f.bytes_on_disk) for f in stats.fields]  # type: ignore[attr-defined]


@pytest.mark.parametrize("writer", ["pylance", "lance_sql"])
@pytest.mark.parametrize("data_format", ["2.0", "2.2"])
def test_data_stats_match_pylance(writer: str, data_format: str, tmp_path: Path) -> None:
    """Bytes per field (nested ones too) as pylance counts them, for either writer's files."""
    uri = str(tmp_path / "t.lance")
    table = pa.table({
        "a": pa.array(range(3000), pa.int64()),
        "b": ["x"] * 3000,
        "s": pa.array([{"p": i, "q": str(i)} for i in range(3000)]),
        "l": pa.array([[i, i + 1] for i in range(3000)]),
    })
    write = lance.write_dataset if writer == "pylance" else lance_sql.write_dataset
    write(table, uri, max_rows_per_file=2000, data_storage_version=data_format)
    lance.dataset(uri).add_columns({"c": "a * 2"})
    ours = lance_sql.dataset(uri).stats.data_stats()
    assert _field_bytes(ours) == _field_bytes(lance.dataset(uri).stats.data_stats())
    assert len(ours.fields) == 8 and sum(b for _, b in _field_bytes(ours)) > 0


def test_a_pandas_frames_index_is_written_as_pylance_writes_it(tmp_path: Path) -> None:
    """An index that is not a plain range becomes the column ``__index_level_0__`` (it was
    dropped: pylance could not append such frames to a table lance_sql had made)."""
    frame = pd.DataFrame({"a": [1, 2, 3, 4], "b": ["w", "x", "y", "z"]})
    picked = frame[frame.a % 2 == 0]
    ours = lance_sql.write_dataset(picked, tmp_path / "ours.lance")
    theirs = lance.write_dataset(picked, str(tmp_path / "theirs.lance"))
    assert ours.schema.names == theirs.schema.names == ["a", "b", "__index_level_0__"]
    assert ours.to_table().to_pandas().index.tolist() == [1, 3]
    lance.write_dataset(frame[frame.a % 2 == 1], str(tmp_path / "ours.lance"), mode="append")
    assert sorted(lance_sql.dataset(tmp_path / "ours.lance").to_table()["a"].to_pylist()) \
        == [1, 2, 3, 4]
    plain = lance_sql.write_dataset(frame, tmp_path / "plain.lance")  # a range: no column
    assert plain.schema.names == ["a", "b"]


def test_smaller_everyday_calls_answer_as_pylance(tmp_path: Path) -> None:
    """``to_pandas``, a dataset as ``write_dataset``'s target, ``when_matched_fail``,
    ``retry_timeout`` and ``scanner().dataset_schema``, each beside pylance's."""
    from datetime import timedelta

    data = pa.table({"id": pa.array(range(10), pa.int64()), "s": [f"r{i}" for i in range(10)]})
    ours = lance_sql.write_dataset(data, tmp_path / "ours.lance", max_rows_per_file=4)
    theirs = lance.write_dataset(data, str(tmp_path / "theirs.lance"), max_rows_per_file=4)
    for ds, library in ((ours, lance_sql), (theirs, lance)):
        assert ds.to_pandas(filter="id > 7")["id"].tolist() == [8, 9]
        assert library.write_dataset(data, ds, mode="append").count_rows() == 20
        assert ds.scanner(columns=["id"]).dataset_schema.names == ["id", "s"]
        fresh = pa.table({"id": pa.array([20], pa.int64()), "s": ["new"]})
        done = ds.merge_insert("id").when_matched_fail().when_not_matched_insert_all() \
            .retry_timeout(timedelta(seconds=5)).execute(fresh)
        assert done["num_inserted_rows"] == 1
    clash = pa.table({"id": pa.array([3, 30], pa.int64()), "s": ["x", "y"]})
    version = lance_sql.dataset(tmp_path / "ours.lance").version
    with pytest.raises(InvalidInputError, match="when_matched_fail"):
        ours.merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(clash)
    with pytest.raises(OSError, match="matching row"):
        theirs.merge_insert("id").when_matched_fail().when_not_matched_insert_all() \
            .execute(clash)
    assert lance_sql.dataset(tmp_path / "ours.lance").version == version  # nothing written
    assert sorted(lance_sql.dataset(tmp_path / "ours.lance").to_table()["id"].to_pylist()) \
        == sorted(lance.dataset(str(tmp_path / "theirs.lance")).to_table()["id"].to_pylist())


def test_a_column_renamed_to_a_system_columns_name_is_a_schema_error(tmp_path: Path) -> None:
    """pylance lets ``alter_columns`` name a column ``_rowid`` (and then panics reading
    it); lance_sql's reads raised a raw KeyError. They are a SchemaError saying what to
    do, and the rename back (lance_sql's alter_columns) makes the table readable."""
    from lance_sql.errors import SchemaError

    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "x": [30, 20, 10]}), path).alter_columns(
        {"path": "x", "name": "_rowid"})
    for read in (lambda: lance_sql.dataset(path).to_table(),
                 lambda: lance_sql.dataset(path).take([1]),
                 lambda: lance_sql.connect(str(tmp_path)).sql("SELECT * FROM t").to_pylist()):
        with pytest.raises(SchemaError, match="system column"):
            read()
    lance_sql.dataset(path).alter_columns({"path": "_rowid", "name": "x"})
    assert lance_sql.dataset(path).to_table()["x"].to_pylist() == [30, 20, 10]


def test_commit_messages_and_transaction_properties_round_trip(tmp_path: Path) -> None:
    """``write_dataset(commit_message=, transaction_properties=)`` records what pylance
    records, where pylance reads it, and lance_sql reads pylance's the same way."""

    data = pa.table({"a": [1, 2]})
    ours = tmp_path / "ours.lance"
    lance_sql.write_dataset(data, ours, commit_message="first load",
                            transaction_properties={"job": "etl-7"})
    lance_sql.write_dataset(data, ours, mode="append", commit_message="more")
    got = lance.dataset(str(ours)).get_transactions(2)
    assert [t.transaction_properties for t in got] == [
        {"__lance_commit_message": "more"},
        {"__lance_commit_message": "first load", "job": "etl-7"}]
    theirs = tmp_path / "theirs.lance"
    lance.write_dataset(data, str(theirs), commit_message="from pylance")
    ds = lance_sql.dataset(theirs)
    (ref,) = list_versions(ds.store)
    txn = Transaction.decode(load_transaction_bytes(ds.store, ref), "txn")
    assert txn.properties == {"__lance_commit_message": "from pylance"}
    with pytest.raises(InvalidInputError, match="commit_message"):
        lance_sql.write_dataset(data, ours, mode="append", commit_message=7)
    with pytest.raises(InvalidInputError, match="transaction_properties"):
        lance_sql.write_dataset(data, ours, mode="append", transaction_properties={"n": 1})
    assert lance_sql.dataset(ours).version == 2  # the refused write committed nothing
