"""COALESCE / CASE branches mixing an integer column and a float literal are float64, as
DataFusion types them. Left to pyarrow's dataset expressions they met as float32:
``coalesce(id, 0.5)`` failed for ids beyond 2**24 (an UPDATE refused a value its SELECT
shows) and kept only float32's digits otherwise."""

from __future__ import annotations

from pathlib import Path

import datafusion
import lance
import pyarrow as pa
import pytest

import lance_sql

DATA = pa.table({"id": pa.array([16777217, None, 123456789], pa.int64()),
                 "f": pa.array([0.0, 0.0, 0.0])})
EXPRESSIONS = ["coalesce(id, 0.5)", "coalesce(2.5, id)", "CASE WHEN id > 0 THEN id ELSE 0.5 END",
               "coalesce(id, CAST(1.5 AS FLOAT))", "coalesce(id, 1)", "coalesce(id, f)"]


def _datafusion(expression: str) -> pa.ChunkedArray:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [DATA.to_batches()])
    return ctx.sql(f"SELECT {expression} AS v FROM t").to_arrow_table().column("v")


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_projection_types_and_values_as_datafusion(tmp_path: Path, expression: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(DATA, uri)
    got = lance_sql.dataset(uri).to_table(columns={"v": expression}).column("v")
    expected = _datafusion(expression)
    assert got.type == expected.type
    assert got.to_pylist() == expected.to_pylist()


def test_sql_update_stores_what_select_shows(tmp_path: Path) -> None:
    lance_sql.write_dataset(DATA, str(tmp_path / "t.lance"))
    session = lance_sql.connect(str(tmp_path))
    shown = session.sql("SELECT coalesce(id, 0.5) AS v FROM t").to_arrow_table().column("v")
    session.sql("UPDATE t SET f = coalesce(id, 0.5)")
    stored = lance.dataset(str(tmp_path / "t.lance")).to_table(columns=["f"]).column("f")
    assert stored.to_pylist() == shown.to_pylist() == [16777217.0, 0.5, 123456789.0]
