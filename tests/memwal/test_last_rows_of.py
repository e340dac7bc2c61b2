"""``last_rows_of``: each code's last row among held codes (the base table's newest row
of a key when its rows are in table order), as a search row by row finds it, for held
codes ascending (no sort) or not, repeated, and codes held by no row."""

from __future__ import annotations

import numpy as np
import pytest

from lance_sql.memwal.read.keys import KeySet, last_rows_of


def _last_by_row(held: np.ndarray, codes: np.ndarray) -> list[int]:
    out = []
    for c in codes.tolist():
        rows = np.flatnonzero(held == c)
        out.append(int(rows[-1]) if rows.size else -1)
    return out


@pytest.mark.parametrize("ascending", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_last_rows_equal_a_search_row_by_row(ascending: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    held = rng.integers(-50, 50, 300).astype(np.int64)  # many repeats
    if ascending:
        held.sort()
    codes = np.r_[rng.integers(-60, 60, 200), [-2**63, 2**63 - 1, held[0], held[-1]]]
    codes = codes.astype(np.int64)
    assert last_rows_of(held, codes).tolist() == _last_by_row(held, codes)


def test_last_rows_equal_the_key_set_backwards() -> None:
    """What the base lookup found before: a KeySet of the rows newest first."""
    import pyarrow as pa

    rng = np.random.default_rng(7)
    held = rng.integers(0, 400, 500).astype(np.int64)
    codes = rng.integers(-10, 410, 300).astype(np.int64)
    backwards = np.arange(held.size - 1, -1, -1)
    found = KeySet([pa.array(held[backwards])]).find(None, codes)
    expected = np.where(found >= 0, backwards[np.maximum(found, 0)], -1)
    assert last_rows_of(held, codes).tolist() == expected.tolist()


def test_no_rows_or_no_codes() -> None:
    assert last_rows_of(np.zeros(0, np.int64), np.array([1, 2])).tolist() == [-1, -1]
    assert last_rows_of(np.array([1, 2]), np.zeros(0, np.int64)).tolist() == []


def test_first_column_of_a_subset_is_its_keys() -> None:
    """A subset's first key column made from its codes (int64) is the column its key
    table would give; other key types and keys with nulls give that column itself."""
    import pyarrow as pa

    from lance_sql.memwal.read.keys import Keys

    table = pa.table({"id": pa.array([5, -3, 2**62, 7, 0], pa.int64())})
    keys = Keys(table)
    assert keys.codes.size == 5  # (known before the subset is taken, as in a lookup)
    subset = keys.take(np.array([True, False, True, True, False]))
    assert subset.first_column().equals(pa.array([5, 2**62, 7], pa.int64()))
    assert subset.first_column().equals(subset.columns[0])
    for other in (pa.array([5, 1, 2], pa.int32()), pa.array(["a", "b", "c"]),
                  pa.array([5, None, 2], pa.int64())):
        k = Keys(pa.table({"id": other}))
        if not other.null_count:
            assert k.codes.size == 3
        assert k.take(np.array([True, False, True])).first_column().equals(other.take([0, 2]))
