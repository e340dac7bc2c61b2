"""``ds.initialize_mem_wal(...)`` and ``ds.mem_wal`` on the datasets lance_sql hands out,
and the class surviving every way of reaching another version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import MemWal
from lance_sql.memwal.dataset import MemWalDataset

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def test_initialize_and_open_through_the_dataset(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(range(10), "base"), uri)
    assert isinstance(ds, MemWalDataset) and ds.mem_wal is None
    mw = ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 4), durable_write=False,
                               max_memtable_rows=5000, max_wal_flush_interval_ms=20)
    assert isinstance(mw, MemWal)
    assert ds.version == 2  # moved to the version the commit created, as pylance does
    assert ds.mem_wal is not None and ds.mem_wal.region_spec == mw.region_spec
    assert mw.region_spec is not None and mw.region_spec.spec_id == 1
    assert dict(mw.details.writer_config_defaults) == {
        "durable_write": "false", "max_memtable_rows": "5000",
        "max_wal_flush_interval_ms": "20"}
    reopened = lance_sql.dataset(uri)
    assert isinstance(reopened, MemWalDataset)
    handle = reopened.mem_wal
    assert handle is not None
    with handle.writer() as w:
        w.put(_rows(range(5, 15), "new"))
        assert {(r.config.durable_write, r.config.max_memtable_rows,
                 r.config.max_wal_flush_interval_ms) for r in w.writers} == {(False, 5000, 20)}
        w.flush_memtable()
    handle.merge()
    refreshed = handle.refresh_index()
    assert isinstance(refreshed, MemWalDataset) and refreshed.mem_wal is not None
    assert refreshed.mem_wal.details.num_regions == len(handle.regions()) >= 2
    got = lance_sql.dataset(uri).to_table().sort_by("id")
    assert got.column("v").to_pylist() == [f"base{i}" for i in range(5)] + [
        f"new{i}" for i in range(5, 15)]


def test_versions_keep_the_class(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(range(4), "a"), uri)
    ds.initialize_mem_wal(RegionSpec.identity("id"))
    old = ds.checkout_version(1)
    assert isinstance(old, MemWalDataset) and old.mem_wal is None  # before the MemWAL
    assert isinstance(ds.checkout_version(2), MemWalDataset)
    assert ds.checkout_version(2).mem_wal is not None
    ds.delete("id = 0")
    ds.update({"v": "'z'"}, "id = 1")
    ds.merge_insert("id").when_matched_update_all().execute(_rows(range(2, 3), "m"))
    assert isinstance(ds, MemWalDataset) and ds.mem_wal is not None
    assert isinstance(lance_sql.dataset(uri, version=2), MemWalDataset)
    assert isinstance(ds.shallow_clone(str(tmp_path / "c.lance"), 2), MemWalDataset)
    assert repr(ds).startswith("MemWalDataset(")


def test_refusals(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_rows(range(4), "a"), str(tmp_path / "t.lance"))
    ds.initialize_mem_wal()
    with pytest.raises(InvalidInputError, match="already has a MemWAL"):
        ds.initialize_mem_wal()
    with pytest.raises(InvalidInputError, match="max_memtable_rows"):
        lance_sql.write_dataset(_rows(range(4), "a"), str(tmp_path / "u.lance")
                                ).initialize_mem_wal(max_memtable_rows=0)
    no_key = lance_sql.write_dataset(pa.table({"id": [1]}), str(tmp_path / "k.lance"))
    with pytest.raises(SchemaError, match="primary key"):
        no_key.initialize_mem_wal()
    assert no_key.mem_wal is None and no_key.version == 1
