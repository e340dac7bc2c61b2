"""Scans DataFusion drives on its own threads end with the query that started them.

DataFusion runs our scans on its tokio worker threads: per partition it calls
``fragment.scanner(...)`` and pulls ``to_batches()`` one batch at a time. When a query
stops early — a ``LIMIT`` satisfied, an error in another partition, the consumer gone —
DataFusion returns at once and drops the other partitions' tasks, but a task in the
middle of a pull keeps running our Python code until that pull returns, and a task just
starting may still be about to call in. If the interpreter starts shutting down
meanwhile, that thread is made to exit as soon as it next takes the GIL, and the forced
unwind through DataFusion's Rust frames aborts the process ("FATAL: exception not
rethrown", exit status 134).

So every execution of a query runs in a :class:`ScanScope`. The units (partitions)
planned while a scope is active (``get_fragments`` runs on the calling thread) belong
to it, and so do the scanners DataFusion opens on them. DataFusion keeps the units in
its physical plan, which every partition task holds, so once all units of an execution
are released no task of it can call into Python again; the session runs each execution
on a fresh copy of its DataFrame so that the copy's cached plan goes with it. When the
execution ends — its result collected, its stream exhausted, closed or dropped, an
error, Ctrl-C — :meth:`ScanScope.settle` cancels the scope (a running partition stops at
its next chunk, one not yet started refuses to start) and waits until DataFusion has
let go of everything. A scope whose plan is handed to the caller (``execution_plan()``)
or that has no owner waits for started scans only. An ``atexit`` hook settles whatever
is still open (streams a caller kept, scans started outside a scope), then waits for
DataFusion's workers to go idle, before the interpreter finalises.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import NoReturn, Protocol, TypeVar

import datafusion

from lance_sql.errors import QueryError
from lance_sql.table import Runtime

# How long ending an execution waits for DataFusion to let go of it. A running
# partition stops at its next chunk (milliseconds); the bound only matters if something
# else keeps a partition's stream alive.
SETTLE_TIMEOUT = 30.0
_POLL = 0.005

U = TypeVar("U")


class ClosableStream(Protocol):
    """What the exit hook closes: a stream holding DataFusion's tasks."""
    def close(self) -> None: ...


class ScanScope:
    """The units one execution of a query planned and the scans it started.

    ``strict``: :meth:`settle` waits for the planned units too (the execution owns its
    plan); otherwise only for the scans DataFusion started. ``runtime``: what its scans
    read with on DataFusion's threads (None: whatever is current there).
    """

    def __init__(self, label: str = "query", *, strict: bool = True,
                 runtime: Runtime | None = None) -> None:
        self.label = label
        self.strict = strict
        self.runtime = runtime
        self._cond = threading.Condition()
        self._units = 0
        self._scans = 0
        # Plain weak references, keyed by their id (units need not be hashable):
        # weakref.finalize stops firing once exit has begun, which is exactly when the
        # exit hook waits for these.
        self._refs: dict[int, weakref.ref] = {}
        self._cancelled: str | None = None
        # Running on the calling (main) thread, where only scans running there see
        # Ctrl-C: the scans must be small and in one partition (see
        # lance_sql.sql.interrupt.run_streaming_interruptibly); worker_wanted: they were
        # not, and the execution starts again on a worker thread.
        self.inline = False
        self.worker_wanted = False
        # The execution collects its whole result (``to_arrow_table``, ``collect``...)
        # from a plan that only streams its scans: their batches go to no operator that
        # works per batch, so they may be handed over as read (see provider.UnitScanner).
        self.collects = False

    def want_worker(self) -> NoReturn:
        """Planning found the scans too large to run on the calling thread: fail this
        attempt (the caller runs it again on a worker thread)."""
        self.worker_wanted = True
        raise QueryError(f"{self.label}: larger than an inline scan; run on a worker thread")

    @property
    def units(self) -> int:
        """Planned units DataFusion still holds."""
        with self._cond:
            return self._units

    @property
    def scans(self) -> int:
        """Started scans DataFusion still holds."""
        with self._cond:
            return self._scans

    def adopt(self, units: list[U]) -> list[U]:
        """Count each of ``units`` as held until DataFusion lets go of it."""
        self.check()
        refs = [weakref.ref(unit, self._unit_gone) for unit in units]
        with self._cond:
            self._units += len(refs)
            self._refs.update((id(ref), ref) for ref in refs)
        _register(self)
        return units

    def open(self, scanner: object) -> None:
        """Count ``scanner`` (a started partition) as running until DataFusion drops it."""
        ref = weakref.ref(scanner, self._scan_gone)
        with self._cond:
            self._scans += 1
            self._refs[id(ref)] = ref
        _register(self)

    def _unit_gone(self, ref: weakref.ref) -> None:
        with self._cond:
            self._refs.pop(id(ref), None)
            self._units -= 1
            self._cond.notify_all()

    def _scan_gone(self, ref: weakref.ref) -> None:
        with self._cond:
            self._refs.pop(id(ref), None)
            self._scans -= 1
            self._cond.notify_all()

    def _held(self) -> int:
        return self._scans + (self._units if self.strict else 0)

    def reading(self, batches: Iterator[U]) -> Iterator[U]:
        """``batches`` of one of its scans, each read on the scope's runtime."""
        return batches if self.runtime is None else self.runtime.each(batches)

    def check(self) -> None:
        """Raise once the execution has ended; scans call this between chunks."""
        if self._cancelled is not None:
            raise QueryError(f"{self.label} cancelled: {self._cancelled}")

    def cancel(self, reason: str) -> None:
        with self._cond:
            if self._cancelled is None:
                self._cancelled = reason

    def settle(self, reason: str = "its result is no longer read",
               timeout: float | None = None) -> bool:
        """Cancel, then wait until DataFusion has let go of the execution.

        Returns False (with a RuntimeWarning) if something was still held after
        ``timeout`` seconds (default :data:`SETTLE_TIMEOUT`).
        """
        self.cancel(reason)
        timeout = SETTLE_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        released = False
        while True:
            with self._cond:
                held = self._held()
                if held <= 0:
                    return True
            if not released:
                # What DataFusion dropped as the execution ended is usually only queued
                # (see _release_pending): free it before waiting at all.
                _release_pending()
                released = True
                continue
            with self._cond:
                held = self._held()
                if held <= 0:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    warnings.warn(
                        f"{self.label}: {held} scan unit(s) still held by DataFusion "
                        f"{timeout:.0f} s after the query ended", RuntimeWarning,
                        stacklevel=2)
                    return False
                self._cond.wait(min(remaining, _POLL))
            _release_pending()


def _release_pending() -> None:
    """Let DataFusion free the Python objects its threads dropped.

    Rust code that drops a Python object without holding the GIL queues it; PyO3 frees
    the queue the next time a thread calls into the extension. One cheap call does.
    """
    datafusion.lit(0)


_SCOPES: weakref.WeakSet[ScanScope] = weakref.WeakSet()
_STREAMS: weakref.WeakSet[ClosableStream] = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
_ACTIVE = threading.local()
# Units planned outside any execution (a DataFrame used through raw DataFusion calls,
# which may keep its plan): only their started scans are waited for, at exit.
_UNSCOPED = ScanScope("unscoped scan", strict=False)


def _register(scope: ScanScope) -> None:
    with _REGISTRY_LOCK:
        _SCOPES.add(scope)


def is_engine_thread() -> bool:
    """True on a thread Python did not start (one of DataFusion's workers): code there
    must never wait for DataFusion's tasks, as it may be one of them."""
    # threading's only mark of a thread it did not start
    return isinstance(threading.current_thread(), threading._DummyThread)  # noqa: SLF001


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


def keep_track(stream: ClosableStream) -> None:
    """Close ``stream`` at exit if its owner has not (it holds DataFusion's tasks)."""
    with _REGISTRY_LOCK:
        _STREAMS.add(stream)


def running_scans() -> int:
    """Started scans DataFusion holds now, over all scopes (tests and diagnostics)."""
    with _REGISTRY_LOCK:
        scopes = list(_SCOPES)
    return sum(scope.scans for scope in scopes)


def held_units() -> int:
    """Units of executions that own their plan still held by DataFusion."""
    with _REGISTRY_LOCK:
        scopes = list(_SCOPES)
    return sum(scope.units for scope in scopes if scope.strict)


def settle_all(reason: str = "the interpreter is exiting",
               timeout: float | None = None) -> bool:
    """Settle every scope that holds something; True when nothing is left."""
    with _REGISTRY_LOCK:
        scopes = list(_SCOPES)
    return all([scope.settle(reason, timeout) for scope in scopes])


# How long the exit hook waits for DataFusion's worker threads to go idle.
ENGINE_IDLE_TIMEOUT = 0.25
_ENGINE_THREAD = "tokio-rt-worker"


def thread_states() -> list[tuple[str, str]] | None:
    """(name, state letter) of each thread of this process now (Linux: read from /proc;
    None where that cannot be told)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as f:
                found.append(thread_state(f.read()))
        except OSError:  # (the thread ended meanwhile)
            continue
    return found


def _engine_threads_running() -> bool | None:
    """Whether any of DataFusion's worker threads is running now (None: not known)."""
    states = thread_states()
    return None if states is None else (_ENGINE_THREAD, "R") in states


def thread_state(stat: bytes) -> tuple[str, str]:
    """(name, state letter) of a thread from its /proc ``stat`` line, ``pid (name) S
    ...``: the name may hold spaces and parentheses, the state follows the last ")"."""
    name, _, rest = stat.partition(b" (")[2].rpartition(b")")
    return name.decode(errors="replace"), rest[1:2].decode(errors="replace")


def wait_for_idle_engine(timeout: float = ENGINE_IDLE_TIMEOUT) -> bool:
    """Wait (the GIL released) until no DataFusion worker has run for two looks in a
    row, at most ``timeout`` seconds; True when they went idle.

    Settling waits for the Python objects DataFusion holds, but a worker that has let
    go of those may still be freeing what it dropped with them: Arrow batches whose
    memory Python owns, which takes the GIL. Were the interpreter finalising by then,
    that thread would be made to exit mid-way and abort the process.
    """
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 2:
        running = _engine_threads_running()
        if running is None:
            return False
        quiet = 0 if running else quiet + 1
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _at_exit() -> None:
    with _REGISTRY_LOCK:
        streams = list(_STREAMS)
    for stream in streams:
        stream.close()
    # An error kept in a reference cycle (an interrupted query's, with its traceback)
    # can pin a plan's units until the collector runs: let it run before waiting.
    gc.collect()
    settle_all()
    wait_for_idle_engine()


atexit.register(_at_exit)
