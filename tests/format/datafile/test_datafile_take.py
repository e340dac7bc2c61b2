"""``take``: random, repeated and unsorted rows equal ``Table.take``; only needed pages are read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, assert_tables, colmap, table_of, write_ours

from lance_sql.errors import InvalidInputError
from lance_sql.format.datafile import BytesSource, LanceFileReader

N = 600


@pytest.fixture(scope="module")
def written():
    table = table_of(ALL_KINDS, N, "some", seed=21)
    data, schema, info = write_ours(table, page_bytes=200, max_page_bytes=800)
    return table, data, schema, colmap(info)


def _take(written, rows):
    table, data, schema, cmap = written
    reader = LanceFileReader(BytesSource(data))
    got = pa.table(reader.take(schema.fields, cmap, np.asarray(rows)), schema=schema.to_arrow())
    assert_tables(got, table.take(pa.array(np.asarray(rows, dtype=np.int64))))


@pytest.mark.parametrize("seed", range(5))
def test_take_random_with_repeats(written, seed: int) -> None:
    rng = np.random.default_rng(seed)
    _take(written, rng.integers(0, N, rng.integers(1, 200)))


def test_take_edge_cases(written) -> None:
    _take(written, [])
    _take(written, [0])
    _take(written, [N - 1, 0, N - 1, 0])
    _take(written, np.arange(N)[::-1])
    _take(written, np.arange(N))
    _take(written, np.arange(100, 140))  # one contiguous run
    _take(written, np.r_[np.arange(10, 20), np.arange(300, 320), 599])
    _take(written, np.array([5, 5, 5, 5], dtype=np.uint16))


def test_take_rejects_bad_rows(written) -> None:
    _, data, schema, cmap = written
    reader = LanceFileReader(BytesSource(data))
    for rows in ([N], [-1], [0.5]):
        with pytest.raises(InvalidInputError):
            reader.take(schema.fields, cmap, np.array(rows))


def test_take_reads_only_needed_pages() -> None:
    n = 200_000
    table = pa.table({"x": np.arange(n, dtype=np.int64), "s": [str(i) for i in range(n)]})
    data, schema, info = write_ours(table, page_bytes=100_000, max_page_bytes=100_000)
    source = BytesSource(data)
    reader = LanceFileReader(source)
    pages = len(reader._columns[0].pages)
    assert pages > 10
    before = source.reads
    (x, s) = reader.take(schema.fields, colmap(info), np.array([150_000, 3]))
    assert x.to_pylist() == [150_000, 3] and s.to_pylist() == ["150000", "3"]
    assert source.reads - before <= 2 + 3 * 2  # a few reads per touched page, not per page
