"""Schema changes a table with a MemWAL must refuse or make consistently:

* the columns its writers route rows by (primary key, region-spec sources) may not be
  dropped or retyped: the key's new rows would go to another region than its old ones;
* a type change must fit the values the MemWAL holds unmerged (generations, WAL
  entries, open MemTables), and those values are cast as the base table's were, so a
  read (filters included) gives the same rows before and after the merge;
* a table checked out at an older version reads its MemWAL as of that version."""

from __future__ import annotations

import datetime
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.memwal import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
KEY = pa.field("id", pa.int64(), nullable=False, metadata=PK)


def _table(tmp_path: Path, value: pa.Field, rows: dict, spec: RegionSpec | None = None
           ) -> str:
    schema = pa.schema([KEY, value, pa.field("c", pa.string())])
    table = pa.table({"id": rows["id"], value.name: pa.array(rows["v"], value.type),
                      "c": ["a"] * len(rows["id"])}, schema=schema)
    ds = lance_sql.write_dataset(table, str(tmp_path / "t.lance"))
    ds.initialize_mem_wal(region_spec=spec or RegionSpec.bucket("id", 2))
    return ds.uri


def _put(uri: str, ids: list[int], values: list, t: pa.DataType, *, flush: bool = True,
         close: bool = True):
    writer = lance_sql.dataset(uri).mem_wal.writer()
    writer.put(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(values, t),
                         "c": ["b"] * len(ids)}))
    if flush:
        writer.flush_memtable()
    if close:
        writer.close(flush_memtable=False)
    return writer


@pytest.mark.parametrize(("column", "spec"), [
    ("id", RegionSpec.bucket("id", 2)),
    ("c", RegionSpec.identity("c")),
])
def test_routing_columns_are_neither_dropped_nor_retyped(tmp_path: Path, column: str,
                                                        spec: RegionSpec) -> None:
    uri = _table(tmp_path, pa.field("v", pa.int64()), {"id": [0, 1], "v": [0, 1]}, spec)
    _put(uri, [1], [10], pa.int64())
    version = lance_sql.dataset(uri).version
    with pytest.raises(SchemaError, match="route"):
        lance_sql.dataset(uri).drop_columns([column])
    new_type = pa.int32() if column == "id" else pa.large_string()
    with pytest.raises(SchemaError, match="route"):
        lance_sql.dataset(uri).alter_columns({"path": column, "data_type": new_type})
    ds = lance_sql.dataset(uri)
    assert ds.version == version  # nothing committed
    assert sorted(ds.mem_wal.scanner(["id", "v"]).to_table().to_pylist(),
                  key=lambda r: r["id"]) == [{"id": 0, "v": 0}, {"id": 1, "v": 10}]
    # a rename keeps the field id: still allowed, and lookups still find the key
    ds.alter_columns({"path": column, "name": column + "_renamed"})
    key = "id_renamed" if column == "id" else "id"
    got = lance_sql.dataset(uri).mem_wal.get(pa.table({key: [1]}))
    assert got.column("v").to_pylist() == [10]


def test_a_dropped_column_without_the_mem_wal_is_still_dropped(tmp_path: Path) -> None:
    uri = _table(tmp_path, pa.field("v", pa.int64()), {"id": [0], "v": [0]})
    lance_sql.dataset(uri).drop_columns(["v"])
    assert lance_sql.dataset(uri).schema.names == ["id", "c"]


@pytest.mark.parametrize("where", ["generation", "wal", "memtable"])
def test_a_type_change_must_fit_the_unmerged_values(tmp_path: Path, where: str) -> None:
    uri = _table(tmp_path, pa.field("v", pa.int64()), {"id": [0, 1], "v": [0, 1]})
    big = 5_000_000_000  # no int32
    writer = _put(uri, [1, 5], [big, 500], pa.int64(), flush=where == "generation",
                  close=where != "memtable")  # (wal: closed unflushed, as after a crash)
    version = lance_sql.dataset(uri).version
    try:
        with pytest.raises(SchemaError, match="5000000000"):
            lance_sql.dataset(uri).alter_columns({"path": "v", "data_type": pa.int32()})
        assert lance_sql.dataset(uri).version == version
        # values that fit change
        lance_sql.dataset(uri).alter_columns({"path": "v", "data_type": pa.float64()})
    finally:
        if where == "memtable":
            writer.close()
    mw = lance_sql.dataset(uri).mem_wal
    if where == "wal":
        mw.recover(idle=timedelta(0))
    rows = {r["id"]: r["v"] for r in mw.scanner(["id", "v"]).to_table().to_pylist()}
    assert rows == {0: 0.0, 1: float(big), 5: 500.0}
    with lance_sql.dataset(uri).mem_wal.writer() as w:  # the region takes puts again
        w.put(pa.table({"id": [7], "v": [7.5], "c": ["x"]}))
    assert lance_sql.dataset(uri).mem_wal.get(pa.table({"id": [7]})).column(
        "v").to_pylist() == [7.5]


def test_unmerged_values_are_cast_as_the_base_was(tmp_path: Path) -> None:
    """timestamp[ms] -> [s] cuts toward zero in the base; the generation's values too, in
    scans, gets and the merge (a safe cast refused them)."""
    t = datetime.datetime(2024, 1, 1, 0, 0, 0, 700000)
    uri = _table(tmp_path, pa.field("v", pa.timestamp("ms")), {"id": [0], "v": [t]})
    _put(uri, [1], [t], pa.timestamp("ms"))
    lance_sql.dataset(uri).alter_columns({"path": "v", "data_type": pa.timestamp("s")})
    cut = datetime.datetime(2024, 1, 1)
    mw = lance_sql.dataset(uri).mem_wal
    assert [r["v"] for r in mw.scanner(["id", "v"]).to_table().to_pylist()] == [cut, cut]
    assert mw.get(pa.table({"id": [1]})).column("v").to_pylist() == [cut]
    mw.merge()
    assert lance_sql.dataset(uri).to_table().column("v").to_pylist() == [cut, cut]


@pytest.mark.parametrize(("old", "new", "values", "condition"), [
    (pa.int32(), pa.string(), [100, 9], "v > '50'"),  # text order: '9' > '50' > '100'
    (pa.int32(), pa.string(), [100, 9], "v LIKE '1%'"),
    (pa.float64(), pa.float32(), [0.1, 0.5], "v = 0.1"),  # 0.1 as float32 is not 0.1
])
def test_filters_on_a_retyped_column_see_the_cast_values(tmp_path: Path, old: pa.DataType,
                                                        new: pa.DataType, values: list,
                                                        condition: str) -> None:
    uri = _table(tmp_path, pa.field("v", old), {"id": [0], "v": values[:1]})
    _put(uri, [1, 2], values, old)  # a flushed generation
    writer = _put(uri, [3, 4], values, old, flush=False, close=False)  # an open MemTable
    try:
        lance_sql.dataset(uri).alter_columns({"path": "v", "data_type": new})
        python = sorted(r["id"] for r in lance_sql.dataset(uri).mem_wal.scanner(
            ["id"], filter=condition).to_table().to_pylist())
        sql = sorted(lance_sql.connect(tmp_path).sql(
            f"SELECT id FROM t WHERE {condition}").to_arrow_table().column("id").to_pylist())
    finally:
        writer.close()
    lance_sql.dataset(uri).mem_wal.merge()
    merged = sorted(r["id"] for r in lance_sql.dataset(uri).to_table(
        columns=["id"], filter=condition).to_pylist())
    assert python == sql == merged
    assert python == {"v > '50'": [2, 4], "v LIKE '1%'": [0, 1, 3], "v = 0.1": []}[condition]


def test_a_checked_out_version_reads_its_mem_wal_as_of_it(tmp_path: Path) -> None:
    uri = _table(tmp_path, pa.field("v", pa.int64()), {"id": [0, 1], "v": [0, 1]})
    _put(uri, [1], [10], pa.int64())
    lance_sql.dataset(uri).mem_wal.refresh_index()
    then = lance_sql.dataset(uri).version
    lance_sql.dataset(uri).alter_columns({"path": "v", "name": "w"})
    writer = lance_sql.dataset(uri).mem_wal.writer()
    try:
        writer.put(pa.table({"id": [1], "w": [99], "c": ["z"]}))
        old = {"id": 1, "v": 10}
        for ds in (lance_sql.dataset(uri).checkout_version(then),
                   lance_sql.dataset(uri, version=then)):
            assert ds.mem_wal.get(pa.table({"id": [1]}), ["id", "v"]).to_pylist() == [old]
            scanned = ds.mem_wal.scanner(["id", "v"]).to_table().to_pylist()
            assert sorted(scanned, key=lambda r: r["id"]) == [{"id": 0, "v": 0}, old]
        latest = lance_sql.dataset(uri).mem_wal  # strong: the open MemTable's row
        assert latest.get(pa.table({"id": [1]}), ["w"]).to_pylist() == [{"w": 99}]
    finally:
        writer.close()
