"""Scalar indices (BTREE): files, planning, scans and maintenance."""

from lance_sql.table.index.manage import (
    IndexDescription,
    create_scalar_index,
    describe_indices,
    drop_index,
    key_type_supported,
    list_indices,
    optimize_indices,
    write_btree_index,
)
from lance_sql.table.index.read import index_hook, indexed_scan

__all__ = [
    "IndexDescription", "create_scalar_index", "describe_indices", "drop_index",
    "index_hook", "indexed_scan", "key_type_supported", "list_indices",
    "optimize_indices", "write_btree_index",
]
