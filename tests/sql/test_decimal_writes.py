"""Values written to decimal columns round as DataFusion's ``CAST`` rounds them.

DataFusion types ``1.005`` as a double and casts it to ``decimal(p, s)`` as
``round(v * 10^s)`` half away from zero (``2.675`` -> ``2.68``); pyarrow's cast rounds
the double's exact value (``2.675`` -> ``2.67``). UPDATE, INSERT and MERGE store what
``SELECT CAST(v AS DECIMAL(p, s))`` returns, and pylance's ``update`` stores the same.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import datafusion
import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.expr.casts import cast_like_datafusion

# doubles whose decimal rounding differs between the two ways (or sits on a half)
VALUES = [1.005, 1.015, 2.675, -1.005, -2.675, 0.125, 7.125, 0.49999999999999994, -0.005,
          12345.6789, 99999999.994, -99999999.994, 0.0, 33.333333]


def _datafusion_cast(value: float, precision: int, scale: int) -> Decimal | None:
    ctx = datafusion.SessionContext()
    return ctx.sql(f"SELECT CAST({value!r} AS DECIMAL({precision}, {scale})) AS d"
                   ).to_arrow_table()["d"][0].as_py()


@pytest.mark.parametrize(("precision", "scale"), [(10, 2), (38, 10), (18, 0), (20, 6)])
def test_the_cast_is_datafusions(precision: int, scale: int) -> None:
    target = pa.decimal128(precision, scale)
    ours = cast_like_datafusion(pa.array(VALUES + [None], pa.float64()), target).to_pylist()
    assert ours == [_datafusion_cast(v, precision, scale) for v in VALUES] + [None]
    if scale == 2:  # pyarrow's own cast differs here (2.675 -> 2.67): the test bites
        assert pa.array(VALUES, pa.float64()).cast(target).to_pylist() != ours[:-1]


def test_large_magnitudes_are_exact() -> None:
    values = [1e30, -1e30, 2.0 ** 64, -(2.0 ** 64), 2.0 ** 63, 123456789012345678.0]
    got = cast_like_datafusion(pa.array(values), pa.decimal128(38, 0)).to_pylist()
    assert got == [Decimal(int(v)) for v in values]
    assert got == [_datafusion_cast(v, 38, 0) for v in values]


def test_decimals_losing_digits_round_half_away_from_zero() -> None:
    values = pa.array([Decimal("1.005"), Decimal("-1.005"), Decimal("2.674"), None],
                      pa.decimal128(10, 3))
    got = cast_like_datafusion(values, pa.decimal128(10, 2)).to_pylist()
    ctx = datafusion.SessionContext()
    want = [ctx.sql(f"SELECT CAST(CAST({v} AS DECIMAL(10, 3)) AS DECIMAL(10, 2)) AS d")
            .to_arrow_table()["d"][0].as_py() for v in ("1.005", "-1.005", "2.674")]
    assert got == want + [None] == [Decimal("1.01"), Decimal("-1.01"), Decimal("2.67"), None]


def test_values_that_do_not_fit_are_refused() -> None:
    with pytest.raises(pa.ArrowInvalid, match="precision 10"):
        cast_like_datafusion(pa.array([1.0, 123456789.5]), pa.decimal128(10, 2))
    with pytest.raises(pa.ArrowInvalid, match="not a number"):
        cast_like_datafusion(pa.array([float("nan")]), pa.decimal128(10, 2))
    with pytest.raises(Exception, match="too large"):  # DataFusion refuses it too
        _datafusion_cast(123456789.5, 10, 2)


@pytest.fixture
def session(tmp_path: Path) -> lance_sql.LanceSession:
    s = lance_sql.connect(tmp_path)
    s.sql("CREATE TABLE m (id INT, d DECIMAL(10, 2))")
    return s


def _stored(session: lance_sql.LanceSession) -> list[Decimal | None]:
    return session.sql("SELECT d FROM m ORDER BY id").to_arrow_table()["d"].to_pylist()


def test_insert_update_and_merge_store_what_datafusion_casts(session) -> None:
    rows = ", ".join(f"({i}, {v!r})" for i, v in enumerate(VALUES))
    session.sql(f"INSERT INTO m VALUES {rows}")
    want = [_datafusion_cast(v, 10, 2) for v in VALUES]
    assert _stored(session) == want
    # DataFusion's own INSERT into a memory table of the same type stores the same
    ctx = datafusion.SessionContext()
    ctx.sql("CREATE TABLE m (id INT, d DECIMAL(10, 2))").collect()
    ctx.sql(f"INSERT INTO m VALUES {rows}").collect()
    assert ctx.sql("SELECT d FROM m ORDER BY id").to_arrow_table()["d"].to_pylist() == want
    # UPDATE of every row with a double literal, one row at a time
    for i, v in enumerate(reversed(VALUES)):
        session.sql(f"UPDATE m SET d = {v!r} WHERE id = {i}")
    assert _stored(session) == want[::-1]
    # an expression over the column: DataFusion's value of the same SELECT
    expected = session.sql("SELECT CAST(d + 0.005 AS DECIMAL(10, 2)) AS d FROM m ORDER BY id"
                           ).to_arrow_table()["d"].to_pylist()
    session.sql("UPDATE m SET d = d + 0.005")
    assert _stored(session) == expected
    session.sql("MERGE INTO m USING (VALUES (1, 2.675), (2, 1.005)) AS s(id, d) "
                "ON m.id = s.id WHEN MATCHED THEN UPDATE SET d = s.d")
    assert _stored(session)[1:3] == [Decimal("2.68"), Decimal("1.00")]


@pytest.mark.parametrize("sql", ["UPDATE m SET d = 123456789.5",
                                 "INSERT INTO m VALUES (9, 123456789.5)",
                                 "MERGE INTO m USING (VALUES (0, 123456789.5)) AS s(id, d) "
                                 "ON m.id = s.id WHEN MATCHED THEN UPDATE SET d = s.d"])
def test_values_too_large_are_typed_errors_and_commit_nothing(session, sql: str) -> None:
    session.sql("INSERT INTO m VALUES (0, 1.5)")
    before = session.dataset("m").version
    with pytest.raises((InvalidInputError, SchemaError), match="precision 10"):
        session.sql(sql)
    assert session.dataset("m").version == before
    assert _stored(session) == [Decimal("1.50")]


def test_pylance_update_stores_the_same(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(len(VALUES)), pa.int32()),
                      "d": pa.array([Decimal(0)] * len(VALUES), pa.decimal128(10, 2))})
    theirs = lance.write_dataset(table, tmp_path / "theirs.lance")
    ours = lance_sql.write_dataset(table, tmp_path / "ours.lance")
    for i, v in enumerate(VALUES):
        theirs.update({"d": repr(v)}, where=f"id = {i}")
        ours.update({"d": repr(v)}, where=f"id = {i}")
    got = lance_sql.dataset(tmp_path / "ours.lance").to_table().sort_by("id")["d"]
    assert got.to_pylist() == \
        lance.dataset(tmp_path / "theirs.lance").to_table().sort_by("id")["d"].to_pylist()
