"""The MemWAL index builder: region snapshots (inline and as a file), WAL hints, and the
merge progress that a refresh racing a merge must keep."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from test_merger import A, B, _base, _flush

import lance_sql
from lance_sql.format.memwal import MergedGeneration
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.index_builder import read_snapshot, refresh_index
from lance_sql.memwal.merger import merge
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import encode_region_values


def test_snapshot_lists_every_region(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    _flush(ds, A, [(2, "b", False)])
    _flush(ds, B, [(3, "c", False)])
    assert read_snapshot(ds).num_rows == 0
    new = refresh_index(ds)
    snapshot = read_snapshot(new).sort_by("region_id")
    assert snapshot.num_rows == 2
    rows = {uuid.UUID(bytes=r["region_id"]): r for r in snapshot.to_pylist()}
    manifest = RegionLog(ds.store, A).latest()
    assert rows[A]["version"] == manifest.version
    assert rows[A]["current_generation"] == 3
    assert [g["generation"] for g in rows[A]["flushed_generations"]] == [1, 2]
    _, details = mem_wal_index.load(new)
    assert details.num_regions == 2 and details.inline_snapshots is not None
    lance = pytest.importorskip("lance")
    assert lance.dataset(new.uri).count_rows() == new.count_rows()


def test_wal_hints_move_up_to_the_last_entry(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    log = RegionLog(ds.store, A)
    for entry in (1, 2, 3):  # existence is all the builder checks
        ds.store.put(log.paths.wal_entry(entry), b"entry")
    refresh_index(ds)
    assert log.latest().wal_id_last_seen == 3


def test_many_regions_go_to_a_file(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    _flush(ds, B, [(2, "b", False)])
    new = refresh_index(ds, inline_threshold=1)
    entry, details = mem_wal_index.load(new)
    assert details.inline_snapshots is None and details.num_regions == 2
    assert ds.store.exists(f"_indices/{entry.uuid}/index.lance")
    assert read_snapshot(new).num_rows == 2


def test_region_values_appear_as_region_fields(tmp_path: Path) -> None:
    data = pa.table({"id": pa.array([1], pa.int64()), "v": ["x"]},
                    schema=pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={
                        "lance-schema:unenforced-primary-key": "true"}),
                        pa.field("v", pa.string())]))
    ds = lance_sql.write_dataset(data, str(tmp_path / "t.lance"))
    ds = mem_wal_index.initialize(ds, RegionSpec.bucket("id", 4))
    values = pa.table({"bucket_id": pa.array([3], pa.int32())})
    RegionLog(ds.store, A).claim(1, encode_region_values(values))
    RegionLog(ds.store, B).claim(0)  # a manual region: no values
    snapshot = read_snapshot(refresh_index(ds))
    by_region = {uuid.UUID(bytes=r["region_id"]): r for r in snapshot.to_pylist()}
    assert by_region[A]["region_field_bucket_id"] == 3
    assert by_region[B]["region_field_bucket_id"] is None
    assert snapshot.schema.field("region_field_bucket_id").type == pa.int32()


def test_a_refresh_racing_a_merge_keeps_its_progress() -> None:
    """The builder read the index before a merge committed; its commit lands after."""
    name = f"builder_race{uuid.uuid4().hex[:8]}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={
        "lance-schema:unenforced-primary-key": "true"}), pa.field("v", pa.string())])
    ds = mem_wal_index.initialize(lance_sql.write_dataset(
        pa.table({"id": [1], "v": ["x"]}, schema=schema), uri))
    _flush(ds, A, [(1, "a", False)])
    store = MemoryStore(name)
    merged: list[object] = []

    def merge_commits_first(op: str, key: str) -> None:
        if op == "put_if_absent" and "_versions/" in key and not merged:
            merged.append(None)
            merged[0] = merge(lance_sql.dataset(uri))

    store.add_hook(merge_commits_first)
    refreshed = refresh_index(ds)
    store.clear_hooks()
    assert merged[0]
    _, details = mem_wal_index.load(lance_sql.dataset(uri))
    assert refreshed.version == lance_sql.dataset(uri).version
    assert details.merged_generations == (MergedGeneration(A, 1),)
    assert details.num_regions == 1 and details.inline_snapshots is not None
