"""The MemWAL index of a base table: set it up, and read its configuration and progress.

The index is an entry named ``__lance_mem_wal`` in the table's index section (no fields,
no fragment bitmap) whose details are a ``MemWalIndexDetails``: the region specs writers
route by, the indexes MemTables maintain, writer defaults, and each region's merge
progress. It is created by one CreateIndex commit; merges update it in their own commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    MemWalIndexDetails,
    details_of,
    with_details,
)
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.bloom import hashable_key_type
from lance_sql.memwal.transforms import check_spec_types
from lance_sql.memwal.wal import check_reserved_columns
from lance_sql.table.txn.operations import CreateIndex

if TYPE_CHECKING:
    from lance_sql.table.dataset import LanceDataset

__all__ = ["WRITER_DEFAULT_KEYS", "check_key_types", "initialize", "load", "primary_key_columns"]

# Writer options whose defaults the index records (values are strings, as stored).
WRITER_DEFAULT_KEYS = ("durable_write", "max_memtable_rows", "max_memtable_bytes",
                       "max_wal_flush_interval_ms", "max_unflushed_bytes")


def primary_key_columns(schema: LanceSchema) -> list[str]:
    """The table's primary-key columns in key position order (fields without a position
    come after, in schema order), or SchemaError when it has none."""
    keyed = schema.primary_key
    if not keyed:
        raise SchemaError(
            "MemWAL needs a primary key: create the table with primary_key=[...] (field "
            "metadata 'lance-schema:unenforced-primary-key': 'true')")
    return keyed


def check_key_types(schema: LanceSchema) -> None:
    """SchemaError when a primary-key column has a type MemWAL cannot hash (its bloom
    filters and key indexes need it): nested types such as lists and structs."""
    arrow = schema.to_arrow()
    for name in primary_key_columns(schema):
        t = arrow.field(name).type
        if pa.types.is_dictionary(t):
            # (keys are sorted and compared by value, which Arrow does not do on dictionaries)
            raise SchemaError(f"primary-key column {name!r} is dictionary-encoded ({t}); "
                              f"MemWAL keys hold plain values: write the column as "
                              f"{t.value_type}")
        if not hashable_key_type(t):
            raise SchemaError(f"primary-key column {name!r} has type {t}, which MemWAL "
                              f"cannot hash; key columns must be numbers, booleans, "
                              f"dates and times, decimals, strings or binaries")


def load(ds: LanceDataset) -> tuple[IndexMetadata, MemWalIndexDetails] | None:
    """The MemWAL index entry and its details at ``ds``'s version (None: no MemWAL)."""
    for entry in decode_index_section(ds.manifest.index_section,
                                      f"{ds.uri}: version {ds.version}"):
        if entry.name == MEM_WAL_INDEX_NAME:
            where = f"{ds.uri}: index {MEM_WAL_INDEX_NAME}"
            return entry, MemWalIndexDetails.decode(details_of(entry), where)
    return None


def initialize(ds: LanceDataset, region_spec: RegionSpec | None = None, *,
               maintained_indexes: Sequence[str] | None = None,
               writer_defaults: Mapping[str, object] | None = None) -> LanceDataset:
    """Commit the MemWAL index for ``ds``'s table; returns the table at the new version.

    ``region_spec`` (bound to the schema here, spec id 1) routes rows to regions; None
    means regions are created by hand (spec id 0). ``maintained_indexes`` names base-table
    indexes MemTables keep up to date (None: all of them).
    """
    ctx = ds.write_context()
    base = ctx.table
    entries = decode_index_section(base.index_section)
    if any(i.name == MEM_WAL_INDEX_NAME for i in entries):
        raise InvalidInputError(f"{ds.uri} already has a MemWAL index")
    check_key_types(base.schema)
    check_reserved_columns(base.schema, ds.uri)
    specs: tuple[RegionSpec, ...] = ()
    if region_spec is not None:
        specs = (region_spec.bind(base.schema).with_id(1),)
        check_spec_types(specs[0], base.schema)
    names = {i.name for i in entries}
    for name in maintained_indexes or ():
        if name not in names:
            raise InvalidInputError(f"{ds.uri} has no index named {name!r} to maintain; "
                                    f"indexes: {', '.join(sorted(names)) or 'none'}")
    defaults = {}
    for key, value in (writer_defaults or {}).items():
        if key not in WRITER_DEFAULT_KEYS:
            raise InvalidInputError(f"unknown MemWAL writer option {key!r}; known: "
                                    f"{', '.join(WRITER_DEFAULT_KEYS)}")
        defaults[key] = str(value).lower() if isinstance(value, bool) else str(value)
    details = MemWalIndexDetails(
        region_specs=specs, maintained_indexes=tuple(maintained_indexes or ()),
        writer_config_defaults=defaults,
        maintain_all_indexes=maintained_indexes is None)
    entry = with_details(IndexMetadata.new(MEM_WAL_INDEX_NAME, [], base.version, None),
                         details.encode(), base.version)
    return ds.at_manifest(ctx.commit(CreateIndex((entry,))))
