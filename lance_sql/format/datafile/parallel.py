"""Spreading a decode's independent parts over a few short-lived threads.

Only for work that runs in numpy or Arrow calls releasing the GIL (codecs, takes, casts,
large copies): the threads then run side by side. Only a read that has the cores to itself
spreads: a decode running on a scan's worker thread (the scan already reads fragments side
by side), inside :func:`no_helpers` (a SQL scan unit whose query runs other units as
DataFusion partitions beside it), or while another decode holds helpers, runs on its
calling thread alone; measured, helpers there only added hand-offs
(a 10-fragment scan: ~300 -> ~440 ms of CPU). Threads are started for one call and
joined before it returns (none outlives the read that started it; work begun by
:class:`Begun` is joined by the caller's ``finally``); the calling thread works too.
Results come back in the order of the items; the first error is raised once every
thread has stopped.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 4
THREAD_NAME = "lance_sql-decode"
WORKER_PREFIX = "lance_sql-"  # the threads of lance_sql's worker pools (and of this module)
_spreading = 0  # decode calls now running with helpers
_spreading_lock = threading.Lock()
_local = threading.local()  # .alone: this thread's decodes take no helpers (no_helpers)


def threads() -> int:
    """Threads a decode may use: the CPUs this process may run on, at most MAX_THREADS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cpus))


def idle_cpus() -> int:
    """CPUs of the machine with nothing to run at this moment besides the calling
    thread (its CPUs less the tasks the kernel has runnable right now, the fourth field
    of ``/proc/loadavg``, which counts the caller), at most the helpers :func:`threads`
    allows; that many where it is not known."""
    helpers = threads() - 1
    try:
        with open(_LOADAVG, "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return helpers
    return max(0, min(helpers, _machine_cpus() - runnable))


def _machine_cpus() -> int:
    return os.cpu_count() or 1


_LOADAVG = "/proc/loadavg"


@contextmanager
def no_helpers(alone: bool = True) -> Iterator[None]:
    """Within the block (when ``alone``), decodes on this thread run on it alone: for a
    thread already reading side by side with others of the same query (DataFusion's
    partitions), where helpers only add hand-offs of the interpreter lock (measured on a
    10-fragment ``SELECT *``: ~490 -> ~410 ms of CPU)."""
    previous = getattr(_local, "alone", False)
    _local.alone = alone or previous
    try:
        yield
    finally:
        _local.alone = previous


@contextmanager
def threads_for(items: int, idle_only: bool = False) -> Iterator[int]:
    """How many threads a decode of ``items`` parts may use (1 unless it has the cores to
    itself, see the module docstring; with ``idle_only``, also no more than the CPUs idle
    now, see :func:`idle_cpus`), held for the duration of the ``with``: for a decode that
    cuts its work by the threads it gets, then runs it by :func:`map_threads`."""
    global _spreading
    count = min(threads(), items)
    if count > 1 and (threading.current_thread().name.startswith(WORKER_PREFIX)
                      or getattr(_local, "alone", False)):
        count = 1
    if count > 1 and idle_only:
        count = min(count, 1 + idle_cpus())
    if count > 1:
        with _spreading_lock:
            if _spreading:
                count = 1
            else:
                _spreading += 1
    try:
        yield count
    finally:
        if count > 1:
            with _spreading_lock:
                _spreading -= 1


def map_parts(fn: Callable[[T], R], items: Sequence[T], *, idle_only: bool = False
              ) -> list[R]:
    """``[fn(item) for item in items]``, items taken in turn by up to :func:`threads`
    threads (the caller's among them) when the decode has the cores to itself; with
    ``idle_only``, helpers only on CPUs idle at the call (for work such as a point
    lookup's, which a CPU shared with another process makes slower, not faster)."""
    with threads_for(len(items), idle_only) as count:
        return map_threads(fn, items, count)


def map_threads(fn: Callable[[T], R], items: Sequence[T], count: int) -> list[R]:
    """``[fn(item) for item in items]`` on ``count`` threads (the caller's among them;
    ``count`` as :func:`threads_for` gave it), items taken in turn."""
    if count <= 1:
        return [fn(item) for item in items]
    queue = _Queue(fn, items, count - 1)
    try:
        queue.work()
    finally:
        queue.join()
    return queue.results()


class _Queue(Generic[T, R]):
    """``fn`` over ``items``, taken in turn by the threads calling :meth:`work`:
    ``helpers`` threads started at once, and whichever others call it. The first error
    stops the handing out; :meth:`results` raises it (once :meth:`join` has stopped
    the helpers)."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], helpers: int) -> None:
        self._fn: Callable[[T], R] = fn
        self._items: Sequence[T] = items
        self._results: list[R | None] = [None] * len(items)
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._position = iter(range(len(items)))
        self._stopped = False
        self._helpers: list[threading.Thread] = []
        for k in range(helpers):
            t = threading.Thread(target=self.work, name=f"{THREAD_NAME}-{k}", daemon=True)
            try:
                t.start()
            except BaseException:  # (no thread to be had) the ones started are joined
                self.join(stop=True)
                raise
            self._helpers.append(t)

    def work(self) -> None:
        while True:
            with self._lock:
                if self._errors or self._stopped:
                    return
                i = next(self._position, None)
            if i is None:
                return
            try:
                self._results[i] = self._fn(self._items[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised by results()
                with self._lock:
                    self._errors.append(exc)
                return

    def join(self, stop: bool = False) -> None:
        """Waits for the helpers (with ``stop``, after their items under way only)."""
        if stop:
            with self._lock:
                self._stopped = True
        for t in self._helpers:
            t.join()

    def results(self) -> list[R]:
        if self._errors:
            raise self._errors[0]
        return self._results  # type: ignore[return-value]


class Begun(Generic[R]):
    """Work begun on helper threads while the caller does something else (a lookup's
    strings inflating while its numbers are taken): :func:`threads_for` ``items``
    decides the threads (:attr:`count`, the caller's among them) and is held until
    :meth:`close`; :meth:`start` hands ``fn`` over the items to ``count - 1`` helpers
    at once; :meth:`finish` has the caller take the items left, joins the helpers and
    gives the results in item order. Callers :meth:`close` in a ``finally`` (a second
    close does nothing): it stops the handing out and joins, so no helper outlives
    their call, finished or not."""

    def __init__(self, items: int, *, idle_only: bool = False) -> None:
        self._held = threads_for(items, idle_only)
        self.count = self._held.__enter__()
        self._queue: _Queue[Any, R] | None = None
        self._open = True

    def start(self, fn: Callable[[T], R], items: Sequence[T]) -> None:
        """``fn`` over ``items`` begun on the helpers (none when :attr:`count` is 1:
        everything then runs in :meth:`finish`)."""
        self._queue = _Queue(fn, items, min(self.count, len(items)) - 1)

    def finish(self) -> list[R]:
        """The results of :meth:`start`'s items, in order (the first error raised)."""
        queue = self._queue
        assert queue is not None, "finish() before start()"
        try:
            queue.work()
        finally:
            self.close()
        return queue.results()

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            if self._queue is not None:
                self._queue.join(stop=True)
        finally:
            self._held.__exit__(None, None, None)


def produce_then_place(produce: Callable[[T], tuple[R, int]],
                       place: Callable[[T, R, int], None], items: Sequence[T]) -> int:
    """Output laid out in item order, made side by side: ``produce(item)`` gives a result
    and its size (run by up to :func:`threads` threads at once), then
    ``place(item, result, at)`` runs with ``at`` the sizes of the earlier items added up,
    as soon as those are all known. Returns the total size.

    A thread holding an item waits only for items handed out before it, whose threads
    never wait for it, so the waits end; a result is placed while still in cache.
    """
    with threads_for(len(items)) as count:
        return _produce_then_place(produce, place, items, count)


def _produce_then_place(produce: Callable[[T], tuple[R, int]],
                        place: Callable[[T, R, int], None], items: Sequence[T],
                        count: int) -> int:
    if count <= 1:
        at = 0
        for item in items:
            result, size = produce(item)
            place(item, result, at)
            at += size
        return at
    offsets: list[int] = []  # offsets[i] once the sizes of items 0..i-1 are known
    sizes: dict[int, int] = {}
    total = [0]
    failed = threading.Event()
    ready = threading.Condition()

    def one(i: int) -> None:
        result, size = produce(items[i])
        with ready:
            sizes[i] = size
            while len(offsets) in sizes:  # extend the known prefix
                j = len(offsets)
                offsets.append(total[0])
                total[0] += sizes.pop(j)
            ready.notify_all()
            while len(offsets) <= i and not failed.is_set():
                ready.wait()
            if failed.is_set():
                return
            at = offsets[i]
        place(items[i], result, at)

    def guarded(i: int) -> None:
        try:
            one(i)
        except BaseException:
            failed.set()
            with ready:
                ready.notify_all()
            raise

    map_threads(guarded, range(len(items)), count)
    return total[0]
