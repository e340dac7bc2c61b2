"""A flushed generation opened as a Lance table reading this table's own WAL files.

A generation's fragments are its region's WAL entries: its manifest names the region's WAL
directory as a base path, written as the absolute URI it had when it was flushed (pylance
opens generations so). A table copied or moved keeps that old URI: read as recorded, the
copy would read the original's WAL files, or fail once they are gone, and a copy of a copy
would read whichever still exists. So a generation is read against the WAL directory of its
region in the table it is opened from. A base path that does not name a region's WAL
directory (``.../_mem_wal/<region>/wal``) is left as it is.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from lance_sql.errors import FormatError
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceSchema
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.column_match import match_columns, named_by_id
from lance_sql.memwal.naming import RegionPaths
from lance_sql.table.dataset import LanceDataset

__all__ = ["check_generation_columns", "named_as_table", "named_schema", "open_generation",
           "relocate_wal_bases"]

_TOMBSTONE = "_tombstone"  # (the WAL's column; its field id is the generation's own)


def relocate_wal_bases(manifest: Manifest, region_id: uuid.UUID, wal_uri: str) -> Manifest:
    """``manifest`` with each base path naming region ``region_id``'s WAL directory (in
    whatever table) replaced by ``wal_uri``; the same object when none needs it."""
    suffix = "/" + RegionPaths(region_id).wal_dir
    bases = tuple(
        dataclasses.replace(b, path=wal_uri)
        if not b.is_dataset_root and b.path != wal_uri and b.path.rstrip("/").endswith(suffix)
        else b
        for b in manifest.base_paths)
    if bases == manifest.base_paths:
        return manifest
    return dataclasses.replace(manifest, base_paths=bases)


def open_generation(table_uri: str, table_store: ObjectStore, region_id: uuid.UUID,
                    path: str) -> LanceDataset:
    """Region ``region_id``'s generation flushed to directory ``path``, in the table at
    ``table_uri`` / ``table_store``, reading the WAL files of that table (see the module
    docstring). Raises ``NotFoundError`` when it is gone (collected after its merge)."""
    paths = RegionPaths(region_id)
    key = paths.generation(path)
    ds = LanceDataset(f"{table_uri.rstrip('/')}/{key}", store=table_store.child(key))
    relocated = relocate_wal_bases(ds.manifest, region_id,
                                   f"{table_store.uri.rstrip('/')}/{paths.wal_dir}")
    return ds if relocated is ds.manifest else ds.at_manifest(relocated)


def check_generation_columns(gen: LanceDataset, key_columns: Sequence[str]) -> None:
    """A FormatError naming the generation unless it holds what every read of it needs:
    its ``_tombstone`` flags (bool) and the table's primary-key columns (named as the
    table names them: see :func:`named_as_table`)."""
    fields = {f.name: f for f in gen.manifest.schema.fields}
    tombstone = fields.get(_TOMBSTONE)
    if tombstone is None or tombstone.children or tombstone.logical_type != "bool":
        raise FormatError(f"{gen.uri}: a MemWAL generation without a boolean "
                          f"{_TOMBSTONE} column")
    missing = [k for k in key_columns if k not in fields or fields[k].children]
    if missing:
        raise FormatError(f"{gen.uri}: a MemWAL generation without the primary-key "
                          f"column(s) {missing}")


def named_as_table(gen: LanceDataset, table: LanceSchema) -> LanceDataset:
    """``gen`` with each column named as the table names the column holding its values
    now (:func:`named_schema`); the same object when no column needs it.

    A generation keeps the schema its writer had: after a rename its rows would read as
    NULL under the new name."""
    schema = named_schema(gen.manifest.schema, table)
    if schema is gen.manifest.schema:
        return gen
    return gen.at_manifest(dataclasses.replace(gen.manifest, schema=schema))


def named_schema(written: LanceSchema, table: LanceSchema) -> LanceSchema:
    """``written`` (a generation's or a writer's schema) with its columns and the fields
    nested in them named as ``table`` names them now (:func:`~.column_match.match_columns`:
    by field id, a retyped column by name; nested fields by id,
    :func:`~.column_match.named_by_id`); the same object when no name changes.

    A column that is gone (dropped, or dropped and added again under its name: another
    column) is hidden under a name no reader asks for when the table has a column of its
    name, so readers matching by name do not take its values for that column's."""
    matched = match_columns(written, table, skip=(_TOMBSTONE,))
    table_names = {f.name for f in table.fields}
    fields = []
    for f in written.fields:
        now = matched.get(f.id)
        if f.name == _TOMBSTONE:
            pass
        elif now is not None:
            f = named_by_id(f, now)
        elif f.name in table_names:
            f = dataclasses.replace(f, name=f"{f.name} (dropped field {f.id})")
        fields.append(f)
    if all(a is b for a, b in zip(fields, written.fields, strict=True)):
        return written
    return dataclasses.replace(written, fields=tuple(fields))
