"""Imports point one way: format <- io <- table <- {memwal, sql, spark, cli}."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lance_sql"
RANK = {"errors": 0, "format": 1, "io": 2, "table": 3, "memwal": 4, "sql": 4, "spark": 4,
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
                    ):
                        offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, f"function-level imports hide layer tangles: {offenders}"
