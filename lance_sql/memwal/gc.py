"""The MemWAL garbage collector: merged generations, their WAL files, old manifests, orphans.

What may go, per region (the spec's four rules, plus time travel):

1. a flushed generation merged into the base table (``generation <= merged``) and covered
   by every maintained index's catch-up (an index without an entry is caught up) — where
   ``merged`` is the *smallest* merge progress of any base-table version still kept, so a
   reader time-travelling to a retained version finds every generation it needs;
2. WAL entries referenced only by generations that go (never one not yet in a flushed
   generation: those are after ``replay_after_wal_id``);
3. region manifest versions older than the newest ``keep_manifests``;
4. ``*_gen_*`` directories the region manifest does not list (failed flushes): those of
   an already-flushed generation number at once, others (a flush may be running) once
   untouched for ``grace``.

The region manifest drops the generations first, then their files are deleted: a crash in
between leaves orphans the next run removes, never a listed generation without files.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from lance_sql.errors import FormatError, InvalidInputError, NotFoundError
from lance_sql.format.index import decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    FlushedGeneration,
    MemWalIndexDetails,
    details_of,
)
from lance_sql.io.store import ObjectStore
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.merger import region_ids
from lance_sql.memwal.naming import GenerationDir, RegionPaths, parse_manifest_name, parse_wal_name
from lance_sql.memwal.region_log import RegionLog
from lance_sql.table.dataset import LanceDataset, dataset
from lance_sql.table.meta.versions import list_versions, load_manifest
from lance_sql.table.ops.cleanup import set_aside_manifests

__all__ = ["GcResult", "collect_garbage"]

DEFAULT_GRACE = timedelta(hours=1)


@dataclass
class GcResult:
    """What one collection removed, per kind."""

    generations: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    wal_entries: int = 0
    manifests: int = 0
    orphans: list[str] = field(default_factory=list)


def _kept_manifests(store: ObjectStore) -> Iterator[Manifest]:
    """Every base version's manifest that is kept or may be kept: the versions listed,
    those a running cleanup has set aside (it may put them back: a tag or a writer needs
    them), and the versions listed again (a manifest put back while the set-aside ones
    were read). Each is read right after its listing, so a manifest renamed meanwhile is
    found by the next listing; a version may come twice."""
    seen: set[int] = set()
    for ref in list_versions(store):
        try:
            manifest = load_manifest(store, ref)
        except NotFoundError:
            continue  # set aside (found next) or removed while we looked
        seen.add(ref.version)
        yield manifest
    yield from set_aside_manifests(store)
    for ref in list_versions(store):
        if ref.version not in seen:
            try:
                yield load_manifest(store, ref)
            except NotFoundError:
                continue


def _retained_progress(ds: LanceDataset) -> dict[uuid.UUID, int]:
    """Per region, the smallest merge progress over every base version still kept (0 for
    a region some kept version has not merged at all), or set aside by a cleanup that
    may put it back. A version from before the MemWAL index reads as the plain table and
    needs no generation, so it holds nothing back (a tagged first version would otherwise
    keep every generation forever)."""
    progress: dict[uuid.UUID, int] | None = None
    for manifest in _kept_manifests(ds.store):
        details = None
        where = f"{ds.uri}: version {manifest.version}"
        for entry in decode_index_section(manifest.index_section):
            if entry.name == MEM_WAL_INDEX_NAME:
                details = MemWalIndexDetails.decode(details_of(entry), where)
        if details is None:
            continue
        seen = {m.region_id: m.generation for m in details.merged_generations}
        if progress is None:
            progress = seen
        else:
            progress = {r: min(g, seen.get(r, 0)) for r, g in progress.items()}
    return progress or {}


def _catchup_limit(details: MemWalIndexDetails, region_id: uuid.UUID) -> int | None:
    """The smallest caught-up generation of a maintained index (None: all caught up)."""
    maintained = set(details.maintained_indexes)
    limits = [c.generation_for(region_id) for c in details.index_catchup
              if details.maintain_all_indexes or c.index_name in maintained]
    known = [g for g in limits if g is not None]
    return min(known) if known else None


def _wal_files(store: ObjectStore, paths: RegionPaths, generation_path: str) -> set[int]:
    """The WAL entries a generation's fragments reference."""
    try:
        gen = dataset(f"{store.uri.rstrip('/')}/{paths.generation(generation_path)}")
    except (NotFoundError, FormatError):
        return set()
    entries = set()
    for fragment in gen.manifest.fragments:
        for data_file in fragment.files:
            entry = parse_wal_name(data_file.path.rsplit("/", 1)[-1])
            if entry is not None and data_file.base_id is not None:
                entries.add(entry)
    return entries


def collect_garbage(ds: LanceDataset, *, keep_manifests: int = 10,
                    grace: timedelta = DEFAULT_GRACE) -> GcResult:
    """Remove what no reader or writer can need any more (see the module docstring)."""
    if keep_manifests < 1:
        raise InvalidInputError("keep_manifests must be at least 1")
    current = dataset(ds.uri, commit_config=ds.commit_config)
    loaded = mem_wal_index.load(current)
    if loaded is None:
        raise NotFoundError(f"{ds.uri} has no MemWAL index")
    details = loaded[1]
    retained = _retained_progress(current)
    result = GcResult()
    for region_id in region_ids(current):
        _collect_region(current.store, region_id, details, retained.get(region_id, 0),
                        keep_manifests, grace, result)
    return result


def _collect_region(store: ObjectStore, region_id: uuid.UUID, details: MemWalIndexDetails,
                    merged: int, keep_manifests: int, grace: timedelta,
                    result: GcResult) -> None:
    log = RegionLog(store, region_id)
    manifest = log.latest()
    if manifest is None:
        return
    if not _listed_generations_present(store, log.paths, manifest.flushed_generations,
                                       merged):
        # another collector removed a generation since we read the manifest (its view of
        # the merges is newer): the manifest now says so, or else it is damaged
        manifest = log.latest()
        if manifest is None or not _listed_generations_present(
                store, log.paths, manifest.flushed_generations, merged, strict=True):
            return
    limit = merged
    catchup = _catchup_limit(details, region_id)
    if catchup is not None:
        limit = min(limit, catchup)
    doomed = [g for g in manifest.flushed_generations if g.generation <= limit]
    paths = log.paths
    if doomed:
        gone = {g.generation for g in doomed}
        after = log.update(lambda m: m.evolve(flushed_generations=tuple(
            g for g in m.flushed_generations if g.generation not in gone)))
        kept_wal = set()
        for g in after.flushed_generations:
            kept_wal |= _wal_files(store, paths, g.path)
        doomed_wal = set()
        for g in doomed:
            doomed_wal |= _wal_files(store, paths, g.path)
            store.delete_prefix(paths.generation(g.path))
            result.generations.append((region_id, g.generation))
        for entry in sorted(doomed_wal - kept_wal):
            if entry <= after.replay_after_wal_id:
                store.delete(paths.wal_entry(entry))
                result.wal_entries += 1
        manifest = after
    listed = {g.path for g in manifest.flushed_generations}
    now_ns = time.time_ns()
    for name in store.list_dir(paths.root):
        parsed = GenerationDir.parse(name)
        if parsed is None or name in listed:
            continue
        if parsed.generation >= manifest.current_generation and not _stale(
                store, f"{paths.root}/{name}", now_ns, grace):
            continue  # perhaps a flush in progress
        store.delete_prefix(f"{paths.root}/{name}")
        result.orphans.append(f"{paths.root}/{name}")
    versions = sorted(v for v in (parse_manifest_name(n)
                                  for n in store.list_dir(paths.manifest_dir)) if v)
    for version in versions[:-keep_manifests]:
        store.delete(paths.manifest(version))
        result.manifests += 1


def _listed_generations_present(store: ObjectStore, paths: RegionPaths,
                                flushed: Sequence[FlushedGeneration], merged: int, *,
                                strict: bool = False) -> bool:
    """Whether a region manifest's flushed generations name their directories: each must
    be a generation directory of its own number (else a FormatError), and one not merged
    yet must exist (else False; with ``strict``, a FormatError). Otherwise the real
    directory of a generation would look unlisted, an orphan, and be deleted with its
    rows: the collector removes nothing of such a region."""
    present = set(store.list_dir(paths.root))
    for g in flushed:
        parsed = GenerationDir.parse(g.path)
        if parsed is None or parsed.generation != g.generation:
            raise FormatError(
                f"{paths.root}: the region manifest lists generation {g.generation} at "
                f"{g.path!r}, not a directory of that generation: the manifest is damaged "
                "(garbage collection removed nothing)")
        if g.generation > merged and g.path not in present:
            if not strict:
                return False
            raise FormatError(
                f"{paths.root}: the region manifest lists unmerged generation "
                f"{g.generation} at {g.path!r}, which does not exist: the manifest is "
                "damaged or the generation's files are lost (garbage collection removed "
                "nothing)")
    return True


def _stale(store: ObjectStore, prefix: str, now_ns: int, grace: timedelta) -> bool:
    """Whether nothing under ``prefix`` was written within ``grace``."""
    newest = 0
    stack = [prefix]
    while stack:
        key = stack.pop()
        names = store.list_dir(key)
        if not names:
            try:
                newest = max(newest, store.modified_ns(key))
            except NotFoundError:
                pass
            continue
        stack.extend(f"{key}/{n}" for n in names)
    return now_ns - newest > grace.total_seconds() * 1e9
