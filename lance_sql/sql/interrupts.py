"""Ctrl-C while DataFusion plans a query, held until planning is done.

Planning runs on the calling thread, inside Rust, which calls back into our catalog and
table providers. A KeyboardInterrupt raised in one of those callbacks comes out of Rust
as a panic (``PanicException``), as a table "not found", or is lost. So while a query is
planned (milliseconds), SIGINT only sets a flag; once planning is over, the handler that
was installed runs (Python's default raises KeyboardInterrupt in the caller, where it
belongs). Execution is not covered: it runs on DataFusion's threads and stops on Ctrl-C
as it did.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["deferred_interrupts"]

_state = threading.local()


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT for the body (on the main thread only: signals are delivered there;
    nested uses hold it once)."""
    if threading.current_thread() is not threading.main_thread() or getattr(
            _state, "active", False):
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # an interpreter without signal support here
        yield
        return
    if not callable(previous):  # ignored or default-action handlers: nothing to hold
        yield
        return
    caught: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append((signum, frame))

    signal.signal(signal.SIGINT, hold)
    _state.active = True
    try:
        yield
    finally:
        _state.active = False
        signal.signal(signal.SIGINT, previous)
        if caught:
            previous(*caught[0])
