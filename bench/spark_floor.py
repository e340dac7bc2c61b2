"""The floor of Spark's Python data source API, for bench_spark.py.

A source whose reads serve the bench's rows from the Python worker's memory (built
once per worker process, then cached) and whose writes discard what they receive:
what remains is the cost of the API itself, the Arrow exchange between Spark's JVM
and its Python workers. Spark's workers import this module by name, so it must be on
their PYTHONPATH.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

# (rows, start, stop) -> the partition's batches, per worker process.
_BATCHES: dict[tuple[int, int, int], list[pa.RecordBatch]] = {}


class FloorPartition(InputPartition):
    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop


def _batches(rows: int, start: int, stop: int) -> list[pa.RecordBatch]:
    key = (rows, start, stop)
    if key not in _BATCHES:
        ids = np.arange(start, stop)
        s = pc.binary_join_element_wise("s", pa.array(ids % 100_000).cast(pa.string()), "")
        table = pa.table({"id": ids, "x": ids * 1.5, "s": s})
        _BATCHES[key] = table.to_batches(max_chunksize=1 << 16)
    return _BATCHES[key]


class FloorReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.partitions_ = rows, partitions

    def partitions(self) -> list[FloorPartition]:
        step = -(-self.rows // self.partitions_)
        return [FloorPartition(a, min(self.rows, a + step)) for a in range(0, self.rows, step)]

    def read(self, partition: FloorPartition) -> Iterator[pa.RecordBatch]:
        yield from _batches(self.rows, partition.start, partition.stop)


class Discard(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class FloorSource(DataSource):
    """Options: ``rows`` and ``partitions`` (set by :func:`in_memory_source`)."""

    @classmethod
    def name(cls) -> str:
        return "in_memory_floor"

    def schema(self) -> str:
        return "id long, x double, s string"

    def reader(self, schema: object) -> FloorReader:
        return FloorReader(int(self.options["rows"]), int(self.options["partitions"]))

    def writer(self, schema: object, overwrite: bool) -> Discard:
        return Discard()


def in_memory_source(rows: int, partitions: int) -> type[FloorSource]:
    """The floor source, reading ``rows`` rows in ``partitions`` partitions by default."""

    class Configured(FloorSource):
        def __init__(self, options: dict[str, str]) -> None:
            super().__init__({"rows": str(rows), "partitions": str(partitions)} | dict(options))

    return Configured
