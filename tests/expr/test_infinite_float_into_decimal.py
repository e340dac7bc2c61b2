"""An infinite double written to a decimal column is refused as DataFusion's cast refuses
it, with the ``InvalidInputError`` naming the column: numpy's ``invalid value`` warning
(inf - inf while rounding) came first, so with warnings as errors (this suite's
setting) the write failed with a ``RuntimeWarning`` instead."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError


@pytest.mark.parametrize("value", ["CAST('inf' AS DOUBLE)", "f"])
def test_infinity_into_decimal_is_invalid_input(tmp_path: Path, value: str) -> None:
    data = pa.table({"f": [1.0, float("inf")], "dec": pa.array([None, None], pa.decimal128(10, 2))})
    lance_sql.write_dataset(data, str(tmp_path / "t.lance"))
    session = lance_sql.connect(str(tmp_path))
    with pytest.raises(InvalidInputError, match="'dec'"):
        session.sql(f"UPDATE t SET dec = {value} WHERE f > 2")
    assert lance_sql.dataset(str(tmp_path / "t.lance")).version == 1  # nothing committed
