"""``merge_insert``: upsert a batch of rows into a table by key, as one Update commit.

pylance's builder, same names and result::

    ds.merge_insert("id") \\
      .when_matched_update_all(condition="target.v != source.v") \\
      .when_not_matched_insert_all() \\
      .when_not_matched_by_source_delete("id > 5") \\
      .execute(data)   # -> {"num_inserted_rows", "num_updated_rows", "num_deleted_rows"}

The source is joined with the target's key columns (a pyarrow hash join, no per-row
Python). Matched rows are rewritten with the source's values (columns the source
lacks keep their old values) and, on tables with stable row ids, keep their row id and
creation version (``when_matched_delete()`` deletes them instead); unmatched source
rows are inserted (columns it lacks are NULL); target rows no source row matched are
deleted when asked. A target row matched by two source rows is an error, as in
pylance; NULL keys never match. Conditions see the joined row as two structs,
``target`` and ``source``.

:func:`apply_row_changes` commits a merge computed elsewhere (SQL's general MERGE,
evaluated by DataFusion) the same way: one Update, row lineage kept, racing inserts of
a key checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError, RetryableConflict, SchemaError
from lance_sql.expr import filter_serially, parse_predicate, to_pyarrow
from lance_sql.expr.casts import cast_table_like_datafusion
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MergedGeneration
from lance_sql.io.store import ObjectStore
from lance_sql.sorted_sets import sorted_difference
from lance_sql.table.files.reader import ROW_ADDR, FragmentReader, by_fragment, deleted_offsets
from lance_sql.table.ops.key_match import KeyMatcher
from lance_sql.table.ops.row_rewrite import RowRewrite
from lance_sql.table.read.scan import Scanner, plan_scan, scan_fragment, take_addresses
from lance_sql.table.runtime.workers import WorkerPool
from lance_sql.table.txn.writer import WriteContext, cleanup_is_retryable
from lance_sql.table.write.field_order import table_in_table_order
from lance_sql.table.write.fragments import to_reader

_SRC = "__merge_source_row"
_ADDR = "__merge_target_addr"


@dataclass(frozen=True)
class MergeSpec:
    """What a merge_insert does with matched, unmatched and unmatched-by-source rows."""

    on: tuple[str, ...]
    update: bool = False
    update_condition: str | None = None
    delete_matched: bool = False  # when_matched_delete: matched rows are deleted
    fail_matched: bool = False  # when_matched_fail: any matched row refuses the merge
    insert: bool = False
    delete: bool = False
    delete_condition: str | None = None
    tombstone: str | None = None  # a boolean source column: true deletes the matched row
    merged: tuple[MergedGeneration, ...] = ()


class MergeInsertBuilder:
    """Builds a :class:`MergeSpec` with pylance's API and runs it.

    ``execute`` opens a write with ``begin`` and hands what it committed (None: nothing)
    to ``done``; ``LanceDataset.merge_insert`` passes its own, so the dataset moves to
    the new version as pylance's does.
    """

    def __init__(self, on: str | Sequence[str], begin: Callable[[], WriteContext],
                 done: Callable[[Manifest | None], None]) -> None:
        # a key named twice is one key (pylance merges so; the join refused the repeat)
        keys = (on,) if isinstance(on, str) else tuple(dict.fromkeys(on))
        if not keys:
            raise InvalidInputError("merge_insert needs at least one key column")
        self._begin, self._done = begin, done
        self.spec = MergeSpec(keys)

    def _with(self, **changes: Any) -> MergeInsertBuilder:
        self.spec = replace(self.spec, **changes)
        return self

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        return self._with(update=True, update_condition=condition, delete_matched=False,
                          fail_matched=False)

    def when_matched_fail(self) -> MergeInsertBuilder:
        """A source row matching a target row refuses the whole merge (pylance's: an
        insert that must not meet an existing key); nothing is written."""
        return self._with(update=False, update_condition=None, delete_matched=False,
                          fail_matched=True)

    def when_matched_delete(self) -> MergeInsertBuilder:
        """Delete every target row a source row matches (pylance's; replaces an update)."""
        return self._with(update=False, update_condition=None, delete_matched=True,
                          fail_matched=False)

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        return self._with(insert=True)

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        return self._with(delete=True, delete_condition=expr)

    def when_matched_delete_if(self, column: str) -> MergeInsertBuilder:
        """Source rows whose boolean ``column`` is true delete the target row they match
        (and insert nothing): how MemWAL tombstones reach the base table."""
        return self._with(tombstone=column)

    def mark_generations_merged(self, generations: Sequence[MergedGeneration]
                                ) -> MergeInsertBuilder:
        """Record these MemWAL generations as merged in the same commit (pylance's
        ``mark_sstables_as_compacted``); the commit happens even when no row changes, and
        is refused (IncompatibleConflict) if a concurrent commit merged them first."""
        return self._with(merged=tuple(generations))

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:
        """Accepted for compatibility: the commit loop's retry policy applies."""
        return self

    def retry_timeout(self, timeout: object) -> MergeInsertBuilder:
        """Accepted for compatibility: the commit loop's retry policy applies."""
        return self

    @cleanup_is_retryable()
    def execute(self, data: Any, schema: pa.Schema | None = None) -> dict[str, int]:
        spec = self.spec
        if not (spec.update or spec.delete_matched or spec.insert or spec.delete
                or spec.tombstone):
            raise InvalidInputError(
                "merge_insert has nothing to do: add when_matched_update_all(), "
                "when_matched_delete(), when_not_matched_insert_all() or "
                "when_not_matched_by_source_delete() (as pylance refuses it)")
        source = to_reader(data, schema).read_all()
        stats, manifest = merge_insert(self._begin(), self.spec, source)
        self._done(manifest)
        return stats


def _table_keys(base: Manifest, on: Sequence[str]) -> list[str]:
    """The key columns as the table spells them: a name matches exactly, else, as pylance
    matches it, case-insensitively when one column does (``on="ID"`` for ``id``).
    Struct, list and map columns are refused: no key of those types is matched."""
    names = [f.name for f in base.schema.fields]
    keys: list[str] = []
    for key in on:
        found = key if key in names else None
        if found is None:
            folded = [n for n in names if n.lower() == str(key).lower()]
            found = folded[0] if len(folded) == 1 else None
        if found is None:
            keys.append(key)  # (refused by the source check, which names it)
            continue
        if found in keys:  # (``id`` and ``ID``: one key, as a repeated name is)
            continue
        key_type = base.schema.field(found).to_arrow().type
        if pa.types.is_nested(key_type):
            raise InvalidInputError(f"merge_insert cannot match rows on {found!r} of type "
                                    f"{key_type}: keys are columns of scalar types")
        keys.append(found)
    return keys


def _check_source(base: Manifest, source: pa.Table, keys: list[str],
                  tombstones: np.ndarray | None = None) -> pa.Table:
    """``source`` cast to the table's types. Tombstone rows (``tombstones``) carry only
    their keys: their other values may be NULL even where the table forbids it."""
    target = base.schema.to_arrow()
    source = table_in_table_order(source, target)
    # (name sets made once: ``column_names`` and ``names`` are new lists each time read)
    given, known = set(source.column_names), set(target.names)
    for key in keys:
        if key not in given:
            raise SchemaError(f"merge_insert key {key!r} is not a column of the source data")
        if key not in known:
            raise SchemaError(f"merge_insert key {key!r} is not a column of the table")
    missing = [f for f in target if f.name not in given]
    try:
        base.schema.check_append_compatible(pa.schema(list(source.schema) + missing))
    except SchemaError as exc:
        raise SchemaError(f"merge_insert source does not fit the table: {exc}") from exc
    schema = pa.schema([target.field(n) for n in source.column_names])
    try:
        if tombstones is None or not tombstones.any():
            return cast_table_like_datafusion(source, schema)
        # the rows written must fit
        cast_table_like_datafusion(source.filter(pa.array(~tombstones)), schema)
        return cast_table_like_datafusion(source, pa.schema(
            [f if f.name in keys else f.with_nullable(True) for f in schema]))
    except pa.ArrowInvalid as exc:  # (a NULL where the table has none): ours to type
        raise SchemaError(f"merge_insert source does not fit the table: {exc}") from exc


def _target_keys(store: ObjectStore, base: Manifest, columns: list[str]) -> pa.Table:
    """The key columns and row address of every live target row (fragments read in
    parallel by the scanner's pool)."""
    return Scanner(store, base, columns=columns, with_row_address=True).to_table()


def _condition(text: str, target: pa.Table, source: pa.Table) -> np.ndarray:
    """Positions of the joined rows where ``text`` (over ``target.*``/``source.*``) holds."""
    joined = pa.table({"target": target.to_struct_array(), "source": source.to_struct_array()})
    expr = to_pyarrow(parse_predicate(text), joined.schema)  # (names only the two sides)
    joined = joined.append_column(_SRC, pa.array(np.arange(target.num_rows)))
    return filter_serially(joined, expr).column(_SRC).to_numpy()


def _take_target(store: ObjectStore, base: Manifest, addresses: np.ndarray,
                 names: list[str]) -> pa.Table:
    """Columns ``names`` of target rows at ``addresses`` (in that order)."""
    return take_addresses(store, base, addresses, names)


def merge_insert(ctx: WriteContext, spec: MergeSpec,
                 source: pa.Table) -> tuple[dict[str, int], Manifest | None]:
    """Run ``spec`` with ``source``; returns pylance's counts and the committed manifest."""
    base, store = ctx.table, ctx.store
    keys = _table_keys(base, spec.on)
    tombstones = np.zeros(source.num_rows, dtype=bool)
    if spec.tombstone is not None:
        if spec.tombstone not in source.column_names:
            raise SchemaError(f"merge_insert source has no column {spec.tombstone!r}")
        flags = source.column(spec.tombstone)
        tombstones = np.asarray(flags.fill_null(False).to_numpy(zero_copy_only=False), bool)
        source = source.drop_columns([spec.tombstone])
    source = _check_source(base, source, keys, tombstones)
    src_rows, addresses, target = _matches(store, base, spec, source, keys)
    if spec.fail_matched and len(src_rows):
        row = _take_target(store, base, addresses[:1], keys).to_pylist()[0]
        raise InvalidInputError(f"merge_insert found a matching row with {row} "
                                "(when_matched_fail): nothing was written")
    matched = np.zeros(source.num_rows, dtype=bool)
    matched[src_rows] = True
    unique_addr, counts = np.unique(addresses, return_counts=True)
    # Several source rows matching one target row are ambiguous only where a matched row
    # is acted on (updated, or deleted by a tombstone); an insert-only merge leaves
    # matched rows alone, as pylance's does (it inserts each unmatched row, repeats too).
    if (spec.update or spec.delete_matched or tombstones.any()) and np.any(counts > 1):
        row = _take_target(store, base, unique_addr[counts > 1][:1], keys).to_pylist()[0]
        raise InvalidInputError(
            f"ambiguous merge_insert: several source rows match the target row with {row}; "
            "each target row may be matched by at most one source row")
    rewrite = RowRewrite(ctx)
    updated = inserted = deleted = 0
    new_keys: pa.Table | None = None
    try:
        if tombstones.any():
            doomed = tombstones[src_rows]
            for frag, offsets, _ in by_fragment(base, addresses[doomed]):
                rewrite.remove(frag, offsets)
            deleted += int(doomed.sum())
            src_rows, addresses = src_rows[~doomed], addresses[~doomed]
        if spec.delete_matched and len(addresses):
            for frag, offsets, _ in by_fragment(base, addresses):
                rewrite.remove(frag, offsets)
            deleted += len(addresses)
        if spec.update and len(src_rows):
            if spec.update_condition is not None:
                names = [f.name for f in base.schema.fields]
                keep = _condition(spec.update_condition,
                                  _take_target(store, base, addresses, names),
                                  source.take(pa.array(src_rows)))
                src_rows, addresses = src_rows[keep], addresses[keep]
            updated = _rewrite_matched(store, base, rewrite, source, src_rows, addresses)
        if spec.insert:
            new_rows = source.filter(pa.array(~matched & ~tombstones))
            if new_rows.num_rows:
                rewrite.insert(_complete(base, new_rows))
                inserted = new_rows.num_rows
                new_keys = new_rows.select(keys)
        if spec.delete:
            assert target is not None  # deleting unmatched rows reads every target key
            deleted += _delete_unmatched(store, base, rewrite, target, unique_addr,
                                         spec.delete_condition)
    except BaseException:
        rewrite.writer.abort()
        raise
    given = set(source.column_names)
    modified = tuple(leaf.id for top in base.schema.fields if top.name in given
                     for leaf in top.walk()) if updated else ()
    check = _no_concurrent_inserts(store, keys, new_keys) if new_keys is not None else None
    manifest = rewrite.commit(modified, check, merged_generations=spec.merged)
    return {"num_inserted_rows": inserted, "num_updated_rows": updated,
            "num_deleted_rows": deleted}, manifest


def _matches(store: ObjectStore, base: Manifest, spec: MergeSpec, source: pa.Table,
             keys: list[str]) -> tuple[np.ndarray, np.ndarray, pa.Table | None]:
    """(source row, target row address) of every match, and the target's keys and row
    addresses when this needed them all (the general path).

    One key column whose non-null source values are unique is looked up fragment by
    fragment (:mod:`key_match`), without a join or the table's row addresses; other
    shapes, and deleting unmatched target rows, take the general join.
    """
    if len(keys) == 1 and not spec.delete and source.num_rows:
        matcher = KeyMatcher.build(source.column(keys[0]))
        if matcher is not None:
            return (*_matched_by_fragment(store, base, keys[0], matcher), None)
    target = _target_keys(store, base, keys)
    src = source.select(keys).append_column(_SRC, pa.array(np.arange(source.num_rows)))
    tgt = target.select(keys).append_column(_ADDR, target.column(ROW_ADDR))
    # The hash table is built on the right side: the (usually smaller) source.
    pairs = tgt.join(src, keys=keys, join_type="inner")
    src_rows = np.asarray(pairs.column(_SRC).to_numpy(), np.int64)
    addresses = pairs.column(_ADDR).to_numpy().astype(np.uint64)
    return src_rows, addresses, target


def _matched_by_fragment(store: ObjectStore, base: Manifest, key: str, matcher: KeyMatcher
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Matches of ``matcher`` in each fragment's key column (read in a scoped pool),
    live rows only."""
    field = next(f for f in base.schema.fields if f.name == key)

    def one(frag: Fragment) -> tuple[np.ndarray, np.ndarray]:
        reader = FragmentReader(store, base, frag)
        (keys,) = reader.read([field])
        positions, rows = matcher.match(keys)
        mask = reader.keep_mask()
        if mask is not None and len(positions):
            live = mask[positions]
            positions, rows = positions[live], rows[live]
        return rows, positions.astype(np.uint64) | (np.uint64(frag.id) << np.uint64(32))

    frags = [f for f in base.fragments if f.physical_rows > 0]
    threads = min(8, os.cpu_count() or 1, max(1, len(frags)))
    with WorkerPool("merge", threads) as pool:
        found = list(pool.ordered(one, frags, threads))
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    return (np.concatenate([rows for rows, _ in found]),
            np.concatenate([addresses for _, addresses in found]))


def _no_concurrent_inserts(store: ObjectStore, keys: list[str], new_keys: pa.Table
                           ) -> Callable[[Manifest, Manifest], None]:
    """A commit check: no writer that won the race added rows with keys we insert.

    The transaction rules let an Update rebase over a concurrent Append or Update, which
    would leave two rows with one key; fragments added since our base are searched for
    our new keys (reading their key columns only), and a hit is a retryable conflict.
    """
    def check(base: Manifest, latest: Manifest) -> None:
        known = {f.id for f in base.fragments}
        added = tuple(f for f in latest.fragments if f.id not in known and f.num_rows)
        if not added:
            return
        plan = plan_scan(latest, keys)
        theirs = pa.concat_tables([scan_fragment(store, latest, f, plan) for f in added])
        clash = new_keys.join(theirs.cast(new_keys.schema), keys=keys, join_type="inner")
        if clash.num_rows:
            raise RetryableConflict(
                f"{store.uri}: a concurrent commit inserted rows with keys this "
                f"merge_insert inserts (e.g. {clash.slice(0, 1).to_pylist()[0]}); "
                "run it again to update them instead")

    return check


def _complete(base: Manifest, rows: pa.Table, old: pa.Table | None = None) -> pa.Table:
    """``rows`` with every table column: missing ones from ``old`` or NULL."""
    arrow = base.schema.to_arrow()
    columns = []
    given = set(rows.column_names)
    for field in arrow:
        if field.name in given:
            columns.append(rows.column(field.name))
        elif old is not None:
            columns.append(old.column(field.name))
        elif not field.nullable:
            raise SchemaError(f"merge_insert source lacks column {field.name!r}, which the "
                              "table does not allow to be NULL")
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=arrow)


def _rewrite_matched(store: ObjectStore, base: Manifest, rewrite: RowRewrite, source: pa.Table,
                     src_rows: np.ndarray, addresses: np.ndarray) -> int:
    given = set(source.column_names)
    missing = [f.name for f in base.schema.fields if f.name not in given]
    for frag, offsets, positions in by_fragment(base, addresses):
        new = source.take(pa.array(src_rows[positions]))
        old = _take_target(store, base, addresses[positions], missing) if missing else None
        rewrite.rewrite(frag, offsets, _complete(base, new, old))
    return len(addresses)


def _delete_unmatched(store: ObjectStore, base: Manifest, rewrite: RowRewrite, target: pa.Table,
                      matched: np.ndarray, condition: str | None) -> int:
    all_addr = target.column(ROW_ADDR).to_numpy().astype(np.uint64)
    doomed = sorted_difference(all_addr, matched)
    if condition is not None and len(doomed):
        names = [f.name for f in base.schema.fields]
        rows = _take_target(store, base, doomed, names)
        expr = to_pyarrow(parse_predicate(condition), rows.schema)
        keep = filter_serially(rows.append_column(_ADDR, pa.array(doomed)), expr)
        doomed = keep.column(_ADDR).to_numpy().astype(np.uint64)
    for frag, offsets, _ in by_fragment(base, doomed):
        rewrite.remove(frag, offsets)
    return len(doomed)


@dataclass(frozen=True)
class RowChanges:
    """What a merge computed elsewhere (SQL's general MERGE) does to one version: rows
    deleted, rows updated (each group: addresses and the new values of the columns it
    sets; the other columns keep theirs), rows inserted (the columns they set; the
    others NULL)."""

    deleted: np.ndarray
    updated: tuple[tuple[np.ndarray, pa.Table], ...] = ()
    inserted: tuple[pa.Table, ...] = ()


def apply_row_changes(ctx: WriteContext, changes: Callable[[Manifest], RowChanges],
                      keys: Sequence[str] = ()) -> tuple[dict[str, int], Manifest | None]:
    """Commit what ``changes`` computes for the version the write starts from as one
    Update, as :func:`merge_insert` commits its rows: updated rows keep their row ids
    and creation versions, inserted rows get new ones; a row both updated and deleted,
    or updated twice, is an InvalidInputError. Inserted rows whose ``keys`` a
    concurrent writer inserted first make a retryable conflict. Returns pylance's
    counts and the committed manifest."""
    base, store = ctx.table, ctx.store
    found = changes(base)
    arrow = base.schema.to_arrow()
    updated_addr = np.concatenate([np.asarray(a, np.uint64) for a, _ in found.updated]
                                  or [np.zeros(0, np.uint64)])
    deleted = np.asarray(found.deleted, np.uint64)
    touched = np.concatenate([updated_addr, deleted])
    _check_live(store, base, touched)
    rewrite = RowRewrite(ctx)
    modified: set[str] = set()
    try:
        for frag, offsets, _ in by_fragment(base, deleted):
            rewrite.remove(frag, offsets)
        if len(updated_addr):
            groups = []
            for addresses, values in found.updated:
                given = set(values.column_names)
                unset = [f.name for f in arrow if f.name not in given]
                old = _take_target(store, base, np.asarray(addresses, np.uint64), unset) \
                    if unset else None
                groups.append(_complete(base, values, old))
                modified.update(values.column_names)
            rows = pa.concat_tables(groups)
            for frag, offsets, positions in by_fragment(base, updated_addr):
                rewrite.rewrite(frag, offsets, rows.take(pa.array(positions)))
        inserted = pa.concat_tables([_complete(base, t) for t in found.inserted]) \
            if found.inserted else None
        if inserted is not None and inserted.num_rows:
            rewrite.insert(inserted)
    except BaseException:
        rewrite.writer.abort()
        raise
    fields = tuple(leaf.id for top in base.schema.fields if top.name in modified
                   for leaf in top.walk())
    new_keys = inserted.select(list(keys)) if keys and inserted is not None \
        and inserted.num_rows else None
    check = _no_concurrent_inserts(store, list(keys), new_keys) \
        if new_keys is not None else None
    manifest = rewrite.commit(fields, check)
    return {"num_inserted_rows": 0 if inserted is None else inserted.num_rows,
            "num_updated_rows": len(updated_addr), "num_deleted_rows": len(deleted)}, manifest


def _check_live(store: ObjectStore, base: Manifest, addresses: np.ndarray) -> None:
    """Refuse, before anything is written, an address given twice, past its fragment's
    rows, or of a row deleted in ``base`` (sorts and masks: no hashing, which is slow on
    row addresses)."""
    ordered = np.sort(addresses)
    if len(ordered) > 1 and not np.all(ordered[1:] != ordered[:-1]):
        raise InvalidInputError("a merge changes one target row twice")
    for frag, offsets, _ in by_fragment(base, ordered):
        if len(offsets) and int(offsets[-1]) >= frag.physical_rows:
            raise InvalidInputError(f"row address past the {frag.physical_rows} rows of "
                                    f"fragment {frag.id}")
        deleted = deleted_offsets(store, base, frag)
        if len(deleted):
            dead = np.zeros(frag.physical_rows, bool)
            dead[deleted] = True
            if dead[offsets].any():
                raise InvalidInputError(f"a merge changes a deleted row of fragment {frag.id}")
