"""LSM reads while the base table's key index lags behind the merger, same run, same data.

Setup (local filesystem): a base of ``--rows`` rows (``id`` int64 primary key with a BTREE
index, as in bench_lsm.py), 8 regions; ``--rounds`` rounds of puts (20k updates of random
base keys, 20k new keys) each flushed and merged (8 merges a round: a new base fragment
each, deletions in the fragments holding the updated keys), then 3 generations left
unmerged and a 50k-row MemTable. The index is never optimized, so it misses every merged
fragment (the spec's index catch-up lag). A copy of the table with the index caught up
(``optimize_indices``) is timed beside it.

Timed (medians, interleaved round by round): the full LSM scan and the base scan (Python
and SQL), ``cat = 7``, one-key lookups (``mw.get``) and 1000-key lookups, each

* ``lagging``: the fragments the index misses searched in memory (memwal/read/unindexed.py);
* ``no tail``: the same table with that search turned off (``MAX_TAIL_ROWS = 0``): the
  scan compares every base key, lookups scan the key column, as before it existed;
* ``caught up``: the copy whose index covers every fragment;

and pylance 14.0.2's plain ``to_table()`` of the lagging base as an anchor.

    python bench/bench_lsm_lagging_index.py [--rows 2000000] [--rounds 30] [--path DIR]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_lsm as lsm

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import unindexed


def build(path: str, rows: int, rounds: int, rng: np.random.Generator) -> None:
    ds = lance_sql.write_dataset(lsm.base_batches(rows), path, schema=lsm.SCHEMA)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(path), RegionSpec.bucket("id", 8),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    fresh = rows
    for r in range(rounds + 3):
        ids = np.concatenate([rng.choice(rows, 20_000, replace=False),
                              np.arange(fresh, fresh + 20_000)])
        fresh += 20_000
        writer.put(lsm.rows(ids, r + 1))
        writer.flush_memtable()
        if r < rounds:
            mw.merge()
    writer.close(flush_memtable=False)


def abort(writer) -> None:
    """Stop ``writer``'s region writers without I/O: the MemTable put each run never
    reaches the kept table's WAL (as bench_lsm.py does)."""
    for region_writer in writer.writers:
        region_writer.abort()


def opened(path: str, rows: int, rng: np.random.Generator):
    base = lance_sql.dataset(path)
    mw = MemWal(base)
    writer = mw.writer()
    atexit.register(abort, writer)
    writer.put(lsm.rows(np.concatenate([rng.choice(rows, 25_000, replace=False),
                                        np.arange(10**9, 10**9 + 25_000)]), 99))
    return base, mw


def medians(ops: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in ops}
    for f in ops.values():
        f()
    for _ in range(repeat):
        for name, f in ops.items():
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    lance_sql.tune_allocator()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--path", default=None, help="keep the tables here, reuse them")
    args = parser.parse_args()
    root = args.path or tempfile.mkdtemp(prefix="bench_lagging_")
    lagging_path = os.path.join(root, "lagging", "t")
    caught_path = os.path.join(root, "caught_up", "t")
    rng = np.random.default_rng(2)
    try:
        if not os.path.isdir(lagging_path):
            start = time.perf_counter()
            build(lagging_path, args.rows, args.rounds, rng)
            print(f"setup {time.perf_counter() - start:.1f} s")
        if not os.path.isdir(caught_path):
            shutil.copytree(lagging_path, caught_path)
            lance_sql.dataset(caught_path).optimize.optimize_indices()
        base, lagging = opened(lagging_path, args.rows, rng)
        caught_base, caught = opened(caught_path, args.rows, rng)
        print(f"base: {len(base.get_fragments())} fragments, {base.count_rows()} rows")
        sessions = {"lagging": lance_sql.connect(os.path.dirname(lagging_path)),
                    "caught up": lance_sql.connect(os.path.dirname(caught_path))}
        keys = rng.choice(args.rows, 4000)
        at = iter(range(10**9))

        def one(mw: MemWal) -> object:
            return mw.get({"id": [int(keys[next(at) % keys.size])]})

        def many(mw: MemWal) -> object:
            return mw.get({"id": rng.choice(args.rows, 1000)})

        ops: dict[str, Callable[[], object]] = {}
        for name, mw, ds in (("lagging", lagging, base), ("caught up", caught, caught_base)):
            session = sessions[name]
            ops[f"full scan: LSM, {name}"] = lambda mw=mw: mw.scanner().to_table()
            ops[f"full scan: base, {name}"] = lambda ds=ds: ds.to_table()
            ops[f"SQL full scan: LSM, {name}"] = \
                lambda s=session: s.sql("SELECT * FROM t").to_arrow_table()
            ops[f"cat = 7: LSM, {name}"] = \
                lambda mw=mw: mw.scanner(filter="cat = 7").to_table()
            ops[f"1-key lookup: {name}"] = lambda mw=mw: one(mw)
            ops[f"1000-key lookup: {name}"] = lambda mw=mw: many(mw)
        base_sql = lance_sql.connect(os.path.dirname(lagging_path), consistency="base")
        ops["SQL full scan: base, lagging"] = \
            lambda: base_sql.sql("SELECT * FROM t").to_arrow_table()
        try:
            import lance

            theirs = lance.dataset(lagging_path)
            ops["full scan: pylance base"] = lambda: theirs.to_table()
        except ImportError:
            print("pylance not installed: no anchor")
        results = medians(ops, args.repeat)
        saved = unindexed.MAX_TAIL_ROWS
        unindexed.MAX_TAIL_ROWS = 0  # as before the tail existed (a fresh base version
        try:  # would be needed for cached answers: the tail's are per version)
            from lance_sql.table.runtime.context import current_runtime

            current_runtime().cache.clear()
            results.update(medians({
                "full scan: LSM, no tail": lambda: lagging.scanner().to_table(),
                "1-key lookup: no tail": lambda: one(lagging),
                "1000-key lookup: no tail": lambda: many(lagging),
            }, max(3, args.repeat // 2)))
        finally:
            unindexed.MAX_TAIL_ROWS = saved
        for name, seconds in results.items():
            print(f"{name:36s} {1000 * seconds:9.2f} ms")
        for name in ("lagging", "caught up"):
            print(f"ratio LSM / base full scan, {name}: "
                  f"{results[f'full scan: LSM, {name}'] / results[f'full scan: base, {name}']:.2f}")
        print(f"ratio LSM / base full scan, no tail: "
              f"{results['full scan: LSM, no tail'] / results['full scan: base, lagging']:.2f}")
    finally:
        if args.path is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
