"""MemWAL metadata codecs: round trips, bad bytes, and the reference's bytes read back.

pylance 14.0.2 writes the same messages under other names (shards for regions); its
bytes must decode with our field numbers, and our table layer must carry its merge
commits (an Update whose field 5 lists merged generations).
"""

from __future__ import annotations

import glob
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    FlushedGeneration,
    IndexCatchupProgress,
    MemWalIndexDetails,
    MergedGeneration,
    RegionManifest,
    details_of,
    record_catchup,
    with_details,
)
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.table.txn.operations import Transaction, Update

REGION = uuid.UUID("11111111-2222-4333-8444-555555555555")
SCHEMA = LanceSchema.from_arrow(pa.schema([pa.field("id", pa.int64()),
                                           pa.field("ts", pa.timestamp("us"))]))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 2**40), st.integers(0, 2**32 - 1), st.integers(0, 2**40),
       st.lists(st.integers(1, 10_000), unique=True, max_size=6))
def test_region_manifest_round_trip(version: int, spec_id: int, epoch: int,
                                    generations: list[int]) -> None:
    generations.sort()
    current = (generations[-1] + 1) if generations else 1
    manifest = RegionManifest(REGION, version, spec_id, epoch, 7, 9, current, tuple(
        FlushedGeneration(g, f"abcdef01_gen_{g}", physical_rows=g * 3) for g in generations))
    back = RegionManifest.decode(manifest.encode(), "m")
    assert back == manifest
    assert back.evolve(writer_epoch=epoch + 1).writer_epoch == epoch + 1


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff\xff\xff", "not a region manifest"),
    (RegionManifest(REGION, 0).encode(), "versions start at 1"),
    (RegionManifest(REGION, 1, current_generation=2, flushed_generations=(
        FlushedGeneration(2, "x_gen_2"),)).encode(), "below the current generation"),
    (RegionManifest(REGION, 1, current_generation=9, flushed_generations=(
        FlushedGeneration(3, "a"), FlushedGeneration(2, "b"))).encode(), "not increasing"),
])
def test_bad_region_manifests(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        RegionManifest.decode(data, "_mem_wal/r/manifest/1.binpb")


def test_index_details_round_trip_and_progress() -> None:
    spec = (RegionSpec.bucket("id", 8) + RegionSpec.day("ts")).bind(SCHEMA).with_id(1)
    other = uuid.UUID(int=5)
    details = MemWalIndexDetails(
        region_specs=(spec,), maintained_indexes=("id_idx",),
        merged_generations=(MergedGeneration(REGION, 4), MergedGeneration(other, 1)),
        index_catchup=(IndexCatchupProgress("id_idx", (MergedGeneration(REGION, 3),)),),
        writer_config_defaults={"durable_write": "true"}, snapshot_ts_millis=1234,
        num_regions=2, inline_snapshots=b"LANC", maintain_all_indexes=False)
    back = MemWalIndexDetails.decode(details.encode(), "t")
    assert back.region_specs == (spec,)
    assert back.merged_generation(REGION) == 4 and back.merged_generation(uuid.uuid4()) == 0
    assert back.index_catchup[0].generation_for(REGION) == 3
    assert back.index_catchup[0].generation_for(other) is None
    assert dict(back.writer_config_defaults) == {"durable_write": "true"}
    assert (back.snapshot_ts_millis, back.num_regions, back.inline_snapshots,
            back.maintain_all_indexes) == (1234, 2, b"LANC", False)
    assert MemWalIndexDetails.decode(MemWalIndexDetails().encode(), "t").inline_snapshots is None


def test_catchup_follows_merge_progress_and_never_goes_back() -> None:
    other = uuid.UUID(int=5)
    unmerged = MemWalIndexDetails(maintained_indexes=("id_idx",)).encode()
    assert record_catchup(unmerged, ["id_idx"], "t") == unmerged  # nothing merged yet
    details = MemWalIndexDetails(
        merged_generations=(MergedGeneration(REGION, 4), MergedGeneration(other, 1)),
        index_catchup=(IndexCatchupProgress("id_idx", (MergedGeneration(other, 7),)),
                       IndexCatchupProgress("v_idx", (MergedGeneration(REGION, 1),))),
        writer_config_defaults={"durable_write": "true"})
    back = MemWalIndexDetails.decode(record_catchup(details.encode(), ["id_idx", "x_idx"],
                                                    "t"), "t")
    catchup = {c.index_name: dict((m.region_id, m.generation) for m in c.caught_up)
               for c in back.index_catchup}
    assert catchup == {"id_idx": {REGION: 4, other: 7}, "v_idx": {REGION: 1},
                       "x_idx": {REGION: 4, other: 1}}
    assert back.merged_generations == details.merged_generations
    assert dict(back.writer_config_defaults) == {"durable_write": "true"}


def test_index_entries_hold_their_details() -> None:
    entry = with_details(IndexMetadata.new(MEM_WAL_INDEX_NAME, [], 1, None),
                         MemWalIndexDetails(num_regions=3).encode(), 5)
    assert entry.dataset_version == 5 and entry.fields == () and entry.fragment_ids is None
    assert MemWalIndexDetails.decode(details_of(entry), "t").num_regions == 3
    with pytest.raises(FormatError, match="MemWalIndexDetails"):
        details_of(IndexMetadata.new("id_idx", [0], 1, [0]))


def test_bad_details_bytes_are_format_errors() -> None:
    with pytest.raises(FormatError, match="corrupt MemWAL index details"):
        MemWalIndexDetails.decode(b"\x0a\xff", "t")


# ------------------------------------------------------------- the reference's bytes
@pytest.fixture(scope="module")
def pylance_mem_wal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pylance table: MemWAL with a bucket spec, one flushed generation, merged."""
    lance = pytest.importorskip("lance")
    mem_wal = pytest.importorskip("lance.mem_wal")
    root = tmp_path_factory.mktemp("memwal") / "t.lance"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False,
                                 metadata={"lance-schema:unenforced-primary-key": "true"}),
                        pa.field("v", pa.string())])
    lance.write_dataset(pa.table({"id": list(range(20)), "v": ["a"] * 20}, schema=schema),
                        root)
    ds = lance.dataset(root)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=7, durable_write=True,
                          max_memtable_rows=10)
    writer = lance.dataset(root).mem_wal_writer(str(REGION), durable_write=True,
                                                max_memtable_rows=10)
    for start in (15, 22, 29):  # three puts of 7 rows: the 10-row MemTable flushes once
        writer.put(pa.table({"id": list(range(start, start + 7)), "v": ["b"] * 7},
                            schema=schema))
    writer.close()
    gen = sorted(glob.glob(str(root / "_mem_wal" / str(REGION) / "*_gen_*")))
    assert gen, "pylance flushed no generation"
    rows = lance.dataset(gen[0]).to_table().drop_columns(["_tombstone"])
    number = int(gen[0].rsplit("_gen_", 1)[1])
    (lance.dataset(root).merge_insert("id").when_matched_update_all()
     .when_not_matched_insert_all()
     .mark_sstables_as_compacted([mem_wal.CompactedSsTable(str(REGION), number)])
     .execute(rows))
    return root


def test_reference_index_details_decode(pylance_mem_wal: Path) -> None:
    ds = lance_sql.dataset(str(pylance_mem_wal))
    (entry,) = [i for i in decode_index_section(ds.manifest.index_section)
                if i.name == MEM_WAL_INDEX_NAME]
    details = MemWalIndexDetails.decode(details_of(entry), "pylance")
    (spec,) = details.region_specs
    (field,) = spec.fields
    assert field.transform == "bucket" and field.parameter("num_buckets") == 7
    assert field.result_type == "int32" and len(field.source_ids) == 1
    assert details.merged_generation(REGION) >= 1
    assert dict(details.writer_config_defaults)["max_memtable_rows"] == "10"


def test_reference_region_manifests_decode(pylance_mem_wal: Path) -> None:
    folder = pylance_mem_wal / "_mem_wal" / str(REGION) / "manifest"
    files = sorted(f for f in os.listdir(folder) if f.endswith(".binpb"))
    assert files
    latest = max((RegionManifest.decode((folder / f).read_bytes(), f) for f in files),
                 key=lambda m: m.version)
    assert latest.region_id == REGION and latest.writer_epoch >= 1
    assert latest.flushed_generations and latest.current_generation > max(
        g.generation for g in latest.flushed_generations)
    assert all("_gen_" in g.path for g in latest.flushed_generations)
    assert latest.encode() == (folder / next(
        f for f in files if RegionManifest.decode((folder / f).read_bytes(), f).version
        == latest.version)).read_bytes() or latest.raw  # unmodelled fields kept


def test_reference_merge_commits_decode_and_we_commit_on_top(pylance_mem_wal: Path) -> None:
    lance = pytest.importorskip("lance")
    merges = []
    for path in sorted((pylance_mem_wal / "_transactions").iterdir()):
        txn = Transaction.decode(path.read_bytes(), str(path))
        if isinstance(txn.operation, Update) and txn.operation.merged_generations:
            merges.append(txn.operation.merged_generations)
    assert merges and merges[0][0].region_id == REGION
    ds = lance_sql.dataset(str(pylance_mem_wal))
    before = ds.count_rows()
    lance_sql.write_dataset(pa.table({"id": [100], "v": ["c"]},
                                     schema=ds.schema), str(pylance_mem_wal), mode="append")
    assert lance.dataset(str(pylance_mem_wal)).count_rows() == before + 1
    described = lance.dataset(str(pylance_mem_wal)).describe_indices()
    assert MEM_WAL_INDEX_NAME in {getattr(i, "name", None) for i in described}
