"""A query that names no version reads its tables' latest versions as it was planned; when
``cleanup_old_versions`` removes one of them before the query has read it, collecting the
query plans it again at the versions latest then (a merger and cleanup running beside
readers make that routine), a bounded number of times. A query naming a version, and a
stream already handed out, still raise VersionCleanedUpError."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import VersionCleanedUpError
from lance_sql.memwal import RegionSpec
from lance_sql.sql import session as session_module

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64())])


def _rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "v": pa.array([v] * len(ids), pa.int64())}, schema=SCHEMA)


def _replace_and_clean(session, uri: str, v: int) -> None:
    """A new version holding other files, and every older version cleaned up."""
    lance_sql.write_dataset(_rows([1, 2, 3], v), uri, mode="overwrite")
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    session.runtime.clear()  # (no file kept open or mapped from before)


@pytest.fixture
def table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows([1, 2, 3], 0), uri)
    return uri


@pytest.mark.parametrize("collect", ["to_arrow_table", "to_pylist", "collect", "count"])
def test_a_query_planned_before_a_cleanup_is_planned_again(tmp_path: Path, table: str,
                                                           collect: str) -> None:
    session = lance_sql.connect(str(tmp_path))
    frame = session.sql("SELECT id, v FROM t WHERE v >= 0 ORDER BY id")
    _replace_and_clean(session, table, 5)
    got = getattr(frame, collect)()
    if collect == "count":
        assert got == 3
        return
    table_ = pa.Table.from_batches(got) if collect == "collect" else \
        pa.Table.from_pylist(got) if collect == "to_pylist" else got
    assert table_.column("v").to_pylist() == [5, 5, 5]  # the new version's rows


def test_without_the_retry_the_same_query_fails_typed(tmp_path: Path, table: str,
                                                      monkeypatch) -> None:
    """The scenario above does reach the cleaned-up version (the retry is what saves it)."""
    monkeypatch.setattr(session_module, "_CLEANED_UP_ATTEMPTS", 1)
    session = lance_sql.connect(str(tmp_path))
    frame = session.sql("SELECT id, v FROM t WHERE v >= 0")
    _replace_and_clean(session, table, 5)
    with pytest.raises(VersionCleanedUpError):
        frame.to_arrow_table()


def test_a_query_naming_a_version_and_a_stream_are_not_run_again(tmp_path: Path,
                                                                 table: str) -> None:
    session = lance_sql.connect(str(tmp_path))
    pinned = session.sql("SELECT id, v FROM t VERSION AS OF 1 WHERE v >= 0")
    latest = session.sql("SELECT id, v FROM t WHERE v >= 0")
    _replace_and_clean(session, table, 5)
    with pytest.raises(VersionCleanedUpError):
        pinned.to_arrow_table()
    with pytest.raises(VersionCleanedUpError):
        for _ in latest.execute_stream():
            pass


def test_the_attempts_are_bounded(tmp_path: Path, table: str, monkeypatch) -> None:
    """A cleanup striking before every attempt: the query fails typed after
    _CLEANED_UP_ATTEMPTS plans, not in an endless loop."""
    session = lance_sql.connect(str(tmp_path))
    planned = []
    again = session._again

    def struck_again(query: str):
        frame = again(query)
        planned.append(frame)
        _replace_and_clean(session, table, 10 + len(planned))
        return frame

    monkeypatch.setattr(session, "_again", struck_again)
    frame = session.sql("SELECT id, v FROM t WHERE v >= 0")
    _replace_and_clean(session, table, 5)
    with pytest.raises(VersionCleanedUpError):
        frame.to_arrow_table()
    assert len(planned) == session_module._CLEANED_UP_ATTEMPTS - 1
    assert session.sql("SELECT max(v) AS m FROM t").to_pylist() == [{"m": 12}]


def test_an_lsm_view_whose_base_version_was_cleaned_up_is_read_again(tmp_path: Path) -> None:
    """The LSM view of a query planned before a merge, a cleanup of its base version and a
    collection of the merged generation: the query reads the merged rows."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10)), 0), uri)
    lance_sql.dataset(uri).initialize_mem_wal(region_spec=RegionSpec.bucket("id", 1))
    with lance_sql.dataset(uri).mem_wal.writer() as w:  # flushed when closed
        w.put(_rows([5, 1000], 7))
    session = lance_sql.connect(str(tmp_path))
    frame = session.sql("SELECT id, v FROM t WHERE v > 0 ORDER BY id")
    lance_sql.dataset(uri).mem_wal.merge()
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert lance_sql.dataset(uri).mem_wal.collect_garbage().generations
    session.runtime.clear()
    assert frame.to_pylist() == [{"id": 5, "v": 7}, {"id": 1000, "v": 7}]
