"""Object-store interface: the only way lance_sql touches bytes at rest.

A store is rooted at one table (or any directory) and addressed by relative,
``/``-separated keys such as ``_versions/18446744073709551614.manifest``. Keys are
checked before use: an absolute key or one with a ``..`` segment raises
:class:`PathEscapeError`, so a path read from a manifest can never leave the root.

The commit primitive is :meth:`ObjectStore.put_if_absent`: of two writers racing
to create the same key, exactly one succeeds. Backends: :class:`LocalStore`
(local filesystem; see ``local.py``) and :class:`MemoryStore` (tests; see
``memory.py``).
"""

from __future__ import annotations

import posixpath
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, Protocol

from lance_sql.errors import NotFoundError, PathEscapeError


class RandomAccessSource(Protocol):
    """What a file reader needs: a name for errors, a size and positional reads."""

    path: str
    size: int

    def read_at(self, offset: int, length: int) -> bytes | memoryview: ...


def check_key(key: str) -> str:
    """Normalise ``key`` and refuse anything that could escape the store root."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise PathEscapeError(f"invalid object key {key!r}")
    parts = key.split("/")
    if any(part in ("..", ".") for part in parts):
        raise PathEscapeError(f"object key {key!r} escapes the table root")
    normalised = posixpath.normpath(key)
    if normalised.startswith(".."):
        raise PathEscapeError(f"object key {key!r} escapes the table root")
    return normalised


# Our temporaries: a store's staging file ``.{name}.{32 hex}.tmp`` and a rename
# commit's ``.tmp-{name}-{32 hex}``. Only these are ever swept as temporaries.
_TEMPORARY = re.compile(r"\.[^/]+\.[0-9a-f]{32}\.tmp|\.tmp-[^/]+-[0-9a-f]{32}")


def is_temporary(name: str) -> bool:
    """Whether ``name`` (one path segment) is one of our writers' temporary files."""
    return _TEMPORARY.fullmatch(name) is not None


def join_key(*parts: str) -> str:
    """Join key segments; each may itself contain ``/``."""
    return "/".join(p.strip("/") for p in parts if p)


class ObjectStore(ABC):
    """A flat namespace of immutable-ish objects under one root."""

    uri: str

    @abstractmethod
    def read(self, key: str) -> bytes:
        """Whole object; :class:`NotFoundError` if absent."""

    @abstractmethod
    def open_source(self, key: str) -> RandomAccessSource:
        """A random-access view of the object, for data-file readers."""

    @abstractmethod
    def size(self, key: str) -> int: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """``exists`` of each key, in order (a store may answer keys of one directory
        together: version probes ask about a few neighbours at once)."""
        return [self.exists(key) for key in keys]

    def identities(self, keys: Sequence[str]) -> list[Hashable | None]:
        """:meth:`identity` of each key, None where there is no object (as
        :meth:`exists_many`, a store may answer keys of one directory together)."""
        out: list[Hashable | None] = []
        for key in keys:
            try:
                out.append(self.identity(key))
            except NotFoundError:
                out.append(None)
        return out

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Create or replace atomically: readers see the old or the new bytes, never a mix."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if it does not exist. Returns False if it did."""

    @abstractmethod
    def rename_if_absent(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` only if ``dst`` does not exist. Returns False if it did."""

    @abstractmethod
    def list_dir(self, prefix: str) -> list[str]:
        """Names (not keys) of the objects directly under directory ``prefix``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are ignored."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object under directory ``prefix`` (absent prefixes are ignored)."""
        for name in self.list_dir(prefix):
            key = f"{prefix}/{name}"
            if self.list_dir(key):
                self.delete_prefix(key)
            else:
                self.delete(key)

    @abstractmethod
    def modified_ns(self, key: str) -> int:
        """When ``key`` was last written (ns since the epoch); :class:`NotFoundError` if absent."""

    def identity(self, key: str) -> Hashable:
        """What tells the object now under ``key`` from another written there before it
        (its size and write time; a file's inode too): for caches of objects whose names
        come back when a table is deleted and written again at the same place (version
        1's manifest, WAL entries). :class:`NotFoundError` if absent."""
        return (self.size(key), self.modified_ns(key))

    def directory_stamp(self, prefix: str) -> tuple[Hashable, bool] | None:
        """What tells directory ``prefix``'s entries now from its entries at another
        moment: (a stamp that changes whenever an entry is added, removed or renamed,
        whether it has settled: a listing made after this call may be remembered under
        it). None when the store has no such thing (object stores): the caller lists."""
        return None

    def stamp_and_identities(self, prefix: str, names: Sequence[str], *,
                             if_stamped: bool = False
                             ) -> tuple[tuple[Hashable, bool] | None, list[Hashable | None]]:
        """(:meth:`directory_stamp` of ``prefix``, then :meth:`identities` of the objects
        ``names`` directly under it): a store may answer both from one walk of it.
        ``if_stamped``: no identities (all None) when there is no stamp (a caller that
        needs them only beside one asks no more of a store that keeps none)."""
        stamp = self.directory_stamp(prefix)
        if stamp is None and if_stamped:
            return None, [None] * len(names)
        return stamp, self.identities([f"{prefix}/{name}" if prefix else name
                                       for name in names])

    def list_temporaries(self, prefix: str) -> list[tuple[str, int]]:
        """``(name, modified_ns)`` of the temporaries directly under ``prefix`` that a
        writer of ours creates before publishing (see :func:`is_temporary`) — left
        behind for ever if it died. Plain listings never show them."""
        return []

    @abstractmethod
    def _open_writer(self, key: str) -> tuple[BinaryIO, object]:
        """Return a writable sink and a token for :meth:`_commit_writer`/:meth:`_abort_writer`."""

    @abstractmethod
    def _commit_writer(self, key: str, token: object) -> None: ...

    @abstractmethod
    def _abort_writer(self, key: str, token: object) -> None: ...

    @contextmanager
    def open_writer(self, key: str) -> Iterator[BinaryIO]:
        """Stream a new object; it appears under ``key`` only if the block succeeds."""
        sink, token = self._open_writer(key)
        try:
            yield sink
        except BaseException:
            sink.close()
            self._abort_writer(key, token)
            raise
        sink.close()
        self._commit_writer(key, token)

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one (e.g. another base path)."""
        raise NotImplementedError
