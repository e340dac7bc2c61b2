"""Driver-side helpers: register the data source, and ``write_dataset(df, uri)``.

``write_dataset`` writes through ``DataFrame.mapInArrow``: every Spark task writes
data files for its partition and returns the fragments as one small Arrow batch;
the driver — the user's own process — collects them and commits once. It gives
the same guarantees as the data source (one transaction pinned to the version read
at the start, cleanup of every file of a failed job) with the commit where you can
see it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from lance_sql.errors import InvalidInputError, TableExistsError
from lance_sql.io.uri import open_store
from lance_sql.spark.datasource import FilteringLanceDataSource, LanceDataSource
from lance_sql.spark.types import arrow_schema, check_writable
from lance_sql.table import (
    CommitConfig,
    JobFiles,
    LanceDataset,
    commit_job,
    latest_committed,
    open_for_write,
    write_job_fragments,
)

PUSHDOWN_FLAG = "spark.sql.python.filterPushdown.enabled"
_RESULT = pa.schema([pa.field("fragment", pa.binary())])


def register(spark: Any) -> type[LanceDataSource]:
    """Register ``format("lance")`` on ``spark``.

    Spark fails every read of a Python source that can take pushed filters unless
    ``spark.sql.python.filterPushdown.enabled`` is true, so the filtering variant is
    registered only when that flag is on.
    """
    enabled = str(spark.conf.get(PUSHDOWN_FLAG, "false")).lower() == "true"
    source = FilteringLanceDataSource if enabled else LanceDataSource
    spark.dataSource.register(source)
    return source


def write_dataset(df: Any, uri: str | os.PathLike[str], mode: str = "create", *,
                  max_rows_per_file: int = 1 << 20,
                  commit_config: CommitConfig | None = None, enable_stable_row_ids: bool = False,
                  primary_key: str | Sequence[str] | None = None) -> LanceDataset:
    """Write a Spark DataFrame as one commit (``mode``: create, append or overwrite).

    ``commit_config`` is ``lance_sql.write_dataset``'s: a table kept in an external
    manifest store is committed through it here too. ``enable_stable_row_ids`` and
    ``primary_key`` apply when the write creates (or overwrites) the table, as in
    ``lance_sql.write_dataset``.
    """
    if mode not in ("create", "append", "overwrite"):
        raise InvalidInputError(f"mode must be create, append or overwrite, got {mode!r}")
    path = os.path.abspath(os.fspath(uri)) if "://" not in os.fspath(uri) else os.fspath(uri)
    config = commit_config or CommitConfig()
    exists = latest_committed(open_store(path), config.handler) is not None
    if exists and mode == "create":
        raise TableExistsError(f"a Lance table already exists at {path}; use append or overwrite")
    overwrite = mode == "overwrite" or not exists
    keys = [primary_key] if isinstance(primary_key, str) else list(primary_key or ())
    target = open_for_write(path, arrow_schema(df.schema), overwrite=overwrite,
                            commit_config=config, primary_key=keys,
                            stable_row_ids=enable_stable_row_ids)
    if exists and not overwrite:
        check_writable(target.schema.to_arrow(), df.schema)
    job = JobFiles.new(uuid.uuid4().hex[:16])

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fragments, _ = write_job_fragments(path, target, job, batches,
                                           max_rows_per_file=max_rows_per_file)
        serialized = [f.to_proto().SerializeToString() for f in fragments]
        yield pa.RecordBatch.from_arrays([pa.array(serialized, pa.binary())], schema=_RESULT)

    try:
        rows = df.mapInArrow(write_partition, "fragment binary").collect()
    except BaseException:
        job.remove_all(path)
        raise
    manifest = commit_job(path, target, job, [[bytes(r["fragment"]) for r in rows]],
                          overwrite=overwrite, commit_config=config,
                          stable_row_ids=enable_stable_row_ids)
    return LanceDataset(path, manifest.version, commit_config=config)
