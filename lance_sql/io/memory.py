"""In-memory object store for tests, with fault injection and scripted interleavings.

Every operation first calls the registered hooks with ``(operation, key)``; a hook
may raise (to simulate a crash or an I/O error at that exact step) or block on an
event (to interleave two writers deterministically). Stores created with the same
``memory://name`` URI share their contents, like two processes sharing a bucket.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from lance_sql.errors import FormatError, NotFoundError
from lance_sql.io.store import ObjectStore, check_key, is_temporary

Hook = Callable[[str, str], None]


class _Bucket:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.modified: dict[str, int] = {}  # key -> time.time_ns() of its last write
        self.lock = threading.Lock()
        self.hooks: list[Hook] = []


_BUCKETS: dict[str, _Bucket] = {}
_BUCKETS_LOCK = threading.Lock()


class MemorySource:
    """Random access over an immutable bytes object."""

    def __init__(self, path: str, data: bytes) -> None:
        self.path = path
        self.size = len(data)
        self._data = memoryview(data)

    def read_at(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        return self._data[offset : offset + length]


class _MemoryWriter(io.BytesIO):
    """Keeps its contents readable after ``close`` so the store can publish them."""

    final = b""

    def close(self) -> None:
        if not self.closed:
            self.final = self.getvalue()
        super().close()


class MemoryStore(ObjectStore):
    """A dict of key -> bytes under a lock; ``prefix`` scopes a child view."""

    def __init__(self, name: str = "default", prefix: str = "") -> None:
        with _BUCKETS_LOCK:
            self._bucket = _BUCKETS.setdefault(name, _Bucket())
        self.name = name
        self.prefix = prefix.strip("/")
        self.uri = f"memory://{name}" + (f"/{self.prefix}" if self.prefix else "")

    @staticmethod
    def reset(name: str) -> None:
        """Forget a bucket (test isolation)."""
        with _BUCKETS_LOCK:
            _BUCKETS.pop(name, None)

    # -- fault injection -------------------------------------------------
    def add_hook(self, hook: Hook) -> None:
        self._bucket.hooks.append(hook)

    def clear_hooks(self) -> None:
        self._bucket.hooks.clear()

    def _fire(self, op: str, key: str) -> None:
        for hook in list(self._bucket.hooks):
            hook(op, key)

    # -- keys ---------------------------------------------------------------
    def _key(self, key: str) -> str:
        key = check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self) -> list[str]:
        """Every key in the bucket (full keys), for assertions in tests."""
        with self._bucket.lock:
            return sorted(self._bucket.objects)

    # -- ObjectStore ----------------------------------------------------------
    def read(self, key: str) -> bytes:
        full = self._key(key)
        self._fire("read", full)
        with self._bucket.lock:
            try:
                return self._bucket.objects[full]
            except KeyError:
                raise NotFoundError(f"file not found: {self.uri}/{key}") from None

    def open_source(self, key: str) -> MemorySource:
        return MemorySource(f"{self.uri}/{key}", self.read(key))

    def size(self, key: str) -> int:
        return len(self.read(key))

    def exists(self, key: str) -> bool:
        full = self._key(key)
        with self._bucket.lock:
            return full in self._bucket.objects

    def put(self, key: str, data: bytes) -> None:
        full = self._key(key)
        self._fire("put", full)
        with self._bucket.lock:
            self._bucket.objects[full] = bytes(data)
            self._bucket.modified[full] = time.time_ns()

    def put_if_absent(self, key: str, data: bytes) -> bool:
        full = self._key(key)
        self._fire("put_if_absent", full)
        with self._bucket.lock:
            if full in self._bucket.objects:
                return False
            self._bucket.objects[full] = bytes(data)
            self._bucket.modified[full] = time.time_ns()
            return True

    def rename_if_absent(self, src: str, dst: str) -> bool:
        full_src, full_dst = self._key(src), self._key(dst)
        self._fire("rename_if_absent", full_dst)
        with self._bucket.lock:
            if full_dst in self._bucket.objects:
                return False
            try:
                self._bucket.objects[full_dst] = self._bucket.objects.pop(full_src)
            except KeyError:
                raise NotFoundError(f"file not found: {self.uri}/{src}") from None
            self._bucket.modified[full_dst] = self._bucket.modified.pop(full_src, 0)
            return True

    def list_dir(self, prefix: str) -> list[str]:
        full = self._key(prefix) + "/" if prefix else (f"{self.prefix}/" if self.prefix else "")
        self._fire("list", full)
        with self._bucket.lock:
            names = {
                k[len(full) :].split("/", 1)[0] for k in self._bucket.objects if k.startswith(full)
            }
        return sorted(names)

    def delete(self, key: str) -> None:
        full = self._key(key)
        self._fire("delete", full)
        with self._bucket.lock:
            self._bucket.objects.pop(full, None)
            self._bucket.modified.pop(full, None)

    def modified_ns(self, key: str) -> int:
        full = self._key(key)
        with self._bucket.lock:
            if full not in self._bucket.objects:
                raise NotFoundError(f"file not found: {self.uri}/{key}")
            return self._bucket.modified.get(full, 0)

    def set_modified_ns(self, key: str, when_ns: int) -> None:
        """Back-date (or forward-date) an object, for grace-period tests."""
        with self._bucket.lock:
            self._bucket.modified[self._key(key)] = when_ns

    def list_temporaries(self, prefix: str) -> list[tuple[str, int]]:
        names = [n for n in self.list_dir(prefix) if is_temporary(n)]
        with self._bucket.lock:
            return [(n, self._bucket.modified.get(self._key(f"{prefix}/{n}" if prefix else n),
                                                  0)) for n in names]

    def _open_writer(self, key: str) -> tuple[BinaryIO, object]:
        buf = _MemoryWriter()
        return buf, buf

    def _commit_writer(self, key: str, token: object) -> None:
        assert isinstance(token, _MemoryWriter)
        self.put(key, token.final)

    def _abort_writer(self, key: str, token: object) -> None:
        return None

    def child(self, prefix: str) -> MemoryStore:
        sub = check_key(prefix)
        return MemoryStore(self.name, f"{self.prefix}/{sub}" if self.prefix else sub)
