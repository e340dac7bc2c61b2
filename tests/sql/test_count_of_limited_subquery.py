"""A count over a filtered, limited subquery: the scan reads no columns, and its rows are
counted from batches without columns. pyarrow slices such a table to whatever length is
asked, so a limit cut with ``slice(0, limit)`` counted ``limit`` rows whatever the filter
kept (``count(*) FROM (SELECT * FROM t WHERE k = 3 LIMIT 50)`` was 50, not 10)."""

from __future__ import annotations

from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql

QUERIES = [
    "SELECT count(*) AS n FROM (SELECT * FROM t WHERE k = 3 LIMIT 50)",
    "SELECT count(*) AS n FROM (SELECT * FROM t WHERE k = 3 LIMIT 50 OFFSET 1)",
    "SELECT count(*) AS n FROM (SELECT id FROM t WHERE id < 3 LIMIT 40)",
    "SELECT count(*) AS n FROM (SELECT 1 FROM t WHERE k > 98 LIMIT 50)",
    "SELECT count(*) AS n FROM (SELECT * FROM t WHERE id % 7 = 1 LIMIT 500 OFFSET 20)",
    "SELECT count(*) AS n FROM (SELECT * FROM t LIMIT 5000)",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("countlimited")
    ids = list(range(1000))
    uri = str(root / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": ids, "k": [i % 100 for i in ids]}), uri,
                                 max_rows_per_file=300)
    ds.create_scalar_index("k", "BTREE")  # "k = 3" is answered from the index
    lance_sql.dataset(uri).delete("id = 103")
    return root


@pytest.mark.parametrize("query", QUERIES)
def test_count_of_limited_filtered_subquery(root: Path, query: str) -> None:
    whole = lance_sql.dataset(str(root / "t.lance")).to_table()
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [whole.to_batches()])
    expected = ctx.sql(query).to_arrow_table().column("n").to_pylist()
    got = lance_sql.connect(str(root)).sql(query).to_arrow_table().column("n").to_pylist()
    assert got == expected
