"""``UPDATE ... SET col = expr WHERE ...`` as an Update transaction (rewrite-rows mode).

The matching rows are deleted from their fragments (new deletion vectors, or the whole
fragment when every row matches) and written, with the new values, to new fragments.
The commit knows exactly which rows it touched, so a concurrent delete or update of
other rows of the same fragments is rebased (deletion vectors merged); one touching the
same rows is a retryable conflict.

Hook (row-lineage issue): on tables with stable row ids the new fragments must keep the
rows' ids; until that lands such tables are refused here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds

from lance_sql.errors import InvalidInputError, UnsupportedFeatureError
from lance_sql.format.deletion import encode_deletions
from lance_sql.format.fragment import DeletionFile
from lance_sql.format.manifest import Manifest
from lance_sql.table.expr import parse_predicate, value_expression
from lance_sql.table.operations import Transaction, Update
from lance_sql.table.scan import (
    ROW_ADDR,
    FragmentReader,
    deleted_offsets,
    plan_scan,
    scan_fragment,
)
from lance_sql.table.write import FragmentWriter

if TYPE_CHECKING:
    from lance_sql.table.dataset import LanceDataset


def update(ds: LanceDataset, updates: Mapping[str, str],
           where: str | None = None) -> tuple[int, Manifest | None]:
    """Apply ``updates`` (column -> SQL expression) to rows matching ``where``.

    Returns the number of rows updated and the committed manifest (None if no row
    matched, in which case nothing is committed).
    """
    if not isinstance(updates, Mapping) or not updates:
        raise InvalidInputError("update needs a non-empty dict of column -> SQL expression")
    base, naming = ds._latest_for_write()
    if base.uses_stable_row_ids:
        raise UnsupportedFeatureError(
            f"{ds.store.uri}: update of tables with stable row ids is not supported yet")
    arrow = base.schema.to_arrow()
    exprs = {}
    for name, text in updates.items():
        base.schema.field(name)  # NotFoundError for unknown columns
        if "." in name:
            raise InvalidInputError("update assigns whole top-level columns only")
        exprs[name] = value_expression(parse_predicate(text), arrow)
    plan = plan_scan(base, columns=[], filter=where, with_row_address=True)
    fields = list(base.schema.fields)
    writer = FragmentWriter(ds.store, base.schema, data_format=base.data_format)
    updated, removed, deletion_files = [], [], []
    affected: dict[int, np.ndarray] = {}
    count = 0
    try:
        for frag in base.fragments:
            addresses = scan_fragment(ds.store, base, frag, plan).column(ROW_ADDR)
            if len(addresses) == 0:
                continue
            rows = (addresses.to_numpy() & np.uint64(0xFFFFFFFF)).astype(np.int64)
            table = pa.Table.from_arrays(FragmentReader(ds.store, base, frag).take(fields, rows),
                                         names=[f.name for f in fields])
            projection = {f.name: exprs.get(f.name, pds.field(f.name)) for f in fields}
            new = pds.dataset(table).to_table(columns=projection)
            try:
                new = new.cast(arrow)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InvalidInputError(f"update values do not fit the columns: {exc}") from exc
            for batch in new.to_batches():
                writer.write(batch)
            count += len(rows)
            affected[frag.id] = rows.astype(np.uint32)
            merged = np.union1d(deleted_offsets(ds.store, base, frag), rows).astype(np.uint32)
            if len(merged) >= frag.physical_rows:
                removed.append(frag.id)
                continue
            kind, data = encode_deletions(merged)
            deletion = DeletionFile(kind, base.version, random.getrandbits(63), len(merged))
            deletion_files.append((deletion.key(frag.id), data))
            updated.append(frag.with_deletion(deletion))
        if count == 0:
            writer.abort()
            return 0, None
        new_fragments = tuple(writer.finish())
        modified = tuple(f.id for name in exprs for f in base.schema.field(name).walk())
        op = Update(removed_fragment_ids=tuple(removed), updated_fragments=tuple(updated),
                    new_fragments=new_fragments, fields_modified=modified,
                    update_mode="rewrite_rows")
        for key, data in deletion_files:
            ds.store.put(key, data)
        committed = ds._commit(base, naming, Transaction(base.version, op),
                               affected_rows=affected)
    except BaseException:
        writer.abort()
        for key, _ in deletion_files:
            ds.store.delete(key)
        raise
    return count, committed.manifest
