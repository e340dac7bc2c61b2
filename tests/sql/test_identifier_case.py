"""One rule per language for the case of column names.

Python filters bind as pylance's do: an unquoted name exactly, else case-insensitively
when that is unambiguous; a backquoted one exactly (lance_sql also takes ``"Name"`` as an
exact identifier, where pylance reads a string). SQL binds as DataFusion's SELECT does:
an unquoted name folds to lower case, a quoted one is exact; UPDATE and DELETE follow it.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.sql.writes import MERGE_PATHS


@pytest.fixture
def path(tmp_path: Path) -> Path:
    out = tmp_path / "p.lance"
    lance.write_dataset(pa.table({"id": [1, 2], "Name": ["a", "b"]}), out)
    return out


@pytest.mark.parametrize("text", ["name = 'a'", "Name = 'a'", "NAME = 'a'", "`Name` = 'a'"])
def test_python_filters_bind_as_pylance(path: Path, text: str) -> None:
    want = lance.dataset(path).to_table(filter=text).to_pydict()
    assert want == {"id": [1], "Name": ["a"]}
    assert lance_sql.dataset(path).to_table(filter=text).to_pydict() == want


@pytest.mark.parametrize("text", ["`name` = 'a'", "`NAME` = 'a'"])
def test_backquoted_names_are_exact_as_in_pylance(path: Path, text: str) -> None:
    with pytest.raises(ValueError, match="No field named"):
        lance.dataset(path).to_table(filter=text)
    with pytest.raises(NotFoundError, match="exact spelling"):
        lance_sql.dataset(path).to_table(filter=text)


def test_backquoted_names_are_exact_and_double_quotes_are_strings(path: Path) -> None:
    """The filter language is pylance's: backticks quote a name, double quotes a string
    (``Name = "Name"`` compares with the text 'Name', not the column with itself)."""
    ds = lance_sql.dataset(path)
    assert ds.to_table(filter="`Name` = 'b'").to_pydict() == {"id": [2], "Name": ["b"]}
    with pytest.raises(NotFoundError, match="exact spelling"):
        ds.to_table(filter="`name` = 'b'")
    for text in ('Name = "b"', '"b" = Name', 'Name = "Name"', '`Name` <> "a"'):
        assert ds.to_table(filter=text).to_pydict() == \
            lance.dataset(path).to_table(filter=text).to_pydict(), text
    assert ds.count_rows('Name = "Name"') == 0


def test_case_variants_bind_exactly_and_ambiguity_is_an_error(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2], "A": [2, 1], "Bc": [1, 1], "BC": [2, 2]})
    lance.write_dataset(table, tmp_path / "q.lance")
    for text in ("a = 1", "A = 1", "`A` = 1", "`a` = 1"):
        assert lance_sql.dataset(tmp_path / "q.lance").to_table(filter=text).to_pydict() == \
            lance.dataset(tmp_path / "q.lance").to_table(filter=text).to_pydict()
    with pytest.raises(NotFoundError, match="ambiguous"):
        lance_sql.dataset(tmp_path / "q.lance").to_table(filter="bc = 1")


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql('CREATE TABLE m (id BIGINT, "Name" VARCHAR, low VARCHAR)')
    s.sql("INSERT INTO m VALUES (1, 'a', 'x'), (2, 'b', 'y')")
    return s


@pytest.mark.parametrize("sql", [
    "DELETE FROM m WHERE name = 'a'",
    "UPDATE m SET low = 'z' WHERE Name = 'a'",
    "UPDATE m SET low = name",
    "UPDATE m SET Name = 'q'",
])
def test_sql_writes_refuse_what_select_refuses(session, sql: str) -> None:
    # SELECT fails on the same unquoted spelling
    with pytest.raises(NotFoundError):
        session.sql("SELECT id FROM m WHERE name = 'a'").to_pydict()
    before = session.dataset("m").version
    with pytest.raises(NotFoundError, match="name"):
        session.sql(sql)
    assert session.dataset("m").version == before


def test_sql_writes_bind_what_select_binds(session) -> None:
    # quoted: exact; unquoted: folded to lower case (LOW binds column low)
    assert session.sql('SELECT id FROM m WHERE "Name" = \'a\' AND LOW = \'x\'').to_pydict() \
        == {"id": [1]}
    assert session.sql('UPDATE m SET LOW = "Name" || \'!\' WHERE "Name" = \'a\'').to_pydict() \
        == {"num_rows_updated": [1]}
    assert session.sql('DELETE FROM m WHERE LOW = \'y\' AND "Name" = \'b\'').to_pydict() == \
        {"num_deleted_rows": [1]}
    assert session.sql('SELECT id, "Name", low FROM m').to_pydict() == \
        {"id": [1], "Name": ["a"], "low": ["a!"]}


def test_sql_case_variant_columns_need_quotes(tmp_path: Path) -> None:
    lance.write_dataset(pa.table({"id": [1], "name": ["a"], "NAME": ["b"]}), tmp_path / "v.lance")
    s = lance_sql.connect(tmp_path)
    # SELECT binds NAME to name (folded); a write refuses rather than guess differently
    assert s.sql("SELECT NAME FROM v").to_pydict() == {"name": ["a"]}
    with pytest.raises(InvalidInputError, match="ambiguous"):
        s.sql("DELETE FROM v WHERE NAME = 'a'")
    assert s.sql('DELETE FROM v WHERE "NAME" = \'b\'').to_pydict() == {"num_deleted_rows": [1]}
    assert s.sql("SELECT * FROM v").to_pydict() == {"id": [], "name": [], "NAME": []}


def test_an_update_target_needs_quotes_as_its_condition_does(tmp_path: Path) -> None:
    lance.write_dataset(pa.table({"k": [1], "Name": ["a"]}), tmp_path / "u.lance")
    s = lance_sql.connect(tmp_path)
    for statement in ("UPDATE u SET name = 'x'", "UPDATE u SET name = (SELECT 'x')"):
        with pytest.raises(NotFoundError, match='to set.*quote it to keep its case: "Name"'):
            s.sql(statement)
    assert s.sql('UPDATE u SET "Name" = \'x\'').to_pydict() == {"num_rows_updated": [1]}
    assert s.sql("SELECT * FROM u").to_pydict() == {"k": [1], "Name": ["x"]}


def test_columns_named_with_backquotes_are_updated_and_deleted_by(tmp_path: Path) -> None:
    """A name holding a backquote (SQL quotes it in double quotes) reaches the table
    layer's field paths quoted: UPDATE sets it, from a constant and from a subquery."""
    lance_sql.write_dataset(pa.table({"q`t": [1, 2], "a": [3, 4]}), tmp_path / "t.lance")
    s = lance_sql.connect(tmp_path)
    assert s.sql('UPDATE t SET "q`t" = 5 WHERE a = 3').to_pydict() == {"num_rows_updated": [1]}
    assert s.sql("SELECT * FROM t ORDER BY a").to_pydict() == {"q`t": [5, 2], "a": [3, 4]}
    assert s.sql('UPDATE t SET "q`t" = (SELECT max(a) FROM t) WHERE a = 4').to_pydict() == {
        "num_rows_updated": [1]}
    assert s.sql('DELETE FROM t WHERE "q`t" = 5').to_pydict() == {"num_deleted_rows": [1]}
    assert s.sql("SELECT * FROM t").to_pydict() == {"q`t": [4], "a": [4]}


def test_system_columns_keep_working_in_sql_writes(tmp_path: Path) -> None:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE t TBLPROPERTIES ('enable_stable_row_ids' = 'true') AS "
          "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'c')) AS v(id, s)")
    assert s.sql("DELETE FROM t WHERE _ROWID = 0").to_pydict() == {"num_deleted_rows": [1]}
    assert s.sql("UPDATE t SET s = 'x' WHERE _rowaddr = 1").to_pydict() == \
        {"num_rows_updated": [1]}
    # a SET value reading a system column is computed by DataFusion, as SELECT shows it
    want = s.sql("SELECT CAST(_rowid AS VARCHAR) || '@' || "
                 "CAST(_row_created_at_version AS VARCHAR) AS v FROM t WHERE id = 3").to_pydict()
    s.sql("UPDATE t SET s = CAST(_rowid AS VARCHAR) || '@' || "
          "CAST(_row_created_at_version AS VARCHAR) WHERE id = 3")
    assert s.sql("SELECT _rowid, s FROM t ORDER BY id").to_pydict() == \
        {"_rowid": [1, 2], "s": ["x", want["v"][0]]} == {"_rowid": [1, 2], "s": ["x", "2@1"]}


def test_table_names_differing_by_case_or_holding_sql_name_syntax(tmp_path: Path) -> None:
    """Tables ``Mixed`` and ``MIXED``: an unquoted or wrongly cased name is ambiguous (it
    read the last in sort order), an exact one reads its table. Directories whose names
    hold ``#`` or ``@`` (SQL names use them for flags and versions) are not tables here:
    ``"a#b"`` read table ``a``'s rows."""
    for name, v in (("Mixed", 1), ("MIXED", 2), ("a", 3), ("a#b", 4), ("u@x", 5)):
        lance_sql.write_dataset(pa.table({"v": [v]}), tmp_path / f"{name}.lance")
    session = lance_sql.connect(tmp_path)
    assert session.sql('SELECT v FROM "Mixed"').to_pylist() == [{"v": 1}]
    assert session.sql('SELECT v FROM "MIXED"').to_pylist() == [{"v": 2}]
    for text in ("SELECT v FROM mixed", 'SELECT v FROM "mixed"'):
        with pytest.raises(NotFoundError, match="ambiguous"):
            session.sql(text).to_pylist()
    names = [r["table_name"] for r in session.sql("SHOW TABLES").to_pylist()]
    assert {"Mixed", "MIXED", "a"} <= set(names) and not {"a#b", "u@x"} & set(names)
    with pytest.raises(lance_sql.LanceError):
        session.sql('SELECT v FROM "a#b"').to_pylist()
    with pytest.raises(lance_sql.LanceError):
        session.sql('SELECT v FROM "u@x"').to_pylist()
    assert session.sql("SELECT v FROM a").to_pylist() == [{"v": 3}]


def test_merge_conditions_bind_quoted_names_on_the_merge_insert_path(session) -> None:
    """A MERGE run as merge_insert hands its conditions to the filter language, where
    "x" would be a string: the quoted names must still name columns."""
    before = MERGE_PATHS.counts["merge_insert"]
    out = session.sql(
        'MERGE INTO m USING (SELECT * FROM (VALUES (1, \'p\', \'q\'), (2, \'r\', \'s\')) '
        'AS v(id, "Name", low)) s ON m.id = s.id '
        'WHEN MATCHED AND m."Name" = \'b\' THEN UPDATE SET * '
        'WHEN NOT MATCHED BY SOURCE AND m."Name" = \'zz\' THEN DELETE').to_pydict()
    assert MERGE_PATHS.counts["merge_insert"] == before + 1
    assert out["num_updated_rows"] == [1]
    rows = session.sql('SELECT id, "Name", low FROM m ORDER BY id').to_pydict()
    assert rows == {"id": [1, 2], "Name": ["a", "r"], "low": ["x", "s"]}
