"""Floats written into text and integer columns store what SQL's CAST gives (DataFusion:
``'1.0'``, ``2``), through ``update``, SQL UPDATE / INSERT / MERGE, as pylance stores
them; timestamps into text as DataFusion spells them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr.casts import cast_like_datafusion

lance = pytest.importorskip("lance")


def _datafusion_cast(values: pa.Array, sql_type: str) -> list:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("v", [[pa.record_batch({"x": values})]])
    return ctx.sql(f"SELECT CAST(x AS {sql_type}) AS y FROM v").to_arrow_table()[
        "y"].to_pylist()


@pytest.mark.parametrize("values", [
    pa.array([1.0, 2.5, -0.0, 1e16, 1e-7, 123456.789, None], pa.float64()),
    pa.array([1.0, 0.1, 3.5e10, None], pa.float32()),
    pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 120000), None], pa.timestamp("us")),
    pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("s", "UTC")),
])
def test_text_as_datafusion_casts_it(values: pa.Array) -> None:
    assert cast_like_datafusion(values, pa.string()).to_pylist() == _datafusion_cast(
        values, "VARCHAR")
    assert cast_like_datafusion(values, pa.large_string()).type == pa.large_string()


def test_integers_truncate_toward_zero() -> None:
    values = pa.array([2.7, -2.7, 0.5, None], pa.float64())
    assert cast_like_datafusion(values, pa.int32()).to_pylist() == _datafusion_cast(
        values, "INT") == [2, -2, 0, None]
    with pytest.raises(pa.ArrowInvalid):  # out of range still fails
        cast_like_datafusion(pa.array([1e30]), pa.int32())


def test_writes_store_what_pylance_stores(tmp_path: Path) -> None:
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "f": [1.0, 2.5],
                     "s": ["a", "b"], "a": pa.array([0, 0], pa.int32())})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_sql.write_dataset(data, ours)
    lance.write_dataset(data, theirs)
    lance_sql.dataset(ours).update({"s": "f", "a": "f * 3"})
    lance.dataset(theirs).update({"s": "f", "a": "f * 3"})
    assert lance_sql.dataset(ours).to_table() == lance.dataset(theirs).to_table()
    assert lance_sql.dataset(ours).to_table().column("s").to_pylist() == ["1.0", "2.5"]
    session = lance_sql.connect(tmp_path)
    session.sql("INSERT INTO ours VALUES (3, 2.0, 2.0, 2.7)")
    session.sql("UPDATE ours SET s = f * 2 WHERE id = 1")
    session.sql("MERGE INTO ours USING (SELECT 2 AS id, 0.25 AS g) AS src ON ours.id = src.id "
                "WHEN MATCHED THEN UPDATE SET s = src.g, a = src.g * 10")
    got = session.sql("SELECT id, s, a FROM ours ORDER BY id").to_pylist()
    assert got == [{"id": 1, "s": "2.0", "a": 3}, {"id": 2, "s": "0.25", "a": 2},
                   {"id": 3, "s": "2.0", "a": 2}]
    with pytest.raises(InvalidInputError):  # a value no int32 holds
        session.sql("UPDATE ours SET a = 1e30")
