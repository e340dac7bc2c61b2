"""The dataset API on its own (interop with pylance lives in test_interop.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    InvalidInputError,
    NotFoundError,
    RetryableConflict,
    SchemaError,
    UnsupportedFeatureError,
)
from lance_sql.io import MemoryStore


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "x": ids * 0.5})


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return str(tmp_path / "t.lance")


def test_create_append_overwrite_versions(uri: str) -> None:
    ds = lance_sql.write_dataset(_table(0, 10), uri, max_rows_per_file=4)
    assert ds.version == 1 and [f.physical_rows for f in ds.manifest.fragments] == [4, 4, 2]
    ds = lance_sql.write_dataset(_table(10, 5), uri, mode="append")
    assert ds.version == 2 and ds.count_rows() == 15
    assert [f.id for f in ds.manifest.fragments] == [0, 1, 2, 3]
    new = pa.table({"k": ["a", "b"]})
    ds = lance_sql.write_dataset(new, uri, mode="overwrite")
    assert ds.version == 3 and ds.to_table() == new
    # Like pylance 14, overwrite keeps numbering after the high-water mark, so a row
    # address never names a fragment of an older version.
    assert [f.id for f in ds.manifest.fragments] == [4] and ds.manifest.max_fragment_id == 4
    assert lance_sql.dataset(uri, version=2).to_table() == pa.concat_tables(
        [_table(0, 10), _table(10, 5)]
    )
    assert [v["version"] for v in ds.versions()] == [1, 2, 3]
    assert [v["operation"] for v in ds.versions()] == ["overwrite", "append", "overwrite"]
    times = [v["timestamp"] for v in ds.versions()]
    assert times == sorted(times)


def test_delete_and_system_columns(uri: str) -> None:
    ds = lance_sql.write_dataset(_table(0, 10), uri, max_rows_per_file=5)
    ds.delete("id % 2 = 0 AND id < 8")
    assert ds.version == 2
    got = ds.to_table(with_row_id=True, with_row_address=True)
    assert got["id"].to_pylist() == [1, 3, 5, 7, 8, 9]
    expected_addr = [1, 3, (1 << 32) | 0, (1 << 32) | 2, (1 << 32) | 3, (1 << 32) | 4]
    assert got["_rowaddr"].to_pylist() == expected_addr
    assert got["_rowid"].to_pylist() == expected_addr
    assert ds.to_table().column_names == ["id", "name", "x"]  # hidden unless asked for
    assert ds.to_table(filter="_rowaddr = 4294967299")["id"].to_pylist() == [8]
    assert ds.count_rows("x > 2") == 4 and ds.count_deleted_rows() == 4
    ds.delete("id < 5")  # fragment 0 loses its last rows and is dropped
    assert [f.id for f in ds.manifest.fragments] == [1]
    assert lance_sql.dataset(uri, version=1).count_rows() == 10


def test_take_and_take_rows(uri: str) -> None:
    ds = lance_sql.write_dataset(_table(0, 20), uri, max_rows_per_file=6)
    ds.delete("id IN (0, 7, 13)")
    live = ds.to_table()
    idx = [16, 0, 5, 5, 9]
    assert ds.take(idx) == live.take(idx)
    assert ds.take(idx, columns=["name"]) == live.select(["name"]).take(idx)
    addrs = [(2 << 32) | 1, 3, (1 << 32) | 1]  # id 13 is deleted and skipped
    assert ds.take_rows(addrs)["id"].to_pylist() == [3]
    assert ds.take_rows([(2 << 32) | 0, 4])["id"].to_pylist() == [12, 4]
    with pytest.raises(InvalidInputError):
        ds.take([17])
    with pytest.raises(NotFoundError):
        ds.take_rows([9 << 32])


def test_scanner_options(uri: str) -> None:
    ds = lance_sql.write_dataset(_table(0, 50), uri, max_rows_per_file=10)
    batches = list(ds.to_batches(columns=["id"], batch_size=7))
    assert max(b.num_rows for b in batches) == 7
    assert pa.Table.from_batches(batches)["id"].to_pylist() == list(range(50))
    limited = ds.scanner(columns=["id"], limit=5, offset=18).to_table()
    assert limited["id"].to_pylist() == [18, 19, 20, 21, 22]
    assert ds.scanner(filter="id >= 45", limit=2).to_table()["id"].to_pylist() == [45, 46]
    assert ds.to_table(columns=[]).num_rows == 50
    with pytest.raises(NotFoundError, match="nope"):
        ds.to_table(columns=["nope"])


def test_tags_and_checkout(uri: str) -> None:
    ds = lance_sql.write_dataset(_table(0, 3), uri)
    lance_sql.write_dataset(_table(3, 3), uri, mode="append")
    ds.tags.create("first", 1)
    assert ds.tags.list()["first"]["version"] == 1
    assert lance_sql.dataset(uri, version="first").count_rows() == 3
    assert ds.checkout_version(2).count_rows() == 6
    ds.tags.update("first", 2)
    assert ds.tags.get_version("first") == 2
    with pytest.raises(InvalidInputError):
        ds.tags.create("first", 1)
    ds.tags.delete("first")
    with pytest.raises(NotFoundError):
        lance_sql.dataset(uri, version="first")
    with pytest.raises(NotFoundError, match="versions: 1, 2"):
        lance_sql.dataset(uri, version=9)


def test_modes_and_errors(uri: str) -> None:
    with pytest.raises(NotFoundError):
        lance_sql.dataset(uri)
    lance_sql.write_dataset(_table(0, 3), uri, mode="append")  # append creates, as in pylance
    with pytest.raises(InvalidInputError, match="already exists"):
        lance_sql.write_dataset(_table(0, 3), uri)
    with pytest.raises(InvalidInputError):
        lance_sql.write_dataset(_table(0, 3), uri, mode="upsert")
    with pytest.raises(UnsupportedFeatureError):
        lance_sql.write_dataset(_table(0, 3), uri + "2", data_storage_version="2.3")


def test_inputs_pylance_accepts(uri: str) -> None:
    tbl = _table(0, 4)
    lance_sql.write_dataset(tbl.to_batches(), uri)
    lance_sql.write_dataset(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches()),
                            uri, mode="append")
    lance_sql.write_dataset(tbl.to_batches()[0], uri, mode="append")
    assert lance_sql.dataset(uri).count_rows() == 12


def test_failed_commit_removes_data_files() -> None:
    MemoryStore.reset("failcommit")
    store = MemoryStore("failcommit")
    lance_sql.write_dataset(_table(0, 3), "memory://failcommit")
    before = store.keys()

    def fail(op: str, key: str) -> None:
        if op == "put_if_absent" and key.startswith("_versions/"):
            raise OSError("disk full")

    store.add_hook(fail)
    with pytest.raises(OSError):
        lance_sql.write_dataset(_table(3, 3), "memory://failcommit", mode="append")
    store.clear_hooks()
    data_keys = [k for k in store.keys() if k.startswith("data/")]
    assert data_keys == [k for k in before if k.startswith("data/")]
    assert lance_sql.dataset("memory://failcommit").count_rows() == 3


def test_concurrent_appends_all_land() -> None:
    MemoryStore.reset("race")
    lance_sql.write_dataset(_table(0, 1), "memory://race")
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            lance_sql.write_dataset(_table(100 + i, 1), "memory://race", mode="append")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ds = lance_sql.dataset("memory://race")
    assert ds.version == 9
    assert sorted(ds.to_table()["id"].to_pylist()) == [0] + list(range(100, 108))
    assert len({f.id for f in ds.manifest.fragments}) == 9


@pytest.mark.parametrize(("other_row", "merges"), [(1, True), (2, False)])
def test_concurrent_deletes_in_one_fragment(other_row: int, merges: bool) -> None:
    """A delete that loses the race to a delete of other rows of the same fragment rebases
    (deletion vectors merged); one that loses to a delete of the same row must be retried."""
    MemoryStore.reset("deletes")
    store = MemoryStore("deletes")
    base = lance_sql.write_dataset(_table(0, 10), "memory://deletes")
    other = lance_sql.dataset("memory://deletes")
    gate = threading.Event()

    def pause_first_commit(op: str, key: str) -> None:
        if op == "put_if_absent" and key.startswith("_versions/") and not gate.is_set():
            gate.set()
            other.delete(f"id = {other_row}")  # wins version 2 while we are committing

    store.add_hook(pause_first_commit)
    if merges:
        base.delete("id = 2")
        expected = [0, 3, 4, 5, 6, 7, 8, 9]
    else:
        with pytest.raises(RetryableConflict):
            base.delete("id = 2")
        expected = [0, 1, 3, 4, 5, 6, 7, 8, 9]
    store.clear_hooks()
    assert lance_sql.dataset("memory://deletes").to_table()["id"].to_pylist() == expected


def test_filters_match_column_names_ignoring_case_and_u64_range(uri: str) -> None:
    data = pa.table({"x": [1, 2, 3], "u": pa.array([1, 2**63 + 5, 7], pa.uint64())})
    ds = lance_sql.write_dataset(data, uri)
    assert ds.to_table(columns=["u"], filter="X > 1")["u"].to_pylist() == [2**63 + 5, 7]
    assert ds.count_rows("u > 5") == 2 and ds.count_rows("u > -1") == 3
    assert ds.count_rows("u > 9223372036854775807") == 1



def test_write_dataset_marks_the_primary_key_as_pylance_does(tmp_path: Path) -> None:
    import lance

    data = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "v": [0.5, 1.5, 2.5]})
    uri = str(tmp_path / "pk")
    ds = lance_sql.write_dataset(data, uri, primary_key=["b", "a"])
    assert ds.manifest.schema.primary_key == ["b", "a"]
    fields = {f.name: f for f in lance.dataset(uri).schema}
    assert fields["b"].metadata[b"lance-schema:unenforced-primary-key"] == b"true"
    assert fields["b"].metadata[b"lance-schema:unenforced-primary-key:position"] == b"1"
    assert fields["a"].metadata[b"lance-schema:unenforced-primary-key:position"] == b"2"
    assert not fields["a"].nullable and fields["v"].nullable
    assert lance.dataset(uri).to_table().equals(ds.to_table())
    # appends may repeat the key, never change it; a null key is refused
    lance_sql.write_dataset(data, uri, mode="append", primary_key=["b", "a"])
    with pytest.raises(InvalidInputError, match="primary key"):
        lance_sql.write_dataset(data, uri, mode="append", primary_key=["a"])
    with pytest.raises(SchemaError):
        lance_sql.write_dataset(pa.table({"a": [1, None]}), str(tmp_path / "nulls"),
                                primary_key=["a"])
    with pytest.raises(InvalidInputError, match="primary key"):
        lance_sql.write_dataset(data, str(tmp_path / "missing"), primary_key=["nope"])
    assert lance_sql.dataset(uri).count_rows() == 6
