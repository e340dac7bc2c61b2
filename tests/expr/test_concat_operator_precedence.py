"""``||`` binds as ``*``, ``/`` and ``%`` do, left to right, as sqlparser (DataFusion's and
pylance's) reads it: ``a * 2 || '1'`` is ``(a * 2) || '1'`` ('41' for a = 2). The filter
language bound ``||`` tighter, computing ``a * (2 || '1')`` = 42: a SQL UPDATE stored
another value than the same SELECT shows, and a Python filter or projection differed
from pylance's."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

DATA = pa.table({"a": pa.array([1, 2, None, -3], pa.int64()), "s": ["x", None, "yy", "z"]})
EXPRESSIONS = ["a * 2 || '1'", "a % 2 || s", "- a || 'x'", "a * 3 || 'x' || a || 'y'"]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_projection_matches_pylance(tmp_path: Path, expression: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(DATA, uri)
    expected = lance.dataset(uri).to_table(columns={"v": expression}).column("v")
    got = lance_sql.dataset(uri).to_table(columns={"v": expression}).column("v")
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_sql_update_stores_what_select_shows(tmp_path: Path, expression: str) -> None:
    lance_sql.write_dataset(DATA, str(tmp_path / "t.lance"))
    session = lance_sql.connect(str(tmp_path))
    shown = session.sql(f"SELECT {expression} AS v FROM t").to_arrow_table()
    session.sql(f"UPDATE t SET s = {expression}")
    stored = lance.dataset(str(tmp_path / "t.lance")).to_table(columns=["s"])
    assert stored.column("s").to_pylist() == shown.column("v").to_pylist()


def test_filter_matches_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(DATA, uri)
    where = "a * 2 || '1' = '41'"
    assert lance_sql.dataset(uri).count_rows(where) == lance.dataset(uri).count_rows(where) == 1
