"""Decoding the pyarrow expressions DataFusion pushes into scans."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr import Call, Column, Literal, rowaddr_bounds
from lance_sql.sql.pyarrow_filter import decode, referenced_columns


def test_tree_and_columns() -> None:
    expr = (pc.field("a") > 5) & pc.field("s").isin([f"v{i}" for i in range(30)])
    tree = decode(expr)
    assert tree == Call("and", (
        Call(">", (Column(("a",)), Literal(5, pa.int64()))),
        Call("in", (Column(("s",)),) + tuple(Literal(f"v{i}") for i in range(30))),
    ))
    assert referenced_columns(expr) == {"a", "s"}


def test_unknown_calls_stay_conservative_for_pruning() -> None:
    inside_not = ~((pc.field("_rowaddr") == 4) & (pc.field("x") + 1 > 3))
    assert rowaddr_bounds(decode(inside_not)) is None  # could be any address
    conj = (pc.field("_rowaddr") < 10) & (pc.field("x") * 2 > 3)
    assert rowaddr_bounds(decode(conj)) == [(0, 10)]
    assert referenced_columns(conj) == {"_rowaddr", "x"}
