"""Distinct values, unions, intersections and differences of integer arrays by sorting.

numpy 2.4's ``np.unique`` without ``return_*`` flags hashes its input, and on arrays of
many distinct values that is dozens of times a sort: 500k distinct int64 take ~0.6 s
against ~10 ms sorted (this machine, numpy 2.4.6). Row ids, row addresses and index
answers are exactly such arrays, so their set operations (np.intersect1d, union1d and
setdiff1d call np.unique) are done here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["in_sorted", "sorted_difference", "sorted_intersection", "sorted_union",
           "sorted_unique"]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``: the distinct values, ascending. Integer and bool arrays
    are sorted and their repeats dropped; others (floats, whose NaNs ``np.unique``
    counts once, strings, objects) go to ``np.unique``."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iub":
        return np.unique(values)
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]



def _common(a: np.ndarray, b: np.ndarray) -> np.dtype | None:
    """The integer type both 1-D arrays are compared in (None: leave it to numpy)."""
    if a.ndim != 1 or b.ndim != 1 or a.dtype.kind not in "iub" or b.dtype.kind not in "iub":
        return None
    common = np.result_type(a, b)
    return common if common.kind in "iub" else None


def sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)``."""
    a, b = np.asarray(a), np.asarray(b)
    common = _common(a, b)
    if common is None:
        return np.union1d(a, b)
    return sorted_unique(np.concatenate([a.astype(common, copy=False),
                                         b.astype(common, copy=False)]))


def sorted_intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.intersect1d(a, b)``: the values in both, ascending, once each."""
    a, b = np.asarray(a), np.asarray(b)
    common = _common(a, b)
    if common is None:
        return np.intersect1d(a, b)
    both = np.sort(np.concatenate([sorted_unique(a).astype(common, copy=False),
                                   sorted_unique(b).astype(common, copy=False)]))
    return both[:-1][both[1:] == both[:-1]]


def sorted_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(a, b)``: the values of ``a`` not in ``b``, ascending, once each
    (of ``a``'s type)."""
    a, b = np.asarray(a), np.asarray(b)
    common = _common(a, b)
    if common is None:
        return np.setdiff1d(a, b)
    ours, theirs = sorted_unique(a), sorted_unique(b).astype(common, copy=False)
    if not theirs.size:
        return ours
    return ours[~in_sorted(ours.astype(common, copy=False), theirs)]


def in_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``values`` are in ``sorted_set`` (ascending, of a type they compare with), as
    a bool mask: one binary search each."""
    if not sorted_set.size:
        return np.zeros(values.size, bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return sorted_set[at] == values
