"""The highest field id a table's MemWAL holds outside the table's manifest.

Flushed generations and writers' MemTables keep the schema their writer had, and readers
and the merger match them to the table's columns by field id: a new column must not take
an id one of them holds. A drop records the table's field-id mark for that
(``table/meta/field_ids.py``); this is the backstop for tables whose columns were dropped
before it did (or by another library): the generations the region manifests list that
the table has not merged yet, and this process's open writers. Writers of other
processes, and WAL entries not yet flushed, are not seen here.
"""

from __future__ import annotations

from lance_sql.errors import NotFoundError
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.generation_tables import open_generation
from lance_sql.memwal.merger import region_generations, region_ids
from lance_sql.memwal.wal import TOMBSTONE
from lance_sql.memwal.writer import open_writers
from lance_sql.table.dataset import LanceDataset

__all__ = ["held_field_id"]


def held_field_id(ds: LanceDataset, manifest: Manifest) -> int:
    """The highest field id of the unmerged generations and this process's open writers
    of the table at ``ds`` (``manifest``: the version a schema change read, whose MemWAL
    index says what is merged); -1 when it has no MemWAL or they hold none."""
    loaded = mem_wal_index.load(ds.at_manifest(manifest))
    if loaded is None:
        return -1
    details = loaded[1]
    held = -1
    for region_id in region_ids(ds):
        _, pending = region_generations(ds, region_id, details.merged_generation(region_id))
        for _, path in pending:
            try:
                schema = open_generation(ds.uri, ds.store, region_id, path).manifest.schema
            except NotFoundError:
                continue  # merged and collected since the region manifest was read
            held = max(held, _table_ids(schema))
    for writer in open_writers(ds.store.uri):
        held = max(held, _table_ids(writer.schema))
    return held


def _table_ids(schema: LanceSchema) -> int:
    """The highest id of the table's columns in a generation's or writer's schema (its
    ``_tombstone`` column's id is its own: readers never match it to the table's)."""
    return max((c.id for f in schema.fields if f.name != TOMBSTONE for c in f.walk()),
               default=-1)
