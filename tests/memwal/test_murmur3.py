"""Murmur3 over whole arrays: reference vectors, the mmh3 oracle, and Iceberg's hash bytes."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import InvalidInputError
from lance_sql.memwal.murmur3 import bucket, hash_input, murmur3_32

# The hash test vectors of Iceberg's bucket transform (spec, appendix B): fixed forever.
ICEBERG_VECTORS = [
    (pa.array([34], pa.int32()), 2017239379),
    (pa.array([34], pa.int64()), 2017239379),
    (pa.array([Decimal("14.20")], pa.decimal128(9, 2)), -500754589),
    (pa.array([dt.date(2017, 11, 16)]), -653330422),
    (pa.array([dt.time(22, 31, 8)], pa.time64("us")), -662762989),
    (pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us")), -2047944441),
    (pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us", "UTC")), -2047944441),
    (pa.array(["iceberg"]), 1210000089),
    (pa.array([b"\x00\x01\x02\x03"]), -188683207),
]


@pytest.mark.parametrize(("values", "expected"), ICEBERG_VECTORS,
                         ids=lambda v: str(v.type) if isinstance(v, pa.Array) else str(v))
def test_iceberg_reference_vectors(values: pa.Array, expected: int) -> None:
    assert murmur3_32(values).to_pylist() == [expected]


def test_our_own_fixed_vectors() -> None:
    """Values whose buckets users' regions depend on: changing any is a format break."""
    values = pa.array([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)], pa.int64())
    assert murmur3_32(values).to_pylist() == [
        mmh3.hash(struct.pack("<q", v), 0) for v in values.to_pylist()]
    assert bucket(pa.array([-(2**31), 7, None], pa.int32()), 10).to_pylist() == [8, 7, None]
    assert murmur3_32(pa.array([1.5, -0.0, 0.0], pa.float64())).to_pylist() == [
        mmh3.hash(struct.pack("<d", 1.5)), mmh3.hash(struct.pack("<d", 0.0)),
        mmh3.hash(struct.pack("<d", 0.0))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=60))
def test_binary_hashes_equal_mmh3(values: list[bytes | None]) -> None:
    expected = [None if v is None else mmh3.hash(v, 0) for v in values]
    assert murmur3_32(pa.array(values, pa.binary())).to_pylist() == expected
    assert murmur3_32(pa.array(values, pa.large_binary())).to_pylist() == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=50), st.data())
def test_slices_and_chunks_hash_like_their_values(values: list[str], data: st.DataObject
                                                   ) -> None:
    arr = pa.array(values)
    start = data.draw(st.integers(0, len(values) - 1))
    sliced = arr.slice(start)
    assert murmur3_32(sliced).to_pylist() == [mmh3.hash(v.encode(), 0) for v in values[start:]]
    chunked = pa.chunked_array([arr.slice(0, start), arr.slice(start)])
    assert murmur3_32(chunked).to_pylist() == murmur3_32(arr).to_pylist()


def test_long_and_short_values_mixed() -> None:
    values = [b"x" * 100_000, b"ab", b"", b"y" * 300, b"z" * 57]
    assert murmur3_32(pa.array(values)).to_pylist() == [mmh3.hash(v, 0) for v in values]


def test_equal_values_of_different_widths_hash_alike() -> None:
    five = [murmur3_32(pa.array([5], t)).to_pylist()[0]
            for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64())]
    assert len(set(five)) == 1
    instants = [pa.array([dt.datetime(2026, 1, 2, 3, 4, 5)], pa.timestamp(u)) for u in
                ("s", "ms", "us", "ns")]
    assert len({murmur3_32(a).to_pylist()[0] for a in instants}) == 1
    days = [pa.array([dt.date(2026, 1, 2)], pa.date32()),
            pa.array([dt.date(2026, 1, 2)], pa.date64())]
    assert len({murmur3_32(a).to_pylist()[0] for a in days}) == 1
    assert (murmur3_32(pa.array([2.5], pa.float32())).to_pylist()
            == murmur3_32(pa.array([2.5], pa.float64())).to_pylist())
    assert (murmur3_32(pa.array(["k"], pa.string())).to_pylist()
            == murmur3_32(pa.array(["k"], pa.large_string())).to_pylist())
    same = [Decimal("1.50"), Decimal("1.50")]
    assert (murmur3_32(pa.array(same[:1], pa.decimal128(5, 2))).to_pylist()
            == murmur3_32(pa.array(same[1:], pa.decimal128(20, 2))).to_pylist())


def test_decimal_bytes_are_minimal_twos_complement() -> None:
    values = pa.array([Decimal(v) for v in ("0", "-1", "127", "128", "-128", "-129", "32767",
                                              "-32768")], pa.decimal128(38, 0))
    assert [b.hex() for b in hash_input(values).to_pylist()] == [
        "00", "ff", "7f", "0080", "80", "ff7f", "7fff", "8000"]


def test_unhashable_types_and_bad_bucket_counts_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="cannot be hashed"):
        murmur3_32(pa.array([[1]]))
    for n in (0, -3, 2**31):
        with pytest.raises(InvalidInputError, match="num_buckets"):
            bucket(pa.array([1], pa.int32()), n)


def test_a_million_keys_hash_without_a_python_loop_per_row() -> None:
    keys = pa.array(np.arange(1_000_000, dtype=np.int64))
    buckets = bucket(murmur3_32(keys), 16).to_numpy()
    counts = np.bincount(buckets, minlength=16)
    assert counts.min() > 55_000  # spread evenly: 62,500 expected each
