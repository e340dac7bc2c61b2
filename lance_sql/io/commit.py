"""How a manifest file becomes *the* next version: the atomic step of a commit.

A :class:`CommitHandler` publishes the bytes of version ``v`` under its manifest key so
that of several writers racing for ``v`` exactly one succeeds, and tells readers and
the commit loop which versions exist. Backends:

* :class:`PutIfAbsentCommit` — ``put_if_absent`` on the object store (the default);
* :class:`RenameCommit` — write a temporary object, then ``rename_if_absent`` it;
* ``ExternalManifestCommit`` (:mod:`lance_sql.io.external`) — for stores without either
  primitive: a key-value store with put-if-not-exists decides, and the manifest is
  staged, recorded, copied into place and marked final.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod

from lance_sql.io.store import ObjectStore


class CommitHandler(ABC):
    """Publishes manifests atomically and resolves which versions exist."""

    name: str = "commit"

    @abstractmethod
    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        """Publish ``data`` as version ``version`` at ``key``; False if the version exists."""

    def exists(self, store: ObjectStore, key: str, version: int) -> bool:
        """Whether ``version`` is committed (its manifest readable at ``key`` afterwards)."""
        return store.exists(key)

    def latest(self, store: ObjectStore) -> tuple[int, str] | None:
        """(version, manifest key) of the newest version if the handler tracks it itself;
        None means "list ``_versions/``"."""
        return None


class PutIfAbsentCommit(CommitHandler):
    """Conditional create of the manifest key (put-if-not-exists)."""

    name = "put_if_absent"

    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        return store.put_if_absent(key, data)


class RenameCommit(CommitHandler):
    """Write the manifest under a temporary name, then rename it if the target is free."""

    name = "rename"

    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        directory, _, name = key.rpartition("/")
        temp = f"{directory}/.tmp-{name}-{uuid.uuid4().hex}" if directory else \
            f".tmp-{name}-{uuid.uuid4().hex}"
        store.put(temp, data)
        try:
            won = store.rename_if_absent(temp, key)
        except BaseException:
            store.delete(temp)
            raise
        if not won:
            store.delete(temp)
        return won


DEFAULT_HANDLER = PutIfAbsentCommit()
