"""``sorted_unique`` is ``np.unique`` (values and dtype) for every input, by a sort for
integer and bool arrays."""

from __future__ import annotations

import numpy as np
import pytest

from lance_sql.sorted_sets import (
    sorted_difference,
    sorted_intersection,
    sorted_union,
    sorted_unique,
)


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(12)
    out: list[np.ndarray] = []
    for dtype in (np.uint32, np.int64, np.uint64, np.int8):
        out += [np.zeros(0, dtype), np.array([5], dtype),
                rng.integers(0, 50, 400).astype(dtype),
                rng.integers(0, 100, 5000).astype(dtype)[::-1],
                np.sort(rng.choice(1 << 20, 5000, replace=False)).astype(dtype)]
    out += [np.array([2**64 - 1, 0, 2**63, 0], np.uint64),
            np.array([-2**63, 2**63 - 1, -1, -2**63], np.int64),
            rng.random(300) < 0.5, np.array([], bool)]
    return out


@pytest.mark.parametrize("values", _inputs(), ids=lambda v: f"{v.dtype}-{v.size}")
def test_sorted_unique_is_numpy_unique(values: np.ndarray) -> None:
    got = sorted_unique(values)
    want = np.unique(values)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_other_inputs_are_numpys() -> None:
    floats = np.array([np.nan, 1.0, np.nan, -0.0, 0.0])
    assert np.array_equal(sorted_unique(floats), np.unique(floats), equal_nan=True)
    assert sorted_unique(floats).size == np.unique(floats).size  # one NaN, as numpy
    words = np.array(["b", "a", "b"])
    assert sorted_unique(words).tolist() == ["a", "b"]
    grid = np.array([[3, 1], [1, 3]])
    assert np.array_equal(sorted_unique(grid), np.unique(grid))
    assert sorted_unique([4, 2, 4]).tolist() == [2, 4]


_PAIRS = [
    (np.array([5, 1, 3, 3, 9], np.int64), np.array([3, 9, 9, 11], np.int64)),
    (np.arange(1000, dtype=np.uint64)[::-1], np.arange(500, 1500, 7, dtype=np.uint64)),
    (np.array([7, 2, 2], np.uint32), np.zeros(0, np.uint32)),
    (np.zeros(0, np.int64), np.array([1, 2], np.int64)),
    (np.array([4, 1, 8, 4], np.int64), np.array([8, 8, 0], np.uint32)),  # mixed: int64
    (np.array([4, 1, 8], np.uint64), np.array([8, 3], np.int64)),  # numpy: float64
    (np.array([1.5, np.nan, 2.0]), np.array([2.0, np.nan])),
]


@pytest.mark.parametrize(("a", "b"), _PAIRS, ids=lambda v: f"{v.dtype}-{v.size}")
def test_set_operations_are_numpys(a: np.ndarray, b: np.ndarray) -> None:
    for ours, theirs in [(sorted_union, np.union1d), (sorted_intersection, np.intersect1d),
                         (sorted_difference, np.setdiff1d)]:
        got, want = ours(a, b), theirs(a, b)
        assert got.dtype == want.dtype, ours.__name__
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), ours.__name__


def test_set_operations_on_random_ids() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        a = rng.integers(0, 3000, rng.integers(0, 2000)).astype(np.uint64)
        b = rng.integers(0, 3000, rng.integers(0, 2000)).astype(np.uint64)
        assert np.array_equal(sorted_union(a, b), np.union1d(a, b))
        assert np.array_equal(sorted_intersection(a, b), np.intersect1d(a, b))
        assert np.array_equal(sorted_difference(a, b), np.setdiff1d(a, b))
