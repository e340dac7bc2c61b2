"""Cutting a read into input partitions by bytes (pure logic, no Spark session)."""

from __future__ import annotations

import random

import pytest

from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.schema import LanceField
from lance_sql.spark.partitioning import (
    RowRange,
    SizedPiece,
    SplitPolicy,
    fragment_size,
    plan_partitions,
)

MiB = 1 << 20


def _rows(partitions: list[tuple[RowRange, ...]]) -> list[tuple[int, int]]:
    """Every (fragment, row) read, in the order the partitions read them."""
    return [(r.key, i) for p in partitions for r in p for i in range(r.start, r.stop)]


def _bytes(partition: tuple[RowRange, ...], sizes: dict[int, SizedPiece]) -> float:
    return sum(sizes[r.key].bytes * (r.stop - r.start) / sizes[r.key].rows
               for r in partition)


def test_equal_fragments_are_packed_into_one_partition_per_core() -> None:
    fragments = [SizedPiece(i, 1000, 20 * MiB) for i in range(10)]
    parts = plan_partitions(fragments, SplitPolicy(min_partitions=2))
    assert parts == [
        tuple(RowRange(i, 0, 1000) for i in range(5)),
        tuple(RowRange(i, 0, 1000) for i in range(5, 10)),
    ]


def test_partitions_follow_max_bytes_rounded_to_a_multiple_of_the_cores() -> None:
    fragments = [SizedPiece(i, 1000, 100 * MiB) for i in range(3)]  # 300 MiB
    assert len(plan_partitions(fragments, SplitPolicy(min_partitions=1))) == 3  # 128 MiB each
    # Three tasks on two cores would leave the second wave half empty: four instead.
    parts = plan_partitions(fragments, SplitPolicy(min_partitions=2))
    assert len(parts) == 4
    assert _rows(parts) == [(f, i) for f in range(3) for i in range(1000)]
    assert [sum(r.stop - r.start for r in p) for p in parts] == [750, 750, 750, 750]


def test_small_reads_are_not_split_below_the_open_cost() -> None:
    fragments = [SizedPiece(i, 100, 10_000) for i in range(8)]
    assert len(plan_partitions(fragments, SplitPolicy(min_partitions=8))) == 1
    policy = SplitPolicy(min_partitions=8, open_cost_bytes=20_000)
    assert len(plan_partitions(fragments, policy)) == 4


def test_one_large_fragment_is_split_into_row_ranges() -> None:
    parts = plan_partitions([SizedPiece(7, 1_000_000, 512 * MiB)], SplitPolicy())
    assert parts == [(RowRange(7, i * 250_000, (i + 1) * 250_000),) for i in range(4)]


def test_partitions_balance_bytes_not_rows() -> None:
    # Fragment 1 has rows ten times as wide: the cut lands early in it.
    sizes = {0: SizedPiece(0, 1000, 10 * MiB), 1: SizedPiece(1, 1000, 100 * MiB)}
    parts = plan_partitions(list(sizes.values()), SplitPolicy(min_partitions=2))
    assert parts == [(RowRange(0, 0, 1000), RowRange(1, 0, 450)), (RowRange(1, 450, 1000),)]
    assert [_bytes(p, sizes) for p in parts] == [55 * MiB, 55 * MiB]


def test_empty_reads_and_fragments() -> None:
    assert plan_partitions([], SplitPolicy()) == []
    assert plan_partitions([SizedPiece(0, 0, 0)], SplitPolicy()) == []
    parts = plan_partitions([SizedPiece(0, 0, 0), SizedPiece(1, 5, 0)], SplitPolicy())
    assert parts == [(RowRange(1, 0, 5),)]


@pytest.mark.parametrize("seed", range(20))
def test_every_row_is_read_once_in_table_order(seed: int) -> None:
    rng = random.Random(seed)
    fragments = [SizedPiece(i * 3, rng.choice([0, 1, 7, 1000, 123_457]),
                              rng.choice([1, 500, 3 * MiB, 90 * MiB, 700 * MiB]))
                 for i in range(rng.randint(1, 12))]
    policy = SplitPolicy(max_partition_bytes=rng.choice([MiB, 64 * MiB, 128 * MiB]),
                         min_partitions=rng.randint(1, 6),
                         open_cost_bytes=rng.choice([1, 4 * MiB]))
    parts = plan_partitions(fragments, policy)
    assert _rows(parts) == [(f.key, i) for f in fragments for i in range(f.rows)]
    assert all(p and all(r.start < r.stop for r in p) for p in parts)
    total_bytes = sum(max(f.bytes, 1) for f in fragments)
    assert len(parts) <= policy.partition_count(total_bytes, sum(f.rows for f in fragments))


def _fragment(files: list[DataFile], rows: int = 100) -> Fragment:
    return Fragment(id=4, files=tuple(files), physical_rows=rows)


def test_fragment_size_shares_a_file_over_its_fields() -> None:
    a, b, c = (LanceField(id=i, name=n, logical_type="int64") for i, n in enumerate("abc"))
    files = [DataFile("one.lance", (0, 1), (0, 1), 2, 0, file_size_bytes=8000),
             DataFile("two.lance", (2, -2), (0, 1), 2, 0, file_size_bytes=3000)]
    assert fragment_size(_fragment(files), [a, b, c]) == SizedPiece(4, 100, 11000)
    assert fragment_size(_fragment(files), [b]).bytes == 4000
    assert fragment_size(_fragment(files), [c]).bytes == 3000  # the tombstone holds nothing
    # No size recorded: 8 bytes a value.
    unsized = [DataFile("old.lance", (0, 1), (0, 1), 2, 0)]
    assert fragment_size(_fragment(unsized), [a]).bytes == 100 * 8
    assert fragment_size(_fragment(unsized, rows=1000), [a, b]).bytes == 1000 * 8 * 2
    # Only system columns: their 8 bytes a row.
    assert fragment_size(_fragment(files), []).bytes == 100 * 8


def test_fragment_size_counts_nested_fields() -> None:
    leaf = LanceField(id=1, name="x", logical_type="int64")
    parent = LanceField(id=0, name="s", logical_type="struct", children=(leaf,))
    other = LanceField(id=2, name="o", logical_type="int64")
    files = [DataFile("f.lance", (0, 1, 2), (0, 1, 2), 2, 1, file_size_bytes=9000)]
    assert fragment_size(_fragment(files), [parent]).bytes == 6000
    assert fragment_size(_fragment(files), [other]).bytes == 3000
    assert fragment_size(_fragment(files, rows=5000), [other]).bytes == 5000 * 8  # the minimum


def test_policy_rejects_non_positive_values() -> None:
    with pytest.raises(ValueError, match="positive"):
        SplitPolicy(min_partitions=0)
