"""Costs that grow with a table's version count: lance_sql vs pylance in one process.

Each library builds its own table of N versions (one small append per version, so also N
fragments), then both run each case interleaved, one run of each per round, after an
untimed warm-up round. Printed: median wall and CPU ms (CPU counts every thread of the
process) and the ratio lance_sql / pylance (below 1: lance_sql is faster).

* ``checkout_version(N/2)`` and ``dataset(uri, version=N/2)``: time travel by number;
* ``count_rows()`` at the latest version (N fragments) and after ``checkout_version``;
* ``versions()``;
* ``cleanup_old_versions`` of a fresh copy of a table of C versions;
* A appends of a small batch to a fresh copy of the N-version table.

    PYTHONPATH=. python bench/bench_versions.py     # quick: N=200, C=50, A=20
    PYTHONPATH=. python bench/bench_versions.py --versions 1000 --cleanup-versions 100 --appends 100
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

import lance_sql

Op = tuple[Callable[[], object], Callable[[], None] | None]


def _batch(start: int, rows: int) -> pa.Table:
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table({"id": ids, "x": pa.array([float(i) for i in range(rows)])})


def _build(lib: object, uri: Path, versions: int, rows: int) -> None:
    """A fresh table of ``versions`` versions, one append of ``rows`` rows each."""
    shutil.rmtree(uri, ignore_errors=True)
    for v in range(versions):
        lib.write_dataset(_batch(v * rows, rows), str(uri),  # type: ignore[attr-defined]
                          mode="create" if v == 0 else "append")


def _fresh_copy(src: Path, dst: Path) -> Callable[[], None]:
    def setup() -> None:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    return setup


def _run(name: str, ops: dict[str, Op], repeat: int) -> None:
    """Interleave the contenders: one untimed round, then ``repeat`` timed ones."""
    wall: dict[str, list[float]] = {k: [] for k in ops}
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    for round_ in range(repeat + 1):
        for key, (fn, setup) in ops.items():
            if setup is not None:
                setup()
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if round_:
                wall[key].append(dt)
                cpu[key].append(dc)
    w = {k: statistics.median(v) * 1e3 for k, v in wall.items()}
    c = {k: statistics.median(v) * 1e3 for k, v in cpu.items()}
    print(f"| {name} | {w['ls']:.3f} | {w['pl']:.3f} | {w['ls'] / w['pl']:.2f}x "
          f"| {c['ls']:.3f} | {c['pl']:.3f} | {c['ls'] / max(c['pl'], 1e-9):.2f}x |",
          flush=True)


def main() -> None:
    import lance

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=200, help="N")
    parser.add_argument("--cleanup-versions", type=int, default=50, help="C")
    parser.add_argument("--appends", type=int, default=20, help="A")
    parser.add_argument("--rows", type=int, default=100, help="rows per append")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--data", help="keep the tables here and reuse them")
    args = parser.parse_args()
    libs = {"ls": lance_sql, "pl": lance}
    work = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="bench-versions-"))
    work.mkdir(parents=True, exist_ok=True)
    n, c = args.versions, args.cleanup_versions
    big = {k: work / f"v{n}_{k}.lance" for k in libs}
    small = {k: work / f"v{c}_{k}.lance" for k in libs}
    tmp = {k: work / f"tmp_{k}.lance" for k in libs}
    for k, lib in libs.items():
        for uri, count in ((big[k], n), (small[k], c)):
            if not uri.exists():
                _build(lib, uri, count, args.rows)
    print(f"N={n} versions, C={c}, A={args.appends} appends of {args.rows} rows; "
          f"medians of {args.repeat}; data {work}")
    print("| case | ls ms | pl ms | ratio | CPU ls ms | CPU pl ms | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    half = n // 2
    opened = {k: lib.dataset(str(big[k])) for k, lib in libs.items()}
    for k in libs:  # both see the same rows at the same version
        assert opened[k].checkout_version(half).count_rows() == half * args.rows
    _run(f"checkout_version({half})",
         {k: ((lambda d=d: d.checkout_version(half)), None) for k, d in opened.items()},
         args.repeat)
    _run(f"dataset(uri, version={half})",
         {k: ((lambda k=k, lib=lib: lib.dataset(str(big[k]), version=half)), None)
          for k, lib in libs.items()}, args.repeat)
    _run(f"checkout_version({half}).count_rows()",
         {k: ((lambda d=d: d.checkout_version(half).count_rows()), None)
          for k, d in opened.items()}, args.repeat)
    _run(f"count_rows() latest ({n} fragments)",
         {k: (d.count_rows, None) for k, d in opened.items()}, args.repeat)
    _run(f"versions() of {n}", {k: (d.versions, None) for k, d in opened.items()},
         max(3, args.repeat // 2))

    def cleanup(k: str) -> None:
        libs[k].dataset(str(tmp[k])).cleanup_old_versions(  # type: ignore[attr-defined]
            older_than=timedelta(0))
    _run(f"cleanup_old_versions of {c} versions",
         {k: ((lambda k=k: cleanup(k)), _fresh_copy(small[k], tmp[k])) for k in libs},
         args.repeat)
    for k, lib in libs.items():
        assert len(lib.dataset(str(tmp[k])).versions()) == 1

    batches = [_batch(10**9 + i * args.rows, args.rows) for i in range(args.appends)]

    def appends(k: str) -> None:
        for b in batches:
            libs[k].write_dataset(b, str(tmp[k]), mode="append")  # type: ignore[attr-defined]
    _run(f"{args.appends} appends to {n} versions",
         {k: ((lambda k=k: appends(k)), _fresh_copy(big[k], tmp[k])) for k in libs},
         max(3, args.repeat // 2))
    if not args.data:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
