"""Candidate default compressions of 2.2 string columns, side by side with pylance.

For each column of the string corpus (``bench_strings.corpus``) and each candidate
default, one 2.2 data file is written by ``lance_sql.write_dataset`` and one by pylance;
printed per candidate: file size, write time, full-scan time (``to_table``) and the time
of a 100-random-row ``take`` (what index, IN-list and LSM lookups do), each as a ratio
to pylance (every library on its own file) and, for scans and takes, to the current
default (``now``). Candidates are the writer's default knobs
(``encode_miniblock.DEFAULT_SCHEME`` / ``DEFAULT_LEVEL`` / ``DEFAULT_CHUNK_TARGET``) or a
field-metadata choice (``fsst``). Writes, scans and takes run in rounds, one of each
candidate per round (the machine may be shared), and medians are printed; CPU time of
our writes is printed too. Every file is read back by pylance and compared row for row.

    python bench/bench_string_defaults.py --rows 1000000 --repeat 5
    python bench/bench_string_defaults.py --columns names,urls --candidates now,lz4hc2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
from bench_strings import corpus  # scripts run from bench/

import lance_sql
from lance_sql.format.datafile import encode_miniblock as em

KB = 1024
# name -> (scheme, level, chunk target, field metadata)
CANDIDATES: dict[str, tuple[int, int | None, int, dict[str, str] | None]] = {
    "now": (em.LZ4, None, 16 * KB, None),
    "lz4hc2": (em.LZ4, 2, 64 * KB, None),
    "lz4hc3": (em.LZ4, 3, 64 * KB, None),
    "lz4_256k": (em.LZ4, None, 256 * KB, None),
    "lz4_64k": (em.LZ4, None, 64 * KB, None),
    "lz4_32k": (em.LZ4, None, 32 * KB, None),  # the default before
    "lz4_8k": (em.LZ4, None, 8 * KB, None),
    "lz4_4k": (em.LZ4, None, 4 * KB, None),
    "zstd1_32k": (em.ZSTD, 1, 32 * KB, None),
    "zstd3_64k": (em.ZSTD, 3, 64 * KB, None),
    "fsst": (em.LZ4, None, 64 * KB, {"lance-encoding:compression": "fsst"}),
}


@contextmanager
def knobs(scheme: int, level: int | None, target: int) -> Iterator[None]:
    """The writer's default string compression set to a candidate, then restored."""
    saved = em.DEFAULT_SCHEME, em.DEFAULT_LEVEL, em.DEFAULT_CHUNK_TARGET
    em.DEFAULT_SCHEME, em.DEFAULT_LEVEL, em.DEFAULT_CHUNK_TARGET = scheme, level, target
    try:
        yield
    finally:
        em.DEFAULT_SCHEME, em.DEFAULT_LEVEL, em.DEFAULT_CHUNK_TARGET = saved


def _size(uri: Path) -> int:
    return sum(p.stat().st_size for p in (uri / "data").glob("*.lance"))


def _rounds(ops: dict[str, Callable[[int], object]], repeat: int
            ) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    """Median wall and CPU seconds of each op (called with the round number), in rounds;
    round 0 is a warm-up. Each round starts one op further along: the op that follows
    pylance's (whose run leaves caches and the memory pool to the next) is not always
    the same one (it was ``now``, up to ~1.5x slower on files identical to the others')."""
    wall: dict[str, list[float]] = {k: [] for k in ops}
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    order = list(ops.items())
    for r in range(repeat + 1):
        at = r % len(order)
        for name, op in order[at:] + order[:at]:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            op(r)
            cpu1, wall1 = time.process_time(), time.perf_counter()
            if r:
                wall[name].append(wall1 - wall0)
                cpu[name].append(cpu1 - cpu0)
    return ({k: statistics.median(v) for k, v in wall.items()},
            {k: statistics.median(v) for k, v in cpu.items()})  # fmt: skip


def bench_column(lance, column: str, arr: pa.Array, picked: dict, work: Path,
                 repeat: int) -> None:
    """Write, check, scan and take one corpus column with every candidate and pylance."""
    tables = {k: pa.table({"s": arr}, schema=pa.schema([pa.field(
        "s", pa.string(), metadata=md)])) for k, (_, _, _, md) in picked.items()}
    plain = pa.table({"s": arr})
    uris = {k: work / f"{column}-{k}.lance" for k in [*picked, "pylance"]}

    def write(key: str) -> Callable[[int], object]:
        def op(_: int) -> None:
            shutil.rmtree(uris[key], ignore_errors=True)
            if key == "pylance":
                lance.write_dataset(plain, str(uris[key]))
                return
            scheme, level, target, _md = picked[key]
            with knobs(scheme, level, target):
                lance_sql.write_dataset(tables[key], uris[key])
        return op

    w_wall, w_cpu = _rounds({k: write(k) for k in uris}, repeat)
    ds = {k: lance.dataset(str(u)) if k == "pylance" else lance_sql.dataset(u)
          for k, u in uris.items()}  # fmt: skip
    for k in picked:  # pylance reads every row of each of our files, and so do we
        assert lance.dataset(str(uris[k])).to_table().column("s").equals(plain.column("s")), k
        assert ds[k].to_table().column("s").equals(plain.column("s")), k
    s_wall, s_cpu = _rounds({k: (lambda _, d=d: d.to_table()) for k, d in ds.items()}, repeat)

    def take(key: str) -> Callable[[int], object]:
        def op(r: int) -> None:
            rows = np.sort(np.random.default_rng(r).choice(len(arr), 100, replace=False))
            got = ds[key].take(rows.tolist() if key == "pylance" else rows)
            if r == 0:
                assert got.column("s").equals(pa.chunked_array([arr.take(pa.array(rows))])), key
        return op

    t_wall, t_cpu = _rounds({k: take(k) for k in uris}, 3 * repeat)
    sizes = {k: _size(u) for k, u in uris.items()}
    ref = "pylance"
    print(f"{column}: pylance {sizes[ref] / 1e6:.2f} MB, write {w_wall[ref] * 1e3:.0f} "
          f"[{w_cpu[ref] * 1e3:.0f}] ms, scan {s_wall[ref] * 1e3:.1f} [{s_cpu[ref] * 1e3:.1f}] "
          f"ms, take {t_wall[ref] * 1e3:.2f} [{t_cpu[ref] * 1e3:.2f}] ms")
    for k in picked:
        print(f"  {k:<10}{sizes[k] / 1e6:7.2f} MB {sizes[k] / sizes[ref]:4.2f}x"
              f" | write {w_wall[k] * 1e3:5.0f} [{w_cpu[k] * 1e3:4.0f}] ms"
              f" {w_wall[k] / w_wall[ref]:4.2f}x [{w_cpu[k] / w_cpu[ref]:4.2f}x]"
              f" | scan {s_wall[k] * 1e3:5.1f} [{s_cpu[k] * 1e3:5.1f}] ms"
              f" {s_wall[k] / s_wall[ref]:4.2f}x, now {s_wall[k] / s_wall['now']:4.2f}x"
              f" [{s_cpu[k] / s_cpu['now']:4.2f}x]"
              f" | take {t_wall[k] * 1e3:5.2f} [{t_cpu[k] * 1e3:5.2f}] ms"
              f" {t_wall[k] / t_wall[ref]:4.2f}x, now {t_wall[k] / t_wall['now']:4.2f}x"
              f" [{t_cpu[k] / t_cpu['now']:4.2f}x]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--columns", default="user_ids,names,urls,json,categories")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    args = parser.parse_args()
    import lance  # the reference, imported here so the package never depends on it

    picked = {k: CANDIDATES[k] for k in args.candidates.split(",")}
    if "now" not in picked:
        picked = {"now": CANDIDATES["now"], **picked}
    work = Path(tempfile.mkdtemp(prefix="lance-sql-bench-string-defaults-"))
    data = corpus(args.rows)
    try:
        print(f"{args.rows:,} rows a column; medians of {args.repeat} rounds: wall [CPU of the "
              "process, all threads]; x = ratio to pylance, 'now' = ratio to the current default")
        for column in args.columns.split(","):
            bench_column(lance, column, data[column], picked, work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
