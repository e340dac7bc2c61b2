"""Filters on float columns holding NaN keep the rows SQL keeps: DataFusion orders NaN
above every number and equal to itself, so ``v > 74.0`` keeps NaN rows. Our scans
evaluate pushed comparisons themselves (as masks); they must agree with DataFusion over
the same values, and the Python API with pylance."""

from __future__ import annotations

from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql

VALUES = [1.0, float("nan"), 80.0, -0.0, None, float("nan"), 3.0, float("inf"), 0.0]
FILTERS = ["v > 74.0", "v >= 80.0", "v < 5", "v <= 0.0", "v = 0.0", "v != 1.0",
           "v > 74.0 AND id > 1", "v = 'NaN'::double", "v < 'NaN'::double",
           "v BETWEEN 2.0 AND 100.0"]


def _table() -> pa.Table:
    n = len(VALUES) * 50
    return pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "v": pa.array(VALUES * 50, pa.float64())})


@pytest.mark.parametrize("flt", FILTERS)
def test_sql_float_filters_match_datafusion(tmp_path: Path, flt: str) -> None:
    table = _table()
    lance_sql.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=120)
    session = lance_sql.LanceSession()
    session.register("t", tmp_path / "t.lance")
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("m", [table.to_batches()])
    query = "SELECT id FROM {} WHERE " + flt + " ORDER BY id"
    ours = session.sql(query.format("t")).to_arrow_table().column(0).to_pylist()
    want = ctx.sql(query.format("m")).to_arrow_table().column(0).to_pylist()
    assert ours == want
    assert want, "each filter keeps some rows"


@pytest.mark.parametrize("flt", [f for f in FILTERS if "::" not in f])
def test_python_float_filters_match_pylance(tmp_path: Path, flt: str) -> None:
    lance = pytest.importorskip("lance")
    table = _table()
    lance.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=120)
    ours = lance_sql.dataset(tmp_path / "t.lance").to_table(filter=flt)
    theirs = lance.dataset(str(tmp_path / "t.lance")).to_table(filter=flt)
    assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()
