"""``IS [NOT] DISTINCT FROM`` takes a whole expression on its right, as sqlparser reads it
(DataFusion's and pylance's): ``flag IS DISTINCT FROM true AND a > 2`` compares ``flag``
with ``true AND a > 2``. The filter language read it as ``(flag IS DISTINCT FROM true) AND
a > 2``, so a SQL ``DELETE`` / ``UPDATE`` (and a Python filter) changed other rows than the
same ``SELECT ... WHERE`` returned, and than pylance's filter selects."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

DATA = pa.table({"flag": [True, False, None, True, False], "a": [1, 5, 5, 5, None],
                 "b": [True, None, False, True, True]})
FILTERS = [
    "flag IS DISTINCT FROM true AND a > 2",
    "flag IS NOT DISTINCT FROM b OR a = 1",
    "a > 1 AND flag IS DISTINCT FROM true OR a = 1",
    "NOT flag IS DISTINCT FROM b AND a > 2",
    "(flag IS DISTINCT FROM true) AND a > 2",
    "flag IS DISTINCT FROM NOT b AND b",
    "flag = (b IS DISTINCT FROM true AND a = 5)",
]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.mark.parametrize("where", FILTERS)
def test_python_filter_selects_pylance_rows(tmp_path: Path, where: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(DATA, uri)
    expected = _rows(lance.dataset(uri).to_table(filter=where))
    assert _rows(lance_sql.dataset(uri).to_table(filter=where)) == expected


@pytest.mark.parametrize("where", FILTERS)
def test_sql_delete_removes_the_rows_select_returns(tmp_path: Path, where: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(DATA, uri)
    session = lance_sql.connect(str(tmp_path))
    selected = _rows(session.sql(f"SELECT * FROM t WHERE {where}").to_arrow_table())
    session.sql(f"DELETE FROM t WHERE {where}")
    kept = _rows(lance.dataset(uri).to_table())
    assert sorted(selected + kept, key=repr) == _rows(DATA)
