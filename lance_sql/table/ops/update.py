"""``UPDATE ... SET col = expr WHERE ...`` as an Update transaction, in either mode.

* ``rewrite_rows`` (default): matching rows are deleted from their fragments and
  written, with the new values, to new fragments (:class:`RowRewrite`). The commit
  knows exactly which rows it touched, so concurrent deletes or updates of other rows
  of the same fragments are rebased; touching the same rows is a retryable conflict.
* ``rewrite_columns``: each fragment with matches gets a new data file holding the
  updated columns for all its rows (unchanged values copied), and those columns are
  tombstoned in the old files. Cheaper when many rows of few columns change.

On tables with stable row ids both keep every row's id and creation version and move
its last-updated version to the commit's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr import parse_predicate, value_expression
from lance_sql.expr.casts import cast_like_datafusion, cast_table_like_datafusion
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.row_ids import encode_versions
from lance_sql.format.schema import LanceSchema, split_path
from lance_sql.io.store import ObjectStore
from lance_sql.sorted_sets import sorted_intersection, sorted_unique
from lance_sql.table.files.lineage import PENDING_VERSION, load_lineage
from lance_sql.table.files.reader import ROW_ADDR, FragmentReader, by_fragment, deleted_offsets
from lance_sql.table.index import index_hook
from lance_sql.table.ops.row_rewrite import RowRewrite
from lance_sql.table.ops.schema_evolution import write_columns_file
from lance_sql.table.read.scan import matching_rows, plan_scan
from lance_sql.table.txn.operations import Update
from lance_sql.table.txn.writer import WriteContext

UPDATE_MODES = ("rewrite_rows", "rewrite_columns")
TOMBSTONE = -2


RowSelector = Callable[[Manifest], "np.ndarray | pa.Array"]
"""The row addresses (uint64) of the rows a write touches in the version it is given:
how a condition our filter parser cannot evaluate (a SQL subquery) is answered."""
ValueSelector = Callable[[Manifest], pa.Table]
"""For the version it is given: a ``_rowaddr`` column (the rows to update) and one column
per assigned column holding their new values (SQL's ``SET c = (SELECT ...)``)."""


def update(ctx: WriteContext, updates: Mapping[str, str], where: str | None = None,
           update_mode: str = "rewrite_rows",
           select_rows: RowSelector | None = None,
           select_values: ValueSelector | None = None, *,
           lance_literals: bool = False) -> tuple[int, Manifest | None]:
    """Apply ``updates`` (column -> SQL expression) to rows matching ``where`` (or, with
    ``select_rows``, to the rows it gives for the version the update starts from; with
    ``select_values``, set the values it computed for that version, ``updates`` naming
    the columns only). ``lance_literals``: literals typed as pylance types them (see
    :func:`~lance_sql.expr.arrow.lance_literal_types`), else as DataFusion's SQL does.

    Returns the number of rows updated and the committed manifest: an update matching
    no row commits an empty Update, as pylance's does.
    """
    if not isinstance(updates, Mapping) or not updates:
        raise InvalidInputError("update needs a non-empty dict of column -> SQL expression")
    if update_mode not in UPDATE_MODES:
        raise InvalidInputError(f"update_mode must be one of {UPDATE_MODES}, got {update_mode!r}")
    if isinstance(where, str) and not where.strip():
        # a blank condition is a mistake, not "every row" (None says that): pylance refuses
        # it, as delete refuses a blank predicate
        raise InvalidInputError(f"update's where is empty ({where!r}); pass where=None to "
                                "update every row")
    base, store = ctx.table, ctx.store
    arrow = base.schema.to_arrow()
    exprs = {}
    resolved: dict[str, object] = {}
    for given, text in updates.items():
        if len(split_path(given)) > 1:
            raise InvalidInputError("update assigns whole top-level columns only")
        # the column's own name: a backquoted one (`a``b`) names the column a`b
        name = base.schema.field(given).name  # NotFoundError for unknown columns
        if name in resolved:
            raise InvalidInputError(f"update assigns column {name!r} twice")
        resolved[name] = text
    for name, value in resolved.items():
        if select_values is None:
            if not isinstance(value, str):
                raise InvalidInputError(f"update values are SQL expressions (strings), as "
                                        f"pylance takes them: got {value!r} for {name!r} "
                                        f"(write {str(value)!r})")
            exprs[name] = value_expression(parse_predicate(value), arrow,
                                           lance_literals=lance_literals)
    if select_values is not None:
        if update_mode != "rewrite_rows":
            raise InvalidInputError("computed update values need update_mode='rewrite_rows'")
        return _set_computed(ctx, list(resolved), select_values(base))
    modified = _field_ids(base.schema, exprs)
    matches = selected_rows(store, base, select_rows) if select_rows is not None \
        else list(matching_rows(store, base, plan_scan(base, columns=[], filter=where,
                                                       with_row_address=True),
                                index_hook(store, base)))
    if not matches:  # still a version, as pylance's (an Update changing nothing)
        return _rewrite_rows(ctx, [], lambda table, _: table, ())
    if update_mode == "rewrite_columns":
        return _rewrite_columns(ctx, exprs, matches, modified)
    return _rewrite_rows(ctx, [(frag, rows, None) for frag, rows in matches],
                         lambda table, _: _evaluate(table, exprs, arrow), modified)


def _rewrite_rows(ctx: WriteContext, matches: list[tuple[Fragment, np.ndarray, Any]],
                  new_rows: Callable[[pa.Table, Any], pa.Table], modified: tuple[int, ...]
                  ) -> tuple[int, Manifest | None]:
    """Rewrite each match's rows (fragment, sorted offsets, what ``new_rows`` also
    takes) as ``new_rows`` makes them from their current values, and commit; the
    written files are removed when anything fails."""
    base, store = ctx.table, ctx.store
    fields = list(base.schema.fields)
    rewrite = RowRewrite(ctx)
    count = 0
    try:
        for frag, rows, extra in matches:
            table = pa.Table.from_arrays(FragmentReader(store, base, frag).take(fields, rows),
                                         names=[f.name for f in fields])
            rewrite.rewrite(frag, rows, new_rows(table, extra))
            count += len(rows)
    except BaseException:
        rewrite.writer.abort()
        raise
    return count, rewrite.commit(modified)


def selected_rows(store: ObjectStore, base: Manifest, select_rows: RowSelector
                  ) -> list[tuple[Fragment, np.ndarray]]:
    """(fragment, sorted offsets) of the row addresses ``select_rows`` gives for ``base``,
    fragments in address order; an address of no fragment of ``base`` is a NotFoundError,
    one past a fragment's rows or of a deleted row an InvalidInputError."""
    addresses = _addresses(select_rows(base))
    return [(frag, offsets) for frag, offsets, _ in _locate(store, base, sorted_unique(addresses))]


def _addresses(values: np.ndarray | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The selected row addresses as uint64: integers only, none NULL or negative."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        if values.null_count:
            raise InvalidInputError("row addresses selected for a write contain NULL")
        values = values.to_numpy()
    found = np.asarray(values)
    if found.size and not (np.issubdtype(found.dtype, np.integer)
                           or np.issubdtype(found.dtype, np.unsignedinteger)):
        raise InvalidInputError(f"row addresses must be integers, got {found.dtype}")
    if found.size and np.issubdtype(found.dtype, np.signedinteger) and found.min() < 0:
        raise InvalidInputError(f"row address {int(found.min())} is negative")
    return found.astype(np.uint64)


def _locate(store: ObjectStore, base: Manifest, addresses: np.ndarray
            ) -> list[tuple[Fragment, np.ndarray, np.ndarray]]:
    """(fragment, sorted offsets, their positions in ``addresses``) per fragment of
    ``base``, checked before anything is written: no fragment is a NotFoundError; an
    offset past its rows, of a row deleted in ``base`` (a write would count it, an
    update bring it back) or an address given twice an InvalidInputError."""
    out = []
    for frag, offsets, positions in by_fragment(base, addresses):
        if len(offsets) and int(offsets[-1]) >= frag.physical_rows:
            raise InvalidInputError(f"row address past the {frag.physical_rows} rows of "
                                    f"fragment {frag.id}")
        if len(offsets) > 1 and not np.all(np.diff(offsets) > 0):
            raise InvalidInputError("a row address is selected twice for one write")
        dead = sorted_intersection(offsets, deleted_offsets(store, base, frag))
        if len(dead):
            raise InvalidInputError(
                f"row address {(frag.id << 32) | int(dead[0])} (fragment {frag.id}, offset "
                f"{int(dead[0])}) is a deleted row of version {base.version}; "
                f"{len(dead)} selected row(s) of that fragment are deleted")
        out.append((frag, offsets, positions))
    return out


def _set_computed(ctx: WriteContext, names: list[str], computed: pa.Table
                  ) -> tuple[int, Manifest | None]:
    """Rewrite the rows of ``computed``'s ``_rowaddr`` column with its other columns
    (``names``, in order) as their new values (cast to the columns' types)."""
    base = ctx.table
    arrow = base.schema.to_arrow()
    if computed.num_columns != len(names) + 1 or computed.column_names[0] != ROW_ADDR:
        raise InvalidInputError(f"computed update values must be {ROW_ADDR} then {names}")
    located = _locate(ctx.store, base, _addresses(computed.column(0)))
    if not located:  # still a version, as pylance's (an Update changing nothing)
        return _rewrite_rows(ctx, [], lambda table, _: table, ())
    values = computed.drop_columns([ROW_ADDR]).rename_columns(names)
    # to the columns' types first (the engine may hand string views, which take refuses)
    values = pa.Table.from_arrays([_cast_values(values.column(n), n, arrow) for n in names],
                                  names=names)
    modified = _field_ids(base.schema, names)

    def new_rows(table: pa.Table, positions: np.ndarray) -> pa.Table:
        new = values.take(positions)
        columns = [new.column(f.name) if f.name in names else table.column(f.name)
                   for f in arrow]
        return _fit(pa.Table.from_arrays(columns, names=arrow.names), names, arrow)

    return _rewrite_rows(ctx, located, new_rows, modified)


def _field_ids(schema: LanceSchema, names: Iterable[str]) -> tuple[int, ...]:
    """The ids of the top-level columns ``names`` (their own names, not field paths) and
    of every field inside them."""
    top = {f.name: f for f in schema.fields}
    return tuple(f.id for name in names for f in top[name].walk())


def _evaluate(table: pa.Table, exprs: Mapping[str, pc.Expression], arrow: pa.Schema) -> pa.Table:
    import pyarrow.dataset as pds  # here: it imports pandas (~0.3 s) at import time

    projection = {f.name: exprs.get(f.name, pds.field(f.name)) for f in arrow}
    try:
        new = pds.dataset(table).to_table(columns=projection)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidInputError(f"update values cannot be computed: {exc}") from exc
    return _fit(new, list(exprs), arrow)


def _fit(new: pa.Table, assigned: list[str], arrow: pa.Schema) -> pa.Table:
    """``new`` cast to the table's schema; a value that does not fit is an
    InvalidInputError naming the assigned column."""
    try:
        return cast_table_like_datafusion(new, arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        # the column named (an array literal of the wrong length for a fixed-size list,
        # a string into a number...): found by casting the assigned ones alone
        failing = next((n for n in assigned
                        if not _casts(new.column(n), arrow.field(n).type)), None)
        where = f" column {failing!r} ({arrow.field(failing).type})" if failing else " columns"
        raise InvalidInputError(f"update values do not fit the{where}: {exc}") from exc


def _cast_values(values: pa.ChunkedArray, name: str, arrow: pa.Schema) -> pa.ChunkedArray:
    target = arrow.field(name).type
    try:
        return cast_like_datafusion(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidInputError(f"update values do not fit the column {name!r} ({target}): "
                                f"{exc}") from exc


def _casts(values: pa.ChunkedArray, target: pa.DataType) -> bool:
    """Whether ``values`` cast to ``target``."""
    try:
        cast_like_datafusion(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def _rewrite_columns(ctx: WriteContext, exprs: Mapping[str, pc.Expression],
                     matches: list[tuple], modified: tuple[int, ...]) -> tuple[int, Manifest]:
    base, store = ctx.table, ctx.store
    arrow = base.schema.to_arrow()
    fields = list(base.schema.fields)
    changed_fields = LanceSchema(tuple(f for f in fields if f.name in exprs))
    target = changed_fields.to_arrow()
    dropped = set(modified)
    updated, count = [], 0
    with ctx.staging() as staged:
        for frag, rows in matches:
            table = pa.Table.from_arrays(FragmentReader(store, base, frag).read(fields),
                                         names=[f.name for f in fields])
            new = _evaluate(table, exprs, arrow)
            mask = np.zeros(frag.physical_rows, dtype=bool)
            mask[rows] = True
            hit = pa.array(mask)
            columns = [pc.if_else(hit, new.column(f.name), table.column(f.name))
                       for f in target]
            data_file = write_columns_file(store, changed_fields,
                                           pa.Table.from_arrays(columns, schema=target),
                                           base.data_format)
            staged.add(data_file.key)
            files = tuple(replace(d, fields=tuple(TOMBSTONE if i in dropped else i
                                                  for i in d.fields)) for d in frag.files)
            result = replace(frag, files=files + (data_file,))
            if base.uses_stable_row_ids:
                versions = np.array(load_lineage(store, base, frag).updated_at(slice(None)))
                versions[rows] = PENDING_VERSION
                result = replace(result, last_updated_at_version_sequence=encode_versions(versions))
            updated.append(result)
            count += len(rows)
        op = Update(updated_fragments=tuple(updated), fields_modified=modified,
                    update_mode="rewrite_columns")
        committed = ctx.commit(op)
    return count, committed
