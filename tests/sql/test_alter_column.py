"""``ALTER TABLE t ALTER COLUMN c TYPE ... | SET DATA TYPE ... | SET / DROP NOT NULL``."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.sql.statements import AlterColumn, parse_statement


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t (id INT, v VARCHAR, n INT)")
    s.sql("INSERT INTO t VALUES (1, 'a', 1), (2, NULL, 2)")
    return s


def test_parse() -> None:
    assert parse_statement("ALTER TABLE t ALTER COLUMN n TYPE DECIMAL(10, 2)") == \
        AlterColumn("t", "n", type_sql="DECIMAL(10, 2)")
    assert parse_statement("ALTER TABLE t ALTER n SET DATA TYPE BIGINT") == \
        AlterColumn("t", "n", type_sql="BIGINT")
    assert parse_statement("alter table t alter column n set not null") == \
        AlterColumn("t", "n", nullable=False)
    assert parse_statement("ALTER TABLE t ALTER COLUMN n DROP NOT NULL") == \
        AlterColumn("t", "n", nullable=True)


def test_types_and_nullability_change_and_pylance_reads_them(session, tmp_path: Path) -> None:
    session.sql("ALTER TABLE t ALTER COLUMN n TYPE BIGINT")
    session.sql("ALTER TABLE t ALTER n SET DATA TYPE DOUBLE")
    session.sql("ALTER TABLE t ALTER COLUMN id SET NOT NULL")
    theirs = lance.dataset(tmp_path / "t.lance")
    assert theirs.schema == pa.schema([pa.field("id", pa.int32(), nullable=False),
                                       ("v", pa.string()), ("n", pa.float64())])
    assert theirs.to_table().to_pydict() == {"id": [1, 2], "v": ["a", None], "n": [1.0, 2.0]}
    assert session.sql("DESCRIBE t").to_pydict()["is_nullable"] == ["NO", "YES", "YES"]
    session.sql("ALTER TABLE t ALTER COLUMN id DROP NOT NULL")
    assert session.sql("DESCRIBE t").to_pydict()["is_nullable"] == ["YES", "YES", "YES"]


@pytest.mark.parametrize(("sql", "error", "match"), [
    ("ALTER TABLE t ALTER COLUMN v SET NOT NULL", InvalidInputError, "NULL values"),
    ("ALTER TABLE t ALTER COLUMN v TYPE INT", InvalidInputError, "cannot cast"),
    ("ALTER TABLE t ALTER COLUMN nosuch TYPE INT", NotFoundError, "nosuch"),
    ("ALTER TABLE t ALTER COLUMN n TYPE WHATEVER", InvalidInputError, "unsupported column type"),
    ("ALTER TABLE t ALTER COLUMN n", InvalidInputError, "expected TYPE"),
])
def test_refusals_are_typed_and_commit_nothing(session, sql: str, error, match: str) -> None:
    before = session.dataset("t").version
    with pytest.raises(error, match=match):
        session.sql(sql)
    assert session.dataset("t").version == before
