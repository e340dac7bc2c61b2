"""A MemWAL table deleted and written again at the same place: its regions have the
same ids (derived from region values), its region manifests and WAL entries the same
numbers, yet LSM scans, ``mw.get`` and SQL read the new table's rows."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import WriterFencedError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal, RoutingWriter

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
KEYS = {"id": pa.array([0, 6, 9, 13], pa.int64())}


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def _build(path: Path, tag: str) -> None:
    ds = lance_sql.write_dataset(_rows(range(10), f"{tag}-base"), str(path))
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(str(path)), RegionSpec.bucket("id", 2),
                           durable_write=False)
    with mw.writer() as w:
        w.put(_rows(range(5, 12), f"{tag}-g1"))
        w.flush_memtable()
        w.put(_rows(range(8, 14), f"{tag}-g2"))
        w.flush_memtable()


def _expected(tag: str) -> dict[str, list[str]]:
    return {"get": [f"{tag}-base0", f"{tag}-g16", f"{tag}-g29", f"{tag}-g213"],
            "scan": [f"{tag}-base{i}" for i in range(5)] + [f"{tag}-g1{i}" for i in (5, 6, 7)]
            + [f"{tag}-g2{i}" for i in range(8, 14)]}


def _reads(path: Path, session: lance_sql.LanceSession) -> dict[str, list[str]]:
    mw = MemWal(lance_sql.dataset(str(path)))
    return {
        "get": mw.get(KEYS).sort_by("id").column("v").to_pylist(),
        "scan": mw.scanner().to_table().sort_by("id").column("v").to_pylist(),
        "sql_get": session.sql("select v from t where id in (0, 6, 9, 13) order by id")
        .to_arrow_table().column("v").to_pylist(),
        "sql_scan": session.sql("select v from t order by id").to_arrow_table()
        .column("v").to_pylist(),
    }


def test_lsm_reads_see_the_table_written_again(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    session = lance_sql.connect()
    session.register("t", str(path))
    _build(path, "A")
    want = _expected("A")
    assert _reads(path, session) == {"get": want["get"], "scan": want["scan"],
                                     "sql_get": want["get"], "sql_scan": want["scan"]}
    shutil.rmtree(path)
    _build(path, "B")
    want = _expected("B")
    assert _reads(path, session) == {"get": want["get"], "scan": want["scan"],
                                     "sql_get": want["get"], "sql_scan": want["scan"]}


def test_a_handle_kept_across_the_rewrite_reads_the_new_table(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    _build(path, "A")
    mw = MemWal(lance_sql.dataset(str(path)))
    assert mw.get(KEYS).sort_by("id").column("v").to_pylist() == _expected("A")["get"]
    shutil.rmtree(path)
    _build(path, "B")  # the same base version number, region ids and manifest numbers
    assert mw.get(KEYS).sort_by("id").column("v").to_pylist() == _expected("B")["get"]
    assert mw.scanner().to_table().sort_by("id").column("v").to_pylist() == \
        _expected("B")["scan"]


def test_wal_entries_of_another_size_under_the_same_names(tmp_path: Path) -> None:
    """The WAL entry files are named by number: cached readers of the old ones once
    made the new generation's fragments a FormatError (row counts that disagree)."""
    path = tmp_path / "t.lance"
    for tag, count in (("A", 7), ("B", 40)):
        if path.exists():
            shutil.rmtree(path)
        lance_sql.write_dataset(_rows(range(10), f"{tag}-base"), str(path))
        mw = MemWal.initialize(lance_sql.dataset(str(path)), RegionSpec.bucket("id", 2),
                               durable_write=False)
        with mw.writer() as w:
            w.put(_rows(range(5, 5 + count), f"{tag}-g"))
            w.flush_memtable()
        got = MemWal(lance_sql.dataset(str(path))).scanner().to_table().sort_by("id")
        assert got.column("v").to_pylist() == (
            [f"{tag}-base{i}" for i in range(5)] + [f"{tag}-g{i}" for i in range(5, 5 + count)])


_BUILD_B = """
import sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from test_recreated_table import _build
_build(Path(sys.argv[1]), "B")
"""


def _open_a_with_rows(path: Path) -> RoutingWriter:
    """Table A with a writer holding keys 20..25 in its MemTables only (no WAL flush)."""
    _build(path, "A")
    writer = MemWal(lance_sql.dataset(str(path))).writer(
        durable_write=False, max_wal_flush_interval_ms=3_600_000)
    assert isinstance(writer, RoutingWriter)
    writer.put(_rows(range(20, 26), "A-mem"))
    got = MemWal(lance_sql.dataset(str(path))).get({"id": pa.array([20], pa.int64())})
    assert got.column("v").to_pylist() == ["A-mem20"]
    return writer


def test_a_writer_of_the_deleted_table_is_not_read_by_the_new_ones_readers(tmp_path: Path
                                                                          ) -> None:
    """A writer still open on table A when A is deleted and B written at its place (by
    another process: this one's registry keeps A's writer under the same region ids):
    readers of B saw A's MemTable rows."""
    path = tmp_path / "t.lance"
    writer = _open_a_with_rows(path)
    try:
        shutil.rmtree(path)
        env = dict(os.environ, PYTHONPATH=str(Path(lance_sql.__file__).parents[1]))
        subprocess.run([sys.executable, "-c", _BUILD_B, str(path), str(Path(__file__).parent)],
                       env=env, check=True, timeout=300)
        session = lance_sql.connect()
        session.register("t", str(path))
        want = _expected("B")
        assert _reads(path, session) == {"get": want["get"], "scan": want["scan"],
                                         "sql_get": want["get"], "sql_scan": want["scan"]}
        with pytest.raises(WriterFencedError, match="deleted or written again"):
            writer.flush()  # (its rows must not reach B's WAL either)
    finally:
        for w in writer.writers:
            w.abort()


def test_warm_one_key_gets_of_the_new_table_skip_the_old_writer(tmp_path: Path) -> None:
    """The same, for one handle's gets after its first: a warm strong read checks this
    process's writer of a region against the manifest directory it stamps anyway (the
    writer's last manifest is a file of table A, gone with it), key by key."""
    path = tmp_path / "t.lance"
    writer = _open_a_with_rows(path)
    try:
        shutil.rmtree(path)
        env = dict(os.environ, PYTHONPATH=str(Path(lance_sql.__file__).parents[1]))
        subprocess.run([sys.executable, "-c", _BUILD_B, str(path), str(Path(__file__).parent)],
                       env=env, check=True, timeout=300)
        mw = MemWal(lance_sql.dataset(str(path)))
        for _ in range(2):  # (the first get lists the regions; the others are warm)
            for key in range(20, 26):
                assert mw.get({"id": [key]}).num_rows == 0
            assert mw.get({"id": [13]}).column("v").to_pylist() == ["B-g213"]
    finally:
        for w in writer.writers:
            w.abort()


def test_a_writer_of_the_deleted_table_writes_nothing_into_the_new_one(tmp_path: Path
                                                                       ) -> None:
    """Its WAL entries landed in B's WAL (same region ids and entry numbers), and B's
    next writer replayed them as B's rows."""
    path = tmp_path / "t.lance"
    writer = _open_a_with_rows(path)
    try:
        shutil.rmtree(path)
        _build(path, "B")  # (B's writers replace A's in this process's registry)
        entries = sorted(p.name for p in path.glob("_mem_wal/*/wal/*"))
        with pytest.raises(WriterFencedError, match="deleted or written again"):
            writer.flush()
        assert sorted(p.name for p in path.glob("_mem_wal/*/wal/*")) == entries
        with MemWal(lance_sql.dataset(str(path))).writer() as b:
            b.put(_rows(range(30, 31), "B-late"))
        got = MemWal(lance_sql.dataset(str(path))).scanner().to_table().sort_by("id")
        assert got.column("v").to_pylist() == _expected("B")["scan"] + ["B-late30"]
    finally:
        for w in writer.writers:
            w.abort()


def test_a_put_into_a_deleted_table_is_refused_as_fenced(tmp_path: Path) -> None:
    """A writer whose table was deleted: a put says so as a flush does (WriterFencedError,
    what a caller catches to open a new writer), not as a missing file."""
    path = tmp_path / "t.lance"
    writer = _open_a_with_rows(path)
    try:
        shutil.rmtree(path)
        with pytest.raises(WriterFencedError, match="gone"):
            writer.put(_rows(range(30, 31), "late"))
    finally:
        for w in writer.writers:
            w.abort()


def test_a_mem_wal_set_up_again_with_another_region_spec(tmp_path: Path) -> None:
    """The README's way to start a MemWAL over: overwrite the table, remove ``_mem_wal/``
    and set one up again, here with another spec. A region's id derives from its spec id
    and region values alone, so the new spec's NULL region has the old one's id: the
    process's cached region values (``identity_cat``, a string) were taken for the new
    region's (``bucket_cat``, an int32), and every LSM read that listed both the NULL
    region and another failed as a damaged manifest."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("cat", pa.string())])
    rows = pa.table({"id": [1, 2], "cat": ["a", None]}, schema=schema)
    news = pa.table({"id": [3, 4], "cat": [None, "b"]}, schema=schema)
    path = tmp_path / "t.lance"
    mw = lance_sql.write_dataset(rows, path).initialize_mem_wal(RegionSpec.identity("cat"))
    with mw.writer() as w:
        w.put(news)
    assert mw.scanner(filter="cat IS NULL").to_table().num_rows == 2
    ds = lance_sql.write_dataset(rows, path, mode="overwrite")
    shutil.rmtree(path / "_mem_wal")
    mw = ds.initialize_mem_wal(RegionSpec.bucket("cat", 4))
    with mw.writer() as w:
        w.put(news)
    fresh = lance_sql.dataset(path).mem_wal
    assert fresh is not None
    assert sorted(fresh.scanner(filter="cat IS NULL").to_table().column("id").to_pylist()) \
        == [2, 3]
    session = lance_sql.connect(tmp_path)
    got = session.sql("SELECT id FROM t WHERE cat IS NULL OR cat = 'b' ORDER BY id")
    assert got.to_arrow_table().column("id").to_pylist() == [2, 3, 4]
