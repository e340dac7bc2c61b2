"""Recovery of regions whose writer died: their WAL backlog flushed as a generation.

A writer acknowledges a durable put once its WAL entry is written; the rows reach a
flushed generation (what readers in other processes see) only at its next MemTable
flush. When the writer dies first, the spec leaves those entries to the region's next
writer, which replays them when it claims the region ("Initialization & Recovery").
Until someone opens a writer there, the acknowledged rows stay unseen by readers that
do not share the dead writer's process (the spec's eventual consistency).

:func:`recover` is the background job that does not wait for that writer: for each region
with a WAL backlog (entries past ``replay_after_wal_id``) it claims the region the way any
writer does (epoch raised: fencing by the spec's rules), replays the entries, flushes them
as the next generation and lets go. It skips

* regions whose writer is open in this process (its MemTables are read already),
* regions whose newest backlog entry is younger than ``idle``: a writer elsewhere may be
  alive and about to flush them itself.

A live writer it fences anyway (one idle longer than ``idle`` with a backlog) loses
nothing it acknowledged (its entries were valid when written and are replayed, spec
Appendix 1); its next MemTable flush fails with WriterFencedError, and entries it writes
after the claim wait for the next recovery or writer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from lance_sql.errors import InvalidInputError, WriterFencedError
from lance_sql.format.memwal import MemWalIndexDetails, RegionManifest
from lance_sql.memwal.merger import region_ids
from lance_sql.memwal.naming import RegionPaths
from lance_sql.memwal.pk_index import MaintainedIndex
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import decode_region_values
from lance_sql.memwal.writer import RegionWriter, WriterConfig, open_writers
from lance_sql.table.dataset import LanceDataset

__all__ = ["RecoveryResult", "recover"]


@dataclass(frozen=True)
class RecoveryResult:
    """What :func:`recover` did with one region that had a WAL backlog: ``entries`` its
    backlog's size; ``generation`` the generation flushed (None: skipped, ``reason``)."""

    region: uuid.UUID
    entries: int
    generation: int | None = None
    reason: str = ""


def _backlog(ds: LanceDataset, manifest: RegionManifest) -> tuple[int, int | None]:
    """(entries past ``replay_after_wal_id``, the newest one's modification time ns)."""
    log = RegionLog(ds.store, manifest.region_id)
    last = log.last_wal_entry(manifest)
    if last <= manifest.replay_after_wal_id:
        return 0, None
    newest = RegionPaths(manifest.region_id).wal_entry(last)
    return last - manifest.replay_after_wal_id, ds.store.modified_ns(newest)


def _writer(ds: LanceDataset, details: MemWalIndexDetails, manifest: RegionManifest,
            config: WriterConfig, maintained: tuple[MaintainedIndex, ...]) -> RegionWriter:
    """A writer of the region as its manifest describes it (its spec and values)."""
    spec, values = None, None
    if manifest.region_spec_id:
        spec = next((s for s in details.region_specs if s.spec_id == manifest.region_spec_id),
                    None)
        if spec is None or manifest.region_values is None:
            raise InvalidInputError(f"region {manifest.region_id}: spec "
                                    f"{manifest.region_spec_id} or its values are unknown")
        table = decode_region_values(manifest.region_values, f"region {manifest.region_id}",
                                     spec)
        values = {name: table.column(name)[0].as_py() for name in table.column_names}
    return RegionWriter(ds.store, manifest.region_id, ds.manifest.schema,
                        data_format=ds.manifest.data_format, region_spec=spec, region=values,
                        config=config, maintained_indexes=maintained)


def recover(ds: LanceDataset, details: MemWalIndexDetails, config: WriterConfig,
            maintained: tuple[MaintainedIndex, ...] = (),
            regions: Iterable[uuid.UUID] | None = None, *,
            idle: timedelta | float = timedelta(seconds=60)) -> list[RecoveryResult]:
    """Flush the WAL backlog of ``regions`` (default every region) whose newest entry is
    at least ``idle`` old (a timedelta, or seconds) and whose writer is not open here
    (see the module docstring); one result per region with a backlog."""
    if isinstance(idle, (int, float)) and not isinstance(idle, bool):
        idle = timedelta(seconds=idle)  # (seconds, as a number)
    if not isinstance(idle, timedelta):
        raise InvalidInputError(f"idle must be a timedelta or seconds, got {idle!r}")
    if idle < timedelta(0):
        raise InvalidInputError(f"idle must not be negative, got {idle}")
    ours = {w.region_id for w in open_writers(ds.uri)}
    wanted = list(regions) if regions is not None else region_ids(ds)
    cutoff = time.time_ns() - int(idle.total_seconds() * 1e9)
    out: list[RecoveryResult] = []
    for rid in wanted:
        manifest = RegionLog(ds.store, rid).latest()
        if manifest is None:
            if regions is not None:
                raise InvalidInputError(f"{ds.uri} has no region {rid}")
            continue
        entries, modified = _backlog(ds, manifest)
        if not entries:
            continue
        if rid in ours:
            out.append(RecoveryResult(rid, entries, reason="its writer is open here"))
            continue
        if modified is not None and modified > cutoff:
            out.append(RecoveryResult(rid, entries, reason=f"WAL written within {idle}"))
            continue
        try:
            writer = _writer(ds, details, manifest, config, maintained)
        except WriterFencedError as exc:  # another writer claimed it meanwhile
            out.append(RecoveryResult(rid, entries, reason=str(exc)))
            continue
        try:
            flushed = writer.flush_memtable()
            writer.close(flush_memtable=False)
        except WriterFencedError as exc:  # claimed by another writer (or recovery) since
            writer.abort()
            out.append(RecoveryResult(rid, entries, reason=str(exc)))
            continue
        except BaseException:
            writer.abort()
            raise
        out.append(RecoveryResult(rid, entries,
                                  flushed.generation if flushed is not None else None,
                                  "" if flushed is not None else "no rows to flush"))
    return out
