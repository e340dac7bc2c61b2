"""Diagnostic counters on read paths stay exact when worker threads bump them at once.

The counters are plain ``x += 1`` on an int (a list slot or an attribute): CPython with
its GIL checks for a thread switch only at function entry, backward jumps and calls,
none of which falls between the load and the store of such an increment, so no count is
lost. These tests keep it so: they drive the real increment sites from many threads,
switching as often as the interpreter allows, and want the exact total (an increment
that calls Python code between its load and its store loses most counts here)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lance_sql.format.datafile import point
from lance_sql.format.datafile.source import BytesSource

THREADS = 8
EACH = 20_000


def hammer(step: Callable[[], object], each: int = EACH) -> None:
    """``step`` called ``each`` times on each of THREADS threads started together."""
    start = threading.Barrier(THREADS)

    def run() -> None:
        start.wait()
        for _ in range(each):
            step()

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_bytes_source_counts_every_read_from_many_threads(frequent_switches) -> None:
    source = BytesSource(bytes(range(256)) * 16)
    hammer(lambda: source.read_at(7, 3))
    assert source.reads == THREADS * EACH


def test_tiled_calls_counts_every_tiled_buffer_from_many_threads(frequent_switches) -> None:
    whole = pa.py_buffer(bytes(64))
    pieces = [whole.slice(0, 16), whole.slice(16, 48)]  # back to back: one tiled buffer
    sizes = np.array([16, 48], np.int64)
    assert point._tiled(pieces, sizes) is not None  # the increment site
    before = point.TILED_CALLS[0]
    hammer(lambda: point._tiled(pieces, sizes), each=5_000)
    assert point.TILED_CALLS[0] == before + THREADS * 5_000
