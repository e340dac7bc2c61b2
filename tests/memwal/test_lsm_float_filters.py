"""An LSM scan's filter on a float column holding NaN, pushed into every source (base
table, flushed generations, MemTables), keeps the rows SQL keeps: filtering the
unfiltered view with DataFusion gives the same rows."""

from __future__ import annotations

from collections.abc import Iterator

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64())])
SPECIAL = np.array([np.nan, 80.0, -0.0, 0.0, np.inf, 3.0, -np.inf, 75.5])


def _rows(ids: np.ndarray, shift: int) -> pa.Table:
    v = SPECIAL[(ids + shift) % SPECIAL.size]
    return pa.table({"id": ids, "v": pa.array(v, mask=(ids + shift) % 11 == 0)},
                    schema=SCHEMA)


@pytest.fixture(scope="module")
def lsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemWal]:
    root = str(tmp_path_factory.mktemp("lsm") / "t.lance")
    ds = lance_sql.write_dataset(_rows(np.arange(600, dtype=np.int64), 0), root,
                                 max_rows_per_file=250)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    writer.put(_rows(np.arange(0, 700, 3, dtype=np.int64), 1))
    writer.flush_memtable()
    writer.put(_rows(np.arange(1, 650, 5, dtype=np.int64), 2))  # stays in the MemTable
    yield mw
    for w in writer.writers:
        w.abort()


@pytest.mark.parametrize("flt", ["v > 74.0", "v >= 80.0", "v < 5", "v = 0.0", "v != 3.0",
                                 "v BETWEEN 1.0 AND 100.0", "v > 74.0 AND id > 100",
                                 "v IS NULL"])
def test_lsm_float_filter_matches_datafusion(lsm: MemWal, flt: str) -> None:
    everything = lsm.scanner().to_table()
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("m", [everything.to_batches()])
    want = ctx.sql(f"SELECT id FROM m WHERE {flt} ORDER BY id").to_arrow_table()
    got = lsm.scanner(filter=flt).to_table().sort_by("id")
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    assert want.num_rows > 0
