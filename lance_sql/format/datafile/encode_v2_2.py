"""Encode pages of Lance 2.2 leaf columns (the layouts pylance 14 reads): shared parts.

Given one page of a shredded leaf (rep/def levels plus value slots, see :mod:`shred`),
:func:`writer_v2_2.encode_page` picks a layout:

* **constant** (here): every slot null (rep/def kept as raw u16 buffers when nesting needs
  them), or one plain fixed-width value of at most 32 bytes repeated (stored inline);
* **full-zip** (here) for values of 256 bytes and more (vectors, long strings): control
  word, length and bytes zipped per entry, plus a row-position index when needed;
* **mini-block** otherwise (:mod:`encode_miniblock`).

This module also turns value slots into bytes (:class:`Values`) and holds the encoding
helpers both layouts share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import UnsupportedFeatureError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import fsst_encode as fe
from lance_sql.format.datafile import repdef
from lance_sql.format.datafile.blocks import fixed_width_bits
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

FULLZIP_MIN_BYTES = 256  # values this large (max length) go full-zip, as pylance does
CHUNK_TARGET = 4096  # bytes of values per mini-block chunk
MAX_CHUNK_LEVELS = 1 << 15  # levels per chunk (u16 count; u16 byte sizes once packed)
PAD_BYTE = 0xFE
LZ4 = pb.COMPRESSION_ALGORITHM_LZ4
FSST_MIN_BYTES = 32 * 1024  # smaller string pages are not worth a symbol table (as pylance)
FSST_MAX_RATIO = 0.85  # FSST must save 15% on its sample (offsets counted)


@dataclass
class EncodedPage:
    """One encoded 2.2 page: its layout and the buffers to write."""
    layout: pb.PageLayout
    buffers: list[bytes | memoryview | np.ndarray] = field(default_factory=list)


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def encoding(**kw) -> pb.CompressiveEncoding:
    """A CompressiveEncoding with the given fields set."""
    return pb.CompressiveEncoding(**kw)


def flat_enc(bits: int) -> pb.CompressiveEncoding:
    """Uncompressed values of ``bits`` bits each."""
    return encoding(flat=pb.Flat(bits_per_value=bits))


def storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types unwrapped to their storage type."""
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


# --------------------------------------------------------------------------- values
@dataclass
class Values:
    """Value slots as bytes: fixed width (``bits`` per value) or variable (offsets)."""

    n: int
    bits: int = 0  # fixed: bits per value (items * item bits for fixed-size lists)
    data: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint8))  # uint8
    offsets: np.ndarray | None = None  # int64, variable only
    wide_offsets: bool = False  # 64-bit offsets (large types)
    fsl: list[int] = field(default_factory=list)  # fixed-size list dimensions, outer first
    item_bits: int = 0
    int_like: bool = False  # worth bitpacking
    # per fixed-size-list layer (outer first), the validity of its items (bool per item:
    # the inner lists under an outer layer, the values under the innermost); None: no nulls
    layer_validity: tuple[np.ndarray | None, ...] = ()
    packed: list[int] = field(default_factory=list)  # packed struct: each child's bits

    @property
    def has_fsl_nulls(self) -> bool:
        """Whether any fixed-size-list layer has null items."""
        return any(v is not None for v in self.layer_validity)

    @property
    def variable(self) -> bool:
        """True for variable-width values (offsets and bytes)."""
        return self.offsets is not None

    @property
    def var_offsets(self) -> np.ndarray:
        """The offsets of variable-width values (``variable`` must be true)."""
        assert self.offsets is not None, "fixed-width values have no offsets"
        return self.offsets


def values_of(arr: pa.Array) -> Values:
    """Bytes of the slots of ``arr`` (nulls become zero bytes / empty strings)."""
    while isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    t = arr.type
    n = len(arr)
    if pa.types.is_dictionary(t):
        return values_of(arr.cast(t.value_type))
    if (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t)):  # fmt: skip
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        if arr.null_count:
            arr = pc.if_else(arr.is_valid(), arr, pa.scalar(b"" if "binary" in str(t) else "", t))
        offs = np.frombuffer(arr.buffers()[1], np.int64 if large else np.int32,
                             n + 1, arr.offset * (8 if large else 4)).astype(np.int64)  # fmt: skip
        base, end = int(offs[0]), int(offs[-1])
        data = np.frombuffer(arr.buffers()[2], np.uint8, end - base, base) if end > base else (
            np.zeros(0, np.uint8))  # fmt: skip
        if base:
            offs -= base  # a copy already (astype): rebased in place
        return Values(n, offsets=offs, data=data, wide_offsets=large)
    if pa.types.is_fixed_size_list(t):
        dims = []
        layer_validity: list[np.ndarray | None] = []
        inner = arr
        while pa.types.is_fixed_size_list(storage_type(inner.type)):
            inner = inner.storage if isinstance(inner.type, pa.BaseExtensionType) else inner
            dims.append(inner.type.list_size)
            inner = inner.values.slice(inner.offset * inner.type.list_size,
                                       len(inner) * inner.type.list_size)
            # this layer's items: the lists of the next layer, or the values
            layer_validity.append(np.asarray(inner.is_valid()) if inner.null_count else None)
        items = values_of(inner)
        if items.variable or items.fsl:
            raise ValueError("fixed-size lists of variable-width items")
        cum = int(np.prod(dims))
        return Values(n, bits=items.bits * cum, data=items.data, fsl=dims,
                      item_bits=items.bits, layer_validity=tuple(layer_validity))  # fmt: skip
    if pa.types.is_struct(t):
        return packed_values(arr)
    bits = fixed_width_bits(t)
    if bits is None:
        raise ValueError(f"cannot encode {t}")
    if bits == 1:
        bools = np.asarray(arr.fill_null(False)) if arr.null_count else np.asarray(arr)
        return Values(n, bits=1, data=np.packbits(bools, bitorder="little"))
    width = bits // 8
    buf = arr.buffers()[1]
    data = np.frombuffer(buf, np.uint8, n * width, arr.offset * width) if n else np.zeros(0,
                                                                                        np.uint8)
    if arr.null_count:
        data = data.copy().reshape(n, width)
        data[~np.asarray(arr.is_valid())] = 0
        data = data.reshape(-1)
    int_like = (pa.types.is_integer(t) or pa.types.is_temporal(t)) and bits in (8, 16, 32, 64)
    return Values(n, bits=bits, data=data, int_like=int_like, item_bits=bits)


def packed_values(arr: pa.StructArray) -> Values:
    """A packed struct's rows (``lance-encoding:packed``): each row's children's bytes
    side by side, as pylance packs them (byte-wide fixed-width children without NULLs;
    a NULL struct's row is zeros)."""
    n = len(arr)
    parts = [values_of(arr.field(i)) for i in range(arr.type.num_fields)]
    if any(p.variable or p.fsl or p.bits % 8 for p in parts):
        raise ValueError(f"packed struct {arr.type}: only byte-wide fixed-width children "
                         "can be packed")
    valid = np.asarray(arr.is_valid()) if arr.null_count else None
    for i in range(arr.type.num_fields):
        child = arr.field(i)
        if child.null_count and (valid is None or
                                 np.any(valid & ~np.asarray(child.is_valid()))):
            raise UnsupportedFeatureError(
                f"packed struct {arr.type}: its field {arr.type.field(i).name!r} has NULLs, "
                "which a packed struct cannot hold (pylance refuses them too)")
    widths = [p.bits // 8 for p in parts]
    rows = np.empty((n, sum(widths)), np.uint8)
    at = 0
    for p, w in zip(parts, widths, strict=True):
        rows[:, at:at + w] = p.data[: n * w].reshape(n, w)
        at += w
    if valid is not None:
        rows[~valid] = 0
    return Values(n, bits=8 * sum(widths), data=rows.reshape(-1), item_bits=8 * sum(widths),
                  packed=[8 * w for w in widths])


# --------------------------------------------------------------------------- FSST
def fsst_table(values: Values) -> tuple[fe.SymbolTable, float] | None:
    """An FSST symbol table learnt from a sample of the page's strings and the size ratio
    it reaches there (offsets counted), or None when FSST does not pay (or the page is
    small, or has 64-bit offsets)."""
    offsets = values.var_offsets
    if values.wide_offsets or int(offsets[-1] - offsets[0]) < FSST_MIN_BYTES:
        return None
    smp = fe.sample(values.data, offsets)
    table, size = fe.learn(smp)
    n = smp.offsets.size - 1
    ratio = (size + 4 * n) / (int(smp.offsets[-1]) + 4 * n)
    if table.symbols.size == 0 or ratio > FSST_MAX_RATIO:
        return None
    return table, ratio


def fsst_values(values: Values, table: fe.SymbolTable) -> Values:
    """The page's strings compressed with ``table`` (same count, new offsets and bytes)."""
    comp, coffs = fe.encode(table, values.data, values.var_offsets)
    return Values(values.n, offsets=coffs, data=comp, wide_offsets=values.wide_offsets)


# --------------------------------------------------------------------------- levels
def ool_pack(levels: np.ndarray, width: int) -> bytes:
    """Out-of-line bitpacked u16 levels (full blocks packed, the tail as pylance decides)."""
    n = levels.size
    full = n // bp.BLOCK
    tail = n % bp.BLOCK
    parts = []
    if full:
        parts.append(bp.pack(levels[: full * bp.BLOCK].reshape(full, bp.BLOCK), width, 16))
    if tail:
        padding_cost = width * (bp.BLOCK - tail)
        savings = (16 - width) * tail
        if padding_cost < savings:
            block = np.zeros((1, bp.BLOCK), np.uint16)
            block[0, :tail] = levels[full * bp.BLOCK :]
            parts.append(bp.pack(block, width, 16))
        else:
            parts.append(levels[full * bp.BLOCK :].astype("<u2"))
    return b"".join(p.tobytes() for p in parts)


def levels_encoding(width: int) -> pb.CompressiveEncoding:
    """How rep/def levels of ``width`` bits are stored (bitpacked out of line)."""
    return encoding(out_of_line_bitpacking=pb.OutOfLineBitpacking(
        uncompressed_bits_per_value=16, values=flat_enc(width)))  # fmt: skip


# --------------------------------------------------------------------------- constant
def constant_page(rep, def_, layers, values: Values | None, inline: bytes | None) -> EncodedPage:
    """A constant-layout page: every value the same (``inline``, or one value buffer)."""
    layout = pb.ConstantLayout(layers=layers)
    if inline is not None:
        layout.inline_value = inline
    buffers: list = []
    simple = rep is None and (def_ is None or layers == [repdef.NULLABLE_ITEM])
    if not simple:
        buffers = [b"" if rep is None else rep.astype("<u2").tobytes(),
                   b"" if def_ is None else def_.astype("<u2").tobytes()]  # fmt: skip
    return EncodedPage(pb.PageLayout(constant_layout=layout), buffers)


def constant_value(values: Values) -> bytes | None:
    """The single fixed-width value (<= 32 bytes) all slots hold, if any."""
    if values.variable or values.n < 2 or values.fsl or values.packed:
        return None  # pylance inlines plain fixed-width values only
    if values.bits == 1:
        bits = np.unpackbits(values.data, bitorder="little")[: values.n]
        return bytes([int(bits[0])]) if np.all(bits == bits[0]) else None
    if values.bits % 8 or values.bits > 256:
        return None
    rows = values.data[: values.n * values.bits // 8].reshape(values.n, values.bits // 8)
    if not np.array_equal(rows[0], rows[-1]) or not np.array_equal(rows[0], rows[values.n // 2]):
        return None
    return rows[0].tobytes() if np.all(rows == rows[0]) else None


# --------------------------------------------------------------------------- full-zip
def full_zip_page(rep, def_, layers, values: Values, visible: np.ndarray | None,
                  num_rows: int, fsst: fe.SymbolTable | None = None) -> EncodedPage:  # fmt: skip
    """A full-zip page: levels and values of each row zipped together (for wide values).

    With ``fsst``, ``values`` are FSST-compressed strings (each entry holds its compressed
    bytes, as pylance writes long strings) and the table goes into the page's encoding.
    """
    max_rep = repdef.max_rep(layers)
    max_def = repdef.max_def(layers)
    bits_rep = max_rep.bit_length() if rep is not None else 0
    bits_def = max_def.bit_length() if def_ is not None else 0
    total = bits_rep + bits_def
    cw = 0 if total == 0 else 1 if total <= 8 else 2 if total <= 16 else 4
    n_entries = rep.size if rep is not None else (def_.size if def_ is not None else values.n)
    layout = pb.FullZipLayout(bits_rep=bits_rep, bits_def=bits_def, layers=layers,
                              num_items=n_entries, num_visible_items=values.n)  # fmt: skip
    words: np.ndarray | None = None
    if cw:
        r = rep.astype(np.uint32) if rep is not None else np.zeros(n_entries, np.uint32)
        d = def_.astype(np.uint32) if def_ is not None else np.zeros(n_entries, np.uint32)
        words = (r << bits_def) | d
        words = words.astype({1: "<u1", 2: "<u2", 4: "<u4"}[cw]).view(np.uint8).reshape(-1, cw)
    vis = np.ones(n_entries, bool) if visible is None else visible
    valid_slot = np.ones(values.n, bool) if def_ is None else (def_[vis] == 0)
    if not values.variable:
        width = values.bits // 8
        enc = fsl_encoding(values)
        layout.bits_per_value = values.bits
        layout.value_compression.CopyFrom(enc)
        rows = values.data[: values.n * width].reshape(values.n, width)
        if cw == 0:
            return EncodedPage(pb.PageLayout(full_zip_layout=layout), [rows.reshape(-1)])
        sizes = np.where(vis, cw + width, cw)
        out = np.zeros(int(sizes.sum()), np.uint8)
        starts = np.cumsum(sizes) - sizes
        assert words is not None  # cw > 0
        out[starts[:, None] + np.arange(cw)[None, :]] = words
        vstart = starts[vis] + cw
        out[vstart[:, None] + np.arange(width)[None, :]] = rows
    else:
        wide = values.wide_offsets
        lw = 8 if wide else 4
        layout.bits_per_offset = lw * 8
        var = encoding(variable=pb.Variable(offsets=flat_enc(lw * 8)))
        if fsst is not None:
            var = encoding(fsst=pb.Fsst(symbol_table=fsst.serialize(), values=var))
        layout.value_compression.CopyFrom(var)
        lens = np.diff(values.var_offsets)
        has_value = np.zeros(n_entries, bool)
        has_value[np.flatnonzero(vis)[valid_slot]] = True
        entry_len = np.zeros(n_entries, np.int64)
        entry_len[has_value] = lens[valid_slot]
        sizes = cw + np.where(has_value, lw, 0) + entry_len
        starts = np.cumsum(sizes) - sizes
        out_parts = []
        heads = np.zeros((n_entries, cw + lw), np.uint8)
        if cw:
            heads[:, :cw] = words
        heads[:, cw:] = entry_len.astype("<u8" if wide else "<u4").view(np.uint8).reshape(-1, lw)
        head_bytes = heads.tobytes()
        hl = cw + lw
        slot_of = np.cumsum(vis) - 1
        offs = values.var_offsets.tolist()
        data = values.data
        hv = has_value.tolist()
        so = slot_of.tolist()
        for i in range(n_entries):
            if hv[i]:
                out_parts.append(head_bytes[i * hl : i * hl + hl])
                s = so[i]
                out_parts.append(data[offs[s] : offs[s + 1]].tobytes())
            elif cw:
                out_parts.append(head_bytes[i * hl : i * hl + cw])
        out = np.frombuffer(b"".join(out_parts), np.uint8)
    # row index: byte position of every row start plus the end
    if rep is not None:
        row_entry = np.flatnonzero(rep == max_rep)
    else:
        row_entry = np.arange(n_entries)
    pos = np.r_[starts[row_entry], out.size].astype(np.int64)
    top = int(pos[-1])
    iw = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4 if top < 1 << 32 else 8
    index = pos.astype(f"<u{iw}")
    return EncodedPage(pb.PageLayout(full_zip_layout=layout), [out, index])


def fsl_encoding(values: Values) -> pb.CompressiveEncoding:
    """The encoding of ``values``: flat items wrapped in their fixed-size-list layers."""
    if values.packed:
        return encoding(packed_struct=pb.PackedStruct(bits_per_value=values.packed,
                                                      values=flat_enc(values.bits)))
    if not values.fsl:
        return flat_enc(values.bits)
    enc = flat_enc(values.item_bits)
    for dim, valid in zip(reversed(values.fsl), reversed(values.layer_validity), strict=True):
        enc = encoding(fixed_size_list=pb.FixedSizeList(
            items_per_value=dim, values=enc, has_validity=valid is not None))  # fmt: skip
    return enc


def needs_full_zip(values: Values) -> bool:
    """True when values are wide enough for the full-zip layout, as the reference decides."""
    if values.variable:
        return bool(values.n) and int(np.diff(values.var_offsets).max()) >= FULLZIP_MIN_BYTES
    return values.bits >= FULLZIP_MIN_BYTES * 8 and not values.has_fsl_nulls and \
        not values.packed
