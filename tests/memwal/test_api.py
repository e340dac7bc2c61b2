"""The MemWal handle: routed writes claim one region per region value, in every process
alike; manual regions; the jobs and the status table."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError, WriterFencedError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def _table(tmp_path: Path) -> lance_sql.LanceDataset:
    return lance_sql.write_dataset(_rows(range(10), "base"), str(tmp_path / "t.lance"))


def test_routed_writes_merge_into_the_base(tmp_path: Path) -> None:
    mw = MemWal.initialize(_table(tmp_path), RegionSpec.bucket("id", 4), durable_write=False)
    with mw.writer() as w:
        w.put(_rows(range(5, 40), "new"))
        w.delete(pa.table({"id": pa.array([6, 7], pa.int64())}))
        assert 1 <= len(w.writers) <= 4
        w.flush_memtable()
    regions = mw.regions()
    assert len(regions) == len(w.writers)
    assert all(r.region_spec_id == 1 and r.region_values for r in regions)
    merged = mw.merge()
    assert {r.region_id for r in merged} == {r.region_id for r in regions}
    table = lance_sql.dataset(mw.dataset.uri).to_table()
    got = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert 6 not in got and 7 not in got and got[5] == "new5" and got[39] == "new39"
    assert got[0] == "base0" and len(got) == 38
    status = mw.status()
    assert all(row["merged_up_to"] == 1 and row["flushed"] == [1] for row in status)


def test_a_second_process_routes_a_key_to_the_same_region(tmp_path: Path) -> None:
    mw = MemWal.initialize(_table(tmp_path), RegionSpec.bucket("id", 4))
    with mw.writer() as first:
        first.put(_rows(range(100, 101), "a"))
        (region,) = [w.region_id for w in first.writers]
    with MemWal(lance_sql.dataset(mw.dataset.uri)).writer() as second:
        second.put(_rows(range(100, 101), "b"))
        assert [w.region_id for w in second.writers] == [region]
        assert second.writers[0].epoch == 2


def test_manual_regions_and_refusals(tmp_path: Path) -> None:
    ds = _table(tmp_path)
    with pytest.raises(NotFoundError, match="no MemWAL"):
        MemWal(ds)
    mw = MemWal.initialize(ds)
    with pytest.raises(InvalidInputError, match="region=uuid"):
        mw.writer()
    region = uuid.uuid4()
    with mw.writer(region=region) as w:
        w.put(_rows(range(3), "m"))
    assert [r.region_id for r in mw.regions()] == [region]
    bucketed = MemWal.initialize(_table(tmp_path / "b"), RegionSpec.bucket("id", 2))
    with pytest.raises(InvalidInputError, match="manual regions"):
        bucketed.writer(region=region)
    with bucketed.writer() as w, pytest.raises(lance_sql.SchemaError, match=r"missing \['id'\]"):
        w.put(pa.table({"v": ["x"]}))


def test_a_routed_put_is_checked_whole_before_any_region_takes_a_row(tmp_path: Path) -> None:
    """A NULL in a column that takes none, in a row of a later region, used to raise
    after the earlier regions had written (durably) and shown their rows."""
    schema = pa.schema([SCHEMA.field("id"), pa.field("v", pa.string(), nullable=False)])
    ds = lance_sql.write_dataset(pa.table({"id": [1000], "v": ["a"]}, schema=schema),
                                 str(tmp_path / "t.lance"))
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 4))
    with mw.writer() as w:
        bad = pa.table({"id": pa.array(range(8), pa.int64()), "v": ["x"] * 7 + [None]})
        with pytest.raises(lance_sql.SchemaError, match="not nullable"):
            w.put(bad)
        with pytest.raises(InvalidInputError, match="primary key column 'id' has 1 null"):
            w.put(pa.table({"id": pa.array([1, None], pa.int64()), "v": ["x", "y"]}))
        assert w.writers == []  # no region was even claimed
    assert mw.scanner(["id"]).to_table().column("id").to_pylist() == [1000]


def test_a_routed_put_routes_the_values_it_keeps(tmp_path: Path) -> None:
    """Keys given as floats (or any type that casts safely) are routed after the cast, so
    each lands in its key's region; they were routed on the float values and refused or
    not by value ("row(s) do not belong to region")."""
    mw = MemWal.initialize(_table(tmp_path), RegionSpec.bucket("id", 4))
    with mw.writer() as w:
        w.put(pa.table({"id": [float(i) for i in range(30, 40)], "v": ["f"] * 10}))
        w.put({"id": [40], "v": ["dict"]})
        w.delete({"id": [31]})
        with pytest.raises(lance_sql.SchemaError, match="does not fit"):
            w.put(pa.table({"id": [41.5], "v": ["half"]}))
        with pytest.raises(InvalidInputError, match="not list"):
            w.put([1, 2])
    with MemWal(lance_sql.dataset(mw.dataset.uri)).writer() as again:
        again.put(_rows(range(30, 31), "int"))  # the same region as the float key 30.0
        assert len(again.writers) == 1
    got = mw.get(pa.table({"id": pa.array(range(30, 42), pa.int64())}))
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True)) \
        == {30: "int30", **{i: "f" for i in range(32, 40)}, 40: "dict"}
    assert mw.get({"id": 33}).to_pylist() == [{"id": 33, "v": "f"}]
    with pytest.raises(InvalidInputError, match="not int"):
        mw.get(5)


def test_puts_after_close_are_refused_in_every_region(tmp_path: Path) -> None:
    """Also in a region the writer never opened: it was claimed, its row went to a WAL
    nobody flushes (the writer was closed), and the put returned as if acknowledged."""
    mw = MemWal.initialize(_table(tmp_path), RegionSpec.bucket("id", 8))
    writer = mw.writer()
    writer.put(_rows(range(100, 101), "a"))
    writer.close()
    opened = {r.region_id for r in mw.regions()}
    for ids in (range(100, 101), range(0, 64)):  # its region, then (surely) others too
        with pytest.raises(InvalidInputError, match="closed"):
            writer.put(_rows(ids, "late"))
        with pytest.raises(InvalidInputError, match="closed"):
            writer.delete(pa.table({"id": pa.array(list(ids), pa.int64())}))
    assert {r.region_id for r in mw.regions()} == opened
    assert len(writer.writers) == 1


def test_an_overwrite_fences_open_writers_and_a_new_mem_wal_starts_clean(tmp_path: Path
                                                                         ) -> None:
    """An overwrite replaces the table without its MemWAL: an open writer's next put is
    refused (its rows would never be read), and setting up a MemWAL again refuses the
    old regions on disk (region ids follow from the spec: their rows came back)."""
    mw = MemWal.initialize(_table(tmp_path), RegionSpec.bucket("id", 2))
    uri = mw.dataset.uri
    writer = mw.writer()
    try:
        writer.put(_rows(range(0, 4), "old"))
        writer.flush_memtable()
        lance_sql.write_dataset(_rows(range(100, 102), "new"), uri, mode="overwrite")
        with pytest.raises(WriterFencedError, match="no MemWAL"):
            writer.put(_rows(range(4, 6), "late"))
    finally:
        for region_writer in writer.writers:
            region_writer.abort()
    with pytest.raises(InvalidInputError, match="earlier MemWAL"):
        lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 2))
    shutil.rmtree(Path(uri) / "_mem_wal")
    fresh = lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 2))
    assert sorted(fresh.scanner(["id"]).to_table()["id"].to_pylist()) == [100, 101]
