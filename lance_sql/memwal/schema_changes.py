"""Type changes of a table with a MemWAL: the values it holds unmerged must fit too.

``alter_columns`` casts the base table's values to a column's new type and refuses a
value that does not fit. The MemWAL holds more values of the column, under the type
their writer had: flushed generations not merged yet, WAL entries not flushed yet, and
the MemTables of this process's writers. They are cast when read, merged or replayed
(:mod:`.value_cast`), so one that does not fit would make every read of its region fail
afterwards and its region could not be merged or written again. This checks them all
first, with the same cast, and refuses the change naming where such a value is.

Not seen here: the MemTables of writers in other processes (their durable puts are in
the WAL, which is checked; puts not yet flushed to the WAL are not). A type change is
best made with the writers closed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lance_sql.errors import NotFoundError
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.generation_tables import named_schema, open_generation
from lance_sql.memwal.merger import region_generations, region_ids
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.value_cast import as_column_type
from lance_sql.memwal.wal import WalLog, memtable_schema
from lance_sql.memwal.writer import open_writers
from lance_sql.table.dataset import LanceDataset

__all__ = ["check_type_changes"]


def check_type_changes(ds: LanceDataset, alterations: Sequence[Mapping[str, Any]]) -> None:
    """SchemaError when a type change among ``alterations`` (``alter_columns``'s) would
    not fit a value ``ds``'s MemWAL holds unmerged; nothing when the table has none."""
    loaded = mem_wal_index.load(ds)
    if loaded is None:
        return
    schema = ds.manifest.schema
    columns = schema.to_arrow().names
    changes: dict[str, pa.DataType] = {}
    for alt in alterations:
        if not isinstance(alt, Mapping):
            continue  # (alter_columns words what is wrong with it)
        path, given = alt.get("path"), alt.get("data_type")
        if given is None or not isinstance(path, str) or "." in path:
            continue  # (alter_columns words what is wrong with it)
        if path not in columns:
            continue
        try:
            changes[path] = pa.field("_", given).type
        except (TypeError, ValueError, pa.ArrowException):
            continue
    if not changes:
        return
    for where, rows in _unmerged_rows(ds, loaded[1].merged_generation, schema, list(changes)):
        for name, target in changes.items():
            if name in rows.column_names:
                as_column_type(rows.column(name), target,
                               f"cannot change column {name!r} to {target}: {where} holds "
                               f"values of it not merged yet, and one")


def _unmerged_rows(ds: LanceDataset, merged: Any, schema: LanceSchema, names: list[str]
                   ) -> Iterator[tuple[str, pa.Table]]:
    """(where, rows of the table's columns ``names`` it holds, named as the table names
    them) for each place the MemWAL holds rows not in the base table: pending
    generations, WAL entries past each region's replay point, and this process's
    writers' MemTables."""
    for region_id in region_ids(ds):
        for generation, path in region_generations(ds, region_id, merged(region_id))[1]:
            try:
                gen = open_generation(ds.uri, ds.store, region_id, path)
            except NotFoundError:
                continue  # merged and collected since the region manifest was read
            written = gen.manifest.schema.fields
            now = named_schema(gen.manifest.schema, schema).fields
            held = {n.name: w.name for w, n in zip(written, now, strict=True)
                    if n.name in names}
            if held:
                table = gen.to_table(columns=list(held.values()))
                yield (f"region {region_id} generation {generation}",
                       table.rename_columns(list(held)))
        yield from _wal_backlog(ds, region_id, schema)
    for writer in open_writers(ds.store.uri):
        for memtable in writer.memtables():
            yield f"region {writer.region_id}'s open MemTable", memtable.to_table()


def _wal_backlog(ds: LanceDataset, region_id: uuid.UUID, schema: LanceSchema
                 ) -> Iterator[tuple[str, pa.Table]]:
    manifest = RegionLog(ds.store, region_id).latest()
    if manifest is None:
        return
    log = WalLog(ds.store, region_id)
    for entry in log.read_after(manifest.replay_after_wal_id, memtable_schema(schema)):
        yield f"region {region_id} WAL entry {entry.entry_id}", entry.rows
