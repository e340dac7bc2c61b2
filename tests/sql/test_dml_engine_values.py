"""UPDATE / DELETE expressions beyond the filter language (DataFusion's functions and
syntax: round, substr, trim, INTERVAL, date_trunc...) are evaluated by DataFusion on the
version the write starts from, as subqueries are; pylance's update is the oracle."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError

ROWS = pa.table({
    "id": pa.array([1, 2, 3], pa.int64()),
    "s": [" ab ", "xyz", None],
    "f": [1.55, 2.449, None],
    "ts": pa.array([dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 12), None],
                   pa.timestamp("us")),
})


@pytest.fixture
def copies(tmp_path: Path) -> Path:
    lance.write_dataset(ROWS, tmp_path / "theirs.lance")
    lance.write_dataset(ROWS, tmp_path / "ours" / "t.lance")
    return tmp_path


@pytest.mark.parametrize(("column", "expr", "where", "pylance_takes"), [
    ("f", "round(f, 1)", None, True),
    ("s", "replace(s, 'x', 'q')", "f > round(2.0, 0)", True),
    ("s", "substr(s, 1, 2)", "id > 1", False),    # pylance: "not supported SQL in lance"
    ("s", "trim(s)", None, False),
    ("ts", "ts + INTERVAL '1 day'", "id = 1", False),
])
def test_update_with_datafusion_functions(copies: Path, column: str, expr: str,
                                          where: str | None, pylance_takes: bool) -> None:
    session = lance_sql.connect(copies / "ours")
    # the oracle: DataFusion's SELECT of the same expression on the rows before the write
    chosen = f"CASE WHEN {where} THEN {expr} ELSE {column} END" if where else expr
    want = session.sql(f"SELECT {chosen} AS v FROM t ORDER BY id").to_arrow_table()["v"]
    sql = f"UPDATE t SET {column} = {expr}" + (f" WHERE {where}" if where else "")
    out = session.sql(sql).to_pydict()
    ours = lance.dataset(copies / "ours" / "t.lance").to_table().sort_by("id")
    assert ours[column].to_pylist() == want.to_pylist()
    assert ours[column] != ROWS[column]  # something changed
    assert out["num_rows_updated"][0] >= 1
    if pylance_takes:
        lance.dataset(copies / "theirs.lance").update({column: expr}, where)
        assert ours == lance.dataset(copies / "theirs.lance").to_table().sort_by("id")


def test_delete_with_datafusion_functions(copies: Path) -> None:
    session = lance_sql.connect(copies / "ours")
    want = session.sql("SELECT id FROM t WHERE NOT (date_trunc('day', ts) = "
                       "TIMESTAMP '2024-01-02 00:00:00') OR ts IS NULL ORDER BY id").to_pydict()
    assert session.sql("DELETE FROM t WHERE date_trunc('day', ts) = "
                       "TIMESTAMP '2024-01-02 00:00:00'").to_pydict() == {"num_deleted_rows": [1]}
    assert session.sql("SELECT id FROM t ORDER BY id").to_pydict() == want == {"id": [1, 3]}


def test_errors_come_from_datafusion_typed_and_commit_nothing(copies: Path) -> None:
    session = lance_sql.connect(copies / "ours")
    before = session.dataset("t").version
    with pytest.raises(NotFoundError, match="nosuch"):
        session.sql("UPDATE t SET f = round(nosuch, 1)")
    with pytest.raises(NotFoundError, match="nosuch"):
        session.sql("DELETE FROM t WHERE round(nosuch) = 1")
    assert session.dataset("t").version == before
