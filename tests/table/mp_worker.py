"""Worker for the multiprocess test (kept import-light: spawned processes import it)."""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa

import lance_sql
from lance_sql.errors import NotFoundError, RetryableConflict
from lance_sql.table.txn.commit import CommitConfig


def append_many(uri: str, worker: int, count: int, start_at: float, queue) -> None:
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


# -- writers next to a zero-retention cleanup loop (test_cleanup_multiprocess.py) ----------
def _acknowledged(action, attempts: int = 200) -> tuple[bool, int]:
    """Run ``action`` until it returns (acknowledged) or ``attempts`` run out. Retried:
    conflicts, and reads of a version that cleanup removed under us (nothing committed)."""
    for attempt in range(attempts):
        try:
            action()
            return True, attempt
        except (RetryableConflict, NotFoundError):
            time.sleep(0.002 * (attempt % 8))
    return False, attempts


def mixed_writer(uri: str, kind: str, keys: list[int], start_at: float, queue) -> None:
    """``kind`` is "update" (``c = c + 1`` on row ``keys[0]``, ``len(keys)`` times),
    "delete" (each key once) or "merge" (upsert each key). Reports what was acknowledged."""
    config = CommitConfig(max_retries=10_000, timeout_s=120)
    while time.time() < start_at:
        time.sleep(0.001)
    acked: list[int] = []
    retries = 0
    try:
        for key in keys:
            def act(key: int = key) -> None:
                ds = lance_sql.dataset(uri, commit_config=config)
                if kind == "update":
                    got = ds.update({"c": "c + 1"}, where=f"id = {key}")
                    assert got == {"num_rows_updated": 1}, got
                elif kind == "delete":
                    ds.delete(f"id = {key}")
                else:
                    row = pa.table({"id": pa.array([key], pa.int64()),
                                    "c": pa.array([1000 + key], pa.int64())})
                    ds.merge_insert("id").when_matched_update_all() \
                        .when_not_matched_insert_all().execute(row)
            ok, tries = _acknowledged(act)
            retries += tries
            if ok:
                acked.append(key)
        queue.put((kind, keys, acked, retries, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put((kind, keys, acked, retries, repr(exc)))


def cleanup_loop(uri: str, stop, queue) -> None:
    """``cleanup_old_versions(older_than=0)`` over and over until ``stop`` is set."""
    runs = removed = 0
    try:
        while not stop.is_set():
            removed += lance_sql.dataset(uri).cleanup_old_versions(
                older_than=timedelta(0)).old_versions
            runs += 1
        queue.put(("cleanup", runs, removed, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("cleanup", runs, removed, repr(exc)))
