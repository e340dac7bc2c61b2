"""Blob columns as files: ``take_blobs`` returns lazy, seekable file objects.

A blob column reads as descriptions (see ``BLOB_V*_DESCRIPTION``); each description
says where a row's bytes live. Legacy blobs (2.0/2.1 ``lance-encoding:blob``) are a
``{position, size}`` range of the data file. Blob v2 (format 2.2) descriptions carry a
``kind``:

* 0 inline    -- ``[position, position + size)`` of the data file;
* 1 packed    -- a range of a sidecar ``.blob`` file shared by many rows;
* 2 dedicated -- a whole sidecar ``.blob`` file (``position`` is 0);
* 3 external  -- ``blob_uri``: an absolute URI when ``blob_id`` is 0, otherwise a path
  relative to the manifest's base path ``blob_id``; ``size`` 0 means "to the end".

Sidecar files live next to the data file, in a directory named after its stem:
``data/<stem>/<name>.blob`` where ``<name>`` is ``blob_id`` with its 32 bits reversed,
written as 32 binary digits (blob id 1 -> ``1000...0``).

Null rows give ``None``; empty blobs give a file of size 0. Nothing is read until a
file is read; the sources opened for one ``take_blobs`` call are shared by its files.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Sequence
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
)
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField
from lance_sql.io.local import LocalSource
from lance_sql.io.store import ObjectStore, RandomAccessSource, check_key
from lance_sql.io.uri import open_store
from lance_sql.table.files.reader import ROW_ADDR, FragmentReader, base_store

INLINE, PACKED, DEDICATED, EXTERNAL = 0, 1, 2, 3


def blob_file_name(blob_id: int) -> str:
    """Name of the sidecar file holding ``blob_id`` (its bits reversed, in binary)."""
    if not 0 <= blob_id < 1 << 32:
        raise FormatError(f"blob id {blob_id} is not a u32")
    return f"{int(f'{blob_id:032b}'[::-1], 2):032b}.blob"


class _LazySource:
    """Opens one object on first use; shared by the blob files of one call."""

    def __init__(self, name: str, opener: Callable[[], RandomAccessSource]) -> None:
        self.name = name
        self._opener = opener
        self._source: RandomAccessSource | None = None
        self._lock = threading.Lock()

    def get(self) -> RandomAccessSource:
        with self._lock:
            if self._source is None:
                self._source = self._opener()
            return self._source


class BlobFile(io.RawIOBase):
    """One blob as a read-only, seekable file over ``[position, position + size)``."""

    def __init__(self, source: _LazySource, position: int, size: int | None) -> None:
        super().__init__()
        self._source = source
        self._position = position
        self._size = size  # None: to the end of the object (external, size unknown)
        self._cursor = 0
        self._checked = False

    def __repr__(self) -> str:
        return f"<BlobFile {self._source.name} position={self._position} size={self._size}>"

    # -- the underlying range ---------------------------------------------------
    def _open(self) -> RandomAccessSource:
        source = self._source.get()
        if not self._checked:
            if self._size is None:  # external, size 0: the object from position on
                self._size = max(int(source.size) - self._position, 0)
            end = self._position + self._size
            if end > source.size:
                raise FormatError(
                    f"{source.path}: blob [{self._position}, {end}) is past the end of the "
                    f"file ({source.size} bytes); the file is truncated"
                )
            self._checked = True
        return source

    def _read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return bytes(self._open().read_at(self._position + offset, length))

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed blob file")

    # -- io API ---------------------------------------------------------------------
    def size(self) -> int:
        """Size of the blob in bytes."""
        if self._size is None:
            self._open()
        return self._size  # type: ignore[return-value]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        self._check_open()
        return self._cursor

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._cursor + offset
        elif whence == io.SEEK_END:
            target = self.size() + offset
        else:
            raise ValueError(f"invalid whence {whence!r}")
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        self._cursor = int(target)
        return self._cursor

    def readinto(self, buffer) -> int:  # any writable buffer
        self._check_open()
        view = memoryview(buffer).cast("B")
        data = self._read(self._cursor, min(len(view), self.size() - self._cursor))
        view[: len(data)] = data
        self._cursor += len(data)
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        if size is None or size < 0:
            return self.readall()
        data = self._read(self._cursor, min(size, self.size() - self._cursor))
        self._cursor += len(data)
        return data

    def readall(self) -> bytes:
        self._check_open()
        data = self._read(self._cursor, self.size() - self._cursor)
        self._cursor += len(data)
        return data

    def read_range(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of the blob; the cursor does not move."""
        self._check_open()
        if offset < 0 or length < 0 or offset + length > self.size():
            raise InvalidInputError(
                f"range [{offset}, {offset + length}) is outside the blob ({self.size()} bytes)"
            )
        return self._read(offset, length)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [self.read_range(offset, length) for offset, length in ranges]


# -- locating the bytes -----------------------------------------------------------------
def _external_uri(uri: str) -> _LazySource:
    parts = urlsplit(uri)
    if parts.scheme != "file":
        if parts.scheme:
            raise UnsupportedFeatureError(
                f"external blob {uri!r}: lance_sql reads file:// blob URIs only"
            )
        raise FormatError(f"external blob {uri!r} is not an absolute URI")
    if parts.netloc not in ("", "localhost"):
        raise UnsupportedFeatureError(f"external blob {uri!r}: remote file:// hosts are "
                                      "not supported")
    path = unquote(parts.path)
    if not os.path.isabs(path):
        raise FormatError(f"external blob {uri!r} is not an absolute file URI")
    return _LazySource(uri, lambda: LocalSource(path))


class _Locator:
    """Maps (row address, description) to a lazily opened source; caches per call."""

    def __init__(self, store: ObjectStore, manifest: Manifest, field: LanceField) -> None:
        self.store = store
        self.manifest = manifest
        self.field = field
        self._fragments = {f.id: f for f in manifest.fragments}
        self._files: dict[int, tuple[ObjectStore, DataFile]] = {}
        self._sources: dict[tuple[str, str], _LazySource] = {}

    def _data_file(self, fragment_id: int) -> tuple[ObjectStore, DataFile]:
        if fragment_id not in self._files:
            fragment: Fragment | None = self._fragments.get(fragment_id)
            if fragment is None:
                raise NotFoundError(f"row address refers to fragment {fragment_id}, "
                                    "which does not exist")
            found = FragmentReader(self.store, self.manifest, fragment).data_file_of(self.field)
            if found is None:
                raise FormatError(f"{self.store.uri}: fragment {fragment_id} has a blob in "
                                  f"column {self.field.name!r} but no data file holds it")
            root = base_store(self.store, self.manifest, found.base_id)
            self._files[fragment_id] = (root, found)
        return self._files[fragment_id]

    def _source(self, root: ObjectStore, key: str) -> _LazySource:
        key = check_key(key)
        cache_key = (root.uri, key)
        if cache_key not in self._sources:
            name = f"{root.uri}/{key}"

            def opener() -> RandomAccessSource:
                try:
                    return root.open_source(key)
                except NotFoundError as exc:
                    raise NotFoundError(f"blob file not found: {name}") from exc

            self._sources[cache_key] = _LazySource(name, opener)
        return self._sources[cache_key]

    def data_file(self, address: int) -> _LazySource:
        root, data_file = self._data_file(address >> 32)
        return self._source(root, data_file.key)

    def sidecar(self, address: int, blob_id: int) -> _LazySource:
        root, data_file = self._data_file(address >> 32)
        stem = data_file.path.rsplit("/", 1)[-1].removesuffix(".lance")
        return self._source(root, f"data/{stem}/{blob_file_name(blob_id)}")

    def external(self, uri: str, base_id: int) -> _LazySource:
        if base_id == 0:
            if ("", uri) not in self._sources:
                self._sources[("", uri)] = _external_uri(uri)
            return self._sources[("", uri)]
        base = next((b for b in self.manifest.base_paths if b.id == base_id), None)
        if base is None:
            raise FormatError(f"{self.store.uri}: external blob {uri!r} refers to unknown "
                              f"base path id {base_id}")
        return self._source(open_store(base.path), uri)  # check_key: stays under the base


def _blob_files(locator: _Locator, descriptions: pa.StructArray,
                addresses: np.ndarray) -> list[BlobFile | None]:
    names = [descriptions.type.field(i).name for i in range(descriptions.type.num_fields)]
    cols = {n: descriptions.field(i).to_numpy(zero_copy_only=False) for i, n in enumerate(names)}
    valid = descriptions.is_valid().to_numpy(zero_copy_only=False)
    out: list[BlobFile | None] = []
    if names == ["position", "size"]:  # legacy: a range of the data file
        for i, address in enumerate(addresses.tolist()):
            if not valid[i]:
                out.append(None)
                continue
            source = locator.data_file(address)
            out.append(BlobFile(source, int(cols["position"][i]), int(cols["size"][i])))
        return out
    if names != ["kind", "position", "size", "blob_id", "blob_uri"]:
        raise FormatError(f"unrecognised blob description fields {names}")
    for i, address in enumerate(addresses.tolist()):
        if not valid[i]:
            out.append(None)
            continue
        kind = int(cols["kind"][i])
        position, size = int(cols["position"][i]), int(cols["size"][i])
        blob_id = int(cols["blob_id"][i])
        if kind == INLINE:
            out.append(BlobFile(locator.data_file(address), position, size))
        elif kind == PACKED:
            out.append(BlobFile(locator.sidecar(address, blob_id), position, size))
        elif kind == DEDICATED:
            out.append(BlobFile(locator.sidecar(address, blob_id), 0, size))
        elif kind == EXTERNAL:
            uri = cols["blob_uri"][i]
            source = locator.external(str(uri), blob_id)
            out.append(BlobFile(source, position, size if size > 0 else None))
        else:
            raise UnsupportedFeatureError(f"blob description kind {kind} is not supported")
    return out


def take_blobs(dataset, blob_column: str, ids=None, addresses=None,
               indices=None) -> list[BlobFile | None]:
    """pylance's ``LanceDataset.take_blobs``: one file (or None for a null) per row."""
    given = [v is not None for v in (ids, addresses, indices)]
    if sum(given) != 1:
        raise InvalidInputError("exactly one of ids, addresses or indices must be given")
    manifest: Manifest = dataset.manifest
    # rows taken and located in this one version, though a write through ``dataset`` on
    # another thread may move the object meanwhile
    dataset = dataset.at_manifest(manifest)
    field = next((f for f in manifest.schema.fields if f.name == blob_column), None)
    if field is None:
        names = ", ".join(f.name for f in manifest.schema.fields)
        raise NotFoundError(f"column {blob_column!r} does not exist; columns: {names}")
    if not field.is_blob:
        raise InvalidInputError(f"column {blob_column!r} is not a blob column")
    columns = [blob_column, ROW_ADDR]
    if ids is not None:
        table = dataset.take_rows(_u64(ids), columns)
    elif addresses is not None:
        table = dataset.take_addresses(_u64(addresses), columns)
    else:
        table = dataset.take(np.asarray(_ints(indices), dtype=np.int64), columns)
    descriptions = table.column(blob_column).combine_chunks()
    if isinstance(descriptions, pa.ChunkedArray):  # no chunks at all
        descriptions = pa.array([], descriptions.type)
    row_addresses = table.column(ROW_ADDR).to_numpy().astype(np.uint64)
    locator = _Locator(dataset.store, manifest, field)
    return _blob_files(locator, descriptions, row_addresses)


def _ints(values) -> list[int] | np.ndarray:
    if isinstance(values, pa.ChunkedArray | pa.Array):
        return values.to_numpy(zero_copy_only=False)
    return values


def _u64(values) -> np.ndarray:
    array = np.asarray(_ints(values))
    if array.size and array.dtype.kind == "i" and int(array.min()) < 0:
        raise InvalidInputError("row ids and addresses must not be negative")
    return array.astype(np.uint64)
