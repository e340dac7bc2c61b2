"""MemWAL region writer: lance_sql's RegionWriter vs pylance 14.0.2's ShardWriter, same run.

Local filesystem, a table with an int64 primary key, a float64 and a string column.

* durable put — latency of ``put`` of a 1000-row batch in durable mode (each put waits
  for its WAL entry); median and p90. lance_sql twice: the default local store (no
  fsync, as every lance_sql write) and ``LocalStore(fsync=True)``.
* non-durable put — rows/s of ``put`` with background WAL flushes, including the final
  flush (``close``).
* MemTable flush — a 100k-row MemTable (durable puts, so the WAL is written) flushed to a
  generation: lance_sql ``flush_memtable()``; pylance ``close()`` (which flushes it).
* merge (``--merge``) — a ``--gen-rows`` generation (half updates of existing keys, half
  new keys) merged into a ``--base-rows`` table: lance_sql's merger (``mw.merge()``:
  reads the generation, keeps each key's newest row, one merge_insert that also records
  the progress) vs pylance's ``merge_insert(...).when_matched_update_all()
  .when_not_matched_insert_all().execute(rows)`` of the same rows on a twin copy of the
  table.
* memory (``--memory``, lance_sql only) — peak RSS growth of a fresh process putting
  ``--memory-rows`` rows non-durably with ``max_unflushed_bytes`` = 64 MiB and
  ``max_memtable_bytes`` = 32 MiB, against those bounds.

    python bench/bench_memwal.py --puts 40 --batches 200 [--memory]
    python bench/bench_memwal.py --merge-only --base-rows 10000000 --gen-rows 100000 \
        [--merge-repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from timing import formats_line  # bench/timing.py (scripts run from bench/)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance_sql
from lance_sql.io.local import LocalStore
from lance_sql.memwal.writer import RegionWriter, WriterConfig

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("s", pa.string())])


def batch(i: int, n: int = 1000) -> pa.Table:
    ids = pa.array(range(i * n, (i + 1) * n), pa.int64())
    return pa.table({"id": ids, "v": pa.array([float(x) for x in range(n)]),
                     "s": pa.array([f"value-{x}" for x in range(i * n, (i + 1) * n)])},
                    schema=SCHEMA)


def ours(root: str, *, fsync: bool = False, **config: object) -> RegionWriter:
    ds = lance_sql.write_dataset(batch(0, 1), root)
    store = LocalStore(root, fsync=fsync)
    return RegionWriter(store, uuid.uuid4(), ds.manifest.schema,
                        data_format=ds.manifest.data_format,
                        config=WriterConfig(**config))  # type: ignore[arg-type]


def theirs(root: str, **config: object):
    import lance

    lance.write_dataset(batch(0, 1), root).initialize_mem_wal()
    return lance.dataset(root).mem_wal_writer(str(uuid.uuid4()), **config)


def put_latencies(writer, batches: list[pa.Table]) -> list[float]:
    times = []
    for b in batches:
        start = time.perf_counter()
        writer.put(b)
        times.append(time.perf_counter() - start)
    return times


_MEMORY_CHILD = """
import resource, shutil, sys, tempfile
def status_kib(name):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
def rss_baseline_kib():
    # Linux: the peak starts again from the current RSS (clear_refs 5), which is the
    # baseline. ru_maxrss is no good here: it also counts the parent's resident memory
    # at the spawn (exec takes over the maximum of the vfork-shared memory), which hides
    # the growth measured from a big parent
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return status_kib("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def peak_rss_kib():
    try:
        return status_kib("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import numpy as np, pyarrow as pa
sys.path.insert(0, {bench!r})
from bench_memwal import batch, ours
root = tempfile.mkdtemp(prefix="bench_memwal_rss_")
batches = [batch(i) for i in range(1, 51)]  # reused: the input is not what we measure
w = ours(root + "/t", durable_write=False, max_unflushed_bytes={unflushed} << 20,
         max_memtable_bytes={memtable} << 20, max_memtable_rows=10**9)
before = rss_baseline_kib()
for i in range({n} // 1000):
    ids = pa.array(np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64))
    w.put(batches[i % 50].set_column(0, "id", ids))
w.close()
after = peak_rss_kib()
shutil.rmtree(root, ignore_errors=True)
print((after - before) / 1024, pa.default_memory_pool().max_memory() / 2**20)
"""
MEMORY_UNFLUSHED_MIB = 64
MEMORY_MEMTABLE_MIB = 32


def memory_peak(rows: int) -> tuple[float, float]:
    """(peak RSS growth, peak bytes of Arrow's default pool), in MiB, of a child process
    writing ``rows`` rows."""
    code = _MEMORY_CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), n=rows,
                                unflushed=MEMORY_UNFLUSHED_MIB, memtable=MEMORY_MEMTABLE_MIB)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    rss, pool = out.stdout.strip().splitlines()[-1].split()
    return float(rss), float(pool)


def base_table(n: int, chunk: int = 1_000_000) -> pa.RecordBatchReader:
    """``n`` rows of the bench schema, made a chunk at a time (ids 0..n-1)."""
    def chunks():
        for start in range(0, n, chunk):
            ids = np.arange(start, min(n, start + chunk), dtype=np.int64)
            yield pa.record_batch([pa.array(ids), pa.array(ids * 0.5),
                                   pc.binary_join_element_wise("value-", pc.cast(
                                       pa.array(ids), pa.string()), "")], schema=SCHEMA)
    return pa.RecordBatchReader.from_batches(SCHEMA, chunks())


def merge_bench(tmp: str, base_rows: int, gen_rows: int, repeat: int = 1
                ) -> dict[str, float]:
    """Seconds to merge one generation: lance_sql's merger vs pylance's merge_insert,
    median of ``repeat`` interleaved runs (each on its own copy of the table)."""
    import lance

    root = os.path.join(tmp, "merge_setup")
    start = time.perf_counter()
    ds = lance_sql.write_dataset(base_table(base_rows), root, max_rows_per_file=1 << 20)
    mw = ds.initialize_mem_wal()
    rng = np.random.default_rng(7)
    updated = rng.choice(base_rows, gen_rows // 2, replace=False).astype(np.int64)
    new = np.arange(base_rows, base_rows + gen_rows - len(updated), dtype=np.int64)
    ids = pa.array(np.concatenate([updated, new]))
    rows = pa.table({"id": ids, "v": pc.multiply(pc.cast(ids, pa.float64()), -1.0),
                     "s": pc.binary_join_element_wise("new-", pc.cast(ids, pa.string()), "")},
                    schema=SCHEMA)
    with mw.writer(region=uuid.uuid4(), durable_write=False) as w:
        for piece in rows.to_batches(max_chunksize=10_000):
            w.put(piece)
        w.flush_memtable()
    print(f"(setup: {base_rows} base rows, a {gen_rows}-row generation, "
          f"{time.perf_counter() - start:.1f} s)", flush=True)
    ours_s, theirs_s = [], []
    for i in range(repeat):
        # the same files, MemWAL and all, for each run of each library
        mine, twin = os.path.join(tmp, f"merge_ours_{i}"), os.path.join(tmp, f"merge_theirs_{i}")
        shutil.copytree(root, mine)
        shutil.copytree(root, twin)
        start = time.perf_counter()
        (result,) = lance_sql.dataset(mine).mem_wal.merge()
        ours_s.append(time.perf_counter() - start)
        assert result.inserted + result.updated == gen_rows, result
        theirs_ds = lance.dataset(twin)
        start = time.perf_counter()
        stats = (theirs_ds.merge_insert("id").when_matched_update_all()
                 .when_not_matched_insert_all().execute(rows))
        theirs_s.append(time.perf_counter() - start)
        assert stats["num_inserted_rows"] + stats["num_updated_rows"] == gen_rows, stats
        assert lance.dataset(twin).count_rows() == lance_sql.dataset(mine).count_rows()
        shutil.rmtree(mine)
        shutil.rmtree(twin)
    print(f"(merge runs, s: lance_sql {[round(t, 3) for t in ours_s]}, "
          f"pylance {[round(t, 3) for t in theirs_s]})", flush=True)
    return {f"merge s ({gen_rows} into {base_rows}) lance_sql": statistics.median(ours_s),
            f"merge s ({gen_rows} into {base_rows}) pylance": statistics.median(theirs_s)}


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=40, help="durable puts timed")
    parser.add_argument("--batches", type=int, default=200, help="non-durable 1000-row puts")
    parser.add_argument("--flush-rows", type=int, default=100_000)
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS")
    parser.add_argument("--memory-rows", type=int, default=2_000_000)
    parser.add_argument("--merge", action="store_true", help="also time a generation merge")
    parser.add_argument("--merge-only", action="store_true", help="only the merge")
    parser.add_argument("--base-rows", type=int, default=10_000_000,
                        help="rows of the base table the generation merges into")
    parser.add_argument("--gen-rows", type=int, default=100_000,
                        help="rows of the merged generation (half updates, half new)")
    parser.add_argument("--merge-repeat", type=int, default=3,
                        help="interleaved merge runs (medians reported)")
    args = parser.parse_args()
    if args.merge_only:
        tmp = tempfile.mkdtemp(prefix="bench_memwal_")
        try:
            timings = merge_bench(tmp, args.base_rows, args.gen_rows, args.merge_repeat)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for key, value in timings.items():
            print(f"{key:45s} {value:12.2f}")
        ours_s, theirs_s = timings.values()
        print(f"ratio lance_sql/pylance merge: {ours_s / theirs_s:.2f}")
        return
    with tempfile.TemporaryDirectory() as tmp:  # the base tables' format (both libraries)
        root_ours, root_ref = os.path.join(tmp, "ours"), os.path.join(tmp, "ref")
        lance_sql.write_dataset(batch(0, 1), root_ours)
        __import__("lance").write_dataset(batch(0, 1), root_ref)
        print(formats_line(lance_sql=root_ours, pylance=root_ref))
    if args.memory:
        growth, pool = memory_peak(args.memory_rows)
        target = MEMORY_UNFLUSHED_MIB + MEMORY_MEMTABLE_MIB
        print(f"peak RSS growth writing {args.memory_rows} rows non-durably: {growth:.0f} MiB "
              f"(Arrow pool peak {pool:.0f} MiB); target max_unflushed_bytes "
              f"{MEMORY_UNFLUSHED_MIB} MiB + one MemTable {MEMORY_MEMTABLE_MIB} MiB = "
              f"{target} MiB: {'met' if growth < target else 'NOT met'}")
    tmp = tempfile.mkdtemp(prefix="bench_memwal_")
    batches = [batch(i) for i in range(1, max(args.puts, args.batches) + 1)]
    results: dict[str, float] = {}
    try:
        # ---- durable put latency
        for name, make in (("lance_sql", lambda r: ours(r, max_memtable_rows=10**7)),
                           ("lance_sql+fsync", lambda r: ours(r, fsync=True,
                                                              max_memtable_rows=10**7)),
                           ("pylance", lambda r: theirs(r, durable_write=True,
                                                        max_memtable_rows=10**7))):
            root = os.path.join(tmp, f"durable_{name}")
            w = make(root)
            put_latencies(w, batches[:3])  # warm up
            lat = put_latencies(w, batches[3:args.puts + 3])
            w.close()
            lat.sort()
            results[f"durable put ms median {name}"] = 1000 * statistics.median(lat)
            results[f"durable put ms p90 {name}"] = 1000 * lat[int(0.9 * (len(lat) - 1))]
        # ---- non-durable throughput
        for name, make in (("lance_sql", lambda r: ours(r, durable_write=False,
                                                        max_memtable_rows=10**7)),
                           ("pylance", lambda r: theirs(r, durable_write=False,
                                                        max_memtable_rows=10**7))):
            root = os.path.join(tmp, f"fast_{name}")
            w = make(root)
            start = time.perf_counter()
            for b in batches[:args.batches]:
                w.put(b)
            if name == "lance_sql":
                w.flush()
            else:
                pass  # pylance's close below flushes; both closes are timed
            w.close()
            elapsed = time.perf_counter() - start
            results[f"non-durable rows/s {name}"] = args.batches * 1000 / elapsed
        # ---- 100k-row MemTable flush
        n = args.flush_rows // 1000
        for name, make in (("lance_sql", lambda r: ours(r, max_memtable_rows=10**7)),
                           ("pylance", lambda r: theirs(r, durable_write=True,
                                                        max_memtable_rows=10**7))):
            root = os.path.join(tmp, f"flush_{name}")
            w = make(root)
            for i in range(n):
                w.put(batch(1000 + i))
            start = time.perf_counter()
            if name == "lance_sql":
                w.flush_memtable()
            w.close()
            results[f"memtable flush s ({args.flush_rows} rows) {name}"] = (
                time.perf_counter() - start)
        if args.merge:
            results.update(merge_bench(tmp, args.base_rows, args.gen_rows,
                                       args.merge_repeat))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for key, value in results.items():
        print(f"{key:45s} {value:12.2f}")
    for metric in ("durable put ms median", "non-durable rows/s",
                   f"memtable flush s ({args.flush_rows} rows)"):
        print(f"ratio lance_sql/pylance {metric}: "
              f"{results[f'{metric} lance_sql'] / results[f'{metric} pylance']:.2f}")
    if args.merge:
        metric = f"merge s ({args.gen_rows} into {args.base_rows})"
        print(f"ratio lance_sql/pylance {metric}: "
              f"{results[f'{metric} lance_sql'] / results[f'{metric} pylance']:.2f}")


if __name__ == "__main__":
    main()
