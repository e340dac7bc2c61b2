"""Key intervals (AND / OR / NOT of one column's comparisons) against the tests themselves:
random trees of comparisons, evaluated row by row with SQL's semantics (three-valued,
NULL never TRUE; floats with NaN on top and -0.0 equal to 0.0), must select exactly the
rows the combined index queries select."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.format.btree import KeyRange, KeySet, matches
from lance_sql.table.index.key_intervals import KeyIntervals, sort_key

OPS = ["=", "!=", "<", "<=", ">", ">="]


def _selected(values: pa.Array, keys: KeyIntervals) -> np.ndarray:
    out = np.zeros(len(values), dtype=bool)
    for query in keys.queries(values.type):
        out |= matches(values, query)
    return out


def _test(values: pa.Array, op: str, k: pa.Scalar) -> np.ndarray:
    """``values <op> k``: TRUE rows (NULL rows are never TRUE), via the index's own
    single-comparison semantics."""
    if op == "!=":
        return np.asarray(values.is_valid()) & ~matches(values, KeyRange(k, k))
    return matches(values, {"=": KeyRange(k, k), "<": KeyRange(None, k, True, False),
                            "<=": KeyRange(None, k), ">": KeyRange(k, None, False),
                            ">=": KeyRange(k, None)}[op])


def _random_tree(rng: np.random.Generator, pool: list[pa.Scalar], values: pa.Array,
                 depth: int) -> tuple[KeyIntervals, np.ndarray]:
    """A random tree: its key intervals and, beside them, the rows it is TRUE for."""
    valid = np.asarray(values.is_valid())
    kind = rng.integers(0, 5) if depth else 0
    if kind == 0:
        op = OPS[rng.integers(len(OPS))]
        k = pool[rng.integers(len(pool))]
        keys = KeyIntervals.compare(op, k)
        assert keys is not None
        return keys, _test(values, op, k)
    if kind == 1:
        picked = [pool[i] for i in rng.integers(0, len(pool), rng.integers(1, 4))]
        keys = KeyIntervals.points(picked)
        assert keys is not None
        return keys, matches(values, KeySet(pa.array([p.as_py() for p in picked], values.type)))
    a_keys, a_rows = _random_tree(rng, pool, values, depth - 1)
    if kind == 2:  # NOT: TRUE where the tree is FALSE, i.e. a non-null row it did not select
        return a_keys.complement(), valid & ~a_rows
    b_keys, b_rows = _random_tree(rng, pool, values, depth - 1)
    if kind == 3:
        return a_keys.intersect(b_keys), a_rows & b_rows
    return a_keys.union(b_keys), a_rows | b_rows


CASES = {
    "int": pa.array([None, -3, 0, 1, 2, 2, 5, 7, 9, 10, None, 11], pa.int64()),
    "float": pa.array([None, float("nan"), -0.0, 0.0, 1.5, -2.0, float("inf"),
                       float("-inf"), 3.0, float("nan"), None], pa.float64()),
    "string": pa.array(["", "a", "ab", "b", None, "é", "z", "ab", "aa"], pa.string()),
    "date": pa.array([dt.date(2020, 1, d) for d in (1, 3, 5, 5, 9)] + [None], pa.date32()),
    "timestamp": pa.array([dt.datetime(2024, 1, 1, h, tzinfo=dt.UTC) for h in (0, 4, 8, 9)]
                          + [None], pa.timestamp("us", "UTC")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_random_trees_select_what_the_tests_select(case: str) -> None:
    values = CASES[case]
    pool = [v for v in values if v.is_valid]
    if case == "int":
        pool += [pa.scalar(v, pa.int64()) for v in (-10, 4, 6, 100)]
    rng = np.random.default_rng(11)
    for _ in range(400):
        keys, rows = _random_tree(rng, pool, values, 4)
        assert np.array_equal(_selected(values, keys), rows), (case, keys)
        # the set is kept sorted, disjoint and non-touching
        spans = keys.intervals
        for a, b in zip(spans, spans[1:], strict=False):
            assert a.upper is not None and b.lower is not None
            assert a.upper.key < b.lower.key or (
                a.upper.key == b.lower.key and not (a.upper.inclusive or b.lower.inclusive))


def test_queries_are_ranges_and_one_key_set() -> None:
    s = pa.scalar
    keys = (KeyIntervals.compare(">=", s(100)).intersect(KeyIntervals.compare("<", s(200)))
            .union(KeyIntervals.compare(">", s(900)))
            .union(KeyIntervals.points([s(5), s(7), s(150)])))  # 150 lies in a range
    queries = keys.queries(pa.int64())
    assert isinstance(queries[0], KeySet) and queries[0].values.to_pylist() == [5, 7]
    assert queries[1:] == [KeyRange(s(100), s(200), True, False), KeyRange(s(900), None, False)]
    empty = KeyIntervals.compare(">", s(5)).intersect(KeyIntervals.compare("<", s(3)))
    [nothing] = empty.queries(pa.int64())
    assert isinstance(nothing, KeySet) and len(nothing.values) == 0
    assert KeyIntervals.everything().complement().intervals == ()
    assert empty.complement() == KeyIntervals.everything()


def test_float_order_is_sqls() -> None:
    """NaN above every number (equal to itself), -0.0 equal to 0.0."""
    assert sort_key(pa.scalar(float("nan"))) > sort_key(pa.scalar(float("inf")))
    assert sort_key(pa.scalar(-0.0)) == sort_key(pa.scalar(0.0))
    above = KeyIntervals.compare(">", pa.scalar(float("inf")))
    assert above is not None
    assert _selected(CASES["float"], above).sum() == 2  # the two NaNs
    assert sort_key(pa.scalar(1, pa.decimal128(5, 0))) is None


def test_index_queries_as_intervals() -> None:
    s = pa.scalar
    ranged = KeyIntervals.of_query(KeyRange(s(100), s(200), True, False))
    assert ranged == KeyIntervals.compare(">=", s(100)).intersect(  # type: ignore[union-attr]
        KeyIntervals.compare("<", s(200)))  # type: ignore[arg-type]
    listed = KeyIntervals.of_query(KeySet(pa.array([7, 3, 7], pa.int64())))
    assert listed == KeyIntervals.points([s(3), s(7)])
    assert KeyIntervals.of_query(KeyRange(pa.scalar(1, pa.decimal128(5, 0)), None)) is None
