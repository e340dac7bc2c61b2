"""The column side of the Lance 2.1 / 2.2 writer: one column per leaf, pages cut per field.

Each top-level field buffers incoming arrays; once more than ``page_bytes`` are pending
(pylance: 8 MiB) they are split into runs of at most ``max_page_bytes``, every run is
shredded into its leaves (:mod:`shred`) and each leaf's page is encoded
(:mod:`encode_v2_2`) and written. The leaves of one field therefore always share page
boundaries, which keeps every page self-contained.

A 2.1 file is what the 2.2 writer makes within 2.1's grammar (pylance checks it): mini-block
chunks in the small framing (u16 sizes: at most 32 KiB a chunk) and no constant pages of
a repeated value (those values go to mini-block chunks); everything else is alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from lance_sql.errors import SchemaError, UnsupportedFeatureError
from lance_sql.format.datafile import container, repdef
from lance_sql.format.datafile.blocks import fixed_width_bits
from lance_sql.format.datafile.decode_v2_1 import (
    column_fields,
    elements_per_row,
    is_packed_struct,
)
from lance_sql.format.datafile.encode_miniblock import StringCompression, mini_block_page
from lance_sql.format.datafile.encode_v2_2 import (
    EncodedPage,
    constant_page,
    constant_value,
    fsst_table,
    fsst_values,
    full_zip_page,
    needs_full_zip,
    storage_type,
    values_of,
)
from lance_sql.format.datafile.pages import PageBuffer
from lance_sql.format.datafile.shred import shred
from lance_sql.format.pb import file2_pb2
from lance_sql.format.schema import LanceField

if TYPE_CHECKING:
    from lance_sql.format.datafile.writer import LanceFileWriter


def encode_page(rep, def_, layers, values_arr: pa.Array, num_rows: int,
                compression: StringCompression | None = None, minor: int = 2) -> EncodedPage:
    """Pick the layout for one page of a leaf and encode it (``compression``: what the
    leaf's field metadata asks for string chunks) for a file of version 2.``minor``."""
    visible = repdef.visible(def_, layers)
    if len(values_arr) == 0 or values_arr.null_count == len(values_arr):
        return constant_page(rep, def_, layers, None, None)
    values = values_of(values_arr)
    inline = (constant_value(values) if values_arr.null_count == 0 and minor >= 2
              else None)
    if inline is not None and len(inline) <= 32:
        return constant_page(rep, def_, layers, values, inline)
    if needs_full_zip(values) and not pa.types.is_dictionary(storage_type(values_arr.type)):
        wanted = values.variable and StringCompression.wants_fsst(compression)
        learnt = fsst_table(values) if wanted else None
        if learnt is None:
            return full_zip_page(rep, def_, layers, values, visible, num_rows)
        return full_zip_page(rep, def_, layers, fsst_values(values, learnt[0]), visible,
                             num_rows, fsst=learnt[0])
    t = storage_type(values_arr.type)
    key_bits = t.index_type.bit_width if pa.types.is_dictionary(t) else None
    page = mini_block_page(rep, def_, layers, values, visible, key_bits=key_bits,
                           compression=compression, large_chunks=minor >= 2)
    if page is None:
        return full_zip_page(rep, def_, layers, values, visible, num_rows)
    return page


class LeafColumn:
    """One column of a 2.2 file: the pages written so far for one leaf."""

    def __init__(self, writer: LanceFileWriter, field: LanceField) -> None:
        self.field = field
        self.pages: list[file2_pb2.ColumnMetadata.Page] = []
        self.rows = 0
        writer.columns.append(self)


def _check_writable(field: LanceField, path: str, minor: int, under_list: bool = False
                    ) -> None:
    if field.is_blob:
        raise UnsupportedFeatureError(
            f"column {path!r}: writing blob columns (lance-encoding:blob / lance.blob.v2) is "
            f"not supported"
        )
    t = field.arrow_type
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_fixed_size_list(t) and not field.children:
        inner = t.value_type
        while pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if pa.types.is_struct(inner) or pa.types.is_list(inner):
            raise UnsupportedFeatureError(f"column {path!r}: cannot write {t} in Lance 2.2 files")
    if field.logical_type.startswith("fixed_size_list:struct"):
        # pylance writes these (2.2 only) outside lists and other such lists; its
        # reader takes nothing else
        if minor < 2:
            raise UnsupportedFeatureError(
                f"column {path!r}: fixed-size lists of structs need Lance 2.2 files")
        if under_list or any(f.logical_type.startswith("fixed_size_list:struct")
                             for c in field.children for f in c.walk()):
            raise UnsupportedFeatureError(
                f"column {path!r}: fixed-size lists of structs inside lists or other "
                f"such lists cannot be written")
    if is_packed_struct(field):
        widths = [fixed_width_bits(storage_type(c.arrow_type)) for c in field.children]
        if not widths or any(w is None or w % 8 for w in widths):
            raise UnsupportedFeatureError(
                f"column {path!r}: a packed struct (lance-encoding:packed) is written only "
                f"with byte-wide fixed-width children, as pylance packs")
        return
    if pa.types.is_map(t) and minor < 2:
        # (pylance refuses them there, so it could not append to such a table)
        raise UnsupportedFeatureError(f"column {path!r}: map columns need Lance 2.2 files")
    if field.logical_type == "json":
        raise UnsupportedFeatureError(
            f"column {path!r}: lance.json columns (stored as JSONB) cannot be written yet"
        )
    if field.logical_type == "struct" and not field.children:
        raise UnsupportedFeatureError(f"column {path!r}: structs without fields")
    leaf = t
    while pa.types.is_fixed_size_list(leaf) or isinstance(leaf, pa.BaseExtensionType):
        leaf = leaf.storage_type if isinstance(leaf, pa.BaseExtensionType) else leaf.value_type
    if fixed_width_bits(leaf) == 0:  # fixed_size_binary(0): values of no bits
        raise UnsupportedFeatureError(f"column {path!r}: cannot write {t} in Lance 2.1+ files")
    listed = under_list or field.logical_type.startswith(("list", "large_list", "map"))
    for child in field.children:
        _check_writable(child, f"{path}.{child.name}", minor, listed)


class StructuralField:
    """A top-level field of a 2.2 file and the leaf columns under it."""

    def __init__(self, writer: LanceFileWriter, field: LanceField) -> None:
        self.minor = int(writer.version.split(".")[1])
        _check_writable(field, field.name, self.minor)
        self.writer = writer
        self.field = field
        self.leaves = {f.id: LeafColumn(writer, f) for f in column_fields(field)}
        self.compression = {f.id: StringCompression.from_metadata(f.metadata, f.name)
                            for f in column_fields(field)}
        # entries a row puts in each leaf's column (k under a fixed-size list of structs)
        self.elements = {f.id: elements_per_row(field, f.id) for f in column_fields(field)}
        self.buffer = PageBuffer(writer.page_bytes, writer.max_page_bytes)
        self.rows = 0

    def push(self, arr: pa.Array) -> None:
        if not self.field.nullable and arr.null_count:
            raise SchemaError(
                f"column {self.field.name!r} is not nullable but the data has "
                f"{arr.null_count} nulls"
            )
        if self.buffer.add(arr):
            self.flush()

    def flush(self) -> None:
        for part in self.buffer.drain():
            for leaf in shred(self.field, part):
                entries = len(part) * self.elements[leaf.field.id]
                page = encode_page(leaf.rep, leaf.def_, leaf.layers, leaf.values, entries,
                                   self.compression.get(leaf.field.id), self.minor)
                self._emit(self.leaves[leaf.field.id], page, entries)
            self.rows += len(part)

    def _emit(self, column: LeafColumn, page, length: int) -> None:
        out = self.writer.out
        buffers = [out.write_buffer(b) for b in page.buffers]
        column.pages.append(
            container.page_metadata_v21(buffers, length, column.rows, page.layout)
        )
        column.rows += length

    def finish(self) -> None:
        self.flush()
