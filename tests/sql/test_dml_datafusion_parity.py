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
    expected = ctx.sql(f"SELECT CAST({value} AS {_sql_type(target)}) AS v FROM m "
                       "WHERE id < 4 ORDER BY id").to_arrow_table().column("v").cast(target)
    got = lance_sql.dataset(str(tmp_path / "t.lance")).to_table(filter="id < 4")
    assert got.sort_by("id").column(column).to_pylist() == expected.to_pylist()


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return {"s": "TIMESTAMP(0)", "ms": "TIMESTAMP(3)"}[t.unit]
    return {pa.string(): "VARCHAR", pa.float32(): "REAL"}[t]


def test_timestamp_literals_of_any_year_and_decimal256_arithmetic(tmp_path: Path) -> None:
    """Literals are cut to the column's unit in integers, so years a nanosecond timestamp
    cannot hold still compare (1500, 2500); decimal256 columns compute in decimal256."""
    data = pa.table({
        "t": pa.array([dt.datetime(1500, 1, 1), dt.datetime(2500, 6, 1, 12, 0, 0, 500000),
                       dt.datetime(2024, 1, 1)], pa.timestamp("us")),
        "w": pa.array([Decimal("1" * 40), Decimal("2"), Decimal("-3.5")], pa.decimal256(50, 1)),
    })
    ds = lance_sql.write_dataset(data, str(tmp_path / "t.lance"))
    assert ds.count_rows("t > '1400-01-01'") == 3
    assert ds.count_rows("t = '1500-01-01'") == 1
    assert ds.count_rows("t >= '2500-06-01 12:00:00.5'") == 1
    assert ds.count_rows("t < DATE '1600-01-01'") == 1
    assert ds.count_rows("w * 2 > 4") == 1  # 22...2 (41 digits) fits decimal256
    assert ds.count_rows("w + 1 = 3") == 1
    assert ds.count_rows("w / 2 = -1.75") == 1
