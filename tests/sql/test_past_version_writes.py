"""A write naming a past version of its target is refused, typed, with nothing committed."""

from __future__ import annotations

from pathlib import Path

import pytest

import lance_sql
from lance_sql.errors import StatementRefusedError


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(id, s)")  # v1
    s.sql("INSERT INTO t VALUES (3, 'c')")                                             # v2
    s.sql("ALTER TABLE t CREATE TAG first AS OF VERSION 1")
    return s


@pytest.mark.parametrize("sql", [
    "DELETE FROM t VERSION AS OF 1 WHERE id = 1",
    "DELETE FROM t VERSION AS OF 'first'",
    'DELETE FROM "t@1" WHERE id = 1',
    "UPDATE t VERSION AS OF 1 SET s = 'x' WHERE id = 1",
    "UPDATE t FOR SYSTEM_TIME AS OF '2020-01-01T00:00:00' SET s = 'x'",
    "UPDATE t AT (VERSION => 1) SET s = 'x'",
    "MERGE INTO t VERSION AS OF 1 USING (VALUES (1, 'q')) AS src(id, s) ON t.id = src.id "
    "WHEN MATCHED THEN UPDATE SET *",
    "INSERT INTO t VERSION AS OF 1 VALUES (5, 'e')",
    "TRUNCATE TABLE t TIMESTAMP AS OF '2020-01-01T00:00:00'",
])
def test_writes_to_a_past_version_are_refused(session, sql: str) -> None:
    before = session.dataset("t").version
    with pytest.raises(StatementRefusedError, match="past version.*RESTORE TABLE t"):
        session.sql(sql)
    assert session.dataset("t").version == before
    assert session.sql("SELECT id FROM t ORDER BY id").to_pydict() == {"id": [1, 2, 3]}


def test_the_way_out_the_message_names_works(session) -> None:
    # RESTORE, then write the latest version; the past one stays readable as it was
    session.sql("RESTORE TABLE t TO VERSION 1")
    assert session.sql("DELETE FROM t WHERE id = 1").to_pydict() == {"num_deleted_rows": [1]}
    assert session.sql("SELECT id FROM t ORDER BY id").to_pydict() == {"id": [2]}
    assert session.sql("SELECT id FROM t VERSION AS OF 1 ORDER BY id").to_pydict() == \
        {"id": [1, 2]}


def test_an_alias_is_not_a_time_travel_clause(session) -> None:
    assert session.sql("DELETE FROM t AS x WHERE x.id = 9").to_pydict() == \
        {"num_deleted_rows": [0]}
    assert session.sql("UPDATE t x SET s = 'y' WHERE x.id = 1").to_pydict() == \
        {"num_rows_updated": [1]}
