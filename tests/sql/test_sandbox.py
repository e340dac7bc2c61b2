"""A session touches Lance tables under its root only, unless told otherwise.

DataFusion would read any file through ``CREATE EXTERNAL TABLE`` and write any path
through ``COPY ... TO``; keep memory-only tables and views; and change its settings
with ``SET``. By default the session refuses all of these with a typed error;
``allow_external_files=True`` opts in to external files, ``read_only=True`` refuses
every write.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.cli.main import main
from lance_sql.errors import StatementRefusedError


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A CSV file outside the session's root."""
    secret = tmp_path / "outside" / "secret.csv"
    secret.parent.mkdir()
    secret.write_text("a,b\n1,2\n")
    return secret


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    lance_sql.write_dataset(pa.table({"id": [1, 2, 3]}), root / "t.lance")
    return root


def external_table(path: Path) -> str:
    return (f"CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{path}' "
            "OPTIONS ('format.has_header' 'true')")


def test_external_tables_are_refused_by_default(root: Path, outside: Path) -> None:
    session = lance_sql.connect(root)
    with pytest.raises(StatementRefusedError, match="allow_external_files"):
        session.sql(external_table(outside))
    for spelling in ("CREATE OR REPLACE EXTERNAL TABLE", "create unbounded external table"):
        with pytest.raises(StatementRefusedError):
            session.sql(external_table(outside).replace("CREATE EXTERNAL TABLE", spelling))
    with pytest.raises(lance_sql.NotFoundError):
        session.sql("SELECT * FROM leak").to_arrow_table()


def test_copy_to_is_refused_by_default(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "written.csv"
    session = lance_sql.connect(root)
    with pytest.raises(StatementRefusedError):
        session.sql(f"COPY (SELECT * FROM t) TO '{target}' STORED AS CSV").to_arrow_table()
    with pytest.raises(StatementRefusedError):
        session.sql(f"EXPLAIN COPY (SELECT 1) TO '{target}'").to_arrow_table()
    assert not target.exists()


@pytest.mark.parametrize("sql", [
    "CREATE VIEW v AS SELECT * FROM t",
    "CREATE TEMPORARY TABLE m AS SELECT 1",
    "SET datafusion.catalog.information_schema = true",
    "CREATE SCHEMA s",
    "DROP VIEW v",
    "PREPARE p AS SELECT 1",
    "EXPLAIN CREATE VIEW v AS SELECT 1",
])
def test_statements_that_would_run_in_memory_only_are_refused(root: Path, sql: str) -> None:
    session = lance_sql.connect(root)
    with pytest.raises(StatementRefusedError):
        session.sql(sql).to_arrow_table()
    assert session.tables() == ["t"]


def test_external_files_are_an_explicit_opt_in(root: Path, outside: Path,
                                               tmp_path: Path) -> None:
    session = lance_sql.connect(root, allow_external_files=True)
    session.sql(external_table(outside))
    rows = session.sql("SELECT a, b FROM leak JOIN t ON t.id = leak.a").to_pydict()
    assert rows == {"a": [1], "b": [2]}
    target = tmp_path / "copy.csv"
    assert session.sql(f"COPY (SELECT id FROM t ORDER BY id) TO '{target}' STORED AS CSV"
                       ).to_pydict() == {"count": [3]}
    assert target.read_text().split() == ["id", "1", "2", "3"]
    session.sql("DROP TABLE leak")  # forgets the external table, keeps its file
    assert outside.exists()
    with pytest.raises(lance_sql.NotFoundError):
        session.sql("SELECT * FROM leak")


def test_a_read_only_session_may_read_external_files_but_not_write(root: Path, outside: Path,
                                                                   tmp_path: Path) -> None:
    session = lance_sql.connect(root, read_only=True, allow_external_files=True)
    session.sql(external_table(outside))
    assert session.sql("SELECT count(*) AS n FROM leak").to_pydict() == {"n": [1]}
    with pytest.raises(StatementRefusedError, match="read-only"):
        session.sql(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
    assert not (tmp_path / "x.csv").exists()


def test_the_cli_refuses_files_outside_the_root(root: Path, outside: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli.csv"
    code = main(["sql", str(root), f"COPY (SELECT * FROM t) TO '{target}' STORED AS CSV"])
    err = capsys.readouterr().err
    assert code == 1 and not target.exists()
    assert err.startswith("lance-sql: error: COPY") and len(err.splitlines()) == 1
    code = main(["sql", str(root), external_table(outside) + "; SELECT * FROM leak"])
    assert code == 1 and "allow_external_files" in capsys.readouterr().err
    code = main(["sql", str(root), "--allow-external-files", "--format", "csv",
                 external_table(outside) + "; SELECT a FROM leak"])
    assert code == 0 and capsys.readouterr().out.splitlines()[-2:] == ["a", "1"]


def test_the_cli_in_a_fresh_process(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "proc.csv"
    proc = subprocess.run([sys.executable, "-m", "lance_sql.cli.main", "sql", str(root),
                           f"COPY (SELECT 1) TO '{target}'"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert not target.exists()
