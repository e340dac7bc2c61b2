"""SQL filters and lookups on BTREE-indexed columns of every key type a filter can name:
unsigned integers, large strings and binaries too (their literals were once refused while
the index planner wrote its plan's label). Plain tables and a MemWAL table's LSM view
after a merge (the base then has a fragment the index does not cover)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
TYPES = {
    "uint8": (pa.uint8(), [1, 2, 3], ["1", "3"]),
    "uint16": (pa.uint16(), [1, 2, 3], ["1", "3"]),
    "uint32": (pa.uint32(), [1, 2, 3], ["1", "3"]),
    "uint64": (pa.uint64(), [1, 2, 2**63 + 5], ["1", str(2**63 + 5)]),
    "large_string": (pa.large_string(), ["a", "b", "c"], ["'a'", "'c'"]),
    "binary": (pa.binary(), [b"a", b"b", b"\xff"], ["X'61'", "X'FF'"]),
}


@pytest.fixture(params=list(TYPES), ids=list(TYPES))
def tables(request: pytest.FixtureRequest, tmp_path: Path):
    typ, values, literals = TYPES[request.param]
    schema = pa.schema([pa.field("id", typ, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])

    def rows(keys: list, v: int) -> pa.Table:
        return pa.table({"id": pa.array(keys, typ), "v": [v] * len(keys)}, schema=schema)

    plain = lance_sql.write_dataset(rows(values, 10), str(tmp_path / "p.lance"))
    plain.create_scalar_index("id", "BTREE")
    lsm = lance_sql.write_dataset(rows(values[:2], 10), str(tmp_path / "t.lance"))
    lsm.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(str(tmp_path / "t.lance")),
                           RegionSpec.bucket("id", 2), durable_write=False)
    with mw.writer() as w:  # merged below: the base gains a fragment the index lacks
        w.put(rows(values[2:], 10))
        w.flush_memtable()
    mw.merge()
    return tmp_path, values, literals, typ


def test_sql_filters_on_an_indexed_key(tables) -> None:
    root, values, (first, last), _ = tables
    session = lance_sql.connect(str(root))
    for table in ("p", "t"):
        def ids(where: str, table: str = table) -> list:
            got = session.sql(f"SELECT id FROM {table} WHERE {where}").to_arrow_table()
            return sorted(got.column("id").to_pylist())

        assert ids(f"id = {first}") == [values[0]], table
        assert ids(f"id IN ({first}, {last})") == sorted([values[0], values[2]]), table
        assert ids(f"id <> {first}") == sorted(values[1:]), table


def test_python_filters_and_lookups_on_an_indexed_key(tables) -> None:
    root, values, (first, last), typ = tables
    assert lance_sql.dataset(str(root / "p.lance")).to_table(
        filter=f"id = {first} OR id = {last}").column("id").to_pylist() == \
        [values[0], values[2]]
    mw = lance_sql.dataset(str(root / "t.lance")).mem_wal
    got = mw.get(pa.table({"id": pa.array(values, typ)}))
    assert sorted(got.column("id").to_pylist()) == sorted(values)
    assert mw.scanner(filter=f"id = {last}").to_table().column("id").to_pylist() == \
        [values[2]]
