"""A filter an index answers in part keeps the rest as a residual, whatever its types: a
dictionary column's comparison once failed the query while the plan's label was written."""

from __future__ import annotations

from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql

ROWS = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()),
                 "dic": pa.array(["red", "blue", "green", "red"]).dictionary_encode()})
QUERIES = ["SELECT id FROM t WHERE dic < 'c' AND id > 1",
           "SELECT id FROM t WHERE dic = 'red' AND id >= 1",
           "SELECT id FROM t WHERE id IN (1, 2, 3) AND dic <> 'blue'"]


@pytest.mark.parametrize("query", QUERIES)
def test_residuals_of_any_type(tmp_path: Path, query: str) -> None:
    ds = lance_sql.write_dataset(ROWS, str(tmp_path / "t"))
    ds.create_scalar_index("id", "BTREE")
    memory = datafusion.SessionContext()
    memory.register_record_batches("t", [ROWS.to_batches()])
    want = sorted(memory.sql(query).to_arrow_table().column("id").to_pylist())
    session = lance_sql.connect(str(tmp_path))
    got = session.sql(query).to_arrow_table().column("id").to_pylist()
    assert sorted(got) == want
    assert "ScalarIndexQuery" in session.explain(query)
