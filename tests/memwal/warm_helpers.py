"""Shared by the warm-view tests: a keyed table with a BTREE index and a MemWAL, a
one-key lookup of its value column, and a count of calls to a patched function."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def keyed_table(tmp_path: Path, regions: int) -> tuple[str, MemWal]:
    """Keys 0..99 (values ``b<key>``), indexed, with a MemWAL of ``regions`` buckets whose
    writers flush their WAL only when asked."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(range(100), pa.int64()),
                                           "v": [f"b{i}" for i in range(100)]},
                                          schema=SCHEMA), uri)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", regions),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    return uri, mw


def value(mw: MemWal, key: int) -> list:
    """The value column of ``key``'s row as ``mw.get`` reads it (empty: no row)."""
    return mw.get({"id": pa.array([key], pa.int64())}).column("v").to_pylist()


def counting(monkeypatch, module: object, name: str) -> list[int]:
    """Patch ``module.name`` to count its calls (the count: ``[0]`` of the list)."""
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls
