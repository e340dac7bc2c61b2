"""Local-filesystem object store.

Atomic create uses a hard link: the bytes are written to a unique temporary file,
then ``os.link`` publishes it under the final name, which fails if the name exists.
That gives put-if-not-exists (and rename-if-not-exists) with complete contents,
safe across threads and processes on one machine.

Like the reference's local object store, nothing is fsynced by default: a process
crash never exposes partial files, but surviving power loss needs
``LocalStore(root, fsync=True)`` (which syncs every published file, data included;
syncing manifests alone would not help, as they point at data files).
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from typing import BinaryIO

from lance_sql.errors import FormatError, NotFoundError
from lance_sql.io.store import ObjectStore, check_key


class LocalSource:
    """Positional reads from one local file (``os.pread``: thread safe, no shared cursor)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NotFoundError(f"file not found: {path}") from exc
        self.size = os.fstat(self._fd).st_size
        self._lock = threading.Lock()

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        data = os.pread(self._fd, length, offset)
        while len(data) < length:  # pread may return short reads on some filesystems
            more = os.pread(self._fd, length - len(data), offset + len(data))
            if not more:
                raise FormatError(f"{self.path}: file shrank while reading")
            data += more
        return data

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class LocalStore(ObjectStore):
    """Objects are files below ``root``; keys map to relative paths."""

    def __init__(self, root: str, *, fsync: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.uri = self.root
        self.fsync = fsync

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def read(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotFoundError(f"file not found: {self._path(key)}") from exc

    def open_source(self, key: str) -> LocalSource:
        return LocalSource(self._path(key))

    def size(self, key: str) -> int:
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError as exc:
            raise NotFoundError(f"file not found: {self._path(key)}") from exc

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def _temp_path(self, path: str) -> str:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        return os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._temp_path(path)
        with open(tmp, "wb") as f:
            f.write(data)
            self._sync(f)
        os.replace(tmp, path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._temp_path(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                self._sync(f)
            return _link_if_absent(tmp, path)
        finally:
            _unlink_quietly(tmp)

    def rename_if_absent(self, src: str, dst: str) -> bool:
        src_path, dst_path = self._path(src), self._path(dst)
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
        try:
            created = _link_if_absent(src_path, dst_path)
        except FileNotFoundError as exc:
            raise NotFoundError(f"file not found: {src_path}") from exc
        if created:
            _unlink_quietly(src_path)
        return created

    def list_dir(self, prefix: str) -> list[str]:
        path = self._path(prefix) if prefix else self.root
        try:
            return [n for n in os.listdir(path) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, key: str) -> None:
        _unlink_quietly(self._path(key))

    def _open_writer(self, key: str) -> tuple[BinaryIO, object]:
        tmp = self._temp_path(self._path(key))
        return open(tmp, "wb"), tmp

    def _sync(self, f: BinaryIO) -> None:
        if self.fsync:
            f.flush()
            os.fsync(f.fileno())

    def _commit_writer(self, key: str, token: object) -> None:
        tmp = str(token)
        if self.fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, self._path(key))

    def _abort_writer(self, key: str, token: object) -> None:
        _unlink_quietly(str(token))

    def child(self, prefix: str) -> LocalStore:
        return LocalStore(self._path(prefix), fsync=self.fsync)


def _link_if_absent(src: str, dst: str) -> bool:
    try:
        os.link(src, dst)
    except FileExistsError:
        return False
    except OSError as exc:  # filesystems without hard links
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
            raise
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            out.write(inp.read())
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
