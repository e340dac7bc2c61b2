"""Arithmetic on narrow and unsigned integer columns with integer constants is computed in
64 bits, as DataFusion (so pylance and SQL) computes it: never wrapped around in the
column's type (``i8 + 100 > 0`` once lost the row holding 127)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

FILTERS = ["i8 + 100 > 0", "i8 * 2 < 0", "100 + i8 > 0", "i8 - 1 = 126", "-1 * i8 = 128",
           "i16 * 1000 > 0", "u8 + 1 = 256", "u32 + 1 = 0", "u32 - 5 < 0", "5 - u32 > 0",
           "u32 * 2 > 8589934589", "i32 + 1 > 2147483647", "i8 + i16 > 0", "u8 % 7 = 3"]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("arith") / "t.lance")
    lance_sql.write_dataset(pa.table({
        "id": [0, 1, 2, 3],
        "i8": pa.array([127, -128, 5, None], pa.int8()),
        "i16": pa.array([32767, -32768, 5, 1], pa.int16()),
        "i32": pa.array([2147483647, -2147483648, 5, 1], pa.int32()),
        "u8": pa.array([255, 0, 3, 10], pa.uint8()),
        "u32": pa.array([4294967295, 0, 3, 10], pa.uint32()),
    }), uri)
    return uri


@pytest.mark.parametrize("where", FILTERS)
def test_filters_match_pylance_and_sql(table: str, where: str) -> None:
    want = lance.dataset(table).to_table(filter=where).column("id").to_pylist()
    ds = lance_sql.dataset(table)
    assert ds.to_table(filter=where).column("id").to_pylist() == want
    assert ds.count_rows(where) == len(want)
    root = str(Path(table).parent)
    sql = lance_sql.connect(root).sql(f"SELECT id FROM t WHERE {where} ORDER BY id")
    assert sql.to_arrow_table().column("id").to_pylist() == want
