"""Literals past what Python's numbers hold exactly: floats beyond 2**53 against integer
columns (compared in float64, as DataFusion compares them, in IN lists too) and
nanosecond digits of a timestamp text (kept for ``timestamp[ns]`` columns)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql


def _datafusion(table: pa.Table, where: str) -> list[int]:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    return ctx.sql(f"SELECT id FROM t WHERE {where} ORDER BY id").to_arrow_table()[
        "id"].to_pylist()


@pytest.mark.parametrize("where", [
    "x = 9007199254740993.0", "x IN (9007199254740993.0)", "x IN (0, 9007199254740993.0)",
    "x = 0 OR x = 9007199254740993.0", "NOT (x = 0 OR x = 9007199254740993.0)",
    "x NOT IN (0, 9007199254740993.0)", "x IN (-9007199254740992.0, 5)", "x IN (5.0, 0.0)",
])
def test_integers_against_big_floats(tmp_path: Path, where: str) -> None:
    table = pa.table({"id": [0, 1, 2, 3, 4], "x": pa.array(
        [2**53 + 1, 0, 5, 2**53, -(2**53) - 1], pa.int64())})
    ds = lance_sql.write_dataset(table, str(tmp_path / "t"))
    assert sorted(ds.to_table(filter=where).column("id").to_pylist()) == _datafusion(
        table, where)


@pytest.mark.parametrize("where", [
    "ts = '2024-01-01 00:00:00.0005001'", "ts IN ('2024-01-01 00:00:00.000500100')",
    "ts > '2024-01-01 00:00:00.000500001'", "ts < '2024-01-01T00:00:00.000500099'",
])
def test_nanosecond_digits_of_timestamp_text(tmp_path: Path, where: str) -> None:
    base = dt.datetime(2024, 1, 1)
    nanos = pa.array([0, 500_000, 500_100, 600_000], pa.int64())
    stamps = pa.compute.add(pa.scalar(base, pa.timestamp("ns")).cast(pa.int64()), nanos)
    table = pa.table({"id": [0, 1, 2, 3], "ts": stamps.cast(pa.timestamp("ns"))})
    ds = lance_sql.write_dataset(table, str(tmp_path / "t"))
    expected = _datafusion(table, where)
    assert sorted(ds.to_table(filter=where).column("id").to_pylist()) == expected
    ds.create_scalar_index("ts", "BTREE")
    assert sorted(lance_sql.dataset(str(tmp_path / "t")).to_table(
        filter=where).column("id").to_pylist()) == expected
