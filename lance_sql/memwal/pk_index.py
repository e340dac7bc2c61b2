"""The primary-key BTREE index of a flushed generation.

A MemTable flush writes, besides the data (the WAL entries) and ``bloom_filter.bin``, a
standard Lance BTREE index of the generation's primary key, so a point lookup in a
generation reads a few index pages instead of every row. Its entries map each row's key to
the row's address *in the generation*: the MemTable addresses its rows by MemTable
fragment, the generation by WAL entry, and the WAL fragment mapping translates one into the
other (:meth:`~lance_sql.memwal.memtable.MemTable.flushed_addresses`).

The index is an ordinary entry of the generation table's index section (type BTREE, named
``{column}_idx`` like pylance's default, files under the generation's
``_indices/{uuid}/``), committed as the generation's second version, so any Lance reader
(pylance included) lists it and answers ``key = …`` filters with it. Every row is indexed,
tombstones too (a lookup must find a key's latest row, whatever it is); among a key's rows
the highest address is the latest.

Composite keys: a BTREE index has one column, so the index covers the *first* key column
(in key position order); a lookup narrows to that column's matches and checks the other
key columns on the rows found. Key types a BTREE cannot index (e.g. fixed-size binary)
get no index; lookups then scan the generation.

**Maintained indexes.** The MemWAL index lists base-table indexes MemTables maintain
(``maintained_indexes``; all of them when it was initialised with None). Each BTREE among
them gets a twin in every flushed generation: the same name and column, built the same
way from the MemTable's values and committed with the primary-key index in one
CreateIndex. Other index types (vector, full-text, bitmap...) cannot be built here: named
explicitly, they make the writer refuse to open (UnsupportedFeatureError); under "all of
them" they are skipped. An index on the primary key's indexed column is the primary-key
index itself (always there), and one the base table has dropped since is not maintained.
Nor is one on another column named as the generation's key index (``{key}_idx``): two
indexes of one name in a generation made pylance answer key lookups from the wrong one
(named explicitly: InvalidInputError; under "all of them": skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError, UnsupportedFeatureError
from lance_sql.format.btree import TYPE_URL as BTREE_TYPE_URL
from lance_sql.format.btree import page_data_schema, sort_entries
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME, MemWalIndexDetails
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.memtable import MemTable
from lance_sql.table.index import key_type_supported, write_btree_index
from lance_sql.table.txn.commit import commit_transaction
from lance_sql.table.txn.operations import CreateIndex, Transaction

__all__ = ["MaintainedIndex", "index_name", "indexed_key_field", "maintained_btrees",
           "write_generation_indexes", "write_primary_key_index"]

# Pages of 1 MiB instead of the default 8: encoding a page takes a few times its size in
# temporaries, on top of the writer's MemTables (measured: ~15 MiB less peak RSS per
# 1M-row flush); lookups read a 4096-entry index page either way.
INDEX_PAGE_BYTES = 1 << 20


def indexed_key_field(manifest: Manifest, primary_key: tuple[str, ...]) -> LanceField | None:
    """The key column a generation's index covers (None: its type cannot be indexed)."""
    field = next(f for f in manifest.schema.fields if f.name == primary_key[0])
    return field if key_type_supported(field.to_arrow().type) else None


@dataclass(frozen=True)
class MaintainedIndex:
    """A base-table BTREE index a MemTable flush rebuilds in its generation."""

    name: str
    column: str


def maintained_btrees(manifest: Manifest, details: MemWalIndexDetails,
                      primary_key: Sequence[str]) -> tuple[MaintainedIndex, ...]:
    """The base-table indexes (of ``manifest``) each flushed generation carries, besides
    the primary key's, as the MemWAL index ``details`` asks (see the module docstring)."""
    entries: dict[str, IndexMetadata] = {}
    for entry in decode_index_section(manifest.index_section):
        if entry.name != MEM_WAL_INDEX_NAME:
            entries.setdefault(entry.name, entry)
    explicit = not details.maintain_all_indexes
    names = details.maintained_indexes if explicit else tuple(sorted(entries))
    top = {f.id: f for f in manifest.schema.fields}
    out = []
    for name in names:
        found = entries.get(name)
        if found is None:
            continue  # dropped from the base table since: nothing left to maintain
        field = top.get(found.fields[0]) if len(found.fields) == 1 else None
        supported = (found.type_url == BTREE_TYPE_URL and field is not None
                     and key_type_supported(field.to_arrow().type))
        if not supported:
            if explicit:
                raise UnsupportedFeatureError(
                    f"MemTables maintain BTREE indexes of one top-level column; the base "
                    f"table's index {name!r} ({found.type_url.rsplit('.', 1)[-1]} on field "
                    f"ids {list(found.fields)}) is not one")
            continue
        assert field is not None
        if field.name == primary_key[0]:
            continue  # the primary-key index itself
        if name == index_name(primary_key[0]):
            # a generation's key index has this name: a second index of it (on another
            # column) made pylance answer key lookups from that one
            if explicit:
                raise InvalidInputError(
                    f"the base table's index {name!r} is on {field.name!r}, but a flushed "
                    f"generation's primary-key index takes that name; MemTables cannot "
                    f"maintain it under it: give the index another name")
            continue
        out.append(MaintainedIndex(name, field.name))
    return tuple(out)


def index_name(column: str) -> str:
    """The name of a generation's primary-key index (pylance's default index name)."""
    return f"{column}_idx"


def _sorted_entries(memtable: MemTable, key_type: pa.DataType) -> pa.Table:
    """The index's (key, generation row address) rows sorted by key.

    An integer key (never null: it is a primary key) is sorted in numpy with two
    row-sized arrays alive (the keys, sorted in place, and the permutation, turned into
    the addresses in place), where the general path holds about three times that: this
    runs on a whole MemTable, on top of the writer's memory bound."""
    if pa.types.is_integer(key_type):
        columns = [f.rows.column(memtable.primary_key[0]) for f in memtable.fragments()]
        if columns and not any(c.null_count for c in columns):
            keys = np.concatenate([chunk.to_numpy(zero_copy_only=False)  # views
                                   for c in columns for chunk in c.chunks])
            order = np.argsort(keys)  # introsort: no buffer; ties in any order (a set)
            keys.sort()  # again, in place: cheaper than a sorted copy's memory
            addresses = memtable.flushed_addresses(order)
            return pa.Table.from_arrays([pa.array(keys, key_type), pa.array(addresses)],
                                        schema=page_data_schema(key_type))
    # sorted here, so the unsorted inputs are freed before the files are encoded
    return sort_entries(memtable.key_columns()[0], memtable.flushed_addresses())


def write_primary_key_index(store: ObjectStore, memtable: MemTable, manifest: Manifest
                            ) -> Manifest:
    """Index the generation just written to ``store`` (its first version, ``manifest``)
    from ``memtable``'s keys; returns the generation's manifest with the index."""
    return write_generation_indexes(store, memtable, manifest, ())


def write_generation_indexes(store: ObjectStore, memtable: MemTable, manifest: Manifest,
                             maintained: Sequence[MaintainedIndex]) -> Manifest:
    """The primary-key index and the ``maintained`` ones of the generation just written
    to ``store`` (its first version, ``manifest``), from ``memtable``'s values, committed
    together; returns the generation's manifest with them (unchanged when none)."""
    metas = []
    field = indexed_key_field(manifest, memtable.primary_key)
    if field is not None:
        entries = _sorted_entries(memtable, field.to_arrow().type)
        metas.append(write_btree_index(store, manifest, field.name, index_name(field.name),
                                       entries, page_bytes=INDEX_PAGE_BYTES))
        del entries
    for index in maintained:
        entries = sort_entries(memtable.column(index.column), memtable.flushed_addresses())
        metas.append(write_btree_index(store, manifest, index.column, index.name, entries,
                                       page_bytes=INDEX_PAGE_BYTES))
        del entries
    if not metas:
        return manifest
    txn = Transaction(manifest.version, CreateIndex(tuple(metas)))
    return commit_transaction(store, manifest, ManifestNaming.V2, txn,
                              data_format=manifest.data_format)
