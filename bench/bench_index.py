"""BTREE index benchmark: lance_sql vs pylance on twin tables, one process.

Two tables with the same rows (``id`` int64 shuffled, ``s`` utf8 keys, ``x`` float64),
one written by each library, 1M rows per fragment. For the int64 key ``id`` and the string
key ``s``:

* build — ``create_scalar_index(key, "BTREE")`` (median of --build-repeat builds, each
  with replace=True);
* point — ``to_table(filter="key = k")`` through the Python API (a different k each
  run, so page caches do not make it free);
* sql — ``SELECT * FROM t WHERE key = k`` through ``lance_sql.connect`` (lance_sql only);
* in100 — ``key IN (100 keys)``;
* range — a range selecting 0.1% of the rows.

Lookups are medians of --repeat runs after one warm-up, the libraries interleaved run by
run; the last column is lance_sql / pylance (lower is better). Index memory: the page
bounds lance_sql keeps per open index, and the page cache after the runs.

    python bench/bench_index.py --rows 10000000 --repeat 30

``--data DIR`` keeps the tables in DIR and reuses them when they are there (their row count
must match --rows); with ``--build-repeat 0`` the indexes already built there are reused too.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from timing import formats_line  # bench/timing.py (scripts run from bench/)

import lance_sql
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.index.planner import btree_indices


def make_table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.int64)
    return pa.table({
        "id": ids,
        "s": pa.array(np.char.add("key-", (ids * 7919 % rows).astype(str)).astype(object)),
        "x": rng.random(rows),
    })


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _interleaved(ops: dict[str, Callable[[int], object]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in ops}
    for round_ in range(repeat + 1):
        for name, fn in ops.items():
            start = time.perf_counter()
            fn(round_)
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: _median_ms(t) for name, t in times.items()}


def _bench_key(key: str, data: pa.Table, ours_uri: Path, ref_uri: Path,
               session: lance_sql.LanceSession, args: argparse.Namespace) -> None:
    """Build, then time the lookups of one key column; prints one line per operation."""
    import lance

    rows = data.num_rows
    ours, ref = lance_sql.dataset(ours_uri), lance.dataset(str(ref_uri))
    build: dict[str, list[float]] = {"ours": [], "ref": []}
    if not args.build_repeat and not (
            any(i.name == f"{key}_idx" for i in btree_indices(ours.manifest))
            and any(i["name"] == f"{key}_idx" for i in ref.list_indices())):
        ours.create_scalar_index(key, "BTREE", replace=True)
        ref.create_scalar_index(key, "BTREE", replace=True)
    for _ in range(args.build_repeat):
        start = time.perf_counter()
        ours.create_scalar_index(key, "BTREE", replace=True)
        build["ours"].append(time.perf_counter() - start)
        start = time.perf_counter()
        ref.create_scalar_index(key, "BTREE", replace=True)
        build["ref"].append(time.perf_counter() - start)
    ours, ref = lance_sql.dataset(ours_uri), lance.dataset(str(ref_uri))
    if args.build_repeat:
        b_ours, b_ref = _median_ms(build["ours"]), _median_ms(build["ref"])
        print(f"{key:<4} {'build':<10} {b_ours:>13.1f} {b_ref:>11.1f} {b_ours / b_ref:>6.2f}")
    rng = np.random.default_rng(1)
    ids = data.column("id").to_numpy()
    strings = data.column("s").to_pylist()
    picks = rng.integers(0, rows, size=args.repeat + 1)

    def lit(i: int) -> str:
        return str(int(ids[i])) if key == "id" else f"'{strings[i]}'"

    in_filter = f"{key} IN ({', '.join(lit(int(i)) for i in rng.integers(0, rows, 100))})"
    lo, width = int(rows * 0.3), max(1, rows // 1000)
    if key == "id":
        range_filter = f"id >= {lo} AND id < {lo + width}"
    else:
        ordered = sorted(strings[:: max(1, rows // 100_000)])
        a = ordered[len(ordered) // 3]
        b = ordered[len(ordered) // 3 + max(1, len(ordered) // 1000)]
        range_filter = f"s >= '{a}' AND s < '{b}'"
    filters = {"point": lambda r: f"{key} = {lit(picks[r])}",
               "in100": lambda r: in_filter, "range": lambda r: range_filter}
    for name, flt in filters.items():
        got, want = ours.to_table(filter=flt(0)), ref.to_table(filter=flt(0))
        assert got.num_rows == want.num_rows, (name, got.num_rows, want.num_rows)
        res = _interleaved({"ours": lambda r, f=flt: ours.to_table(filter=f(r)),
                            "ref": lambda r, f=flt: ref.to_table(filter=f(r))}, args.repeat)
        print(f"{key:<4} {name:<10} {res['ours']:>13.2f} {res['ref']:>11.2f} "
              f"{res['ours'] / res['ref']:>6.2f}")
    sql = _interleaved({"sql": lambda r: session.sql(
        f"SELECT * FROM t WHERE {key} = {lit(picks[r])}").to_arrow_table()}, args.repeat)
    print(f"{key:<4} {'sql point':<10} {sql['sql']:>13.2f} {'-':>11} {'-':>6}")
    [meta] = [i for i in btree_indices(ours.manifest) if i.name == f"{key}_idx"]
    opened = btree_mod.BTreeIndex.open(ours.store, ours.manifest, meta,
                                       data.schema.field(key).type)
    pages = lance_sql.default_runtime().stats()["index_pages"]
    print(f"{key:<4} memory: page bounds {opened.nbytes() / 2**20:.2f} MiB per open index; "
          f"page cache {pages.bytes / 2**20:.1f} MiB (bounded at {pages.max_bytes >> 20} MiB)")


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--build-repeat", type=int, default=3,
                        help="builds to time; 0 reuses the indexes found in --data")
    parser.add_argument("--data", type=Path, help="keep (and reuse) the tables in this directory")
    parser.add_argument("--keys", default="id,s", help="key columns to measure, comma separated")
    args = parser.parse_args()
    import lance

    rows = args.rows
    work = args.data or Path(tempfile.mkdtemp(prefix="bench_index_"))
    try:
        data = make_table(rows)
        ours_uri, ref_uri = work / "ours" / "t.lance", work / "ref.lance"
        if args.data is None or not (ours_uri.exists() and ref_uri.exists()):
            shutil.rmtree(ours_uri, ignore_errors=True)
            shutil.rmtree(ref_uri, ignore_errors=True)
            lance_sql.write_dataset(data, ours_uri, max_rows_per_file=1_000_000)
            lance.write_dataset(data, str(ref_uri), max_rows_per_file=1_000_000)
        assert lance_sql.dataset(ours_uri).count_rows() == rows, "--data holds another size"
        session = lance_sql.connect(work / "ours")
        print(f"rows={rows:,} repeat={args.repeat}")
        print(formats_line(lance_sql=ours_uri, pylance=ref_uri))
        print(f"{'key':<4} {'operation':<10} {'lance_sql ms':>13} {'pylance ms':>11} "
              f"{'ratio':>6}")
        for key in args.keys.split(","):
            _bench_key(key.strip(), data, ours_uri, ref_uri, session, args)
    finally:
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
