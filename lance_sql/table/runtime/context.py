"""The runtime table reads run on: the cache they share.

Every read uses the *current* runtime: the process-wide :func:`default_runtime` unless
code runs inside ``with runtime.activate():``. A :class:`~lance_sql.LanceSession` given
its own runtime activates it for everything it plans and runs. The current runtime is a
context variable: worker pools carry it to their threads (see
:mod:`lance_sql.table.runtime.workers`), and threads a read does not start (DataFusion's)
must be handed it explicitly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TypeVar

from lance_sql.table.runtime.cache import CacheStats, TableCache

T = TypeVar("T")


class Runtime:
    """Owns a :class:`TableCache`; ``cache_bytes`` overrides byte bounds per kind (see
    :data:`lance_sql.table.runtime.cache.KINDS`)."""

    def __init__(self, *, cache_bytes: Mapping[str, int] | None = None) -> None:
        self.cache = TableCache(cache_bytes)

    @contextlib.contextmanager
    def activate(self) -> Iterator[Runtime]:
        """Run the reads inside the block on this runtime."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def each(self, steps: Iterator[T]) -> Iterator[T]:
        """``steps``, each step run on this runtime: for iterators that threads other than
        the one that activated it pull (nothing stays active between steps)."""
        try:
            while True:
                with self.activate():
                    try:
                        item = next(steps)
                    except StopIteration:
                        return
                yield item
        finally:
            close = getattr(steps, "close", None)
            if close is not None:
                close()

    def configure(self, **max_bytes: int) -> None:
        """Set the byte bound of the cache kinds named (``deletions=64 << 20``)."""
        self.cache.configure(**max_bytes)

    def clear(self, *kinds: str) -> None:
        """Empty the cache (only ``kinds`` when named)."""
        self.cache.clear(*kinds)

    def stats(self) -> dict[str, CacheStats]:
        """Entries, bytes, bounds, hits and misses per cache kind."""
        return self.cache.stats()


_DEFAULT = Runtime()
_CURRENT: ContextVar[Runtime | None] = ContextVar("lance_sql_runtime", default=None)


def default_runtime() -> Runtime:
    """The process-wide runtime reads use unless another is active."""
    return _DEFAULT


def current_runtime() -> Runtime:
    """The runtime reads on this thread use now."""
    return _CURRENT.get() or _DEFAULT
