"""Every ``sql_examples/NAME.sql`` runs against the fixture tables and prints ``NAME.out``.

The output is what ``lance-sql shell ROOT < NAME.sql 2>&1`` prints (the CLI's table
format, errors as ``error: ...`` lines), with ROOT written as ``<root>``; the tables come
from ``sql_examples/build_tables.py``. After changing an example or the engine,
regenerate and review every changed ``.out`` by hand before keeping it::

    python tests/sql/test_sql_examples.py --regen [NAME ...]
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import io
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from lance_sql.cli.execute import OutputOptions, is_blank, run_statements, split_statements
from lance_sql.cli.shell import Shell
from lance_sql.sql.session import connect

EXAMPLES = Path(__file__).resolve().parents[2] / "sql_examples"
SQL_FILES = sorted(EXAMPLES.glob("*.sql"))


def load_builder() -> ModuleType:
    """``sql_examples/build_tables.py``, which lives outside the package and the tests."""
    spec = importlib.util.spec_from_file_location("sql_examples_build_tables",
                                                  EXAMPLES / "build_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(sql_file: Path, root: Path) -> str:
    """The example's output, as the shell prints it with stderr merged into stdout."""
    statements, rest = split_statements(sql_file.read_text())
    if not is_blank(rest):
        statements.append(rest.strip())
    out = io.StringIO()
    run_statements(connect(root), statements, out, out, OutputOptions(progress=False),
                   keep_going=True)
    return out.getvalue().replace(str(root), "<root>")


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_examples")
    load_builder().build(root)
    return root


@pytest.mark.parametrize("sql_file", SQL_FILES, ids=lambda p: p.stem)
def test_example(sql_file: Path, tables: Path) -> None:
    expected_file = sql_file.with_suffix(".out")
    assert expected_file.exists(), f"{expected_file.name} is missing: run with --regen"
    actual = run_example(sql_file, tables)
    expected = expected_file.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            expected_file.name, "actual"))
        pytest.fail(f"{sql_file.name} printed something else:\n{diff}")


@pytest.mark.parametrize("sql_file", SQL_FILES, ids=lambda p: p.stem)
def test_the_shell_prints_the_same(sql_file: Path, tables: Path) -> None:
    """``lance-sql shell ROOT < NAME.sql 2>&1`` prints NAME.out (statement by statement)."""
    out = io.StringIO()
    Shell(connect(tables), stdin=io.StringIO(sql_file.read_text()), out=out, err=out).run()
    assert out.getvalue().replace(str(tables), "<root>") == sql_file.with_suffix(".out").read_text()


def test_every_output_has_its_query() -> None:
    assert SQL_FILES, "no examples found"
    orphans = [p.name for p in EXAMPLES.glob("*.out") if not p.with_suffix(".sql").exists()]
    assert not orphans, f"expected outputs without a .sql file: {orphans}"


def regenerate(names: list[str]) -> None:
    """Rewrite the chosen (default: all) ``.out`` files and print what changed."""
    chosen = [p for p in SQL_FILES if not names or p.stem in names]
    with tempfile.TemporaryDirectory(prefix="sql-examples-") as tmp:
        root = Path(tmp)
        load_builder().build(root)
        for sql_file in chosen:
            out_file = sql_file.with_suffix(".out")
            text = run_example(sql_file, root)
            old = out_file.read_text() if out_file.exists() else None
            if text != old:
                out_file.write_text(text)
                print(f"{'updated' if old is not None else 'created'} {out_file.name}")
    print(f"{len(chosen)} examples run; review the changed .out files before keeping them")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Regenerate sql_examples/*.out")
    parser.add_argument("--regen", action="store_true", required=True)
    parser.add_argument("names", nargs="*", help="example names (default: all)")
    args = parser.parse_args()
    regenerate(args.names)
    sys.exit(0)
