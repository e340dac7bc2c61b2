"""``spark.read.format("lance")`` of a MemWAL table: the LSM view, one partition per region."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import StatementRefusedError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import MemWal
from lance_sql.spark import write_dataset

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


def test_reads_the_lsm_view(spark, table) -> None:
    uri, mw = table
    df = spark.read.format("lance").load(uri)
    assert df.columns == ["id", "g", "v"]
    assert _sorted(df.toArrow()) == _sorted(mw.scanner().to_table())
    assert df.count() == mw.scanner().count_rows()
    assert df.filter("v LIKE 'third%'").count() == 5  # filters apply to the newest rows
    assert df.filter("id = 7").count() == 0           # deleted
    got = spark.read.format("lance").option("columns", "v,id").load(uri).toArrow()
    assert got.column_names == ["v", "id"]
    assert _sorted(got) == _sorted(mw.scanner(["v", "id"]).to_table())


def test_many_partitions_read_the_base_once_and_each_region_whole(spark, table) -> None:
    """Base fragments cut into many partitions (row ranges), regions' parts spread over
    them: still the view, each row once."""
    uri, mw = table

    def load():  # a DataFrame per query (see the pushdown pitfall below)
        return (spark.read.format("lance").option("maxPartitionBytes", "1")
                .option("openCostInBytes", "1").option("minPartitions", "4").load(uri))

    assert load().rdd.getNumPartitions() >= 4
    assert _sorted(load().toArrow()) == _sorted(mw.scanner().to_table())
    assert load().count() == mw.scanner().count_rows()
    for where in FILTERS:
        assert _sorted(load().filter(where).toArrow()) == _sorted(
            mw.scanner(filter=where).to_table()), where


def test_rows_per_partition_cuts_the_base_of_the_view_too(spark, table) -> None:
    """``rowsPerPartition`` cuts the view's base into chunks of that many rows, as it
    cuts a table read (it was ignored: one partition by bytes); still the view."""
    uri, mw = table
    base = lance_sql.dataset(uri)
    chunks = sum(-(-f.physical_rows // 5) for f in base.manifest.fragments)

    def load():
        return spark.read.format("lance").option("rowsPerPartition", "5").load(uri)

    assert load().rdd.getNumPartitions() == chunks
    assert _sorted(load().toArrow()) == _sorted(mw.scanner().to_table())
    assert load().filter("v LIKE 'third%'").count() == 5


def test_base_only_reads_the_base_table(spark, table) -> None:
    uri, mw = table
    df = spark.read.format("lance").option("baseOnly", "true").load(uri)
    assert _sorted(df.toArrow()) == _sorted(lance_sql.dataset(uri).to_table())
    assert df.filter("id = 7").count() == 1  # its delete is not merged yet
    # the view's _rowid: the base table's on its rows, NULL on rows not merged yet
    got = spark.read.format("lance").option("withRowId", "true").load(uri).toArrow()
    assert got.column_names == ["id", "g", "v", "_rowid"]
    ids = {r["id"]: r["_rowid"] for r in got.to_pylist()}
    want = mw.scanner(["id", "_rowid", "_gen"]).to_table().to_pylist()
    assert ids == {r["id"]: r["_rowid"] for r in want}
    base = {r["id"]: r["_rowid"] for r in lance_sql.dataset(uri).to_table(
        columns=["id", "_rowid"]).to_pylist()}
    assert all(ids[r["id"]] == (base[r["id"]] if r["_gen"] < 0 else None) for r in want)
    assert ids[39] == base[39] and ids[2] is None  # 2 was updated since the merge


def test_spec_over_a_non_key_column_is_split_too(spark, tmp_path: Path) -> None:
    mw = _lsm(tmp_path / "t.lance", RegionSpec.identity("g"), deletes=False)
    assert len(mw.regions()) == 2
    df = (spark.read.format("lance").option("minPartitions", "3")
          .option("openCostInBytes", "1").load(mw.dataset.uri))
    assert df.rdd.getNumPartitions() == 3
    assert _sorted(df.toArrow()) == _sorted(mw.scanner().to_table())
    for where in ("g = 1", "g = 0 AND v LIKE 'base%'", "v LIKE 'base%'"):
        got = spark.read.format("lance").load(mw.dataset.uri).filter(where).toArrow()
        assert _sorted(got) == _sorted(mw.scanner(filter=where).to_table()), where


# Filters Spark pushes: the LSM view's newest row per key decides, before the filter.
FILTERS = ["v LIKE 'base%'",              # stale rows: keys updated since must not show
           "g = 0 AND v < 'second9'",
           "id IN (2, 7, 50, 61)",        # updated, deleted, deleted, new
           "id = 3",
           "v IS NULL OR id > 38"]


def test_pushed_filters_prune_regions_and_apply_to_the_newest_rows(spark, table) -> None:
    uri, mw = table
    for where in FILTERS:
        # a DataFrame per query: PySpark 4.3 reuses the reader of a query with pushed
        # filters for a later query on the same DataFrame that pushes none
        got = spark.read.format("lance").load(uri).filter(where).toArrow()
        assert _sorted(got) == _sorted(mw.scanner(filter=where).to_table()), where
    df = spark.read.format("lance").load(uri)
    stale = {r["id"] for r in df.filter("v LIKE 'base%'").collect()}
    assert stale and not stale & {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}  # updated or deleted
    assert df.filter("id = 3").first()["v"] == "third3"


def test_pushed_filters_are_evaluated_in_each_region_part() -> None:
    """In this process (no JVM): the filters are taken, prune the partitions, and a
    pruned region's files are never read; a kept part returns the newest rows."""
    from decimal import Decimal

    from pyspark.sql.datasource import EqualTo, GreaterThan, In, StringStartsWith

    from lance_sql.io.memory import MemoryStore
    from lance_sql.spark import datasource

    name = "spark-lsm-prune"
    MemoryStore.reset(name)
    ds = lance_sql.write_dataset(_rows(list(range(40)), "base"), f"memory://{name}")
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 4))
    with mw.writer() as w:
        w.put(_rows(list(range(0, 60, 3)), "new"))
        w.flush_memtable()
    options = {"path": f"memory://{name}"}
    reader = datasource.FilteringLsmReader(options, datasource.LanceDataSource(options)
                                           .schema())
    pushed = [In(("id",), (6, 7)), StringStartsWith(("v",), "base")]
    assert list(reader.pushFilters(pushed)) == []
    store = MemoryStore(name)
    touched: list[str] = []
    store.add_hook(lambda op, key: touched.append(key))
    try:
        parts = reader.partitions()
        got = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
        assert got == [{"id": 7, "g": 1, "v": "base7"}]  # 6's newest row is "new6"
        mine = {str(r.region) for p in parts for r in p.regions}
        assert 1 <= len(mine) <= 2
        regions = [k.split("/") for k in touched if k.startswith("_mem_wal/")]
        outside = [k for k in regions if len(k) > 2 and k[1] not in mine]
        assert outside and all(k[2] == "manifest" for k in outside)  # to learn their values
    finally:
        store.clear_hooks()
    reader = datasource.FilteringLsmReader(options, datasource.LanceDataSource(options)
                                           .schema())
    assert list(reader.pushFilters([GreaterThan(("id",), 35)])) == []
    parts = reader.partitions()
    regions = [r.region for p in parts for r in p.regions]  # each whole in one partition
    assert len(regions) == len(set(regions)) == 4  # a range prunes no bucket
    # _rowid on the view: the base table's; a key updated since has none (stale-row case)
    with_ids = {**options, "withrowid": "true"}
    schema = datasource.LanceDataSource(with_ids).schema()
    ids = {r["id"]: r["_rowid"] for r in lance_sql.dataset(f"memory://{name}").to_table(
        columns=["id", "_rowid"]).to_pylist()}
    for key, want in ((7, [{"id": 7, "_rowid": ids[7]}]), (6, [])):  # 6: updated since
        by_id = datasource.FilteringLsmReader(with_ids, schema)
        assert list(by_id.pushFilters([EqualTo(("_rowid",), Decimal(ids[key]))])) == []
        got = [{"id": r["id"], "_rowid": None if r["_rowid"] is None else int(r["_rowid"])}
               for p in by_id.partitions() for b in by_id.read(p) for r in b.to_pylist()]
        assert got == want
    got = pa.concat_tables([pa.Table.from_batches(list(reader.read(p)), schema=SCHEMA)
                            for p in parts])
    assert _sorted(got) == _sorted(MemWal(lance_sql.dataset(f"memory://{name}")).scanner(
        filter="id > 35").to_table())


def test_a_pruned_regions_generations_are_never_opened_by_executors(spark, tmp_path: Path
                                                                     ) -> None:
    """Executors are other processes: the pruned regions' generation files are made
    unreadable on disk, and a read the filter prunes them from still succeeds."""
    mw = _lsm(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    expected = _sorted(mw.scanner(filter="id IN (2, 3)").to_table())
    view = mw.view()
    kept = {r.region_id for r in view.regions(view._predicate("id IN (2, 3)"))}
    assert 0 < len(kept) < 3
    broken = [f for region in (tmp_path / "t.lance" / "_mem_wal").iterdir()
              if region.name not in {str(r) for r in kept}
              for f in region.glob("*_gen_*/**/*") if f.is_file()]
    assert broken
    for f in broken:
        f.write_bytes(b"not a lance file")
    df = (spark.read.format("lance").option("minPartitions", "3").load(mw.dataset.uri)
          .filter("id IN (2, 3)"))
    assert _sorted(df.toArrow()) == expected
    with pytest.raises(Exception, match="FormatError"):  # unfiltered: the broken files are read
        spark.read.format("lance").load(mw.dataset.uri).collect()


def test_an_indexed_base_reads_the_view(spark, tmp_path: Path) -> None:
    """With a BTREE index on the key, the base rows newer keys hide are found in it and
    left out by the scan: in one partition or many, the read is the view, each key once."""
    path = tmp_path / "t.lance"
    _lsm(path, RegionSpec.bucket("id", 3))
    lance_sql.dataset(str(path)).create_scalar_index("id", "BTREE")
    mw = MemWal(lance_sql.dataset(str(path)))
    for options in ({}, {"maxPartitionBytes": "1", "openCostInBytes": "1",
                         "minPartitions": "3"}):
        def load(options: dict[str, str] = options):
            return spark.read.format("lance").options(**options).load(str(path))

        got = load().toArrow()
        assert got.num_rows == len(set(got.column("id").to_pylist()))
        assert _sorted(got) == _sorted(mw.scanner().to_table())
        assert load().count() == mw.scanner().count_rows()
        for where in FILTERS:
            assert _sorted(load().filter(where).toArrow()) == _sorted(
                mw.scanner(filter=where).to_table()), where


def test_a_base_holding_a_key_twice_reads_each_key_once(spark, tmp_path: Path) -> None:
    """Plain appends put keys into the base again (a copy in another fragment, and one
    updated since by a generation): one partition or many (the copies in different
    tasks), each key once, the row a lookup returns."""
    path = tmp_path / "t.lance"
    mw = _lsm(path, RegionSpec.bucket("id", 3))
    lance_sql.write_dataset(_rows([12, 13, 2, 12], "again"), str(path), mode="append")
    mw = MemWal(lance_sql.dataset(str(path)))
    keys = pa.table({"id": pa.array(range(70), pa.int64())})
    want = _sorted(mw.get(keys))
    assert {r["id"]: r["v"] for r in want}[12] == "again12"
    assert _sorted(mw.scanner().to_table()) == want
    for options in ({}, {"maxPartitionBytes": "1", "openCostInBytes": "1",
                         "minPartitions": "4"}):
        df = spark.read.format("lance").options(**options).load(str(path))
        assert _sorted(df.toArrow()) == want
        assert spark.read.format("lance").options(**options).load(str(path)).count() == \
            len(want)


def test_appends_into_a_mem_wal_table_are_refused(spark, tmp_path: Path) -> None:
    """As SQL's INSERT: appended base rows of keys an unmerged generation holds were
    hidden by it, for good (the merge kept the generation's)."""
    path = tmp_path / "t.lance"
    mw = _lsm(path, RegionSpec.bucket("id", 2))
    before = _sorted(mw.scanner().to_table())
    version = lance_sql.dataset(str(path)).version
    df = spark.createDataFrame(_rows([1, 70], "appended").to_pandas())
    with pytest.raises(StatementRefusedError, match="MemWAL"):
        write_dataset(df, str(path), mode="append")
    with pytest.raises(Exception, match="has a MemWAL"):
        df.write.format("lance").mode("append").save(str(path))
    assert lance_sql.dataset(str(path)).version == version
    assert _sorted(MemWal(lance_sql.dataset(str(path))).scanner().to_table()) == before
