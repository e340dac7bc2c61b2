"""Decoding pyarrow expressions: those DataFusion pushes into scans, and Python filters."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr import Call, Column, Literal, rowaddr_bounds
from lance_sql.table.read.arrow_filters import decode, in_list, referenced_columns


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


def _typed(value: object, t: pa.DataType) -> pc.Expression:
    return pc.scalar(pa.scalar(value, t))


def test_one_pin_decodes_as_the_serialised_form() -> None:
    """``column == integer`` read from its printed form gives the tree the full decode
    gives, in every integer type (the print omits it); other shapes fall back to it."""
    from lance_sql.table.read.arrow_filters import decode_serialised

    field = pc.field("id")
    cases = [field == 5, field == -7, field == 0, field == (1 << 63) - 1, field == -(1 << 63)]
    cases += [field == _typed(v, t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                                              pa.uint8(), pa.uint16(), pa.uint32(),
                                              pa.uint64()) for v in (0, 5, 127)]
    cases += [field == _typed((1 << 64) - 1, pa.uint64()), field == _typed(-3, pa.int8())]
    # shapes the printed form must not be trusted with
    cases += [field == 5.0, field == _typed(5, pa.float32()), field == "5",
              field == _typed(5, pa.decimal128(10, 0)), field == _typed(None, pa.int64()),
              pc.field("a.b") == 3, pc.field("a", "b") == 3, field != 5, field > 5,
              (field == 5) & (pc.field("x") == 1), pc.field("_rowaddr") == _typed(9, pa.uint64()),
              field == _typed(5, pa.timestamp("s")), field == _typed(True, pa.bool_())]
    for expr in cases:
        assert decode(expr) == decode_serialised(expr), str(expr)
    assert decode(field == _typed(5, pa.int32())) == Call(
        "=", (Column(("id",)), Literal(5, pa.int32())))
    assert decode(field == 5.0) == decode_serialised(field == 5.0) != decode(field == 5)


def test_one_pin_does_not_serialise(monkeypatch) -> None:
    """A lone ``column == integer`` is decoded without the serialised form (the point
    lookup's fast path is taken); anything else still goes through it."""
    from lance_sql.table.read import arrow_filters

    calls = []
    read = arrow_filters._read
    monkeypatch.setattr(arrow_filters, "_read", lambda e: calls.append(e) or read(e))
    assert decode(pc.field("id") == 42) == Call("=", (Column(("id",)), Literal(42, pa.int64())))
    assert calls == []
    decode(pc.field("id") == 4.5)
    assert len(calls) == 1


def test_in_list_reads_a_lone_in_as_arrow() -> None:
    """``in_list`` gives the column and the pushed values of nothing but ``col IN (...)``
    (the same values the general decode reads, nulls and repeats kept), and None for an
    IN inside anything else, on a nested field, or any other expression."""
    values = pa.array([5, None, 3, 5], pa.int64())
    lone = pc.field("id").isin(values)
    column, got = in_list(lone)  # type: ignore[misc]
    assert column == "id" and got.equals(values)
    tree = decode(lone)
    assert isinstance(tree, Call) and tree.op == "in"
    assert [a.value for a in tree.args[1:]] == got.to_pylist()  # type: ignore[union-attr]
    assert in_list(lone & (pc.field("v") > 1)) is None
    assert in_list(~lone) is None
    assert in_list(pc.field("id") == 3) is None
    assert in_list(pc.field("s", "x").isin(values)) is None
