"""The BITMAP index codec: row-address tree maps and the bitmap file's rows."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from lance_sql.errors import FormatError
from lance_sql.format.bitmap import (
    STATS_KEY,
    build_bitmaps,
    decode_row_set,
    encode_row_set,
    num_bitmaps,
)


def _addresses(pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.unique(np.array([(f << 32) | o for f, o in pairs], np.uint64))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 70_000)), max_size=300))
def test_row_sets_round_trip(pairs: list[tuple[int, int]]) -> None:
    values = _addresses(pairs)
    rows = dict.fromkeys(range(6), 70_001)
    assert np.array_equal(decode_row_set(encode_row_set(values), "f", rows), values)


def test_layout_is_count_then_fragment_size_bitmap() -> None:
    data = encode_row_set(_addresses([(0, 3), (2, 0), (2, 1)]))
    first = BitMap([3]).serialize()
    assert struct.unpack_from("<III", data, 0) == (2, 0, len(first))
    assert data[12:12 + len(first)] == first
    assert struct.unpack_from("<II", data, 12 + len(first)) == (2, len(BitMap([0, 1]).serialize()))


def test_size_zero_is_the_whole_fragment_and_gone_fragments_are_skipped() -> None:
    data = struct.pack("<IIIII", 2, 1, 0, 7, 0)  # fragment 1 whole, fragment 7 whole
    got = decode_row_set(data, "f", {1: 3})
    assert got.tolist() == [(1 << 32) | i for i in range(3)]


def test_row_ids_mode_checks_the_limit() -> None:
    values = np.array([1, 5, (1 << 32) + 2], np.uint64)
    data = encode_row_set(values)
    assert decode_row_set(data, "f", None, id_limit=(1 << 32) + 3).tolist() == values.tolist()
    with pytest.raises(FormatError, match="f: bitmap names row 2"):
        decode_row_set(data, "f", None, id_limit=(1 << 32) + 2)
    with pytest.raises(FormatError, match="whole range"):
        decode_row_set(struct.pack("<III", 1, 0, 0), "f", None, id_limit=10)


@pytest.mark.parametrize("data, message", [
    (b"\x01", "no entry count"),
    (struct.pack("<I", 1 << 30), "claims 1073741824 fragments"),
    (struct.pack("<IIII", 1, 0, 50, 0), "claims 50 bytes"),
    (struct.pack("<III", 1, 0, 4) + b"junk", "corrupt bitmap of fragment 0"),
    (encode_row_set(np.array([9], np.uint64)), "names row 9 of fragment 0, which has 5"),
])
def test_hostile_row_sets_are_format_errors(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        decode_row_set(data, "idx/bitmap_page_lookup.lance", {0: 5})


def test_build_groups_values_null_first_and_records_the_count() -> None:
    values = pa.array(["b", None, "a", "b", None, "a", "c"])
    ids = np.array([10, 11, 12, 13, 14, 15, (1 << 32) | 1], np.uint64)
    table = build_bitmaps(values, ids)
    assert table.column("keys").to_pylist() == [None, "a", "b", "c"]
    rows = {0: 100, 1: 100}
    got = [decode_row_set(b, "f", rows).tolist() for b in table.column("bitmaps").to_pylist()]
    assert got == [[11, 14], [12, 15], [10, 13], [(1 << 32) | 1]]
    assert table.schema.metadata == {STATS_KEY.encode(): b'{"num_bitmaps":4}'}
    assert num_bitmaps(table.schema.metadata, 0) == 4


def test_build_keeps_float_zeros_and_nans_apart_as_pylance() -> None:
    values = pa.array([0.0, -0.0, float("nan"), 1.5, float("nan"), None])
    table = build_bitmaps(values, np.arange(6, dtype=np.uint64))
    keys = table.column("keys").to_pylist()
    assert keys[0] is None and keys[3] == 1.5 and np.isnan(keys[4]) and len(keys) == 5
    assert [np.signbit(k) for k in keys[1:3]] == [True, False]


def test_empty_and_unreadable_stats() -> None:
    assert build_bitmaps(pa.array([], pa.int32()), np.empty(0, np.uint64)).num_rows == 0
    assert num_bitmaps({STATS_KEY.encode(): b"not json"}, 7) == 7
    assert num_bitmaps(None, 3) == 3
