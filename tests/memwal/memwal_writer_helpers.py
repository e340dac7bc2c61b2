"""Shared fixtures of the region-writer tests: a keyed table, rows, and region contents."""

from __future__ import annotations

import itertools
import uuid

import pyarrow as pa

import lance_sql
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.writer import RegionWriter, WriterConfig

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("s", pa.string())])
REGION = uuid.UUID("11111111-2222-4333-8444-555555555555")
_names = itertools.count()


def rows(ids: list[int], tag: str = "x") -> pa.Table:
    return pa.table({"id": ids, "v": [float(i) for i in ids], "s": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def memory_table(prefix: str = "mw") -> lance_sql.LanceDataset:
    name = f"{prefix}{next(_names)}"
    MemoryStore.reset(name)
    return lance_sql.write_dataset(rows([0]), f"memory://{name}")


def quiet_config(**changes: object) -> WriterConfig:
    """Durable writes and no background work unless a test asks for it."""
    base = {"durable_write": True, "max_wal_flush_interval_ms": 3_600_000}
    base.update(changes)
    return WriterConfig(**base)  # type: ignore[arg-type]


def open_writer(ds: lance_sql.LanceDataset, region: uuid.UUID = REGION,
                **changes: object) -> RegionWriter:
    return RegionWriter.for_dataset(ds, region, config=quiet_config(**changes))


def flushed_rows(ds: lance_sql.LanceDataset, region: uuid.UUID = REGION) -> list[pa.Table]:
    """The rows of every flushed generation of the region, oldest first."""
    manifest = RegionLog(ds.store, region).latest()
    assert manifest is not None
    out = []
    for g in manifest.flushed_generations:
        gen_uri = f"{ds.store.uri}/_mem_wal/{region}/{g.path}"
        out.append(lance_sql.dataset(gen_uri).to_table())
    return out


def region_state(ds: lance_sql.LanceDataset, writer: RegionWriter,
                 region: uuid.UUID = REGION) -> dict[int, tuple[float | None, bool]]:
    """Last write wins over flushed generations then the writer's MemTables:
    key -> (v, tombstone)."""
    tables = flushed_rows(ds, region) + [m.to_table(with_row_address=False)
                                         for m in writer.memtables()]
    state: dict[int, tuple[float | None, bool]] = {}
    for t in tables:
        for k, v, dead in zip(t.column("id").to_pylist(), t.column("v").to_pylist(),
                              t.column("_tombstone").to_pylist(), strict=True):
            state[k] = (v, dead)
    return state
