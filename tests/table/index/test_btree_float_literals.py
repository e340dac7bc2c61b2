"""An integer column compared with a float (SQL compares them in float64) or with an
integer its type cannot hold is answered by the BTREE index: the comparison becomes the
interval of keys it selects, exactly, including beyond 2**53 where one double stands for
several keys. Rows equal to an unindexed scan's and to DataFusion's own answer over the
same rows (pylance refuses a float literal on an integer column)."""

from __future__ import annotations

from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.index.key_intervals import KeyIntervals

BIG = 2**53
KEYS = np.concatenate([np.arange(-300, 300), BIG + np.arange(-6, 7), -BIG + np.arange(-6, 7),
                       [2**63 - 1, -(2**63)]])


@pytest.fixture(scope="module")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("floats") / "t.lance"
    n = KEYS.size
    rng = np.random.default_rng(3)
    order = rng.permutation(n)
    ds = lance_sql.write_dataset(pa.table({
        "k": pa.array(KEYS[order], pa.int64(), mask=order % 13 == 0),
        "small": pa.array((KEYS[order] % 100).astype(np.int8)),
        "u": pa.array(np.abs(KEYS[order] % 1000).astype(np.uint16)),
        "payload": pa.array([f"r{i}" for i in range(n)])}), path, max_rows_per_file=200)
    for column in ("k", "small", "u"):
        ds.create_scalar_index(column, "BTREE")
    return path


FILTERS = [
    "k < 10.5", "k <= 10.0", "k > -3.5", "k >= -3.0", "k = 5.0", "k = 5.5", "k != 7.0",
    "k != 7.25", "k BETWEEN -2.5 AND 4.0", "k NOT BETWEEN -250.5 AND 250.0",
    "k IN (1.0, 2.5, 3.0)", "k NOT IN (1.0, 2.5, 3.0) AND k < 5", "k IN (2.5)",
    "k > 1e300", "k < -1e300", "k >= 9007199254740992.0", "k = 9007199254740994.0",
    "k < 9007199254740993.0", "k = -9007199254740992.0", "k > 9223372036854775807.0",
    "k < 1000.5 AND k > 0.5 OR k = 3.0", "NOT (k > 2.5)",
    "small < 1000", "small > -1000", "small = 300", "small != 300",
    "small BETWEEN -5.5 AND 5.5", "u < -1", "u >= -1", "u < 70000", "u IN (3, 70000, -1)",
    "u > 998.5",
]


@pytest.mark.parametrize("flt", FILTERS)
def test_float_and_wide_literals_through_the_index(table_path: Path, flt: str) -> None:
    ds = lance_sql.dataset(table_path)
    scanner = ds.scanner(filter=flt, use_scalar_index=True)
    plan = scanner.explain_plan()
    assert "ScalarIndexQuery" in plan and "refine" not in plan, (flt, plan)
    got = scanner.to_table().sort_by("payload")
    assert got.equals(ds.to_table(filter=flt, use_scalar_index=False).sort_by("payload")), flt
    assert got["payload"].to_pylist() == _datafusion(ds.to_table(), flt), flt


def _datafusion(rows: pa.Table, flt: str) -> list[str]:
    """The payloads DataFusion itself selects with ``flt`` from ``rows``."""
    ctx = datafusion.SessionContext()
    ctx.from_arrow(rows, "t")
    return ctx.sql(f"SELECT payload FROM t WHERE {flt} ORDER BY payload").to_arrow_table()[
        "payload"].to_pylist()


def test_numeric_intervals_are_the_keys_float64_comparison_selects() -> None:
    """Against the comparison itself, key by key, around 2**53 (each key as the double it
    rounds to) and at the ends of small types."""
    keys = np.concatenate([BIG + np.arange(-20, 21), np.arange(-20, 21)])
    numbers = [BIG + 0.0, BIG + 2.0, BIG - 1.0, BIG + 1.5, 3.0, 3.5, -0.0, -20.5, 20.25]
    for number in numbers:
        for op in ("=", "!=", "<", "<=", ">", ">="):
            keys_set = KeyIntervals.numeric(op, number, pa.int64())
            assert keys_set is not None
            want = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
                    ">": np.greater, ">=": np.greater_equal}[op](keys.astype(np.float64), number)
            got = np.array([_within(keys_set, int(k)) for k in keys])
            assert (got == want).all(), (op, number)
    assert KeyIntervals.numeric("<", 1000, pa.int8()) == KeyIntervals.everything()
    assert KeyIntervals.numeric(">", 255.5, pa.uint8()).intervals == ()
    assert KeyIntervals.numeric("=", float("nan"), pa.int64()) is None


def _within(keys: KeyIntervals, k: int) -> bool:
    for span in keys.intervals:
        lo, hi = span.lower, span.upper
        if (lo is None or k > lo.key or (k == lo.key and lo.inclusive)) and \
                (hi is None or k < hi.key or (k == hi.key and hi.inclusive)):
            return True
    return False


def test_sql_float_literal_plan(table_path: Path) -> None:
    """What SQL does with ``k < 10.5``: DataFusion casts the column to float64 and keeps
    the filter above the scan; the rows are still right."""
    session = lance_sql.connect(table_path.parent)
    got = session.sql("SELECT payload FROM t WHERE k < 10.5 ORDER BY payload").to_arrow_table()
    rows = lance_sql.dataset(table_path).to_table()
    assert got["payload"].to_pylist() == _datafusion(rows, "k < 10.5")
