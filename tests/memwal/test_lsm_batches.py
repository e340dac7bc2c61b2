"""LSM scans hand out bounded batches: at most ``batch_size`` rows (default 8192, as the
plain scanner), from Python's ``to_batches()`` and from SQL streams, with the same rows as
``to_table()``; a LIMIT stops after its rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64())])
ROWS = 60_000


def _rows(ids: np.ndarray, tag: float) -> pa.Table:
    return pa.table({"id": ids.astype(np.int64), "v": ids * 1.0 + tag}, schema=SCHEMA)


@pytest.fixture
def mw(tmp_path: Path):
    """One 60k-row base fragment, a flushed generation and a MemTable."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(np.arange(ROWS), 0), uri)
    table = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                              durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = table.writer()
    writer.put(_rows(np.arange(0, ROWS + 20_000, 3), 0.5))
    writer.flush_memtable()
    writer.put(_rows(np.arange(0, ROWS, 7), 0.25))
    yield table
    writer.close()


def test_python_batches_are_bounded(mw: MemWal) -> None:
    whole = mw.scanner().to_table()
    assert whole.num_rows == ROWS + len(range(ROWS, ROWS + 20_000, 3))
    for size, bound in [(None, 8192), (1000, 1000), (100_000, 100_000)]:
        batches = list(mw.scanner(batch_size=size).to_batches())
        assert max(b.num_rows for b in batches) <= bound
        assert pa.Table.from_batches(batches).equals(whole)
    assert max(b.num_rows for b in mw.scanner(batch_size=100_000).to_batches()) > 8192
    limited = list(mw.scanner(limit=10, batch_size=4).to_batches())
    assert [b.num_rows for b in limited] == [4, 4, 2]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidInputError):
            mw.scanner(batch_size=bad)  # type: ignore[arg-type]


def test_sql_stream_batches_are_bounded(mw: MemWal) -> None:
    session = connect()
    session.register("t", mw.dataset.uri)
    stream = session.sql("SELECT id, v FROM t").df.execute_stream()
    sizes = [b.to_pyarrow().num_rows for b in stream]
    assert sum(sizes) == mw.scanner().count_rows()
    assert max(sizes) <= 8192
