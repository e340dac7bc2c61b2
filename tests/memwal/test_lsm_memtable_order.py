"""A strong read takes a region's MemTables before it reads the region's manifest, so a
flush that lands between the two is seen as a generation (never missed), and the
flushed MemTable is not read twice. The flush is made to happen right after the first of
the two reads, whichever it is: a read that took the manifest first would then miss the
rows (its manifest predates the generation, the MemTable is gone when taken)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import planner
from lance_sql.memwal.read.warm import WarmState
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.writer import RegionWriter

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


@pytest.mark.parametrize("warm", [True, False])
def test_a_flush_between_memtables_and_manifest_is_seen_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(20)), "b"), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 1),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(_rows([3, 30], "m"))  # an update and a new key, in the MemTable
        mw.get({"id": [3]})  # warms the handle (listing, manifest known)
        state = {"armed": True, "flushes": 0}

        def flush_once() -> None:
            if state["armed"]:
                state["armed"] = False
                writer.flush_memtable()
                state["flushes"] += 1

        taken = planner.open_memtables_of
        taken_of_writer = RegionWriter.memtables
        latest = RegionLog.latest
        warm_latest = WarmState.latest_manifest

        def take_then_flush(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = taken(*args, **kwargs)
            flush_once()
            return out

        def writer_take_then_flush(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = taken_of_writer(*args, **kwargs)
            flush_once()
            return out

        def read_then_flush(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = latest(*args, **kwargs)
            flush_once()
            return out

        def warm_read_then_flush(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = warm_latest(*args, **kwargs)
            flush_once()
            return out

        monkeypatch.setattr(planner, "open_memtables_of", take_then_flush)
        # (a warm strong read takes its writer's MemTables without open_memtables_of)
        monkeypatch.setattr(RegionWriter, "memtables", writer_take_then_flush)
        monkeypatch.setattr(RegionLog, "latest", read_then_flush)
        monkeypatch.setattr(WarmState, "latest_manifest", warm_read_then_flush)
        for key, expected in ((3, "m3"), (30, "m30")):
            state["armed"] = True
            state["flushes"] = 0
            got = (mw.get({"id": [key]}) if warm
                   else mw.view().lookup_plan(pa.table({"id": [key]})).to_table())
            assert state["flushes"] == 1
            assert got.column("v").to_pylist() == [expected]
        # a scan between the two reads: every key once, the flushed rows not twice
        state["armed"] = True
        rows = mw.scanner().to_table().sort_by("id")
        assert rows.column("id").to_pylist() == [*range(20), 30]
        assert rows.column("v").to_pylist()[3] == "m3"
    finally:
        for w in writer.writers:
            w.abort()
