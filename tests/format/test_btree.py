"""The BTREE codec's pure parts: entry order, page bounds, page selection, matching."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import FormatError
from lance_sql.expr import parse_predicate, to_pyarrow
from lance_sql.format.btree import (
    KeyIsNull,
    KeyRange,
    KeySet,
    PageBounds,
    PageLookup,
    SortedPage,
    build_lookup,
    matches,
    sort_entries,
)

BATCH = 8


def _index(values: pa.Array) -> tuple[pa.Table, PageBounds]:
    data = sort_entries(values, np.arange(len(values), dtype=np.uint64)[::-1].copy())
    lookup = PageLookup.decode(build_lookup(data, BATCH), len(values), "mem")
    return data, PageBounds.of(lookup)


def test_entry_order_nulls_first_nan_last() -> None:
    values = pa.array([2.0, None, float("nan"), -1.0, 2.0, None, -0.0], pa.float64())
    data = sort_entries(values, np.array([70, 60, 50, 40, 30, 20, 10], np.uint64))
    ids = data.column("ids").to_pylist()
    assert set(ids[:2]) == {20, 60} and ids[2:4] == [40, 10] and set(ids[4:6]) == {30, 70}
    assert ids[6] == 50  # NaN last (IEEE total order, as pylance)
    lookup = build_lookup(data, 3)
    assert lookup.column("null_count").to_pylist() == [2, 0, 0]
    assert lookup.column("min").to_pylist()[:2] == [None, 0.0]  # -0.0 == 0.0
    assert np.isnan(lookup.column("max").to_pylist()[2])
    assert lookup.schema.metadata == {b"batch_size": b"3", b"range_partitioned": b"false"}


def test_lookup_must_match_page_data() -> None:
    data = sort_entries(pa.array(range(20)), np.arange(20, dtype=np.uint64))
    lookup = build_lookup(data, BATCH)
    with pytest.raises(FormatError, match="do not match"):
        PageLookup.decode(lookup, 40, "x/page_lookup.lance")
    bad = lookup.replace_schema_metadata({"batch_size": "8", "range_partitioned": "true"})
    with pytest.raises(FormatError, match="range-partitioned"):
        PageLookup.decode(bad, 20, "x")
    with pytest.raises(FormatError, match="not a BTREE page lookup"):
        PageLookup.decode(pa.table({"a": [1]}), 20, "x")


def _pages_with_matches(data: pa.Table, query: object) -> set[int]:
    hit = np.flatnonzero(matches(data.column("values").combine_chunks(), query))
    return set((hit // BATCH).tolist())


ints = st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=80)
bounds = st.one_of(st.none(), st.integers(-60, 60))


@settings(max_examples=150, deadline=None)
@given(ints, bounds, bounds, st.booleans(), st.booleans(), st.lists(st.integers(-60, 60),
                                                                    max_size=6))
def test_selected_pages_hold_every_match(values: list, lo: int | None, hi: int | None,
                                         lo_inc: bool, hi_inc: bool, keys: list[int]) -> None:
    for arr in (pa.array(values, pa.int64()),
                pa.array([None if v is None else f"{v + 100:04d}" for v in values], pa.string())):
        data, searched = _index(arr)
        compared = PageBounds(searched.lookup, None, None)
        t = arr.type

        def scalar(v: int | None, t: pa.DataType = t) -> pa.Scalar | None:
            if v is None:
                return None
            return pa.scalar(v if pa.types.is_integer(t) else f"{v + 100:04d}", t)

        queries = [KeyRange(scalar(lo), scalar(hi), lo_inc, hi_inc), KeyIsNull(),
                   KeySet(pa.array([scalar(k).as_py() for k in keys], t))]
        for query in queries:
            needed = _pages_with_matches(data, query)
            for bounds_ in (searched, compared):
                assert needed <= set(bounds_.pages(query).tolist()), query
            _same_selection(data, query)


floats = st.lists(st.one_of(st.none(), st.sampled_from(
    [float("nan"), -0.0, 0.0, 1.5, -2.0, float("inf"), -float("inf"), 3.0])), max_size=40)
float_bounds = st.one_of(st.none(), st.sampled_from(
    [float("nan"), -0.0, 0.0, 1.5, -1.0, float("inf"), 2.0]))


@settings(max_examples=200, deadline=None)
@given(floats, float_bounds, float_bounds, st.booleans(), st.booleans())
def test_float_matching_is_sql_comparison(values: list, lo: float | None, hi: float | None,
                                          lo_inc: bool, hi_inc: bool) -> None:
    """matches() agrees with the filter a scan applies, NaN and -0.0 included."""
    arr = pa.array(values, pa.float64())
    parts = []
    if lo is not None:
        parts.append(f"v {'>=' if lo_inc else '>'} {_sql_float(lo)}")
    if hi is not None:
        parts.append(f"v {'<=' if hi_inc else '<'} {_sql_float(hi)}")
    text = " AND ".join(parts) or "v IS NOT NULL"
    table = pa.table({"v": arr, "i": pa.array(range(len(values)))})
    expected = table.filter(to_pyarrow(parse_predicate(text), table.schema))["i"].to_pylist()
    query = KeyRange(None if lo is None else pa.scalar(lo), None if hi is None else pa.scalar(hi),
                     lo_inc, hi_inc)
    assert np.flatnonzero(matches(arr, query)).tolist() == expected
    data, bounds_ = _index(arr)
    assert _pages_with_matches(data, query) <= set(bounds_.pages(query).tolist())
    _same_selection(data, query)
    if lo is not None:
        _same_selection(data, KeySet(pa.array([lo, 1.5], pa.float64())))


def _same_selection(data: pa.Table, query: object) -> None:
    """Binary search in sorted pages finds exactly what testing every value finds."""
    for start in range(0, data.num_rows, BATCH):
        page = SortedPage.of(data.slice(start, BATCH))
        expected = page.ids[matches(page.values, query)]
        assert sorted(page.select(query).tolist()) == sorted(expected.tolist()), query


def _sql_float(v: float) -> str:
    if np.isnan(v):
        return "CAST('NaN' AS DOUBLE)"
    if np.isinf(v):
        return f"CAST('{'-' if v < 0 else ''}inf' AS DOUBLE)"
    return repr(v)


def test_set_matching_treats_zeros_alike() -> None:
    arr = pa.array([0.0, -0.0, float("nan"), None, 1.0])
    assert matches(arr, KeySet(pa.array([-0.0, float("nan")]))).tolist() == [
        True, True, True, False, False]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True)), max_size=50),
       st.sampled_from([pa.float64(), pa.float32()]))
def test_float_entries_in_total_order(values: list, t: pa.DataType) -> None:
    arr = pa.array(values, pa.float64()).cast(t, safe=False)
    data = sort_entries(arr, np.arange(len(values), dtype=np.uint64))
    got = data.column("values").to_pylist()
    nulls = sum(v is None for v in got)
    assert all(v is None for v in got[:nulls])
    keys = [_total_order(v) for v in got[nulls:]]
    assert keys == sorted(keys)
    assert sorted(data.column("ids").to_pylist()) == list(range(len(values)))


def _total_order(x: float) -> int:
    """IEEE 754 totalOrder as an integer (Rust's f64::total_cmp): -NaN < -inf < ... <
    -0.0 < 0.0 < ... < inf < NaN."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=20),
                          st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"a\x00\x00b",
                                           b"abcdefgh", b"abcdefgh\x00", b"abcdefghi"])),
                max_size=60),
       st.sampled_from([pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]),
       st.integers(0, 3))
def test_byte_strings_sort_like_bytes(values: list, t: pa.DataType, cut: int) -> None:
    """The integer radix order of strings equals byte-wise order (zero bytes, prefixes,
    sliced arrays and every string type included)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        values = [None if v is None else v.decode("latin-1") for v in values]
    arr = pa.array(values, t).slice(min(cut, len(values)))
    data = sort_entries(arr, np.arange(len(arr), dtype=np.uint64))
    got = data.column("values").to_pylist()
    nulls = arr.null_count
    present = [v for v in arr.to_pylist() if v is not None]
    as_bytes = (lambda v: v.encode()) if isinstance(present[0] if present else b"", str) \
        else (lambda v: v)
    assert got[:nulls] == [None] * nulls
    assert got[nulls:] == sorted(present, key=as_bytes)
    ids = data.column("ids").to_numpy()
    assert [arr[int(i)].as_py() for i in ids] == got
    # binary search over the byte strings finds exactly what testing every value finds
    probes = present[:3] + ([b"a", b"a\x00"] if not isinstance(present[0] if present else b"",
                                                                 str) else ["a", "a\x00"])
    _same_selection(data, KeySet(pa.array(probes, t)))
    for lo, hi in zip(probes, probes[1:], strict=False):
        for lo_inc in (True, False):
            _same_selection(data, KeyRange(pa.scalar(lo, t), pa.scalar(hi, t), lo_inc, True))
            _same_selection(data, KeyRange(None, pa.scalar(hi, t), True, lo_inc))
