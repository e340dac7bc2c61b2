"""Wide filters through SQL: long equality lists fold into IN lists before DataFusion
plans them (it crashed planning ~4,000 ORs); what is still too wide is a typed error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import Call
from lance_sql.sql.pyarrow_filter import decode
from lance_sql.sql.session import connect
from lance_sql.sql.wide_filters import MAX_CHAIN, check_chains, fold_disjunctions

ROWS = 30_000
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ids = np.arange(ROWS, dtype=np.int64)
    k = pa.array(ids % 1000, mask=ids % 11 == 0)
    table = pa.table({"id": ids, "k": k, "s": pa.array([f"v{i}" for i in ids])})
    path = tmp_path_factory.mktemp("wide")
    lance_sql.write_dataset(table, path / "w.lance", max_rows_per_file=10_000)
    return path


def reference_ids(root: Path, where: str) -> list[int]:
    table = lance.dataset(str(root / "w.lance")).to_table(columns=["id"], filter=where)
    return sorted(table.column("id").to_pylist())


def sql_ids(root: Path, where: str) -> list[int]:
    table = connect(root).sql(f"SELECT id FROM w WHERE {where}").to_arrow_table()
    return sorted(table.column("id").to_pylist())


def equalities(column: str, values: range, quote: bool = False) -> list[str]:
    return [f"{column} = '{v}'" if quote else f"{column} = {v}" for v in values]


@pytest.mark.parametrize("where", [
    " OR ".join(equalities("id", range(0, 30_000, 3))),                       # 10,000 terms
    " OR ".join(f"{'id' if i % 2 else 'k'} = {i * 3}" for i in range(10_000)),
    " OR ".join(f"s = 'v{i * 7}'" for i in range(5_000)),
    "k = 5 AND " + " OR ".join(equalities("id", range(20))) + " AND k = 7",   # AND binds first
    "NOT id = 1 OR " + " OR ".join(equalities("id", range(2, 40))),
    "(" + " OR ".join(equalities("id", range(40))) + ") AND k > 3",
    " OR ".join(equalities("id", range(30))) + " OR k = NULL OR id > 29990",
], ids=["or_10k", "two_columns", "strings", "and_binds_first", "not", "parenthesised",
        "null_and_range"])
def test_wide_sql_filter_gives_pylance_rows(root: Path, where: str) -> None:
    assert sql_ids(root, where) == reference_ids(root, where)


def test_too_wide_to_plan_is_a_typed_error(root: Path) -> None:
    where = " OR ".join(f"id > {i}" for i in range(MAX_CHAIN + 2))
    with pytest.raises(InvalidInputError, match="AND/OR operators"):
        connect(root).sql(f"SELECT id FROM w WHERE {where}")
    where = "(" * 10_000 + "id = 3" + ")" * 10_000
    with pytest.raises(InvalidInputError):
        connect(root).sql(f"SELECT id FROM w WHERE {where}").collect()


def test_fold_rewrites_only_whole_operands() -> None:
    terms = " OR ".join(equalities("a", range(16)))
    assert fold_disjunctions(f"SELECT * FROM t WHERE {terms}") == (
        "SELECT * FROM t WHERE (a IN (" + ", ".join(str(i) for i in range(16)) + "))")
    short = " OR ".join(equalities("a", range(15)))
    assert fold_disjunctions(f"SELECT * FROM t WHERE {short}") == (
        f"SELECT * FROM t WHERE {short}")
    # AND, NOT and arithmetic bind tighter than OR: those operands stay as written
    terms = " OR ".join(equalities("a", range(20)))
    folded = fold_disjunctions(f"SELECT 1 WHERE b = 0 AND {terms} AND c = 1")
    assert folded == ("SELECT 1 WHERE b = 0 AND a = 0 OR (a IN ("
                      + ", ".join(str(i) for i in range(1, 19)) + ")) OR a = 19 AND c = 1")
    assert fold_disjunctions(f"SELECT 1 WHERE NOT {terms}").startswith(
        "SELECT 1 WHERE NOT a = 0 OR (a IN (1, 2, ")
    assert fold_disjunctions(f"SELECT 1 WHERE {terms} + 1").endswith("18)) OR a = 19 + 1")
    # literals of different kinds and columns get their own lists; strings are untouched
    mixed = " OR ".join(equalities("a", range(8)) + equalities("a", range(8), quote=True)
                        + ["'x OR y' = b", "-3 = t.\"c\""] + equalities("b", range(6)))
    folded = fold_disjunctions(f"SELECT 1 WHERE {mixed}")
    assert "a IN (0, 1, 2, 3, 4, 5, 6, 7)" in folded
    assert "a IN ('0', '1', '2', '3', '4', '5', '6', '7')" in folded
    assert "b IN ('x OR y')" not in folded and "b = 'x OR y'" in folded
    assert 't."c" = -3' in folded and "b IN (0, 1, 2, 3, 4, 5)" in folded


def test_chain_limit_counts_per_nesting_level() -> None:
    check_chains("SELECT 1 WHERE " + " OR ".join(f"(a > {i} AND b < {i})" for i in range(900)))
    with pytest.raises(InvalidInputError):
        check_chains("SELECT 1 WHERE " + " AND ".join(f"a > {i}" for i in range(MAX_CHAIN + 2)))


def test_cli_answers_a_10k_or_query(root: Path, tmp_path: Path) -> None:
    where = " OR ".join(equalities("id", range(0, 30_000, 3)))
    script = tmp_path / "wide.sql"
    script.write_text(f"SELECT count(*) AS n FROM w WHERE {where};")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "lance_sql.cli.main", "sql", str(root), "-f", str(script),
         "--format", "json"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [{"n": 10_000}]


def test_wide_filter_not_foldable_with_system_columns(root: Path) -> None:
    """900 OR-ed conjunctions reach the scan as a 900-deep pyarrow expression, which the
    scan decodes (to prune by row address) without recursing."""
    where = " OR ".join(f"(id > {i * 30} AND k = {i})" for i in range(900))
    table = connect(root).sql(f"SELECT _rowid, id FROM w WHERE {where}").to_arrow_table()
    assert sorted(table.column("id").to_pylist()) == reference_ids(root, where)


def test_deep_pushed_expression_decodes_flat() -> None:
    expression = pc.field("id") == 0
    for i in range(1, 3000):
        expression = expression | (pc.field("id") == i)
    tree = decode(expression)
    assert isinstance(tree, Call) and tree.op == "or" and len(tree.args) == 3000


def test_the_text_precheck_never_skips_a_fold_or_a_refusal() -> None:
    """fold_disjunctions / check_chains return early when the text has too few "or" /
    "and" letters to matter: the shortest foldable run (any case of OR) is still folded,
    the first chain over the limit is still refused, and a long IN list is left as is."""
    from lance_sql.sql.wide_filters import FOLD_MIN_TERMS

    ops = ["OR", "or", "Or", "oR"]
    run = " ".join(f"id = {i} {ops[i % 4]}" for i in range(FOLD_MIN_TERMS - 1))
    sql = f"SELECT * FROM t WHERE {run} id = 99"
    folded = fold_disjunctions(sql)
    assert " IN (" in folded and folded.count("99") == 1
    short = "SELECT * FROM t WHERE " + " OR ".join(f"id = {i}" for i in range(FOLD_MIN_TERMS - 1))
    assert fold_disjunctions(short) == short
    listed = "SELECT * FROM t WHERE id IN (" + ", ".join(map(str, range(3000))) + ")"
    assert fold_disjunctions(listed) == listed
    check_chains(listed)
    check_chains("SELECT 1 WHERE " + " aNd ".join(["x"] * (MAX_CHAIN + 1)))
    with pytest.raises(InvalidInputError):
        check_chains("SELECT 1 WHERE " + " aNd ".join(["x"] * (MAX_CHAIN + 2)))
