"""A table deleted and written again at the same place (versions numbered from 1 again)
reads as the new table, through the same process's caches and a session registered
before, and when another process wrote it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import lance_sql


def _write(path: Path, ids: list[int], tag: str, *, index: bool = False) -> None:
    ds = lance_sql.write_dataset(
        pa.table({"id": pa.array(ids, pa.int64()), "s": [f"{tag}{i}" for i in ids]}),
        str(path))
    if index:
        ds.create_scalar_index("id", "BTREE")


def _sql(session: lance_sql.LanceSession, query: str) -> list[dict]:
    return session.sql(query).to_arrow_table().to_pylist()


def test_dataset_and_a_session_read_the_new_table(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    _write(path, [1, 2, 3], "a")
    session = lance_sql.connect()
    session.register("t", str(path))
    assert _sql(session, "select id, s from t order by id")[0] == {"id": 1, "s": "a1"}
    assert lance_sql.dataset(str(path)).to_table().num_rows == 3
    shutil.rmtree(path)
    _write(path, [7, 8, 9], "b")  # same shape: same manifest size, maybe the same inode
    assert lance_sql.dataset(str(path)).to_table().column("s").to_pylist() == ["b7", "b8", "b9"]
    assert _sql(session, "select id, s from t order by id") == [
        {"id": 7, "s": "b7"}, {"id": 8, "s": "b8"}, {"id": 9, "s": "b9"}]
    assert _sql(session, "select count(*) as n from t where id < 5") == [{"n": 0}]


def test_an_indexed_lookup_reads_the_new_table(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    _write(path, list(range(100)), "a", index=True)
    session = lance_sql.connect()
    session.register("t", str(path))
    assert _sql(session, "select s from t where id = 42") == [{"s": "a42"}]
    shutil.rmtree(path)
    _write(path, list(range(50, 150)), "b", index=True)
    assert _sql(session, "select s from t where id = 42") == []
    assert _sql(session, "select s from t where id = 60") == [{"s": "b60"}]
    got = lance_sql.dataset(str(path)).to_table(filter="id = 60").column("s").to_pylist()
    assert got == ["b60"]


_REWRITE = """
import shutil, sys
import pyarrow as pa
import lance_sql
path = sys.argv[1]
shutil.rmtree(path)
ds = lance_sql.write_dataset(pa.table({"id": pa.array([5, 6], pa.int64()),
                                       "s": ["other5", "other6"]}), path)
ds.create_scalar_index("id", "BTREE")
"""


def test_a_table_written_again_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    _write(path, [5, 6], "a", index=True)
    session = lance_sql.connect()
    session.register("t", str(path))
    assert _sql(session, "select s from t where id = 5") == [{"s": "a5"}]
    assert _sql(session, "select s from t order by id") == [{"s": "a5"}, {"s": "a6"}]
    subprocess.run([sys.executable, "-c", _REWRITE, str(path)], check=True, timeout=120)
    assert _sql(session, "select s from t where id = 5") == [{"s": "other5"}]
    assert _sql(session, "select s from t order by id") == [{"s": "other5"}, {"s": "other6"}]
    assert lance_sql.dataset(str(path)).to_table().column("s").to_pylist() == [
        "other5", "other6"]


def test_time_travel_reads_the_new_tables_versions(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    _write(path, [1, 2], "a")
    lance_sql.write_dataset(pa.table({"id": pa.array([3], pa.int64()), "s": ["a3"]}),
                            str(path), mode="append")
    session = lance_sql.connect()
    session.register("t", str(path))
    assert _sql(session, "select count(*) as n from t") == [{"n": 3}]  # version 2, probed
    assert _sql(session, "select count(*) as n from t version as of 1") == [{"n": 2}]
    shutil.rmtree(path)
    _write(path, [4], "b")
    lance_sql.write_dataset(pa.table({"id": pa.array([5, 6, 7], pa.int64()),
                                      "s": ["b5", "b6", "b7"]}), str(path), mode="append")
    assert _sql(session, "select s from t version as of 1") == [{"s": "b4"}]
    assert _sql(session, "select s from t version as of 2 order by id") == [
        {"s": "b4"}, {"s": "b5"}, {"s": "b6"}, {"s": "b7"}]
    assert _sql(session, "select count(*) as n from t") == [{"n": 4}]
