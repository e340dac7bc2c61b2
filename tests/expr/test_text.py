"""concat / || spell floats, timestamps, dates, decimals and booleans as DataFusion does."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.expr.text import float_text, timestamp_text

EDGES = [1.0, 0.1, 1.5, -0.0, 0.0, 1e15, 1e16, 1e17, 1.2345e20, 1e-5, 1e-6, 1e-7, 1.5e-7,
         123456789.123, float("nan"), float("inf"), -float("inf"), 0.30000000000000004, 1 / 3,
         2.5e-320, 5e-324, 1.7976931348623157e308, 0.001234, 1e21, 1e-4, 123e-7,
         12345678901234567.0, 1234567890123456.7, 9999999999999998.0, -12.5, 100.0, 1e13,
         3.4028234663852886e38, 1.401298464324817e-45]


def _datafusion_text(values: pa.Array) -> list[str | None]:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("x", [pa.table({"i": np.arange(len(values)),
                                                "v": values}).to_batches()])
    return ctx.sql("SELECT v || '' AS a FROM x ORDER BY i").to_arrow_table()["a"].to_pylist()


@pytest.mark.parametrize("float_type", [pa.float64(), pa.float32()])
def test_floats_as_datafusion_spells_them(float_type: pa.DataType) -> None:
    rng = np.random.default_rng(7)
    rand = list(rng.normal(size=5000) * 10.0 ** rng.integers(-40, 40, 5000)) \
        + list(np.round(rng.normal(size=500) * 1000, 2))
    values = pa.array(EDGES + rand + [None], float_type)
    got = float_text(values).to_pylist()
    assert got == _datafusion_text(values)
    assert got[:2] == ["1.0", "0.1"] and got[-1] is None
    # pyarrow's own cast spells them otherwise: the test would notice it being used
    assert values.cast(pa.string()).to_pylist() != got


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "America/New_York", "+05:30"])
def test_timestamps_as_datafusion_spells_them(unit: str, tz: str | None) -> None:
    rng = np.random.default_rng(3)
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    # before 2037: the zone rules pyarrow reads end there, DataFusion's do not
    ticks = rng.integers(-2 * 10**9, 2 * 10**9, 2000) * per_second
    ticks[:500] += rng.integers(0, per_second, 500)            # any fraction
    ticks[500:700] += rng.integers(0, 1000, 200) * (per_second // 1000 or 1)
    values = pa.array(list(ticks) + [None], pa.int64()).cast(pa.timestamp(unit, tz=tz))
    got = timestamp_text(values).to_pylist()
    assert got == _datafusion_text(values)


@pytest.fixture
def table(tmp_path: Path) -> lance_sql.LanceSession:
    t = pa.table({
        "id": [1, 2, 3],
        "f": [1.0, 1e16, None],
        "g": pa.array([0.1, 1e-7, 2.5], pa.float32()),
        "ts": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 120000), dt.datetime(2024, 1, 2),
                        None], pa.timestamp("us")),
        "tz": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), None, dt.datetime(2024, 7, 2)],
                       pa.timestamp("ms", tz="Europe/Paris")),
        "d": pa.array([dt.date(2024, 1, 2)] * 3, pa.date32()),
        "d64": pa.array([dt.date(2024, 1, 2)] * 3, pa.date64()),
        "dec": pa.array([Decimal("1.50"), None, Decimal("-0.05")], pa.decimal128(10, 2)),
        "b": [True, None, False],
        "s": ["", "", ""],
    })
    lance_sql.write_dataset(t, tmp_path / "t.lance")
    return lance_sql.connect(tmp_path)


@pytest.mark.parametrize("expr", [
    "concat(f, '|', g, '|', ts, '|', tz, '|', d, '|', d64, '|', dec, '|', b)",
    "f || '|' || g || '|' || ts || '|' || tz || '|' || d || '|' || d64 || '|' || dec || '|' || b",
    "concat(1.0, 'x', CAST(2.5 AS REAL), TIMESTAMP '2024-01-01 00:00:00.5', 1e16)",
])
def test_update_stores_what_the_same_select_shows(table, expr: str) -> None:
    want = table.sql(f"SELECT {expr} AS a FROM t ORDER BY id").to_arrow_table()["a"]
    assert want.to_pylist()[0] is not None
    table.sql(f"UPDATE t SET s = {expr}")
    assert table.sql("SELECT s FROM t ORDER BY id").to_arrow_table()["s"].to_pylist() == \
        want.to_pylist()


def test_filters_compare_the_same_text(table) -> None:
    ds = table.dataset("t")
    assert ds.to_table(filter="concat(f, '') = '1.0'", columns=["id"]).to_pydict() == \
        {"id": [1]}
    assert table.sql("DELETE FROM t WHERE f || '' = '1e16'").to_pydict() == \
        {"num_deleted_rows": [1]}
    assert table.sql("SELECT id FROM t ORDER BY id").to_pydict() == {"id": [1, 3]}
