"""Hooks between the stores, which open and delete files, and the caches above them
that keep files open.

The io layer cannot know those caches (they live in higher layers), so they register
here instead: a *removal listener* hears of every path a store deleted (a file, or a
whole tree), so that it can let go of the open descriptor and memory map of a file that
is gone: an unlinked file's disk space comes back only once nothing holds it open.

Listeners run on the thread that deleted, and must be cheap and thread safe. Registering
is for lance_sql's own layers; it changes nothing outside them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_removal_listeners: list[Callable[[str, bool], object]] = []


def on_removed(listener: Callable[[str, bool], object]) -> None:
    """Call ``listener(path, tree)`` after a store deletes ``path`` (with ``tree``, the
    directory and everything below it); paths are spelt as the store spells its files."""
    with _lock:
        if listener not in _removal_listeners:
            _removal_listeners.append(listener)


def removed(path: str, *, tree: bool = False) -> None:
    """Tell the listeners that ``path`` (a file, or with ``tree`` a directory and all
    below it) no longer exists."""
    for listener in tuple(_removal_listeners):
        listener(path, tree)
