"""The MemTable merger: flushed generations go into the base table, oldest first.

For each region, the generations after the MemWAL index's ``merged_generations`` are
merged in generation order, each by one merge_insert on the primary key that also records
the generation as merged (so data and progress land atomically). Within a generation the
newest row of a key wins (highest ``_rowaddr``; keys told apart by their bytes, a float
key by its bits, :func:`~.bloom.identity_keys`); a tombstone deletes the key.

Concurrent mergers are safe: a merge whose generation a concurrent commit already merged
(or superseded) is refused by the conflict rules, and the merger moves on to the next
generation after reloading (the spec's Appendix 2).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import IncompatibleConflict, NotFoundError, SchemaError
from lance_sql.format.memwal import MergedGeneration, RegionManifest
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.column_match import match_columns, named_by_id, relabelled
from lance_sql.memwal.generation_tables import open_generation
from lance_sql.memwal.naming import MEM_WAL_DIR, RegionPaths
from lance_sql.memwal.read.keys import latest_positions
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.value_cast import as_column_type
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.table.dataset import LanceDataset, dataset

__all__ = ["MergeResult", "TOMBSTONE", "latest_rows", "merge", "region_generations",
           "region_ids"]

TOMBSTONE = "_tombstone"
_ROWADDR = "_rowaddr"


@dataclass(frozen=True)
class MergeResult:
    """One generation's merge: what it changed, or that another merger had done it."""

    region_id: uuid.UUID
    generation: int
    version: int | None  # the base table version that merged it; None when skipped
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


def region_ids(ds: LanceDataset) -> list[uuid.UUID]:
    """The regions with a directory under ``_mem_wal/``, in a stable order."""
    names = ds.store.list_dir(MEM_WAL_DIR)
    found = [RegionPaths.parse_region_dir(n) for n in names]
    return sorted(p.region_id for p in found if p is not None)


def latest_rows(rows: pa.Table, keys: list[str]) -> pa.Table:
    """For each key the row with the highest ``_rowaddr`` (vectorised; no per-row Python),
    in key order."""
    n = rows.num_rows
    if n <= 1:
        return rows
    column = rows.column(keys[0])
    if len(keys) == 1 and pa.types.is_integer(column.type) and not column.null_count:
        # one integer key: a stable sort of the keys, newest first, keeps the first of each
        newest_first = np.argsort(rows.column(_ROWADDR).to_numpy(), kind="stable")[::-1]
        _, first = np.unique(column.to_numpy()[newest_first], return_index=True)
        return rows.take(pa.array(newest_first[first]))
    positions = latest_positions([rows.column(k) for k in keys],
                                 numpy_of(rows.column(_ROWADDR)), nulls_equal=True)
    return rows.take(array_from_numpy(positions))


def region_generations(ds: LanceDataset, region_id: uuid.UUID, merged: int
                       ) -> tuple[RegionManifest | None, list[tuple[int, str]]]:
    """A region's latest manifest (None: it has none yet) and its flushed generations
    above ``merged`` as (generation, path), oldest first."""
    manifest = RegionLog(ds.store, region_id).latest()
    if manifest is None:
        return None, []
    pending = sorted((g.generation, g.path) for g in manifest.flushed_generations
                     if g.generation > merged)
    return manifest, pending


def merge(ds: LanceDataset, *, regions: list[uuid.UUID] | None = None,
          max_generations: int | None = None) -> list[MergeResult]:
    """Merge every unmerged flushed generation (of ``regions``, default all) into the base
    table; returns what each merge did, in the order they ran."""
    table_uri = ds.uri
    current = dataset(table_uri, commit_config=ds.commit_config)
    loaded = mem_wal_index.load(current)
    if loaded is None:
        raise NotFoundError(f"{table_uri} has no MemWAL index (initialize it first)")
    keys = mem_wal_index.primary_key_columns(current.manifest.schema)
    results: list[MergeResult] = []
    for region_id in regions if regions is not None else region_ids(current):
        while max_generations is None or len(results) < max_generations:
            loaded = mem_wal_index.load(current)
            merged = loaded[1].merged_generation(region_id) if loaded else 0
            _, pending = region_generations(current, region_id, merged)
            if not pending:
                break
            generation, path = pending[0]
            results.append(_merge_one(current, region_id, generation, path, keys))
            current = dataset(table_uri, commit_config=ds.commit_config)
    return results


def _merge_one(base: LanceDataset, region_id: uuid.UUID, generation: int, path: str,
               keys: list[str]) -> MergeResult:
    try:
        gen = open_generation(base.uri, base.store, region_id, path)
        rows = gen.to_table(with_row_address=True)
    except NotFoundError:
        # another merger merged it since we looked, and the collector removed it
        if _merged_now(base, region_id) >= generation:
            return MergeResult(region_id, generation, None)
        raise
    rows = latest_rows(_as_base_columns(rows, gen.manifest.schema, base.manifest.schema), keys)
    columns = [f.name for f in base.manifest.schema.fields]
    held = set(rows.column_names)
    source = rows.select([c for c in columns if c in held]
                         + ([TOMBSTONE] if TOMBSTONE in held else []))
    builder = (base.merge_insert(keys).when_matched_update_all()
               .when_not_matched_insert_all()
               .mark_generations_merged([MergedGeneration(region_id, generation)]))
    if TOMBSTONE in source.column_names:
        builder = builder.when_matched_delete_if(TOMBSTONE)
    try:
        stats = builder.execute(source)
    except IncompatibleConflict:
        if _merged_now(base, region_id) < generation:
            raise  # refused for another reason: not ours to hide
        return MergeResult(region_id, generation, None)  # merged by someone else first
    return MergeResult(region_id, generation, base.version, stats["num_inserted_rows"],
                       stats["num_updated_rows"], stats["num_deleted_rows"])


def _as_base_columns(rows: pa.Table, written: LanceSchema, base: LanceSchema) -> pa.Table:
    """A generation's rows with the base table's current columns, names and types.

    The generation was written with the table's schema of its writer's time; each column
    goes to the table's column holding its values now (:func:`~.column_match.match_columns`,
    as the LSM view reads it: by field id, a retyped column by name, nested fields by id;
    a dropped column, even one added again under its name, is left out). Values are cast
    to the table's type (one that does not fit raises SchemaError and nothing is merged).

    A table column none of the generation's holds (added after its writer opened) is
    NULL: an upsert replaces the whole row, as the view reads it, so the merge must not
    keep the base's value there. A non-nullable such column raises SchemaError (its
    rows have no value for it; nothing is merged)."""
    matched = match_columns(written, base, skip=(TOMBSTONE, _ROWADDR))
    names, arrays = [], []
    for f in written.fields:
        if f.name in (TOMBSTONE, _ROWADDR) or f.name not in rows.column_names:
            continue  # (``_tombstone``'s id is the generation's own: a new column may share it)
        target = matched.get(f.id)
        if target is None:
            continue  # dropped
        # (fields renamed inside it: its values under the table's names, by field id)
        column = relabelled(rows.column(f.name), named_by_id(f, target).arrow_type)
        wanted = target.arrow_type
        column = as_column_type(column, wanted, f"generation column {f.name!r} (the "
                                                f"table's {target.name!r})")
        names.append(target.name)
        arrays.append(column)
    for f in base.fields:
        if f.name not in names:
            if not f.nullable:
                raise SchemaError(f"the table's non-nullable column {f.name!r} was added "
                                  "after the generation was written: its rows have no "
                                  "value for it")
            names.append(f.name)
            arrays.append(pa.nulls(rows.num_rows, f.arrow_type))
    for extra in (TOMBSTONE, _ROWADDR):
        if extra in rows.column_names:
            names.append(extra)
            arrays.append(rows.column(extra))
    return pa.table(arrays, names=names)


def _merged_now(base: LanceDataset, region_id: uuid.UUID) -> int:
    """The region's merge progress at the table's latest version."""
    loaded = mem_wal_index.load(dataset(base.uri, commit_config=base.commit_config))
    return loaded[1].merged_generation(region_id) if loaded is not None else 0
