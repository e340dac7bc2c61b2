"""TIMESTAMP literals with a UTC offset in Python filters, against pylance and SQL.

DataFusion and pylance keep only the UTC wall-clock time of ``TIMESTAMP '...+02:00'`` and
read it, like a naive literal, in a zoned column's own zone; a filter must select the same
rows through a scan, through a BTREE index and through SQL.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

INSTANTS = [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=h) for h in range(-6, 7)]
FILTERS = [
    "{c} > TIMESTAMP '2024-01-01 00:00:00+02:00'",
    "{c} <= TIMESTAMP '2024-01-01T00:00:00Z'",
    "{c} = TIMESTAMP '2024-01-01 03:00:00+01:00'",
    "{c} BETWEEN TIMESTAMP '2023-12-31 20:00:00-03:00' AND TIMESTAMP '2024-01-01 05:00:00+05:00'",
    "{c} IN (TIMESTAMP '2024-01-01 01:00:00-01:00', TIMESTAMP '2024-01-01 00:00:00')",
]
COLUMNS = ["berlin", "utc", "naive"]


@pytest.fixture(scope="module")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ts") / "t.lance"
    table = pa.table({
        "id": pa.array(range(len(INSTANTS)), pa.int64()),
        "berlin": pa.array(INSTANTS, pa.timestamp("us", "Europe/Berlin")),
        "utc": pa.array(INSTANTS, pa.timestamp("us", "UTC")),
        "naive": pa.array([t.replace(tzinfo=None) for t in INSTANTS], pa.timestamp("us")),
    })
    lance_sql.write_dataset(table, path)
    return path


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("shape", FILTERS)
def test_offset_literal_selects_what_pylance_and_sql_select(
        table_path: Path, column: str, shape: str, tmp_path: Path) -> None:
    pred = shape.format(c=column)
    theirs = sorted(lance.dataset(table_path).to_table(filter=pred)["id"].to_pylist())
    ours = sorted(lance_sql.dataset(table_path).to_table(filter=pred)["id"].to_pylist())
    session = lance_sql.connect()
    session.register("t", str(table_path))
    sql = sorted(session.sql(f"SELECT id FROM t WHERE {pred}").to_arrow_table()["id"].to_pylist())
    assert ours == theirs == sql
    assert 0 < len(ours) < len(INSTANTS) or "IN" in pred


@pytest.mark.parametrize("shape", FILTERS)
def test_offset_literal_through_a_btree_index(table_path: Path, shape: str,
                                              tmp_path: Path) -> None:
    path = tmp_path / "indexed.lance"
    lance_sql.write_dataset(lance_sql.dataset(table_path).to_table(), path)
    ds = lance_sql.dataset(path)
    ds.create_scalar_index("berlin", "BTREE")
    pred = shape.format(c="berlin")
    theirs = sorted(lance.dataset(path).to_table(filter=pred)["id"].to_pylist())
    ours = sorted(lance_sql.dataset(path).to_table(filter=pred)["id"].to_pylist())
    assert ours == theirs


def test_explain_names_zoned_bounds_as_literals_that_mean_them(tmp_path: Path) -> None:
    """EXPLAIN's index query on a zoned column spells each bound as a naive literal (the
    column's wall-clock time): pasted back into a filter it selects the same rows (with
    the offset it spelled before, it meant another instant)."""
    path = tmp_path / "tokyo.lance"
    instants = [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=h)
                for h in range(-12, 12)]
    lance_sql.write_dataset(pa.table({
        "id": pa.array(range(len(instants)), pa.int64()),
        "ts": pa.array(instants, pa.timestamp("us", "Asia/Tokyo"))}), path)
    ds = lance_sql.dataset(path)
    ds.create_scalar_index("ts", "BTREE")
    pred = "ts != TIMESTAMP '2024-01-01 03:00:00'"
    plan = ds.scanner(filter=pred).explain_plan()
    query = plan[plan.index("query=[") + len("query=["):plan.index("]", plan.index("query=["))]
    restated = query.replace("@ts_idx(BTree)", "")
    assert "+09:00" not in restated
    want = sorted(ds.to_table(filter=pred)["id"].to_pylist())
    assert len(want) == len(instants) - 1
    assert sorted(ds.to_table(filter=restated)["id"].to_pylist()) == want
