"""SQL benchmark: lance_sql vs DataFusion on Parquet vs pylance + DataFusion, one process.

Data: bench_core's table (id int64, x float64, s utf8) plus ``cat``, a utf8 column with
16 distinct values for GROUP BY; N rows, 1M rows per Lance fragment / Parquet file.
The same rows are read three ways:

* lance_sql: ``lance_sql.connect(dir).sql(q)`` over the Lance table (format 2.0);
* DataFusion on Parquet: ``ctx.register_parquet`` over the same rows as Parquet files;
* pylance: ``lance.dataset(uri).to_table(columns, filter)`` of the same Lance table, then the
  same SQL in DataFusion over that Arrow table (``ctx.from_arrow``).

Each figure is the median of --repeat runs after one warm-up run (page cache warm for all),
the three contenders interleaved run by run.
Targets (issue 3): aggregations within 1.3x of DataFusion on Parquet; count(*) and
_rowid/_rowaddr lookups under 5 ms.

    python bench/bench_sql.py --rows 10000000 --repeat 5 [--data DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_core import make_table
from datafusion import SessionContext

import lance_sql

CATEGORIES = 16


@dataclass(frozen=True)
class Query:
    name: str
    sql: str                     # over a table named t
    columns: list[str] | None    # what pylance must read (None: every column)
    lance_filter: str | None     # pylance's pushed-down filter
    row_id: bool = False         # pylance must return _rowid / _rowaddr
    row_addr: bool = False
    parquet: bool = True         # DataFusion on Parquet can answer it (no system columns)
    target_ms: float | None = None      # the targets: a latency...
    target_ratio: float | None = None   # ...or at most this ratio to DataFusion on Parquet
    reference_sql: str | None = None  # for pylance's Arrow table, whose * has _rowid/_rowaddr


def queries(rows: int) -> list[Query]:
    key = min(123_456, rows - 1)
    # a row in the middle of fragment 3 (or the last fragment): address = (frag << 32) | offset
    frag = min(3, (rows - 1) // 1_000_000)
    offset = min(500_000, rows - 1 - frag * 1_000_000)
    address = (frag << 32) | offset
    return [
        Query("count(*)", "SELECT count(*) FROM t", [], None, target_ms=5),
        Query("sum(x)", "SELECT sum(x) FROM t", ["x"], None, target_ratio=1.3),
        Query("group by cat", "SELECT cat, sum(x) FROM t GROUP BY cat ORDER BY cat",
              ["cat", "x"], None, target_ratio=1.3),
        Query("where id = k", f"SELECT * FROM t WHERE id = {key}", None, f"id = {key}"),
        Query("where _rowid = a", f"SELECT * FROM t WHERE _rowid = {address}", None,
              f"_rowid = {address}", row_id=True, parquet=False, target_ms=5,
              reference_sql=f"SELECT * EXCLUDE (_rowid) FROM t WHERE _rowid = {address}"),
        Query("where _rowaddr = a", f"SELECT * FROM t WHERE _rowaddr = {address}", None,
              f"_rowaddr = {address}", row_addr=True, parquet=False, target_ms=5,
              reference_sql=f"SELECT * EXCLUDE (_rowaddr) FROM t WHERE _rowaddr = {address}"),
    ]


def bench_table(rows: int) -> pa.Table:
    table = make_table(rows)
    rng = np.random.default_rng(7)
    cats = pa.array([f"cat_{i:02d}" for i in range(CATEGORIES)])
    return table.append_column("cat", cats.take(pa.array(rng.integers(0, CATEGORIES, rows))))


def median_times(runs: dict[str, Callable[[], object]], repeat: int
                 ) -> dict[str, tuple[float, float]]:
    """(median, best) seconds of each callable. Runs are interleaved (a, b, c, a, b, c, ...) so that
    load from other processes hits every contender alike; one warm-up run each first."""
    for fn in runs.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(ts), min(ts)) for name, ts in times.items()}


def prepare(work: Path, rows: int, rows_per_file: int) -> tuple[Path, Path]:
    """The Lance table and the Parquet directory; reused when ``work`` already has them."""
    lance_dir, parquet_dir = work / "lance", work / "parquet"
    stamp = work / f"rows-{rows}-{rows_per_file}"
    if stamp.exists():
        return lance_dir, parquet_dir
    shutil.rmtree(lance_dir, ignore_errors=True)
    shutil.rmtree(parquet_dir, ignore_errors=True)
    for old in work.glob("rows-*"):
        old.unlink()
    table = bench_table(rows)
    start = time.perf_counter()
    lance_sql.write_dataset(table, lance_dir / "t.lance", max_rows_per_file=rows_per_file)
    print(f"wrote the Lance table in {time.perf_counter() - start:.1f} s")
    parquet_dir.mkdir(parents=True)
    for i, first in enumerate(range(0, rows, rows_per_file)):
        pq.write_table(table.slice(first, rows_per_file), parquet_dir / f"part-{i:04d}.parquet")
    stamp.touch()
    return lance_dir, parquet_dir


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, help="keep (and reuse) the tables in this directory")
    args = parser.parse_args()

    import lance  # the reference, imported here so the package never depends on it

    work = args.data or Path(tempfile.mkdtemp(prefix="lance-sql-bench-sql-"))
    work.mkdir(parents=True, exist_ok=True)
    lance_dir, parquet_dir = prepare(work, args.rows, args.rows_per_file)
    uri = str(lance_dir / "t.lance")

    session = lance_sql.connect(lance_dir)
    parquet = SessionContext()
    parquet.register_parquet("t", str(parquet_dir))

    def ours(q: Query) -> pa.Table:
        return session.sql(q.sql).to_arrow_table()

    def on_parquet(q: Query) -> pa.Table:
        return parquet.sql(q.sql).to_arrow_table()

    def reference(q: Query) -> pa.Table:
        data = lance.dataset(uri).to_table(columns=q.columns, filter=q.lance_filter,
                                           with_row_id=q.row_id, with_row_address=q.row_addr)
        ctx = SessionContext()
        ctx.register_view("t", ctx.from_arrow(data))
        return ctx.sql(q.reference_sql or q.sql).to_arrow_table()

    results = []
    for q in queries(args.rows):
        expected = ours(q)
        got = reference(q)
        assert _rows(expected) == _rows(got), f"{q.name}: lance_sql and pylance differ"
        if q.parquet:
            assert _rows(expected) == _rows(on_parquet(q)), f"{q.name}: differs from Parquet"
        runs = {"ours": lambda q=q: ours(q), "reference": lambda q=q: reference(q)}
        if q.parquet:
            runs["parquet"] = lambda q=q: on_parquet(q)
        medians = median_times(runs, args.repeat)
        results.append((q, medians["ours"], medians.get("parquet"), medians["reference"]))

    print(f"\n{args.rows:,} rows, {args.rows_per_file:,} rows per file, median of {args.repeat} "
          "(interleaved, after one warm-up); best run in parentheses")
    print(f"{'query':<20}{'lance_sql ms':>17}{'parquet ms':>17}{'pylance ms':>17}"
          f"{'vs parquet':>12}{'vs pylance':>12}   target")
    for q, ours_t, parquet_t, ref_t in results:
        print(f"{q.name:<20}{_ms(ours_t)}{_ms(parquet_t)}{_ms(ref_t)}"
              f"{_ratio(ours_t, parquet_t)}{_ratio(ours_t, ref_t)}   "
              f"{_target(q, ours_t, parquet_t)}")
    print("(ratio = lance_sql / other, of the medians; below 1 means lance_sql is faster)")
    if args.data is None:
        shutil.rmtree(work, ignore_errors=True)


def _ms(t: tuple[float, float] | None) -> str:
    return f"{'n/a':>17}" if t is None else f"{t[0] * 1e3:9.1f} ({t[1] * 1e3:5.1f})"


def _ratio(ours: tuple[float, float], other: tuple[float, float] | None) -> str:
    return f"{'n/a':>12}" if other is None else f"{ours[0] / other[0]:11.2f}x"


def _target(q: Query, ours: tuple[float, float], parquet: tuple[float, float] | None) -> str:
    if q.target_ms is not None:
        met = ours[0] * 1e3 < q.target_ms
        return f"< {q.target_ms:g} ms: {'met' if met else 'MISSED'}"
    if q.target_ratio is not None and parquet is not None:
        met = ours[0] / parquet[0] <= q.target_ratio
        return f"<= {q.target_ratio:g}x parquet: {'met' if met else 'MISSED'}"
    return ""


def _rows(table: pa.Table) -> list[tuple]:
    """Rows as tuples with floats rounded (sums in another order differ in the last bits)."""
    columns = [c.to_pylist() for c in table.columns]
    out = []
    for row in zip(*columns, strict=True):
        out.append(tuple(round(v, 6) if isinstance(v, float) else v for v in row))
    return sorted(out, key=repr)


if __name__ == "__main__":
    main()
