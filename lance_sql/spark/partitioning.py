"""How a Spark read of a table is cut into input partitions.

Every input partition of a Python data source costs a Spark task, and each task has a
fixed cost (scheduling, shipping the pickled reader, starting the Arrow stream) of
~30-70 ms on a small machine whatever it reads. One partition per fragment therefore
made a 10-fragment table of 10M rows read ~1.5x slower than the same rows in two
partitions (measured with a Python source serving batches from memory). So reads are
cut by bytes, as Spark's own file sources do: partitions of at most
``max_partition_bytes``, at least ``min_partitions`` of them (the cores that will run
them), none smaller than ``open_cost_bytes``. Unlike Spark, the count is rounded up to
a multiple of ``min_partitions`` and the rows are cut into partitions of equal bytes,
so the last wave of tasks is not left half empty. The pieces cut are fragments of a
table read, or commits of a change-feed read; a partition may span several and keeps
their order.

Pure logic: the sizes come in as numbers, so this is tested without files or Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lance_sql.format.fragment import Fragment
from lance_sql.format.schema import LanceField

__all__ = ["RowRange", "SizedPiece", "SplitPolicy", "plan_partitions", "fragment_size"]

MAX_PARTITION_BYTES = 128 << 20  # Spark's spark.sql.files.maxPartitionBytes
OPEN_COST_BYTES = 4 << 20  # Spark's spark.sql.files.openCostInBytes
# Bytes a value is assumed to take when a data file does not record its size.
_FALLBACK_VALUE_BYTES = 8


@dataclass(frozen=True)
class RowRange:
    """Rows ``[start, stop)`` of one piece (physical rows of a fragment, say)."""

    key: int
    start: int
    stop: int


@dataclass(frozen=True)
class SizedPiece:
    """What planning needs of a piece: its key, its rows and the bytes reading them takes."""

    key: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class SplitPolicy:
    """The limits a read is cut by (Spark's defaults for the byte sizes)."""

    max_partition_bytes: int = MAX_PARTITION_BYTES
    min_partitions: int = 1
    open_cost_bytes: int = OPEN_COST_BYTES

    def __post_init__(self) -> None:
        if self.max_partition_bytes < 1 or self.min_partitions < 1 or self.open_cost_bytes < 1:
            raise ValueError(f"split policy values must be positive: {self}")

    def partition_count(self, total_bytes: int, total_rows: int) -> int:
        """How many partitions ``total_bytes`` in ``total_rows`` rows are read in."""
        if total_rows <= 0:
            return 0
        by_size = -(-total_bytes // self.max_partition_bytes)
        count = max(self.min_partitions, by_size)
        count = -(-count // self.min_partitions) * self.min_partitions
        worth_opening = max(1, total_bytes // self.open_cost_bytes)
        return max(1, min(count, worth_opening, total_rows))


def fragment_size(fragment: Fragment, wanted: Iterable[LanceField]) -> SizedPiece:
    """Estimate the bytes of reading the ``wanted`` fields of ``fragment``.

    A data file's recorded size is shared out evenly over the fields it stores (a
    guess: widths differ, but it only sets how many partitions there are). Files that
    record no size count ``8`` bytes a value.
    """
    ids = {f.id for top in wanted for f in top.walk()}
    total = 0
    for data_file in fragment.files:
        stored = [i for i in data_file.fields if i >= 0]
        if not stored:
            continue
        read = sum(1 for i in stored if i in ids)
        size = (data_file.file_size_bytes
                or fragment.physical_rows * _FALLBACK_VALUE_BYTES * len(stored))
        total += size * read // len(stored)
    # System columns only (or a projection of nothing): row ids and addresses.
    return SizedPiece(fragment.id, fragment.physical_rows,
                        max(total, fragment.physical_rows * _FALLBACK_VALUE_BYTES))


def plan_partitions(pieces: Sequence[SizedPiece],
                    policy: SplitPolicy) -> list[tuple[RowRange, ...]]:
    """Cut ``pieces`` (in order) into partitions of about equal bytes."""
    pieces = [p for p in pieces if p.rows > 0]
    total_rows = sum(p.rows for p in pieces)
    total_bytes = sum(max(p.bytes, 1) for p in pieces)
    count = policy.partition_count(total_bytes, total_rows)
    if count == 0:
        return []
    # Partition k ends where the running byte total passes (k + 1) / count of the total.
    partitions: list[tuple[RowRange, ...]] = []
    current: list[RowRange] = []
    done_bytes = 0  # bytes of the pieces before the current one
    for piece in pieces:
        piece_bytes = max(piece.bytes, 1)
        start = 0
        while start < piece.rows:
            boundary = (len(partitions) + 1) * total_bytes // count
            if len(partitions) == count - 1 or boundary >= done_bytes + piece_bytes:
                stop = piece.rows
            else:
                # The row at which the running total reaches the boundary (at least one row).
                stop = -(-(boundary - done_bytes) * piece.rows // piece_bytes)
                stop = min(max(start + 1, stop), piece.rows)
            current.append(RowRange(piece.key, start, stop))
            start = stop
            reached = done_bytes + piece_bytes * stop // piece.rows
            if len(partitions) < count - 1 and reached >= boundary:
                partitions.append(tuple(current))
                current = []
        done_bytes += piece_bytes
    if current:
        partitions.append(tuple(current))
    return partitions
