"""Commit handlers: put-if-not-exists and rename-if-not-exists each give one winner."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.io import LocalStore, MemoryStore
from lance_sql.io.commit import PutIfAbsentCommit, RenameCommit
from lance_sql.table.txn.commit import CommitConfig

HANDLERS = [PutIfAbsentCommit(), RenameCommit()]


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    name = f"handlers-{request.node.name}"
    MemoryStore.reset(name)
    return MemoryStore(name)


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.name)
def test_exactly_one_writer_wins_a_version(store, handler) -> None:
    barrier = threading.Barrier(8)
    wins: list[int] = []

    def race(i: int) -> None:
        barrier.wait()
        if handler.commit(store, "_versions/1.manifest", 1, f"writer {i}".encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.read("_versions/1.manifest") == f"writer {wins[0]}".encode()
    assert store.list_dir("_versions") == ["1.manifest"]  # no temporaries left behind
    assert handler.exists(store, "_versions/1.manifest", 1)
    assert handler.latest(store) is None  # versions are found by listing


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.name)
def test_tables_committed_with_each_handler(tmp_path: Path, handler) -> None:
    uri = str(tmp_path / "t.lance")
    config = CommitConfig(handler=handler)
    lance_sql.write_dataset(pa.table({"id": [1, 2]}), uri, commit_config=config)
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            lance_sql.write_dataset(pa.table({"id": [10 + i]}), uri, mode="append",
                                    commit_config=config)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == [1, 2] + list(
        range(10, 16))
    assert len(os.listdir(os.path.join(uri, "_versions"))) == 8  # 7 manifests + the hint
