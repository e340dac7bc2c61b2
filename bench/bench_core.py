"""Table-core benchmark: lance_sql vs pylance in one process, ratios printed.

Data: N rows of (id int64, x float64, s utf8 of ~6 bytes), 1M rows per fragment,
Lance file format 2.0 for both. Each figure is the median of --repeat runs.

    python bench/bench_core.py --rows 10000000 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from timing import formats_line, median_time  # bench/timing.py (scripts run from bench/)

import lance_sql


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    xs = rng.random(rows)
    # ~6-byte strings with high cardinality: "s" + 5 digits
    s = pa.compute.binary_join_element_wise(
        "s", pa.array(rng.integers(10_000, 99_999, rows)).cast(pa.string()), ""
    )
    return pa.table({"id": ids, "x": xs, "s": s})


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import lance  # the reference, imported here so the package never depends on it

    table = make_table(args.rows)
    work = Path(tempfile.mkdtemp(prefix="lance-sql-bench-"))
    ours_uri, ref_uri = work / "ours.lance", work / "ref.lance"
    results: list[tuple[str, float, float]] = []

    def clean() -> None:
        shutil.rmtree(ours_uri, ignore_errors=True)
        shutil.rmtree(ref_uri, ignore_errors=True)

    write_repeat = max(1, min(args.repeat, 3))
    t_ours = median_time(
        lambda: lance_sql.write_dataset(table, ours_uri, max_rows_per_file=args.rows_per_file,
                                        data_storage_version="2.0"),
        write_repeat, setup=lambda: shutil.rmtree(ours_uri, ignore_errors=True))
    t_ref = median_time(
        lambda: lance.write_dataset(table, ref_uri, max_rows_per_file=args.rows_per_file,
                                    data_storage_version="2.0"),
        write_repeat, setup=lambda: shutil.rmtree(ref_uri, ignore_errors=True))
    results.append(("write", t_ours, t_ref))

    ours, ref = lance_sql.dataset(ours_uri), lance.dataset(ref_uri)
    assert ours.to_table().equals(ref.to_table()), "the two tables differ"
    results.append(("full scan to_table", median_time(ours.to_table, args.repeat),
                    median_time(ref.to_table, args.repeat)))
    results.append(("projected scan (x)",
                    median_time(lambda: ours.to_table(columns=["x"]), args.repeat),
                    median_time(lambda: ref.to_table(columns=["x"]), args.repeat)))
    indices = np.sort(np.random.default_rng(1).choice(args.rows, 1000, replace=False))
    assert ours.take(indices).equals(ref.take(indices))
    results.append(("take 1000 random rows",
                    median_time(lambda: ours.take(indices), args.repeat),
                    median_time(lambda: ref.take(indices), args.repeat)))
    one = table.slice(0, 1)
    results.append(("1-row append commit",
                    median_time(lambda: lance_sql.write_dataset(one, ours_uri, mode="append"),
                                args.repeat),
                    median_time(lambda: lance.write_dataset(one, ref_uri, mode="append"),
                                args.repeat)))
    results.append(("count_rows", median_time(lambda: lance_sql.dataset(ours_uri).count_rows(),
                                              args.repeat),
                    median_time(lambda: lance.dataset(ref_uri).count_rows(), args.repeat)))

    print(f"\n{args.rows:,} rows, {args.rows_per_file:,} rows per file, median of {args.repeat}")
    print(formats_line(lance_sql=ours_uri, pylance=ref_uri))
    print(f"{'operation':<24}{'lance_sql (s)':>15}{'pylance (s)':>14}{'ratio':>9}")
    for name, ours_t, ref_t in results:
        print(f"{name:<24}{ours_t:>15.4f}{ref_t:>14.4f}{ours_t / ref_t:>8.2f}x")
    print("(ratio = lance_sql / pylance; below 1 means lance_sql is faster)")
    clean()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
