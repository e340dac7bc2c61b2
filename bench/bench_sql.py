"""SQL benchmark: lance_sql vs DataFusion on Parquet vs pylance + DataFusion, one process.

Data: bench_core's table (id int64, x float64, s utf8) plus ``cat``, a utf8 column with
16 distinct values for GROUP BY; N rows, 1M rows per Lance fragment / Parquet file.
The same rows are read three ways:

* lance_sql: ``lance_sql.connect(dir).sql(q)`` over the Lance table, once written in file
  format 2.0 and once in 2.2 (the default of new tables), both by lance_sql;
* DataFusion on Parquet: ``ctx.register_parquet`` over the same rows as Parquet files;
* pylance: ``lance.dataset(uri).to_table(columns, filter)`` of the same Lance table (each
  format), then the same SQL in DataFusion over that Arrow table (``ctx.from_arrow``).

Each figure is the median of --repeat runs after one warm-up run (page cache warm for all),
all contenders of a query interleaved run by run. Targets (issues 3 and 19): aggregations
within 1.3x of DataFusion on Parquet, and on 2.2 within 1.0x of pylance; count(*) and
_rowid/_rowaddr lookups under 5 ms.

    python bench/bench_sql.py --rows 10000000 --repeat 5 [--formats 2.0,2.2] [--data DIR]
                              [--only 'sum,id =']
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


def prepare(work: Path, rows: int, rows_per_file: int,
            formats: list[str]) -> tuple[dict[str, Path], Path]:
    """The Lance table of each format and the Parquet directory; reused when ``work``
    already has them (``<work>/lance-<format>/t.lance``, ``<work>/parquet``)."""
    lance_dirs = {v: work / f"lance-{v}" for v in formats}
    parquet_dir = work / "parquet"
    stamp = work / f"rows-{rows}-{rows_per_file}"
    table = None
    if not stamp.exists():
        for old in work.glob("rows-*"):
            old.unlink()
        for d in [parquet_dir, *work.glob("lance-*")]:
            shutil.rmtree(d, ignore_errors=True)
        table = bench_table(rows)
        parquet_dir.mkdir(parents=True)
        for i, first in enumerate(range(0, rows, rows_per_file)):
            pq.write_table(table.slice(first, rows_per_file), parquet_dir / f"part-{i:04d}.parquet")
        stamp.touch()
    for version, lance_dir in lance_dirs.items():
        if (lance_dir / "t.lance").exists():
            continue
        table = table if table is not None else bench_table(rows)
        start = time.perf_counter()
        lance_sql.write_dataset(table, lance_dir / "t.lance", max_rows_per_file=rows_per_file,
                                data_storage_version=version)
        print(f"wrote the {version} Lance table in {time.perf_counter() - start:.1f} s")
    return lance_dirs, parquet_dir


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--formats", default="2.0,2.2",
                        help="Lance file formats to measure, comma separated")
    parser.add_argument("--data", type=Path, help="keep (and reuse) the tables in this directory")
    parser.add_argument("--only", default="",
                        help="measure only the queries whose names contain one of these "
                             "comma-separated words (e.g. 'sum,id =')")
    args = parser.parse_args()
    formats = [v.strip() for v in args.formats.split(",") if v.strip()]

    import lance  # the reference, imported here so the package never depends on it

    work = args.data or Path(tempfile.mkdtemp(prefix="lance-sql-bench-sql-"))
    work.mkdir(parents=True, exist_ok=True)
    lance_dirs, parquet_dir = prepare(work, args.rows, args.rows_per_file, formats)
    sessions, uris = {}, {}
    for version, lance_dir in lance_dirs.items():
        uris[version] = str(lance_dir / "t.lance")
        written = lance_sql.dataset(uris[version]).data_storage_version
        assert written == version, f"the {version} table is in format {written}"
        sessions[version] = lance_sql.connect(lance_dir)
    parquet = SessionContext()
    parquet.register_parquet("t", str(parquet_dir))

    def ours(version: str, q: Query) -> pa.Table:
        return sessions[version].sql(q.sql).to_arrow_table()

    def on_parquet(q: Query) -> pa.Table:
        return parquet.sql(q.sql).to_arrow_table()

    def reference(version: str, q: Query) -> pa.Table:
        data = lance.dataset(uris[version]).to_table(
            columns=q.columns, filter=q.lance_filter, with_row_id=q.row_id,
            with_row_address=q.row_addr)
        ctx = SessionContext()
        ctx.register_view("t", ctx.from_arrow(data))
        return ctx.sql(q.reference_sql or q.sql).to_arrow_table()

    only = [w.strip() for w in args.only.split(",") if w.strip()]
    results = []
    for q in queries(args.rows):
        if only and not any(w in q.name for w in only):
            continue
        runs: dict[str, Callable[[], object]] = {}
        expected = None
        for v in formats:
            got = _rows(ours(v, q))
            expected = got if expected is None else expected
            assert got == expected, f"{q.name}: lance_sql on {v} differs"
            assert _rows(reference(v, q)) == expected, f"{q.name}: pylance on {v} differs"
            runs[f"ours {v}"] = lambda q=q, v=v: ours(v, q)
            runs[f"pylance {v}"] = lambda q=q, v=v: reference(v, q)
        if q.parquet:
            assert _rows(on_parquet(q)) == expected, f"{q.name}: differs from Parquet"
            runs["parquet"] = lambda q=q: on_parquet(q)
        results.append((q, median_times(runs, args.repeat)))

    print(f"\n{args.rows:,} rows, {args.rows_per_file:,} rows per file, median of {args.repeat} "
          "(interleaved, after one warm-up); best run in parentheses")
    print("file formats measured: " + ", ".join(
        f"{v} ({lance_sql.dataset(uris[v]).data_storage_version} as read back)" for v in formats))
    header = f"{'query':<20}{'parquet ms':>17}"
    for v in formats:
        header += f"{'lance_sql ' + v + ' ms':>21}{'pylance ' + v + ' ms':>19}{'vs pylance':>11}"
    print(header + f"{'vs parquet':>11}   target")
    for q, m in results:
        line = f"{q.name:<20}{_ms(m.get('parquet'))}"
        for v in formats:
            line += f"    {_ms(m[f'ours {v}'])}  {_ms(m[f'pylance {v}'])}"
            line += _ratio(m[f"ours {v}"], m[f"pylance {v}"], 11)
        newest = formats[-1]
        line += _ratio(m[f"ours {newest}"], m.get("parquet"), 11)
        print(f"{line}   {_target(q, m[f'ours {newest}'], m.get('parquet'))} ({newest})")
    print("(ratio = lance_sql / other, of the medians; below 1 means lance_sql is faster; "
          "vs parquet and target are for the last format)")
    if args.data is None:
        shutil.rmtree(work, ignore_errors=True)


def _ms(t: tuple[float, float] | None) -> str:
    return f"{'n/a':>17}" if t is None else f"{t[0] * 1e3:9.1f} ({t[1] * 1e3:5.1f})"


def _ratio(ours: tuple[float, float], other: tuple[float, float] | None, width: int = 12) -> str:
    return f"{'n/a':>{width}}" if other is None else f"{ours[0] / other[0]:{width - 1}.2f}x"


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
