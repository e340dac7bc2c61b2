"""The change feed and scans read the same values through mapped files as through copies.

Tables of each file format (2.0, 2.1, 2.2; written by lance_sql and by pylance) with
inserts, updates (pre-images read from the old files) and deletes, numbers and strings
with nulls, several fragments and pages. Each is read twice: from a store whose large
reads are views of the files' mappings, and from one that copies every read; the results
must be equal, and the mapped read must really have used the mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.io import local as local_module
from lance_sql.io.local import MMAP_SWITCH
from lance_sql.io.uri import open_store
from lance_sql.table.changes import feed
from lance_sql.table.changes.feed import table_changes

ROWS = 60_000


def _data(start: int, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    x = pa.array(rng.random(rows), pa.float64(), mask=ids % 11 == 0)
    n = pa.array(rng.integers(-(1 << 40), 1 << 40, rows), pa.int64(), mask=ids % 13 == 0)
    s = pa.array([None if i % 7 == 0 else f"s{i}-{'y' * (i % 17)}" for i in ids.tolist()])
    return pa.table({"id": ids, "x": x, "n": n, "s": s})


def _history(path: Path, version: str, writer: str) -> int:
    """create (3 fragments), append, update of x (1 in 50), update of s, delete."""
    if writer == "lance_sql":
        lance_sql.write_dataset(_data(0, ROWS, 1), path, max_rows_per_file=ROWS // 3,
                                enable_stable_row_ids=True, data_storage_version=version)
        lance_sql.write_dataset(_data(ROWS, ROWS // 4, 2), path, mode="append")
        ds = lance_sql.dataset(path)
        ds.update({"x": "x + 1"}, where="id % 50 = 3")
        lance_sql.dataset(path).update({"s": "'changed'"}, where="id % 97 = 5")
        lance_sql.dataset(path).delete("id % 31 = 2 OR (id > 1000 AND id < 1500)")
        return lance_sql.dataset(path).version
    options: dict[str, Any] = {"data_storage_version": version}
    lance.write_dataset(_data(0, ROWS, 1), path, max_rows_per_file=ROWS // 3,
                        enable_stable_row_ids=True, **options)
    lance.write_dataset(_data(ROWS, ROWS // 4, 2), path, mode="append")
    lance.dataset(path).update({"x": "x + 1"}, where="id % 50 = 3")
    lance.dataset(path).update({"s": "'changed'"}, where="id % 97 = 5")
    lance.dataset(path).delete("id % 31 = 2 OR (id > 1000 AND id < 1500)")
    return lance.dataset(path).version


@pytest.fixture(scope="module", params=[("2.0", "lance_sql"), ("2.1", "pylance"),
                                        ("2.2", "lance_sql"), ("2.2", "pylance"),
                                        ("2.0", "pylance")],
                ids=lambda p: f"{p[1]}-{p[0]}")
def table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, int]:
    version, writer = request.param
    path = tmp_path_factory.mktemp("mapped_feed") / "t.lance"
    return path, _history(path, version, writer)


def _count_views(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    view = local_module.LocalSource._view

    def counted(self: local_module.LocalSource, offset: int,
                length: int) -> memoryview | None:
        calls[0] += 1
        return view(self, offset, length)

    monkeypatch.setattr(local_module.LocalSource, "_view", counted)
    return calls


def _both(read: Callable[[], list[pa.Table]], monkeypatch: pytest.MonkeyPatch
          ) -> tuple[list[pa.Table], list[pa.Table]]:
    """``read()`` through copies, then through mappings (``LANCE_SQL_MMAP`` picks the
    mode of the stores opened; caches are cleared before each, as open files are cached
    by path whatever the store's mode)."""
    runtime = lance_sql.default_runtime()
    views = _count_views(monkeypatch)
    runtime.clear()
    monkeypatch.setenv(MMAP_SWITCH, "0")
    copied = read()
    assert views[0] == 0
    runtime.clear()
    monkeypatch.setenv(MMAP_SWITCH, "1")
    mapped = read()
    assert views[0] > 0  # the mapping was really read
    runtime.clear()
    return copied, mapped


@pytest.mark.parametrize("min_read", [local_module.MAP_MIN_READ, 64],
                         ids=["default", "every-read-mapped"])
def test_change_feed_through_mappings_equals_copies(
        table: tuple[Path, int], min_read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    path, last = table
    monkeypatch.setattr(local_module, "MAP_MIN_READ", min_read)

    def feed() -> list[pa.Table]:
        store = open_store(str(path))
        windows = [(1, last), *[(v, v) for v in range(2, last + 1)]]
        out = [table_changes(store, a, b) for a, b in windows]
        out.append(table_changes(store, 1, last, mode="net"))
        out.append(table_changes(store, 3, 3, columns=["x", "_change_type"],
                                 filter="_change_type = 'update_preimage'"))
        return out

    copied, mapped = _both(feed, monkeypatch)
    kinds = set()
    for a, b in zip(copied, mapped, strict=True):
        assert a.equals(b)
        kinds |= set(a.column("_change_type").to_pylist())
    assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}
    pre = copied[2].filter(pa.compute.equal(copied[2]["_change_type"], "update_preimage"))
    post = copied[2].filter(pa.compute.equal(copied[2]["_change_type"], "update_postimage"))
    assert pre.num_rows == post.num_rows > 0  # update of x: pre-images hold the old values
    old, new = pre["x"].to_numpy(zero_copy_only=False), post["x"].to_numpy(zero_copy_only=False)
    live = ~np.isnan(old)
    assert np.allclose(new[live], old[live] + 1)


@pytest.mark.parametrize("min_read", [local_module.MAP_MIN_READ, 64],
                         ids=["default", "every-read-mapped"])
def test_scans_and_takes_through_mappings_equal_copies(
        table: tuple[Path, int], min_read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    path, last = table
    monkeypatch.setattr(local_module, "MAP_MIN_READ", min_read)
    rows = np.sort(np.random.default_rng(3).choice(ROWS, 500, replace=False))

    def read() -> list[pa.Table]:
        out = []
        for version in (1, last):
            ds = lance_sql.dataset(path, version=version)
            out.append(ds.to_table(with_row_id=True))
            out.append(ds.take(rows.tolist()))
            out.append(ds.to_table(filter="n > 0 AND s IS NOT NULL", columns=["id", "s"]))
        return out

    copied, mapped = _both(read, monkeypatch)
    for a, b in zip(copied, mapped, strict=True):
        assert a.equals(b)
    assert copied[3].num_rows < ROWS + ROWS // 4  # the deletes are seen


def test_fragments_read_side_by_side_from_mappings_equal_one_thread(
        table: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fragment read on the pool (worker threads sharing the mapped files) gives what
    reading them one by one on the calling thread gives."""
    path, last = table
    lance_sql.default_runtime().clear()
    windows = [(1, last), *[(v, v) for v in range(2, last + 1)]]
    monkeypatch.setattr(feed, "READ_THREADS", 4)
    monkeypatch.setattr(feed, "PARALLEL_ROWS", 1)
    pools = []
    real = feed.WorkerPool

    def pool(*args: Any) -> Any:
        pools.append(args)
        return real(*args)

    monkeypatch.setattr(feed, "WorkerPool", pool)
    pooled = [table_changes(str(path), a, b) for a, b in windows]
    assert pools  # the pool really read fragments
    monkeypatch.setattr(feed, "PARALLEL_ROWS", 1 << 62)
    alone = [table_changes(str(path), a, b) for a, b in windows]
    for a, b in zip(pooled, alone, strict=True):
        assert a.equals(b)
