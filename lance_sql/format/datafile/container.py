"""The Lance v2 file container: footer, offset tables, column metadata (all versions).

Layout::

    [data buffers, 64-byte aligned][global buffers][column metadata protobufs]
    [CMO table: N x (u64 pos, u64 size)][GBO table: G x (u64 pos, u64 size)][footer, 40 bytes]

The footer is ``u64 column_meta_start, u64 cmo_table_start, u64 gbo_table_start,
u32 num_global_buffers, u32 num_columns, u16 major, u16 minor, b"LANC"``. Global buffer 0
holds the ``FileDescriptor`` (schema + row count). pylance writes file format 2.0 with the
footer version 0.3 (manifests record it as 2/0), 2.1 as 2.1 and so on.

Everything here validates what it parses: a bad offset, size or protobuf raises
:class:`FormatError` naming the file, never an IndexError or DecodeError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.pb import encodings_v2_0_pb2 as enc
from lance_sql.format.pb import file2_pb2, file_pb2

MAGIC = b"LANC"
FOOTER_SIZE = 40
PAGE_ALIGNMENT = 64
_FOOTER = struct.Struct("<QQQIIHH4s")

ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
V21_PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"
V23_PLANAR_LAYOUT_URL = "/lance.encodings23.PlanarLayout"

# (major, minor) in the footer -> the version name manifests and users know.
_VERSION_NAMES = {
    (0, 3): "2.0",
    (2, 0): "2.0",
    (2, 1): "2.1",
    (2, 2): "2.2",
    (2, 3): "2.3",
}
V2_0_FOOTER_VERSION = (0, 3)  # what pylance writes for 2.0; the manifest says 2/0
V2_0_MANIFEST_VERSION = (2, 0)


@dataclass(frozen=True)
class Footer:
    """The fixed-size footer of a Lance file: where its metadata sections start."""
    column_meta_start: int
    cmo_table_start: int
    gbo_table_start: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    def encode(self) -> bytes:
        return _FOOTER.pack(
            self.column_meta_start,
            self.cmo_table_start,
            self.gbo_table_start,
            self.num_global_buffers,
            self.num_columns,
            self.major,
            self.minor,
            MAGIC,
        )


def version_name(major: int, minor: int) -> str:
    """Human name of a footer version pair (``"2.0"`` for both 0.3 and 2.0)."""
    if (major, minor) in _VERSION_NAMES:
        return _VERSION_NAMES[(major, minor)]
    if major == 0:
        return f"legacy {major}.{minor}"
    return f"{major}.{minor}"


def parse_footer(raw: bytes | memoryview, file_size: int, path: str) -> Footer:
    """Decode and bounds-check the 40-byte footer of a file of ``file_size`` bytes."""
    if len(raw) != FOOTER_SIZE:
        raise FormatError(f"{path}: file is too small to be a Lance file ({file_size} bytes)")
    cms, cmo, gbo, ngb, ncol, major, minor, magic = _FOOTER.unpack(raw)
    if magic != MAGIC:
        raise FormatError(f"{path}: not a Lance file (bad magic {bytes(magic)!r} at the end)")
    meta_end = file_size - FOOTER_SIZE
    if not (cms <= cmo <= gbo <= meta_end):
        raise FormatError(
            f"{path}: corrupt footer (column metadata at {cms}, offset tables at {cmo} and "
            f"{gbo}, footer at {meta_end})"
        )
    if cmo + 16 * ncol > gbo or gbo + 16 * ngb > meta_end:
        raise FormatError(
            f"{path}: corrupt footer ({ncol} columns / {ngb} global buffers do not fit "
            f"their offset tables)"
        )
    return Footer(cms, cmo, gbo, ngb, ncol, major, minor)


READABLE_FOOTER_VERSIONS = {(0, 3), (2, 0), (2, 1), (2, 2), (2, 3)}


def check_readable_version(footer: Footer, path: str) -> None:
    """Raise :class:`UnsupportedFeatureError` unless we can read the file's version.

    2.0, 2.1 and 2.2 are read; 2.3 files open (their unsupported page layouts are refused
    column by column, naming the encoding).
    """
    pair = (footer.major, footer.minor)
    if pair in READABLE_FOOTER_VERSIONS:
        return
    name = version_name(*pair)
    if footer.major == 0:
        raise UnsupportedFeatureError(
            f"{path} is Lance file format {name}; lance_sql reads 2.0, 2.1 and 2.2"
        )
    raise UnsupportedFeatureError(
        f"{path} has unknown Lance file format version {name}; lance_sql reads 2.0, 2.1 and 2.2"
    )


def manifest_version(footer: Footer) -> tuple[int, int]:
    """The (major, minor) a manifest records for a file with this footer (2.0 is 0.3 inside)."""
    pair = (footer.major, footer.minor)
    return V2_0_MANIFEST_VERSION if pair == V2_0_FOOTER_VERSION else pair


@dataclass(frozen=True)
class PageInfo:
    """One page of a column: its row count, buffers and (2.0) array encoding."""

    length: int
    priority: int
    buffers: tuple[tuple[int, int], ...]  # (absolute offset, size)
    encoding_url: str
    encoding: enc.ArrayEncoding | None  # parsed when encoding_url is the 2.0 one
    encoding_value: bytes = b""  # the raw Any value (2.1+ page layouts are parsed later)


@dataclass(frozen=True)
class ColumnInfo:
    """A column's pages plus the cumulative first row of each page (``row_starts[-1]`` = rows)."""

    index: int
    pages: tuple[PageInfo, ...]
    buffers: tuple[tuple[int, int], ...]
    encoding_url: str
    encoding_value: bytes
    row_starts: np.ndarray


def _parse(msg_cls, data: bytes | memoryview, what: str, path: str):
    msg = msg_cls()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RecursionError, ValueError) as exc:
        raise FormatError(f"{path}: corrupt {what}: {exc}") from exc
    return msg


def _unpack_encoding(encoding: file2_pb2.Encoding, what: str, path: str) -> tuple[str, bytes]:
    kind = encoding.WhichOneof("location")
    if kind == "direct":
        any_msg = _parse(any_pb2.Any, encoding.direct.encoding, what, path)
        return any_msg.type_url, any_msg.value
    if kind == "indirect":
        raise UnsupportedFeatureError(f"{path}: {what} uses a deferred (indirect) encoding")
    raise FormatError(f"{path}: {what} has no encoding")


def _check_buffers(
    offsets: list[int], sizes: list[int], limit: int, what: str, path: str
) -> tuple[tuple[int, int], ...]:
    if len(offsets) != len(sizes):
        raise FormatError(
            f"{path}: {what} has {len(offsets)} buffer offsets but {len(sizes)} sizes"
        )
    for off, size in zip(offsets, sizes, strict=True):
        if off + size > limit:
            raise FormatError(
                f"{path}: {what} has a buffer at {off} of {size} bytes past the data "
                f"region ({limit} bytes)"
            )
    return tuple(zip(offsets, sizes, strict=True))


def read_offset_table(
    region: bytes | memoryview, start: int, count: int, limit: int, what: str, path: str
) -> list[tuple[int, int]]:
    """Decode ``count`` (pos, size) pairs at ``start`` of ``region``; each must end by ``limit``."""
    table = np.frombuffer(region, dtype="<u8", count=2 * count, offset=start).reshape(count, 2)
    pos, size = table[:, 0], table[:, 1]
    # the sum may wrap in uint64, so compare against what is left after pos instead
    if np.any(pos > limit) or np.any(size > limit - np.minimum(pos, limit)):
        raise FormatError(f"{path}: corrupt {what} table (an entry points past its region)")
    return [(int(p), int(s)) for p, s in zip(pos.tolist(), size.tolist(), strict=True)]


def parse_column(data: bytes | memoryview, index: int, data_limit: int, path: str) -> ColumnInfo:
    """Parse one ColumnMetadata; page buffers must lie in ``[0, data_limit)``."""
    what = f"column {index} metadata"
    meta = _parse(file2_pb2.ColumnMetadata, data, what, path)
    url, value = _unpack_encoding(meta.encoding, f"column {index} encoding", path)
    col_buffers = _check_buffers(
        list(meta.buffer_offsets), list(meta.buffer_sizes), data_limit, what, path
    )
    pages = []
    lengths = np.zeros(len(meta.pages) + 1, dtype=np.uint64)
    for i, page in enumerate(meta.pages):
        pwhat = f"column {index} page {i}"
        bufs = _check_buffers(
            list(page.buffer_offsets), list(page.buffer_sizes), data_limit, pwhat, path
        )
        purl, pvalue = _unpack_encoding(page.encoding, f"{pwhat} encoding", path)
        array_enc = None
        if purl == ARRAY_ENCODING_URL:
            array_enc = _parse(enc.ArrayEncoding, pvalue, f"{pwhat} encoding", path)
        pages.append(PageInfo(page.length, page.priority, bufs, purl, array_enc, pvalue))
        lengths[i + 1] = page.length
    if lengths.size and int(lengths.max(initial=0)) >= 1 << 48:
        raise FormatError(f"{path}: {what} has an implausible page length")
    row_starts = np.cumsum(lengths, dtype=np.uint64).astype(np.int64)
    return ColumnInfo(index, tuple(pages), col_buffers, url, value, row_starts)


def parse_file_descriptor(data: bytes | memoryview, path: str) -> file_pb2.FileDescriptor:
    """Decode the FileDescriptor (schema and row count) held in the first global buffer."""
    return _parse(file_pb2.FileDescriptor, data, "file descriptor", path)


def pack_any(type_url: str, msg) -> bytes:
    """Serialize ``msg`` as a google.protobuf.Any with Lance's short type URL."""
    return any_pb2.Any(type_url=type_url, value=msg.SerializeToString()).SerializeToString()


def column_encoding_bytes() -> bytes:
    """The column-level encoding every 2.0 column carries: ColumnEncoding{values: Empty}."""
    return pack_any(COLUMN_ENCODING_URL, enc.ColumnEncoding(values=empty_pb2.Empty()))


def column_metadata(pages: list[file2_pb2.ColumnMetadata.Page]) -> bytes:
    """A column's serialized ColumnMetadata for ``pages``."""
    meta = file2_pb2.ColumnMetadata(pages=pages)
    meta.encoding.direct.encoding = column_encoding_bytes()
    return meta.SerializeToString()


def page_metadata(
    buffers: list[tuple[int, int]], length: int, priority: int, encoding: enc.ArrayEncoding
) -> file2_pb2.ColumnMetadata.Page:
    """Metadata of one 2.0 page: its buffers, row count, priority and array encoding."""
    return _page(buffers, length, priority, pack_any(ARRAY_ENCODING_URL, encoding))


def page_metadata_v21(
    buffers: list[tuple[int, int]], length: int, priority: int, layout
) -> file2_pb2.ColumnMetadata.Page:
    """Page metadata of a 2.1+ page (``layout`` is a ``lance.encodings21.PageLayout``)."""
    return _page(buffers, length, priority, pack_any(V21_PAGE_LAYOUT_URL, layout))


def _page(buffers: list[tuple[int, int]], length: int, priority: int,
          encoding: bytes) -> file2_pb2.ColumnMetadata.Page:
    page = file2_pb2.ColumnMetadata.Page(
        buffer_offsets=[b[0] for b in buffers],
        buffer_sizes=[b[1] for b in buffers],
        length=length,
        priority=priority,
    )
    page.encoding.direct.encoding = encoding
    return page


def page_spans(
    row_starts: np.ndarray, starts: np.ndarray, ends: np.ndarray, where: str
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """For sorted, disjoint row ranges: (page, starts, ends within that page) per touched page.

    ``row_starts`` holds each page's first row plus the total at the end (ColumnInfo's).
    """
    if int(ends[-1]) > int(row_starts[-1]):
        raise FormatError(
            f"{where} has {int(row_starts[-1])} rows, row {int(ends[-1]) - 1} was asked for"
        )
    first = int(np.searchsorted(row_starts, starts[0], "right")) - 1
    last = int(np.searchsorted(row_starts, ends[-1] - 1, "right")) - 1
    for p in range(first, last + 1):
        p0, p1 = int(row_starts[p]), int(row_starts[p + 1])
        if p1 == p0:
            continue
        i0 = int(np.searchsorted(ends, p0, "right"))
        i1 = int(np.searchsorted(starts, p1, "left"))
        if i1 <= i0:
            continue
        yield p, np.maximum(starts[i0:i1], p0) - p0, np.minimum(ends[i0:i1], p1) - p0
