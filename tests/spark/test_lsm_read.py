"""``spark.read.format("lance")`` of a MemWAL table: the LSM view, one partition per region."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("g", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "g": [i % 2 for i in ids], "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def _lsm(path: Path, spec: RegionSpec, deletes: bool = True) -> MemWal:
    """Base 0..39, one merged generation, then unmerged ones (updates, new keys,
    deletes); every writer closed."""
    ds = lance_sql.write_dataset(_rows(list(range(40)), "base"), str(path),
                                 max_rows_per_file=16)
    mw = ds.initialize_mem_wal(spec)
    with mw.writer() as w:
        w.put(_rows(list(range(0, 40, 5)), "first"))
        w.flush_memtable()
    mw.merge()
    with mw.writer() as w:
        w.put(_rows([1, 2, 3, 4, 5, 6, 50, 51, 52, 53], "second"))
        if deletes:
            w.delete(pa.table({"id": pa.array([7, 8, 9, 10, 11], pa.int64())}))
        w.flush_memtable()
        w.put(_rows([2, 3, 60, 61, 62], "third"))
        w.flush_memtable()
    return MemWal(lance_sql.dataset(str(path)))


def _sorted(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, MemWal]:
    path = tmp_path_factory.mktemp("lsm") / "t.lance"
    return str(path), _lsm(path, RegionSpec.bucket("id", 3))


def test_reads_the_lsm_view_one_partition_per_region(spark, table) -> None:
    uri, mw = table
    df = spark.read.format("lance").load(uri)
    assert df.columns == ["id", "g", "v"]
    assert _sorted(df.toArrow()) == _sorted(mw.scanner().to_table())
    assert df.rdd.getNumPartitions() == len(mw.regions()) == 3
    assert df.filter("v LIKE 'third%'").count() == 5  # filters apply to the newest rows
    assert df.filter("id = 7").count() == 0           # deleted
    got = spark.read.format("lance").option("columns", "v,id").load(uri).toArrow()
    assert got.column_names == ["v", "id"]
    assert _sorted(got) == _sorted(mw.scanner(["v", "id"]).to_table())


def test_base_only_reads_the_base_table(spark, table) -> None:
    uri, mw = table
    df = spark.read.format("lance").option("baseOnly", "true").load(uri)
    assert _sorted(df.toArrow()) == _sorted(lance_sql.dataset(uri).to_table())
    assert df.filter("id = 7").count() == 1  # its delete is not merged yet
    with pytest.raises(Exception, match="baseOnly"):
        spark.read.format("lance").option("withRowId", "true").load(uri).collect()


def test_spec_over_a_non_key_column_reads_in_one_partition(spark, tmp_path: Path) -> None:
    mw = _lsm(tmp_path / "t.lance", RegionSpec.identity("g"), deletes=False)
    assert len(mw.regions()) == 2
    df = spark.read.format("lance").load(mw.dataset.uri)
    assert df.rdd.getNumPartitions() == 1
    assert _sorted(df.toArrow()) == _sorted(mw.scanner().to_table())
