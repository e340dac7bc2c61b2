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

from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr import parse_predicate, value_expression
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.row_ids import encode_versions
from lance_sql.format.schema import LanceSchema
from lance_sql.table.files.lineage import PENDING_VERSION, load_lineage
from lance_sql.table.files.reader import FragmentReader, by_fragment
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


def update(ctx: WriteContext, updates: Mapping[str, str], where: str | None = None,
           update_mode: str = "rewrite_rows",
           select_rows: RowSelector | None = None) -> tuple[int, Manifest | None]:
    """Apply ``updates`` (column -> SQL expression) to rows matching ``where`` (or, with
    ``select_rows``, to the rows it gives for the version the update starts from).

    Returns the number of rows updated and the committed manifest (None if no row
    matched, in which case nothing is committed).
    """
    if not isinstance(updates, Mapping) or not updates:
        raise InvalidInputError("update needs a non-empty dict of column -> SQL expression")
    if update_mode not in UPDATE_MODES:
        raise InvalidInputError(f"update_mode must be one of {UPDATE_MODES}, got {update_mode!r}")
    base, store = ctx.table, ctx.store
    arrow = base.schema.to_arrow()
    exprs = {}
    for name, text in updates.items():
        base.schema.field(name)  # NotFoundError for unknown columns
        if "." in name:
            raise InvalidInputError("update assigns whole top-level columns only")
        exprs[name] = value_expression(parse_predicate(text), arrow)
    modified = tuple(f.id for name in exprs for f in base.schema.field(name).walk())
    matches = selected_rows(base, select_rows) if select_rows is not None \
        else list(matching_rows(store, base, plan_scan(base, columns=[], filter=where,
                                                       with_row_address=True),
                                index_hook(store, base)))
    if not matches:
        return 0, None
    if update_mode == "rewrite_columns":
        return _rewrite_columns(ctx, exprs, matches, modified)
    fields = list(base.schema.fields)
    rewrite = RowRewrite(ctx)
    count = 0
    try:
        for frag, rows in matches:
            table = pa.Table.from_arrays(FragmentReader(store, base, frag).take(fields, rows),
                                         names=[f.name for f in fields])
            rewrite.rewrite(frag, rows, _evaluate(table, exprs, arrow))
            count += len(rows)
    except BaseException:
        rewrite.writer.abort()
        raise
    return count, rewrite.commit(modified)


def selected_rows(base: Manifest, select_rows: RowSelector) -> list[tuple[Fragment, np.ndarray]]:
    """(fragment, sorted offsets) of the row addresses ``select_rows`` gives for ``base``,
    fragments in address order; an address of no fragment of ``base`` is a NotFoundError,
    one past a fragment's rows an InvalidInputError."""
    addresses = select_rows(base)
    if isinstance(addresses, pa.ChunkedArray | pa.Array):
        if addresses.null_count:
            raise InvalidInputError("row addresses selected for a write contain NULL")
        addresses = addresses.to_numpy()
    unique = np.unique(np.asarray(addresses, dtype=np.uint64))
    matches = []
    for frag, offsets, _ in by_fragment(base, unique):
        if len(offsets) and int(offsets[-1]) >= frag.physical_rows:
            raise InvalidInputError(f"row address past the {frag.physical_rows} rows of "
                                    f"fragment {frag.id}")
        matches.append((frag, offsets))
    return matches


def _evaluate(table: pa.Table, exprs: Mapping[str, pc.Expression], arrow: pa.Schema) -> pa.Table:
    import pyarrow.dataset as pds  # here: it imports pandas (~0.3 s) at import time

    projection = {f.name: exprs.get(f.name, pds.field(f.name)) for f in arrow}
    new = pds.dataset(table).to_table(columns=projection)
    try:
        return new.cast(arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        # the column named (an array literal of the wrong length for a fixed-size list,
        # a string into a number...): found by casting the assigned ones alone
        failing = next((n for n in exprs if not _casts(new.column(n), arrow.field(n).type)),
                       None)
        where = f" column {failing!r} ({arrow.field(failing).type})" if failing else "s"
        raise InvalidInputError(f"update values do not fit the{where}: {exc}") from exc


def _casts(values: pa.ChunkedArray, target: pa.DataType) -> bool:
    """Whether ``values`` cast to ``target``."""
    try:
        values.cast(target)
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
