"""LSM views read from a MemWAL index snapshot (``consistency="snapshot"`` sessions and
``VERSION AS OF n``) are kept per table version in the runtime's ``lsm_views`` cache: the
base table is opened and the index snapshot read once per version, not per query. Every
answer equals a cold view's (a session over a new runtime), after puts, flushes, index
refreshes, merges and garbage collection; the cache is bounded (and may keep nothing)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import planner as planner_module
from lance_sql.sql import catalog as catalog_module
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64())])
QUERIES = ["SELECT id, v FROM t{at} ORDER BY id", "SELECT id, v FROM t{at} WHERE id = 3",
           "SELECT id, v FROM t{at} WHERE id IN (2, 5, 40)",
           "SELECT count(*) AS n FROM t{at} WHERE v > 0"]


def _rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids)}, schema=SCHEMA)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the catalog opens a base table and a view reads an index snapshot."""
    counts = {"opens": 0, "snapshots": 0}
    open_real, snap_real = catalog_module.dataset, planner_module.read_snapshot

    def opening(*args, **kwargs):
        counts["opens"] += 1
        return open_real(*args, **kwargs)

    def reading(*args, **kwargs):
        counts["snapshots"] += 1
        return snap_real(*args, **kwargs)

    monkeypatch.setattr(catalog_module, "dataset", opening)
    monkeypatch.setattr(planner_module, "read_snapshot", reading)
    return counts


def _answers(session, at: str = "") -> list:
    return [session.sql(q.format(at=at)).to_arrow_table().to_pylist() for q in QUERIES]


def _cold(root: Path, consistency: str, at: str = "") -> list:
    return _answers(connect(root, runtime=lance_sql.Runtime(), consistency=consistency), at)


def test_snapshot_sessions_keep_one_view_per_version(tmp_path: Path,
                                                     counted: dict[str, int]) -> None:
    ds = lance_sql.write_dataset(_rows(list(range(30)), 0), tmp_path / "t.lance")
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(ds.uri), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    runtime = lance_sql.Runtime()
    session = connect(tmp_path, runtime=runtime, consistency="snapshot")
    with mw.writer() as w:
        for step in range(1, 6):
            w.put(_rows([3, 5, 40 + step], step))
            first = _answers(session)
            opens, snapshots = counted["opens"], counted["snapshots"]
            assert _answers(session) == first  # the same version: nothing re-read
            assert (counted["opens"], counted["snapshots"]) == (opens, snapshots)
            assert first == _cold(tmp_path, "snapshot")
            if step % 2:
                w.flush_memtable()
                mw.refresh_index()  # a new version: its snapshot lists the generation
                assert _answers(session) == _cold(tmp_path, "snapshot")
                assert _answers(session)[1] == [{"id": 3, "v": step}]
            if step == 3:
                mw.merge()
                mw.refresh_index()
                lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
                mw.collect_garbage(grace=timedelta(0))
                assert _answers(session) == _cold(tmp_path, "snapshot")
    stats = runtime.stats()["lsm_views"]
    assert stats.hits > 0 and 0 < stats.entries <= stats.max_entries


def test_time_travel_keeps_one_view_per_version(tmp_path: Path,
                                                counted: dict[str, int]) -> None:
    ds = lance_sql.write_dataset(_rows(list(range(30)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 3), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    versions = []
    with mw.writer() as w:
        for step in range(1, 4):
            w.put(_rows([3, 5, 40 + step], step))
            w.flush_memtable()
            versions.append(mw.refresh_index().version)
        mw.merge()
        w.put(_rows([3], 99))  # the MemTable: only the latest strong view sees it
        session = connect(tmp_path, runtime=lance_sql.Runtime())
        for version in versions:
            at = f" VERSION AS OF {version}"
            first = _answers(session, at)
            snapshots = counted["snapshots"]
            assert _answers(session, at) == first == _cold(tmp_path, "strong", at)
            assert counted["snapshots"] > snapshots  # the cold session read it; we did not
            again = counted["snapshots"]
            _answers(session, at)
            assert counted["snapshots"] == again
        assert _answers(session)[1] == [{"id": 3, "v": 99}]


def test_the_view_cache_may_keep_nothing(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_rows(list(range(10)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(_rows([3], 7))
        w.flush_memtable()
    mw.refresh_index()
    runtime = lance_sql.Runtime(cache_bytes={"lsm_views": 0})
    session = connect(tmp_path, runtime=runtime, consistency="snapshot")
    assert _answers(session) == _answers(session) == _cold(tmp_path, "snapshot")
    assert runtime.stats()["lsm_views"].entries == 0
