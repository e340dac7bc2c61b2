"""System columns named in a query over several tables: each table's wildcard hides its
own, so ``SELECT *, a._rowid FROM a JOIN b ON ...`` plans (DataFusion finds one
``* EXCLUDE (_rowid)`` over two tables that both have it ambiguous), and an LSM view's
``_gen`` / ``_region`` stay out of ``*`` whichever system column the query names."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Plain tables a (ids 0..9) and b (ids 5..14), and an LSM table m over ids 0..9
    with a MemTable row updating id 3."""
    lance_sql.write_dataset(pa.table({"id": list(range(10)), "x": [i * 10 for i in range(10)]}),
                            tmp_path / "a.lance", max_rows_per_file=4)
    lance_sql.write_dataset(pa.table({"id": list(range(5, 15)), "y": list(range(10))}),
                            tmp_path / "b.lance")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("z", pa.string())])
    ds = lance_sql.write_dataset(pa.table({"id": list(range(10)),
                                           "z": [f"z{i}" for i in range(10)]}, schema=schema),
                                 tmp_path / "m.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(pa.table({"id": [3], "z": ["new"]}, schema=schema))
        w.flush_memtable()
    return tmp_path


def test_star_with_a_system_column_over_a_join(root: Path) -> None:
    session = connect(root)
    got = session.sql("SELECT *, a._rowid AS r, b._rowaddr AS s FROM a JOIN b ON a.id = b.id "
                      "ORDER BY a.id").to_arrow_table()
    assert got.column_names == ["id", "x", "id", "y", "r", "s"]
    assert got.column(0).to_pylist() == [5, 6, 7, 8, 9]
    want_a = lance_sql.dataset(root / "a.lance").to_table(columns=["id", "_rowid"])
    want_b = lance_sql.dataset(root / "b.lance").to_table(columns=["id", "_rowaddr"])
    rowid = dict(zip(want_a["id"].to_pylist(), want_a["_rowid"].to_pylist(), strict=True))
    rowaddr = dict(zip(want_b["id"].to_pylist(), want_b["_rowaddr"].to_pylist(), strict=True))
    assert got["r"].to_pylist() == [rowid[i] for i in range(5, 10)]
    assert got["s"].to_pylist() == [rowaddr[i] for i in range(5, 10)]
    # a system column in WHERE only, and a table with an alias: the third fragment's rows
    got = session.sql(f"SELECT * FROM a AS p JOIN b ON p.id = b.id WHERE p._rowid >= {2 << 32} "
                      "ORDER BY p.id").to_arrow_table()
    assert got.column_names == ["id", "x", "id", "y"] and got.column(0).to_pylist() == [8, 9]


def test_lsm_columns_stay_out_of_star(root: Path) -> None:
    session = connect(root)
    got = session.sql("SELECT *, _rowid FROM m ORDER BY id").to_arrow_table()
    assert got.column_names == ["id", "z", "_rowid"]
    assert got["z"].to_pylist()[3] == "new" and got["_rowid"].to_pylist()[3] is None
    got = session.sql("SELECT a.*, m._gen FROM a JOIN m ON a.id = m.id "
                      "ORDER BY a.id").to_arrow_table()
    assert got.column_names == ["id", "x", "_gen"]
    assert got["_gen"].to_pylist() == [-1, -1, -1, 1, -1, -1, -1, -1, -1, -1]
    got = session.sql("SELECT *, m._gen FROM a JOIN m ON a.id = m.id "
                      "ORDER BY a.id").to_arrow_table()
    assert got.column_names == ["id", "x", "id", "z", "_gen"]


def test_a_wildcard_that_cannot_hide_them_is_refused_clearly(root: Path) -> None:
    session = connect(root)
    with pytest.raises(InvalidInputError, match="each table's wildcard"):
        session.sql("SELECT *, a._rowid FROM a JOIN b USING (id)").to_arrow_table()
    got = session.sql("SELECT a.*, b.y, a._rowid FROM a JOIN b USING (id) "
                      "ORDER BY a.id").to_arrow_table()
    assert got.column_names == ["id", "x", "y", "_rowid"] and got.num_rows == 5


def test_a_change_feed_joined_with_its_table(tmp_path: Path) -> None:
    """``table_changes`` has a ``_rowid`` column of its own: ``*`` over it and the table
    keeps it and hides only the table's."""
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "x": [10, 20, 30]}),
                                 tmp_path / "t.lance", enable_stable_row_ids=True)
    ds.update({"x": "x + 1"}, where="id = 2")
    session = connect(tmp_path)
    got = session.sql("SELECT *, t._rowid AS now FROM table_changes('t', 1, 2) c "
                      "JOIN t ON c._rowid = t._rowid").to_arrow_table()
    assert got.column_names[-4:] == ["_rowid", "id", "x", "now"]
    assert got.column_names.count("_rowid") == 1
    rows = got.to_pylist()
    assert {r["_change_type"] for r in rows} >= {"update_postimage"}
    assert all(r["_rowid"] == r["now"] for r in rows)
