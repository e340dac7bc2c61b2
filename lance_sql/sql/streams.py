"""Scans DataFusion drives on its own threads end with the query that started them.

DataFusion runs our scans on its tokio worker threads: per partition it calls
``fragment.scanner(...)`` and pulls ``to_batches()`` one batch at a time. When a query
stops early — a ``LIMIT`` satisfied, an error in another partition, the consumer gone —
DataFusion returns at once and drops the other partitions' tasks, but a task in the
middle of a pull keeps running our Python code until that pull returns. If the
interpreter starts shutting down meanwhile, that thread is made to exit as soon as it
next takes the GIL, and the forced unwind through DataFusion's Rust frames aborts the
process ("FATAL: exception not rethrown", exit status 134).

So every execution of a query runs in a :class:`ScanScope`. Partitions planned while a
scope is active (``get_fragments`` runs on the calling thread) belong to it, and each
partition is *live* from the moment DataFusion asks for its scanner until DataFusion
releases that scanner. When the execution ends — its result collected, its stream
exhausted, closed or dropped, an error, Ctrl-C — :meth:`ScanScope.settle` cancels the
scope (a live partition stops at its next chunk) and waits until DataFusion has released
every partition. An ``atexit`` hook settles whatever is still open (streams a caller
kept, scans started outside a scope) before the interpreter finalises.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Protocol

import datafusion

from lance_sql.errors import QueryError

# How long ending an execution waits for DataFusion to release its partitions. A
# partition stops at its next chunk (milliseconds); this bound only matters if a caller
# keeps a partition's stream alive by other means.
SETTLE_TIMEOUT = 30.0
_POLL = 0.005

_SCOPES: weakref.WeakSet[ScanScope] = weakref.WeakSet()
_STREAMS: weakref.WeakSet[ClosableStream] = weakref.WeakSet()
_SCOPES_LOCK = threading.Lock()
_ACTIVE = threading.local()


class ClosableStream(Protocol):
    def close(self) -> None: ...


class ScanScope:
    """The partitions one execution of a query started; :meth:`settle` ends them."""

    def __init__(self, label: str = "query") -> None:
        self.label = label
        self._cond = threading.Condition()
        self._live = 0
        self._cancelled: str | None = None

    @property
    def live(self) -> int:
        """Partitions DataFusion holds now."""
        with self._cond:
            return self._live

    def open(self, scanner: object) -> None:
        """Count ``scanner`` as live until DataFusion lets go of it."""
        self.check()
        with self._cond:
            self._live += 1
        with _SCOPES_LOCK:
            _SCOPES.add(self)
        done = weakref.finalize(scanner, self._release)
        done.atexit = False  # released by DataFusion, never assumed released at exit

    def _release(self) -> None:
        with self._cond:
            self._live -= 1
            self._cond.notify_all()

    def check(self) -> None:
        """Raise when the execution has ended; scans call this between chunks."""
        if self._cancelled is not None:
            raise QueryError(f"{self.label} cancelled: {self._cancelled}")

    def cancel(self, reason: str) -> None:
        with self._cond:
            if self._cancelled is None:
                self._cancelled = reason

    def settle(self, reason: str = "its result is no longer read",
               timeout: float = SETTLE_TIMEOUT) -> bool:
        """Cancel, then wait until DataFusion has released every partition.

        Returns False if some were still held after ``timeout`` seconds.
        """
        self.cancel(reason)
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if self._live <= 0:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, _POLL))
            _release_pending()


def _release_pending() -> None:
    """Let DataFusion free the Python objects its threads dropped.

    Rust code that drops a Python object without holding the GIL queues it; PyO3 frees
    the queue the next time any thread calls into the extension. One cheap call does.
    """
    datafusion.lit(0)


def is_engine_thread() -> bool:
    """True on a thread Python did not start (one of DataFusion's workers): code there
    must never wait for DataFusion's tasks, as it may be one of them."""
    return isinstance(threading.current_thread(), threading._DummyThread)


def current_scope() -> ScanScope:
    """The scope of the execution running on this thread (a process-wide one if none)."""
    stack = getattr(_ACTIVE, "stack", None)
    return stack[-1] if stack else _UNSCOPED


@contextlib.contextmanager
def active(scope: ScanScope) -> Iterator[ScanScope]:
    """Make ``scope`` current on this thread while DataFusion plans and runs in it."""
    stack = getattr(_ACTIVE, "stack", None)
    if stack is None:
        stack = _ACTIVE.stack = []
    stack.append(scope)
    try:
        yield scope
    finally:
        stack.pop()


def settle_all(reason: str = "the interpreter is exiting",
               timeout: float = SETTLE_TIMEOUT) -> bool:
    """Settle every scope with live partitions; True when none is left."""
    with _SCOPES_LOCK:
        scopes = list(_SCOPES)
    return all([scope.settle(reason, timeout) for scope in scopes])


def live_partitions() -> int:
    """Partitions DataFusion holds now, over all scopes (for tests and diagnostics)."""
    with _SCOPES_LOCK:
        scopes = list(_SCOPES)
    return sum(scope.live for scope in scopes)


# Partitions planned outside any execution scope (DataFrames used through raw
# DataFusion calls): settled only at exit.
_UNSCOPED = ScanScope("unscoped scan")


def keep_track(stream: ClosableStream) -> None:
    """Close ``stream`` at exit if its owner has not (it holds DataFusion's tasks)."""
    with _SCOPES_LOCK:
        _STREAMS.add(stream)


def _at_exit() -> None:
    with _SCOPES_LOCK:
        streams = list(_STREAMS)
    for stream in streams:
        stream.close()
    _UNSCOPED.cancel("the interpreter is exiting")
    settle_all()


atexit.register(_at_exit)
