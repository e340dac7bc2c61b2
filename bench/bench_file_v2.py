"""Lance file format 2.2 benchmark: lance_sql vs pylance in one process, ratios printed.

Data, written by pylance with its defaults (file format 2.2, 1M rows per file):

* ``main``: N rows of (id int64 = row number, x float64, s utf8 "user-<9 digits>");
* ``vectors``: M rows of (id int64, vec fixed_size_list<float32, 128>).

Measured (best of --repeat, same process): full scans and ``take`` of --take random rows
through ``lance_sql.dataset(uri)`` and ``lance.dataset(uri)``; per-column scans; writing
each table as one 2.2 file with our writer and with ``lance.file.LanceFileWriter`` (time
and size). ``--fuzz-seconds`` additionally mutates small pylance 2.1/2.2 files at random
for that long and fails on any exception that is not a ``LanceError``.

    python bench/bench_file_v2.py --rows 10000000 --vector-rows 1000000 --repeat 3
    python bench/bench_file_v2.py --rows 0 --fuzz-seconds 600
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from timing import formats_line  # bench/timing.py (scripts run from bench/)

import lance_sql
from lance_sql.errors import LanceError
from lance_sql.format.datafile import BytesSource, LanceFileReader, LanceFileWriter
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.schema import LanceSchema


def main_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    digits = pa.array(rng.integers(100_000_000, 999_999_999, rows)).cast(pa.string())
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "x": pa.array(rng.random(rows)),
        "s": pc.binary_join_element_wise("user-", digits, ""),
    })  # fmt: skip


def vector_table(rows: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 128, np.float32)), 128)
    return pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "vec": vec})


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def report(rows: list[tuple[str, float, float]], unit: str = "s") -> None:
    print(f"{'measure':44} {'lance_sql':>10} {'pylance':>10} {'ratio':>7}")
    for name, ours, theirs in rows:
        ratio = ours / theirs if theirs else float("nan")
        print(f"{name:44} {ours:10.3f} {theirs:10.3f} {ratio:7.2f}")


def bench_reads(lance, uri: str, label: str, repeat: int, take: int) -> list:
    py, sql = lance.dataset(uri), lance_sql.dataset(uri)
    n = py.count_rows()
    out = [(f"{label}: full scan", best(sql.to_table, repeat), best(py.to_table, repeat))]
    got, want = sql.to_table(), py.to_table()
    assert got.equals(want), f"{label}: lance_sql and pylance disagree"
    for col in want.column_names:
        out.append((f"{label}: scan of {col}",
                    best(lambda c=col: sql.to_table(columns=[c]), repeat),
                    best(lambda c=col: py.to_table(columns=[c]), repeat)))  # fmt: skip
    rows = np.random.default_rng(7).integers(0, n, take)
    assert sql.take(rows).equals(py.take(rows)), f"{label}: take disagrees"
    out.append((f"{label}: take {take} random rows", best(lambda: sql.take(rows), repeat),
                best(lambda: py.take(rows), repeat)))  # fmt: skip
    return out


def bench_write(lance, table: pa.Table, work: Path, label: str, repeat: int) -> list:
    schema = LanceSchema.from_arrow(table.schema)
    ours_path, ref_path = work / f"{label}-ours.lance", work / f"{label}-ref.lance"

    def ours() -> None:
        with open(ours_path, "wb") as sink:
            writer = LanceFileWriter(sink, schema, version="2.2")
            for batch in table.to_batches(max_chunksize=1 << 20):
                writer.write_batch(batch)
            writer.finish()

    def theirs() -> None:
        with lance.file.LanceFileWriter(str(ref_path), table.schema, version="2.2") as writer:
            for batch in table.to_batches(max_chunksize=1 << 20):
                writer.write_batch(batch)

    t_ours, t_ref = best(ours, repeat), best(theirs, repeat)
    back = lance.file.LanceFileReader(str(ours_path)).read_all().to_table()
    assert back.equals(table), f"{label}: pylance does not read our file back"
    s_ours, s_ref = os.path.getsize(ours_path), os.path.getsize(ref_path)
    return [(f"{label}: write 2.2 file (s)", t_ours, t_ref),
            (f"{label}: file size (MB)", s_ours / 1e6, s_ref / 1e6)]  # fmt: skip


def fuzz(lance, seconds: float, work: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    table = pa.table({
        "i": pa.array(rng.integers(0, 1000, n)), "s": pa.array([f"v{i % 37}" for i in range(n)]),
        "l": pa.array([None if i % 7 == 0 else list(range(i % 5)) for i in range(n)],
                      pa.list_(pa.int32())),
        "st": pa.array([None if i % 5 == 0 else {"a": i, "b": "x" * (i % 300)} for i in range(n)]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, np.float32)), 8),
    })  # fmt: skip
    datas = []
    for version in ("2.1", "2.2"):
        path = work / f"fuzz-{version}.lance"
        with lance.file.LanceFileWriter(str(path), table.schema, version=version) as writer:
            writer.write_batch(table)
        datas.append(path.read_bytes())
    pick = random.Random(seed)
    deadline = time.monotonic() + seconds
    cases = unexpected = 0
    while time.monotonic() < deadline:
        data = bytearray(pick.choice(datas))
        lo = int(len(data) * 0.7) if pick.random() < 0.5 else 0
        for _ in range(pick.choice((1, 2, 4, 16))):
            data[pick.randrange(lo, len(data) - 40)] = pick.randrange(256)
        try:
            reader = LanceFileReader(BytesSource(bytes(data), "fuzz.lance"))
            fields = [c for f in reader.schema.fields for c in column_fields(f)]
            cmap = {f.id: i for i, f in enumerate(fields)}
            for field in reader.schema.fields:
                try:
                    reader.read([field], cmap)
                    reader.take([field], cmap, np.array([0, reader.num_rows - 1]))
                except LanceError:
                    pass
        except LanceError:
            pass
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            unexpected += 1
            print(f"unexpected {type(exc).__name__}: {exc}"[:300])
        cases += 1
    print(f"fuzz: {cases} mutated files in {seconds:.0f}s, {unexpected} unexpected errors")
    if unexpected:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--vector-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--take", type=int, default=1000)
    parser.add_argument("--fuzz-seconds", type=float, default=0.0)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    import lance  # the reference, imported here so the package never depends on it
    import lance.file

    work = Path(tempfile.mkdtemp(prefix="lance-sql-bench-v2-"))
    try:
        results: list = []
        for label, rows, make in (("main", args.rows, main_table),
                                  ("vectors", args.vector_rows, vector_table)):  # fmt: skip
            if rows <= 0:
                continue
            table = make(rows)
            uri = str(work / f"{label}.lance")
            lance.write_dataset(table, uri)  # pylance defaults: 2.2, 1M rows per file
            assert lance.dataset(uri).data_storage_version == "2.2"
            print(f"{label}: {formats_line(pylance=uri)} (our 2.2 writer measured on it too)")
            results += bench_reads(lance, uri, label, args.repeat, args.take)
            results += bench_write(lance, table, work, label, args.repeat)
            del table
        if results:
            report(results)
        if args.fuzz_seconds > 0:
            fuzz(lance, args.fuzz_seconds, work, seed=int(time.time()))
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
