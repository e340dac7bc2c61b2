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
creation version; unmatched source rows are inserted (columns it lacks are NULL);
target rows no source row matched are deleted when asked. A target row matched by two
source rows is an error, as in pylance; NULL keys never match. Conditions see the
joined row as two structs, ``target`` and ``source``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError, RetryableConflict, SchemaError
from lance_sql.expr import parse_predicate, to_pyarrow
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MergedGeneration
from lance_sql.table.files.reader import ROW_ADDR, by_fragment
from lance_sql.table.ops.row_rewrite import RowRewrite
from lance_sql.table.read.scan import plan_scan, scan_fragment, take_addresses
from lance_sql.table.write.fragments import to_reader

if TYPE_CHECKING:
    from lance_sql.table.dataset import LanceDataset

_SRC = "__merge_source_row"
_ADDR = "__merge_target_addr"


class MergeInsertBuilder:
    """What to do with matched, unmatched and unmatched-by-source rows (pylance's API)."""

    def __init__(self, ds: LanceDataset, on: str | Sequence[str]) -> None:
        keys = [on] if isinstance(on, str) else list(on)
        if not keys:
            raise InvalidInputError("merge_insert needs at least one key column")
        self._ds = ds
        self._on = keys
        self._update = False
        self._update_condition: str | None = None
        self._insert = False
        self._delete = False
        self._delete_condition: str | None = None
        self._tombstone: str | None = None
        self._merged: tuple[MergedGeneration, ...] = ()

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        self._update, self._update_condition = True, condition
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        self._delete, self._delete_condition = True, expr
        return self

    def when_matched_delete_if(self, column: str) -> MergeInsertBuilder:
        """Source rows whose boolean ``column`` is true delete the target row they match
        (and insert nothing): how MemWAL tombstones reach the base table."""
        self._tombstone = column
        return self

    def mark_generations_merged(self, generations: Sequence[MergedGeneration]
                                ) -> MergeInsertBuilder:
        """Record these MemWAL generations as merged in the same commit (pylance's
        ``mark_sstables_as_compacted``); the commit happens even when no row changes, and
        is refused (IncompatibleConflict) if a concurrent commit merged them first."""
        self._merged = tuple(generations)
        return self

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:  # noqa: ARG002
        """Accepted for compatibility: the commit loop's retry policy applies."""
        return self

    def execute(self, data: Any, schema: pa.Schema | None = None) -> dict[str, int]:
        stats, manifest = merge_insert(self._ds, self, to_reader(data, schema).read_all())
        self._ds._moved_to(manifest)
        return stats


def _check_source(base: Manifest, source: pa.Table, keys: list[str]) -> pa.Table:
    target = base.schema.to_arrow()
    for key in keys:
        if key not in source.column_names:
            raise SchemaError(f"merge_insert key {key!r} is not a column of the source data")
        if key not in target.names:
            raise SchemaError(f"merge_insert key {key!r} is not a column of the table")
    missing = [f for f in target if f.name not in source.column_names]
    try:
        base.schema.check_append_compatible(pa.schema(list(source.schema) + missing))
    except SchemaError as exc:
        raise SchemaError(f"merge_insert source does not fit the table: {exc}") from exc
    return source.cast(pa.schema([target.field(n) for n in source.column_names]))


def _target_keys(ds: LanceDataset, base: Manifest, columns: list[str]) -> pa.Table:
    plan = plan_scan(base, columns, with_row_address=True)
    parts = [scan_fragment(ds.store, base, f, plan) for f in base.fragments if f.num_rows]
    if not parts:
        return plan.output_schema.empty_table()
    return pa.concat_tables(parts)


def _condition(text: str, target: pa.Table, source: pa.Table) -> np.ndarray:
    """Positions of the joined rows where ``text`` (over ``target.*``/``source.*``) holds."""
    joined = pa.table({"target": target.to_struct_array(), "source": source.to_struct_array(),
                       _SRC: pa.array(np.arange(target.num_rows))})
    expr = to_pyarrow(parse_predicate(text), joined.schema)
    return joined.filter(expr).column(_SRC).to_numpy()


def _take_target(ds: LanceDataset, base: Manifest, addresses: np.ndarray,
                 names: list[str]) -> pa.Table:
    """Columns ``names`` of target rows at ``addresses`` (in that order)."""
    return take_addresses(ds.store, base, addresses, names)


def merge_insert(ds: LanceDataset, spec: MergeInsertBuilder,
                 source: pa.Table) -> tuple[dict[str, int], Manifest | None]:
    """Run ``spec`` with ``source``; returns pylance's counts and the committed manifest."""
    base, naming = ds._latest_for_write()
    keys = spec._on
    tombstones = np.zeros(source.num_rows, dtype=bool)
    if spec._tombstone is not None:
        if spec._tombstone not in source.column_names:
            raise SchemaError(f"merge_insert source has no column {spec._tombstone!r}")
        flags = source.column(spec._tombstone)
        tombstones = np.asarray(flags.fill_null(False).to_numpy(zero_copy_only=False), bool)
        source = source.drop_columns([spec._tombstone])
    source = _check_source(base, source, keys)
    target = _target_keys(ds, base, keys)
    src = source.select(keys).append_column(_SRC, pa.array(np.arange(source.num_rows)))
    tgt = target.select(keys).append_column(_ADDR, target.column(ROW_ADDR))
    # The hash table is built on the right side: the (usually smaller) source.
    pairs = tgt.join(src, keys=keys, join_type="inner")
    src_rows = pairs.column(_SRC).to_numpy()
    addresses = pairs.column(_ADDR).to_numpy().astype(np.uint64)
    unique_addr, counts = np.unique(addresses, return_counts=True)
    if np.any(counts > 1):
        row = _take_target(ds, base, unique_addr[counts > 1][:1], keys).to_pylist()[0]
        raise InvalidInputError(
            f"ambiguous merge_insert: several source rows match the target row with {row}; "
            "each target row may be matched by at most one source row")
    rewrite = RowRewrite(ds, base)
    updated = inserted = deleted = 0
    new_keys: pa.Table | None = None
    try:
        if tombstones.any():
            doomed = tombstones[src_rows]
            for frag, offsets, _ in by_fragment(base, addresses[doomed]):
                rewrite.remove(frag, offsets)
            deleted += int(doomed.sum())
            src_rows, addresses = src_rows[~doomed], addresses[~doomed]
        if spec._update and len(src_rows):
            if spec._update_condition is not None:
                names = [f.name for f in base.schema.fields]
                keep = _condition(spec._update_condition,
                                  _take_target(ds, base, addresses, names),
                                  source.take(pa.array(src_rows)))
                src_rows, addresses = src_rows[keep], addresses[keep]
            updated = _rewrite_matched(ds, base, rewrite, source, src_rows, addresses)
        if spec._insert:
            matched = np.zeros(source.num_rows, dtype=bool)
            matched[pairs.column(_SRC).to_numpy()] = True
            new_rows = source.filter(pa.array(~matched & ~tombstones))
            if new_rows.num_rows:
                rewrite.insert(_complete(base, new_rows))
                inserted = new_rows.num_rows
                new_keys = new_rows.select(keys)
        if spec._delete:
            deleted += _delete_unmatched(ds, base, rewrite, target, unique_addr,
                                         spec._delete_condition)
    except BaseException:
        rewrite.writer.abort()
        raise
    modified = tuple(leaf.id for top in base.schema.fields if top.name in source.column_names
                     for leaf in top.walk()) if updated else ()
    check = _no_concurrent_inserts(ds, keys, new_keys) if new_keys is not None else None
    manifest = rewrite.commit(naming, modified, check, merged_generations=spec._merged)
    return {"num_inserted_rows": inserted, "num_updated_rows": updated,
            "num_deleted_rows": deleted}, manifest


def _no_concurrent_inserts(ds: LanceDataset, keys: list[str], new_keys: pa.Table
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
        theirs = pa.concat_tables([scan_fragment(ds.store, latest, f, plan) for f in added])
        clash = new_keys.join(theirs.cast(new_keys.schema), keys=keys, join_type="inner")
        if clash.num_rows:
            raise RetryableConflict(
                f"{ds.store.uri}: a concurrent commit inserted rows with keys this "
                f"merge_insert inserts (e.g. {clash.slice(0, 1).to_pylist()[0]}); "
                "run it again to update them instead")

    return check


def _complete(base: Manifest, rows: pa.Table, old: pa.Table | None = None) -> pa.Table:
    """``rows`` with every table column: missing ones from ``old`` or NULL."""
    arrow = base.schema.to_arrow()
    columns = []
    for field in arrow:
        if field.name in rows.column_names:
            columns.append(rows.column(field.name))
        elif old is not None:
            columns.append(old.column(field.name))
        elif not field.nullable:
            raise SchemaError(f"merge_insert source lacks column {field.name!r}, which the "
                              "table does not allow to be NULL")
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=arrow)


def _rewrite_matched(ds: LanceDataset, base: Manifest, rewrite: RowRewrite, source: pa.Table,
                     src_rows: np.ndarray, addresses: np.ndarray) -> int:
    missing = [f.name for f in base.schema.fields if f.name not in source.column_names]
    for frag, offsets, positions in by_fragment(base, addresses):
        new = source.take(pa.array(src_rows[positions]))
        old = _take_target(ds, base, addresses[positions], missing) if missing else None
        rewrite.rewrite(frag, offsets, _complete(base, new, old))
    return len(addresses)


def _delete_unmatched(ds: LanceDataset, base: Manifest, rewrite: RowRewrite, target: pa.Table,
                      matched: np.ndarray, condition: str | None) -> int:
    all_addr = target.column(ROW_ADDR).to_numpy().astype(np.uint64)
    doomed = np.setdiff1d(all_addr, matched)
    if condition is not None and len(doomed):
        names = [f.name for f in base.schema.fields]
        rows = _take_target(ds, base, doomed, names)
        expr = to_pyarrow(parse_predicate(condition), rows.schema)
        keep = rows.append_column(_ADDR, pa.array(doomed)).filter(expr)
        doomed = keep.column(_ADDR).to_numpy().astype(np.uint64)
    for frag, offsets, _ in by_fragment(base, doomed):
        rewrite.remove(frag, offsets)
    return len(doomed)
