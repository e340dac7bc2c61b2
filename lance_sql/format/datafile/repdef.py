"""Repetition/definition levels of Lance 2.1/2.2 to Arrow offsets and validity (vectorised).

A leaf column stores, per level entry, a repetition level (``rep``; ``k`` = a new list
starts at list depth ``k``, counting list layers from the innermost = 1, so ``rep ==
max_rep`` starts a row) and a definition level (``def``; 0 = valid, then one level per
nullable layer counted from the innermost outwards; a list layer that can be both null and
empty uses two: null first, empty second). Empty and null lists, and lists hidden by a
null struct above them, occupy an entry but no value slot.

The instances of every layer can be found without walking the tree. With layers ordered
outermost first, let ``k`` be the number of list layers at or inside a layer and ``D``
the number of definition levels inside the nearest list layer enclosing it (unbounded if
none). Then the layer's instances are exactly the entries with ``rep >= k`` and
``def <= D``:

* an item (struct or value) layer is valid where ``def <= base`` (``base`` = levels
  strictly inside it);
* a list layer is valid where ``def`` is neither its null level nor above its own levels,
  and its offsets count the next layer's instances before each list instance.

That makes each layer one boolean mask and one ``flatnonzero`` over the entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError
from lance_sql.format.pb import encodings_v2_1_pb2 as pb

ALL_VALID_ITEM = pb.REPDEF_ALL_VALID_ITEM
ALL_VALID_LIST = pb.REPDEF_ALL_VALID_LIST
NULLABLE_ITEM = pb.REPDEF_NULLABLE_ITEM
NULLABLE_LIST = pb.REPDEF_NULLABLE_LIST
EMPTYABLE_LIST = pb.REPDEF_EMPTYABLE_LIST
NULL_AND_EMPTY_LIST = pb.REPDEF_NULL_AND_EMPTY_LIST

_LISTS = (ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST)
DEF_LEVELS: dict[int, int] = {
    ALL_VALID_ITEM: 0,
    ALL_VALID_LIST: 0,
    NULLABLE_ITEM: 1,
    NULLABLE_LIST: 1,
    EMPTYABLE_LIST: 1,
    NULL_AND_EMPTY_LIST: 2,
}


def is_list(layer: int) -> bool:
    """True for the layer kinds that are lists (they add a repetition level)."""
    return layer in _LISTS


def check_layers(layers: Sequence[int], where: str) -> None:
    """Refuse a page whose rep/def layers are missing or unknown."""
    if not layers:
        raise FormatError(f"{where}: page has no rep/def layers")
    for layer in layers:
        if layer not in DEF_LEVELS:
            raise FormatError(f"{where}: unknown rep/def layer {layer}")
    if is_list(layers[0]):
        raise FormatError(f"{where}: the innermost rep/def layer is a list")


def max_rep(layers: Sequence[int]) -> int:
    """The highest repetition level of ``layers`` (one per list)."""
    return sum(1 for layer in layers if is_list(layer))


def max_def(layers: Sequence[int]) -> int:
    """The highest definition level of ``layers``."""
    return sum(DEF_LEVELS[layer] for layer in layers)


def max_visible_def(layers: Sequence[int]) -> int:
    """Highest def level that still has a value slot (levels inside the innermost list)."""
    total = 0
    for layer in layers:
        if is_list(layer):
            break
        total += DEF_LEVELS[layer]
    return total


def visible(def_: np.ndarray | None, layers: Sequence[int]) -> np.ndarray | None:
    """Mask of level entries that own a value slot (None: all of them)."""
    if def_ is None or not any(is_list(layer) for layer in layers):
        return None
    return def_ <= max_visible_def(layers)


@dataclass
class LeafPiece:
    """Decoded rows of one leaf column: levels for those rows plus their value slots."""

    rep: np.ndarray | None  # uint16 per level entry (None: no lists)
    def_: np.ndarray | None  # uint16 per level entry (None: nothing null or empty)
    values: pa.Array  # one per value slot, leaf nulls applied
    layers: Sequence[int]  # innermost first
    num_entries: int  # level entries (= rows when there are no lists)


@dataclass
class LayerData:
    """One nesting layer of a decoded range: instance count, validity, list offsets."""

    is_list: bool
    count: int
    validity: np.ndarray | None  # bool per instance, None = all valid
    offsets: np.ndarray | None = None  # int64, count + 1 (lists only)


def unravel(
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: Sequence[int],
    num_entries: int,
    where: str,
) -> list[LayerData]:
    """Per-layer structure (outermost first) of ``num_entries`` level entries.

    ``layers`` is innermost first, as stored. The innermost layer's count is the number
    of value slots (visible items).
    """
    outer_first = list(reversed(layers))
    nd = [DEF_LEVELS[layer] for layer in outer_first]
    # base[j]: def levels strictly inside layer j
    base = [sum(nd[j + 1 :]) for j in range(len(nd))]
    lists_inside = [sum(1 for x in outer_first[j:] if is_list(x)) for j in range(len(nd))]
    if rep is not None and int(rep.max(initial=0)) > lists_inside[0]:
        raise FormatError(f"{where}: repetition level above the {lists_inside[0]} list layers")
    if def_ is not None and int(def_.max(initial=0)) > sum(nd):
        raise FormatError(f"{where}: definition level above the {sum(nd)} levels the page has")
    if rep is None and lists_inside[0]:
        raise FormatError(f"{where}: list layers without repetition levels")
    out: list[LayerData] = []
    enclosing_d = None  # def bound from the nearest enclosing list
    positions: list[np.ndarray | None] = []
    for j, layer in enumerate(outer_first):
        k = lists_inside[j]
        if rep is None and def_ is None:
            pos = None
        elif rep is None:
            assert def_ is not None
            pos = None if enclosing_d is None else np.flatnonzero(def_ <= enclosing_d)
        else:
            mask = rep >= k if k else np.ones(rep.size, bool)
            if def_ is not None and enclosing_d is not None:
                mask &= def_ <= enclosing_d
            pos = np.flatnonzero(mask)
        positions.append(pos)
        if is_list(layer):
            enclosing_d = base[j]
    for j, layer in enumerate(outer_first):
        pos = positions[j]
        count = num_entries if pos is None else int(pos.size)
        d = None if def_ is None else (def_ if pos is None else def_[pos])
        if not is_list(layer):
            validity = None
            if d is not None and layer == NULLABLE_ITEM:
                validity = d <= base[j]
            out.append(LayerData(False, count, validity))
            continue
        nxt = positions[j + 1]
        nxt_count = num_entries if nxt is None else int(nxt.size)
        here = np.arange(num_entries) if pos is None else pos
        offsets = np.empty(count + 1, np.int64)
        offsets[:count] = (here if nxt is None else np.searchsorted(nxt, here, "left"))
        offsets[count] = nxt_count
        validity = None
        if d is not None and layer in (NULLABLE_LIST, NULL_AND_EMPTY_LIST):
            null_level = base[j] + 1
            validity = (d != null_level) & (d <= base[j] + nd[j])
        elif d is not None and layer == EMPTYABLE_LIST:
            masked = d > base[j] + nd[j]
            validity = ~masked if masked.any() else None
        elif d is not None and layer == ALL_VALID_LIST:
            masked = d > base[j]
            validity = ~masked if masked.any() else None
        if validity is not None and validity.all():
            validity = None
        out.append(LayerData(True, count, validity, offsets))
    return out


def concat(pieces: list[list[LayerData]], where: str) -> list[LayerData]:
    """Join the per-layer data of consecutive ranges (same layer shapes)."""
    if len(pieces) == 1:
        return pieces[0]
    depth = len(pieces[0])
    if any(len(p) != depth for p in pieces):
        raise FormatError(f"{where}: pages disagree on the nesting depth")
    out = []
    for j in range(depth):
        layer = [p[j] for p in pieces]
        if len({x.is_list for x in layer}) != 1:
            raise FormatError(f"{where}: pages disagree on a list layer")
        count = sum(x.count for x in layer)
        validity = None
        if any(x.validity is not None for x in layer):
            validity = np.concatenate(
                [np.ones(x.count, bool) if x.validity is None else x.validity for x in layer]
            )
        offsets = None
        if layer[0].is_list:
            parts = [np.zeros(1, np.int64)]
            base = 0
            for x in layer:
                assert x.offsets is not None  # a list layer
                parts.append(x.offsets[1:] - x.offsets[0] + base)
                base += int(x.offsets[-1] - x.offsets[0])
            offsets = np.concatenate(parts)
        out.append(LayerData(layer[0].is_list, count, validity, offsets))
    return out
