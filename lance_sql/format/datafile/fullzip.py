"""Full-zip and constant pages of Lance 2.1/2.2.

**Full-zip** (large values: vectors, strings of 256 bytes and more). Buffer 0 zips, per
level entry, a control word (rep and def levels packed into 1, 2 or 4 bytes; absent when
the page has neither), then for a visible entry its value: ``bits_per_value / 8`` bytes
for fixed-width data, or a length of ``bits_per_offset / 8`` bytes plus the bytes for a
valid variable-width one (null entries carry no length). Buffer 1, present for
variable-width values or lists, holds the byte position of every row (``rows + 1``
entries of 1, 2, 4 or 8 bytes), so a ``take`` reads just the index entries and bytes of
the rows it needs. Entries are parsed one per row per round, vectorised across rows.

**Constant** pages hold one value for the whole page (inline in the layout, or in the
first buffer when it is wider) or none (all null), plus rep/def buffers when nesting needs
them (raw u16, or compressed per ``rep_compression`` / ``def_compression``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile import compressive as cz
from lance_sql.format.datafile import repdef
from lance_sql.format.datafile.blocks import Block, Fixed, Variable, inflate, to_arrow
from lance_sql.format.datafile.compressive import range_indices
from lance_sql.format.datafile.memory import gather_runs
from lance_sql.format.pb import encodings_v2_1_pb2 as pb
from lance_sql.numpy_arrow import array_from_numpy

Reader = Callable[[int, int], bytes | memoryview]
COALESCE = 64 * 1024


def _word_bytes(bits: int) -> int:
    return 0 if bits == 0 else 1 if bits <= 8 else 2 if bits <= 16 else 4


def _read_le(raw: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(pos.shape, np.int64)
    for i in range(nbytes):
        out |= raw[pos + i].astype(np.int64) << (8 * i)
    return out


def _coalesced_reads(read: Reader, base: int, lo: np.ndarray, hi: np.ndarray):
    """Read byte ranges ``[lo, hi)`` of a buffer; returns (bytes, position of each lo)."""
    cut = np.flatnonzero(lo[1:] - hi[:-1] > COALESCE) + 1
    a_idx = np.r_[0, cut]
    b_idx = np.r_[cut, lo.size]
    pieces, starts = [], []
    for a, b in zip(a_idx.tolist(), b_idx.tolist(), strict=True):
        s, e = int(lo[a]), int(hi[b - 1])
        pieces.append(read(base + s, e - s))
        starts.append(s)
    if len(pieces) == 1:
        return np.frombuffer(pieces[0], np.uint8), lo - starts[0]
    raw = np.frombuffer(b"".join(pieces), np.uint8)
    read_starts = np.array(starts, np.int64)
    read_base = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    which = np.searchsorted(read_starts, lo, "right") - 1
    return raw, lo - read_starts[which] + read_base[which]


class FullZipPage:
    """Reads a full-zip page: each row's levels and value stored together."""
    def __init__(self, read: Reader, buffers, layout: pb.FullZipLayout, num_rows: int,
                 leaf_type: pa.DataType, where: str) -> None:  # fmt: skip
        self.read = read
        self.buffers = buffers
        self.layout = layout
        self.num_rows = num_rows
        self.leaf_type = leaf_type
        self.where = where
        self.layers = list(layout.layers)
        repdef.check_layers(self.layers, where)
        self.bits_rep = int(layout.bits_rep)
        self.bits_def = int(layout.bits_def)
        if self.bits_rep > 16 or self.bits_def > 16:
            raise FormatError(f"{where}: control word of {self.bits_rep}+{self.bits_def} bits")
        self.cw = _word_bytes(self.bits_rep + self.bits_def)
        self.max_rep = repdef.max_rep(self.layers)
        if (self.bits_rep > 0) != (self.max_rep > 0):
            raise FormatError(f"{where}: repetition bits do not match the list layers")
        self.max_vis = repdef.max_visible_def(self.layers)
        detail = layout.WhichOneof("details")
        if detail is None:
            raise FormatError(f"{where}: full-zip page without a value width")
        self.fixed = detail == "bits_per_value"
        width = int(getattr(layout, detail))
        if width % 8 or width <= 0 or (not self.fixed and width not in (8, 16, 32, 64)):
            raise FormatError(f"{where}: full-zip {detail} of {width}")
        self.width = width // 8
        self.has_index = len(buffers) > 1
        if (not self.fixed or self.bits_rep) and not self.has_index:
            raise FormatError(f"{where}: full-zip page needs a row index")
        if not buffers:
            raise FormatError(f"{where}: full-zip page has no data buffer")
        self._check_value_encoding()

    def _check_value_encoding(self) -> None:
        enc = self.layout.value_compression
        k = cz.kind(enc)
        ok = ("flat", "fixed_size_list") if self.fixed else (
            "variable", "fsst", "general", "variable_packed_struct")
        if k not in ok:
            raise UnsupportedFeatureError(
                f"{self.where}: the {k!r} encoding is not supported in a full-zip page"
            )

    # ------------------------------------------------------------------ byte spans
    def _row_index(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Row-index entries ``starts[i] ..= ends[i]`` of every range, concatenated."""
        off, size = self.buffers[1]
        n = self.num_rows + 1
        if size % n or size // n not in (1, 2, 4, 8):
            raise FormatError(f"{self.where}: row index of {size} bytes for {self.num_rows} rows")
        w = size // n
        raw, pos = _coalesced_reads(self.read, off, starts * w, (ends + 1) * w)
        per = ends + 1 - starts
        entry_pos = np.repeat(pos, per) + range_indices(np.zeros(per.size, np.int64), per) * w
        return _read_le(raw, entry_pos, w)

    def decode(self, starts: np.ndarray, ends: np.ndarray) -> repdef.LeafPiece:
        where = self.where
        data_off, data_size = self.buffers[0]
        counts = ends - starts
        local = range_indices(np.zeros(counts.size, np.int64), counts)
        if self.has_index:
            entries = self._row_index(starts, ends)
            heads = np.cumsum(counts + 1) - (counts + 1)
            bstart = entries[heads]
            bend = entries[heads + counts]
            steps = np.diff(entries)
            steps[heads[1:] - 1] = 0  # between ranges
            if np.any(steps < 0):
                raise FormatError(f"{where}: row index positions decrease")
            if int(bend.max(initial=0)) > data_size or np.any(bend < bstart):
                raise FormatError(f"{where}: row index points outside the page data")
            raw, pos = _coalesced_reads(self.read, data_off, bstart, bend)
            row_idx = np.repeat(heads, counts) + local
            shift = np.repeat(pos - bstart, counts)
            row_lo = entries[row_idx] + shift
            row_hi = entries[row_idx + 1] + shift
        else:
            stride = self.cw + self.width
            bstart, bend = starts * stride, ends * stride
            if int(bend.max(initial=0)) > data_size:
                raise FormatError(f"{where}: rows past the end of the page data")
            raw, pos = _coalesced_reads(self.read, data_off, bstart, bend)
            row_lo = np.repeat(pos, counts) + local * stride
            row_hi = row_lo + stride
        return self._parse(raw, row_lo, row_hi)

    # ------------------------------------------------------------------ entries
    def _parse(self, raw: np.ndarray, row_lo: np.ndarray, row_hi: np.ndarray):
        where = self.where
        nrows = row_lo.size
        ptr = row_lo.copy()
        rows = np.arange(nrows)
        reps, defs, vstart, vlen, order_row, order_round = [], [], [], [], [], []
        rnd = 0
        active = rows[ptr < row_hi] if self.bits_rep else rows
        while active.size:
            p = ptr[active]
            if self.cw:
                if np.any(p + self.cw > row_hi[active]):
                    raise FormatError(f"{where}: control word past the end of its row")
                word = _read_le(raw, p, self.cw)
                p = p + self.cw
                if self.bits_rep and self.bits_def:
                    r = word >> self.bits_def
                    d = word & ((1 << self.bits_def) - 1)
                elif self.bits_rep:
                    r, d = word, np.zeros_like(word)
                else:
                    r, d = np.zeros_like(word), word
            else:
                r = d = np.zeros(active.size, np.int64)
            vis = d <= self.max_vis
            has_value = vis if self.fixed else vis & (d == 0)
            length = np.zeros(active.size, np.int64)
            if self.fixed:
                length[has_value] = self.width
            elif has_value.any():
                hp = p[has_value]
                if np.any(hp + self.width > row_hi[active][has_value]):
                    raise FormatError(f"{where}: value length past the end of its row")
                length[has_value] = _read_le(raw, hp, self.width)
                p = p + np.where(has_value, self.width, 0)
            end = p + length
            if np.any(end > row_hi[active]):
                raise FormatError(f"{where}: value runs past the end of its row")
            reps.append(r)
            defs.append(d)
            vstart.append(np.where(vis, p, -1))
            vlen.append(np.where(vis, length, -1))
            order_row.append(active)
            order_round.append(np.full(active.size, rnd, np.int64))
            ptr[active] = end
            rnd += 1
            if not self.bits_rep:
                break
            active = active[end < row_hi[active]]
        if not self.bits_rep and np.any(ptr != row_hi):
            raise FormatError(f"{where}: row bytes do not match their values")
        if len(reps) > 1:
            order = np.lexsort((np.concatenate(order_round), np.concatenate(order_row)))
            rep = np.concatenate(reps)[order]
            def_ = np.concatenate(defs)[order]
            vs = np.concatenate(vstart)[order]
            vl = np.concatenate(vlen)[order]
        else:
            rep, def_, vs, vl = reps[0], defs[0], vstart[0], vlen[0]
        if self.bits_rep:
            first = np.r_[True, np.diff(np.concatenate(order_row)[order] if len(reps) > 1
                                        else order_row[0]) != 0]  # fmt: skip
            if np.any((rep == self.max_rep) != first):
                raise FormatError(f"{where}: row index does not match the repetition levels")
        vis_mask = vs >= 0
        vs, vl = vs[vis_mask], vl[vis_mask]
        slot_def = def_[vis_mask]
        values = self._values(raw, vs, vl, slot_def)
        rep_out = rep.astype(np.uint16) if self.bits_rep else None
        def_out = def_.astype(np.uint16) if self.bits_def else None
        return repdef.LeafPiece(rep_out, def_out, values, self.layers, int(rep.size))

    def _values(self, raw, vs, vl, slot_def) -> pa.Array:
        where = self.where
        valid = slot_def == 0 if self.bits_def else None
        enc = self.layout.value_compression
        if self.fixed:
            if vs.size and int(vs[-1] - vs[0]) == (vs.size - 1) * self.width and (
                self.cw == 0 or vs.size == 1
            ):
                data = raw[int(vs[0]) : int(vs[0]) + vs.size * self.width]  # back to back
            elif vs.size and np.all(np.diff(vs) == self.cw + self.width):
                rows = np.lib.stride_tricks.as_strided(
                    raw[int(vs[0]) :], shape=(vs.size, self.width),
                    strides=(self.cw + self.width, 1), writeable=False,
                )  # fmt: skip
                data = np.ascontiguousarray(rows).reshape(-1)
            else:
                idx = vs[:, None] + np.arange(self.width)[None, :]
                data = raw[idx].reshape(-1)
            return to_arrow(_fixed_from_rows(enc, data, vs.size, self.width, where),
                            self.leaf_type, valid, where)
        k = cz.kind(enc)
        if k == "variable_packed_struct":
            return _variable_packed_struct(enc.variable_packed_struct, raw, vs, vl, valid,
                                           self.leaf_type, where)  # fmt: skip
        offsets = np.zeros(vs.size + 1, np.int64)
        np.cumsum(vl, out=offsets[1:])
        data = gather_runs(raw, vs, vl)  # the rows' bytes without their headers
        if data is None:
            data = raw[range_indices(vs, vl)]
        block: Block = Variable(offsets, data, vs.size)
        if k == "fsst":
            block = cz.fsst_decode(enc.fsst.symbol_table, block, where)
        elif k == "general":
            scheme = enc.general.compression.scheme
            pieces = [inflate(scheme, data[a:b], where) if b > a else b""
                      for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
            lens = np.fromiter((len(x) for x in pieces), np.int64, len(pieces))
            new = np.zeros(vs.size + 1, np.int64)
            np.cumsum(lens, out=new[1:])
            block = Variable(new, np.frombuffer(b"".join(pieces), np.uint8), vs.size)
        return to_arrow(block, self.leaf_type, valid, where)


def _variable_packed_struct(vps: pb.VariablePackedStruct, raw: np.ndarray, vs: np.ndarray,
                            vl: np.ndarray, valid: np.ndarray | None, leaf_type: pa.DataType,
                            where: str) -> pa.Array:  # fmt: skip
    """Struct values zipped row by row (blob v2 descriptions in 2.2).

    Each valid value is its fields back to back: a fixed-width field as its bytes, a
    variable-width one as a u32/u64 length then the bytes. Parsed one field at a time,
    vectorised across rows; null values carry no bytes and get zeros / empty children.
    """
    t = leaf_type.storage_type if isinstance(leaf_type, pa.BaseExtensionType) else leaf_type
    if not pa.types.is_struct(t) or t.num_fields != len(vps.fields):
        raise FormatError(f"{where}: packed struct of {len(vps.fields)} fields for a {t} column")
    n = vs.size
    sel = np.flatnonzero(valid) if valid is not None else np.arange(n)
    cur = vs[sel].astype(np.int64)
    end = cur + vl[sel]
    children = []
    for i, fe in enumerate(vps.fields):
        child = t.field(i)
        layout = fe.WhichOneof("layout")
        k = cz.kind(fe.value)
        if layout == "bits_per_value":
            bits = int(fe.bits_per_value)
            if k != "flat" or int(fe.value.flat.bits_per_value) != bits or fe.value.flat.HasField(
                    "data"):  # fmt: skip
                raise UnsupportedFeatureError(
                    f"{where}: packed struct field {child.name!r} uses the {k!r} encoding")
            if bits % 8 or not 0 < bits <= 64:
                raise FormatError(f"{where}: packed struct field {child.name!r} of {bits} bits")
            w = bits // 8
            if np.any(cur + w > end):
                raise FormatError(f"{where}: packed struct field {child.name!r} past its row")
            data = np.zeros((n, w), np.uint8)
            data[sel] = raw[cur[:, None] + np.arange(w)[None, :]]
            cur = cur + w
            block: Fixed | Variable = Fixed(data.reshape(-1), bits, n)
        elif layout == "bits_per_length":
            bits = int(fe.bits_per_length)
            if k != "variable":
                raise UnsupportedFeatureError(
                    f"{where}: packed struct field {child.name!r} uses the {k!r} encoding")
            if bits not in (32, 64):
                raise FormatError(f"{where}: packed struct length prefix of {bits} bits")
            lb = bits // 8
            if np.any(cur + lb > end):
                raise FormatError(f"{where}: packed struct field {child.name!r} past its row")
            lens = _read_le(raw, cur, lb)
            cur = cur + lb
            if np.any(lens < 0) or np.any(lens > end - cur):
                raise FormatError(f"{where}: packed struct field {child.name!r} past its row")
            data = raw[range_indices(cur, lens)]
            cur = cur + lens
            full = np.zeros(n, np.int64)
            full[sel] = lens
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(full, out=offsets[1:])
            block = Variable(offsets, data, n)
        else:
            raise FormatError(f"{where}: packed struct field {child.name!r} has no width")
        children.append(to_arrow(block, child.type, valid, where))
    if np.any(cur != end):
        raise FormatError(f"{where}: packed struct rows hold bytes beyond their fields")
    vbuf = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    out = pa.StructArray.from_buffers(t, n, [vbuf], children=children)
    if isinstance(leaf_type, pa.BaseExtensionType):
        out = pa.ExtensionArray.from_storage(leaf_type, out)
    return out


def _fixed_from_rows(enc: pb.CompressiveEncoding, data: np.ndarray, n: int, width: int,
                     where: str) -> Fixed:  # fmt: skip
    """Fixed block from ``n`` zipped values of ``width`` bytes (FSL validity first)."""
    if cz.kind(enc) == "flat":
        bits = int(enc.flat.bits_per_value)
        if bits != width * 8:
            raise FormatError(f"{where}: {bits}-bit values in {width}-byte slots")
        return Fixed(data, bits, n)
    layers, bits = cz.fsl_layers(enc, where)
    rows = data.reshape(n, width) if n else data.reshape(0, width)
    col = 0
    cum = 1
    out_layers = []
    for dim, has_validity in layers:
        cum *= dim
        valid = None
        if has_validity:
            nb = (cum + 7) // 8
            bitsarr = np.unpackbits(rows[:, col : col + nb], axis=1, bitorder="little")
            valid = bitsarr[:, :cum].reshape(-1).astype(bool)
            col += nb
        out_layers.append((dim, valid))
    if (width - col) * 8 != bits * cum:
        raise FormatError(f"{where}: fixed-size list slot of {width} bytes does not fit")
    if bits == 0:
        return Fixed(np.zeros(0, np.uint8), 0, n, tuple(out_layers))
    values = np.ascontiguousarray(rows[:, col:]).reshape(-1)
    return Fixed(values, bits, n, tuple(out_layers))


class ConstantPage:
    """Reads a constant-layout page: one value (or only nulls) for every row."""
    def __init__(self, read: Reader, buffers, layout: pb.ConstantLayout, num_rows: int,
                 leaf_type: pa.DataType, where: str) -> None:  # fmt: skip
        self.where = where
        self.num_rows = num_rows
        self.leaf_type = leaf_type
        self.layers = list(layout.layers)
        repdef.check_layers(self.layers, where)
        self.max_rep = repdef.max_rep(self.layers)
        bufs = list(buffers)
        value: bytes | tuple[bytes, ...] | None = None
        if layout.HasField("inline_value"):
            value = layout.inline_value
        elif len(bufs) in (1, 3):
            off, size = bufs.pop(0)
            value = _unframe_value(read(off, size) if size else b"", where)
        if len(bufs) not in (0, 2):
            raise FormatError(f"{where}: constant page with {len(buffers)} buffers")
        self.value = value
        self.rep = self.def_ = None
        if bufs:
            self.rep = _levels(read, bufs[0], layout.rep_compression
                               if layout.HasField("rep_compression") else None,
                               int(layout.num_rep_values), where)  # fmt: skip
            self.def_ = _levels(read, bufs[1], layout.def_compression
                                if layout.HasField("def_compression") else None,
                                int(layout.num_def_values), where)  # fmt: skip
        if (self.rep is not None) != (self.max_rep > 0):
            raise FormatError(f"{where}: constant page repetition does not match its layers")
        if self.rep is not None and self.def_ is not None and self.rep.size != self.def_.size:
            raise FormatError(f"{where}: constant page has {self.rep.size} rep and "
                              f"{self.def_.size} def levels")  # fmt: skip
        if self.rep is not None:
            self.row_pos = np.flatnonzero(self.rep == self.max_rep)
            if self.row_pos.size != num_rows or (self.rep.size and self.row_pos[0] != 0):
                raise FormatError(f"{where}: constant page levels hold {self.row_pos.size} rows, "
                                  f"expected {num_rows}")  # fmt: skip
            self.entries = self.rep.size
        else:
            if self.def_ is not None and self.def_.size != num_rows:
                raise FormatError(f"{where}: {self.def_.size} def levels for {num_rows} rows")
            self.entries = num_rows
        self._scalar = None

    def _scalar_array(self) -> pa.Array | None:
        if self.value is None:
            return None
        if self._scalar is None:
            self._scalar = _scalar(self.value, self.leaf_type, self.where)
        return self._scalar

    def decode(self, starts: np.ndarray, ends: np.ndarray) -> repdef.LeafPiece:
        if self.rep is not None:
            lo = self.row_pos[starts]
            ends_pos = np.r_[self.row_pos, self.entries]
            hi = ends_pos[ends]
        else:
            lo, hi = starts, ends
        take = range_indices(lo, hi - lo)
        rep = None if self.rep is None else self.rep[take]
        def_ = None if self.def_ is None else self.def_[take]
        vis = repdef.visible(def_, self.layers)
        nvis = take.size if vis is None else int(np.count_nonzero(vis))
        slot_def = None if def_ is None else (def_ if vis is None else def_[vis])
        scalar = self._scalar_array()
        if scalar is None:
            values = pa.nulls(nvis, self.leaf_type)
        else:
            idx = np.zeros(nvis, np.int64)
            mask = None if slot_def is None else slot_def != 0
            values = scalar.take(array_from_numpy(idx, mask=mask))
        return repdef.LeafPiece(rep, def_, values, self.layers, int(take.size))


def _unframe_value(raw: bytes | memoryview, where: str) -> bytes | tuple[bytes, ...]:
    """A constant stored in a buffer: ``u32 count``, ``count`` u32 sizes, then the parts."""
    raw = bytes(raw)
    if len(raw) < 4:
        raise FormatError(f"{where}: constant value buffer of {len(raw)} bytes")
    count = struct.unpack_from("<I", raw)[0]
    if 4 + 4 * count > len(raw):
        raise FormatError(f"{where}: truncated constant value buffer")
    sizes = struct.unpack_from(f"<{count}I", raw, 4)
    pos = 4 + 4 * count
    if pos + sum(sizes) != len(raw):
        raise FormatError(f"{where}: constant value parts do not fill their buffer")
    parts = []
    for n in sizes:
        parts.append(raw[pos : pos + n])
        pos += n
    return tuple(parts)


def _scalar(value, t: pa.DataType, where: str) -> pa.Array:
    """One-element array holding the page's constant."""
    storage = t
    while isinstance(storage, pa.BaseExtensionType):
        storage = storage.storage_type
    if isinstance(value, tuple):
        if len(value) == 2 and len(value[0]) in (8, 16):  # variable width: offsets, bytes
            offs = np.frombuffer(value[0], "<u4" if len(value[0]) == 8 else "<u8")
            lo, hi = int(offs[0]), int(offs[1])
            if not lo <= hi <= len(value[1]):
                raise FormatError(f"{where}: constant value offsets {lo}..{hi} are corrupt")
            data = np.frombuffer(value[1], np.uint8)[lo:hi]
            block = Variable(np.array([0, hi - lo], np.int64), data, 1)
            return to_arrow(block, t, None, where)
        if len(value) == 1:
            value = value[0]
        else:
            raise UnsupportedFeatureError(f"{where}: constant value with {len(value)} parts")
    data = np.frombuffer(value, np.uint8)
    if pa.types.is_boolean(storage):
        return to_arrow(Fixed(data[:1] & 1, 1, 1), t, None, where)
    fsl = []
    inner = storage
    while pa.types.is_fixed_size_list(inner):
        fsl.append((inner.list_size, None))
        inner = inner.value_type
        while isinstance(inner, pa.BaseExtensionType):
            inner = inner.storage_type
    cum = int(np.prod([d for d, _ in fsl])) if fsl else 1
    if (data.size * 8) % cum:
        raise FormatError(f"{where}: constant of {data.size} bytes for {t}")
    bits = data.size * 8 // cum
    if pa.types.is_boolean(inner) and fsl:
        bits = 1
    return to_arrow(Fixed(data, bits, 1, tuple(fsl)), t, None, where)


def _levels(read: Reader, buf: tuple[int, int], enc, count: int, where: str):
    off, size = buf
    if size == 0:
        return None
    raw = np.frombuffer(read(off, size), np.uint8)
    if enc is None:
        if size % 2:
            raise FormatError(f"{where}: level buffer of {size} bytes")
        return raw.view("<u2")
    block = cz.decode_block(enc, raw, count, where)
    if not isinstance(block, Fixed) or block.bits != 16 or block.fsl:
        raise FormatError(f"{where}: levels are not 16-bit values")
    return block.data[: 2 * count].view("<u2")
