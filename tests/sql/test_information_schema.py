"""SHOW TABLES, SHOW COLUMNS, DESCRIBE and information_schema list the catalog's tables."""

from __future__ import annotations

from pathlib import Path

import pytest

import lance_sql
from lance_sql.errors import NotFoundError


def _lance_tables(session: lance_sql.LanceSession, sql: str) -> list[str]:
    table = session.sql(sql).to_arrow_table().to_pylist()
    return sorted(r["table_name"] for r in table if r["table_schema"] == "default")


def test_tables_follow_the_session(tmp_path: Path) -> None:
    s = lance_sql.connect(tmp_path)
    assert _lance_tables(s, "SHOW TABLES") == []
    s.sql("CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, price DECIMAL(10, 2))")
    s.sql("CREATE TABLE u AS SELECT 1 AS x")
    assert _lance_tables(s, "SHOW TABLES") == ["t", "u"]
    assert _lance_tables(s, "SELECT * FROM information_schema.tables") == ["t", "u"]
    s.sql("DROP TABLE u")
    assert _lance_tables(s, "SHOW TABLES") == ["t"]
    assert s.sql("SELECT table_name, table_type FROM information_schema.tables "
                 "WHERE table_schema = 'default'").to_pydict() == \
        {"table_name": ["t"], "table_type": ["BASE TABLE"]}


def test_columns_of_a_table(tmp_path: Path) -> None:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, price DECIMAL(10, 2))")
    want = {"column_name": ["id", "name", "price"],
            "data_type": ["Int64", "Utf8", "Decimal128(10, 2)"],
            "is_nullable": ["NO", "YES", "YES"]}
    shown = s.sql("SHOW COLUMNS FROM t").to_pydict()
    assert {k: shown[k] for k in want} == want
    assert s.sql("DESCRIBE t").to_pydict() == want
    got = s.sql("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                "WHERE table_name = 't' ORDER BY ordinal_position").to_pydict()
    assert got == want
    s.sql("ALTER TABLE t ADD COLUMN note VARCHAR")
    assert s.sql("SHOW COLUMNS FROM t").to_pydict()["column_name"] == \
        ["id", "name", "price", "note"]
    with pytest.raises(NotFoundError):
        s.sql("SHOW COLUMNS FROM nosuch").to_pydict()


def test_registered_tables_are_listed(tmp_path: Path) -> None:
    elsewhere = lance_sql.connect(tmp_path / "a", create=True)
    elsewhere.sql("CREATE TABLE src AS SELECT 1 AS x")
    s = lance_sql.connect()
    s.register("mine", tmp_path / "a" / "src.lance")
    assert _lance_tables(s, "SHOW TABLES") == ["mine"]
