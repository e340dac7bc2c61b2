"""Scalar indices (BTREE): files, planning, scans and maintenance."""

from lance_sql.table.index.manage import (
    IndexDescription,
    create_scalar_index,
    describe_indices,
    drop_index,
    list_indices,
    optimize_indices,
)
from lance_sql.table.index.read import index_hook, indexed_scan

__all__ = [
    "IndexDescription", "create_scalar_index", "describe_indices", "drop_index",
    "index_hook", "indexed_scan", "list_indices", "optimize_indices",
]
