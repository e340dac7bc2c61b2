"""A small thread-safe LRU cache for immutable things read from a table.

Data files, deletion vectors and row-lineage sequences never change once written, so
whatever is decoded from them can be shared by every scan and every thread, keyed by
what identifies the bytes. Two threads missing the same key may both load it; the
result is the same, so the race costs time, never correctness.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class LruCache:
    """At most ``capacity`` values; the least recently used goes first."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def get_or_load(self, key: Hashable, load: Callable[[], Any]) -> Any:  # noqa: ANN401
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = load()  # outside the lock: loads of other keys proceed in parallel
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return value

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
