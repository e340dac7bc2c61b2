"""Table semantics: versions, operations, commits, scans and writes.

This module is the table layer's public surface: what ``lance_sql.sql``, ``lance_sql.spark``
and ``lance_sql.cli`` may use (tests/test_layers.py checks they import nothing deeper). The
sub-packages behind it (see README.md, Layout) are internal and may change.
"""

from lance_sql.format.datafile.parallel import no_helpers
from lance_sql.table.changes.feed import (
    ChangeWindow,
    PlannedChanges,
    plan_query,
    read_query,
    resolve_window,
    table_changes,
)
from lance_sql.table.changes.net import check_mode
from lance_sql.table.changes.query import ChangeQuery
from lance_sql.table.changes.rows import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    ChangeRows,
)
from lance_sql.table.dataset import LanceDataset, dataset, write_dataset
from lance_sql.table.files.reader import (
    ROW_ADDR,
    ROW_CREATED,
    ROW_ID,
    ROW_UPDATED,
    SYSTEM_COLUMNS,
    VERSION_COLUMNS,
    live_rows,
)
from lance_sql.table.index.planner import IndexedRows, plan_indexed
from lance_sql.table.meta.timetravel import parse_instant, version_at
from lance_sql.table.meta.versions import (
    VersionRef,
    commit_time,
    find_version,
    latest_committed,
    latest_version,
    list_versions,
    load_manifest,
    read_manifest,
    read_tag,
    read_tags,
)
from lance_sql.table.ops.merge_insert import RowChanges, apply_row_changes
from lance_sql.table.read.arrow_filters import decode, in_list, referenced_columns
from lance_sql.table.read.prune import address_ranges, fragment_spans
from lance_sql.table.read.scan import (
    RangeSizer,
    ScanPlan,
    batch_rows,
    build_scan_plan,
    live_ranges,
    reads_together,
    rows_only,
    runs_read_together,
    scan_fragment,
    scan_fragments,
    scan_rows,
)
from lance_sql.table.read.side_by_side import reads_are_small, row_width
from lance_sql.table.runtime.cache import LSM_VIEWS, TABLE_VERSIONS, CacheStats
from lance_sql.table.runtime.context import Runtime, current_runtime, default_runtime
from lance_sql.table.txn.commit import CommitConfig
from lance_sql.table.txn.history import operation_of
from lance_sql.table.txn.writer import cleanup_is_retryable
from lance_sql.table.write.jobs import JobFiles, commit_job, open_for_write, write_job_fragments

__all__ = [
    # system columns
    "ROW_ADDR", "ROW_CREATED", "ROW_ID", "ROW_UPDATED", "SYSTEM_COLUMNS", "VERSION_COLUMNS",
    # opening, writing and committing
    "CommitConfig", "LanceDataset", "dataset", "write_dataset",
    # a merge computed by an engine (SQL's general MERGE), committed as one Update
    "RowChanges", "apply_row_changes", "cleanup_is_retryable",
    # distributed (Spark) write jobs
    "JobFiles", "commit_job", "open_for_write", "write_job_fragments",
    # versions, tags and time travel
    "VersionRef", "commit_time", "find_version", "latest_committed", "latest_version",
    "list_versions", "load_manifest", "operation_of", "parse_instant", "read_manifest",
    "read_tag", "read_tags", "version_at",
    # the runtime that owns the caches (configurable, clearable, per session if wanted)
    "TABLE_VERSIONS", "LSM_VIEWS", "CacheStats", "Runtime", "current_runtime", "default_runtime",
    # scans cut into units of work by an engine (plans are made by build_scan_plan only)
    "IndexedRows", "ScanPlan", "address_ranges", "build_scan_plan", "fragment_spans", "live_ranges",
    "live_rows", "plan_indexed", "rows_only", "scan_fragment", "scan_rows",
    # runs of whole small fragments read together (each column decoded in one pass)
    "batch_rows", "reads_together", "runs_read_together", "scan_fragments",
    # the tree of a pyarrow filter an engine pushes
    "decode", "in_list", "referenced_columns",
    # how many rows a filtered read with a limit reads next
    "RangeSizer",
    # decodes of an engine's thread that reads side by side with others: no helper threads
    "no_helpers",
    # whether an engine's reads are too small to gain from running side by side
    "reads_are_small", "row_width",
    # the change feed
    "CHANGE_TYPE", "COMMIT_TIMESTAMP", "COMMIT_VERSION", "ChangeQuery", "ChangeRows",
    "ChangeWindow", "PlannedChanges", "check_mode", "plan_query", "read_query", "resolve_window",
    "table_changes",
]
