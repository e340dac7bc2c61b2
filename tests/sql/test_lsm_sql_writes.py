"""SQL row writes on a MemWAL table are refused: they would go into its base table,
where the LSM view hides them behind newer region rows or reads a key twice.

Each refused statement is a typed error that commits nothing, and the table still
reads as before; schema changes, tags and plain tables are unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import StatementRefusedError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64())])


@pytest.fixture
def lsm(tmp_path: Path):
    """Base ids 1, 2, 3; a flushed generation: 2, 4; the MemTable: 3."""
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "v": [0.1, 0.2, 0.3]},
                                          schema=SCHEMA), tmp_path / "lsm.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    w.put(pa.table({"id": [2, 4], "v": [2.0, 4.0]}, schema=SCHEMA))
    w.flush_memtable()
    w.put(pa.table({"id": [3], "v": [3.0]}, schema=SCHEMA))
    try:
        yield tmp_path
    finally:
        w.close()


VIEW = {"id": [1, 2, 3, 4], "v": [0.1, 2.0, 3.0, 4.0]}


@pytest.mark.parametrize("sql", [
    "UPDATE lsm SET v = -1 WHERE id = 3",          # was: 1 row updated, the view unchanged
    "DELETE FROM lsm WHERE id = 2",                # was: 1 row deleted, id 2 still read
    "DELETE FROM lsm WHERE id IN (SELECT 2)",      # a subquery condition: refused alike
    "UPDATE lsm SET v = -1 WHERE EXISTS (SELECT 1 FROM lsm AS o WHERE o.id = lsm.id)",
    "UPDATE lsm SET v = (SELECT max(v) FROM lsm)",
    "INSERT INTO lsm VALUES (1, 9.9)",             # was: id 1 read twice
    "INSERT OVERWRITE lsm SELECT 5 AS id, 5.0 AS v",
    "TRUNCATE TABLE lsm",
    "MERGE INTO lsm USING (VALUES (1, 11.0)) AS s(id, v) ON lsm.id = s.id "
    "WHEN MATCHED THEN UPDATE SET *",
    "MERGE INTO lsm USING (VALUES (1, 11.0)) AS s(id, v) ON lsm.id = s.id "  # general path
    "WHEN MATCHED AND s.v > lsm.v THEN DELETE WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
])
def test_row_writes_to_a_mem_wal_table_are_refused_and_change_nothing(lsm: Path,
                                                                      sql: str) -> None:
    session = connect(lsm)
    before = lance_sql.dataset(lsm / "lsm.lance").version
    with pytest.raises(StatementRefusedError, match="has a MemWAL"):
        session.sql(sql)
    assert lance_sql.dataset(lsm / "lsm.lance").version == before
    assert session.sql("SELECT * FROM lsm ORDER BY id").to_pydict() == VIEW


def test_schema_changes_and_tags_still_run_and_plain_tables_take_row_writes(
        lsm: Path) -> None:  # fmt: skip
    session = connect(lsm)
    session.sql("ALTER TABLE lsm CREATE TAG before")
    assert "before" in lance_sql.dataset(lsm / "lsm.lance").tags.list()
    session.sql("CREATE TABLE plain AS SELECT * FROM (VALUES (1, 0.1), (2, 2.0), (3, 3.0), "
                "(4, 4.0)) AS v(id, v)")
    session.sql("UPDATE plain SET v = -1 WHERE id = 3")
    session.sql("INSERT INTO plain VALUES (5, 5.0)")
    assert session.sql("SELECT * FROM plain ORDER BY id").to_pydict() == \
        {"id": [1, 2, 3, 4, 5], "v": [0.1, 2.0, -1.0, 4.0, 5.0]}
