"""Setting up the MemWAL index of a base table, and reading it back (also with pylance)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal import index as mem_wal_index

PK = {"lance-schema:unenforced-primary-key": "true"}


def _table(tmp_path: Path, *, keyed: bool = True) -> lance_sql.LanceDataset:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False,
                                 metadata=PK if keyed else None),
                        pa.field("ts", pa.timestamp("us")), pa.field("v", pa.string())])
    data = pa.table({"id": [1, 2], "ts": [None, None], "v": ["a", "b"]}, schema=schema)
    return lance_sql.write_dataset(data, str(tmp_path / "t.lance"))


def test_initialize_records_the_configuration(tmp_path: Path) -> None:
    ds = _table(tmp_path)
    spec = RegionSpec.bucket("id", 8) + RegionSpec.day("ts")
    new = mem_wal_index.initialize(ds, spec, writer_defaults={"durable_write": False,
                                                              "max_memtable_rows": 5000})
    assert new.version == ds.version + 1
    entry, details = mem_wal_index.load(new)
    assert entry.fields == () and entry.fragment_ids is None
    (stored,) = details.region_specs
    assert stored == spec.bind(ds.manifest.schema).with_id(1)
    assert dict(details.writer_config_defaults) == {"durable_write": "false",
                                                    "max_memtable_rows": "5000"}
    assert details.maintain_all_indexes is True and details.merged_generations == ()
    assert mem_wal_index.load(ds) is None  # the version before has none
    lance = pytest.importorskip("lance")
    ref = lance.dataset(new.uri)
    assert ref.to_table() == new.to_table()
    assert "__lance_mem_wal" in {getattr(i, "name", None) for i in ref.describe_indices()}


def test_initialize_without_a_spec_is_for_manual_regions(tmp_path: Path) -> None:
    new = mem_wal_index.initialize(_table(tmp_path))
    assert mem_wal_index.load(new)[1].region_specs == ()


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="needs a primary key"):
        mem_wal_index.initialize(_table(tmp_path / "a", keyed=False))
    ds = _table(tmp_path / "b")
    with pytest.raises(SchemaError, match="'nope' does not exist"):
        mem_wal_index.initialize(ds, RegionSpec.bucket("nope", 4))
    with pytest.raises(InvalidInputError, match="no index named"):
        mem_wal_index.initialize(ds, maintained_indexes=["missing_idx"])
    with pytest.raises(InvalidInputError, match="unknown MemWAL writer option"):
        mem_wal_index.initialize(ds, writer_defaults={"speed": "fast"})
    mem_wal_index.initialize(ds)
    with pytest.raises(InvalidInputError, match="already has a MemWAL index"):
        mem_wal_index.initialize(lance_sql.dataset(ds.uri))


def test_primary_key_order_follows_positions(tmp_path: Path) -> None:
    schema = pa.schema([
        pa.field("a", pa.int32(), nullable=False,
                 metadata={**PK, "lance-schema:unenforced-primary-key:position": "2"}),
        pa.field("b", pa.string(), nullable=False,
                 metadata={**PK, "lance-schema:unenforced-primary-key:position": "1"}),
        pa.field("v", pa.float64())])
    ds = lance_sql.write_dataset(pa.table({"a": [1], "b": ["x"], "v": [0.5]}, schema=schema),
                                 str(tmp_path / "c.lance"))
    assert mem_wal_index.primary_key_columns(ds.manifest.schema) == ["b", "a"]
