"""Files the caches keep open: one budget for data and index files, and files that are
deleted are let go of (their descriptor and memory map), so their disk space comes back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.runtime.cache import DATA_FILES, INDEX_FILES, LruCache
from lance_sql.table.runtime.context import Runtime
from lance_sql.table.runtime.open_files import OPEN_FILES, OpenFiles

REPO = Path(__file__).resolve().parents[3]


class _Source:
    def __init__(self, path: str) -> None:
        self.path = path
        self.gone = False

    def unlinked(self) -> bool:
        return self.gone


def _cache(files: OpenFiles) -> LruCache:
    return LruCache(10_000, files=files, source_of=lambda value: value)


def test_caches_share_one_budget_least_recently_used_first() -> None:
    files = OpenFiles(3)
    a, b = _cache(files), _cache(files)
    for i in range(2):
        a.get_or_load(i, lambda i=i: _Source(f"/t/a{i}"))
    b.get_or_load(0, lambda: _Source("/t/b0"))
    a.get_or_load(0, lambda: pytest.fail("cached"))  # a0 is now the most recently used
    b.get_or_load(1, lambda: _Source("/t/b1"))  # one too many: a1 goes
    assert (len(a), len(b), len(files)) == (1, 2, 3)
    assert a.peek(0).path == "/t/a0" and a.peek(1) is None


def test_deleted_paths_and_trees_are_dropped() -> None:
    files = OpenFiles(100)
    cache = _cache(files)
    for name in ("/t/x.lance/data/1.lance", "/t/x.lance/data/2.lance", "/t/xy.lance/data/3.lance"):
        cache.get_or_load(name, lambda name=name: _Source(name))
    assert files.forget("/t/x.lance/data/1.lance") == 1
    assert files.forget("/t/x.lance", tree=True) == 1  # not /t/xy.lance's
    assert [cache.peek(k) is not None for k in ("/t/x.lance/data/2.lance",
                                                "/t/xy.lance/data/3.lance")] == [False, True]
    assert len(files) == 1


def test_an_unlinked_file_is_dropped_on_a_hit_and_by_the_sweep() -> None:
    files = OpenFiles(1000)
    cache = _cache(files)
    first = cache.get_or_load("k", lambda: _Source("/t/k"))
    first.gone = True
    second = cache.get_or_load("k", lambda: _Source("/t/k"))  # loaded again
    assert second is not first and len(files) == 1
    sources = [cache.get_or_load(i, lambda i=i: _Source(f"/t/{i}")) for i in range(100)]
    for s in sources[:50]:
        s.gone = True
    for i in range(100, 200):  # new entries: a sweep is due after some of them
        cache.get_or_load(i, lambda i=i: _Source(f"/t/{i}"))
    assert len(cache) == len(files) == 151  # the sweep dropped them, no lookup
    assert all(cache.peek(i) is None for i in range(50))


def test_reclaim_drops_the_least_recently_used_quarter() -> None:
    files = OpenFiles(100)
    cache = _cache(files)
    for i in range(40):
        cache.get_or_load(i, lambda i=i: _Source(f"/t/{i}"))
    assert files.reclaim() == 10
    assert [cache.peek(i) is None for i in (0, 9, 10)] == [True, True, False]


def test_a_collected_cache_leaves_the_ledger() -> None:
    files = OpenFiles(100)
    cache = _cache(files)
    cache.get_or_load(1, lambda: _Source("/t/1"))
    del cache
    _cache(files).get_or_load(2, lambda: _Source("/t/2"))
    assert len(files) == 1


def test_data_and_index_files_count_together(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": np.arange(40), "v": np.arange(40.0)}),
                                 uri, max_rows_per_file=10)
    ds.create_scalar_index("id", "BTREE")
    monkeypatch.setattr(OPEN_FILES, "bound", 3)
    runtime = Runtime()
    with runtime.activate():
        ds = lance_sql.dataset(uri)
        assert ds.to_table(filter="id = 5")["v"].to_pylist() == [5.0]
        assert ds.to_table()["v"].to_pylist() == list(map(float, range(40)))
    stats = runtime.stats()
    assert stats[INDEX_FILES.name].misses == 1
    assert stats[DATA_FILES.name].entries + stats[INDEX_FILES.name].entries <= 3


def _run(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (indented as in a test) after :data:`DELETED` in a new process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = DELETED + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


DELETED = """
import gc, os
def held(root):
    '''Descriptors and mappings of this process on deleted files under root.'''
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        fds += target.startswith(root) and target.endswith("(deleted)")
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if root in line and line.rstrip().endswith("(deleted)"))
    return fds, maps
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_cleanup_lets_go_of_the_files_it_removes(tmp_path: Path) -> None:
    script = f"""
    from datetime import timedelta
    import numpy as np, pyarrow as pa, lance_sql
    root = {str(tmp_path)!r}
    uri = root + "/u.lance"
    table = pa.table({{"id": np.arange(80_000), "v": np.arange(80_000.0)}})
    ds = lance_sql.write_dataset(table, uri, max_rows_per_file=20_000)  # mapped: >64 KiB
    kept = ds.to_table(columns=["v"])  # arrays read keep working after cleanup
    ds = lance_sql.write_dataset(table.slice(0, 10), uri, mode="overwrite")
    assert ds.cleanup_old_versions(older_than=timedelta(0)).files_removed >= 4
    gc.collect()
    fds, maps = held(root)
    assert kept["v"].to_numpy().sum() == table["v"].to_numpy().sum()
    del kept
    gc.collect()
    assert held(root) == (0, 0), (fds, maps, held(root))
    assert fds == 0, fds
    """
    done = _run(script)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_files_deleted_by_others_are_let_go_of_when_found(tmp_path: Path) -> None:
    """Another process deleted the table: a read that finds its files unlinked drops them
    (and fails as the table is gone) rather than answering from the dead files; those no
    read finds go at the next check of all open files, which opening new ones brings."""
    script = f"""
    import shutil
    import numpy as np, pyarrow as pa, lance_sql
    from lance_sql.errors import LanceError
    root = {str(tmp_path)!r}
    uri = root + "/u.lance"
    ds = lance_sql.write_dataset(pa.table({{"v": np.arange(80_000.0)}}), uri,
                                 max_rows_per_file=20_000)
    ds.to_table()
    shutil.rmtree(uri)  # not through lance_sql: nobody tells the caches
    try:
        ds.to_table()
    except (LanceError, OSError):
        pass
    else:
        raise AssertionError("read a table whose files are gone")
    gc.collect()
    found = held(root)
    assert found[0] < 4, found
    other = lance_sql.write_dataset(pa.table({{"v": np.arange(70)}}), root + "/o.lance",
                                    max_rows_per_file=1)
    assert other.to_table().num_rows == 70
    gc.collect()
    assert held(root) == (0, 0), (found, held(root))
    """
    done = _run(script)
    assert done.returncode == 0, done.stderr
