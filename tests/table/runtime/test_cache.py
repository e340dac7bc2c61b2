"""The caches shared by scans, lineage and change-feed plans: the LRU building block, and
the runtime's cache with a byte bound per kind."""

from __future__ import annotations

import gc
import os
import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.table.files.reader import open_data_file
from lance_sql.table.runtime.cache import DATA_FILES, DELETIONS, LINEAGE, LruCache, TableCache
from lance_sql.table.runtime.context import current_runtime


def test_least_recently_used_goes_first() -> None:
    cache = LruCache(2)
    loads: list[str] = []

    def load(key: str):
        return lambda: loads.append(key) or key.upper()

    assert cache.get_or_load("a", load("a")) == "A"
    cache.get_or_load("b", load("b"))
    cache.get_or_load("a", load("a"))  # a is now the most recent
    cache.get_or_load("c", load("c"))  # evicts b
    cache.get_or_load("a", load("a"))
    cache.get_or_load("b", load("b"))
    assert loads == ["a", "b", "c", "b"]


def test_put_replaces_and_a_value_too_heavy_leaves_nothing_behind() -> None:
    """put keeps a value in place of the old one; one too heavy to keep must not leave
    the old value standing in for it (a reader would take the old one as current)."""
    cache = LruCache(10, max_weight=10, weigh=len)
    cache.put("k", "old")
    cache.put("k", "newer")
    assert cache.peek("k") == "newer" and cache.weight == 5
    cache.put("k", "far too heavy")
    assert cache.peek("k") is None and cache.weight == 0


def test_total_weight_is_bounded_and_heavy_values_are_not_kept() -> None:
    cache = LruCache(10, max_weight=10, weigh=len)
    loads: list[str] = []

    def get(value: str) -> str:
        return cache.get_or_load(value, lambda: loads.append(value) or value)

    get("aaaa")
    get("bbbb")
    get("cccc")  # 12 > 10: the oldest ("aaaa") goes
    get("bbbb")
    get("aaaa")  # loaded again
    get("x" * 11)  # heavier than the whole cache: returned, never kept
    get("x" * 11)
    assert loads == ["aaaa", "bbbb", "cccc", "aaaa", "x" * 11, "x" * 11]


def test_threads_share_one_cache() -> None:
    cache = LruCache(1000)
    results: list[int] = []

    def work(start: int) -> None:
        for i in range(200):
            results.append(cache.get_or_load((start + i) % 300, lambda i=i: (start + i) % 300))

    threads = [threading.Thread(target=work, args=(k * 50,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1600
    assert all(cache.get_or_load(k, lambda: -1) == k for k in range(300))


# -- the runtime's cache: bounds per kind, stats, clearing, ownership --------------------


class Blob:
    """A value that says how many bytes it holds."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_bytes_never_exceed_the_bound_under_concurrent_loads() -> None:
    bound = 10_000
    cache = TableCache({"deletions": bound})
    seen: list[int] = []
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(400):
                key = rng.randrange(200)
                size = rng.choice([1, 50, 700, 3_000, bound, bound + 1])
                cache.get_or_load(DELETIONS, key, lambda size=size: Blob(size))
                seen.append(cache.stats()["deletions"].bytes)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(seen) == 2400 and max(seen) <= bound and max(seen) > 0
    stats = cache.stats()["deletions"]
    assert stats.hits + stats.misses == 2400 and stats.hits > 0 and stats.misses > 0
    assert 0 < stats.entries <= DELETIONS.max_entries and stats.max_bytes == bound


def test_configure_shrinks_at_once_and_rejects_unknown_kinds() -> None:
    cache = TableCache()
    for key in range(10):
        cache.get_or_load(LINEAGE, key, lambda: Blob(1000))
    assert cache.stats()["lineage"].bytes == 10_000
    cache.configure(lineage=2500)
    after = cache.stats()["lineage"]
    assert (after.entries, after.bytes, after.max_bytes) == (2, 2000, 2500)
    cache.configure(lineage=0)
    assert cache.stats()["lineage"].entries == 0
    assert cache.get_or_load(LINEAGE, "k", lambda: Blob(1)).nbytes == 1  # returned, not kept
    assert cache.stats()["lineage"].entries == 0
    with pytest.raises(InvalidInputError, match="no cache kind 'nope'"):
        cache.configure(nope=1)
    with pytest.raises(InvalidInputError, match="byte count"):
        cache.configure(lineage=-1)
    with pytest.raises(InvalidInputError):
        lance_sql.Runtime(cache_bytes={"lineage": "big"})  # type: ignore[dict-item]


def _table_with_deletions(path: Path, fragments: int = 6) -> lance_sql.LanceDataset:
    data = pa.table({"id": pa.array(range(600), pa.int64()),
                     "s": [f"row {i}" for i in range(600)]})
    ds = lance_sql.write_dataset(data, path, max_rows_per_file=600 // fragments)
    ds.delete("id % 10 = 3")
    return lance_sql.dataset(path)


def test_reads_keep_each_kind_within_its_bound(tmp_path: Path) -> None:
    """Real reads on a runtime with small bounds: every kind stays within its bound, and
    answers are unchanged."""
    ds = _table_with_deletions(tmp_path / "t")
    expected = ds.to_table().sort_by("id")
    bounds = {"data_files": 2 * DATA_FILES.weigh(_any_reader(ds)), "deletions": 1000,
              "manifests": 3000}
    runtime = lance_sql.Runtime(cache_bytes=bounds)
    with runtime.activate():
        for _ in range(2):
            got = lance_sql.dataset(tmp_path / "t").to_table().sort_by("id")
            assert got.equals(expected)
            for name, stats in runtime.stats().items():
                assert stats.bytes <= stats.max_bytes, name
    stats = runtime.stats()
    assert stats["data_files"].entries == 2  # six files read, two fit
    assert stats["deletions"].entries >= 1 and stats["deletions"].misses >= 6
    assert stats["manifests"].hits >= 1


def _any_reader(ds: lance_sql.LanceDataset) -> object:
    fragment = ds.manifest.fragments[0]
    return open_data_file(ds.store, ds.manifest, fragment.files[0])


def test_clear_empties_and_reads_load_again(tmp_path: Path) -> None:
    ds = _table_with_deletions(tmp_path / "t")
    runtime = lance_sql.Runtime()
    with runtime.activate():
        first = lance_sql.dataset(tmp_path / "t").to_table()
        filled = runtime.stats()
        assert filled["data_files"].entries == 6 and filled["deletions"].entries == 6
        runtime.clear("deletions")
        assert runtime.stats()["deletions"].entries == 0
        assert runtime.stats()["data_files"].entries == 6  # other kinds untouched
        runtime.clear()
        assert all(s.entries == 0 and s.bytes == 0 for s in runtime.stats().values())
        again = lance_sql.dataset(tmp_path / "t").to_table()
    assert again.equals(first) and again.num_rows == ds.count_rows()
    assert runtime.stats()["data_files"].misses == 12  # every file opened again


def test_a_session_reads_on_its_own_runtime(tmp_path: Path) -> None:
    """What a session reads, on DataFusion's threads too, fills its runtime only."""
    _table_with_deletions(tmp_path / "t.lance")
    default = lance_sql.default_runtime()
    default.clear()
    own = lance_sql.Runtime()
    session = lance_sql.connect(tmp_path, runtime=own)
    assert session.runtime is own
    got = session.sql("SELECT count(*) AS n, sum(id) AS s FROM t WHERE s <> ''").to_pydict()
    assert got == {"n": [540], "s": [sum(i for i in range(600) if i % 10 != 3)]}
    stats = own.stats()
    assert stats["data_files"].entries == 6 and stats["deletions"].entries == 6
    assert stats["table_versions"].entries == 1
    assert all(s.entries == 0 for s in default.stats().values())
    shared = lance_sql.connect(tmp_path)
    assert shared.runtime is default
    shared.sql("SELECT * FROM t").to_arrow_table()
    assert default.stats()["data_files"].entries == 6


def test_the_session_cache_of_versions_is_bounded(tmp_path: Path) -> None:
    ds = _table_with_deletions(tmp_path / "t.lance")
    for i in range(4):
        ds.delete(f"id = {i}")
    runtime = lance_sql.Runtime(cache_bytes={"table_versions": 3000})
    session = lance_sql.connect(tmp_path, runtime=runtime)
    for version in range(1, 7):
        session.sql(f"SELECT count(*) FROM t VERSION AS OF {version}").to_pydict()
        stats = runtime.stats()["table_versions"]
        assert 0 < stats.bytes <= 3000
    assert runtime.stats()["table_versions"].entries < 6


def test_get_or_load_many_loads_only_the_missing_once() -> None:
    """Cached keys come back without a load; the missing ones from one call, in order,
    kept within the bounds (a value over the weight bound is returned, not kept)."""
    cache = LruCache(3, max_weight=100, weigh=lambda v: v)
    cache.get_or_load("a", lambda: 10)
    calls: list[list] = []

    def load(keys: list) -> list[int]:
        calls.append(keys)
        return [{"b": 20, "c": 30, "big": 500}[k] for k in keys]

    assert cache.get_or_load_many(["b", "a", "big", "c"], load) == [20, 10, 500, 30]
    assert calls == [["b", "big", "c"]]
    assert cache.get_or_load_many(["a", "b", "c"], load) == [10, 20, 30]
    assert len(calls) == 1 and cache.hits == 3 + 1 and len(cache) == 3
    assert cache.get_or_load_many([], load) == [] and len(calls) == 1


def test_an_evicted_data_file_closes_its_descriptor_without_a_collection(
        tmp_path: Path) -> None:
    """An open data file held itself in a reference cycle (through its field reader):
    evicted from the cache, its descriptor stayed open until a garbage collection, and
    a loop writing, scanning and deleting small tables ran out of descriptors (EMFILE
    at 1024) although the cache holds at most 512 files."""
    table = pa.table({"a": list(range(100)), "s": [str(i) for i in range(100)]})
    current_runtime().clear()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        opened = len(os.listdir("/proc/self/fd"))
        for i in range(5):
            uri = str(tmp_path / f"t{i}.lance")
            lance_sql.write_dataset(table, uri, max_rows_per_file=25)
            lance_sql.dataset(uri).to_table()
            assert lance_sql.dataset(uri).to_table().num_rows == 100
        assert len(os.listdir("/proc/self/fd")) > opened  # (the cache keeps them open)
        current_runtime().clear()
        assert len(os.listdir("/proc/self/fd")) <= opened
    finally:
        if was_enabled:
            gc.enable()


def test_open_data_files_are_bounded_by_the_descriptor_limit() -> None:
    from lance_sql.table.runtime.cache import open_files_bound

    assert open_files_bound(1024) == 512  # half the usual limit left to the rest
    assert open_files_bound(256) == 128  # never more than half
    assert open_files_bound(4) == 2
    assert open_files_bound(20_000) == 5_000
    assert open_files_bound(1 << 20) == 8192
    assert open_files_bound(-1) == 8192  # unlimited
    assert DATA_FILES.max_entries == open_files_bound()


def test_a_scan_over_more_than_512_files_reuses_them(tmp_path: Path) -> None:
    """Scanned in order, files past the cache's entry bound were all opened again on
    every scan (least recently used first: no hit at all)."""
    from lance_sql.table.runtime.cache import open_files_bound

    n = min(open_files_bound() - 8, 700)
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"x": list(range(n))}), uri, max_rows_per_file=1)
    ds = lance_sql.dataset(uri)
    runtime = current_runtime()
    runtime.clear()
    assert ds.to_table()["x"].to_pylist() == list(range(n))
    before = runtime.stats()["data_files"]
    assert ds.to_table().num_rows == n
    after = runtime.stats()["data_files"]
    assert after.misses == before.misses
    assert after.hits - before.hits >= n
