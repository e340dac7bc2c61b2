"""Scalar indices (BTREE, BITMAP): files, planning, scans, maintenance and statistics."""

from lance_sql.table.index.manage import (
    IndexDescription,
    IndexSegment,
    create_scalar_index,
    describe_indices,
    drop_index,
    key_type_supported,
    list_indices,
    optimize_indices,
    write_btree_index,
)
from lance_sql.table.index.read import index_hook, indexed_scan
from lance_sql.table.index.stats import index_stats

__all__ = [
    "IndexDescription", "IndexSegment", "create_scalar_index", "describe_indices", "drop_index",
    "index_hook", "index_stats", "indexed_scan", "key_type_supported", "list_indices",
    "optimize_indices", "write_btree_index",
]
