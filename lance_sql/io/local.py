"""Local-filesystem object store.

Atomic create uses a hard link: the bytes are written to a unique temporary file,
then ``os.link`` publishes it under the final name, which fails if the name exists.
That gives put-if-not-exists (and rename-if-not-exists) with complete contents,
safe across threads and processes on one machine.

Like the reference's local object store, nothing is fsynced by default: a process
crash never exposes partial files, but surviving power loss needs
``LocalStore(root, fsync=True)`` (which syncs every published file, data included;
syncing manifests alone would not help, as they point at data files).

Symlinks never lead out of the table: before every read, write, listing and delete the
path below the root is resolved (one ``lstat`` per path segment; ``realpath`` only for
a segment that is a link) and must stay under the root's real path, else
:class:`PathEscapeError`. The root itself may be reached through links (``/tmp`` on
some systems); other base paths (shallow clones) are stores of their own.

Data files are read through memory maps: large reads are views of the mapping, not copies
(see :class:`LocalSource` for what that assumes and how to turn it off).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import BinaryIO, cast

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, NotFoundError, PathEscapeError
from lance_sql.io.descriptors import opening, removed
from lance_sql.io.store import ObjectStore, check_key, is_temporary

# Keys checked once: the same few keys (manifests, hints) are asked for again and again,
# and checking is pure (a key that raises is never cached).
_checked_key = functools.lru_cache(maxsize=4096)(check_key)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)  # as open()'s descriptors are not inherited
_READ_PIECE = 64 << 10  # LocalStore.read's first read() (larger files: the rest in one)
# (a FIFO in a table's place opens at once instead of waiting for a writer; regular
# files read the same with it)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)  # (a terminal in a table's place stays no tty)


def _absent(exc: OSError) -> bool:
    """Whether ``exc`` says there is no such file: missing, under a non-directory, or
    named longer than any file can be (a name from a damaged manifest, say)."""
    return isinstance(exc, FileNotFoundError | NotADirectoryError) or \
        exc.errno == errno.ENAMETOOLONG


def _open_regular(path: str, shown: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at ``path`` and its ``fstat``; what a
    table keeps as a file but is not one (a directory, a FIFO, a device) is a
    FormatError naming it (``shown``), not a read that fails late or never returns."""
    try:
        fd = opening(lambda: os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NONBLOCK | _O_NOCTTY))
    except OSError as exc:
        if _absent(exc):
            raise NotFoundError(f"file not found: {shown}") from exc
        if exc.errno == errno.ENXIO:  # a socket (or a device without its driver)
            raise FormatError(f"{shown}: not a regular file") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(f"{shown}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _ignore_missing(function: object, path: str, info: tuple) -> None:
    """rmtree's error handler: a file removed meanwhile is fine, anything else is not."""
    if not isinstance(info[1], FileNotFoundError):
        raise info[1]


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    """``os.preadv`` into ``view`` (a pread and a copy where the platform lacks it)."""
    if _PREADV is not None:
        return _PREADV(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


_PREADV = getattr(os, "preadv", None)


# Reads of at least this many bytes are views of the file's memory map (no copy);
# smaller ones are copied by ``pread``, which costs no more for them.
MAP_MIN_READ = 64 * 1024
# A directory stamp is settled (listings made after it may be remembered under it) when
# the directory last changed at least this long before the stamp was taken: well above
# the kernel's timestamp tick (1-10 ms) and what the two clocks may differ by.
STAMP_SETTLED_NS = 50_000_000
# Filesystems that keep whole seconds (ext3's small inodes, HFS+; FAT: two seconds) stamp a
# change up to this much before it happened: times in whole seconds settle this much later.
COARSE_TICK_NS = 2_000_000_000
_SECOND_NS = 1_000_000_000
# ``LANCE_SQL_MMAP=0`` turns mapped reads off for every local store created afterwards.
MMAP_SWITCH = "LANCE_SQL_MMAP"


def mapping_enabled() -> bool:
    """Whether local stores map files by default (see :data:`MMAP_SWITCH`)."""
    return os.environ.get(MMAP_SWITCH, "").strip().lower() not in ("0", "false", "no", "off")


class LocalSource:
    """Positional reads from one local file, thread safe (no shared cursor).

    With ``mapped``, a regular file of at least :data:`MAP_MIN_READ` bytes is memory-mapped
    once (pyarrow's ``memory_map``: read-only, exactly the file's size at open), and reads
    of at least that many bytes return a read-only view of the mapping instead of a copy:
    a decoder that keeps views (flat pages) or gathers a few values (takes) then never
    copies the page. Other reads use ``os.pread``. Each read is checked against the size
    at open and, when mapped, against the file's current size, so a file truncated after
    open raises :class:`FormatError`, as a short ``pread`` does.

    Lance files are immutable once published (written under a temporary name, then
    linked or renamed into place; cleanup unlinks them, which leaves a mapping intact),
    so a view stays valid for as long as anything refers to it, after :meth:`close` too:
    the mapping goes with its last view, the file descriptor at ``close``. The one thing
    that breaks this is truncating a data file *in place* (``truncate``, ``cp`` or
    ``rsync --inplace`` over a table's file) while arrays read from it are alive: reading
    such an array then raises SIGBUS, as it would for pyarrow's own mapped IPC files.
    ``LocalStore(root, mapped=False)`` or ``LANCE_SQL_MMAP=0`` reads by copying instead.
    """

    def __init__(self, path: str, name: str | None = None, *, mapped: bool = False) -> None:
        self.path = path if name is None else name  # for messages: the path as addressed
        self._fd, info = _open_regular(path, self.path)
        self.size = info.st_size
        self._lock = threading.Lock()
        self._map: pa.MemoryMappedFile | None = None
        self._whole: np.ndarray | None = None  # the mapped file as bytes, once asked for
        if mapped and self.size >= MAP_MIN_READ:
            self._map_file(path, info)

    def _map_file(self, path: str, info: os.stat_result) -> None:
        """Map the file just opened, then read everything through the mapping's descriptor
        (one descriptor per source). The mapping is opened by path, so it is kept only if
        it is the same file, of the same size: otherwise reads stay unmapped."""
        try:
            mapping = pa.memory_map(path, "r")
        except (OSError, MemoryError, pa.ArrowException):
            return  # replaced or removed meanwhile, or no address space: stay unmapped
        fd = mapping.fileno()
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or mapping.size() != self.size:
            mapping.close()
            return
        os.set_inheritable(fd, False)  # as os.open's descriptors are
        os.close(self._fd)
        self._fd, self._map = fd, mapping

    @property
    def mapped(self) -> bool:
        """Whether large reads are views of a mapping."""
        return self._map is not None

    def read_at(self, offset: int, length: int) -> bytes | memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        if length >= MAP_MIN_READ and self._map is not None:
            view = self._view(offset, length)
            if view is not None:
                return view
        data = os.pread(self._fd, length, offset)
        while len(data) < length:  # pread may return short reads on some filesystems
            more = os.pread(self._fd, length - len(data), offset + len(data))
            if not more:
                raise FormatError(f"{self.path}: file shrank while reading")
            data += more
        return data

    def read_ranges(self, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The ranges ``[offsets[i], offsets[i] + lengths[i])`` back to back in one buffer
        (no bytes object per range, no joining copy): copied out of the mapping when the
        file is mapped, else each read straight into place by ``preadv``."""
        offsets = np.asarray(offsets, np.int64)
        lengths = np.asarray(lengths, np.int64)
        # ends compared as ``offset > size - length``: no int64 sum that could wrap
        if offsets.size and (int(offsets.min()) < 0 or int(lengths.min()) < 0
                             or int(lengths.max()) > self.size
                             or bool(np.any(offsets > self.size - lengths))):
            raise FormatError(f"{self.path}: a read of {offsets.size} ranges goes outside "
                              f"the file ({self.size} bytes)")
        out = np.empty(int(lengths.sum()), np.uint8)
        whole = self._mapped_file(int(np.max(offsets + lengths))) if offsets.size else None
        if whole is not None:  # copies out of the mapping: no system call per range
            at = 0
            for offset, length in zip(offsets.tolist(), lengths.tolist(), strict=True):
                out[at : at + length] = whole[offset : offset + length]
                at += length
            return out
        view = memoryview(out.data)
        at = 0
        for offset, length in zip(offsets.tolist(), lengths.tolist(), strict=True):
            self._fill(view[at : at + length], offset)
            at += length
        return out

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """The ``out.size`` bytes at ``offset`` written into ``out`` (a contiguous uint8
        array): a reader joining many small reads into one buffer makes no bytes object
        per read and no joining copy."""
        length = int(out.size)
        if offset < 0 or offset > self.size - length:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        # as read_at: a large read comes out of the mapping (copied into place here)
        view = self._view(offset, length) if length >= MAP_MIN_READ and \
            self._map is not None else None
        if view is not None:
            out[:] = np.frombuffer(view, np.uint8)
        else:
            self._fill(memoryview(out.data), offset)

    def _fill(self, view: memoryview, offset: int) -> None:
        """``view`` filled with the bytes at ``offset`` (``preadv`` straight into it)."""
        length = len(view)
        got = _read_into(self._fd, view, offset)
        while got < length:  # short reads on some filesystems
            more = _read_into(self._fd, view[got:], offset + got)
            if not more:
                raise FormatError(f"{self.path}: file shrank while reading")
            got += more

    def view_range(self, offset: int, length: int) -> np.ndarray | None:
        """Bytes ``[offset, offset + length)`` as a read-only view of the mapping (no copy,
        whatever the length; see the class docstring for how long it stays valid), or
        None when the file is not mapped (the caller reads by copying)."""
        if offset < 0 or length < 0 or offset > self.size - length:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        whole = self._mapped_file(offset + length)
        return None if whole is None else whole[offset : offset + length]

    def _mapped_file(self, end: int) -> np.ndarray | None:
        """The whole mapped file as bytes (kept for the source's life), checked to still
        hold ``end`` bytes; None when the file is not mapped."""
        with self._lock:
            mapping = self._map
            if mapping is None:
                return None
            if os.fstat(self._fd).st_size < end:  # never touch pages past EOF
                raise FormatError(f"{self.path}: file shrank after it was opened "
                                  f"(reads up to byte {end})")
            if self._whole is None:
                mapping.seek(0)
                self._whole = np.frombuffer(mapping.read_buffer(self.size), np.uint8)
            return self._whole

    def _view(self, offset: int, length: int) -> memoryview | None:
        """``length`` bytes at ``offset`` of the mapping (None once closed: the caller's
        ``pread`` then fails as on any closed source)."""
        with self._lock:  # the mapping reads at its cursor
            mapping = self._map
            if mapping is None:
                return None
            if os.fstat(self._fd).st_size < offset + length:  # never touch pages past EOF
                raise FormatError(f"{self.path}: file shrank after it was opened "
                                  f"(read of {length} bytes at {offset})")
            mapping.seek(offset)
            buffer = mapping.read_buffer(length)
        if len(buffer) != length:
            raise FormatError(f"{self.path}: short read at {offset} ({len(buffer)} of {length})")
        return memoryview(buffer).cast("B")

    def unlinked(self) -> bool:
        """Whether the file has no name left (deleted, or replaced under its name) or
        this source is closed: then keeping it open only holds disk space (one
        ``fstat``)."""
        with self._lock:
            if self._fd < 0:
                return True
            try:
                return os.fstat(self._fd).st_nlink == 0
            except OSError:
                return True

    def close(self) -> None:
        """Closes the descriptor; views already handed out stay readable."""
        with self._lock:
            if self._map is not None:
                self._map.close()  # closes self._fd too
                self._map = None
                self._whole = None
            elif self._fd >= 0:
                os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer has no caller to tell
            pass


def stamp_settled(mtime_ns: int, ctime_ns: int, started_ns: int) -> bool:
    """Whether a directory with these modification and change times, stat'ed at
    ``started_ns``, is settled: no change can still come with the same times (see
    :meth:`LocalStore.directory_stamp`). Both times in whole seconds say the filesystem
    keeps no finer ones (a real fine time lands on a whole second once in a billion: it is
    then only settled later), so a change may come up to :data:`COARSE_TICK_NS` after."""
    margin = STAMP_SETTLED_NS
    if mtime_ns % _SECOND_NS == 0 and ctime_ns % _SECOND_NS == 0:
        margin += COARSE_TICK_NS
    return max(mtime_ns, ctime_ns) <= started_ns - margin


class LocalStore(ObjectStore):
    """Objects are files below ``root``; keys map to relative paths."""

    def __init__(self, root: str, *, fsync: bool = False, mapped: bool | None = None) -> None:
        self.root = os.path.abspath(root)
        self.uri = self.root
        self.fsync = fsync
        # large reads of data files as views of their mapping (see LocalSource)
        self.mapped = mapping_enabled() if mapped is None else mapped
        self._real_root: str | None = None

    def _path(self, key: str) -> str:
        """The path as addressed (for messages)."""
        return os.path.join(self.root, *check_key(key).split("/"))

    def _root_prefix(self) -> str:
        real = self._real_root
        if real is None:
            real = os.path.realpath(self.root)
            if os.path.isdir(real):  # cache once it exists (a new table creates it later)
                self._real_root = real
        return real

    def _resolve(self, key: str, *, directory: bool = False) -> str:
        """The real path of ``key``: links below the root are followed, and one leading
        out of the root is refused. Segments that do not exist yet stay as spelt. The
        empty key names the root, as a ``directory`` only."""
        return self._walk(key, directory)[0]

    def _walk(self, key: str, directory: bool = False) -> tuple[str, int | None]:
        """(:meth:`_resolve`'s path, the ``lstat`` mode of the key's last segment: None
        when some segment does not exist, or for the root). One ``lstat`` per segment,
        as before every access; the mode lets :meth:`exists` answer without another
        system call."""
        path, info = self._walk_info(key, directory)
        return path, (None if info is None else info.st_mode)

    def _walk_info(self, key: str, directory: bool = False
                   ) -> tuple[str, os.stat_result | None]:
        """:meth:`_walk` with the whole ``lstat`` of the last segment."""
        parts = _checked_key(key).split("/") if key or not directory else ()
        root = self._root_prefix()
        inside = root if root.endswith(os.sep) else root + os.sep
        path, info = root, None
        for i, part in enumerate(parts):
            candidate = (path if path.endswith(os.sep) else path + os.sep) + part
            try:
                info = os.lstat(candidate)
            except OSError as exc:
                if not _absent(exc):
                    raise
                rest = parts[i + 1:]
                return (candidate + os.sep + os.sep.join(rest) if rest else candidate), None
            if stat.S_ISLNK(info.st_mode):
                candidate = os.path.realpath(candidate)
                if candidate != root and not candidate.startswith(inside):
                    raise PathEscapeError(
                        f"{self._path(key)}: {'/'.join(parts[:i + 1])} is a symbolic link "
                        f"to {candidate}, outside the table root {self.root}")
            path = candidate
        return path, info

    def read(self, key: str) -> bytes:
        # os-level calls: a buffered open adds an isatty probe, two fstats and a seek to
        # each read (half the cost of reading a small file such as the version hint,
        # which a strong read of a MemWAL table reads before every point lookup)
        fd, _ = _open_regular(self._resolve(key), self._path(key))
        try:
            first = os.read(fd, _READ_PIECE)
            if len(first) < _READ_PIECE:  # a small file (short reads end at EOF)
                rest = os.read(fd, _READ_PIECE) if first else b""
                if not rest:
                    return first
                pieces = [first, rest]
            else:
                pieces = [first]
            with os.fdopen(fd, "rb", closefd=False) as f:  # the rest, sized by fstat
                pieces.append(f.read())
            return b"".join(pieces)
        finally:
            os.close(fd)

    def open_source(self, key: str) -> LocalSource:
        return LocalSource(self._resolve(key), self._path(key), mapped=self.mapped)

    def size(self, key: str) -> int:
        try:
            return os.stat(self._resolve(key)).st_size
        except OSError as exc:
            if not _absent(exc):
                raise
            raise NotFoundError(f"file not found: {self._path(key)}") from exc

    def modified_ns(self, key: str) -> int:
        try:
            return os.stat(self._resolve(key)).st_mtime_ns
        except OSError as exc:
            if not _absent(exc):
                raise
            raise NotFoundError(f"file not found: {self._path(key)}") from exc

    def identity(self, key: str) -> Hashable:
        """One ``stat``: inode, size, and modification and change times (ns); the walk's
        ``lstat`` of the last segment is that ``stat`` when it is no link."""
        path, info = self._walk_info(key)
        try:
            if info is None or stat.S_ISLNK(info.st_mode):
                info = os.stat(path)  # a link (followed), or a segment missing (raises)
            return _identity(info)
        except OSError as exc:
            if not _absent(exc):
                raise
            raise NotFoundError(f"file not found: {self._path(key)}") from exc

    def directory_stamp(self, prefix: str) -> tuple[Hashable, bool] | None:
        """One ``stat`` of the directory (the walk's last ``lstat``, unless a link):
        (device, inode, modification and change times) — a directory's modification time
        moves whenever an entry is added, removed or renamed, and a directory made again
        at the same place is a new inode or a later time. Settled (:func:`stamp_settled`)
        when both times lie at least :data:`STAMP_SETTLED_NS` before this call's start,
        more for times in whole seconds (the racy-git rule: the kernel stamps files from
        a clock that ticks every few ms, so a change made in the same tick as the last
        one, after a listing, could leave the time as it was). None when the directory
        does not exist."""
        started = time.time_ns()
        path, info = self._walk_info(prefix, True)
        if info is None and prefix:
            return None  # a segment is missing
        if info is None or stat.S_ISLNK(info.st_mode):  # the root, or a link (followed)
            try:
                info = os.stat(path)
            except OSError as exc:
                if not _absent(exc):
                    raise
                return None
        if not stat.S_ISDIR(info.st_mode):
            return None
        settled = stamp_settled(info.st_mtime_ns, info.st_ctime_ns, started)
        return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns), settled

    def stamp_and_identities(self, prefix: str, names: Sequence[str], *,
                             if_stamped: bool = False
                             ) -> tuple[tuple[Hashable, bool] | None, list[Hashable | None]]:
        """:meth:`directory_stamp` of ``prefix`` and the identities of ``names`` in it
        from one walk of the directory (each name still gets its own ``lstat``, a link
        among them followed and checked as :meth:`identity` does), the stamp taken
        first, as when asked one after the other."""
        if not prefix:  # the root: stamped as directory_stamp does
            return super().stamp_and_identities(prefix, names, if_stamped=if_stamped)
        started = time.time_ns()
        directory, info = self._walk_info(prefix, True)
        if info is not None and stat.S_ISLNK(info.st_mode):  # a link (followed)
            try:
                info = os.stat(directory)
            except OSError as exc:
                if not _absent(exc):
                    raise
                info = None
        if info is None or not stat.S_ISDIR(info.st_mode):
            # no such directory (or none to stamp): each name answered on its own walk
            if if_stamped:
                return None, [None] * len(names)
            return None, self.identities([f"{prefix}/{name}" for name in names])
        stamp = ((info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns),
                 stamp_settled(info.st_mtime_ns, info.st_ctime_ns, started))
        out: list[Hashable | None] = []
        inside = directory if directory.endswith(os.sep) else directory + os.sep
        for name in names:
            key = f"{prefix}/{name}"
            _checked_key(key)  # (a name that is no single segment is refused as ever)
            if "/" in name:
                out.extend(self.identities([key]))
                continue
            try:
                found = os.lstat(inside + name)
            except OSError as exc:
                if not _absent(exc):
                    raise
                out.append(None)
                continue
            if stat.S_ISLNK(found.st_mode):  # followed, refused if it leads out
                try:
                    out.append(self.identity(key))
                except NotFoundError:
                    out.append(None)
                continue
            out.append(_identity(found))
        return stamp, out

    def exists(self, key: str) -> bool:
        path, mode = self._walk(key)
        if mode is None:
            return False  # a segment is missing
        # the last segment was a link (followed by the walk): does its target exist?
        return not stat.S_ISLNK(mode) or os.path.exists(path)

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Keys of one directory share one walk of it (each still gets its own ``lstat``,
        and a link among them is followed and checked as :meth:`exists` does)."""
        return [found is not None for found in self.identities(keys)]

    def identities(self, keys: Sequence[str]) -> list[Hashable | None]:
        """As :meth:`exists_many` (the same system calls): each key's identity, None
        where it does not exist."""
        out: list[Hashable | None] = []
        walked: dict[str, tuple[str, int | None]] = {}
        for key in keys:
            parent, _, name = _checked_key(key).rpartition("/")
            if parent not in walked:
                walked[parent] = self._walk(parent, True)
            directory, mode = walked[parent]
            if parent and mode is None:  # the directory does not exist
                out.append(None)
                continue
            path = (directory if directory.endswith(os.sep) else directory + os.sep) + name
            try:
                info = os.lstat(path)
            except OSError as exc:
                if not _absent(exc):
                    raise
                out.append(None)
                continue
            if stat.S_ISLNK(info.st_mode):  # as the walk does: followed, refused if it
                try:  # leads out
                    out.append(self.identity(key))
                except NotFoundError:
                    out.append(None)
                continue
            out.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        return out  # (as _identity: inline, a version probe asks for four per read)

    def _temp_path(self, path: str) -> str:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        return os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")

    def put(self, key: str, data: bytes) -> None:
        path = self._resolve(key)
        tmp = self._temp_path(path)
        try:
            with opening(lambda: open(tmp, "wb")) as f:
                f.write(data)
                self._sync(f)
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._resolve(key)
        tmp = self._temp_path(path)
        try:
            with opening(lambda: open(tmp, "wb")) as f:
                f.write(data)
                self._sync(f)
            return _link_if_absent(tmp, path)
        finally:
            _unlink_quietly(tmp)

    def rename_if_absent(self, src: str, dst: str) -> bool:
        src_path, dst_path = self._resolve(src), self._resolve(dst)
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
        try:
            created = _link_if_absent(src_path, dst_path)
        except FileNotFoundError as exc:
            raise NotFoundError(f"file not found: {self._path(src)}") from exc
        if created:
            _unlink_quietly(src_path)
        return created

    def list_dir(self, prefix: str) -> list[str]:
        try:
            return [n for n in os.listdir(self._resolve(prefix, directory=True))
                    if not n.startswith(".")]
        except OSError as exc:
            if not _absent(exc):
                raise
            return []

    def list_temporaries(self, prefix: str) -> list[tuple[str, int]]:
        directory = self._resolve(prefix, directory=True)
        found = []
        try:
            names = [n for n in os.listdir(directory) if is_temporary(n)]
        except OSError as exc:
            if not _absent(exc):
                raise
            return []
        for name in names:
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError as exc:
                if not _absent(exc):
                    raise
                continue  # published or removed meanwhile
            if stat.S_ISREG(st.st_mode):
                found.append((name, st.st_mtime_ns))
        return found

    def delete_prefix(self, prefix: str) -> None:
        """Removes the directory tree; links inside it are unlinked, never followed."""
        parent, _, name = check_key(prefix).rpartition("/") if prefix else ("", "", "")
        if not name:
            raise PathEscapeError(f"{self.root}: refusing to delete the whole root")
        path = os.path.join(self._resolve(parent, directory=True), name)
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            if not _absent(exc):
                raise
            return
        if not stat.S_ISDIR(mode):  # a link (to anything) or a file: only the entry goes
            os.unlink(path)
            removed(self._path(prefix))
            return
        try:
            shutil.rmtree(path, onerror=_ignore_missing)
        finally:  # (what was removed before a failure is gone too)
            removed(self._path(prefix), tree=True)

    def delete(self, key: str) -> None:
        """Removes the directory entry: a link inside the root is unlinked, never its
        target; a linked directory leading out of the root is refused."""
        directory, _, name = check_key(key).rpartition("/")
        _unlink_quietly(os.path.join(self._resolve(directory, directory=True), name))
        removed(self._path(key))  # cached open files of it let go of their descriptor

    def _open_writer(self, key: str) -> tuple[BinaryIO, object]:
        path = self._resolve(key)
        tmp = self._temp_path(path)
        return opening(lambda: open(tmp, "wb")), (tmp, path)

    def _sync(self, f: BinaryIO) -> None:
        if self.fsync:
            f.flush()
            os.fsync(f.fileno())

    def _commit_writer(self, key: str, token: object) -> None:
        tmp, path = cast(tuple[str, str], token)
        if self.fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)

    def _abort_writer(self, key: str, token: object) -> None:
        _unlink_quietly(token[0])  # type: ignore[index]

    def child(self, prefix: str) -> LocalStore:
        return LocalStore(self._resolve(prefix), fsync=self.fsync, mapped=self.mapped)


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


def _identity(info: os.stat_result) -> Hashable:
    """What tells a file from another later written at the same path (see
    :meth:`ObjectStore.identity`)."""
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        if not _absent(exc):
            raise
