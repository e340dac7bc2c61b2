"""One budget of open files for every cache that keeps files open, in every runtime.

Open data files (``data_files``) and open BTREE indices (``index_files``) each hold a
file descriptor, and for local files of 64 KiB or more a memory map of the whole file.
:data:`OPEN_FILES` counts them together, across all runtimes of the process, in one
least-recently-used order: when a cache keeps one more and the count passes
:func:`open_files_bound`, the least recently used open file of any such cache goes.

It also lets go of files that no longer exist, so their disk space comes back:

- the stores report what they delete (:mod:`lance_sql.io.descriptors`); the entries
  whose file is that path, or under that directory, are dropped at once;
- a cached file found unlinked (``st_nlink == 0``, e.g. deleted by another process) is
  dropped when a lookup hits it, and every so often all are checked, so dead files do
  not pile up among the live ones;
- when opening a file fails with ``EMFILE``/``ENFILE``, a quarter of the open files (the
  least recently used) go, and the open is tried again.

Dropping an entry closes nothing: the descriptor closes once nothing refers to the
reader (a scan in progress keeps reading through it), and arrays handed out keep the
mapping alive for as long as they live.

Locking: a cache tells the ledger about its entries while holding its own lock (so the
two agree); the ledger's lock is taken inside a cache's, never the other way round.
What the ledger decides to drop from a cache is returned to the caller, which drops it
once it holds no lock.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from lance_sql.io.descriptors import on_removed, on_shortage

# Checked for unlinked files after this many new entries at least (more when many are
# kept: an eighth of them), so the check costs a few ``fstat`` calls per file opened.
SWEEP_EVERY = 64


def open_files_bound(soft_limit: int | None = None) -> int:
    """How many files the caches keep open together (data files and index files, in all
    runtimes): a quarter of the process's descriptor limit (``RLIMIT_NOFILE``), at least
    512 and at most 8192, but never more than half the limit, which is left to everything
    else (the application's own files and sockets, files being written). A scan over more
    files than are kept opens every one of them again on every scan (files are read in
    order, and the least recently used goes first): 530 one-row fragments scanned 3x
    slower than 500."""
    if soft_limit is None:
        try:
            import resource
            soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, OSError, ValueError):  # (no such limit here)
            soft_limit = 0
    if soft_limit < 0:  # RLIM_INFINITY
        soft_limit = 1 << 30
    if soft_limit == 0:  # unknown: as under the usual limit of 1024
        soft_limit = 1024
    return max(1, min(8192, max(soft_limit // 4, min(512, soft_limit // 2))))


class FileCache(Protocol):
    """A cache whose entries the ledger may drop (see :class:`LruCache`)."""

    def discard(self, key: Hashable) -> None: ...


@dataclass
class _Entry:
    cache: weakref.ref[Any]
    key: Hashable
    path: str
    source: Any  # weak reference to the source, or None where it cannot be checked


Victims = list[tuple[weakref.ref[Any], Hashable]]


class OpenFiles:
    """The ledger of open files kept by caches (see the module docstring)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._order: OrderedDict[tuple[int, Hashable], _Entry] = OrderedDict()
        self._by_path: dict[str, set[tuple[int, Hashable]]] = {}
        self._serials = itertools.count()
        self._since_sweep = 0
        self._gone: list[int] = []  # caches collected, their entries yet to be forgotten

    def __len__(self) -> int:
        return len(self._order)

    def serial(self, cache: FileCache) -> int:
        """A number naming ``cache`` here; its entries are forgotten when it goes."""
        serial = next(self._serials)
        # (a finalizer may run inside any code, this ledger's locked parts too: it only
        # notes the serial, which the next change to the ledger acts on)
        weakref.finalize(cache, self._gone.append, serial)
        return serial

    # -- called by a cache, its lock held ----------------------------------------------------
    def kept(self, cache: FileCache, serial: int, key: Hashable, source: Any) -> Victims:
        """``cache`` keeps an open ``source`` under ``key``: what must go to stay within
        the bound (the least recently used first), for the caller to drop."""
        path = getattr(source, "path", None)
        try:
            ref = weakref.ref(source) if source is not None else None
        except TypeError:
            ref = None
        entry = _Entry(weakref.ref(cache), key, path if isinstance(path, str) else "", ref)
        with self._lock:
            if self._gone:
                self._forget_caches()
            self._remove((serial, key))
            self._order[(serial, key)] = entry
            if entry.path:
                self._by_path.setdefault(entry.path, set()).add((serial, key))
            self._since_sweep += 1
            return self._pop_oldest(len(self._order) - self.bound)

    def used(self, serial: int, key: Hashable) -> None:
        """A lookup hit the entry: it is now the most recently used."""
        with self._lock:
            if (serial, key) in self._order:
                self._order.move_to_end((serial, key))

    def dropped(self, serial: int, key: Hashable) -> None:
        """The cache no longer keeps ``key``."""
        with self._lock:
            self._remove((serial, key))

    # -- called with no cache lock held ------------------------------------------------------
    def reclaim(self, count: int | None = None) -> int:
        """Drop the ``count`` least recently used open files (a quarter of them, at least
        one, by default); how many were dropped."""
        with self._lock:
            if count is None:
                count = max(1, len(self._order) // 4)
            victims = self._pop_oldest(count)
        return drop(victims)

    def forget(self, path: str, tree: bool = False) -> int:
        """Drop the entries of the file at ``path`` (with ``tree``, of every file below the
        directory ``path``); how many were dropped."""
        with self._lock:
            if tree:
                inside = path.rstrip("/") + "/"
                found = [k for p, ks in self._by_path.items() if p.startswith(inside)
                         for k in ks]
            else:
                found = list(self._by_path.get(path, ()))
            victims = [self._take(k) for k in found]
        return drop(victims)

    def sweep_due(self) -> bool:
        """Whether enough entries were added since the last sweep to check them all."""
        return self._since_sweep >= max(SWEEP_EVERY, len(self._order) // 8)

    def sweep(self) -> int:
        """Drop every entry whose file is unlinked; how many were dropped."""
        with self._lock:
            self._since_sweep = 0
            entries = list(self._order.items())
        dead = [k for k, e in entries if e.source is not None and unlinked(e.source())]
        with self._lock:
            victims = [self._take(k) for k in dead if k in self._order]
        return drop(victims)

    # -- lock held ---------------------------------------------------------------------------
    def _pop_oldest(self, count: int) -> Victims:
        victims: Victims = []
        while count > 0 and self._order:
            k = next(iter(self._order))
            victims.append(self._take(k))
            count -= 1
        return victims

    def _take(self, k: tuple[int, Hashable]) -> tuple[weakref.ref[Any], Hashable]:
        entry = self._order[k]
        self._remove(k)
        return entry.cache, entry.key

    def _remove(self, k: tuple[int, Hashable]) -> None:
        entry = self._order.pop(k, None)
        if entry is not None and entry.path:
            keys = self._by_path.get(entry.path)
            if keys is not None:
                keys.discard(k)
                if not keys:
                    del self._by_path[entry.path]

    def _forget_caches(self) -> None:
        gone = set()
        while self._gone:
            gone.add(self._gone.pop())
        for k in [k for k in self._order if k[0] in gone]:
            self._remove(k)


def unlinked(source: Any) -> bool:
    """Whether ``source`` (an open file's) is known to have no name left: only sources
    that can tell (local files) ever are; a source collected already is gone too."""
    if source is None:
        return True
    check = getattr(source, "unlinked", None)
    return bool(check()) if check is not None else False


def drop(victims: Victims) -> int:
    """Drop each (cache, key) from its cache (caches collected meanwhile are skipped);
    how many there were. Call with no cache lock held."""
    for cache_ref, key in victims:
        cache = cache_ref()
        if cache is not None:
            cache.discard(key)
    return len(victims)


OPEN_FILES = OpenFiles(open_files_bound())
on_removed(OPEN_FILES.forget)
on_shortage(OPEN_FILES.reclaim)
