"""Filter spellings pylance takes: IS [NOT] TRUE / FALSE, comments, a trailing ';'."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import parse_predicate, to_sql

FILTERS = ["b IS TRUE", "b IS NOT TRUE", "b IS FALSE", "b IS NOT FALSE",
           "(id > 1) IS TRUE AND b IS NOT FALSE", "id = 3 -- a comment",
           "id = 3 /* inline */ OR id = 1", "id = 3;", "id = 3 ;  ", "s = '--x'"]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("syntax") / "t.lance")
    lance_sql.write_dataset(pa.table({"id": list(range(6)),
                                      "b": [True, False, None, True, False, None],
                                      "s": ["--x", "a", "b", "c", "d", None]}), path)
    return path


@pytest.mark.parametrize("where", FILTERS)
def test_filters_read_as_pylance_reads_them(table: str, where: str) -> None:
    want = lance.dataset(table).to_table(filter=where).column("id").to_pylist()
    assert lance_sql.dataset(table).to_table(filter=where).column("id").to_pylist() == want


def test_truth_tests_render_as_sql_that_reads_back() -> None:
    expr = parse_predicate("b IS NOT TRUE")
    assert parse_predicate(to_sql(expr)) == expr


@pytest.mark.parametrize("bad", ["id = 3; id = 4", "id = 3 /* open", "b IS MAYBE"])
def test_still_refused(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_predicate(bad)
