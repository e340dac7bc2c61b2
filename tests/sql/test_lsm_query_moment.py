"""Every reference to an LSM table in one SQL query reads one moment of it.

A self-join (or a subquery over the same table) plans one scan per reference. Each used
to take this process's MemTables and the region manifests when its own scan was planned,
so a writer putting (or flushing) between the two saw a key in two states in one query.
The catalog now gives the references of a query one :class:`ReadMoment`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read.planner import LsmView
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64())])


def rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids)}, schema=SCHEMA)


def _writer(root: Path, keys: int, buckets: int):
    """A MemWAL table of ``keys`` base rows (v 0) under ``root`` and a writer of it."""
    uri = root / "t.lance"
    lance_sql.write_dataset(rows(list(range(keys)), 0), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", buckets),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    return mw.writer()


def _between_plans(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> list[int]:
    """Run ``action`` once, right after the first LSM scan plan of the next query."""
    plans: list[int] = []
    real = LsmView.scan_plan

    def planning(self, *args, **kwargs):
        plan = real(self, *args, **kwargs)
        plans.append(1)
        if len(plans) == 1:
            action()
        return plan

    monkeypatch.setattr(LsmView, "scan_plan", planning)
    return plans


def test_an_empty_memtable_at_the_moment_stays_empty_for_the_query(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's MemTable is empty when the query's moment is taken (just flushed):
    rows put before the second reference is planned are not read by it either (a
    MemTable was skipped by its live row count)."""
    writer = _writer(tmp_path, 10, 1)
    try:
        writer.put(rows([1], 1))
        writer.flush_memtable()
        session = connect(tmp_path)
        plans = _between_plans(monkeypatch, lambda: writer.put(rows(list(range(10)), 2)))
        got = session.sql("SELECT a.v AS av, b.v AS bv FROM t a JOIN t b ON a.id = b.id"
                          ).to_arrow_table()
        assert len(plans) == 2
        assert got["av"].to_pylist() == got["bv"].to_pylist()
        assert 2 not in got["av"].to_pylist()
    finally:
        writer.close()


@pytest.mark.parametrize("flush", [False, True], ids=["put", "put-then-flush"])
def test_a_self_join_reads_one_moment_while_a_writer_puts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: bool) -> None:
    writer = _writer(tmp_path, 20, 2)
    try:
        writer.put(rows(list(range(0, 20, 2)), 1))  # in the MemTables
        session = connect(tmp_path)

        def put() -> None:
            writer.put(rows(list(range(20)), 2))
            if flush:
                writer.flush_memtable()

        plans = _between_plans(monkeypatch, put)
        joined = session.sql(
            "SELECT a.id, a.v AS av, b.v AS bv FROM t a JOIN t b ON a.id = b.id"
        ).to_arrow_table()
        assert len(plans) == 2  # both references planned, the put between them
        assert joined.num_rows == 20
        assert joined["av"].to_pylist() == joined["bv"].to_pylist()
        assert sorted(set(joined["av"].to_pylist())) == [0, 1]  # the moment before
        # a subquery over the same table: the same moment as its outer query
        plans.clear()
        inner = session.sql(
            "SELECT count(*) AS n FROM t WHERE v = 2 AND id IN (SELECT id FROM t WHERE v = 2)"
        ).to_pylist()
        assert inner == [{"n": 20}]
        # the next query reads a new moment: the put is seen by both references
        monkeypatch.undo()
        again = session.sql(
            "SELECT count(*) AS n FROM t a JOIN t b ON a.id = b.id AND a.v = b.v "
            "WHERE a.v = 2").to_pylist()
        assert again == [{"n": 20}]
    finally:
        writer.close()


def test_lookups_of_one_query_read_its_moment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Point lookups of two references (pinned keys) read the MemTable rows of the
    query's moment, not rows put after it was taken."""
    writer = _writer(tmp_path, 10, 1)
    try:
        writer.put(rows([3], 1))
        session = connect(tmp_path)
        session.point_gets.enabled = False  # through DataFusion's plans
        real = LsmView.lookup_plan
        calls: list[int] = []

        def planning(self, *args, **kwargs):
            plan = real(self, *args, **kwargs)
            calls.append(1)
            if len(calls) == 1:
                writer.put(rows([3], 2))
            return plan

        monkeypatch.setattr(LsmView, "lookup_plan", planning)
        got = session.sql("SELECT a.v AS av, b.v AS bv FROM t a, t b "
                          "WHERE a.id = 3 AND b.id = 3").to_pylist()
        assert len(calls) == 2
        assert got == [{"av": 1, "bv": 1}]
        monkeypatch.undo()
        assert session.sql("SELECT v FROM t WHERE id = 3").to_pylist() == [{"v": 2}]
    finally:
        writer.close()
