"""Crashed writers leave nothing behind for ever: cleanup removes our writers' temporary
files once untouched for the grace period, and never a running writer's fresh one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.io import LocalStore, MemoryStore, RenameCommit
from lance_sql.table.ops.cleanup import WRITER_GRACE
from lance_sql.table.txn.commit import CommitConfig

_KILLED_WRITER = """
import os, sys
from lance_sql.io import LocalStore
with LocalStore(sys.argv[1]).open_writer("data/big.lance") as sink:
    sink.write(b"x" * 1_000_000)
    sink.flush()
    os._exit(9)  # killed mid-write: no clean-up runs
"""


def hidden(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def age(path: str, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def test_a_killed_writers_temporary_is_removed_after_the_grace_period(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, uri], env=env, check=False)
    assert done.returncode == 9
    data = os.path.join(uri, "data")
    (stale,) = hidden(data)
    assert stale.startswith(".big.lance.") and stale.endswith(".tmp")
    assert os.path.getsize(os.path.join(data, stale)) == 1_000_000
    # files of others that merely start with a dot are never ours to remove
    for name in (".keep", ".big.lance.tmp", ".DS_Store"):
        Path(data, name).write_bytes(b"not ours")
        age(os.path.join(data, name), 10 * WRITER_GRACE.total_seconds())
    ds = lance_sql.dataset(uri)
    ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert stale in hidden(data)  # fresh: its writer may still be running
    age(os.path.join(data, stale), WRITER_GRACE.total_seconds() + 60)
    stats = ds.cleanup_old_versions(older_than=timedelta(0))  # also without delete_unverified
    assert hidden(data) == [".DS_Store", ".big.lance.tmp", ".keep"]
    assert stats.files_removed == 1 and stats.bytes_removed == 1_000_000
    assert ds.count_rows() == 10


def test_a_running_writer_keeps_its_temporary(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    store = LocalStore(uri)
    with store.open_writer("data/slow.lance") as sink:
        sink.write(b"first half ")
        sink.flush()
        lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0),
                                                    delete_unverified=True)
        sink.write(b"second half")
    assert store.read("data/slow.lance") == b"first half second half"


def test_a_rename_commits_stale_temporary_is_removed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    config = CommitConfig(handler=RenameCommit())
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri,
                            commit_config=config)
    versions = os.path.join(uri, "_versions")
    left = os.path.join(versions, f".tmp-2.manifest-{'ab' * 16}")
    Path(left).write_bytes(b"a manifest its writer never renamed")
    ds = lance_sql.dataset(uri, commit_config=config)
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert os.path.exists(left)
    age(left, WRITER_GRACE.total_seconds() + 1)
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert not os.path.exists(left)
    assert ds.count_rows() == 10


def test_memory_store_temporaries_follow_the_same_rule() -> None:
    MemoryStore.reset("temporaries")
    uri = "memory://temporaries"
    lance_sql.write_dataset(pa.table({"id": pa.array(range(3), pa.int64())}), uri)
    store = MemoryStore("temporaries")
    key = f"data/.x.lance.{'0' * 32}.tmp"
    store.put(key, b"left over")
    ds = lance_sql.dataset(uri)
    ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert store.exists(key)
    store.set_modified_ns(key, time.time_ns() - int(WRITER_GRACE.total_seconds() * 1e9) - 1)
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert not store.exists(key)
