"""When a scan's reads run side by side: the decoded width of a row, and the rule."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lance_sql.table.read import side_by_side
from lance_sql.table.read.side_by_side import (
    SIDE_BY_SIDE_MIN_BYTES,
    VARIABLE_WIDTH,
    reads_are_small,
    row_width,
)


@pytest.mark.parametrize(("types", "width"), [
    ([pa.int64()], 8),
    ([pa.int32(), pa.float64(), pa.uint8()], 13),
    ([pa.bool_()], 1),  # (a bit, counted as a byte)
    ([pa.string()], VARIABLE_WIDTH),
    ([pa.large_binary(), pa.list_(pa.int64())], 2 * VARIABLE_WIDTH),
    ([pa.list_(pa.float32(), 16)], 64),  # a fixed-size list: its values
    ([pa.list_(pa.list_(pa.float16(), 4), 3)], 24),
    ([pa.struct([("a", pa.int64()), ("b", pa.string())])], 8 + VARIABLE_WIDTH),
    ([pa.dictionary(pa.int16(), pa.string())], 2),  # its indices
    ([pa.null()], 0),
    ([pa.timestamp("us"), pa.date32(), pa.decimal128(20, 2)], 8 + 4 + 16),
    ([], 0),
])
def test_row_width_is_the_decoded_bytes_of_a_row(types: list[pa.DataType], width: int) -> None:
    assert row_width(types) == width


def test_reads_are_small_below_the_bytes_a_read_must_reach_on_average() -> None:
    per_read = SIDE_BY_SIDE_MIN_BYTES // 8  # rows of 8 bytes making one read's minimum
    assert not reads_are_small(8, per_read * 10, 10)
    assert reads_are_small(8, per_read * 10 - 1, 10)
    assert reads_are_small(16, per_read * 10 // 2 - 1, 10)  # twice as wide: half the rows
    assert not reads_are_small(16, per_read * 10 // 2, 10)
    # one large read and many tiny ones: small on average
    assert reads_are_small(8, per_read * 2 + 999 * 10, 1000)
    assert reads_are_small(8, 0, 0)  # nothing to read
    assert reads_are_small(0, SIDE_BY_SIDE_MIN_BYTES - 1, 1)  # no columns: a byte a row
    assert not reads_are_small(0, SIDE_BY_SIDE_MIN_BYTES, 1)


def test_the_rule_reads_its_threshold_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """(Tests of the pool itself set the threshold to 0 to use it with small tables.)"""
    assert reads_are_small(8, 10, 1)
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
    assert not reads_are_small(8, 10, 1)
