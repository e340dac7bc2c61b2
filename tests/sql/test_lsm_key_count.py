"""A count of the rows one primary key selects on an LSM table (the scan asks the
lookup for no columns at all)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64())])


@pytest.mark.xfail(strict=True, reason="memwal.read.planner's one-key path builds a "
                   "table of no columns from no arrays: 0 rows (its owner is editing it)")
def test_count_of_one_key_counts_its_row(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}, schema=SCHEMA),
                                 tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"id": [2, 4], "v": [20, 40]}, schema=SCHEMA))
        writer.flush_memtable()
        writer.put(pa.table({"id": [5], "v": [50]}, schema=SCHEMA))
        session = connect(tmp_path)
        session.point_gets.enabled = False
        for key in (1, 2, 4, 5):  # base, base + generation, generation, MemTable
            # two keys count right: the many-key plan keeps its row count
            assert session.sql(f"SELECT count(*) AS n FROM t WHERE id IN ({key}, 99)"
                               ).to_pylist() == [{"n": 1}]
            assert session.sql(f"SELECT count(*) AS n FROM t WHERE id = {key}"
                               ).to_pylist() == [{"n": 1}], key
        assert session.sql("SELECT count(*) AS n FROM t WHERE id = 99").to_pylist() == \
            [{"n": 0}]
    finally:
        for region_writer in writer.writers:
            region_writer.abort()
