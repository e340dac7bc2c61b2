"""Hooks between the stores, which open and delete files, and the caches above them
that keep files open.

The io layer cannot know those caches (they live in higher layers), so they register
here instead:

- a *removal listener* hears of every path a store deleted (a file, or a whole tree),
  so that it can let go of the open descriptor and memory map of a file that is gone:
  an unlinked file's disk space comes back only once nothing holds it open;
- a *reclaimer* is asked to close cached files when opening a file fails for want of
  descriptors (``EMFILE``/``ENFILE``); :func:`opening` then tries once more.

Listeners and reclaimers run on the thread that deleted or opened, and must be cheap and
thread safe. Registering is for lance_sql's own layers; it changes nothing outside them.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_removal_listeners: list[Callable[[str, bool], object]] = []
_reclaimers: list[Callable[[], int]] = []
SHORTAGE = (errno.EMFILE, errno.ENFILE)


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


def on_shortage(reclaim: Callable[[], int]) -> None:
    """Call ``reclaim()`` when a file cannot be opened for want of descriptors; it
    returns how many cached open files it let go of."""
    with _lock:
        if reclaim not in _reclaimers:
            _reclaimers.append(reclaim)


def reclaim() -> int:
    """Ask every reclaimer to let go of cached open files; how many they let go of."""
    return sum(release() for release in tuple(_reclaimers))


def opening(opener: Callable[[], T]) -> T:
    """``opener()``; when it fails with ``EMFILE`` or ``ENFILE`` (too many open files in
    the process or the system), the caches let go of their least recently used files and
    it is tried once more (a second failure is raised as it comes)."""
    try:
        return opener()
    except OSError as exc:
        if exc.errno not in SHORTAGE or not reclaim():
            raise
    return opener()
