"""What plan nodes did while they ran, for ``EXPLAIN ANALYZE``.

Each node keeps a :class:`NodeMetrics`: the rows and batches it returned, the time of its
own work (the time spent producing its batches, less the time its children's streams
took on the same thread) and counters of its own (keys ruled out by a bloom filter, rows
dropped as stale...). Nodes run on whichever thread drives them — DataFusion's workers,
the scan's reader thread — so every update takes the metrics' lock; updates are per
batch or per call, never per row, so the normal path pays next to nothing.

:func:`metered` wraps a node's batch stream; :func:`own_work` times work a node does
outside its stream (on another thread); :func:`not_own_work` leaves time out (a node
waiting for another thread's rows is not working).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any, TypeVar

import pyarrow as pa

__all__ = ["NodeMetrics", "format_duration", "measured", "metered", "not_own_work",
           "own_work"]

# per thread: the nested time of the stream being timed there (a one-item list), or None
_local = threading.local()

F = TypeVar("F", bound=Callable[..., Iterator[pa.RecordBatch]])


def format_duration(ns: int) -> str:
    """``ns`` nanoseconds as DataFusion prints durations (``12.3µs``, ``4.56ms``, ``1.2s``)."""
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.3f}s"


class NodeMetrics:
    """One node's metrics (see the module docstring); ``notes`` are texts (the source
    that answered a lookup)."""

    __slots__ = ("_lock", "counters", "deferred", "elapsed_ns", "notes", "output_batches",
                 "output_rows", "runs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.output_rows = 0
        self.output_batches = 0
        self.elapsed_ns = 0
        self.runs = 0  # times the node's stream was started
        self.counters: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        # counters worked out only when printed (too dear for every run)
        self.deferred: dict[str, Callable[[], int]] = {}

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def count(self, **counts: int) -> None:
        """Add to several counters at once."""
        with self._lock:
            for name, n in counts.items():
                self.counters[name] = self.counters.get(name, 0) + n

    def defer(self, name: str, counter: Callable[[], int]) -> None:
        """Counter ``name`` is ``counter()``, called only when the metrics are printed."""
        with self._lock:
            self.deferred[name] = counter

    def note(self, name: str, text: str) -> None:
        with self._lock:
            self.notes[name] = text

    def output(self, rows: int, batches: int = 1) -> None:
        """Rows returned (in ``batches`` batches)."""
        with self._lock:
            self.output_rows += rows
            self.output_batches += batches

    def started(self) -> None:
        with self._lock:
            self.runs += 1

    def record(self, rows: int | None, own_ns: int) -> None:
        """A batch of ``rows`` produced (None: none) and ``own_ns`` of own work."""
        with self._lock:
            self.elapsed_ns += own_ns
            if rows is not None:
                self.output_rows += rows
                self.output_batches += 1

    def get(self, name: str) -> int:
        """Counter ``name`` (0 if never counted)."""
        with self._lock:
            deferred = self.deferred.get(name)
            if deferred is None:
                return self.counters.get(name, 0)
        return deferred()

    def text(self) -> str:
        """``metrics=[output_rows=.., output_batches=.., elapsed_compute=.., ...]``."""
        with self._lock:
            parts = [f"output_rows={self.output_rows}",
                     f"output_batches={self.output_batches}",
                     f"elapsed_compute={format_duration(self.elapsed_ns)}"]
            parts += [f"{k}={v}" for k, v in self.counters.items()]
            deferred = list(self.deferred.items())
            notes = [f"{k}={v}" for k, v in self.notes.items()]
        parts += [f"{k}={counter()}" for k, counter in deferred]
        parts += notes
        return "metrics=[" + ", ".join(parts) + "]"


_Frame = tuple[list[int] | None, list[int], int]


def _open_frame() -> _Frame:
    """Start timing on this thread: (the enclosing frame's nested time, this frame's, the
    start)."""
    outer = getattr(_local, "nested", None)
    nested = [0]
    _local.nested = nested
    return outer, nested, perf_counter_ns()


def _close_frame(frame: _Frame) -> int:
    """Stop timing ``frame``: its own time (its span less its nested frames'); its span
    counts as nested time of the enclosing frame."""
    outer, nested, start = frame
    spent = perf_counter_ns() - start
    _local.nested = outer
    if outer is not None:
        outer[0] += spent
    return spent - nested[0]


def metered(metrics: NodeMetrics, stream: Iterator[pa.RecordBatch]
            ) -> Iterator[pa.RecordBatch]:
    """``stream``'s batches, counted into ``metrics`` with the time spent producing each
    (less the time nested metered streams took on this thread). Closing it closes
    ``stream``."""
    metrics.started()
    try:
        while True:
            frame = _open_frame()
            batch = None
            try:
                batch = next(stream)
            except StopIteration:
                return
            finally:
                metrics.record(None if batch is None else batch.num_rows,
                               _close_frame(frame))
            yield batch
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def measured(method: F) -> F:
    """A node's ``execute`` whose stream is :func:`metered` into the node's metrics."""

    @functools.wraps(method)
    def execute(self: Any, *args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        return metered(self.metrics, method(self, *args, **kwargs))

    return execute  # type: ignore[return-value]


@contextlib.contextmanager
def own_work(metrics: NodeMetrics) -> Iterator[None]:
    """Time the block as ``metrics``' own work (less nested metered streams), outside
    its stream: e.g. on a thread the node hands work to."""
    frame = _open_frame()
    try:
        yield
    finally:
        metrics.record(None, _close_frame(frame))


@contextlib.contextmanager
def not_own_work() -> Iterator[None]:
    """Leave the block's time out of the enclosing stream's own work (waiting)."""
    frame = _open_frame()
    try:
        yield
    finally:
        _close_frame(frame)  # counted as nested: the enclosing stream's time less it
