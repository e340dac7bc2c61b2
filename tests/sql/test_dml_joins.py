"""``UPDATE t SET ... FROM u WHERE ...`` and ``DELETE FROM t USING u WHERE ...``
(PostgreSQL's forms): DataFusion joins on the version the write starts from."""

from __future__ import annotations

from pathlib import Path

import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.sql.dml import DeleteStatement, UpdateStatement, parse_dml


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t (id BIGINT, v VARCHAR, n INT)")
    s.sql("CREATE TABLE u (id BIGINT, v VARCHAR)")
    s.sql("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)")
    s.sql("INSERT INTO u VALUES (1, 'A'), (3, 'C')")
    return s


def _rows(session: lance_sql.LanceSession) -> list[tuple]:
    table = session.sql("SELECT id, v, n FROM t ORDER BY id").to_arrow_table()
    return [tuple(r.values()) for r in table.to_pylist()]


def test_parse() -> None:
    assert parse_dml("UPDATE t x SET v = u.v FROM u, w WHERE x.id = u.id") == UpdateStatement(
        "t", {"v": "u.v"}, "x.id = u.id", "x", "u, w")
    assert parse_dml("DELETE FROM t USING u WHERE t.id = u.id") == DeleteStatement(
        "t", "t.id = u.id", None, "u")
    assert parse_dml("UPDATE t SET v = (SELECT max(v) FROM u)") == UpdateStatement(
        "t", {"v": "(SELECT max(v) FROM u)"}, None)  # a subquery's FROM is its own
    assert parse_dml("UPDATE t SET v = CASE WHEN v IS NOT DISTINCT FROM 'a' THEN 'b' END, "
                     "n = 1 FROM u WHERE t.id = u.id") == UpdateStatement(
        "t", {"v": "CASE WHEN v IS NOT DISTINCT FROM 'a' THEN 'b' END", "n": "1"},
        "t.id = u.id", None, "u")
    assert parse_dml("UPDATE t SET v = 'b', n = 1 WHERE v IS DISTINCT FROM 'a'") == \
        UpdateStatement("t", {"v": "'b'", "n": "1"}, "v IS DISTINCT FROM 'a'")


def test_update_from_sets_the_joined_values(session) -> None:
    # the oracle: the same join as a SELECT, before the write
    joined = session.sql("SELECT t.id AS id, lower(u.v) || CAST(t.n AS VARCHAR) AS v FROM t "
                         "JOIN u ON t.id = u.id WHERE u.v <> 'A'").to_pydict()
    assert joined == {"id": [3], "v": ["c3"]}
    out = session.sql("UPDATE t AS x SET v = lower(y.v) || CAST(x.n AS VARCHAR), n = x.n + 10 "
                      "FROM u AS y WHERE x.id = y.id AND y.v <> 'A'").to_pydict()
    assert out == {"num_rows_updated": [1]}
    assert _rows(session) == [(1, "a", 1), (2, "b", 2), (3, "c3", 13)]
    session.sql("UPDATE t SET v = u.v FROM u WHERE t.id = u.id")
    assert _rows(session) == [(1, "A", 1), (2, "b", 2), (3, "C", 13)]


def test_delete_using_removes_the_joined_rows(session) -> None:
    session.sql("INSERT INTO u VALUES (3, 'again')")  # a row joined twice is deleted once
    assert session.sql("DELETE FROM t USING u WHERE t.id = u.id").to_pydict() == \
        {"num_deleted_rows": [2]}
    assert _rows(session) == [(2, "b", 2)]
    assert session.sql("DELETE FROM t AS x USING (VALUES (2)) AS s(k) WHERE x.id = s.k"
                       ).to_pydict() == {"num_deleted_rows": [1]}
    assert _rows(session) == []


def test_a_row_joined_twice_cannot_be_updated(session) -> None:
    session.sql("INSERT INTO u VALUES (3, 'D')")
    before = session.dataset("t").version
    with pytest.raises(InvalidInputError, match="several rows of the joined tables"):
        session.sql("UPDATE t SET v = u.v FROM u WHERE t.id = u.id")
    assert session.dataset("t").version == before
    assert _rows(session) == [(1, "a", 1), (2, "b", 2), (3, "c", 3)]


@pytest.mark.parametrize("sql", ["UPDATE t SET v = 'x' FROM", "DELETE FROM t USING WHERE id = 1"])
def test_empty_lists_are_refused(session, sql: str) -> None:
    with pytest.raises(InvalidInputError, match="expected one or more tables"):
        session.sql(sql)
