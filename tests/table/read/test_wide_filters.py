"""Deep or wide filters never crash: they give pylance's rows, or a typed error.

A filter of 10,000 ORs used to segfault inside pyarrow (which flattens a chain of one
associative kernel and recurses through it), through the Python API and SQL alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import Call, Column, Literal, fold_equalities, parse_predicate
from lance_sql.expr import arrow as expr_module

ROWS = 30_000
REPO = Path(__file__).resolve().parents[3]


def wide_or(n: int) -> str:
    return " OR ".join(f"id = {i * 3}" for i in range(n))


# name -> filter; each is answered by pylance too
FILTERS = {
    "or_10k": wide_or(10_000),
    "or_two_columns": " OR ".join(f"{'id' if i % 2 else 'k'} = {i * 3}" for i in range(10_000)),
    "or_mixed_ops": " OR ".join(f"id {'=' if i % 2 else '>'} {ROWS - 50 + i}"
                                for i in range(10_000)),
    "and_10k": " AND ".join(f"id != {i * 3}" for i in range(10_000)),
    "or_strings": " OR ".join(f"s = 'v{i * 7}'" for i in range(5_000)),
    "or_with_null": wide_or(2_000) + " OR k = NULL",
    "parens_40": "(" * 40 + "id = 3 OR k = 5" + ")" * 40,
}
# name -> filter we refuse with InvalidInputError (pylance refuses them too)
REFUSED = {
    "parens_10k": "(" * 10_000 + "id = 3" + ")" * 10_000,
    "not_10k": "NOT " * 10_000 + "id = 3",
}


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    ids = np.arange(ROWS, dtype=np.int64)
    k = pa.array(ids % 1000, mask=ids % 11 == 0)  # some NULLs
    table = pa.table({"id": ids, "k": k, "s": pa.array([f"v{i}" for i in ids])})
    path = tmp_path_factory.mktemp("wide") / "w.lance"
    lance_sql.write_dataset(table, path, max_rows_per_file=10_000)
    return str(path)


def reference_ids(uri: str, text: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"], filter=text)
                  .column("id").to_pylist())


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_wide_filter_gives_pylance_rows(uri: str, name: str) -> None:
    text = FILTERS[name]
    ours = lance_sql.dataset(uri).to_table(columns=["id"], filter=text)
    assert sorted(ours.column("id").to_pylist()) == reference_ids(uri, text)
    assert lance_sql.dataset(uri).count_rows(text) == ours.num_rows


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_absurd_nesting_is_a_typed_error(uri: str, name: str) -> None:
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        lance_sql.dataset(uri).to_table(filter=REFUSED[name])


@pytest.mark.parametrize("depth", [100, 250])
def test_deep_parentheses_beyond_pylance_still_answer(uri: str, depth: int) -> None:
    """pylance's parser stops at 50 levels; ours answers while Python's stack allows."""
    text = "(" * depth + "id = 3 OR k = 5" + ")" * depth
    ours = lance_sql.dataset(uri).to_table(columns=["id"], filter=text)
    assert sorted(ours.column("id").to_pylist()) == reference_ids(uri, "id = 3 OR k = 5")


def test_too_many_terms_is_a_typed_error(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expr_module, "MAX_TERMS", 100)
    text = " OR ".join(f"id > {i}" for i in range(101))
    with pytest.raises(InvalidInputError, match="101 ORed terms"):
        lance_sql.dataset(uri).to_table(filter=text)
    # equalities fold into one IN list first, so they stay well under the bound
    assert lance_sql.dataset(uri).count_rows(wide_or(500)) == 500


def test_equalities_fold_into_one_in_list_per_column() -> None:
    tree = parse_predicate("a = 1 OR b = 2 OR 3 = a OR a IN (4, 5) OR a > 6 OR b = NULL")
    folded = fold_equalities(tree.args)
    assert folded == (
        Call("in", (Column(("a",)), Literal(1, pa.int64()), Literal(3, pa.int64()),
                    Literal(4, pa.int64()), Literal(5, pa.int64()))),
        Call("in", (Column(("b",)), Literal(2, pa.int64()), Literal(None, pa.null()))),
        Call(">", (Column(("a",)), Literal(6, pa.int64()))),
    )
    single = parse_predicate("a = 1 OR b = 2").args
    assert fold_equalities(single) == single


@pytest.mark.slow
def test_wide_filters_in_a_fresh_process(uri: str) -> None:
    """Python API and SQL, in a process of their own: a crash shows as an exit code."""
    script = (
        "import json, os, sys, lance_sql\n"
        "uri, text = sys.argv[1], sys.stdin.read()\n"
        "api = lance_sql.dataset(uri).count_rows(text)\n"
        "session = lance_sql.connect(os.path.dirname(uri))\n"
        "sql = session.sql('SELECT count(*) AS n FROM w WHERE ' + text).to_pydict()['n'][0]\n"
        "print(json.dumps([api, sql]))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in ("or_10k", "or_two_columns", "or_strings"):
        text = FILTERS[name]
        proc = subprocess.run([sys.executable, "-c", script, uri], input=text,
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, (name, proc.returncode, proc.stderr[-2000:])
        expected = len(reference_ids(uri, text))
        assert json.loads(proc.stdout) == [expected, expected], name
