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
    """At most ``capacity`` values (and, with ``weigh``, at most ``max_weight`` in total,
    e.g. bytes); the least recently used go first. A value heavier than ``max_weight``
    is returned but not kept."""

    def __init__(self, capacity: int, *, max_weight: int | None = None,
                 weigh: Callable[[Any], int] | None = None) -> None:
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity
        self._max_weight = max_weight
        self._weigh = weigh
        self._weight = 0

    def get_or_load(self, key: Hashable, load: Callable[[], Any]) -> Any:  # noqa: ANN401
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        value = load()  # outside the lock: loads of other keys proceed in parallel
        weight = self._weigh(value) if self._weigh is not None else 0
        if self._max_weight is not None and weight > self._max_weight:
            return value
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._items[key] = (value, weight)
            self._weight += weight
            while len(self._items) > self._capacity or (
                    self._max_weight is not None and self._weight > self._max_weight):
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped
        return value

    @property
    def weight(self) -> int:
        """Total weight of what is kept (0 without ``weigh``)."""
        return self._weight

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0
