"""UPDATE / DELETE and the Python API's filters act on the rows and store the values a
DataFusion SELECT gives: 64-bit unsigned arithmetic in decimals, decimal arithmetic typed
as DataFusion types it, decimals to doubles as arrow-rs converts them, text of CASTs,
literals finer than a timestamp column cut to its unit, writes cast as DataFusion casts,
and conditions the filter language cannot type run by DataFusion (each of these differed:
the same condition selected other rows than the SELECT, or was refused)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql

UTC = dt.UTC
TABLE = pa.table({
    "id": pa.array(range(5), pa.int64()),
    "u": pa.array([0, 10, 2**64 - 1, 3, None], pa.uint64()),
    "i": pa.array([3, -5, 7, 2**31 - 1, 0], pa.int32()),
    "f32": pa.array([0.1, 0.6, 2.5, float("nan"), None], pa.float32()),
    "f": pa.array([100.0, float("nan"), 0.1, -0.0, 1e300]),
    "dec": pa.array([Decimal(x) if x else None for x in ("1.64", "-4.99", "10.00", None,
                                                         "0.05")], pa.decimal128(10, 2)),
    "e": pa.array([Decimal(x) for x in ("3.5", "-0.1", "1.0", "2.0", "7.5")],
                  pa.decimal128(5, 1)),
    "ts": pa.array([-1, 0, 1704110400, 1704110401, None], pa.timestamp("s")),
    "tm": pa.array([-1, 0, 1704110400000, 5, None], pa.timestamp("ms")),
    "us": pa.array([1704110400123456, -1500, 0, 1999, None], pa.timestamp("us")),
    "z": pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=UTC)] * 4 + [None],
                  pa.timestamp("us", "UTC")),
    "zny": pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=UTC), None,
                     dt.datetime(2024, 1, 1, 13, tzinfo=UTC), dt.datetime(2024, 1, 2, tzinfo=UTC),
                     None], pa.timestamp("ms", "America/New_York")),
    "st": pa.array([{"x": 2}, {"x": 0}, None, {"x": 5}, {"x": None}],
                   pa.struct([("x", pa.int32())])),
    "bin": pa.array([b"ab", b"", None, b"abcd", b"x"]),
    "s": pa.array(["a", "b", "c", "d", "e"]),
    "src": pa.array([Decimal(x) if x else None for x in ("9.999", "1.505", "-2.5", None,
                                                         "0.001")], pa.decimal128(4, 3)),
    "tiny": pa.array([Decimal("0.0000000001"), Decimal("-12.5"), Decimal("0"), None,
                      Decimal("3")], pa.decimal128(20, 10)),
})

CONDITIONS = [
    "u - 1 > 5", "u + 1 > 5", "u * 2 > 25", "u / 2 = 5", "u / i > 3.3", "u - i < 0",
    "dec / -1 IN (4.99, 3.0)", "dec / 3 > 1", "dec / 3 = 0.546666", "dec * 3 > 4.91",
    "dec + 3 = 4.64", "dec - e < 0", "dec * e > 5", "dec / e > 0.46", "e / dec < 2.2",
    "CAST(dec AS DOUBLE) = 1.64", "dec + 0.005 < 1.645",
    "f32 + 0.5 > 1", "f32 + 0.5 >= i", "f32 * 2 < 1.3",
    "CAST(f AS VARCHAR) = '100.0'", "CAST(f AS VARCHAR) = 'NaN'",
    "CAST(zny AS VARCHAR) = '2024-01-01T07:00:00-05:00'",
    "ts = '1969-12-31 23:59:59.5'", "ts >= TIMESTAMP '2024-01-01 12:00:00.5'",
    "ts < '2024-01-01 12:00:00.9'", "tm = '1969-12-31 23:59:59.9995'",
    "tm IN ('1970-01-01 00:00:00.0055', '2000-01-01')",
    "ts BETWEEN '1969-12-31 23:59:59.5' AND '1970-01-01 00:00:00.9'",
]
# the filter language cannot type these: DML hands them to DataFusion
ENGINE_ONLY = ["z = zny", "zny >= us", "st['x'] > 1", "length(bin) = 2"]


def _oracle(where: str) -> list[int]:
    ctx = datafusion.SessionContext()
    ctx.from_arrow(TABLE, name="m")
    return sorted(ctx.sql(f"SELECT id FROM m WHERE {where}").to_arrow_table()
                  .column("id").to_pylist())


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity")
    lance_sql.write_dataset(TABLE, str(path / "t.lance"))
    return path


@pytest.mark.parametrize("where", CONDITIONS)
def test_the_python_filter_selects_what_datafusion_selects(root: Path, where: str) -> None:
    ds = lance_sql.dataset(str(root / "t.lance"))
    assert sorted(ds.to_table(filter=where).column("id").to_pylist()) == _oracle(where)


@pytest.mark.parametrize("where", CONDITIONS + ENGINE_ONLY)
def test_delete_removes_what_select_selects(tmp_path: Path, where: str) -> None:
    lance_sql.write_dataset(TABLE, str(tmp_path / "t.lance"))
    session = lance_sql.connect(tmp_path)
    selected = sorted(session.sql(f"SELECT id FROM t WHERE {where}").to_arrow_table()
                      .column("id").to_pylist())
    assert selected == _oracle(where)
    session.sql(f"DELETE FROM t WHERE {where}")
    left = lance_sql.dataset(str(tmp_path / "t.lance")).to_table().column("id").to_pylist()
    assert sorted(set(range(5)) - set(left)) == selected


@pytest.mark.parametrize(("column", "value"), [
    ("dec", "dec + 0.005"), ("dec", "dec / 3"), ("s", "CAST(f AS VARCHAR)"),
    ("s", "CAST(zny AS VARCHAR)"), ("f32", "i"), ("tm", "us"),
    ("tm", "'2024-05-05 01:02:03.456789'"), ("ts", "'1969-12-31 23:59:59.9995'"),
    ("dec", "src"),  # 9.999 rounds to 10.00 (a carry past the source's precision)
    ("f", "dec"), ("s", "tiny"), ("s", "CAST(tiny AS VARCHAR)"),
    ("zny", "tm"), ("zny", "TIMESTAMP '2024-03-10 12:00:00'"),  # naive: wall-clock time
])
def test_update_stores_what_datafusion_computes(tmp_path: Path, column: str,
                                                value: str) -> None:
    """The value as DataFusion computes it, cast to the column as its CAST does (``i``
    into a float32 column, microseconds into a millisecond column were refused)."""
    lance_sql.write_dataset(TABLE, str(tmp_path / "t.lance"))
    lance_sql.connect(tmp_path).sql(f"UPDATE t SET {column} = {value} WHERE id < 4")
    ctx = datafusion.SessionContext()
    ctx.from_arrow(TABLE, name="m")
    target = TABLE.schema.field(column).type
    expected = ctx.sql(f"SELECT arrow_cast({value}, '{_arrow_type(target)}') AS v FROM m "
                       "WHERE id < 4 ORDER BY id").to_arrow_table().column("v")
    got = lance_sql.dataset(str(tmp_path / "t.lance")).to_table(filter="id < 4")
    assert got.sort_by("id").column(column).to_pylist() == expected.to_pylist()


def _arrow_type(t: pa.DataType) -> str:
    """``t`` as DataFusion's ``arrow_cast`` names it."""
    if pa.types.is_decimal(t):
        return f"Decimal128({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        unit = {"s": "Second", "ms": "Millisecond", "us": "Microsecond"}[t.unit]
        zone = f'Some("{t.tz}")' if t.tz else "None"
        return f"Timestamp({unit}, {zone})"
    return {pa.string(): "Utf8", pa.float32(): "Float32", pa.float64(): "Float64"}[t]


@pytest.mark.parametrize(("statement", "message"), [
    ("UPDATE t SET u = -u", "signed"),  # (it wrapped: 255 -> 1)
    ("UPDATE t SET i = CAST(f AS BIGINT)", "(?i)nan|truncated"),
    ("UPDATE t SET dec = CAST(f AS DECIMAL(10, 2))", "(?i)not a number|nan"),
    ("UPDATE t SET dec = CAST(dec * 1000000 AS DECIMAL(5, 2))", "(?i)precision"),
])
def test_statements_datafusion_refuses_commit_nothing(tmp_path: Path, statement: str,
                                                      message: str) -> None:
    """They stored wrapped or garbage values (a cast past a decimal's precision, a NaN
    to an integer or a decimal)."""
    lance_sql.write_dataset(TABLE, str(tmp_path / "t.lance"))
    with pytest.raises(lance_sql.LanceError, match=message):
        lance_sql.connect(tmp_path).sql(statement)
    assert lance_sql.dataset(str(tmp_path / "t.lance")).version == 1


def test_decimal_overflow_and_bad_bytes_are_typed_errors(tmp_path: Path) -> None:
    big = pa.table({"d": pa.array([Decimal("-" + "9" * 27)], pa.decimal128(38, 10)),
                    "bin": pa.array([b"\xff\xfe"])})
    ds = lance_sql.write_dataset(big, str(tmp_path / "t.lance"))
    with pytest.raises(lance_sql.LanceError, match="(?i)precision"):
        ds.update({"d": "d / 3"})  # (a 38-digit quotient with 14 decimals overflows)
    with pytest.raises(lance_sql.InvalidInputError, match="(?i)utf"):
        ds.add_columns({"s": "CAST(bin AS VARCHAR)"})
    assert lance_sql.dataset(str(tmp_path / "t.lance")).version == 1


CASTS = pa.table({
    "id": pa.array([0, 1, 2], pa.int64()),
    "d2": pa.array([Decimal("3.99"), Decimal("-3.99"), None], pa.decimal128(3, 2)),
    "us": pa.array([1_000_000, -1, None], pa.timestamp("us")),
    "lf": pa.array([[1.5, -2.5], None, [3.7, None]], pa.list_(pa.float64())),
    "lnan": pa.array([[float("nan"), -0.0], [1e38, 3.0], None], pa.list_(pa.float64())),
    "i8": pa.array([1, 2, 3], pa.int8()),
    "d50": pa.array([Decimal(1)] * 3, pa.decimal128(5, 0)),
    "dbl": pa.array([0.0] * 3),
    "d32": pa.array([dt.date(2000, 1, 1)] * 3),
    "li": pa.array([[0]] * 3, pa.list_(pa.int64())),
    "ls": pa.array([["a"]] * 3, pa.list_(pa.string())),
    "u8": pa.array([0] * 3, pa.uint8()),
    "s": pa.array(["x"] * 3),
    "bin": pa.array([b""] * 3),
    "st": pa.array([{"x": 0, "y": ""}] * 3, pa.struct([("x", pa.int32()), ("y", pa.string())])),
})


@pytest.mark.parametrize(("column", "value"), [
    ("i8", "d2"), ("d50", "'1.5'"), ("dbl", "us"), ("us", "'2024-05-05T01:02:03+02:00'"),
    ("d32", "'2024-05-05 01:02:03'"), ("li", "lf"), ("bin", "i8"), ("u8", "'-0'"),
    ("ls", "lnan"), ("s", "li"), ("li", "id"), ("st", "named_struct('y', s, 'x', i8)"),
])
@pytest.mark.parametrize("statement", ["update", "insert"])
def test_writes_make_the_casts_datafusion_makes(tmp_path: Path, column: str, value: str,
                                                statement: str) -> None:
    """Each of these was refused (pyarrow's cast refuses them), or stored floats in a
    list spelled by pyarrow (``'-0'``, ``'nan'``)."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(CASTS, uri)
    session = lance_sql.connect(tmp_path)
    if statement == "update":
        session.sql(f"UPDATE t SET {column} = {value}")
        got = lance_sql.dataset(uri).to_table().sort_by("id").column(column)
    else:
        session.sql(f"INSERT INTO t (id, {column}) SELECT id + 10, {value} FROM t")
        got = lance_sql.dataset(uri).to_table(filter="id >= 10").sort_by("id").column(column)
    ctx = datafusion.SessionContext()
    ctx.from_arrow(CASTS, name="m")
    target = CASTS.schema.field(column).type
    expected = ctx.sql(f"SELECT {value} AS v FROM m ORDER BY id").select(
        datafusion.col("v").cast(target)).to_arrow_table().column(0)
    assert got.to_pylist() == expected.to_pylist()
