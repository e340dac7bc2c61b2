"""List functions, list subscripts and date arithmetic in filters and projections: the
answers pylance 14.0.2 (DataFusion's semantics) gives, on the same table."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import parse_predicate, to_sql

lance = pytest.importorskip("lance")


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("lists") / "t")
    days = [dt.date(2020, 1, i) for i in range(1, 7)]
    lance.write_dataset(pa.table({
        "id": list(range(1, 7)),
        "l": pa.array([[1, 2, 3], [], None, [None, 5], [5], [7, 7, 7, 7]], pa.list_(pa.int64())),
        "ll": pa.array([[1, 2, 3], [], None, [None, 5], [5], [7, 7, 7, 7]],
                       pa.large_list(pa.int32())),
        "f": pa.array([[1.0, 2.0], [3.0, 4.0], None, [5.0, None], [0.0, 0.0], [9.5, 1.0]],
                      pa.list_(pa.float64(), 2)),
        "s": pa.array([["a", "b"], ["c"], None, [], ["a"], [None, "x"]], pa.list_(pa.string())),
        "d": pa.array(days),
        "d64": pa.array(days, pa.date64()),
        "n": pa.array([1, 2, None, 40, 0, -3], pa.int64()),
    }), path, max_rows_per_file=4)
    return path


FILTERS = [
    "l[1] = 1", "l[-1] = 5", "l[2] IS NULL", "l[0] IS NULL", "l[5] IS NULL", "ll[-2] = 7",
    "f[2] > 3", "f[1 + 1] >= 1", "l[n] = 2", "s[1] = 'a'", "s[-1] = 'x'",
    "array_length(l) > 1", "cardinality(l) = 0", "cardinality(f) = 2", "list_length(ll) = 4",
    "array_has(l, 5)", "array_contains(l, 2)", "NOT array_has(l, 7)", "array_has(s, 'a')",
    "array_has(ll, 3)", "array_has(l, n)", "array_has(l, NULL) IS NULL",
    "d + 1 > d", "d + 1 = date '2020-01-03'", "d - 1 = date '2020-01-01'",
    "1 + d = date '2020-01-02'", "d64 + 2 = date '2020-01-05'",
]


@pytest.mark.parametrize("text", FILTERS)
def test_filters_answer_as_pylance(uri: str, text: str) -> None:
    ours = lance_sql.dataset(uri).to_table(filter=text).column("id").to_pylist()
    assert ours == lance.dataset(uri).to_table(filter=text).column("id").to_pylist()
    assert parse_predicate(to_sql(parse_predicate(text))) == parse_predicate(text)


def test_a_date_plus_a_column_of_days(uri: str) -> None:
    """(pylance 14 fails here: an internal error comparing Int64 with an interval.)"""
    text = "d + n >= date '2020-01-05'"
    assert lance_sql.dataset(uri).to_table(filter=text).column("id").to_pylist() == [4, 5]


def test_projections_compute_them(uri: str) -> None:
    columns = {"first": "l[1]", "last": "l[-1]", "n": "cardinality(l)", "has": "array_has(l, 5)",
               "later": "d + 2"}
    ours = lance_sql.dataset(uri).to_table(columns=columns)
    assert ours.to_pydict() == {
        "first": [1, None, None, None, 5, 7], "last": [3, None, None, 5, 5, 7],
        "n": [3, 0, None, 2, 1, 4], "has": [False, False, None, True, True, False],
        "later": [dt.date(2020, 1, i) for i in range(3, 9)]}
    assert ours.schema.field("n").type == pa.uint64()


def test_sql_answers_alike(uri: str) -> None:
    session = lance_sql.LanceSession()
    session.register("t", uri)
    for text in ("l[1] = 1", "array_has(l, 5)", "cardinality(l) = 0", "d + 1 > d"):
        got = session.sql(f"SELECT id FROM t WHERE {text} ORDER BY id").to_pylist()
        want = lance_sql.dataset(uri).to_table(filter=text).column("id").to_pylist()
        assert [r["id"] for r in got] == want


@pytest.mark.parametrize(("text", "message"), [
    ("id[1] = 1", "needs a list"), ("l['a'] = 1", "index must be an integer"),
    ("array_has(l, 'x')", "int64 with literal 'x'"), ("cardinality(l, 1) = 1", "takes 1 argument"),
])
def test_misuse_is_a_typed_error(uri: str, text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        lance_sql.dataset(uri).to_table(filter=text)


def test_struct_fields_by_subscript_maps_and_float_lists(tmp_path) -> None:
    """``st['x']`` and ``l[1].g`` / ``l[1]['g']`` name struct fields (they were taken for
    list subscripts and refused); ``cardinality`` counts a map's entries; ``array_has``
    over floats finds values as DataFusion does, bit for bit (0.0 is not -0.0, a NaN
    finds a NaN)."""
    path = str(tmp_path / "t")
    lance.write_dataset(pa.table({
        "id": pa.array([0, 1, 2, 3], pa.int64()),
        "st": pa.array([{"x": 1}, {"x": 3}, None, {"x": 5}], pa.struct([("x", pa.int32())])),
        "ls": pa.array([[{"g": 1}], [{"g": 2}, {"g": 3}], [], None],
                       pa.list_(pa.struct([("g", pa.int32())]))),
        "m": pa.array([[(1, "a")], [], None, [(2, "b"), (3, "c")]],
                      pa.map_(pa.int64(), pa.string())),
        "fl": pa.array([[0.0], [-0.0], [float("nan")], [1.0]], pa.list_(pa.float64())),
    }), path)
    ours, theirs = lance_sql.dataset(path), lance.dataset(path)
    for where in ("st['x'] > 1", "ls[1].g = 2", "ls[1]['g'] = 2",
                  "cardinality(m) = 2", "array_has(fl, 0.0)", "array_has(fl, -0.0)",
                  "array_has(fl, CAST('NaN' AS DOUBLE))", "array_has(fl, fl[1])"):
        assert ours.to_table(filter=where, columns=["id"]).equals(
            theirs.to_table(filter=where, columns=["id"])), where
    assert ours.count_rows("ls[1].G = 2") == 1  # (unquoted: folded, as SQL folds names)
    with pytest.raises(lance_sql.NotFoundError, match="no field 'y'"):
        ours.to_table(filter="st['y'] > 1")
