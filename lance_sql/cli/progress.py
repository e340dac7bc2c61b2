"""Progress feedback on stderr while a query streams its result.

Drawn only when stderr is a terminal, or when forced (``--progress``): a spinner line
in a log file is noise. On a terminal one line is redrawn in place and erased when the
query finishes; when forced onto something that is not a terminal, plain lines are
written at most once a second, then one summary line. A background thread keeps the
elapsed time moving while DataFusion aggregates and no batch has arrived yet. The
first draw waits ``delay`` seconds so that quick queries print nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TextIO

_SPINNER = "|/-\\"


class Progress:
    """Counts rows and batches; draws them (with elapsed time) from a ticker thread."""

    def __init__(self, stream: TextIO, *, enabled: bool, delay: float = 0.5,
                 interval: float = 0.1, label: str = "rows") -> None:
        self.stream = stream
        self.enabled = enabled
        self.terminal = _isatty(stream)
        self.delay = delay
        self.interval = interval if self.terminal else max(interval, 1.0)
        self.label = label
        self.rows = 0
        self.batches = 0
        self._start = 0.0
        self._drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._start = time.perf_counter()
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="lance-sql-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.enabled:
            return
        with self._lock:
            if self.terminal:
                self._erase()
            elif exc_type is None:
                self.stream.write(f"lance-sql: {self._status()}\n")
                self.stream.flush()

    def add(self, rows: int) -> None:
        """One more batch of ``rows`` rows has arrived."""
        with self._lock:
            self.rows += rows
            self.batches += 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Erase the progress line while the caller writes results to the same terminal."""
        with self._lock:
            self._erase()
            yield

    def _status(self) -> str:
        elapsed = time.perf_counter() - self._start
        batches = "batch" if self.batches == 1 else "batches"
        return f"{self.rows:,} {self.label}, {self.batches:,} {batches}, {elapsed:.1f} s"

    def _tick(self) -> None:
        if self._stop.wait(self.delay):
            return
        frame = 0
        while True:
            with self._lock:
                if self.terminal:
                    spin = _SPINNER[frame % len(_SPINNER)]
                    self.stream.write(f"\r\x1b[K{spin} {self._status()}")
                    self._drawn = True
                else:
                    self.stream.write(f"lance-sql: ... {self._status()}\n")
                self.stream.flush()
            frame += 1
            if self._stop.wait(self.interval):
                return

    def _erase(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
