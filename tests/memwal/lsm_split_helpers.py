"""A MemWAL table with flushed generations in every region, for split-read tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("g", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "g": [i % 2 for i in ids], "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def lsm_table(path: Path, spec: RegionSpec) -> MemWal:
    """Base 0..39; a merged generation, then unmerged ones with updates, new keys and
    deletes (in every region of a 3-bucket spec); writers closed."""
    ds = lance_sql.write_dataset(rows(list(range(40)), "base"), str(path),
                                 max_rows_per_file=16)
    mw = ds.initialize_mem_wal(spec)
    with mw.writer() as w:
        w.put(rows(list(range(0, 40, 5)), "first"))
        w.flush_memtable()
    mw.merge()
    with mw.writer() as w:
        w.put(rows([1, 2, 3, 4, 5, 6, 50, 51, 52, 53], "second"))
        w.delete(pa.table({"id": pa.array([7, 8, 9, 10, 11], pa.int64())}))
        w.flush_memtable()
        w.put(rows([2, 3, 60, 61, 62], "third"))
        w.delete(pa.table({"id": pa.array([50, 20], pa.int64())}))
        w.flush_memtable()
    return MemWal(lance_sql.dataset(str(path)))
