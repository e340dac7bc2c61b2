"""Row-lineage benchmark: change feed, merge_insert and the row-id index, vs pylance.

Data: N rows of (id int64, x float64, s utf8), stable row ids, 1M rows per fragment,
written once by lance_sql (pylance reads the same files). Version 2 updates 1% of the
rows (every 100th id), scattered over every fragment.

* change feed of version 2: lance_sql ``table_changes(t, 2, 2)`` (inserts, pre- and
  post-images, deletes: the values of both sides), the same without pre-images (the
  rows ``delta()`` returns) and the full feed through SQL, vs
  pylance ``delta(begin_version=1, end_version=2)`` reading inserted + updated rows +
  deleted row ids;
  Repeated runs reuse the cached per-version plan and read plan (as SQL and Spark
  executors do); the "first time" lines clear both before each run, and the "new
  process" line times the first call of a fresh interpreter (every cache empty), imports
  excluded. These lines are timed in interleaved rounds (one run of each per round);
* merge_insert of M source rows, half matching existing ids, half new: each library on
  its own copy of the table (copies are made untimed);
* the row-id index after the update: its size and the peak memory of building it.

    python bench/bench_lineage.py --rows 10000000 --repeat 3 [--data DIR]

``--data DIR`` keeps the tables in DIR and reuses them on the next run with the same
--rows / --window-versions (building 10M rows takes a while on a shared machine).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from timing import (  # bench/timing.py (scripts run from bench/)
    formats_line,
    interleaved_medians,
    median_time,
)

import lance_sql
from lance_sql.table.changes.feed import table_changes
from lance_sql.table.files.row_id_index import RowIdIndex


def _forget_plans() -> None:
    lance_sql.default_runtime().clear("change_plans")


def make_table(rows: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    s = pa.compute.binary_join_element_wise(
        "s", pa.array(rng.integers(10_000, 99_999, rows)).cast(pa.string()), "")
    return pa.table({"id": ids, "x": rng.random(rows), "s": s})


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--merge-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--window-versions", type=int, default=200)
    parser.add_argument("--data", type=Path, help="keep (and reuse) the tables in this directory")
    args = parser.parse_args()

    work = args.data or Path(tempfile.mkdtemp(prefix="bench_lineage_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        path = str(work / "t")
        stamp = work / f"rows-{args.rows}"
        if not stamp.exists():
            for old in work.glob("rows-*"):
                old.unlink()
            shutil.rmtree(path, ignore_errors=True)
            lance_sql.write_dataset(make_table(args.rows), path, enable_stable_row_ids=True,
                                    max_rows_per_file=1_000_000)
            lance_sql.dataset(path).update({"x": "x + 1"}, where="id % 100 = 0")
            stamp.touch()
        touched = args.rows // 100
        print(formats_line(lance_sql=path))

        def ours() -> None:
            out = table_changes(path, 2, 2)
            assert out.num_rows == 2 * touched, out.num_rows

        def ours_same_rows() -> None:  # only what delta() returns: no pre-images
            table_changes(path, 2, 2, filter="_change_type <> 'update_preimage'")

        session = lance_sql.connect(work)

        def ours_sql() -> None:
            out = session.sql("SELECT * FROM table_changes('t', 2, 2)").to_arrow_table()
            assert out.num_rows == 2 * touched

        def reference() -> None:
            ds = lance.dataset(path)
            n = ds.delta(begin_version=1, end_version=2).get_updated_rows().read_all().num_rows
            ds.delta(begin_version=1, end_version=2).get_inserted_rows().read_all()
            ds.delta(begin_version=1, end_version=2).get_deleted_row_ids().read_all()
            assert n == touched, n

        def reference_with_preimages() -> None:  # what a pylance user needs for our output
            ds = lance.dataset(path)
            updated = ds.delta(begin_version=1, end_version=2).get_updated_rows().read_all()
            ds.delta(begin_version=1, end_version=2).get_inserted_rows().read_all()
            ds.delta(begin_version=1, end_version=2).get_deleted_row_ids().read_all()
            old = lance.dataset(path, version=1)  # pylance takes by row id privately only
            old._take_rows(updated.column("_rowid").to_pylist())  # noqa: SLF001

        # interleaved rounds: a slow spell of the shared machine hits every line alike.
        # Each "cold" line clears the plans, so the cached lines follow the cold line that
        # planned what they reuse (the full feed's read plan for "ours" and "sql").
        t = interleaved_medians({
            "same_cold": (ours_same_rows, _forget_plans), "same": (ours_same_rows, None),
            "cold": (ours, _forget_plans), "ours": (ours, None),
            "sql": (ours_sql, None), "ref": (reference, None),
            "ref_pre": (reference_with_preimages, None)}, args.repeat)
        t_ours, t_cold, t_same, t_same_cold = t["ours"], t["cold"], t["same"], t["same_cold"]
        t_sql, t_ref, t_ref_pre = t["sql"], t["ref"], t["ref_pre"]
        t_fresh, t_fresh_ref = _first_call_in_new_process(path, args.repeat)
        print(f"change feed of a 1% update ({touched} rows, {args.rows} total)")
        print(f"  lance_sql table_changes {t_ours * 1e3:9.1f} ms  ratio {t_ours / t_ref:5.2f}x")
        print(f"    first time (no plan cached) {t_cold * 1e3:9.1f} ms  "
              f"ratio {t_cold / t_ref:5.2f}x")
        print(f"  same rows as delta()    {t_same * 1e3:9.1f} ms  ratio {t_same / t_ref:5.2f}x")
        print(f"    first time (no plan cached) {t_same_cold * 1e3:9.1f} ms  "
              f"ratio {t_same_cold / t_ref:5.2f}x")
        print(f"  lance_sql SQL           {t_sql * 1e3:9.1f} ms  ratio {t_sql / t_ref:5.2f}x")
        print(f"  first call in a new process (imports excluded): lance_sql "
              f"{t_fresh * 1e3:.1f} ms, pylance {t_fresh_ref * 1e3:.1f} ms, "
              f"ratio {t_fresh / t_fresh_ref:5.2f}x")
        print(f"  pylance delta()         {t_ref * 1e3:9.1f} ms")
        print(f"  pylance delta() + pre-images via _take_rows on v1 {t_ref_pre * 1e3:9.1f} ms "
              f"(lance_sql full feed ratio {t_ours / t_ref_pre:5.2f}x)")

        _long_window(work, args.window_versions, args.repeat)

        half = args.merge_rows // 2
        step = max(1, args.rows // half)
        source = pa.concat_tables([
            make_table(half, seed=1).set_column(
                0, "id", pa.array(np.arange(half, dtype=np.int64) * step)),
            make_table(args.merge_rows - half, start=args.rows, seed=2),
        ])
        copy = str(work / "copy")

        def fresh_copy() -> None:
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(path, copy)

        def merge_ours() -> None:
            stats = (lance_sql.dataset(copy).merge_insert("id").when_matched_update_all()
                     .when_not_matched_insert_all().execute(source))
            assert stats["num_updated_rows"] == half, stats

        def merge_ref() -> None:
            stats = (lance.dataset(copy).merge_insert("id").when_matched_update_all()
                     .when_not_matched_insert_all().execute(source))
            assert stats["num_updated_rows"] == half, stats

        m_ours = median_time(merge_ours, args.repeat, setup=fresh_copy)
        m_ref = median_time(merge_ref, args.repeat, setup=fresh_copy)
        print(f"merge_insert of {args.merge_rows} rows ({half} updates)")
        print(f"  lance_sql {m_ours * 1e3:9.1f} ms  ratio {m_ours / m_ref:5.2f}x")
        print(f"  pylance   {m_ref * 1e3:9.1f} ms")

        ds = lance_sql.dataset(path)
        tracemalloc.start()
        index = RowIdIndex.build(ds.store, ds.manifest)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"row-id index after the update: {index.num_runs} runs, "
              f"{index.nbytes / 2**20:.1f} MiB held, {peak / 2**20:.1f} MiB peak while building")
    finally:
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "copy", ignore_errors=True)


def _long_window(work: Path, versions: int, repeat: int) -> None:
    """A history of many small commits (appends of 10 rows, every third commit an update
    of 2% of the rows): the feed of the whole window vs ``delta()`` over it."""
    path = str(work / "long")
    if Path(path).exists() and lance_sql.dataset(path).version > versions:
        shutil.rmtree(path)  # kept from a run with a longer window: build it again
    if not Path(path).exists():
        lance_sql.write_dataset(pa.table({"id": np.arange(1000), "x": np.zeros(1000)}), path,
                                enable_stable_row_ids=True)
    while lance_sql.dataset(path).version < versions:
        v = lance_sql.dataset(path).version
        if v % 3 == 0:
            lance_sql.dataset(path).update({"x": "x + 1"}, where=f"id % 50 = {v % 50}")
        else:
            start = 1000 + 10 * v
            lance_sql.write_dataset(pa.table({"id": np.arange(start, start + 10),
                                              "x": np.zeros(10)}), path, mode="append")
    end = lance_sql.dataset(path).version

    def ours() -> None:
        table_changes(path, 2, end)

    def reference() -> None:
        ds = lance.dataset(path)
        ds.delta(begin_version=1, end_version=end).get_updated_rows().read_all()
        ds.delta(begin_version=1, end_version=end).get_inserted_rows().read_all()
        ds.delta(begin_version=1, end_version=end).get_deleted_row_ids().read_all()

    rows = table_changes(path, 2, end).num_rows
    t_ours = median_time(ours, repeat)
    t_cold = median_time(ours, repeat, setup=_forget_plans)
    t_ref = median_time(reference, repeat)
    print(f"change feed of a {end - 1}-version window ({rows} change rows, every commit's "
          "own changes)")
    print(f"  lance_sql table_changes {t_ours * 1e3:9.1f} ms  ratio {t_ours / t_ref:5.2f}x")
    print(f"    first time (no plan cached) {t_cold * 1e3:9.1f} ms  "
          f"ratio {t_cold / t_ref:5.2f}x")
    print(f"  pylance delta() (net changes only) {t_ref * 1e3:9.1f} ms")


_FIRST_CALL = """
import sys, time
import lance
import lance_sql
from lance_sql.table.changes.feed import table_changes
lance_sql.tune_allocator()
path, which = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if which == "ours":
    table_changes(path, 2, 2)
else:
    ds = lance.dataset(path)
    for rows in ("get_updated_rows", "get_inserted_rows"):
        getattr(ds.delta(begin_version=1, end_version=2), rows)().read_all()
    ds.delta(begin_version=1, end_version=2).get_deleted_row_ids().read_all()
print(time.perf_counter() - start)
"""


def _first_call_in_new_process(path: str, repeat: int) -> tuple[float, float]:
    """Median time of the first change-feed call of a fresh Python process, each library."""
    def once(which: str) -> float:
        out = subprocess.run([sys.executable, "-c", _FIRST_CALL, path, which],
                             capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])

    return (statistics.median(once("ours") for _ in range(repeat)),
            statistics.median(once("reference") for _ in range(repeat)))


if __name__ == "__main__":
    main()
