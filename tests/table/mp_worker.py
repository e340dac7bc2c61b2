"""Worker for the multiprocess test (kept import-light: spawned processes import it)."""

from __future__ import annotations

import time

import pyarrow as pa

import lance_sql
from lance_sql.table.commit import CommitConfig


def append_many(uri: str, worker: int, count: int, start_at: float, queue) -> None:  # noqa: ANN001
    """Append ``count`` one-row commits; report the versions they became."""
    config = CommitConfig(max_retries=10_000, timeout_s=300)
    while time.time() < start_at:  # start together, so the writers really race
        time.sleep(0.001)
    versions = []
    try:
        for i in range(count):
            row = pa.table({"id": pa.array([worker * 1000 + i], pa.int64()),
                            "worker": pa.array([worker], pa.int32())})
            ds = lance_sql.write_dataset(row, uri, mode="append", commit_config=config)
            versions.append(ds.version)
        queue.put((worker, versions, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put((worker, versions, repr(exc)))
