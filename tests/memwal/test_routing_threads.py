"""Puts from several threads through one routing writer (``mw.writer()`` of a table with a
region spec), as puts through one region's writer may be: the first rows of a region,
arriving on two threads at once, must claim it once and keep every row."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal, RoutingWriter

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
THREADS = 4
REGIONS = 4


def _rows(ids, tag: str) -> pa.Table:
    ids = [int(i) for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def test_threads_putting_the_first_rows_of_regions_claim_each_once(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_rows(range(10), "base"), str(tmp_path / "t.lance"))
    mw = MemWal.initialize(lance_sql.dataset(ds.uri), RegionSpec.bucket("id", REGIONS),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    errors: list[BaseException] = []
    per_thread = 40
    with mw.writer() as w:
        assert isinstance(w, RoutingWriter)
        barrier = threading.Barrier(THREADS)

        def put(t: int) -> None:
            try:
                barrier.wait()  # every thread's first put routes to regions not claimed yet
                for i in range(per_thread):
                    w.put(_rows([1000 * (t + 1) + i], f"t{t}-"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert len(w.writers) == len({wr.region_id for wr in w.writers})
        w.flush_memtable()  # every region's rows to a flushed generation
    expected = {1000 * (t + 1) + i: f"t{t}-{1000 * (t + 1) + i}"
                for t in range(THREADS) for i in range(per_thread)}
    got = mw.get({"id": list(expected)})
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist(),
                    strict=True)) == expected
    assert len(mw.regions()) == REGIONS
