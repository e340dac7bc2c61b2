"""The MemWAL garbage collector: what it removes, and what it must keep."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from test_merger import SCHEMA, A, B, _base, _flush, _rows

import lance_sql
from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.format.memwal import (
    FlushedGeneration,
    IndexCatchupProgress,
    MemWalIndexDetails,
    MergedGeneration,
)
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.gc import _catchup_limit, collect_garbage
from lance_sql.memwal.merger import merge
from lance_sql.memwal.naming import GenerationDir, RegionPaths
from lance_sql.memwal.region_log import RegionLog


def _dirs(ds: lance_sql.LanceDataset, region: uuid.UUID) -> list[str]:
    root = RegionPaths(region).root
    return sorted(n for n in ds.store.list_dir(root)
                  if GenerationDir.parse(n) and ds.store.list_dir(f"{root}/{n}"))


def test_merged_generations_go_once_no_kept_version_needs_them(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    _flush(ds, A, [(2, "b", False)])
    _flush(ds, B, [(3, "c", False)])
    # Every version is kept, including the one before any merge: nothing may go.
    merge(ds)
    assert collect_garbage(ds).generations == []
    assert len(_dirs(ds, A)) == 2
    # Once cleanup removes the old base versions, merged generations go.
    lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
    result = collect_garbage(ds)
    assert sorted(result.generations) == sorted([(A, 1), (A, 2), (B, 1)])
    assert _dirs(ds, A) == [] and _dirs(ds, B) == []
    assert RegionLog(ds.store, A).latest().flushed_generations == ()
    assert _rows(ds)[2] == "b"  # the data lives on in the base table


def test_unmerged_and_lagging_index_generations_stay(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    _flush(ds, A, [(2, "b", False)])
    merge(ds, max_generations=1)  # generation 2 stays unmerged
    lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
    assert collect_garbage(ds).generations == [(A, 1)]
    assert [g.generation for g in RegionLog(ds.store, A).latest().flushed_generations] == [2]
    # An index that has caught up only to generation 1 holds back generation 2's removal.
    merge(ds)
    _, details = mem_wal_index.load(lance_sql.dataset(ds.uri))
    lagging = details.evolve(index_catchup=(IndexCatchupProgress(
        "id_idx", (MergedGeneration(A, 1),)),))
    assert _catchup_limit(lagging, A) == 1 and _catchup_limit(details, A) is None
    assert _catchup_limit(MemWalIndexDetails(), B) is None


def test_orphans_and_old_manifests(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    root = RegionPaths(A).root
    failed_earlier = GenerationDir("0badf00d", 1)  # a failed attempt at generation 1
    in_progress = GenerationDir("0badcafe", 2)     # perhaps a flush running now
    for d in (failed_earlier, in_progress):
        lance_sql.write_dataset(pa.table({"id": [1]}), f"{ds.uri}/{root}/{d.name}")
    for _ in range(12):
        RegionLog(ds.store, A).update(lambda m: m.evolve(wal_id_last_seen=m.wal_id_last_seen
                                                         + 1))
    result = collect_garbage(ds, keep_manifests=5)
    assert result.orphans == [f"{root}/{failed_earlier.name}"]
    assert in_progress.name in _dirs(ds, A)
    assert result.manifests == RegionLog(ds.store, A).latest_version() - 5
    assert RegionLog(ds.store, A).latest() is not None
    result = collect_garbage(ds, grace=timedelta(0))
    assert result.orphans == [f"{root}/{in_progress.name}"]


def test_bad_arguments(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    with pytest.raises(InvalidInputError, match="keep_manifests"):
        collect_garbage(ds, keep_manifests=0)


def test_a_kept_version_from_before_the_mem_wal_holds_nothing_back(tmp_path: Path) -> None:
    """A tagged first version (before the MemWAL index) reads as the plain table and
    needs no generation: merged generations still go once no MemWAL version needs them."""
    data = pa.table({"id": list(range(10)), "v": [f"base{i}" for i in range(10)]},
                    schema=SCHEMA)
    plain = lance_sql.write_dataset(data, str(tmp_path / "t.lance"))
    plain.tags.create("initial", plain.version)
    ds = mem_wal_index.initialize(plain)
    _flush(ds, A, [(1, "a", False), (2, None, True)])
    _flush(ds, B, [(30, "c", False)])
    merge(ds)
    lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0),
        error_if_tagged_old_versions=False)
    kept = [v["version"] for v in lance_sql.dataset(ds.uri).versions()]
    assert kept[0] == plain.version and len(kept) == 2  # the tag keeps the first version
    result = collect_garbage(ds)
    assert sorted(result.generations) == sorted([(A, 1), (B, 1)])
    assert _dirs(ds, A) == [] and _dirs(ds, B) == []
    assert _rows(ds) == {**{i: f"base{i}" for i in range(10) if i != 2}, 1: "a", 30: "c"}
    first = lance_sql.dataset(ds.uri, version="initial").to_table()
    assert first.column("v").to_pylist() == data.column("v").to_pylist()


@pytest.mark.parametrize("damage", ["unparsable", "another-prefix", "another-number"])
def test_a_manifest_misnaming_a_generation_is_refused_and_nothing_goes(
        tmp_path: Path, damage: str) -> None:
    """A region manifest whose flushed generation names a directory that is not there
    (a damaged byte) would make the real directory look like an orphan of a failed flush
    and lose its rows: the collector refuses with a FormatError and removes nothing, not
    even what it could otherwise remove (old manifests)."""
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    _flush(ds, A, [(2, "b", False)])
    for _ in range(12):
        RegionLog(ds.store, A).update(lambda m: m.evolve(wal_id_last_seen=m.wal_id_last_seen
                                                         + 1))
    log = RegionLog(ds.store, A)
    real = log.latest().flushed_generations[0]
    wrong = {"unparsable": "0badf00x_gen_1",
             "another-prefix": GenerationDir("0badf00d", 1).name,
             "another-number": GenerationDir(real.path.split("_")[0], 5).name}[damage]
    log.update(lambda m: m.evolve(flushed_generations=(
        FlushedGeneration(1, wrong, physical_rows=1), *m.flushed_generations[1:])))
    before = sorted(p for p in Path(ds.uri).rglob("*") if p.is_file())
    with pytest.raises(FormatError, match="damaged"):
        collect_garbage(ds, keep_manifests=1, grace=timedelta(0))
    assert sorted(p for p in Path(ds.uri).rglob("*") if p.is_file()) == before
    assert real.path in _dirs(ds, A)
    # the manifest repaired: the generation reads again, and the collector runs
    log.update(lambda m: m.evolve(flushed_generations=(real, *m.flushed_generations[1:])))
    assert collect_garbage(ds, keep_manifests=1).orphans == []
    assert real.path in _dirs(ds, A)
    merge(ds)
    assert _rows(ds)[1] == "a"  # its rows were kept


def test_a_collector_behind_another_one_removes_nothing_and_raises_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two collectors at once: one read the region manifest (listing a generation) and
    its merge progress before the other removed that generation. The generation's
    directory being gone then is no damage: the latest manifest no longer lists it."""
    from lance_sql.memwal import gc as gc_module

    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    merge(ds)
    lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
    stale = RegionLog(ds.store, A).latest()
    assert [g.generation for g in stale.flushed_generations] == [1]
    assert collect_garbage(ds).generations == [(A, 1)]  # the other collector
    real = RegionLog.latest
    calls: list[int] = []

    def first_stale(self: RegionLog) -> object:
        calls.append(1)
        return stale if len(calls) == 1 and self.region_id == A else real(self)

    monkeypatch.setattr(RegionLog, "latest", first_stale)
    result = gc_module.GcResult()
    details = mem_wal_index.load(lance_sql.dataset(ds.uri))[1]
    gc_module._collect_region(ds.store, A, details, 0, 10, timedelta(hours=1), result)
    assert result == gc_module.GcResult()
    assert len(calls) == 2  # the manifest read again


def test_versions_a_cleanup_has_set_aside_still_hold_their_generations(
        tmp_path: Path) -> None:
    """A running cleanup renames the manifests it removes first, and may put one back (a
    tag or a writer needs it): the collector counts set-aside versions as kept, or a
    version put back would have lost the generations it had not merged."""
    from lance_sql.table.ops.cleanup import SET_ASIDE

    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    before = lance_sql.dataset(ds.uri).version  # has not merged generation 1
    merge(ds)
    for v in lance_sql.dataset(ds.uri).versions():
        if v["version"] <= before:
            key = Path(ds.uri) / lance_sql.dataset(ds.uri, v["version"]).manifest_key
            if v["version"] == before:  # set aside by a cleanup still running
                key.rename(f"{key}.{time.time_ns()}{SET_ASIDE}")
            else:
                key.unlink()
    assert [v["version"] for v in lance_sql.dataset(ds.uri).versions()] == [before + 1]
    assert collect_garbage(ds).generations == []
    assert len(_dirs(ds, A)) == 1
