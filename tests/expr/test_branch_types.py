"""The branches of one value (COALESCE's arguments, CASE's results) meet in DataFusion's
type: an integer literal is an Int64 there, so ``coalesce(i8, 1)`` is an int64 (as pylance
stores it from ``add_columns``), not the column's int8, and a uint64 meets it as
decimal(20, 0). Arrow would cast a literal down to the column's type when evaluating, so
the column is cast explicitly."""

from __future__ import annotations

import datafusion
import pyarrow as pa
import pyarrow.dataset as pds
import pytest

from lance_sql.expr import value_expression

TABLE = pa.table({"i8": pa.array([1, None, -128], pa.int8()),
                  "u8": pa.array([0, None, 255], pa.uint8()),
                  "i32": pa.array([7, None, -7], pa.int32()),
                  "u64": pa.array([2**63 + 1, None, 0], pa.uint64()),
                  "f32": pa.array([1.5, None, 2.0], pa.float32())})


@pytest.mark.parametrize("expression", [
    "coalesce(i8, 1)", "coalesce(i8, 1000)", "coalesce(u8, -1)", "coalesce(i32, 1)",
    "coalesce(u64, 1)", "coalesce(f32, 1)", "coalesce(f32, 1.5)", "coalesce(i8, NULL)",
    "coalesce(i8, i32)", "CASE WHEN i8 > 0 THEN i8 ELSE 0 END",
    "CASE WHEN u8 > 0 THEN 1 ELSE u8 END",
])
def test_branches_meet_in_datafusions_type(expression: str) -> None:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [TABLE.to_batches()])
    want = ctx.sql(f"SELECT {expression} AS c FROM t").to_arrow_table()
    got = pds.dataset(TABLE).to_table(
        columns={"c": value_expression(expression, TABLE.schema)})
    assert got.schema.field("c").type == want.schema.field("c").type
    assert got["c"].to_pylist() == want["c"].to_pylist()
