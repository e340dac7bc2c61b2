"""``session.sql(query, params=...)``: placeholders bound as literals, in queries and writes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.sql.parameters import bind_parameters

HOSTILE = "o'brien'); DROP TABLE t; --"


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t (id BIGINT, name VARCHAR, amt DECIMAL(10, 2), ts TIMESTAMP, "
          "d DATE, f DOUBLE, ok BOOLEAN)")
    return s


def test_values_round_trip_through_insert_and_select(session) -> None:
    row = [-1, HOSTILE, Decimal("-1.25"), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
           dt.date(2024, 2, 29), -1.5e-7, True]
    session.sql("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7)", params=row)
    session.sql("INSERT INTO t VALUES ($id, $name, NULL, NULL, NULL, $f, $ok)",
                params={"id": 2, "name": None, "f": float("inf"), "ok": False})
    got = session.sql("SELECT * FROM t WHERE name = $1 OR id = $2 ORDER BY id",
                      params=[HOSTILE, 2]).to_arrow_table().to_pylist()
    assert [list(r.values()) for r in got] == [
        row, [2, None, None, None, None, float("inf"), False]]
    assert session.tables() == ["t"]  # the hostile string stayed a string


def test_writes_take_parameters(session) -> None:
    session.sql("INSERT INTO t (id, name) VALUES ($1, $2), ($3, $4)", params=[1, "a", 2, "b"])
    assert session.sql("UPDATE t SET name = $1 WHERE id = $2", params=[HOSTILE, 1]).to_pydict() \
        == {"num_rows_updated": [1]}
    assert session.sql("DELETE FROM t WHERE name = $n", params={"n": "b"}).to_pydict() == \
        {"num_deleted_rows": [1]}
    session.sql("MERGE INTO t USING (SELECT $1 AS id, $2 AS name) AS s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET name = s.name", params=[1, "m"])
    assert session.sql("SELECT id, name FROM t").to_pydict() == {"id": [1], "name": ["m"]}


def test_placeholders_in_strings_and_names_are_left_alone() -> None:
    sql = "SELECT '$1', \"x$1\", $1 FROM t -- $2\n"
    assert bind_parameters(sql, [7]) == "SELECT '$1', \"x$1\", 7 FROM t -- $2\n"


@pytest.mark.parametrize(("sql", "params", "match"), [
    ("SELECT $2", [1], "no value for parameter \\$2"),
    ("SELECT $a", {"b": 1}, "no value for parameter \\$a"),
    ("SELECT $1", "x", "sequence"),
    ("SELECT $1", [object()], "parameter values"),
])
def test_bad_parameters_are_typed(session, sql: str, params, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        session.sql(sql, params=params)
