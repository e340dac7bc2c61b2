"""External manifest store: commits for object stores without atomic create or rename.

A key-value store with put-if-not-exists keyed by ``(base_uri, version)`` decides which
writer wins a version; the manifests themselves still live in the table's
``_versions/``, so the table stays readable (at most one version behind) without the
external store and can be copied like any other.

Commit, the four steps of the transaction specification::

    1. PUT   {key}-{uuid}                      stage the manifest (invisible to readers)
    2. PUT_IF_NOT_EXISTS (uri, v) -> staged    the commit point; losing means v is taken
    3. COPY  {key}-{uuid} -> {key}             make it visible to plain readers
    4. PUT   (uri, v) -> {key}                 record that the copy is done

Readers (and the commit loop) resolve a version through the store: a path that still
ends in a UUID means the writer stopped between steps 2 and 4, so the reader finishes
steps 3 and 4 itself (idempotently) before loading; if it cannot, it refuses to load.

Stores: :class:`SqliteManifestStore` (embedded default; WAL mode and one transaction per
statement make it safe across threads and processes on one machine) and
:class:`MemoryManifestStore` (tests). Both call optional hooks ``(operation, uri,
version)`` before each operation, for fault injection.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable

from lance_sql.errors import FormatError, NotFoundError
from lance_sql.format.naming import VERSIONS_DIR, parse_manifest_name
from lance_sql.io.commit import CommitHandler
from lance_sql.io.store import ObjectStore

Hook = Callable[[str, str, int], None]


class ExternalManifestStore(ABC):
    """``(base_uri, version) -> manifest path`` with put-if-not-exists."""

    def __init__(self) -> None:
        self.hooks: list[Hook] = []

    def _fire(self, op: str, base_uri: str, version: int) -> None:
        for hook in list(self.hooks):
            hook(op, base_uri, version)

    @abstractmethod
    def get(self, base_uri: str, version: int) -> str | None:
        """The recorded path of ``version``, or None."""

    @abstractmethod
    def latest(self, base_uri: str) -> tuple[int, str] | None:
        """The newest recorded (version, path), or None."""

    @abstractmethod
    def put_if_not_exists(self, base_uri: str, version: int, path: str) -> bool:
        """Record ``version`` unless it is recorded already; False if it was."""

    @abstractmethod
    def put_if_exists(self, base_uri: str, version: int, path: str) -> None:
        """Replace the path of an already recorded version."""

    @abstractmethod
    def delete(self, base_uri: str) -> None:
        """Forget every version of the table."""


class MemoryManifestStore(ExternalManifestStore):
    """A dict under a lock."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[tuple[str, int], str] = {}
        self._lock = threading.Lock()

    def get(self, base_uri: str, version: int) -> str | None:
        self._fire("get", base_uri, version)
        with self._lock:
            return self._rows.get((base_uri, version))

    def latest(self, base_uri: str) -> tuple[int, str] | None:
        self._fire("latest", base_uri, -1)
        with self._lock:
            mine = [(v, p) for (u, v), p in self._rows.items() if u == base_uri]
        return max(mine) if mine else None

    def put_if_not_exists(self, base_uri: str, version: int, path: str) -> bool:
        self._fire("put_if_not_exists", base_uri, version)
        with self._lock:
            if (base_uri, version) in self._rows:
                return False
            self._rows[(base_uri, version)] = path
            return True

    def put_if_exists(self, base_uri: str, version: int, path: str) -> None:
        self._fire("put_if_exists", base_uri, version)
        with self._lock:
            if (base_uri, version) not in self._rows:
                raise NotFoundError(f"{base_uri}: version {version} is not recorded")
            self._rows[(base_uri, version)] = path

    def delete(self, base_uri: str) -> None:
        with self._lock:
            for key in [k for k in self._rows if k[0] == base_uri]:
                del self._rows[key]


class SqliteManifestStore(ExternalManifestStore):
    """The external store in one SQLite file (stdlib ``sqlite3``), shared by processes."""

    _SCHEMA = ("CREATE TABLE IF NOT EXISTS lance_manifests ("
               "base_uri TEXT NOT NULL, version INTEGER NOT NULL, path TEXT NOT NULL, "
               "PRIMARY KEY (base_uri, version)) WITHOUT ROWID")

    def __init__(self, path: str | os.PathLike[str], timeout_s: float = 30.0) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.timeout_s = timeout_s
        self._local = threading.local()
        with self._connection() as conn:
            conn.execute(self._SCHEMA)

    def __getstate__(self) -> dict:  # picklable: processes open their own connections
        return {"path": self.path, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["timeout_s"])  # type: ignore[misc]

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def get(self, base_uri: str, version: int) -> str | None:
        self._fire("get", base_uri, version)
        row = self._connection().execute(
            "SELECT path FROM lance_manifests WHERE base_uri = ? AND version = ?",
            (base_uri, version)).fetchone()
        return row[0] if row else None

    def latest(self, base_uri: str) -> tuple[int, str] | None:
        self._fire("latest", base_uri, -1)
        row = self._connection().execute(
            "SELECT version, path FROM lance_manifests WHERE base_uri = ? "
            "ORDER BY version DESC LIMIT 1", (base_uri,)).fetchone()
        return (int(row[0]), row[1]) if row else None

    def put_if_not_exists(self, base_uri: str, version: int, path: str) -> bool:
        self._fire("put_if_not_exists", base_uri, version)
        try:
            self._connection().execute(
                "INSERT INTO lance_manifests (base_uri, version, path) VALUES (?, ?, ?)",
                (base_uri, version, path))
        except sqlite3.IntegrityError:
            return False
        return True

    def put_if_exists(self, base_uri: str, version: int, path: str) -> None:
        self._fire("put_if_exists", base_uri, version)
        cursor = self._connection().execute(
            "UPDATE lance_manifests SET path = ? WHERE base_uri = ? AND version = ?",
            (path, base_uri, version))
        if cursor.rowcount != 1:
            raise NotFoundError(f"{base_uri}: version {version} is not recorded in {self.path}")

    def delete(self, base_uri: str) -> None:
        self._connection().execute("DELETE FROM lance_manifests WHERE base_uri = ?",
                                   (base_uri,))


def is_staged(path: str) -> bool:
    """A staged manifest path ends in ``.manifest-{uuid}`` rather than ``.manifest``."""
    return not path.endswith(".manifest")


def final_key(path: str) -> str:
    """``_versions/X.manifest-{uuid}`` -> ``_versions/X.manifest``."""
    head, sep, _ = path.rpartition(".manifest-")
    return head + ".manifest" if sep else path


class ExternalManifestCommit(CommitHandler):
    """Commits through an :class:`ExternalManifestStore` (four steps, reader repair)."""

    name = "external"

    def __init__(self, manifest_store: ExternalManifestStore) -> None:
        self.manifest_store = manifest_store

    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        staged = f"{key}-{uuid.uuid4()}"
        store.put(staged, data)                                              # step 1
        try:
            won = self.manifest_store.put_if_not_exists(store.uri, version, staged)  # 2
        except BaseException:
            store.delete(staged)
            raise
        if not won:
            store.delete(staged)
            return False
        self.finalize(store, version, staged)                                # steps 3, 4
        return True

    def finalize(self, store: ObjectStore, version: int, staged: str) -> str:
        """Copy a staged manifest into place and record it; idempotent. Returns the key."""
        key = final_key(staged)
        if not store.exists(key):
            try:
                data = store.read(staged)
            except NotFoundError:
                if not store.exists(key):  # another reader may have finished meanwhile
                    raise FormatError(
                        f"{store.uri}: version {version} is committed in the external manifest "
                        f"store as {staged}, which is missing; refusing to load it"
                    ) from None
            else:
                store.put_if_absent(key, data)                               # step 3
        self.manifest_store.put_if_exists(store.uri, version, key)           # step 4
        store.delete(staged)
        return key

    def resolve(self, store: ObjectStore, version: int, key: str) -> str | None:
        """The final key of ``version`` (repairing a half-finished commit), or None."""
        path = self.manifest_store.get(store.uri, version)
        if path is None:
            if store.exists(key):  # committed without the store (or before it): record it
                self.manifest_store.put_if_not_exists(store.uri, version, key)
                return key
            return None
        return self.finalize(store, version, path) if is_staged(path) else path

    def exists(self, store: ObjectStore, key: str, version: int) -> bool:
        return self.resolve(store, version, key) is not None

    def latest(self, store: ObjectStore) -> tuple[int, str] | None:
        found = self.manifest_store.latest(store.uri)
        if found is None:
            return None
        version, path = found
        if is_staged(path):
            path = self.finalize(store, version, path)
        name = path.rpartition("/")[2]
        if not path.startswith(f"{VERSIONS_DIR}/") or parse_manifest_name(name) is None:
            raise FormatError(f"{store.uri}: external manifest store records version {version} "
                              f"at an unexpected path {path!r}")
        return version, path
