"""Read fields of Lance 2.1 / 2.2 files: one column per leaf, nesting in rep/def levels.

For each requested field the leaves under it are read for the same sorted, disjoint row
ranges. Every page a range touches decodes only what those rows need (see
:mod:`miniblock` and :mod:`fullzip`) into levels plus value slots; :mod:`repdef` turns the
levels into per-layer offsets and validity; then the Arrow array is assembled top-down,
taking struct validity and list offsets from the first leaf under each node (every leaf
below a node repeats that node's levels).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import container, repdef
from lance_sql.format.datafile.blocks import Variable, to_arrow
from lance_sql.format.datafile.fullzip import ConstantPage, FullZipPage
from lance_sql.format.datafile.miniblock import MiniBlockPage
from lance_sql.format.pb import encodings_v2_1_pb2 as pb
from lance_sql.format.schema import BLOB_V1_DESCRIPTION, LanceField

Reader = Callable[[int, int], bytes | memoryview]


def storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types unwrapped to their storage type."""
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def parse_layout(page: container.PageInfo, where: str) -> pb.PageLayout:
    """The PageLayout of a 2.1+ page; layouts lance_sql cannot read are an
    UnsupportedFeatureError."""
    if page.encoding_url == container.V23_PLANAR_LAYOUT_URL:
        raise UnsupportedFeatureError(
            f"{where} uses the Lance 2.3 PlanarLayout encoding ({page.encoding_url}), "
            f"which lance_sql does not support"
        )
    if page.encoding_url != container.V21_PAGE_LAYOUT_URL:
        raise UnsupportedFeatureError(f"{where} has page encoding {page.encoding_url!r}")
    layout = pb.PageLayout()
    try:
        layout.ParseFromString(page.encoding_value)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise FormatError(f"{where}: corrupt page layout: {exc}") from exc
    return layout


class LeafColumn:
    """The pages of one leaf column, each turned into a decoder on first use."""

    def __init__(self, info: container.ColumnInfo, read: Reader, leaf_type: pa.DataType,
                 where: str) -> None:  # fmt: skip
        self.info = info
        self.read = read
        self.leaf_type = leaf_type
        self.where = where
        self._pages: dict[int, object] = {}

    @property
    def num_rows(self) -> int:
        return int(self.info.row_starts[-1])

    def page(self, p: int):
        dec = self._pages.get(p)
        if dec is None:
            page = self.info.pages[p]
            where = f"{self.where} page {p}"
            dec = make_page(parse_layout(page, where), page, self.read, self.leaf_type, where)
            self._pages[p] = dec
        return dec

    def nonempty_pages(self) -> list:
        """The decoders of the pages holding rows, in row order."""
        bounds = self.info.row_starts
        return [self.page(p) for p in range(len(self.info.pages)) if bounds[p + 1] > bounds[p]]

    def read_ranges(self, starts: np.ndarray, ends: np.ndarray) -> tuple[list, pa.Array]:
        """Layers (outermost first) and leaf values of rows ``[starts[i], ends[i])``."""
        layer_pieces, value_pieces = [], []
        for p, ls, le in container.page_spans(self.info.row_starts, starts, ends, self.where):
            dec = self.page(p)
            piece = dec.decode(ls, le)
            where = f"{self.where} page {p}"
            layers = repdef.unravel(piece.rep, piece.def_, piece.layers, piece.num_entries, where)
            if layers[0].count != int((le - ls).sum()):
                raise FormatError(f"{where}: decoded {layers[0].count} rows, expected "
                                  f"{int((le - ls).sum())}")  # fmt: skip
            if layers[-1].count != len(piece.values):
                raise FormatError(f"{where}: {len(piece.values)} values for "
                                  f"{layers[-1].count} value slots")  # fmt: skip
            layer_pieces.append(layers)
            value_pieces.append(piece.values)
        layers = repdef.concat(layer_pieces, self.where)
        values = value_pieces[0] if len(value_pieces) == 1 else pa.concat_arrays(value_pieces)
        return layers, values


def make_page(layout: pb.PageLayout, page: container.PageInfo, read: Reader,
              leaf_type: pa.DataType, where: str):  # fmt: skip
    """The reader for one page of ``layout`` (mini-block, full-zip or constant)."""
    kind = layout.WhichOneof("layout")
    if kind == "mini_block_layout":
        return MiniBlockPage(read, page.buffers, layout.mini_block_layout, page.length,
                             leaf_type, where)  # fmt: skip
    if kind == "full_zip_layout":
        return FullZipPage(read, page.buffers, layout.full_zip_layout, page.length, leaf_type,
                           where)  # fmt: skip
    if kind == "constant_layout":
        return ConstantPage(read, page.buffers, layout.constant_layout, page.length, leaf_type,
                            where)  # fmt: skip
    if kind == "blob_layout":
        return BlobPage(layout.blob_layout, page, read, leaf_type, where)
    raise FormatError(f"{where}: page layout is empty")


_DESCRIPTION = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])


class BlobPage:
    """Values stored out of line: the inner page holds (position, size) descriptions.

    A description of size 0 is an empty value when its position is 0 and a null otherwise,
    its position then holding ``def << 16 | rep``. Values are read from their absolute file
    positions; a struct leaf type gets the descriptions themselves.
    """

    def __init__(self, layout: pb.BlobLayout, page: container.PageInfo, read: Reader,
                 leaf_type: pa.DataType, where: str) -> None:  # fmt: skip
        self.layers = list(layout.layers)
        repdef.check_layers(self.layers, where)
        if repdef.max_rep(self.layers) or len(self.layers) != 1:
            raise UnsupportedFeatureError(f"{where}: blob pages inside lists or structs")
        self.read = read
        self.where = where
        self.leaf_type = leaf_type
        self.inner = make_page(layout.inner_layout, page, read, _DESCRIPTION, where)

    def decode(self, starts: np.ndarray, ends: np.ndarray) -> repdef.LeafPiece:
        where = self.where
        desc = self.inner.decode(starts, ends).values
        if desc.null_count:
            raise FormatError(f"{where}: null blob description")
        pos = desc.field("position").to_numpy(zero_copy_only=False).astype(np.int64)
        size = desc.field("size").to_numpy(zero_copy_only=False).astype(np.int64)
        null = (size == 0) & (pos != 0)
        levels = np.where(null, pos >> 16, 0)
        def_ = levels.astype(np.uint16) if null.any() else None
        if null.any() and (int(levels.max()) > repdef.max_def(self.layers)
                           or np.any(levels[null] == 0) or np.any(pos[null] & 0xFFFF)):
            raise FormatError(f"{where}: blob null with an invalid rep/def word")
        valid = ~null
        if pa.types.is_struct(storage_type(self.leaf_type)):
            mask = null if null.any() else None  # children take the nulls, as in pylance
            values = pa.StructArray.from_arrays(
                [pa.array(pos, pa.uint64(), mask=mask), pa.array(size, pa.uint64(), mask=mask)],
                names=["position", "size"], mask=pa.array(null),
            )
            return repdef.LeafPiece(None, def_, values, self.layers, len(desc))
        lens = np.where(valid, size, 0)
        offsets = np.zeros(lens.size + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        pieces = [self.read(int(p), int(n)) if n else b""
                  for p, n in zip(pos.tolist(), lens.tolist(), strict=True)]
        block = Variable(offsets, np.frombuffer(b"".join(pieces), np.uint8), lens.size)
        values = to_arrow(block, self.leaf_type, valid if null.any() else None, where)
        return repdef.LeafPiece(None, def_, values, self.layers, len(desc))


# --------------------------------------------------------------------------- fields
_PACKED_KEYS = ("packed", "lance-encoding:packed")


def is_packed_struct(field: LanceField) -> bool:
    """A struct stored row by row in a single column (``lance-encoding:packed=true``)."""
    if field.logical_type != "struct":
        return False
    meta = field.metadata
    return any(
        meta.get(k, b"").decode(errors="replace").lower() == "true" for k in _PACKED_KEYS
    )


def owns_column(field: LanceField) -> bool:
    """Whether a 2.1+ file gives this field its own column (leaves, packed structs, blobs)."""
    if not field.children:
        return True
    return is_packed_struct(field) or field.is_blob_v2


def read_type(field: LanceField, descriptions: bool) -> pa.DataType:
    """The Arrow type a field is decoded to.

    Blob v2 columns only exist as descriptions (a 2.2 file holds no bytes of dedicated,
    packed or external blobs), so they always decode to them; legacy blob columns give
    their bytes unless ``descriptions`` asks for what pylance's scanner returns.
    """
    if descriptions or any(f.is_blob_v2 for f in field.walk()):
        return field.to_scan_arrow().type
    return field.arrow_type


def column_fields(field: LanceField) -> list[LanceField]:
    """The fields under ``field`` (itself included) that own a column, pre-order."""
    if owns_column(field):
        return [field]
    return [f for c in field.children for f in column_fields(c)]



def _struct_list_size(field: LanceField) -> int:
    """The size of ``field`` when it is a fixed-size list whose items are not stored whole
    (a list of structs: each struct field has its own column, item by item); else 1."""
    if owns_column(field):
        return 1
    t = storage_type(field.arrow_type)
    return t.list_size if pa.types.is_fixed_size_list(t) else 1


def elements_per_row(root: LanceField, leaf_id: int) -> int:
    """How many entries one value of ``root`` puts in the column of its leaf ``leaf_id``:
    the product of the sizes of the fixed-size lists of structs on the way (pylance
    flattens them: the leaf columns of ``fixed_size_list<struct, k>`` hold ``k`` entries a
    row, and every repdef layer down to the leaf counts entries, not rows)."""

    def find(f: LanceField) -> int | None:
        if f.id == leaf_id:
            return _struct_list_size(f)
        if owns_column(f):
            return None
        for c in f.children:
            got = find(c)
            if got is not None:
                return got * _struct_list_size(f)
        return None

    return find(root) or 1


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


class FieldReader:
    """Reads whole fields of a 2.1+ file for a set of row ranges."""

    def __init__(self,
                 columns: Callable[[int, LanceField, pa.DataType, int], LeafColumn | None],
                 path: str) -> None:  # fmt: skip
        self.columns = columns
        self.path = path

    def read(self, field: LanceField, colmap: Mapping[int, int], starts: np.ndarray,
             ends: np.ndarray, descriptions: bool = False) -> pa.Array:  # fmt: skip
        """Rows ``[starts[i], ends[i])`` of ``field``; ``descriptions``: see :func:`read_type`."""
        total = int((ends - starts).sum())
        leaves = column_fields(field)
        data: dict[int, tuple[list, pa.Array]] = {}
        for leaf in leaves:
            index = colmap.get(leaf.id)
            if index is None:
                continue
            if leaf.is_legacy_blob and descriptions:
                leaf_type = BLOB_V1_DESCRIPTION
            else:
                leaf_type = read_type(leaf, descriptions)
            elements = elements_per_row(field, leaf.id)
            column = self.columns(index, leaf, leaf_type, elements)
            if column is None:
                continue
            if leaf.logical_type == "json":
                raise UnsupportedFeatureError(
                    f"{column.where}: lance.json values are stored as JSONB, which lance_sql "
                    f"cannot decode yet"
                )
            layers, values = column.read_ranges(starts * elements, ends * elements)
            depth = nesting_depth(field, leaf)
            if len(layers) != depth:
                raise FormatError(
                    f"{column.where} (field {leaf.name!r}) has {len(layers)} nesting layers, "
                    f"the schema implies {depth}"
                )
            data[leaf.id] = (layers, values)
        if not data:
            return pa.nulls(total, read_type(field, descriptions))
        out = build_field(field, data, total, self.path, descriptions)
        if len(out) != total:
            raise FormatError(f"{self.path}: field {field.name!r} decoded {len(out)} rows, "
                              f"expected {total}")  # fmt: skip
        return out


def nesting_depth(root: LanceField, leaf: LanceField) -> int:
    """How many nesting layers a 2.1+ file stores for ``leaf`` under ``root``: one per
    field on the way, both ends included."""

    def find(f: LanceField, d: int) -> int | None:
        if f.id == leaf.id:
            return d
        for c in f.children:
            got = find(c, d + 1)
            if got is not None:
                return got
        return None

    return find(root, 1) or 0  # a packed struct's children are not searched: it is found first


def build_field(field: LanceField, data: Mapping[int, tuple[list, pa.Array]], count: int,
                path: str, descriptions: bool = False) -> pa.Array:
    """``count`` rows of ``field`` from the decoded layers and values of its leaves
    (``data``, by leaf id: what :meth:`LeafColumn.read_ranges` gives); ``path`` names
    the file in errors."""
    return _build(field, 0, data, count, path, descriptions)


def _build(field: LanceField, depth: int, data: Mapping[int, tuple[list, pa.Array]],
           count: int, path: str, descriptions: bool = False) -> pa.Array:
    t = read_type(field, descriptions)
    st = storage_type(t)
    present = [leaf.id for leaf in column_fields(field) if leaf.id in data]
    if not present:
        return pa.nulls(count, t)
    layer = data[present[0]][0][depth]
    where = f"{path}: field {field.name!r}"
    # a layer under (or of) a fixed-size list of structs counts that list's entries
    stride = elements_per_row(field, present[0])
    if layer.count != count * stride:
        raise FormatError(f"{where}: {layer.count} values where {count * stride} were "
                          f"expected")
    validity = layer.validity if stride == 1 or layer.validity is None else \
        layer.validity[::stride]
    if owns_column(field):
        if layer.is_list:
            raise FormatError(f"{where}: leaf stored with a list layer")
        if pa.types.is_struct(st) and st.num_fields == 0 and not field.children:
            # a struct without fields: its column holds no values (2.1+ writers
            # refuse its NULLs), each row is the empty struct, as pylance reads it
            return pa.StructArray.from_buffers(t, count, [None])
        values = data[field.id][1]
        if values.type != t:
            if values.type == st and isinstance(t, pa.BaseExtensionType):
                values = pa.ExtensionArray.from_storage(t, values)
            else:
                values = values.cast(t)
        return values
    if pa.types.is_struct(st):
        if layer.is_list:
            raise FormatError(f"{where}: struct stored with a list layer")
        children = [_build(c, depth + 1, data, count, path, descriptions)
                    for c in field.children]  # fmt: skip
        out = pa.Array.from_buffers(st, count, [_bitmap(validity)], children=children)
    elif pa.types.is_fixed_size_list(st):
        if layer.is_list:
            raise FormatError(f"{where}: fixed-size list stored with a list layer")
        items = _build(field.children[0], depth + 1, data, count * st.list_size, path,
                   descriptions)
        out = pa.Array.from_buffers(st, count, [_bitmap(validity)], children=[items])
    elif pa.types.is_list(st) or pa.types.is_large_list(st) or pa.types.is_map(st):
        if not layer.is_list:
            raise FormatError(f"{where}: list stored without a list layer")
        if stride != 1:
            raise UnsupportedFeatureError(
                f"{where}: lists holding fixed-size lists of structs are not read yet")
        offsets = layer.offsets
        items = _build(field.children[0], depth + 1, data, int(offsets[-1]), path,
                       descriptions)
        large = pa.types.is_large_list(st)
        if not large and int(offsets[-1]) >= 2**31:
            raise FormatError(f"{where}: {int(offsets[-1])} items overflow 32-bit offsets")
        obuf = pa.py_buffer(offsets if large else offsets.astype(np.int32))
        if pa.types.is_map(st):  # the entries named as the map names them, made
            # again from their fields (a cast or view refuses the NULLs a NULL value
            # struct puts in its fields that take none)
            items = pa.StructArray.from_arrays(
                [items.field(0), items.field(1)], fields=[st.key_field, st.item_field],
                mask=items.is_null() if items.null_count else None)
        out = pa.Array.from_buffers(st, count, [_bitmap(layer.validity), obuf],
                                    children=[items])  # fmt: skip
    else:
        raise UnsupportedFeatureError(f"{where}: reading {st} from Lance 2.1+ files")
    if isinstance(t, pa.BaseExtensionType):
        out = pa.ExtensionArray.from_storage(t, out)
    return out
