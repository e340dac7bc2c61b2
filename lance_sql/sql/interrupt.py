"""Ctrl-C for queries: DataFusion runs on a worker thread, the main thread waits.

DataFusion checks for signals only between polls of its future, and a join working on
a large batch can hold the calling thread for minutes, so a KeyboardInterrupt never
arrives. Running each blocking call on a worker thread leaves the main thread waiting
in an interruptible wait instead: on Ctrl-C it sets the query's cancel event, which
makes every Lance scan of the query fail at its next batch (so DataFusion stops), waits
a moment for the worker to wind down, and re-raises the KeyboardInterrupt.

Calls made outside the main thread run directly: only the main thread gets signals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

# How long an interrupted call waits for its worker to stop before giving up on it.
GRACE_S = 1.0
_POLL_S = 0.05


class Cancel(Protocol):
    """What Ctrl-C sets (a ``threading.Event``, or a query's scope)."""

    def set(self) -> None: ...


def run_interruptibly(fn: Callable[[], T], cancel: Cancel | None,
                      grace_s: float = GRACE_S) -> T:
    """``fn()``, on a worker thread when called from the main thread (see the module)."""
    if threading.current_thread() is not threading.main_thread():
        return fn()
    done = threading.Event()
    abandoned = threading.Event()
    result: list[T] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            error.append(exc)
        finally:
            done.set()
            if abandoned.is_set():  # nobody will read it: keep nothing of the query alive
                result.clear()
                error.clear()

    worker = threading.Thread(target=work, name="lance-sql-query", daemon=True)
    worker.start()
    try:
        while not done.wait(_POLL_S):
            pass
    except BaseException:
        abandoned.set()
        if cancel is not None:
            cancel.set()
        done.wait(grace_s)
        if done.is_set():
            result.clear()
            error.clear()
        raise
    worker.join()
    if error:
        raise error[0]
    return result[0]
