"""Worker threads scoped to the read that started them.

A scan reads fragments side by side in a few threads. Those threads belong to the
scan: however it stops — its last row read, a limit reached, its iterator closed or
dropped, an error, Ctrl-C — the pool is closed, which drops the work not yet started
and joins the threads before the scan's caller gets control back. Threads are named
``lance_sql-<what>_<n>`` so that a leftover would be easy to spot. Work runs in the
context of the code that submitted it, so it uses the same runtime (caches).

At interpreter exit Python itself joins executor threads (before ``atexit`` hooks);
pools still open then are closed by :func:`close_all` as well.
"""

from __future__ import annotations

import atexit
import contextvars
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THREAD_PREFIX = "lance_sql-"
_LIVE: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class WorkerPool:
    """A thread pool owned by one read; use it as a context manager."""

    def __init__(self, name: str, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max(1, threads),
                                            thread_name_prefix=f"{THREAD_PREFIX}{name}")
        self._closed = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    def submit(self, fn: Callable[..., R], /, *args: object) -> Future[R]:
        """Run ``fn(*args)`` on a worker, in the caller's context (its runtime)."""
        return self._executor.submit(contextvars.copy_context().run, fn, *args)

    def ordered(self, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
        """``fn(item)`` for each item, in order, at most ``window`` computed ahead.

        Closing the iterator early cancels what has not started; the pool's own close
        joins what has.
        """
        pending: deque[Future[R]] = deque()
        source = iter(items)
        try:
            for item in source:
                pending.append(self.submit(fn, item))
                if len(pending) >= max(1, window):
                    break
            while pending:
                result = pending.popleft().result()
                for item in source:
                    pending.append(self.submit(fn, item))
                    break
                yield result
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        """Drop queued work, wait for running work, end the threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A pool its owner forgot: stop it without waiting (we may be in any thread).
        if not getattr(self, "_closed", True):
            self._closed = True
            self._executor.shutdown(wait=False, cancel_futures=True)


def live_workers() -> list[threading.Thread]:
    """lance_sql worker threads that are alive now (for tests and diagnostics)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def close_all() -> None:
    """Close every pool still open (registered to run at interpreter exit)."""
    with _LIVE_LOCK:
        pools = list(_LIVE)
    for pool in pools:
        pool.close()


atexit.register(close_all)
