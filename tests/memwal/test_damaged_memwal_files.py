"""MemWAL files damaged in ways their decoders cannot see (the bytes still parse):
every read that meets one ends in a FormatError naming it, never a bare KeyError or
ValueError from deeper down."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.generation_tables import check_generation_columns
from lance_sql.table.runtime.context import current_runtime

KEY = pa.field("id", pa.int64(), nullable=False,
               metadata={"lance-schema:unenforced-primary-key": "true"})
SCHEMA = pa.schema([KEY, pa.field("v", pa.float64())])


def _rows(keys: range) -> pa.Table:
    return pa.table({"id": list(keys), "v": [float(k) for k in keys]}, schema=SCHEMA)


def _table(root: Path, regions: int = 1, refresh: bool = False) -> Path:
    path = root / "t.lance"
    ds = lance_sql.write_dataset(_rows(range(20)), str(path))
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", regions), durable_write=True)
    with mw.writer() as w:
        w.put(_rows(range(10, 30)))
        w.flush_memtable()
    if refresh:
        mw.refresh_index()  # the region snapshot, inline in the MemWAL index's details
    return path


def _patch(files: list[Path], old: bytes, new: bytes) -> None:
    assert files
    for f in files:
        data = f.read_bytes()
        assert old in data, f
        f.write_bytes(data.replace(old, new))
    current_runtime().clear()  # (the writes left what they read cached)


def _reads(path: Path, consistency: str = "strong") -> list[Callable[[], object]]:
    reads = [
        lambda: lance_sql.dataset(str(path)).mem_wal.scanner(
            consistency=consistency).to_table(),
        lambda: lance_sql.connect(str(path.parent), consistency=consistency).sql(
            "SELECT count(*) FROM t").to_arrow_table(),
    ]
    if consistency == "strong":  # (lookups read the regions' manifests)
        reads.append(lambda: lance_sql.dataset(str(path)).mem_wal.get(
            pa.table({"id": pa.array([12, 25], pa.int64())})))
    return reads


def _generation_manifests(path: Path) -> list[Path]:
    return list(path.glob("_mem_wal/*/*_gen_*/_versions/*.manifest"))


@pytest.mark.parametrize(("old", "new", "said"), [
    (b"_tombstone", b"_tombstonX", "a MemWAL generation without"),  # its deletes' flags
    (b"/_mem_wal/", b"/\x00mem_wal/", "NUL byte"),  # its WAL directory
], ids=["no_tombstones", "nul_in_wal_path"])
def test_a_damaged_generation(tmp_path: Path, old: bytes, new: bytes, said: str) -> None:
    path = _table(tmp_path)
    _patch(_generation_manifests(path), old, new)
    for read in _reads(path):
        with pytest.raises(FormatError, match=said) as caught:
            read()
        assert "_gen_" in str(caught.value)


def test_a_snapshot_without_its_region_values(tmp_path: Path) -> None:
    path = _table(tmp_path, regions=2, refresh=True)
    latest = sorted((path / "_versions").glob("*.manifest"))[0]  # (V2 names: newest first)
    _patch([latest], b"region_field_bucket_id", b"region_field_bucket_iX")
    assert lance_sql.dataset(str(path)).mem_wal.scanner().to_table().num_rows == 30
    for read in _reads(path, "snapshot"):
        with pytest.raises(FormatError, match="region_field_bucket_id"):
            read()


def test_a_generation_needs_the_tables_key_columns(tmp_path: Path) -> None:
    """(A rename in a generation is no damage: its columns are matched to the table's by
    field id. One without the key at all, whatever its names, is.)"""
    gen = lance_sql.write_dataset(
        pa.table({"v": [1.0], "_tombstone": [False]}), str(tmp_path / "g.lance"))
    check_generation_columns(gen, [])
    with pytest.raises(FormatError, match=r"primary-key column\(s\) \['id'\]"):
        check_generation_columns(gen, ["id"])
    flags_as_ints = lance_sql.write_dataset(
        pa.table({"id": [1], "_tombstone": [0]}), str(tmp_path / "h.lance"))
    with pytest.raises(FormatError, match="without a boolean _tombstone"):
        check_generation_columns(flags_as_ints, ["id"])


def test_an_unmerged_generation_whose_files_are_gone(tmp_path: Path) -> None:
    """It was read as collected after its merge: the base's older rows, silently (keys
    20..29 missing, 10..19 at their base values)."""
    path = _table(tmp_path)
    for generation in path.glob("_mem_wal/*/*_gen_*"):
        shutil.rmtree(generation)
    current_runtime().clear()
    for read in _reads(path)[:2]:  # (a key lookup reads the bloom filter, gone too)
        with pytest.raises(FormatError, match="not merged into base version .* missing"):
            read()
    with pytest.raises(lance_sql.LanceError):
        _reads(path)[2]()
    # a lookup of one key, or a few, opens the generation lazily: it raised nothing and
    # answered the base's row (key 12) or none (key 25)
    for keys in ([12], [25], [12, 25]):
        current_runtime().clear()
        with pytest.raises(FormatError, match="not merged into base version .* missing"):
            lance_sql.dataset(str(path)).mem_wal.get(pa.table({"id": pa.array(keys)}))


@pytest.mark.parametrize("removed", ["manifest", "region"])
def test_an_indexed_region_without_its_manifest(tmp_path: Path, removed: str) -> None:
    """A region directory without a manifest is read as one a writer is still claiming
    (empty); but the index lists only regions whose manifests existed, so an indexed
    region without one (or without its directory) was read as empty too: the base's
    stale rows, silently."""
    path = _table(tmp_path, regions=2, refresh=True)
    region = next(path.glob("_mem_wal/*/manifest")).parent
    shutil.rmtree(region / "manifest" if removed == "manifest" else region)
    current_runtime().clear()
    for read in _reads(path)[:2]:
        with pytest.raises(FormatError, match=f"region {region.name} has no manifest"):
            read()


def test_a_region_being_claimed_is_read_as_empty(tmp_path: Path) -> None:
    """A region directory the index does not list and that has no manifest yet (its
    writer has not committed one) is no error: the other regions read as usual."""
    path = _table(tmp_path, regions=1, refresh=True)
    before = lance_sql.dataset(str(path)).mem_wal.scanner().to_table().sort_by("id")
    (path / "_mem_wal" / "0b0e9f3c-2d4e-4b8a-9c1d-5e6f7a8b9c0d" / "wal").mkdir(parents=True)
    current_runtime().clear()
    after = lance_sql.dataset(str(path)).mem_wal.scanner().to_table().sort_by("id")
    assert after.equals(before) and after.num_rows == 30


@pytest.mark.parametrize("damage", ["renamed", "retyped"])
def test_region_values_that_are_not_their_specs_fields(tmp_path: Path, damage: str) -> None:
    """A region manifest whose values name another field than the region spec's (one
    flipped byte of the Arrow IPC), or hold it as another type than the other regions:
    filtered reads, lookups and SQL end in a FormatError, not pyarrow's
    ArrowInvalid from joining the regions' values."""
    from lance_sql.memwal.naming import RegionPaths
    from lance_sql.memwal.region_log import RegionLog
    from lance_sql.memwal.routing import decode_region_values, encode_region_values

    path = _table(tmp_path, regions=2)
    ds = lance_sql.dataset(str(path))
    rid = sorted(r.region_id for r in (RegionPaths.parse_region_dir(p.name)
                                       for p in (path / "_mem_wal").iterdir())
                 if r is not None)[0]
    log = RegionLog(ds.store, rid)
    values = decode_region_values(log.latest().region_values, "test")
    name = values.column_names[0]
    if damage == "renamed":
        bad = values.rename_columns([name.replace("u", "e")])
    else:
        bad = pa.table({name: pa.array([values.column(0)[0].as_py()], pa.int64())})
    log.update(lambda m: m.evolve(region_values=encode_region_values(bad)))
    current_runtime().clear()
    reads = [
        lambda: lance_sql.dataset(str(path)).mem_wal.scanner(filter="id = 12").to_table(),
        lambda: lance_sql.connect(str(tmp_path)).sql(
            "SELECT v FROM t WHERE id > 12").to_arrow_table(),
    ]

    def lookup() -> pa.Table:
        return lance_sql.dataset(str(path)).mem_wal.get(
            pa.table({"id": pa.array([12, 25], pa.int64())}))

    if damage == "renamed":
        reads.append(lookup)
    else:  # keys routed by number never join region values: every region asked
        current_runtime().clear()
        assert lookup().sort_by("id")["v"].to_pylist() == [12.0, 25.0]
    for read in reads:
        current_runtime().clear()
        with pytest.raises(FormatError, match="region"):
            read()
