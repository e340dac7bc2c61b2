"""``_rowid`` and the row versions on the LSM view: a row read from the base table keeps
the base table's own values; a row not merged yet (a flushed generation's or a MemTable's)
has none yet, so they are NULL — and filters on them see exactly that."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import UnsupportedFeatureError
from lance_sql.format.region_spec import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
IDS = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def _by_id(table: pa.Table) -> dict[int, dict]:
    return {r.pop("id"): r for r in table.to_pylist()}


def test_base_rows_keep_their_row_ids_and_unmerged_rows_have_none(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(list(range(10)), "a"), uri, enable_stable_row_ids=True,
                                 max_rows_per_file=4)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    start = mw.dataset.version
    with mw.writer() as w:
        w.put(_rows([1, 2, 20], "b"))
        w.flush_memtable()
    assert mw.merge()
    w = mw.writer()
    try:
        w.put(_rows([3, 21], "c"))
        w.flush_memtable()
        w.put(_rows([4, 22], "d"))  # stays in the MemTable
        base = _by_id(lance_sql.dataset(uri).to_table(columns=["id", *IDS]))
        unmerged = {3, 4, 21, 22}
        view = mw.scanner(["id", *IDS, "_gen"]).to_table()
        got = _by_id(view)
        assert set(got) == set(range(10)) | {20, 21, 22}
        for key, row in got.items():
            gen = row.pop("_gen")
            if key in unmerged:
                assert gen > 0 and row == dict.fromkeys(IDS), key
            else:
                assert gen == -1 and row == base[key], key
        assert base[1]["_row_last_updated_at_version"] > start  # merged, same row id
        assert base[1]["_rowid"] == 1 and base[1]["_row_created_at_version"] == 1
        # filters: exact on the newest row; a stale base row never matches
        assert mw.scanner(["id"], filter=f"_rowid = {base[5]['_rowid']}").to_table()[
            "id"].to_pylist() == [5]
        assert mw.scanner(["id"], filter=f"_rowid = {base[3]['_rowid']}").to_table(
        ).num_rows == 0  # id 3's newest row is not merged yet
        assert sorted(mw.scanner(["id"], filter="_rowid IS NULL").to_table()[
            "id"].to_pylist()) == sorted(unmerged)
        assert sorted(mw.scanner(["id"], filter=f"_row_last_updated_at_version > {start}"
                                 ).to_table()["id"].to_pylist()) == [1, 2, 20]
        looked = _by_id(mw.get({"id": [5, 3, 4]}, ["id", "_rowid"]))
        assert looked == {5: {"_rowid": base[5]["_rowid"]}, 3: {"_rowid": None},
                          4: {"_rowid": None}}
        # SQL: the same values, hidden from *
        session = lance_sql.connect(str(tmp_path))
        sql = session.sql("SELECT id, _rowid, _row_created_at_version, "
                          "_row_last_updated_at_version FROM t").to_arrow_table()
        assert _by_id(sql) == {k: {c: r[c] for c in IDS} for k, r in got.items()}
        assert session.sql("SELECT * FROM t").to_arrow_table().column_names == ["id", "v"]
        assert session.sql(f"SELECT id FROM t WHERE _rowid = {base[3]['_rowid']}"
                           ).to_arrow_table().num_rows == 0
        point = session.sql("SELECT id, _rowid FROM t WHERE id IN (5, 4)").to_arrow_table()
        assert _by_id(point) == {5: {"_rowid": base[5]["_rowid"]}, 4: {"_rowid": None}}
    finally:
        w.close()


def test_row_versions_need_stable_row_ids_on_the_view_too(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_rows(list(range(4)), "a"), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as w:
        w.put(_rows([1], "b"))
        w.flush_memtable()
    # without stable row ids a base row's id is its address, as on the table itself
    base = _by_id(lance_sql.dataset(ds.uri).to_table(columns=["id", "_rowid"]))
    got = _by_id(mw.scanner(["id", "_rowid"]).to_table())
    assert got == {0: base[0], 1: {"_rowid": None}, 2: base[2], 3: base[3]}
    with pytest.raises(UnsupportedFeatureError, match="stable row ids"):
        mw.scanner(["id", "_row_created_at_version"]).to_table()
    session = lance_sql.connect(str(tmp_path))
    with pytest.raises(UnsupportedFeatureError, match="stable row ids"):
        session.sql("SELECT id, _row_last_updated_at_version FROM t").to_arrow_table()


def test_scanner_takes_the_plain_scanners_row_id_flags(tmp_path: Path) -> None:
    """``with_row_id`` / ``with_row_address`` add the columns (they were a TypeError)."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows([1, 2], "a"), uri, enable_stable_row_ids=True)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as w:
        w.put(_rows([2, 3], "b"))
    got = mw.scanner(with_row_id=True, with_row_address=True).to_table()
    assert got.column_names == ["id", "v", "_rowid", "_rowaddr"]
    assert {r["id"]: r["_rowid"] for r in got.to_pylist()} == {1: 0, 2: None, 3: None}
    named = mw.scanner(["v", "_rowid"], with_row_id=True).to_table()
    assert named.column_names == ["v", "_rowid"]
