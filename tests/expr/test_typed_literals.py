"""Literals of every key type render as filter text that reads back as the same value
(unsigned integers, large strings, binaries), and binary literals parse."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lance_sql.errors import InvalidInputError
from lance_sql.expr.model import Call, Column, Literal, literal_type
from lance_sql.expr.parser import describe_sql, parse_predicate, sql_type_name, to_sql


@pytest.mark.parametrize("lit", [
    Literal(7, pa.uint8()), Literal(7, pa.uint16()), Literal(7, pa.uint32()),
    Literal(2**64 - 1, pa.uint64()), Literal("é'x", pa.large_string()),
    Literal("s", pa.string_view()), Literal(b"\x00a\xff", pa.binary()),
    Literal(b"ab", pa.binary(2)), Literal(b"", pa.large_binary()),
])
def test_a_typed_literal_reads_back_as_its_value(lit: Literal) -> None:
    text = to_sql(Call("=", (Column(("k",)), lit)))
    back = parse_predicate(text).args[1]
    if isinstance(back, Call):  # CAST(<literal> AS <its type>)
        assert back.op == "cast" and back.args[1].type == lit.type
        back = back.args[0]
    assert isinstance(back, Literal) and back.value == lit.value, text


def test_unsigned_types_have_the_names_datafusion_reads() -> None:
    assert [sql_type_name(t) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())] \
        == ["TINYINT UNSIGNED", "SMALLINT UNSIGNED", "INT UNSIGNED", "BIGINT UNSIGNED"]
    cast = parse_predicate("CAST(x AS integer unsigned) = 1").args[0]
    assert cast.args[1].type == pa.uint32()
    assert parse_predicate("CAST(x AS INT) = 1").args[0].args[1].type == pa.int32()


def test_binary_literals() -> None:
    lit = parse_predicate("k = x'61fF'").args[1]
    assert lit == Literal(b"a\xff", pa.binary()) and literal_type(lit) == pa.binary()
    assert parse_predicate("k = X''").args[1].value == b""
    assert parse_predicate("x = 1").args[0] == Column(("x",))  # (a column named x)
    for bad in ("k = X'6'", "k = X'zz'", "k = X'61"):
        with pytest.raises(InvalidInputError):
            parse_predicate(bad)


def test_dictionary_literals_are_spelt_as_their_values() -> None:
    lit = Literal("red", pa.dictionary(pa.int32(), pa.string()))
    assert to_sql(Call("<", (Column(("c",)), lit))) == "(c < 'red')"


def test_labels_never_fail() -> None:
    odd = Call("=", (Column(("t",)), Literal(object(), None)))
    with pytest.raises(InvalidInputError):
        to_sql(odd)
    assert describe_sql(odd).startswith("Call(")
    assert describe_sql(Call("=", (Column(("k",)), Literal(7, pa.uint32())))) == \
        "(k = CAST(7 AS INT UNSIGNED))"
