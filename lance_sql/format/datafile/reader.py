"""Read Lance data files (file formats 2.0, 2.1 and 2.2) into Arrow arrays.

Reads are driven by sorted, disjoint row ranges: ``read`` asks for one range, ``take``
for the runs of its sorted unique rows. Each column maps the ranges onto its pages and
decodes one span per touched page, reading only the bytes that span needs. A list column
turns its row ranges into item ranges for the next column, so nested reads stay
proportional to what was asked for. Arrays come back in the *table's* types (the caller's
``LanceField``s); fields that this file does not hold come back as nulls.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError, InvalidInputError, LanceError, UnsupportedFeatureError
from lance_sql.format.datafile import container, point, point_pages
from lance_sql.format.datafile.decode_v2_0 import (
    PageContext,
    check_buffer_references,
    decode,
    end_offsets,
)
from lance_sql.format.datafile.decode_v2_1 import (
    FieldReader,
    LeafColumn,
    column_fields,
    elements_per_row,
    owns_column,
    read_type,
)
from lance_sql.format.datafile.source import RandomAccessSource, SourceReads
from lance_sql.format.pb import encodings_v2_0_pb2 as enc
from lance_sql.format.schema import LanceField, LanceSchema

_V21_LAYOUT = container.V21_PAGE_LAYOUT_URL.rpartition("/")[2]
COALESCE_BYTES = 256 * 1024  # read through gaps smaller than this; split reads at larger ones
UNEXPECTED = (
    pa.ArrowException,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    OverflowError,
    RecursionError,
    struct.error,
    DecodeError,
)  # only a safety net: the decoders validate explicitly and raise FormatError themselves


def _storage_type(t: pa.DataType) -> pa.DataType:
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def _range_indices(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each range, vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    before = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop empty ranges and join touching ones (inputs sorted and disjoint)."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size > 1:
        cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        starts = starts[np.r_[0, cut]]
        ends = ends[np.r_[cut - 1, len(ends) - 1]]
    return starts, ends


def _concat(pieces: list[pa.Array], dtype: pa.DataType) -> pa.Array:
    if not pieces:
        return pa.array([], dtype)
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def _items_per_row(schema: LanceSchema) -> list[int]:
    """Per 2.1+ column (one per leaf, in schema order), the entries a row of the file puts
    in it (see :func:`elements_per_row`)."""
    return [elements_per_row(top, leaf.id)
            for top in schema.fields for leaf in column_fields(top)]


class LanceFileReader:
    """A parsed Lance file: footer, column metadata and FileDescriptor are read up front.

    2.0 files go through the 2.0 decoders below; 2.1+ files (one column per leaf) through
    :class:`~lance_sql.format.datafile.decode_v2_1.FieldReader`.
    """

    def __init__(self, source: RandomAccessSource) -> None:
        self.source = source
        self.path = source.path
        # checked reads; page decoders also read many ranges at once through it
        self._read = SourceReads(source)
        try:
            self._open()
        except LanceError:
            raise
        except UNEXPECTED as exc:
            raise FormatError(f"{self.path}: corrupt file metadata: {exc}") from exc

    # ------------------------------------------------------------------ opening
    def _open(self) -> None:
        size = self.source.size
        path = self.path
        if size < container.FOOTER_SIZE:
            raise FormatError(f"{path}: file is too small to be a Lance file ({size} bytes)")
        footer = container.parse_footer(
            self._read(size - container.FOOTER_SIZE, container.FOOTER_SIZE), size, path
        )
        container.check_readable_version(footer, path)
        self.footer_version = (footer.major, footer.minor)
        self.major, self.minor = container.manifest_version(footer)
        self._structural = (self.major, self.minor) >= (2, 1)  # one column per leaf
        cms = footer.column_meta_start
        region = memoryview(self._read(cms, size - container.FOOTER_SIZE - cms))
        cmo = container.read_offset_table(
            region, footer.cmo_table_start - cms, footer.num_columns, size, "column offset", path
        )
        gbo = container.read_offset_table(
            region, footer.gbo_table_start - cms, footer.num_global_buffers, size, "global", path
        )
        for pos, length in cmo:
            if pos < cms or pos + length > footer.cmo_table_start:
                raise FormatError(f"{path}: column metadata entry outside the metadata region")
        for pos, length in gbo:
            if pos + length > cms:
                raise FormatError(f"{path}: global buffer at {pos} overlaps the metadata")
        if not gbo:
            raise FormatError(f"{path}: no global buffers, so no file descriptor")
        self._global_buffers = tuple(gbo)
        # what the parsed metadata was read from (caches weigh open files by it)
        self.metadata_bytes = len(region) + container.FOOTER_SIZE + gbo[0][1]
        descriptor = container.parse_file_descriptor(self._read(*gbo[0]), path)
        self.num_rows = int(descriptor.length)
        try:
            self.schema = LanceSchema.from_protos(
                descriptor.schema.fields, descriptor.schema.metadata
            )
        except FormatError as exc:
            raise FormatError(f"{path}: bad schema in the file descriptor: {exc}") from exc
        self._columns = [
            container.parse_column(region[pos - cms : pos - cms + length], i, cms, path)
            for i, (pos, length) in enumerate(cmo)
        ]
        self._check_buffer_layout()
        if self._structural:
            self._check_leaf_row_counts()
        else:
            self._check_row_counts()
        self._checked: set[int] = set()
        self._checked_pages: set[tuple[int, int]] = set()
        self._list_bases: dict[int, np.ndarray] = {}
        self._leaf_columns: dict[tuple[int, pa.DataType], LeafColumn] = {}
        # (field id, column) -> (the field, its leaf column: None when _plain refuses it)
        self._plain_columns: dict[tuple[int, int], tuple[LanceField, LeafColumn | None]] = {}
        # (field id, column, blob descriptions) -> (the field, point_column's answer)
        self._point_columns: dict[tuple[int, int, bool],
                                  tuple[LanceField, LeafColumn | None]] = {}

    def _check_buffer_layout(self) -> None:
        """Page buffers start on 64-byte boundaries and never overlap.

        Every Lance 2.x writer aligns page buffers to 64 bytes. Checking that (and that
        no two buffers overlap) is cheap and turns most corrupted buffer offsets into an
        error instead of silently decoding some other column's bytes.
        """
        spans = [b for c in self._columns for p in c.pages for b in p.buffers if b[1]]
        spans += [b for c in self._columns for b in c.buffers if b[1]]
        if not spans:
            return
        table = np.array(spans, dtype=np.uint64)
        if np.any(table[:, 0] % container.PAGE_ALIGNMENT):
            raise FormatError(f"{self.path}: a page buffer is not 64-byte aligned (corrupt offset)")
        extra = [b for b in self._global_buffers if b[1]]
        if extra:
            table = np.concatenate([table, np.array(extra, dtype=np.uint64)])
        table = table[np.argsort(table[:, 0], kind="stable")]
        if np.any(table[:-1, 0] + table[:-1, 1] > table[1:, 0]):
            raise FormatError(f"{self.path}: page buffers overlap (corrupt offset or size)")

    def _check_row_counts(self) -> None:
        """Top-level columns must hold the descriptor's row count.

        A 2.0 file has one column per schema field in pre-order; when the counts agree, a
        corrupt row count is caught here rather than on some later read.
        """
        fields = list(self.schema.walk())
        if len(fields) != len(self._columns):
            return  # e.g. packed structs: leave it to the per-read checks
        top = {f.id for f in self.schema.fields}
        for field, column in zip(fields, self._columns, strict=True):
            rows = int(column.row_starts[-1])
            if field.id in top and rows != self.num_rows:
                raise FormatError(
                    f"{self.path}: column {column.index} (field {field.name!r}) has {rows} "
                    f"rows but the file descriptor says {self.num_rows}"
                )

    def _check_leaf_row_counts(self) -> None:
        """Every 2.1+ column (one per leaf) holds the descriptor's row count.

        Checked when the file is opened, as for 2.0, so a row count that is not backed by
        pages fails even reads that decode no column (counts, row addresses).
        """
        per_row = _items_per_row(self.schema)
        for column in self._columns:
            rows = int(column.row_starts[-1])
            layouts = {p.encoding_url.rpartition("/")[2] for p in column.pages}
            items = per_row[column.index] if column.index < len(per_row) else 1
            if layouts == {_V21_LAYOUT} and rows != self.num_rows * items:  # else: on read
                raise FormatError(
                    f"{self.path}: column {column.index} has {rows} rows but the file "
                    f"descriptor says {self.num_rows}"
                )

    @property
    def num_columns(self) -> int:
        return len(self._columns)

    def column_page_bytes(self) -> list[int]:
        """Bytes in each column's pages (its stored data, after compression)."""
        return [sum(size for page in col.pages for _, size in page.buffers)
                for col in self._columns]

    def _column(self, index: int) -> container.ColumnInfo:
        if not 0 <= index < len(self._columns):
            raise FormatError(
                f"{self.path}: column {index} does not exist ({len(self._columns)} columns)"
            )
        info = self._columns[index]
        if index not in self._checked:
            where = f"{self.path}: column {index}"
            if info.encoding_url != container.COLUMN_ENCODING_URL:
                raise UnsupportedFeatureError(f"{where} has column encoding {info.encoding_url!r}")
            col_enc = enc.ColumnEncoding()
            try:
                col_enc.ParseFromString(info.encoding_value)
            except DecodeError as exc:
                raise FormatError(f"{where}: corrupt column encoding") from exc
            which = col_enc.WhichOneof("column_encoding")
            if which not in (None, "values"):
                raise UnsupportedFeatureError(f"{where} uses the {which!r} column encoding")
            self._checked.add(index)
        return info

    def _leaf_column(self, index: int, leaf: LanceField, leaf_type: pa.DataType,
                     elements: int = 1) -> LeafColumn:
        """The decoder of a 2.1+ leaf column, checked to hold ``elements`` entries for
        every row of the file (more than one under fixed-size lists of structs, which only
        the field reader reads: row positions are not entry positions there)."""
        column = self._leaf_columns.get((index, leaf_type))
        if column is None:
            info = self._column(index)
            column = LeafColumn(info, self._read, leaf_type,
                                f"{self.path}: column {index} (field {leaf.name!r})")
        rows = column.num_rows
        if rows != self.num_rows * elements:
            each = "" if elements == 1 else f" of {elements} entries"
            raise FormatError(f"{column.where} has {rows} rows, the file {self.num_rows}{each}")
        self._leaf_columns[(index, leaf_type)] = column
        return column

    def _context(self, info: container.ColumnInfo, p: int) -> PageContext:
        page = info.pages[p]
        where = f"{self.path}: column {info.index} page {p}"
        if page.encoding is None:
            raise UnsupportedFeatureError(f"{where} has encoding {page.encoding_url!r}, not 2.0")
        ctx = PageContext(self._read, page.buffers, info.buffers, self._global_buffers, where)
        if (info.index, p) not in self._checked_pages:
            check_buffer_references(ctx, page.encoding, len(page.buffers))
            self._checked_pages.add((info.index, p))
        return ctx

    # ------------------------------------------------------------------ public API
    def read(
        self,
        fields: Sequence[LanceField],
        column_indices: Mapping[int, int],
        *,
        offset: int = 0,
        length: int | None = None,
        blob_descriptions: bool = False,
    ) -> list[pa.Array]:
        """Rows ``[offset, offset+length)`` of each field (length defaults to the rest).

        Blob columns: a 2.2 blob (``lance.blob.v2``) always comes back as its descriptions
        (``BLOB_V2_DESCRIPTION``); a legacy blob column as its bytes, or with
        ``blob_descriptions`` as position/size descriptions. ``LanceField.to_scan_arrow``
        gives the types pylance's scanner returns, which ``blob_descriptions=True`` matches.
        """
        if length is None:
            length = self.num_rows - offset
        if offset < 0 or length < 0 or offset + length > self.num_rows:
            raise InvalidInputError(
                f"{self.path}: rows {offset}..{offset + length} out of range ({self.num_rows} rows)"
            )
        starts = np.array([offset], np.int64)
        ends = np.array([offset + length], np.int64)
        return self._guarded(fields, column_indices, starts, ends, None, blob_descriptions)

    def page_bounds(self, field: LanceField, column_indices: Mapping[int, int]
                    ) -> np.ndarray | None:
        """Row boundaries of the pages of ``field`` (``0``, the end of each page), when it
        is a leaf stored in one column of a 2.1+ file; else None. Reading page by page
        (ranges within these) decodes the same pages without joining their values."""
        index = column_indices.get(field.id)
        if not self._structural or index is None or field.children or \
                not owns_column(field):
            return None
        info = self._column(index)
        if int(info.row_starts[-1]) != self.num_rows:
            return None  # refused when read
        return info.row_starts

    def read_short(self, fields: Sequence[LanceField], column_indices: Mapping[int, int],
                   offset: int, length: int) -> list[pa.Array]:
        """:meth:`read` of a short run of rows (an index page, say): leaf columns of 2.1+
        files decode just the chunks holding it, in one call (:func:`point.read_run`)."""
        if offset < 0 or length < 0 or offset + length > self.num_rows:
            raise InvalidInputError(
                f"{self.path}: rows {offset}..{offset + length} out of range ({self.num_rows} rows)"
            )
        starts = np.array([offset], np.int64)
        ends = np.array([offset + length], np.int64)
        run = self._structural and 0 < length <= point.MAX_RUN
        return self._guarded(fields, column_indices, starts, ends, None, run=run)

    def read_runs(self, field: LanceField, column_indices: Mapping[int, int],
                  starts: np.ndarray, stops: np.ndarray) -> list[pa.Array]:
        """:meth:`read_short` of one field for many short runs ``[starts[i], stops[i])``
        (sorted, disjoint, non-empty: pages of an index): a 2.1+ leaf column reads the
        chunks of all runs in a page together and decodes them in one call
        (:func:`point.read_runs`); other runs are read one by one."""
        starts = np.asarray(starts, np.int64)
        stops = np.asarray(stops, np.int64)
        if starts.size and (int(starts.min()) < 0 or int(stops.max()) > self.num_rows
                            or bool(np.any(stops <= starts))
                            or bool(np.any(starts[1:] < stops[:-1]))):
            raise InvalidInputError(f"{self.path}: runs out of range or not sorted and "
                                    f"disjoint ({self.num_rows} rows)")
        got: list[pa.Array | None] = [None] * starts.size
        index = column_indices.get(field.id)
        if self._structural and index is not None and owns_column(field) and \
                not field.children and not field.is_legacy_blob and not field.is_blob_v2 \
                and field.logical_type != "json" and read_type(field, False) == field.arrow_type:
            try:
                column = self._leaf_column(index, field, field.arrow_type)
                got = point.read_runs(column, starts, stops)
            except LanceError:
                raise
            except UNEXPECTED as exc:
                raise FormatError(f"{self.path}: corrupt data: {exc}") from exc
        return [a if a is not None else
                self.read_short([field], column_indices, s, e - s)[0]
                for a, s, e in zip(got, starts.tolist(), stops.tolist(), strict=True)]

    def take(
        self, fields: Sequence[LanceField], column_indices: Mapping[int, int], rows: np.ndarray,
        *, blob_descriptions: bool = False,
    ) -> list[pa.Array]:
        """Rows at ``rows`` (any order, repeats allowed); only pages holding them are read.

        ``blob_descriptions``: as in :meth:`read`.
        """
        rows = np.asarray(rows)
        if rows.size == 1 and rows.dtype.kind in "iu":  # a point take: no sorting, no runs
            row = int(rows.reshape(-1)[0])
            if row < 0 or row >= self.num_rows:
                raise InvalidInputError(
                    f"{self.path}: row offsets out of range ({self.num_rows} rows)")
            one = np.array([row], np.int64)
            return self._guarded(fields, column_indices, one, one + 1, None,
                                 blob_descriptions, one if self._structural else None)
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise InvalidInputError(
                f"{self.path}: take needs integer row offsets, got {rows.dtype}"
            )
        rows = rows.astype(np.int64, copy=False).reshape(-1)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.num_rows):
            raise InvalidInputError(f"{self.path}: row offsets out of range ({self.num_rows} rows)")
        if rows.size < 2 or bool(np.all(rows[1:] > rows[:-1])):  # sorted, no repeats
            unique, inverse = rows, np.arange(rows.size)
        else:
            unique, inverse = np.unique(rows, return_inverse=True)
        if unique.size <= 1:
            starts, ends = unique, unique + 1
        else:
            cut = np.flatnonzero(np.diff(unique) != 1) + 1
            starts = unique[np.concatenate(([0], cut))]
            ends = unique[np.concatenate((cut - 1, [unique.size - 1]))] + 1
        reorder = None
        if unique.size != rows.size or (rows.size > 1 and not np.array_equal(unique, rows)):
            reorder = pa.array(inverse.reshape(-1).astype(np.int64))
        # small takes: the point path; larger ones too for compressed chunks (see point)
        few = unique if self._structural and unique.size else None
        return self._guarded(fields, column_indices, starts, ends, reorder, blob_descriptions,
                             few)

    def search_sorted(self, field: LanceField, column_indices: Mapping[int, int],
                      start: int, stop: int, key: int | bytes,
                      ends: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """Rows ``[lo, hi)`` of ``[start, stop)`` where integer ``field`` (string / binary
        for a ``bytes`` key), ascending there (an index page), equals ``key``: a binary
        search of single values (:func:`point.search_sorted`); None when the column is
        not searchable that way. ``ends``: the run's first and last values when known
        (they place the first probe)."""
        return self._plain(field, column_indices, start, stop, point.search_sorted, key,
                           ends)

    def ints_at(self, field: LanceField, column_indices: Mapping[int, int],
                start: int, stop: int) -> list[int] | None:
        """The values of rows ``[start, stop)`` (a few) of integer ``field`` as Python
        ints, read one by one (:func:`point.ints_at`); None when the column does not
        allow that (the caller takes them)."""
        return self._plain(field, column_indices, start, stop, point.ints_at)

    def _plain(self, field: LanceField, column_indices: Mapping[int, int], start: int,
               stop: int, how, *args):  # fmt: skip
        index = column_indices.get(field.id)
        if index is None:
            return None
        # the field's checks and leaf column, kept for the same field object (an index's
        # searches pass the same fields each time; written whole, threads share it)
        kept = self._plain_columns.get((field.id, index))
        column: LeafColumn | None = None  # (made below when not kept: its errors typed)
        if kept is not None and kept[0] is field:
            column = kept[1]
            if column is None:
                return None  # refused before
        elif not (self._structural and not field.children and owns_column(field) and
                  read_type(field, False) == field.arrow_type):
            self._plain_columns[(field.id, index)] = (field, None)
            return None
        if start < 0 or stop > self.num_rows:
            raise InvalidInputError(
                f"{self.path}: rows {start}..{stop} out of range ({self.num_rows} rows)")
        try:
            if column is None:
                column = self._leaf_column(index, field, field.arrow_type)
                self._plain_columns[(field.id, index)] = (field, column)
            return how(column, start, stop, *args)
        except LanceError:
            raise
        except UNEXPECTED as exc:
            raise FormatError(f"{self.path}: corrupt data: {exc}") from exc

    def _guarded(self, fields, column_indices, starts, ends, reorder,
                 blobs: bool = False, few: np.ndarray | None = None, run: bool = False
                 ) -> list[pa.Array]:  # fmt: skip
        """``few``: the rows of a small take, which leaf columns take on the point path;
        ``run``: the one range is short, leaf columns read it on that path too."""
        try:
            rows = self.num_rows
            out = []
            for f in fields:
                got = None
                if few is not None or run:
                    got = self._take_point(f, column_indices, few, blobs, starts, ends)
                out.append(got if got is not None else
                           self._read_field(f, column_indices, starts, ends, rows, blobs))
            if reorder is not None:
                out = [a.take(reorder) for a in out]
            return out
        except LanceError:
            raise
        except UNEXPECTED as exc:
            raise FormatError(f"{self.path}: corrupt data: {exc}") from exc

    def point_column(self, field: LanceField, colmap: Mapping[int, int],
                     blobs: bool = True) -> LeafColumn | None:
        """The leaf column of ``field`` when its rows may be taken through :mod:`point`
        (a 2.1+ leaf field read as its own type); None otherwise."""
        index = colmap.get(field.id)
        if index is None:
            return None
        # kept for the same field object (a point lookup asks the same fields each time;
        # written whole, threads share it)
        kept = self._point_columns.get((field.id, index, blobs))
        if kept is not None and kept[0] is field:
            return kept[1]
        column = None
        if self._structural and owns_column(field) and not field.children and \
                not field.is_legacy_blob and not field.is_blob_v2 and \
                field.logical_type != "json":
            leaf_type = read_type(field, blobs)
            if leaf_type == field.arrow_type:
                column = self._leaf_column(index, field, leaf_type)
        self._point_columns[(field.id, index, blobs)] = (field, column)
        return column

    def field_columns(self, field: LanceField, colmap: Mapping[int, int]
                      ) -> list[tuple[LanceField, LeafColumn]] | None:
        """The leaves of ``field`` that own a column (see :func:`column_fields`) with
        their columns, when every one of them is in this 2.1+ file and its rows are the
        field's rows (no fixed-size lists of structs on the way), and none is a blob or
        JSON (read as descriptions, or refused); None otherwise. What a field's rows are
        built from with :func:`build_field` after decoding its leaves' pages."""
        if not self._structural or any(f.is_legacy_blob or f.is_blob_v2 or
                                       f.logical_type == "json" for f in field.walk()):
            return None
        out = []
        for leaf in column_fields(field):
            index = colmap.get(leaf.id)
            if index is None or elements_per_row(field, leaf.id) != 1:
                return None
            out.append((leaf, self._leaf_column(index, leaf, read_type(leaf, True))))
        return out

    def _take_point(self, field: LanceField, colmap: Mapping[int, int],
                    rows: np.ndarray | None, blobs: bool, starts: np.ndarray,
                    ends: np.ndarray) -> pa.Array | None:
        """A 2.1+ leaf field's ``rows`` (None: its one range ``starts[0]..ends[0]``)
        through :mod:`point` (None: the general path)."""
        column = self.point_column(field, colmap, blobs)
        if column is None:
            return None
        if rows is None:
            return point.read_run(column, int(starts[0]), int(ends[0]))
        if rows.size > point.MAX_ROWS and not point.scattered(rows.size, starts.size):
            return point.take_leaf(column, rows, compressed_only=True)
        page_of = column.info.row_starts.searchsorted([rows[0], rows[-1]], "right")
        if page_of[0] < page_of[1]:  # rows in several pages: taken in one pass
            together = point_pages.take_pages([(column, rows)])
            if together is not None:
                return together
        return point.take_leaf(column, rows)

    def take_row(self, fields: Sequence[LanceField], column_indices: Mapping[int, int],
                 row: int, *, blob_descriptions: bool = False) -> list[pa.Array]:
        """:meth:`take` of the one row ``row``, every field in one pass: each 2.1+ leaf
        field's value through :func:`point.take_row` (no row arrays), the others by the
        general path."""
        if row < 0 or row >= self.num_rows:
            raise InvalidInputError(
                f"{self.path}: row offsets out of range ({self.num_rows} rows)")
        one = np.array([row], np.int64)
        if not self._structural:
            return self._guarded(fields, column_indices, one, one + 1, None, blob_descriptions)
        try:
            out = []
            for f in fields:
                column = self.point_column(f, column_indices, blob_descriptions)
                got = point.take_row(column, row) if column is not None else None
                out.append(got if got is not None else self._read_field(
                    f, column_indices, one, one + 1, self.num_rows, blob_descriptions))
            return out
        except LanceError:
            raise
        except UNEXPECTED as exc:
            raise FormatError(f"{self.path}: corrupt data: {exc}") from exc

    # ------------------------------------------------------------------ fields
    def _column_for(self, field: LanceField, colmap: Mapping[int, int], rows: int):
        """The field's column, checked to hold exactly ``rows`` values (None if absent)."""
        index = colmap.get(field.id)
        if index is None:
            return None
        info = self._column(index)
        if int(info.row_starts[-1]) != rows:
            raise FormatError(
                f"{self.path}: column {index} (field {field.name!r}) has "
                f"{int(info.row_starts[-1])} values where {rows} were expected"
            )
        return info

    def _read_field(
        self,
        field: LanceField,
        colmap: Mapping[int, int],
        starts: np.ndarray,
        ends: np.ndarray,
        rows: int,
        blobs: bool = False,
    ) -> pa.Array:
        """Ranges of ``field``, whose column(s) hold ``rows`` values in total."""
        if self._structural:
            if int((ends - starts).sum()) == 0:
                return pa.array([], read_type(field, blobs))
            # (made per read: kept, it would hold this reader in a cycle, and an evicted
            # file's descriptor would stay open until a garbage collection)
            return FieldReader(self._leaf_column, self.path).read(field, colmap, starts,
                                                                  ends, blobs)
        dtype = field.arrow_type
        total = int((ends - starts).sum())
        if not any(f.id in colmap for f in field.walk()):
            return pa.nulls(total, dtype)
        if total == 0:
            return pa.array([], dtype)
        storage = _storage_type(dtype)
        info = self._column_for(field, colmap, rows)
        if pa.types.is_struct(storage):
            if info is not None and info.pages:
                page = info.pages[0]
                kind = page.encoding.WhichOneof("array_encoding") if page.encoding else None
                if kind == "packed_struct":  # the struct's rows in its own column
                    return self._read_leaf(info, dtype, starts, ends)
                if kind != "struct":
                    self._context(info, 0)  # names a non-2.0 page encoding
                    raise UnsupportedFeatureError(
                        f"{self.path}: column {info.index} (struct {field.name!r}) uses the "
                        f"{kind!r} encoding; only SimpleStruct is supported"
                    )
            children = [self._read_field(c, colmap, starts, ends, rows) for c in field.children]
            out = pa.Array.from_buffers(storage, total, [None], children=children)
        elif pa.types.is_list(storage) or pa.types.is_large_list(storage):
            if info is None:
                return pa.nulls(total, dtype)
            out = self._read_list(field, info, storage, colmap, starts, ends)
        else:
            if info is None:
                return pa.nulls(total, dtype)
            return self._read_leaf(info, dtype, starts, ends)
        if isinstance(dtype, pa.BaseExtensionType):
            out = pa.ExtensionArray.from_storage(dtype, out)
        return out

    def _spans(
        self, info: container.ColumnInfo, starts: np.ndarray, ends: np.ndarray
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(page, local starts, local ends) per decode, in row order.

        Ranges in one page are decoded together (one read of the span they cover) unless
        the gap between two of them holds more than ``COALESCE_BYTES`` of data; then they
        are decoded apart, so a sparse ``take`` does not read whole pages.
        """
        where = f"{self.path}: column {info.index}"
        for p, ls, le in container.page_spans(info.row_starts, starts, ends, where):
            p0, p1 = int(info.row_starts[p]), int(info.row_starts[p + 1])
            if len(ls) == 1:
                yield p, ls, le
                continue
            page_bytes = sum(size for _, size in info.pages[p].buffers)
            max_gap = COALESCE_BYTES * (p1 - p0) // max(page_bytes, 1)
            cuts = np.flatnonzero(ls[1:] - le[:-1] > max_gap) + 1
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(ls)], strict=True):
                yield p, ls[lo:hi], le[lo:hi]

    def _encoding(self, info: container.ColumnInfo, p: int) -> enc.ArrayEncoding:
        """Page ``p``'s 2.0 array encoding; a page without one is corrupt."""
        encoding = info.pages[p].encoding
        if encoding is None:
            raise FormatError(f"{self.path}: page {p} of a 2.0 column has no array encoding")
        return encoding

    def _read_leaf(
        self, info: container.ColumnInfo, dtype: pa.DataType, starts: np.ndarray, ends: np.ndarray
    ) -> pa.Array:
        pieces = []
        for p, ls, le in self._spans(info, starts, ends):
            a, b = int(ls[0]), int(le[-1])
            arr = decode(self._context(info, p), self._encoding(info, p), dtype,
                         info.pages[p].length, a, b)
            if len(ls) > 1:
                arr = arr.take(pa.array(_range_indices(ls - a, le - a)))
            pieces.append(arr)
        return _concat(pieces, dtype)

    def _item_bases(self, info: container.ColumnInfo) -> np.ndarray:
        """First item of each page of a list column (from the pages' num_items)."""
        bases = self._list_bases.get(info.index)
        if bases is None:
            counts = [0]
            for p, page in enumerate(info.pages):
                if page.encoding is None or page.encoding.WhichOneof("array_encoding") != "list":
                    self._context(info, p)  # raises Unsupported for non-2.0 pages
                    raise FormatError(
                        f"{self.path}: column {info.index} page {p} is not a list page"
                    )
                lst = page.encoding.list
                if lst.null_offset_adjustment != lst.num_items + 1:
                    raise FormatError(
                        f"{self.path}: column {info.index} page {p}: null adjustment "
                        f"{lst.null_offset_adjustment} does not match {lst.num_items} items"
                    )
                counts.append(lst.num_items)
            bases = np.cumsum(np.array(counts, dtype=np.uint64)).astype(np.int64)
            self._list_bases[info.index] = bases
        return bases

    def _read_list(
        self,
        field: LanceField,
        info: container.ColumnInfo,
        dtype: pa.DataType,
        colmap: Mapping[int, int],
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> pa.Array:
        bases = self._item_bases(info)
        lengths, valids, item_starts, item_ends = [], [], [], []
        any_null = False
        for p, ls, le in self._spans(info, starts, ends):
            page = info.pages[p]
            lst = self._encoding(info, p).list
            a, b = int(ls[0]), int(le[-1])
            ctx = self._context(info, p)
            first, page_ends, valid = end_offsets(
                ctx, lst.offsets, lst.null_offset_adjustment, page.length, a, b
            )
            if page_ends.size and int(page_ends[-1]) > lst.num_items:
                raise ctx.error(f"list offsets past the page's {lst.num_items} items")
            page_ends = page_ends.astype(np.int64)
            prev = np.empty_like(page_ends)
            prev[0] = first
            prev[1:] = page_ends[:-1]
            base = int(bases[p])
            if len(ls) > 1:
                idx = _range_indices(ls - a, le - a)
                item_starts.append(prev[ls - a] + base)
                item_ends.append(page_ends[le - a - 1] + base)
                page_ends, prev = page_ends[idx], prev[idx]
                valid = None if valid is None else valid[idx]
            else:
                item_starts.append(prev[:1] + base)
                item_ends.append(page_ends[-1:] + base)
            lengths.append(page_ends - prev)
            valids.append(valid)
            any_null |= valid is not None
        total = int((ends - starts).sum())
        row_lengths = np.concatenate(lengths)
        large = pa.types.is_large_list(dtype)
        offsets = np.zeros(total + 1, np.int64)
        np.cumsum(row_lengths, out=offsets[1:])
        if not large and offsets[-1] >= 2**31:
            raise FormatError(
                f"{self.path}: list read of {offsets[-1]} items overflows 32-bit offsets"
            )
        item_s, item_e = _merge(np.concatenate(item_starts), np.concatenate(item_ends))
        item_field = field.children[0]
        if item_s.size:
            items = self._read_field(item_field, colmap, item_s, item_e, int(bases[-1]))
        else:
            items = pa.array([], item_field.arrow_type)
        if len(items) != offsets[-1]:
            raise FormatError(f"{self.path}: list column {info.index} items do not add up")
        validity = None
        if any_null:
            mask = np.concatenate(
                [
                    np.ones(len(x), bool) if v is None else v
                    for x, v in zip(lengths, valids, strict=True)
                ]
            )
            validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
        offs = pa.py_buffer(offsets if large else offsets.astype(np.int32))
        return pa.Array.from_buffers(dtype, total, [validity, offs], children=[items])
