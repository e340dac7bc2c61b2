"""Rows named by the user (positions, row ids, addresses): checked, then turned into
row addresses.

Positions count the live rows only (a deleted row has none), as pylance's ``take`` does,
so mapping one to its address needs the fragment's deletion file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_sql.errors import InvalidInputError
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.sorted_sets import sorted_difference
from lance_sql.table.files.reader import deleted_offsets

__all__ = ["U64_MAX", "checked_integers", "live_addresses"]

U64_MAX = (1 << 64) - 1


def checked_integers(values: Sequence[int] | np.ndarray, what: str, high: int) -> np.ndarray:
    """``values`` as a 1-d integer array, each in ``[0, high]``; InvalidInputError naming the
    first that is not (None, a float, -1, 2**64...) instead of numpy's overflow errors."""
    try:
        arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged or odd input
        raise InvalidInputError(f"{what}: expected a sequence of integers ({exc})") from None
    if arr.ndim != 1:
        raise InvalidInputError(f"{what}: expected a flat sequence of integers")
    if arr.size == 0:
        return np.empty(0, np.uint64)
    if arr.dtype.kind == "u" and high >= (1 << (8 * arr.itemsize)) - 1:
        return arr  # every value of the type is in range: no pass over them
    if arr.dtype.kind in "iu" and int(arr.min()) >= 0 and int(arr.max()) <= high:
        return arr
    items = arr.tolist()  # only integers beyond int64, mixed input, or an error from here
    if arr.dtype.kind == "O" and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= high for v in items):
        return np.array(items, dtype=np.uint64)
    bad = next(v for v in items if isinstance(v, bool) or not isinstance(v, int)
               or not 0 <= v <= high)
    raise InvalidInputError(f"{what}: {bad!r} is not an integer between 0 and {high}")


def live_addresses(store: ObjectStore, manifest: Manifest, fragment: Fragment,
                   positions: np.ndarray) -> np.ndarray:
    """Row addresses (uint64) of ``fragment``'s live rows at ``positions`` (int64, each
    already checked to be below the fragment's live row count)."""
    offsets = positions
    deleted = deleted_offsets(store, manifest, fragment)
    if len(deleted):
        live = sorted_difference(np.arange(fragment.physical_rows, dtype=np.int64), deleted)
        offsets = live[positions]
    return (np.uint64(fragment.id) << np.uint64(32)) | offsets.astype(np.uint64)
