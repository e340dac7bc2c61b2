"""LIMIT reads on the LSM bench table (``bench_lsm.py``'s, reused from ``--path``): a
filter with a LIMIT through Python and SQL, on the LSM view and on its base alone, with
the guards beside them (a filter matching nothing, with and without a LIMIT; ORDER BY
with a LIMIT). CPU time (every thread of the process) and wall time, medians of
``--repeat`` rounds, the operations interleaved round by round.

The table must exist (``bench_lsm.py --path DIR`` builds it); the MemTable is put again
each run and its writer aborted at the end, so the table is left as found.

    python bench/bench_limit.py --path /work/benchdata/lead18/lsm [--repeat 15]
    python bench/bench_limit.py --path DIR --compare OTHER_CHECKOUT [--runs 4]

``--compare`` runs this script alternately with this checkout and another one (each run
a process of its own, ``--runs`` times each) and prints the medians of all their rounds
side by side: old code against new on the same machine, the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

# the checkout measured (--compare runs this file over another one's package and bench_lsm)
sys.path.insert(0, os.environ.get("BENCH_LIMIT_TREE")
                or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(sys.path[0], "bench"))

import bench_lsm

import lance_sql

TREE = os.path.dirname(os.path.dirname(os.path.abspath(bench_lsm.__file__)))

RARE = "cat = 7"  # 0.1% of the rows (cat = id % 1000)
NONE = "cat = 5000"  # no row


def operations(root: str, rows: int) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """The timed operations over the table under ``root`` and a closer that aborts the
    MemTable's writers."""
    args = argparse.Namespace(path=root, rows=rows)
    rng = np.random.default_rng(1)
    gens, new_from = [], rows
    for _ in range(3):  # bench_lsm's defaults: the same keys it built the table with
        gens.append(bench_lsm.generation_ids(rng, rows, 100_000, new_from))
        new_from += 100_000
    memtable = bench_lsm.generation_ids(rng, rows, 50_000, new_from)
    mw, writer = bench_lsm.build_ours(os.path.join(root, "ours"), args, gens, memtable)
    base = lance_sql.dataset(os.path.join(root, "ours"))
    session = lance_sql.connect(root)
    base_session = lance_sql.connect(root, consistency="base")

    def sql(s: lance_sql.LanceSession, query: str) -> Callable[[], object]:
        return lambda: s.sql(query).to_arrow_table()

    ops: dict[str, Callable[[], object]] = {
        f"LSM py {RARE} LIMIT 10": lambda: mw.scanner(filter=RARE, limit=10).to_table(),
        f"base py {RARE} LIMIT 10": lambda: base.to_table(filter=RARE, limit=10),
        f"LSM SQL {RARE} LIMIT 10": sql(session, f"SELECT * FROM ours WHERE {RARE} LIMIT 10"),
        f"base SQL {RARE} LIMIT 10": sql(base_session,
                                         f"SELECT * FROM ours WHERE {RARE} LIMIT 10"),
        "base SQL LIMIT 10": sql(base_session, "SELECT * FROM ours LIMIT 10"),
        f"base SQL {RARE} ORDER BY id LIMIT 10": sql(
            base_session, f"SELECT * FROM ours WHERE {RARE} ORDER BY id LIMIT 10"),
        f"base py {NONE} LIMIT 10": lambda: base.to_table(filter=NONE, limit=10),
        f"base py {NONE}": lambda: base.to_table(filter=NONE),
        f"base SQL {NONE} LIMIT 10": sql(base_session,
                                         f"SELECT * FROM ours WHERE {NONE} LIMIT 10"),
        f"base SQL {NONE}": sql(base_session, f"SELECT * FROM ours WHERE {NONE}"),
    }

    def close() -> None:
        for region_writer in writer.writers:
            region_writer.abort()

    return ops, close


def measure(root: str, rows: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """CPU and wall seconds of each operation per round (one untimed round first)."""
    ops, close = operations(root, rows)
    cpu: dict[str, list[float]] = {name: [] for name in ops}
    wall: dict[str, list[float]] = {name: [] for name in ops}
    try:
        for round_ in range(repeat + 1):
            for name, fn in ops.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                if round_:
                    cpu[name].append(time.process_time() - start_cpu)
                    wall[name].append(time.perf_counter() - start)
    finally:
        close()
    return {"cpu": cpu, "wall": wall}


def _report(columns: dict[str, dict[str, dict[str, list[float]]]]) -> None:
    labels = list(columns)
    names = list(next(iter(columns.values()))["cpu"])
    head = " ".join(f"{label + ' CPU':>12s} {label + ' wall':>12s}" for label in labels)
    print(f"{'median ms':44s} {head}")
    for name in names:
        cells = " ".join(
            f"{1000 * statistics.median(columns[label]['cpu'][name]):12.2f} "
            f"{1000 * statistics.median(columns[label]['wall'][name]):12.2f}"
            for label in labels)
        print(f"{name:44s} {cells}")


def main() -> None:
    lance_sql.tune_allocator()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="bench_lsm.py's --path (table 'ours')")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the rounds as JSON")
    parser.add_argument("--compare", default=None,
                        help="another checkout to run alternately with this one")
    parser.add_argument("--runs", type=int, default=3, help="--compare: runs of each")
    args = parser.parse_args()
    if args.compare is None:
        rounds = measure(args.path, args.rows, args.repeat)
        if args.json:
            print(json.dumps(rounds))
        else:
            _report({"": rounds})
        return
    checkouts = {"other": os.path.abspath(args.compare), "this": TREE}
    merged: dict[str, dict[str, dict[str, list[float]]]] = {}
    for _ in range(args.runs):
        for label, tree in checkouts.items():
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--path", args.path, "--rows",
                 str(args.rows), "--repeat", str(args.repeat), "--json"],
                env={**os.environ, "PYTHONPATH": tree, "BENCH_LIMIT_TREE": tree}, cwd=tree,
                capture_output=True,
                text=True, check=True)
            rounds = json.loads(done.stdout.strip().splitlines()[-1])
            into = merged.setdefault(label, {"cpu": {}, "wall": {}})
            for kind in ("cpu", "wall"):
                for name, times in rounds[kind].items():
                    into[kind].setdefault(name, []).extend(times)
    _report(merged)


if __name__ == "__main__":
    main()
