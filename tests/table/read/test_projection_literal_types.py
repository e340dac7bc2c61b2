"""Computed scan columns (``to_table(columns={"c": "a + 1"})``) type their literals as
pylance's scans do, and so as ``add_columns`` stores them: ``i8 + 1`` an int8 that wraps,
``f32 * 2.5`` a float32, ``u8 - 5`` a uint8; a literal the column's type cannot hold is
refused, as pylance refuses it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

lance = pytest.importorskip("lance")

EXPRESSIONS = ["a + 1", "1 + a", "f * 2.5", "u - 5", "a * (2 - 1)", "a - 1 - 1", "a"]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    table = pa.table({"a": pa.array([1, 127, -128], pa.int8()),
                      "f": pa.array([1.5, 2.5, None], pa.float32()),
                      "u": pa.array([0, 5, 255], pa.uint8())})
    lance.write_dataset(table, tmp_path / "t.lance")
    return tmp_path / "t.lance"


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_computed_columns_read_as_pylance_reads_them(path: Path, expression: str) -> None:
    want = lance.dataset(path).to_table(columns={"c": expression})
    got = lance_sql.dataset(path).to_table(columns={"c": expression})
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("expression", ["a + 1000", "a + 1.5"])
def test_a_literal_the_column_cannot_hold_is_refused(path: Path, expression: str) -> None:
    with pytest.raises(ValueError):
        lance.dataset(path).to_table(columns={"c": expression})
    with pytest.raises(InvalidInputError):
        lance_sql.dataset(path).to_table(columns={"c": expression})
