"""Scans that read no rows still plan as one partition.

A table with no fragments (``CREATE TABLE`` without rows, after ``TRUNCATE``), or a scan
whose filter an index or ``_rowaddr`` bounds prune to nothing, gave DataFusion a scan of
zero partitions; every plan needing exactly one (ORDER BY, a TopK LIMIT, a window) then
failed its sanity check ("does not satisfy distribution requirements: SinglePartition").
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    session = lance_sql.connect(tmp_path, create=True)
    session.sql("CREATE TABLE e (id BIGINT, s VARCHAR) "
                "TBLPROPERTIES ('enable_stable_row_ids' = 'true')")
    lance_sql.write_dataset(pa.table({"id": list(range(100)), "s": ["x"] * 100}),
                            tmp_path / "t.lance", max_rows_per_file=30)
    lance_sql.dataset(tmp_path / "t.lance").create_scalar_index("id", "BTREE")
    session.sql("CREATE TABLE gone AS SELECT * FROM t")
    session.sql("TRUNCATE gone")
    return session


@pytest.mark.parametrize(("sql", "columns"), [
    ("SELECT * FROM e ORDER BY id", ["id", "s"]),
    ("SELECT id FROM e ORDER BY id DESC LIMIT 3", ["id"]),
    ("SELECT _rowid, * FROM e ORDER BY 1", ["_rowid", "id", "s"]),
    ("SELECT id, row_number() OVER (ORDER BY id) AS n FROM e", ["id", "n"]),
    ("SELECT * FROM e UNION ALL SELECT * FROM e ORDER BY 1", ["id", "s"]),
    ("SELECT * FROM gone ORDER BY s, id", ["id", "s"]),
    ("SELECT * FROM t WHERE id = 1000 ORDER BY id", ["id", "s"]),  # the index finds none
    ("SELECT id FROM t WHERE _rowaddr = 99999999999 ORDER BY id", ["id"]),
    ("SELECT _change_type, id FROM table_changes('e', 1, 1) ORDER BY id",
     ["_change_type", "id"]),
])
def test_a_scan_of_no_rows_sorts_to_an_empty_result(session: lance_sql.LanceSession,
                                                    sql: str, columns: list[str]) -> None:
    got = session.sql(sql).to_arrow_table()
    assert got.num_rows == 0 and got.column_names == columns


def test_the_same_queries_with_rows_are_unchanged(session: lance_sql.LanceSession) -> None:
    session.sql("INSERT INTO e VALUES (2, 'b'), (1, 'a')")
    assert session.sql("SELECT * FROM e ORDER BY id").to_pydict() == \
        {"id": [1, 2], "s": ["a", "b"]}
    assert session.sql("SELECT * FROM t WHERE id = 5 ORDER BY id").to_pydict() == \
        {"id": [5], "s": ["x"]}
    assert session.sql("SELECT count(*) AS n FROM gone").to_pydict() == {"n": [0]}
