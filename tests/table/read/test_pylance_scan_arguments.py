"""Scan arguments as pylance takes them, compared with pylance itself.

* A pyarrow expression filter is read as its tree, never printed and parsed as SQL: the
  print quotes strings in double quotes, which SQL reads as column names
  (``pc.field("a") == "b"`` compared column ``a`` with column ``b``, silently), and
  prints IN lists and timestamps in forms SQL cannot parse.
* pylance's positional order and its tuning hints are taken; ``order_by`` sorts.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError

lance = pytest.importorskip("lance")

DATA = pa.table({
    "n": pa.array([3, 1, None, 5, 2, 4], pa.int64()),
    "a": ["b", "x", "b", "r3", None, "y"],
    "b": ["x", "x", "q", "q", "q", "y"],
    "t": pa.array([dt.datetime(2026, 1, d) for d in (1, 2, 3, 4, 5, 6)], pa.timestamp("us")),
    "f": [1.5, float("nan"), None, -2.0, 0.0, 7.25],
})

FILTERS = {
    "string literal beside a column of that name": pc.field("a") == "b",
    "column against column": pc.field("a") == pc.field("b"),
    "isin": pc.field("n").isin([1, 5, 7]),
    "timestamp": pc.field("t") > pa.scalar(dt.datetime(2026, 1, 3), pa.timestamp("us")),
    "and / or / not": ((pc.field("n") > 1) & ~(pc.field("a") == "y")) | pc.field("a").is_null(),
    "is_valid": pc.field("n").is_valid(),
    "floats and NaN": pc.field("f") > 0.5,
    # calls lance_sql's model does not know: filtered as pyarrow evaluates them
    "arithmetic": (pc.field("n") + 1) > 4,
    "string function": pc.starts_with(pc.field("b"), "q"),
}


def _rows(table: pa.Table) -> list[dict]:
    """The rows, floats as text (NaN equals NaN)."""
    if "f" in table.column_names:
        table = table.set_column(table.schema.get_field_index("f"), "f",
                                 table["f"].cast(pa.string()))
    return table.to_pylist()


@pytest.fixture
def both(tmp_path: Path) -> tuple[object, lance_sql.LanceDataset]:
    ours = lance_sql.write_dataset(DATA, tmp_path / "ours.lance", max_rows_per_file=2)
    theirs = lance.write_dataset(DATA, str(tmp_path / "theirs.lance"), max_rows_per_file=2)
    return theirs, ours


@pytest.mark.parametrize("name", list(FILTERS))
def test_expression_filters_select_the_rows_pylance_selects(both, name: str) -> None:
    theirs, ours = both
    expr = FILTERS[name]
    want = theirs.to_table(filter=expr)
    got = ours.to_table(filter=expr)
    assert got.schema.equals(want.schema) and _rows(got) == _rows(want)
    assert ours.count_rows(expr) == theirs.count_rows(expr)
    projected = ours.to_table(columns=["n"], filter=expr)
    assert projected.column_names == ["n"]
    assert projected["n"].to_pylist() == want["n"].to_pylist()


def test_expression_filters_update_and_delete_as_pylance_does(both) -> None:
    theirs, ours = both
    for ds in (theirs, ours):
        ds.update({"b": "'updated'"}, where=pc.field("a") == "b")
        ds.delete(pc.field("n").isin([1, 4]))
    assert _rows(ours.to_table()) == _rows(theirs.to_table())
    assert ours.to_table()["b"].to_pylist().count("updated") == 2
    # the delete's predicate is recorded as SQL, read back by lance_sql's feed
    assert ours.count_rows() == 4


def test_pylance_positional_order_and_hints(both) -> None:
    theirs, ours = both
    for ds in (theirs, ours):
        assert ds.to_table(["n"], "n > 1", 2, 1)["n"].to_pylist() == [5, 2]
    hints = dict(prefilter=True, scan_in_order=True, late_materialization=["a"],
                 batch_readahead=2, fragment_readahead=1, use_stats=False)
    want = theirs.to_table(filter="n > 1", **hints)
    assert _rows(ours.to_table(filter="n > 1", **hints)) == _rows(want)
    assert ours.count_rows("n > 1", prefilter=True) == 4
    assert ours.head(2, scan_in_order=True).num_rows == 2
    with pytest.raises(TypeError, match="no_such_option"):
        ours.to_table(no_such_option=1)
    with pytest.raises(InvalidInputError, match="include_deleted_rows"):
        ours.to_table(include_deleted_rows=True)
    with pytest.raises(InvalidInputError, match="nearest"):
        ours.to_table(nearest={"column": "f", "q": [1.0], "k": 1})


def test_order_by_sorts_before_limit_and_offset(both) -> None:
    theirs, ours = both
    for order_by, kwargs in [
        (["n"], {}),
        (["n"], {"limit": 3, "offset": 1}),
        ([("n", "descending")], {"limit": 2}),
        (["b", ("n", "descending")], {}),
    ]:
        got = ours.to_table(order_by=order_by, **kwargs)
        from lance.dataset import ColumnOrdering

        pylance_order = [ColumnOrdering(c, True) if isinstance(c, str) else
                         ColumnOrdering(c[0], c[1] == "ascending") for c in order_by]
        want = theirs.to_table(order_by=pylance_order, **kwargs)
        assert _rows(got) == _rows(want), (order_by, got["n"].to_pylist(),
                                           want["n"].to_pylist())
    assert ours.to_table(order_by=[ColumnOrdering("n", False)])["n"].to_pylist() == \
        [5, 4, 3, 2, 1, None]  # pylance's own ordering objects
    # a sort column not asked for is read, and left out of the result
    got = ours.to_table(columns=["a"], filter="n > 1", order_by=["n"])
    assert got.column_names == ["a"] and got["a"].to_pylist() == [None, "b", "y", "r3"]
    batches = list(ours.to_batches(order_by=[("n", "descending")], batch_size=4))
    assert [b.num_rows for b in batches] == [4, 2]
    assert pa.Table.from_batches(batches)["n"].to_pylist() == [5, 4, 3, 2, 1, None]
    with pytest.raises(InvalidInputError, match="order_by"):
        ours.to_table(order_by="n")


def test_order_by_floats_and_struct_fields_as_pylance(tmp_path: Path) -> None:
    # pylance sorts floats in IEEE total order: -0.0 before 0.0, NaN above +inf in either
    # direction; pyarrow's sort kept NaN beside the NULLs (last in a descending sort, so a
    # top-k dropped the NaN rows) and tied the zeros
    from lance.dataset import ColumnOrdering

    values = [1.0, float("nan"), -0.0, 0.0, -1.0, float("inf"), None, -float("inf"), 2.5]
    data = pa.table({"id": pa.array(range(9), pa.int64()),
                     "f": pa.array(values), "h": pa.array(values, pa.float32()),
                     "st": pa.array([{"x": v} for v in values])})
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    lance.write_dataset(data, paths[0], max_rows_per_file=4)
    lance_sql.write_dataset(data, paths[1], max_rows_per_file=4)
    for path in paths:
        ours, theirs = lance_sql.dataset(path), lance.dataset(path)
        for column in ("f", "h", "st.x"):
            for ascending in (True, False):
                for nulls_first in (True, False):
                    order = [ColumnOrdering(column, ascending, nulls_first)]
                    for kwargs in ({}, {"limit": 3}, {"limit": 2, "offset": 5}):
                        got = ours.to_table(order_by=order, **kwargs)["id"].to_pylist()
                        if column != "st.x":  # (pylance 14 cannot sort by one)
                            want = theirs.to_table(order_by=order, **kwargs)
                            assert got == want["id"].to_pylist(), (column, order, kwargs)
                        else:
                            assert got == ours.to_table(
                                order_by=[ColumnOrdering("f", ascending, nulls_first)],
                                **kwargs)["id"].to_pylist()
        with pytest.raises(NotFoundError):
            ours.to_table(order_by=["st.nope"])


def test_nested_and_pyarrow_only_filters(tmp_path: Path) -> None:
    """A nested field reference (``pc.field("st", "c")``) reads its column; calls whose
    pyarrow meaning is not SQL's (``is_null(nan_is_null=True)``, plain ``and`` / ``or``,
    which are not Kleene) filter as pyarrow evaluates them, not as SQL would."""
    table = pa.table({
        "st": pa.array([{"c": 1}, {"c": 5}, None, {"c": 7}],
                       pa.struct([pa.field("c", pa.int64())])),
        "f": [1.0, float("nan"), None, 2.0],
        "x": pa.array([1, None, 3, 4], pa.int64()),
    })
    ds = lance_sql.write_dataset(table, tmp_path / "t.lance")
    for expr in [pc.field("st", "c") > 2,
                 pc.is_null(pc.field("f"), nan_is_null=True),
                 ~pc.Expression._call("and", [pc.field("x") > 2, pc.field("f") > 1.5]),
                 ~pc.Expression._call("or", [pc.field("x") > 2, pc.field("f") > 1.5])]:
        want = table.filter(expr)
        got = ds.to_table(filter=expr)
        assert _rows(got) == _rows(want), str(expr)
        assert ds.count_rows(expr) == want.num_rows


def test_pylance_positional_scanner_arguments_and_null_ordering(both) -> None:
    """pylance's order: columns, filter, limit, offset, nearest, batch_size,
    batch_size_bytes, batch_readahead, fragment_readahead, scan_in_order, fragments; and
    its ordering's ``nulls_first``."""
    from lance.dataset import ColumnOrdering

    theirs, ours = both
    args = (["n"], "n > 1", 3, 0, None, 2, None, 4, 2, True)
    assert _rows(ours.to_table(*args)) == _rows(theirs.to_table(*args))
    first = [ColumnOrdering("n", True, nulls_first=True)]
    assert ours.to_table(order_by=first)["n"].to_pylist() == \
        theirs.to_table(order_by=first)["n"].to_pylist() == [None, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("blank", ["", "  ", "\n"])
def test_a_blank_filter_is_refused_as_pylance_refuses_it(tmp_path: Path, blank: str) -> None:
    # (read as "no condition", every row came back where pylance raises)
    path = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": [1, 2]}), path)
    ours, theirs = lance_sql.dataset(path), lance.dataset(path)
    reads = [lambda ds: ds.to_table(filter=blank), lambda ds: ds.count_rows(blank),
             lambda ds: list(ds.to_batches(filter=blank)),
             lambda ds: ds.get_fragments()[0].count_rows(blank)]
    for read in reads:
        with pytest.raises((ValueError, OSError)):
            read(theirs)
        with pytest.raises(InvalidInputError, match="empty filter"):
            read(ours)
