"""Filters combining ranges of one BTREE-indexed column (AND / OR / NOT / IN / BETWEEN):
the wall and CPU time of answering them through the index, Python API and SQL.

Each shape is timed ``--repeat`` times after one warm-up, shapes interleaved round by
round; medians. The table is read only (e.g. a MemWAL table's base, filtered directly).

    python bench/bench_index_ranges.py --path /work/benchdata/lead18/lsm/ours [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import lance_sql

SHAPES = [
    "id >= 100 and id < 100000 or id > 9900000",
    "id > 5000 and id < 6000 or id between 20000 and 21000 or id in (7, 9000000)",
    "(id < 1000 or id > 9999000) and id != 500",
    "not (id >= 2000) and id > 1000",
    "id >= 100 and id < 100000",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sql", action="store_true", help="also time each shape through SQL")
    args = parser.parse_args()
    ds = lance_sql.dataset(args.path)
    # consistency="base": the table alone (a MemWAL table's base, not its LSM view)
    conn = lance_sql.connect(consistency="base") if args.sql else None
    if conn is not None:
        conn.register("t", args.path)
    ops = {}
    for shape in SHAPES:
        ops[f"py  {shape}"] = (lambda s=shape: ds.to_table(filter=s, columns=["id"]).num_rows)
        if conn is not None:
            ops[f"sql {shape}"] = (lambda s=shape: conn.sql(
                f"SELECT id FROM t WHERE {s}").to_arrow_table().num_rows)
    wall: dict[str, list[float]] = {k: [] for k in ops}
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    rows: dict[str, int] = {}
    for round_ in range(args.repeat + 1):
        for name, fn in ops.items():
            w, c = time.perf_counter(), time.process_time()
            rows[name] = fn()
            if round_:
                wall[name].append(time.perf_counter() - w)
                cpu[name].append(time.process_time() - c)
    for name in ops:
        print(f"{name:90s} rows {rows[name]:>8d}  wall {statistics.median(wall[name]):.4f} s"
              f"  cpu {statistics.median(cpu[name]):.4f} s")


if __name__ == "__main__":
    main()
