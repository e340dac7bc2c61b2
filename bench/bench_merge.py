"""SQL ``MERGE INTO`` benchmark: the merge_insert fast path, old code vs new, and the
general (DataFusion-evaluated) path on the same upsert.

Data: a target of N rows (id int64, x float64, s utf8, stable row ids) and a source of
M rows, half of them matching target ids (spread over the table), half new. Each run
merges into a fresh copy of the target (copied untimed).

* ``upsert``: ``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` (one
  merge_insert);
* ``general``: the same statement plus a clause that never acts
  (``WHEN NOT MATCHED BY SOURCE AND substr(t.s, 1, 1) = '?' THEN DELETE``), which the
  fast path cannot express, so DataFusion evaluates the join and the clauses;
* with ``--old DIR`` (a checkout of the old code, e.g. /work/main), ``upsert`` also
  runs with that code in the same process: both versions' modules are imported and
  swapped into ``sys.modules`` around each run. Runs alternate (one of each per round);
  medians of wall and CPU time are printed, and the median of each round's new - old
  difference.

    python bench/bench_merge.py --rows 1000000 --source 100000 --repeat 7 \
        --data /work/benchdata/merge17 --old /work/main
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

UPSERT = ("MERGE INTO t USING src AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
          "WHEN NOT MATCHED THEN INSERT *")
GENERAL = UPSERT + " WHEN NOT MATCHED BY SOURCE AND substr(t.s, 1, 1) = '?' THEN DELETE"


def load(path: str) -> dict[str, ModuleType]:
    """The lance_sql modules imported from ``path`` (removed from sys.modules after)."""
    sys.path.insert(0, path)
    try:
        importlib.import_module("lance_sql")
        importlib.import_module("lance_sql.sql.writes")
        return {name: mod for name, mod in sys.modules.items()
                if name == "lance_sql" or name.startswith("lance_sql.")}
    finally:
        sys.path.remove(path)
        for name in [n for n in sys.modules if n == "lance_sql" or n.startswith("lance_sql.")]:
            del sys.modules[name]


def use(modules: dict[str, ModuleType]) -> ModuleType:
    """Make ``modules`` the lance_sql that imports (lazy ones too) find; its root."""
    for name in [n for n in sys.modules if n == "lance_sql" or n.startswith("lance_sql.")]:
        del sys.modules[name]
    sys.modules.update(modules)
    return modules["lance_sql"]


def make_table(rows: int, start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    s = pa.compute.binary_join_element_wise(
        "s", pa.array(rng.integers(10_000, 99_999, rows)).cast(pa.string()), "")
    return pa.table({"id": ids, "x": rng.random(rows), "s": s})


def build(lance_sql: Any, data: Path, rows: int, source: int) -> Path:
    base = data / f"merge_{rows}_{source}"
    if not (base / "t.lance").exists():
        lance_sql.write_dataset(make_table(rows, 0, 1), base / "t.lance",
                                enable_stable_row_ids=True)
        matching = make_table(source // 2, 0, 2)
        matching = matching.set_column(0, "id", pa.array(
            np.linspace(0, rows - 1, source // 2).astype(np.int64)))
        new = make_table(source - source // 2, rows, 3)
        lance_sql.write_dataset(pa.concat_tables([matching, new]), base / "src.lance")
    return base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--source", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default="/tmp/bench_merge")
    parser.add_argument("--old", default=None, help="a checkout of the old code")
    args = parser.parse_args()
    new_root = str(Path(__file__).resolve().parents[1])
    versions = {"new": load(new_root)}
    if args.old:
        versions["old"] = load(args.old)
    data = Path(args.data)
    base = build(use(versions["new"]), data, args.rows, args.source)
    work = data / "work"
    runs = [("upsert", "new", UPSERT), ("general", "new", GENERAL)]
    if args.old:
        runs.insert(1, ("upsert", "old", UPSERT))
    wall: dict[str, list[float]] = {f"{n} {v}": [] for n, v, _ in runs}
    cpu: dict[str, list[float]] = {f"{n} {v}": [] for n, v, _ in runs}
    for round_ in range(args.repeat + 1):
        for name, version, sql in runs:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            lance_sql = use(versions[version])
            session = lance_sql.connect(work)
            w0, c0 = time.perf_counter(), time.process_time()
            out = session.sql(sql).to_pydict()
            w1, c1 = time.perf_counter(), time.process_time()
            assert out["num_updated_rows"] == [args.source // 2], out
            assert out["num_inserted_rows"] == [args.source - args.source // 2], out
            if round_:  # the first round warms up
                wall[f"{name} {version}"].append(w1 - w0)
                cpu[f"{name} {version}"].append(c1 - c0)
        if version == "new" and round_ == 0:
            paths = use(versions["new"]).sql.writes.MERGE_PATHS.counts
            print(f"paths taken by the new code: {paths}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"target {args.rows} rows, source {args.source} rows (half matching), "
          f"{args.repeat} alternating rounds; medians")
    for key in wall:
        print(f"  {key:12s} wall {statistics.median(wall[key]) * 1e3:8.0f} ms   "
              f"CPU {statistics.median(cpu[key]) * 1e3:8.0f} ms")
    if args.old:  # the same round's runs paired: the machine's slow spells cancel out
        for label, times in (("wall", wall), ("CPU", cpu)):
            diffs = [n - o for n, o in zip(times["upsert new"], times["upsert old"],
                                           strict=True)]
            faster = sum(d < 0 for d in diffs)
            print(f"  upsert new - old, {label}: median {statistics.median(diffs) * 1e3:+.1f} ms "
                  f"per round (new faster in {faster} of {len(diffs)} rounds)")


if __name__ == "__main__":
    main()
