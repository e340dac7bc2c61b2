"""Commit benchmark: lance_sql vs pylance in the same run, local filesystem, format 2.0.

For a table that already has N versions (default N = 10 and 1000):

* latency  — K one-row appends one after another; median and p99 of
  (a) the whole append (write the data file + commit) and
  (b) the commit alone (fragment written beforehand; pylance: ``LanceDataset.commit``).
* throughput — P processes (spawned, started together) each appending M one-row
  commits to the same table; commits per second of wall time.
* find latest — lance_sql's ``latest_version`` (hint + probing: O(1) requests) against
  listing ``_versions/`` (what it falls back to); the last summary row compares the two.

Each version adds one fragment here, so the manifest also grows with N.

    python bench/bench_commit.py --versions 10,1000 --commits 200 --procs 4 --appends 50
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from timing import formats_line  # bench/timing.py (scripts run from bench/)

import lance_sql
from lance_sql.table.meta.versions import latest_version, list_versions, load_manifest
from lance_sql.table.txn.commit import CommitConfig, commit_transaction
from lance_sql.table.txn.operations import Append, Transaction
from lance_sql.table.write.fragments import write_fragments

ROW = pa.table({"id": pa.array([1], pa.int64()), "s": pa.array(["x"], pa.string())})


def _ours_append(uri: str) -> None:
    lance_sql.write_dataset(ROW, uri, mode="append")


def _ref_append(uri: str) -> None:
    import lance

    lance.write_dataset(ROW, uri, mode="append", data_storage_version="2.0")


def _grow(uri: str, versions: int, library: str) -> None:
    """A fresh table with exactly ``versions`` versions of one row each."""
    import lance

    if library == "ours":
        lance_sql.write_dataset(ROW, uri, data_storage_version="2.0")
        for _ in range(versions - 1):
            _ours_append(uri)
    else:
        lance.write_dataset(ROW, uri, data_storage_version="2.0")
        for _ in range(versions - 1):
            _ref_append(uri)


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return statistics.median(ordered) * 1e3, p99 * 1e3


def _timed(fn: Callable[[], object], count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _ours_commit_only(uri: str, count: int) -> list[float]:
    store = lance_sql.dataset(uri).store
    out = []
    for _ in range(count):
        ref = latest_version(store)
        base = load_manifest(store, ref)
        frags = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
            ROW.schema, ROW.to_batches()))
        start = time.perf_counter()
        ref = latest_version(store)
        base = load_manifest(store, ref)
        commit_transaction(store, base, ref.naming,
                           Transaction(base.version, Append(tuple(frags))))
        out.append(time.perf_counter() - start)
    return out


def _ref_commit_only(uri: str, count: int) -> list[float]:
    import lance
    from lance.fragment import LanceFragment

    out = []
    for _ in range(count):
        frag = LanceFragment.create(uri, ROW, data_storage_version="2.0")
        start = time.perf_counter()
        version = lance.dataset(uri).version
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append([frag]),
                                  read_version=version)
        out.append(time.perf_counter() - start)
    return out


def _find_latest(uri: str, library: str, count: int = 200) -> float:
    """Median ms for lance_sql to find the latest version (``ours`` or ``ours-listing``)."""
    if library == "ours":
        store = lance_sql.dataset(uri).store
        fn: Callable[[], object] = lambda: latest_version(store)  # noqa: E731
    else:
        store = lance_sql.dataset(uri).store
        fn = lambda: list_versions(store)[-1]  # noqa: E731
    return statistics.median(_timed(fn, count)) * 1e3


def _worker(library: str, uri: str, count: int, start_at: float, queue) -> None:
    import lance

    config = CommitConfig(max_retries=10_000, timeout_s=600)
    while time.time() < start_at:
        time.sleep(0.0005)
    begin = time.perf_counter()
    for _ in range(count):
        if library == "ours":
            lance_sql.write_dataset(ROW, uri, mode="append", commit_config=config)
        else:
            lance.write_dataset(ROW, uri, mode="append", data_storage_version="2.0")
    queue.put(time.perf_counter() - begin)


def _throughput(library: str, uri: str, procs: int, count: int) -> tuple[float, int]:
    import lance

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    before = lance.dataset(uri).version
    start_at = time.time() + 4.0
    workers = [ctx.Process(target=_worker, args=(library, uri, count, start_at, queue))
               for _ in range(procs)]
    for w in workers:
        w.start()
    durations = [queue.get(timeout=900) for _ in workers]
    for w in workers:
        w.join()
    committed = lance.dataset(uri).version - before
    assert committed == procs * count, (library, committed)
    assert lance_sql.dataset(uri).version == lance.dataset(uri).version
    return committed / max(durations), committed


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--versions", default="10,1000")
    parser.add_argument("--commits", type=int, default=200, help="latency samples")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--appends", type=int, default=50, help="appends per process")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lance-sql-commit-bench-"))
    rows = []
    try:
        for versions in (int(v) for v in args.versions.split(",")):
            for library in ("ours", "ref"):
                uri = str(work / f"{library}-{versions}.lance")
                _grow(uri, versions, library)
                append = _ours_append if library == "ours" else _ref_append
                latest = (float("nan"), float("nan"))
                if library == "ours":
                    latest = (_find_latest(uri, "ours"), _find_latest(uri, "ours-listing"))
                lat = _stats(_timed(lambda a=append, u=uri: a(u), args.commits))
                # back to N versions for the commit-only figure
                shutil.rmtree(uri)
                _grow(uri, versions, library)
                only = (_ours_commit_only if library == "ours" else _ref_commit_only)(
                    uri, args.commits)
                shutil.rmtree(uri)
                _grow(uri, versions, library)
                rate, _ = _throughput(library, uri, args.procs, args.appends)
                rows.append((versions, library, lat, _stats(only), rate, latest))
                print(formats_line(**{library: uri}))
                print(f"versions={versions:5d} {library:4s} append median/p99 "
                      f"{lat[0]:6.2f}/{lat[1]:6.2f} ms  commit-only median/p99 "
                      f"{_stats(only)[0]:6.2f}/{_stats(only)[1]:6.2f} ms  "
                      f"{args.procs}-process throughput {rate:7.1f} commits/s", flush=True)
        print()
        print("versions  metric                      lance_sql   pylance   ratio")
        by = {(v, lib): (lat, only, rate, latest) for v, lib, lat, only, rate, latest in rows}
        for versions in sorted({v for v, *_ in rows}):
            ours, ref = by[(versions, "ours")], by[(versions, "ref")]
            for label, a, b in (("append median (ms)", ours[0][0], ref[0][0]),
                                ("append p99 (ms)", ours[0][1], ref[0][1]),
                                ("commit median (ms)", ours[1][0], ref[1][0]),
                                ("commit p99 (ms)", ours[1][1], ref[1][1]),
                                ("throughput (commits/s)", ours[2], ref[2]),
                                ("find latest: hint/list (ms)", ours[3][0], ours[3][1])):
                print(f"{versions:8d}  {label:26s} {a:9.2f} {b:9.2f} {a / b:7.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
