"""An interruption (Ctrl-C) after a commit is published must not undo it: the version is
live, so no clean-up may delete its files; the error says the version was committed."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.io.memory import MemoryStore
from lance_sql.table.txn.commit import committed_version

_names = itertools.count()


def _table() -> tuple[str, MemoryStore]:
    name = f"interrupted{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64()),
                                      "v": [f"v{i}" for i in range(10)]}), uri,
                            enable_stable_row_ids=True)
    return uri, MemoryStore(name)


WRITES: dict[str, Callable[[str], object]] = {
    "delete": lambda uri: lance_sql.dataset(uri).delete("id = 1"),
    "append": lambda uri: lance_sql.write_dataset(
        pa.table({"id": pa.array([100], pa.int64()), "v": ["new"]}), uri, mode="append"),
    "update": lambda uri: lance_sql.dataset(uri).update({"v": "'upd'"}, where="id < 3"),
    "merge_insert": lambda uri: lance_sql.dataset(uri).merge_insert("id")
    .when_matched_update_all().when_not_matched_insert_all()
    .execute(pa.table({"id": pa.array([2, 200], pa.int64()), "v": ["m2", "m200"]})),
    "add_columns": lambda uri: lance_sql.dataset(uri).add_columns({"w": "id * 2"}),
    "compact": lambda uri: lance_sql.dataset(uri).optimize.compact_files(
        target_rows_per_fragment=100),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_ctrl_c_after_publishing_keeps_the_version(write: str) -> None:
    uri, store = _table()
    if write == "compact":  # something to compact: a second fragment
        lance_sql.write_dataset(pa.table({"id": pa.array([50], pa.int64()), "v": ["x"]}),
                                uri, mode="append")
    before = lance_sql.dataset(uri).version
    published: list[str] = []

    def interrupt_after_publish(op: str, key: str) -> None:
        if op == "put_if_absent" and "_versions/" in key:
            published.append(key)
        elif op == "put" and "latest_version_hint" in key and published:
            raise KeyboardInterrupt

    store.add_hook(interrupt_after_publish)
    with pytest.raises(KeyboardInterrupt) as caught:
        WRITES[write](uri)
    store.clear_hooks()
    latest = lance_sql.dataset(uri)
    assert latest.version > before
    assert committed_version(caught.value) == latest.version
    assert any("was committed" in note for note in caught.value.__notes__)
    latest.to_table()  # every file the new version needs is there
    assert latest.count_rows() == latest.to_table().num_rows
    assert store.exists(f"_transactions/{latest.manifest.transaction_file}")
