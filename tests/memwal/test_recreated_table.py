"""A MemWAL table deleted and written again at the same place: its regions have the
same ids (derived from region values), its region manifests and WAL entries the same
numbers, yet LSM scans, ``mw.get`` and SQL read the new table's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

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
