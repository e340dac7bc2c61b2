"""Imports point one way: {format, expr} <- io <- table <- {memwal, sql, spark, cli}, and
inside table/: runtime <- meta <- files <- txn <- write <- read <- index <- {ops, changes}
<- dataset <- the facade (table/__init__.py), which is all sql/, spark/ and cli/ may use."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lance_sql"
RANK = {"errors": 0, "format": 1, "expr": 1, "io": 2, "table": 3, "memwal": 4, "sql": 4, "spark": 4,
        "cli": 5}
# Layers of equal rank may not import each other, except where listed.
ALLOWED_SIBLINGS = {("sql", "memwal"), ("spark", "memwal")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "lance_sql" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "pb" not in p.relative_to(PACKAGE).parts)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    rel = path.relative_to(PACKAGE).parts
    own = rel[0].removesuffix(".py") if len(rel) > 1 else None
    if own not in RANK:
        return  # top-level re-export modules may import anything
    for module in _imports(path):
        target = _layer(module)
        if target is None or target == own or target not in RANK:
            continue
        ok = RANK[target] < RANK[own] or (own, target) in ALLOWED_SIBLINGS
        assert ok, f"{'/'.join(rel)} imports {module}: {own} may not depend on {target}"


# The command line is the top layer, so deferring an import there tangles nothing: it
# loads the SQL layer (and DataFusion, ~0.4 s of CPU) only for commands that run SQL, and
# `lance-sql --help` or a usage error does not pay for it (tests/cli/test_bad_args.py).
DEFERRED = {("cli/main.py", "lance_sql.sql.session"), ("cli/main.py", "lance_sql.cli.demo")}


def test_no_function_level_imports_of_our_modules() -> None:
    offenders = []
    for path in SOURCES:
        if len(path.relative_to(PACKAGE).parts) == 1:
            continue  # the top-level package may load the SQL layer lazily (import time)
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "lance_sql"
                    ) and (path.relative_to(PACKAGE).as_posix(), node.module) not in DEFERRED:
                        offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, f"function-level imports hide layer tangles: {offenders}"


# Sub-packages of lance_sql/table, lowest first; modules directly in table/ rank above all.
TABLE_RANK = {"runtime": 0, "meta": 1, "files": 2, "txn": 3, "write": 4, "read": 5, "index": 6,
              "ops": 7, "changes": 7}
TABLE_SOURCES = [p for p in SOURCES if p.relative_to(PACKAGE).parts[0] == "table"]


def _table_rank(part: str) -> int:
    return TABLE_RANK.get(part.removesuffix(".py"), len(TABLE_RANK))


@pytest.mark.parametrize("path", TABLE_SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_table_subpackages_point_down(path: Path) -> None:
    rel = path.relative_to(PACKAGE / "table").parts
    if rel == ("__init__.py",):
        return  # the facade re-exports from every sub-package
    own = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
    for module in _imports(path):
        parts = module.split(".")
        if parts[:2] != ["lance_sql", "table"] or len(parts) < 3 or parts[2] == own:
            continue
        ok = _table_rank(parts[2]) < _table_rank(own)
        assert ok, f"table/{'/'.join(rel)} imports {module}: {own} may not depend on {parts[2]}"


# Layers above table that reach it only through its facade, ``lance_sql.table`` (its
# ``__all__``). memwal/ still imports table's modules directly (it is being built on a
# transaction context that has not landed yet).
FACADE_USERS = ("sql", "spark", "cli")
FACADE = importlib.import_module("lance_sql.table")
TABLE_PACKAGES = {p.name for p in (PACKAGE / "table").iterdir() if p.is_dir()} | {
    p.stem for p in (PACKAGE / "table").glob("*.py")}


def _from_imports(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


FACADE_SOURCES = [p for p in SOURCES if p.relative_to(PACKAGE).parts[0] in FACADE_USERS] + [
    PACKAGE / "__init__.py"]


@pytest.mark.parametrize("path", FACADE_SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_upper_layers_use_the_table_facade(path: Path) -> None:
    for module, names in _from_imports(path):
        if module.startswith("lance_sql.table."):
            pytest.fail(f"{path.relative_to(PACKAGE)} imports {module}: use lance_sql.table")
        if module == "lance_sql.table":
            private = [n for n in names if n not in FACADE.__all__]
            assert not private, f"{path.relative_to(PACKAGE)} imports {private} from " \
                "lance_sql.table, which does not export them"


@pytest.mark.parametrize("path", FACADE_SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_scan_plans_come_from_the_one_builder(path: Path) -> None:
    """Upper layers get scan plans from ``build_scan_plan``; none builds one by hand."""
    tree = ast.parse(path.read_text())
    built = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", getattr(node.func, "attr", None)) == "ScanPlan"]
    assert not built, f"{path.relative_to(PACKAGE)} builds a ScanPlan at lines {built}"


@pytest.mark.parametrize("path", TABLE_SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_table_modules_do_not_import_the_facade(path: Path) -> None:
    """The facade imports every module of table/: one importing it back would be a cycle."""
    if path.relative_to(PACKAGE).parts == ("table", "__init__.py"):
        return
    for module, names in _from_imports(path):
        if module == "lance_sql.table":
            exported = [n for n in names if n not in TABLE_PACKAGES]
            assert not exported, f"{path.relative_to(PACKAGE)} imports {exported} from the " \
                "facade; import it from the module that defines it"


def test_facade_exports_exist() -> None:
    missing = [n for n in FACADE.__all__ if not hasattr(FACADE, n)]
    assert not missing and len(set(FACADE.__all__)) == len(FACADE.__all__)
