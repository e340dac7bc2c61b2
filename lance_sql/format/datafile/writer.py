"""Write Lance data files in format 2.0 (here) or 2.1 / 2.2 (columns in :mod:`writer_v2_2`).

One column per schema field, parents included, in pre-order (what pylance writes for 2.0):
a struct column holds a single ``SimpleStruct`` page with no buffers, a list column holds
the offsets and its items live in the next column. Each column buffers incoming arrays
and writes a page once it holds more than ``page_bytes`` (pylance: 8 MiB per column),
splitting flushes larger than ``max_page_bytes`` (pylance: 32 MiB) into several pages. A
list page flush also flushes its items, as pylance does. Every buffer starts on a 64-byte
boundary.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from lance_sql.errors import SchemaError, UnsupportedFeatureError
from lance_sql.format.datafile import container
from lance_sql.format.datafile.decode_v2_1 import is_packed_struct
from lance_sql.format.datafile.encode_v2_0 import (
    BufferLike,
    EncodedPage,
    check_encodable,
    encode_leaf_page,
    encode_list_page,
    fixed_bit_width,
    storage,
    struct_page_encoding,
    validity_mask,
)
from lance_sql.format.datafile.pages import PageBuffer, split_rows
from lance_sql.format.datafile.writer_v2_2 import StructuralField
from lance_sql.format.pb import file2_pb2, file_pb2
from lance_sql.format.schema import LanceField, LanceSchema

WRITABLE_VERSIONS = ("2.0", "2.1", "2.2")
# New tables get format 2.2 (what pylance writes, and the first that stores null structs);
# an existing table keeps the format its manifest records. The one default, used everywhere.
DEFAULT_DATA_FORMAT = "2.2"
DEFAULT_PAGE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_PAGE_BYTES = 32 * 1024 * 1024
_PADDING = b"H" * container.PAGE_ALIGNMENT  # pylance pads with 72s; any byte would do


@dataclass(frozen=True)
class WrittenFile:
    """What a manifest's DataFile needs to know about a finished file.

    ``major``/``minor`` are the manifest's version numbers (2/0); the footer itself says
    0.3 for 2.0, as pylance writes it.
    """

    num_rows: int
    fields: tuple[int, ...]
    column_indices: tuple[int, ...]
    size_bytes: int
    major: int
    minor: int


OVERLAP_MIN_BYTES = 1 << 20  # a write this large starts the helper thread of _Output


class _Output:
    """Tracks the position in the sink (which need not support tell) and aligns buffers.

    Within :meth:`overlapped` (one ``write_batch`` or ``finish``), from the first write
    of :data:`OVERLAP_MIN_BYTES` on, writes are handed to a helper thread that writes
    them in order while the caller encodes the next pages (the sink's write runs without
    the interpreter lock). Positions are counted here as before, so the bytes land where
    a direct write would put them. The helper is joined when the block ends; a failed
    write is raised then, or by the next write.
    """

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.pos = 0
        self._overlap = False
        self._queue: queue.SimpleQueue[memoryview | None] | None = None
        self._helper: threading.Thread | None = None
        self._failure: BaseException | None = None

    def write(self, data: BufferLike) -> int:
        view = (data.data if isinstance(data, np.ndarray) else memoryview(data)).cast("B")
        if self._failure is not None:
            self._raise_failure()
        if view.nbytes:
            if self._queue is None and self._overlap and view.nbytes >= OVERLAP_MIN_BYTES:
                self._start_helper()
            if self._queue is not None:
                self._queue.put(view)
            else:
                self.sink.write(view)
        self.pos += view.nbytes
        return view.nbytes

    def write_buffer(self, data: BufferLike) -> tuple[int, int]:
        start = self.pos
        size = self.write(data)
        pad = -size % container.PAGE_ALIGNMENT
        if pad:
            self.write(_PADDING[:pad])
        return start, size

    @contextmanager
    def overlapped(self) -> Iterator[None]:
        """Let large writes in this block overlap with the caller's work (see above)."""
        self._overlap = True
        try:
            yield
        except BaseException:
            self._stop_helper()
            self._failure = None  # the caller's error is the one to report
            raise
        finally:
            self._overlap = False
        self._stop_helper()
        if self._failure is not None:
            self._raise_failure()

    def _start_helper(self) -> None:
        work: queue.SimpleQueue[memoryview | None] = queue.SimpleQueue()

        def drain() -> None:
            while (item := work.get()) is not None:
                if self._failure is None:
                    try:
                        self.sink.write(item)
                    except BaseException as exc:  # noqa: BLE001 - raised by the caller
                        self._failure = exc

        self._queue = work
        self._helper = threading.Thread(target=drain, name="lance-sql-write", daemon=True)
        self._helper.start()

    def _stop_helper(self) -> None:
        if self._queue is None or self._helper is None:
            return
        self._queue.put(None)
        self._helper.join()
        self._queue = self._helper = None

    def _raise_failure(self) -> None:
        exc, self._failure = self._failure, None
        assert exc is not None
        raise exc


class _Column:
    """Pages of one column; subclasses decide when and how to cut them."""

    def __init__(self, writer: LanceFileWriter, field: LanceField, path: str) -> None:
        self.writer = writer
        self.field = field
        self.path = path  # dotted field path, for error messages
        self.index = len(writer.columns)
        writer.columns.append(self)
        self.pages: list[file2_pb2.ColumnMetadata.Page] = []
        self.rows = 0  # rows in written pages (items, for a list's child)

    def emit(self, page: EncodedPage, length: int) -> None:
        out = self.writer.out
        buffers = [out.write_buffer(b) for b in page.buffers]
        self.pages.append(container.page_metadata(buffers, length, self.rows, page.encoding))
        self.rows += length

    def check_nulls(self, arr: pa.Array) -> None:
        if not self.field.nullable and arr.null_count:
            raise SchemaError(
                f"column {self.path!r} is not nullable but the data has {arr.null_count} nulls"
            )

    def push(self, arr: pa.Array) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Write whatever is buffered."""

    def finish(self) -> None:
        self.flush()


class _LeafColumn(_Column):
    def __init__(self, writer: LanceFileWriter, field: LanceField, path: str) -> None:
        super().__init__(writer, field, path)
        self.buffer = PageBuffer(writer.page_bytes, writer.max_page_bytes)

    def push(self, arr: pa.Array) -> None:
        self.check_nulls(arr)
        if self.buffer.add(arr):
            self.flush()

    def flush(self) -> None:
        for part in self.buffer.drain():
            self.emit(
                encode_leaf_page(part, fixed_size_binary=self.writer.fixed_size_binary), len(part)
            )


class _ListColumn(_Column):
    def __init__(self, writer: LanceFileWriter, field: LanceField, path: str) -> None:
        super().__init__(writer, field, path)
        self.item = _make_column(writer, field.children[0], f"{path}.{field.children[0].name}")
        self.lengths: list[np.ndarray] = []
        self.valid: list[np.ndarray | None] = []
        self.pending_bytes = 0

    def push(self, arr: pa.Array) -> None:
        arr = storage(arr)
        self.check_nulls(arr)
        n = len(arr)
        if not n:
            return
        large = pa.types.is_large_list(arr.type)
        offsets = np.frombuffer(
            arr.buffers()[1], dtype=np.int64 if large else np.int32, count=arr.offset + n + 1
        )[arr.offset :]
        first, last = int(offsets[0]), int(offsets[-1])
        lengths = np.diff(offsets).astype(np.uint64)
        valid = validity_mask(arr) if arr.null_count else None
        if valid is not None and np.any(lengths[~valid]):
            # items under NULL lists are no values: written as empty lists, so a NULL
            # struct hidden there is not refused as one (pylance writes them so too)
            lengths[~valid] = 0
            self.item.push(arr.flatten())
        else:
            self.item.push(arr.values.slice(first, last - first))
        self.lengths.append(lengths)
        self.valid.append(valid)
        self.pending_bytes += 8 * n
        if self.pending_bytes > self.writer.page_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.lengths:
            return
        lengths = np.concatenate(self.lengths) if len(self.lengths) > 1 else self.lengths[0]
        valid = None
        if any(v is not None for v in self.valid):
            valid = np.concatenate(
                [
                    np.ones(len(x), bool) if v is None else v
                    for x, v in zip(self.lengths, self.valid, strict=True)
                ]
            )
        nbytes = self.pending_bytes
        self.lengths, self.valid, self.pending_bytes = [], [], 0
        for start, length in split_rows(nbytes, len(lengths), self.writer.max_page_bytes):
            part = lengths[start : start + length]
            ends = np.empty(length + 1, dtype=np.uint64)
            ends[0] = 0
            np.cumsum(part, out=ends[1:])
            part_valid = None if valid is None else valid[start : start + length]
            page, _ = encode_list_page(ends, part_valid)
            self.emit(page, length)
        self.item.flush()

    def finish(self) -> None:
        self.flush()
        self.item.finish()


class _StructColumn(_Column):
    """A header column (one SimpleStruct page at the end) plus one column tree per child."""

    def __init__(self, writer: LanceFileWriter, field: LanceField, path: str) -> None:
        super().__init__(writer, field, path)
        self.children = [_make_column(writer, c, f"{path}.{c.name}") for c in field.children]
        self.seen = 0

    def push(self, arr: pa.Array) -> None:
        arr = storage(arr)
        if arr.null_count:
            raise UnsupportedFeatureError(
                f"column {self.path!r} has null struct values; Lance file format 2.0 cannot "
                f"store struct validity (use format 2.2)"
            )
        for i, child in enumerate(self.children):
            child.push(arr.field(i))
        self.seen += len(arr)

    def flush(self) -> None:
        for child in self.children:
            child.flush()

    def finish(self) -> None:
        for child in self.children:
            child.finish()
        self.pages.append(container.page_metadata([], self.seen, 0, struct_page_encoding()))


def _make_column(writer: LanceFileWriter, field: LanceField, path: str) -> _Column:
    if field.is_blob:
        raise UnsupportedFeatureError(
            f"column {path!r}: writing blob columns (lance-encoding:blob / lance.blob.v2) is "
            f"not supported"
        )
    t = storage_type(field.arrow_type)
    if is_packed_struct(field):  # its rows in one column, as pylance packs them
        widths = [fixed_bit_width(storage_type(c.arrow_type)) for c in field.children]
        if not widths or any(w is None or w % 8 for w in widths):
            raise UnsupportedFeatureError(
                f"column {path!r}: a packed struct (lance-encoding:packed) is written only "
                f"with byte-wide fixed-width children, as pylance packs")
        return _LeafColumn(writer, field, path)
    if pa.types.is_struct(t):
        return _StructColumn(writer, field, path)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _ListColumn(writer, field, path)
    if field.children:
        raise UnsupportedFeatureError(
            f"column {path!r}: type {field.arrow_type} is not supported by Lance file format 2.0"
        )
    check_encodable(t, path)
    return _LeafColumn(writer, field, path)


def storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types unwrapped to their storage type."""
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def _shape(field: LanceField) -> tuple:
    return (field.logical_type, tuple(_shape(c) for c in field.children))


class LanceFileWriter:
    """Streams record batches into one Lance 2.0 data file written to ``sink``."""

    def __init__(
        self,
        sink: BinaryIO,
        schema: LanceSchema,
        *,
        path: str = "<memory>",
        page_bytes: int = DEFAULT_PAGE_BYTES,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        fixed_size_binary: bool = False,
        version: str = "2.0",
    ) -> None:
        """``page_bytes``/``max_page_bytes`` set the page cut (see the module docstring).

        ``fixed_size_binary`` stores string/binary pages whose values all share one length
        with the FixedSizeBinary encoding (pylance's 2.0 writer never does; its reader can).
        ``version`` is the Lance file format: ``"2.0"``, or ``"2.1"`` / ``"2.2"`` (one
        column per leaf, see :mod:`writer_v2_2`).
        """
        if page_bytes <= 0 or max_page_bytes <= 0:
            raise ValueError("page_bytes and max_page_bytes must be positive")
        if version not in WRITABLE_VERSIONS:
            raise UnsupportedFeatureError(
                f"{path}: cannot write Lance file format {version!r} (writable: "
                f"{', '.join(WRITABLE_VERSIONS)})"
            )
        self.version = version
        self.schema = schema
        self.path = path
        self.page_bytes = page_bytes
        self.max_page_bytes = max_page_bytes
        self.fixed_size_binary = fixed_size_binary
        self.out = _Output(sink)
        self.columns: list = []
        self._top: list[_Column | StructuralField]
        if version == "2.0":
            self._top = [_make_column(self, f, f.name) for f in schema.fields]
        else:
            self._top = [StructuralField(self, f) for f in schema.fields]
        self._types = [f.arrow_type for f in schema.fields]
        self._rows = 0
        self._finished: WrittenFile | None = None

    def _column_data(self, data: pa.RecordBatch | pa.Table, i: int) -> Sequence[pa.Array]:
        field, target = self.schema.fields[i], self._types[i]
        try:
            col = data.column(field.name)
        except KeyError:
            raise SchemaError(f"{self.path}: the data has no column {field.name!r}") from None
        if col.type != target:
            data_field = LanceField.from_arrow(pa.field(field.name, col.type), itertools.count())
            if _shape(data_field) != _shape(field) and not (
                pa.types.is_string_view(col.type) or pa.types.is_binary_view(col.type)
            ):
                raise SchemaError(
                    f"{self.path}: column {field.name!r} has type {col.type}, the schema says "
                    f"{target}"
                )
            col = col.cast(target)
        return col.chunks if isinstance(col, pa.ChunkedArray) else [col]

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; columns are matched to the schema by name."""
        if self._finished is not None:
            raise ValueError(f"{self.path}: writer already finished")
        columns = [self._column_data(batch, i) for i in range(len(self._top))]
        with self.out.overlapped():
            for column, chunks in zip(self._top, columns, strict=True):
                for chunk in chunks:
                    column.push(chunk)
        self._rows += batch.num_rows

    def finish(self) -> WrittenFile:
        """Flush all pages, then write the descriptor, column metadata and footer."""
        if self._finished is not None:
            return self._finished
        with self.out.overlapped():
            for column in self._top:
                column.finish()
        out = self.out
        descriptor = file_pb2.FileDescriptor(
            schema=self.schema.to_proto_schema(), length=self._rows
        ).SerializeToString()
        global_buffers = [(out.pos, out.write(descriptor))]
        column_meta_start = out.pos
        positions = []
        for column in self.columns:
            meta = container.column_metadata(column.pages)
            positions.append((out.pos, out.write(meta)))
        cmo_table_start = out.pos
        out.write(np.array(positions, dtype="<u8").reshape(-1).tobytes())
        gbo_table_start = out.pos
        out.write(np.array(global_buffers, dtype="<u8").reshape(-1).tobytes())
        if self.version == "2.0":
            major, minor = container.V2_0_FOOTER_VERSION
        else:
            major, minor = (int(x) for x in self.version.split("."))
        footer = container.Footer(
            column_meta_start,
            cmo_table_start,
            gbo_table_start,
            len(global_buffers),
            len(self.columns),
            major,
            minor,
        )
        out.write(footer.encode())
        ids = tuple(c.field.id for c in self.columns)
        self._finished = WrittenFile(
            num_rows=self._rows,
            fields=ids,
            column_indices=tuple(range(len(ids))),
            size_bytes=out.pos,
            major=container.manifest_version(footer)[0],
            minor=container.manifest_version(footer)[1],
        )
        return self._finished
