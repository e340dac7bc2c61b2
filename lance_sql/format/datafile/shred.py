"""Shred Arrow arrays into Lance 2.1/2.2 leaf columns: rep/def levels plus value slots.

The inverse of :mod:`repdef`. Walking a field top-down, every level entry carries the
index of its element in the current Arrow array (or -1 once an outer null or empty list
has ended it), the outermost list that starts at it and a marker of the layer that ended
it. A list layer expands each live entry into its items (the first keeps what starts at
the entry, the others start the next inner list); a struct or value layer only marks
nulls. At the leaf, list ordinals become repetition levels and markers definition levels,
both counted from the innermost layer as the format requires (sibling leaves under a
struct can have different numbers of lists, so this waits for the leaf). Everything is
vectorised per layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import UnsupportedFeatureError
from lance_sql.format.datafile import repdef
from lance_sql.format.datafile.decode_v2_1 import owns_column
from lance_sql.format.schema import LanceField


@dataclass
class ShreddedLeaf:
    """One leaf column of shredded rows: levels, layers and values."""
    field: LanceField  # the field that owns the column
    rep: np.ndarray | None  # uint16 per level entry, None without lists
    def_: np.ndarray | None  # uint16 per level entry, None when nothing is null or empty
    layers: Sequence[int]  # innermost first
    values: pa.Array  # one per value slot (storage type); null where def != 0
    num_rows: int


def _storage(arr: pa.Array) -> pa.Array:
    """``arr`` without extension types, and with the NULLs a dictionary holds moved into
    its indices (Arrow counts only NULL indices in a dictionary array's validity)."""
    while isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type) and arr.dictionary.null_count:
        arr = _nulls_in_indices(arr)
    return arr


def _nulls_in_indices(arr: pa.DictionaryArray) -> pa.DictionaryArray:
    """``arr`` with each index that points at a NULL dictionary entry made NULL itself."""
    points_at_value = pc.fill_null(pc.take(arr.dictionary.is_valid(), arr.indices), False)
    indices = pc.if_else(points_at_value, arr.indices, pa.scalar(None, arr.indices.type))
    return pa.DictionaryArray.from_arrays(indices, arr.dictionary, ordered=arr.type.ordered)


def _valid(arr: pa.Array, idx: np.ndarray) -> np.ndarray:
    """Validity of ``arr`` at ``idx`` (all >= 0)."""
    if arr.null_count == 0:
        return np.ones(idx.size, bool)
    if pa.types.is_null(arr.type):
        return np.zeros(idx.size, bool)
    mask = np.asarray(arr.is_valid())
    return mask[idx]


@dataclass
class _State:
    idx: np.ndarray  # int64 element index, -1 when ended by an outer layer
    rep: np.ndarray  # int32 ordinal (1 = outermost) of the outermost list starting here
    mark: np.ndarray  # int32: 0 live, 2j+1 null at layer j, 2j+2 empty list at layer j
    layers: list[str]  # "item" / "list", outermost first

    def copy(self) -> _State:
        return _State(self.idx, self.rep, self.mark, list(self.layers))


_NO_LIST = 1 << 20  # ordinal of "no list starts at this entry"


def shred(field: LanceField, arr: pa.Array) -> list[ShreddedLeaf]:
    """Leaf columns of a top-level ``field`` holding ``arr``."""
    n = len(arr)
    if owns_column(field):
        return [_top_leaf(field, arr, n)]
    out: list[ShreddedLeaf] = []
    state = _State(
        np.arange(n, dtype=np.int64), np.full(n, _NO_LIST, np.int32), np.zeros(n, np.int32), []
    )
    _walk(field, arr, state, out, n)
    return out


def _top_leaf(field: LanceField, arr: pa.Array, n: int) -> ShreddedLeaf:
    """A top-level field that owns its column (no struct or list above it): one item
    layer, definition levels only when something is null, the array itself as the value
    slots. What :func:`_walk` and :func:`_finish` give such a field, without building
    their per-entry index, ordinal and marker arrays (most columns of most tables)."""
    arr = _storage(arr)
    if pa.types.is_null(arr.type):
        nulls: np.ndarray | None = np.ones(n, bool)
    elif arr.null_count:
        nulls = ~np.asarray(arr.is_valid())
    else:
        nulls = None
    if nulls is None or not nulls.any():
        return ShreddedLeaf(field, None, None, [repdef.ALL_VALID_ITEM], arr, n)
    return ShreddedLeaf(field, None, nulls.astype(np.uint16), [repdef.NULLABLE_ITEM], arr, n)


def _walk(field: LanceField, arr: pa.Array, st: _State, out: list, n: int) -> None:
    arr = _storage(arr)
    t = arr.type
    j = len(st.layers)
    live = st.idx >= 0
    if owns_column(field):
        st.layers.append("item")
        if not pa.types.is_null(t) and arr.null_count:
            valid = np.ones(st.idx.size, bool)
            valid[live] = _valid(arr, st.idx[live])
            st.mark = np.where(live & ~valid, 2 * j + 1, st.mark)
        elif pa.types.is_null(t):
            st.mark = np.where(live, 2 * j + 1, st.mark)
        out.append(_finish(field, arr, st, n))
        return
    if pa.types.is_struct(t):
        # "item+" marks a struct with a list somewhere below it (see _finish); every leaf of
        # the struct must agree on the struct layer, so this is decided per struct field
        st.layers.append("item+" if _has_list_below(field) else "item")
        _end_nulls(arr, st, live, j)
        for i, child in enumerate(field.children):
            _walk(child, arr.field(i), st.copy(), out, n)
        return
    if pa.types.is_fixed_size_list(t):  # of structs: their fields item by item
        # as pylance stores them: an item layer marking null lists, then ``k`` entries for
        # every entry (ended ones too), so each leaf holds ``k`` entries a row
        st.layers.append("item")
        k = t.list_size
        _end_nulls(arr, st, live, j)
        pos = np.tile(np.arange(k, dtype=np.int64), st.idx.size)
        owner = np.repeat(st.idx, k)
        idx = np.where(owner >= 0, (owner + arr.offset) * k + pos, -1)
        rep = np.where(pos == 0, np.repeat(st.rep, k), _NO_LIST).astype(np.int32)
        nxt = _State(idx, rep, np.repeat(st.mark, k), st.layers)
        _walk(field.children[0], arr.values, nxt, out, n)
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        st.layers.append("list")
        ordinal = st.layers.count("list")  # 1 = the outermost list on this path
        offsets = np.asarray(arr.offsets).astype(np.int64)
        lens = np.zeros(st.idx.size, np.int64)
        li = st.idx[live]
        lens[live] = offsets[li + 1] - offsets[li]
        valid = np.ones(st.idx.size, bool)
        valid[live] = _valid(arr, li)
        null = live & ~valid
        empty = live & valid & (lens == 0)
        expand = live & valid & (lens > 0)
        mark = np.where(null, 2 * j + 1, np.where(empty, 2 * j + 2, st.mark))
        counts = np.where(expand, lens, 1)  # new entries per entry (at least one)
        first = np.cumsum(counts) - counts
        # the entry each new entry comes from: a running count of entry starts (cheaper
        # than np.repeat, as are the takes below)
        owner = np.zeros(int(first[-1] + counts[-1]) if counts.size else 0, np.intp)
        owner[first[1:]] = 1
        np.cumsum(owner, out=owner)
        pos = np.arange(owner.size) - np.take(first, owner)
        starts = np.where(expand, offsets[np.maximum(st.idx, 0)], -1)
        idx = np.where(np.take(expand, owner), np.take(starts, owner) + pos, -1)
        # every entry reaching this layer starts a list of this ordinal (or an outer one);
        # later items of a list start the next inner list (if any)
        entry_rep = np.minimum(st.rep, ordinal)
        rep = np.where(pos == 0, np.take(entry_rep, owner), ordinal + 1).astype(np.int32)
        child = arr.values
        if pa.types.is_map(t):
            child = pa.StructArray.from_arrays([arr.keys, arr.items],
                                               fields=[t.key_field, t.item_field])  # fmt: skip
        nxt = _State(idx, rep, np.take(mark, owner), st.layers)
        _walk(field.children[0], child, nxt, out, n)
        return
    raise UnsupportedFeatureError(f"column {field.name!r}: cannot write {t} in Lance 2.2 files")


def _end_nulls(arr: pa.Array, st: _State, live: np.ndarray, j: int) -> None:
    """Mark the live entries whose value is NULL as ended at layer ``j``."""
    if arr.null_count:
        valid = np.ones(st.idx.size, bool)
        valid[live] = _valid(arr, st.idx[live])
        ended = live & ~valid
        st.mark = np.where(ended, 2 * j + 1, st.mark)
        st.idx = np.where(ended, -1, st.idx)


def _has_list_below(field: LanceField) -> bool:
    return any(f.logical_type.startswith(("list", "large_list"))
               for c in field.children for f in c.walk())


def _finish(field: LanceField, arr: pa.Array, st: _State, n: int) -> ShreddedLeaf:
    forced = [k == "item+" for k in st.layers]
    outer = ["item" if k == "item+" else k for k in st.layers]  # outermost first
    marks = st.mark
    has_null = [bool(np.any(marks == 2 * j + 1)) for j in range(len(outer))]
    has_empty = [bool(np.any(marks == 2 * j + 2)) for j in range(len(outer))]
    # pylance pushes a struct's nulls into its children (down to the next list), so their
    # layers are nullable too; its reader expects that shape
    for j in range(1, len(outer)):
        if outer[j - 1] == "item" and (has_null[j - 1] or forced[j - 1]):
            has_null[j] = True
    # pylance 14.0.2's reader miscounts an all-valid struct layer above a list when another
    # page has nulls there ("Incorrect number of nulls for StructArray"), even in its own
    # files; struct layers with a list below are therefore always written as nullable (in
    # every leaf of that struct alike: pylance rejects siblings that disagree)
    kinds = []
    for j, kind in enumerate(outer):
        if kind == "item":
            nullable = has_null[j] or forced[j]
            kinds.append(repdef.NULLABLE_ITEM if nullable else repdef.ALL_VALID_ITEM)
        elif has_null[j] and has_empty[j]:
            kinds.append(repdef.NULL_AND_EMPTY_LIST)
        elif has_null[j]:
            kinds.append(repdef.NULLABLE_LIST)
        elif has_empty[j]:
            kinds.append(repdef.EMPTYABLE_LIST)
        else:
            kinds.append(repdef.ALL_VALID_LIST)
    layers = list(reversed(kinds))  # innermost first
    nd = [repdef.DEF_LEVELS[k] for k in kinds]
    base = [sum(nd[j + 1 :]) for j in range(len(nd))]
    table = np.zeros(2 * len(outer) + 1, np.int32)
    for j in range(len(outer)):
        table[2 * j + 1] = base[j] + 1
        table[2 * j + 2] = base[j] + (2 if kinds[j] == repdef.NULL_AND_EMPTY_LIST else 1)
    def_ = table[marks].astype(np.uint16) if any(nd) else None
    has_lists = "list" in outer
    rep = None
    if has_lists:
        total = outer.count("list")
        rep = np.where(st.rep <= total, total - st.rep + 1, 0).astype(np.uint16)
    # value slots: entries visible at the leaf
    if def_ is not None and has_lists:
        visible = def_ <= repdef.max_visible_def(layers)
    else:
        visible = None
    idx = st.idx if visible is None else st.idx[visible]
    if idx.size and int(idx[0]) >= 0 and int(idx[-1]) - int(idx[0]) == idx.size - 1 and (
            np.all(idx[1:] - idx[:-1] == 1)):  # fmt: skip
        # the slots are a run of the array (lists whose items follow each other): a slice
        values = arr if idx.size == len(arr) else arr.slice(int(idx[0]), idx.size)
    elif not has_lists and len(arr) == idx.size == 0:
        values = arr
    else:
        safe = np.maximum(idx, 0)
        values = arr.take(pa.array(safe, mask=idx < 0)) if idx.size else arr.slice(0, 0)
    return ShreddedLeaf(field, rep, def_, layers, values, n)
