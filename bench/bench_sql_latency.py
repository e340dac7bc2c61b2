"""Per-query latency of small SQL queries through ``lance_sql.connect(...).sql(q)``.

The queries whose time is mostly the session's own per-query work (parse, rewrite,
catalog, DataFusion planning, the query thread), not reading data:

* ``count(*)`` over a plain table (``--rows`` rows, 1M rows per fragment, format 2.2,
  a few deleted rows so the count needs the deletion files);
* ``_rowid = a`` on it;
* ``id = k`` on it through its BTREE index (a different key each run);
* ``id = k`` on a MemWAL table's LSM view (``--lsm-rows`` base rows, BTREE on ``id``, two
  flushed generations and an open MemTable): a key in the MemTable and a key only in the
  base table, strong consistency.

Each figure is the median (and 10th percentile) wall time of --repeat runs after a
warm-up, plus the median CPU time of the process (all threads), the queries interleaved
round by round. ``--profile QUERY`` instead runs one query --repeat times under cProfile and
prints where the time went. The plain table is kept in ``--data`` when given (reused when
present); the LSM table is rebuilt every run (its MemTable lives in this process).

    python bench/bench_sql_latency.py --rows 10000000 --repeat 200 --data /tmp/lat
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
LSM_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.float64()), pa.field("s", pa.string())])


def plain_table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.int64)
    return pa.table({"id": ids, "x": rng.random(rows),
                     "s": pa.array(np.char.add("key-", (ids % 100_003).astype(str)))})


def prepare_plain(work: Path, rows: int) -> Path:
    """The plain table (``work/plain/t.lance``), reused when already built for ``rows``."""
    root = work / "plain"
    stamp = work / f"plain-{rows}"
    if stamp.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    ds = lance_sql.write_dataset(plain_table(rows), root / "t.lance",
                                 max_rows_per_file=1_000_000)
    ds.delete("id < 5")
    ds.create_scalar_index("id", "BTREE")
    stamp.touch()
    print(f"built the plain table in {time.perf_counter() - start:.1f} s")
    return root


def lsm_rows(ids: np.ndarray, tag: int) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64) + tag,
                     "s": pa.array(np.char.add(f"t{tag}-", ids.astype(str)))}, schema=LSM_SCHEMA)


def build_lsm(root: Path, rows: int, gen_rows: int) -> tuple[object, np.ndarray, np.ndarray]:
    """A MemWAL table at ``root``; returns (open writer, MemTable keys, base-only keys)."""
    rng = np.random.default_rng(3)
    ds = lance_sql.write_dataset(lsm_rows(np.arange(rows), 0), root,
                                 max_rows_per_file=1_000_000)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", 4),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    touched = []
    for g in (1, 2):
        ids = rng.choice(rows, gen_rows, replace=False)
        touched.append(ids)
        writer.put(lsm_rows(ids, g))
        writer.flush_memtable()
    memtable = rng.choice(rows, gen_rows // 2, replace=False)
    touched.append(memtable)
    writer.put(lsm_rows(memtable, 3))
    base_only = np.setdiff1d(rng.choice(rows, 4 * gen_rows), np.concatenate(touched))
    return writer, memtable, base_only


def queries(session: lance_sql.LanceSession, rows: int, lsm: tuple | None
            ) -> dict[str, Callable[[int], pa.Table]]:
    rng = np.random.default_rng(11)
    keys = rng.integers(5, rows, 100_000)
    address = (min(3, (rows - 1) // 1_000_000) << 32) | 12_345
    out: dict[str, Callable[[int], pa.Table]] = {
        "count(*)": lambda r: session.sql("SELECT count(*) FROM t").to_arrow_table(),
        "_rowid = a": lambda r: session.sql(
            f"SELECT * FROM t WHERE _rowid = {address}").to_arrow_table(),
        "id = k (btree)": lambda r: session.sql(
            f"SELECT * FROM t WHERE id = {keys[r % len(keys)]}").to_arrow_table(),
    }
    if lsm is not None:
        _, memtable, base_only = lsm
        out["lsm id = k (memtable)"] = lambda r: session.sql(
            f"SELECT * FROM lsm WHERE id = {memtable[r % len(memtable)]}").to_arrow_table()
        out["lsm id = k (base)"] = lambda r: session.sql(
            f"SELECT * FROM lsm WHERE id = {base_only[r % len(base_only)]}").to_arrow_table()
    return out


def interleaved(ops: dict[str, Callable[[int], object]], repeat: int
                ) -> dict[str, tuple[float, float, float]]:
    """(median wall ms, 10th percentile wall ms, median CPU ms of the process) per
    query; CPU time counts every thread and is less swayed by other processes' load."""
    times: dict[str, list[float]] = {name: [] for name in ops}
    cpu: dict[str, list[float]] = {name: [] for name in ops}
    for round_ in range(repeat + 1):
        for name, fn in ops.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn(round_)
            if round_:
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    return {name: (statistics.median(ts) * 1e3, sorted(ts)[len(ts) // 10] * 1e3,
                   statistics.median(cpu[name]) * 1e3) for name, ts in times.items()}


def main() -> None:
    lance_sql.tune_allocator()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--lsm-rows", type=int, default=1_000_000,
                        help="base rows of the LSM table (0: no LSM queries)")
    parser.add_argument("--gen-rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--data", type=Path, help="keep (and reuse) the plain table here")
    parser.add_argument("--profile", help="profile this query (a name printed by the bench)")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    work = args.data or Path(tempfile.mkdtemp(prefix="lance-sql-bench-latency-"))
    lsm_dir = Path(tempfile.mkdtemp(prefix="lance-sql-bench-latency-lsm-"))
    lsm = None
    try:
        plain = prepare_plain(work, args.rows)
        session = lance_sql.connect(plain)
        if args.lsm_rows:
            start = time.perf_counter()
            lsm = build_lsm(lsm_dir / "lsm.lance", args.lsm_rows, args.gen_rows)
            print(f"built the LSM table in {time.perf_counter() - start:.1f} s")
            session.register("lsm", lsm_dir / "lsm.lance")
        ops = queries(session, args.rows, lsm)
        print(f"plain table: {args.rows:,} rows, format "
              f"{lance_sql.dataset(plain / 't.lance').data_storage_version}; LSM base "
              f"{args.lsm_rows:,} rows")
        if args.profile:
            fn = ops[args.profile]
            for r in range(3):
                fn(r)
            profiler = cProfile.Profile()
            start = time.perf_counter()
            profiler.enable()
            for r in range(args.repeat):
                fn(r)
            profiler.disable()
            per = (time.perf_counter() - start) / args.repeat * 1e3
            print(f"{args.profile}: {per:.2f} ms per query under the profiler")
            stats = pstats.Stats(profiler)
            stats.sort_stats("cumulative").print_stats(args.top)
            stats.sort_stats("tottime").print_stats(args.top)
            return
        print(f"{'query':<24} {'median ms':>10} {'p10 ms':>8} {'CPU ms':>8}  "
              f"(of {args.repeat}, interleaved)")
        for name, (ms, p10, cpu_ms) in interleaved(ops, args.repeat).items():
            print(f"{name:<24} {ms:10.2f} {p10:8.2f} {cpu_ms:8.2f}")
    finally:
        if lsm is not None:
            lsm[0].close()  # type: ignore[attr-defined]
        shutil.rmtree(lsm_dir, ignore_errors=True)
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
