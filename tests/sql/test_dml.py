"""UPDATE and DELETE statements through the session."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError, SchemaError
from lance_sql.sql.dml import DeleteStatement, UpdateStatement, parse_dml


def test_parse_update_splits_assignments_at_top_level_commas() -> None:
    stmt = parse_dml("UPDATE t SET a = abs(b - 1), \"c d\" = 'x, y' WHERE id IN (1, 2);")
    assert stmt == UpdateStatement("t", {"a": "abs(b - 1)", "c d": "'x, y'"}, "id IN (1, 2)")


def test_parse_delete_and_queries() -> None:
    assert parse_dml("delete from t where x > 3") == DeleteStatement("t", "x > 3")
    assert parse_dml("DELETE FROM t") == DeleteStatement("t", None)
    assert parse_dml("SELECT * FROM t") is None
    assert parse_dml("-- just a comment") is None


def test_qualified_table_names_as_the_other_statements_take_them(session, tmp_path) -> None:
    """``UPDATE default.t`` / ``DELETE FROM lance.default.t`` were parse errors while
    SELECT, INSERT and TRUNCATE took the qualified name."""
    assert parse_dml("UPDATE default.t SET v = 'x' WHERE id = 1") == \
        UpdateStatement("t", {"v": "'x'"}, "id = 1")
    assert parse_dml('DELETE FROM lance."default".t') == DeleteStatement("t", None)
    with pytest.raises(InvalidInputError, match="unknown schema"):
        parse_dml("DELETE FROM other.t WHERE id = 1")
    assert session.sql("UPDATE default.t SET v = 'x' WHERE id = 1").to_pydict() == \
        {"num_rows_updated": [1]}
    assert session.sql("DELETE FROM lance.default.t WHERE id > 3").to_pydict() == \
        {"num_deleted_rows": [2]}
    assert lance.dataset(tmp_path / "t").to_table().sort_by("id").to_pydict() == \
        {"id": [0, 1, 2, 3], "v": ["s0", "x", "s2", "s3"]}


def test_aliases_and_table_qualified_columns(session, tmp_path) -> None:
    """``DELETE FROM t WHERE t.id = 1`` was a NotFoundError ('t.id'), ``UPDATE t AS x``,
    ``DELETE FROM t x`` and ``SET t.v = ...`` parse errors."""
    assert parse_dml("UPDATE t AS x SET x.v = 'a' WHERE x.id = 1") == \
        UpdateStatement("t", {"v": "'a'"}, "x.id = 1", "x")
    assert parse_dml("DELETE FROM t x WHERE x.id = 1") == DeleteStatement("t", "x.id = 1", "x")
    for sql, out in (("DELETE FROM t WHERE t.id = 1", {"num_deleted_rows": [1]}),
                     ("DELETE FROM t AS x WHERE x.id = 2", {"num_deleted_rows": [1]}),
                     ("UPDATE t x SET v = upper(x.v) WHERE x.id > 3", {"num_rows_updated": [2]}),
                     ("UPDATE t SET t.v = 'q' WHERE t.id = 3", {"num_rows_updated": [1]})):
        assert session.sql(sql).to_pydict() == out
    assert lance.dataset(tmp_path / "t").to_table().sort_by("id").to_pydict() == \
        {"id": [0, 3, 4, 5], "v": ["s0", "q", "S4", "S5"]}
    # a struct column of the alias's name keeps its meaning: x.a is its field
    data = pa.table({"id": [1, 2], "x": [{"a": 1}, {"a": 2}]})
    lance_sql.write_dataset(data, tmp_path / "s.lance")
    session = lance_sql.connect(tmp_path)
    assert session.sql("DELETE FROM s AS x WHERE x.a = 2").to_pydict() == \
        {"num_deleted_rows": [1]}
    assert lance.dataset(tmp_path / "s.lance").to_table().to_pydict() == \
        {"id": [1], "x": [{"a": 1}]}


@pytest.mark.parametrize("sql", [
    "UPDATE t", "UPDATE t SET", "UPDATE t SET a", "UPDATE t SET a = 1, a = 2",
    "UPDATE t SET a = 1 WHERE", "DELETE t WHERE x = 1", "DELETE FROM t x = 1",
])
def test_malformed_statements_are_invalid_input(sql: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_dml(sql)


@pytest.fixture
def session(tmp_path):
    data = pa.table({"id": pa.array(range(6), pa.int64()), "v": [f"s{i}" for i in range(6)]})
    lance_sql.write_dataset(data, tmp_path / "t", enable_stable_row_ids=True)
    return lance_sql.connect(tmp_path)


def test_update_commits_and_the_next_query_sees_it(session) -> None:
    out = session.sql("UPDATE t SET v = upper(v), id = id * 10 WHERE id < 2").to_pydict()
    assert out == {"num_rows_updated": [2]}
    rows = session.sql("SELECT id, v, _rowid, _row_last_updated_at_version FROM t "
                       "ORDER BY _rowid").to_pydict()
    assert rows["id"] == [0, 10, 2, 3, 4, 5]
    assert rows["v"] == ["S0", "S1", "s2", "s3", "s4", "s5"]
    assert rows["_rowid"] == list(range(6))
    assert rows["_row_last_updated_at_version"] == [2, 2, 1, 1, 1, 1]
    before = session.sql("SELECT v FROM t VERSION AS OF 1 WHERE _rowid = 1").to_pydict()
    assert before == {"v": ["s1"]}


def test_delete_reports_rows_removed(session) -> None:
    assert session.sql("DELETE FROM t WHERE id >= 4").to_pydict() == {"num_deleted_rows": [2]}
    assert session.sql("SELECT count(*) AS n FROM t").to_pydict() == {"n": [4]}
    changes = session.sql("SELECT _rowid, _change_type FROM table_changes('t', 2, 2) "
                          "ORDER BY _rowid").to_pydict()
    assert changes == {"_rowid": [4, 5], "_change_type": ["delete", "delete"]}


def test_statement_on_unknown_table_or_column(session) -> None:
    with pytest.raises(NotFoundError):
        session.sql("UPDATE nope SET v = 'x'")
    with pytest.raises(NotFoundError):
        session.sql("UPDATE t SET nope = 1")
    assert session.sql("SELECT count(*) AS n FROM t").to_pydict() == {"n": [6]}


def test_array_literals_are_not_split_at_their_commas(tmp_path) -> None:
    """Assignments and VALUES rows split at top-level commas only: not inside ``[...]``."""
    stmt = parse_dml("UPDATE t SET e = [9.0, 8.0], n = 1 WHERE id = 1")
    assert stmt == UpdateStatement("t", {"e": "[9.0, 8.0]", "n": "1"}, "id = 1")
    data = pa.table({"id": pa.array([1, 2], pa.int64()),
                     "e": pa.array([[0.0], [1.0, 1.5]], pa.list_(pa.float64()))})
    lance_sql.write_dataset(data, tmp_path / "t")
    session = lance_sql.connect(tmp_path)
    session.sql("INSERT INTO t (id, e) VALUES (3, [3.0, 4.0]), (4, [5.0, 6.0, 7.0])")
    session.sql("MERGE INTO t USING (SELECT 2 AS id) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET e = [7.0, 7.5]")
    got = lance_sql.dataset(tmp_path / "t").to_table().sort_by("id")
    assert got.column("id").to_pylist() == [1, 2, 3, 4]
    assert got.column("e").to_pylist() == [[0.0], [7.0, 7.5], [3.0, 4.0], [5.0, 6.0, 7.0]]


def test_update_sets_array_literals_on_list_and_fixed_size_list_columns(tmp_path) -> None:
    """``SET e = [..]`` casts the literal to the column's type; a fixed-size list of the
    wrong length is an InvalidInputError and commits nothing. pylance reads the result."""
    data = pa.table({"id": pa.array([1, 2], pa.int64()),
                     "l": pa.array([[0.0], [1.0, 1.5]], pa.list_(pa.float64())),
                     "f": pa.array([[0.0, 0.5], [1.0, 1.5]], pa.list_(pa.float32(), 2))})
    lance_sql.write_dataset(data, tmp_path / "t")
    session = lance_sql.connect(tmp_path)
    out = session.sql("UPDATE t SET l = [9.0, 8.0, 7], f = [9.0, -8.5] WHERE id = 1")
    assert out.to_pydict() == {"num_rows_updated": [1]}
    session.sql("UPDATE t SET l = [], f = [2, 3] WHERE id = 2")
    want = {"id": [1, 2], "l": [[9.0, 8.0, 7.0], []], "f": [[9.0, -8.5], [2.0, 3.0]]}
    ours = lance_sql.dataset(tmp_path / "t")
    theirs = lance.dataset(tmp_path / "t")
    for got in (ours.to_table(), theirs.to_table()):
        assert got.schema == data.schema
        assert got.sort_by("id").to_pydict() == want
    version = ours.version
    for bad in ("[1.0, 2.0, 3.0]", "[1.0]", "['a', 'b']"):
        with pytest.raises(InvalidInputError, match="column 'f'"):
            session.sql(f"UPDATE t SET f = {bad} WHERE id = 1")
    assert lance_sql.dataset(tmp_path / "t").version == version
    assert lance.dataset(tmp_path / "t").to_table().sort_by("id").to_pydict() == want


def test_insert_and_merge_cast_list_literals_to_fixed_size_list_columns(tmp_path) -> None:
    """INSERT VALUES and MERGE sources give DataFusion's list<double> literals: they are
    stored as the column's fixed_size_list<float, 2> when their lengths match; another
    length is a SchemaError naming the column, and commits nothing. pylance reads the
    rows equal."""
    data = pa.table({"id": pa.array([1, 2], pa.int64()),
                     "f": pa.array([[0.0, 0.5], [1.0, 1.5]], pa.list_(pa.float32(), 2))})
    lance_sql.write_dataset(data, tmp_path / "t")
    session = lance_sql.connect(tmp_path)
    session.sql("INSERT INTO t VALUES (3, [3.0, 3.5]), (4, [4, -4])")
    session.sql("INSERT INTO t (f, id) VALUES ([5.0, NULL], 5), (NULL, 6)")
    session.sql("MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET f = [7.0, 7.5]")
    session.sql("MERGE INTO t USING (SELECT 2 AS id, [8.0, 8.5] AS f UNION ALL "
                "SELECT 9, [9.0, 9.5]) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    want = {"id": [1, 2, 3, 4, 5, 6, 9],
            "f": [[7.0, 7.5], [8.0, 8.5], [3.0, 3.5], [4.0, -4.0], [5.0, None], None,
                  [9.0, 9.5]]}
    version = lance_sql.dataset(tmp_path / "t").version
    for got in (lance_sql.dataset(tmp_path / "t").to_table(),
                lance.dataset(tmp_path / "t").to_table()):
        assert got.schema == data.schema
        assert got.sort_by("id").to_pydict() == want
    for bad in ("INSERT INTO t VALUES (10, [1.0, 2.0]), (11, [1.0])",
                "INSERT INTO t VALUES (10, [1.0, 2.0, 3.0])",
                "MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET f = [1.0, 2.0, 3.0]",
                "MERGE INTO t USING (SELECT 10 AS id, [1.0] AS f) s ON t.id = s.id "
                "WHEN NOT MATCHED THEN INSERT *"):
        with pytest.raises(SchemaError, match="column 'f'"):
            session.sql(bad)
    assert lance_sql.dataset(tmp_path / "t").version == version
    assert lance.dataset(tmp_path / "t").to_table().sort_by("id").to_pydict() == want


def test_set_default_is_null(session, tmp_path) -> None:
    """Columns have no defaults: ``SET c = DEFAULT`` stores NULL (SQL's default default)."""
    assert parse_dml("UPDATE t SET v = DEFAULT WHERE id = 1") == \
        UpdateStatement("t", {"v": "NULL"}, "id = 1")
    assert session.sql("UPDATE t SET v = DEFAULT WHERE id = 1").to_pydict() == \
        {"num_rows_updated": [1]}
    rows = lance.dataset(tmp_path / "t").to_table().sort_by("id").to_pydict()
    assert rows["v"][1] is None and rows["v"][0] == "s0"
