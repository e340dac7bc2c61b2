"""Which field id a new column takes, and the table's field-id high-water mark (pure).

A new column's id must be one no reader could take for another column's values. The
schema and the data files name the ids a table holds now (a dropped column's values stay
in its files until a compaction rewrites them), and that is all Lance looks at. A table
with a MemWAL has more holders: flushed generations and writers' MemTables keep the
schema their writer had and are matched to the table's columns by field id. Once a
compaction has rewritten the files without a dropped column, nothing in the manifest
remembers its id, and a column added next would take it and read (and merge) the old
values. So a drop that lowers the table's highest id records the id the table had used in
its config (:data:`MAX_FIELD_ID_CONFIG`, lance_sql's own key: pylance keeps config keys
it does not know), and new ids go above it.
"""

from __future__ import annotations

from collections.abc import Mapping

from lance_sql.errors import FormatError
from lance_sql.format.index import decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME, MemWalIndexDetails, details_of
from lance_sql.format.schema import LanceSchema

__all__ = ["MAX_FIELD_ID_CONFIG", "has_mem_wal", "highest_held_field_id",
           "highest_used_field_id", "mark_to_record", "mem_wal_routing_columns",
           "next_field_id", "recorded_mark", "restored_config"]

MAX_FIELD_ID_CONFIG = "lance_sql.max_field_id"


def recorded_mark(config: Mapping[str, str]) -> int:
    """The high-water mark a table's config records (-1: none)."""
    text = config.get(MAX_FIELD_ID_CONFIG)
    if text is None:
        return -1
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1:
        raise FormatError(f"table config {MAX_FIELD_ID_CONFIG}={text!r} is not a field id")
    return value


def highest_held_field_id(manifest: Manifest) -> int:
    """The highest field id the table holds: its schema's and its data files' (a dropped
    column's data stays there until compaction). pylance's ``max_field_id``."""
    in_files = (i for frag in manifest.fragments for f in frag.files for i in f.fields)
    return max(manifest.schema.max_field_id(), max(in_files, default=-1))


def highest_used_field_id(manifest: Manifest) -> int:
    """The highest field id the table holds or held: :func:`highest_held_field_id` and
    its recorded mark."""
    return max(highest_held_field_id(manifest), recorded_mark(manifest.config))


def next_field_id(manifest: Manifest, held: int = -1) -> int:
    """The id a new column takes: above every id the table holds or held, and above
    ``held``, the highest id something outside the manifest still holds (a MemWAL's
    unmerged generations and open writers; -1: nothing)."""
    return max(highest_used_field_id(manifest), held) + 1


def mark_to_record(before: Manifest, after: LanceSchema,
                   after_config: Mapping[str, str] | None = None) -> int | None:
    """The mark to record before ``before``'s schema becomes ``after`` (ids taken out)
    and its config ``after_config`` (default: unchanged), or None when the change needs
    none: after it, and once a compaction has removed the data files' old ids, the schema
    and the recorded mark still reach every id used."""
    config = before.config if after_config is None else after_config
    used = highest_used_field_id(before)
    if used <= max(after.max_field_id(), recorded_mark(config)):
        return None
    return used


def restored_config(previous: Manifest, source: Manifest) -> Mapping[str, str]:
    """The config a restore of ``source`` commits over ``previous``: ``source``'s, with
    the mark raised to every id ``previous`` used when the table has a MemWAL and the
    restored schema and mark would not reach them (a restore takes ids out as a drop
    does)."""
    if not has_mem_wal(previous):
        return source.config
    mark = mark_to_record(previous, source.schema, source.config)
    return source.config if mark is None else {**source.config, MAX_FIELD_ID_CONFIG: str(mark)}


def has_mem_wal(manifest: Manifest) -> bool:
    """Whether the table version has a MemWAL index."""
    return any(i.name == MEM_WAL_INDEX_NAME
               for i in decode_index_section(manifest.index_section))


def mem_wal_routing_columns(manifest: Manifest) -> dict[int, str]:
    """The field ids by which a table's MemWAL routes rows and matches them to keys, each
    with what it is: the primary-key columns and its region specs' source columns (none
    without a MemWAL). Writers route every row by these ids and readers look keys up in
    the region they route to, so such a column may not be dropped or change type (which
    gives it a new id): its rows would go to another region than its older rows."""
    entry = next((i for i in decode_index_section(manifest.index_section)
                  if i.name == MEM_WAL_INDEX_NAME), None)
    if entry is None:
        return {}
    schema = manifest.schema
    out = {schema.field(name).id: "a primary-key column" for name in schema.primary_key}
    details = MemWalIndexDetails.decode(details_of(entry), f"index {MEM_WAL_INDEX_NAME}")
    for spec in details.region_specs:
        for region_field in spec.fields:
            for source in region_field.source_ids:
                out.setdefault(source, "a region-spec source column")
    return out
