"""The LRU cache shared by scans, lineage and change-feed plans."""

from __future__ import annotations

import threading

from lance_sql.table.runtime.cache import LruCache


def test_least_recently_used_goes_first() -> None:
    cache = LruCache(2)
    loads: list[str] = []

    def load(key: str):  # noqa: ANN202
        return lambda: loads.append(key) or key.upper()

    assert cache.get_or_load("a", load("a")) == "A"
    cache.get_or_load("b", load("b"))
    cache.get_or_load("a", load("a"))  # a is now the most recent
    cache.get_or_load("c", load("c"))  # evicts b
    cache.get_or_load("a", load("a"))
    cache.get_or_load("b", load("b"))
    assert loads == ["a", "b", "c", "b"]


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
