"""Spark bulk writes and reads: the lance data source and write_dataset vs Spark's Parquet.

Spark local[2] writes N rows of (id int64, x float64, s string) through
``format("lance")``, through ``lance_sql.spark.write_dataset`` (mapInArrow) and as
Parquet; then reads each back with Spark (count and a full aggregation that touches
every column). Operations run in interleaved rounds after an untimed one; medians of
--repeat rounds, ratios printed. Needs Java.

    python bench/bench_spark.py --rows 10000000 --repeat 3

``--lsm`` times reads of a MemWAL table's LSM view instead: a ``--rows`` base (BTREE
index on the key; bench_lsm's columns ``id``, ``v``, ``cat``, ``s``), ``--gens`` flushed
generations of ``--gen-rows`` rows (half updates), once per region count in
``--regions`` (bucket on ``id``): ``count()``, ``toPandas()`` of ``id, v``, a filter on a
non-key column (``cat = 7``) and a key filter, each collected. ``--also NAME=MODULE:CLASS``
registers another data source class and times it side by side (e.g. an older checkout's
package copied under another name, for before/after); ``--path DIR`` keeps the tables.

    python bench/bench_spark.py --lsm --rows 2000000 --regions 8,1 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

from timing import formats_line, interleaved_medians  # bench/timing.py (scripts run from bench/)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commits", type=int, default=199,
                        help="commits in the change-feed window read through Spark")
    parser.add_argument("--lsm", action="store_true",
                        help="time reads of an LSM (MemWAL) table's view instead")
    parser.add_argument("--regions", default="8,1", help="--lsm: region counts, comma separated")
    parser.add_argument("--gens", type=int, default=3, help="--lsm: flushed generations")
    parser.add_argument("--gen-rows", type=int, default=100_000, help="--lsm: rows per generation")
    parser.add_argument("--path", default=None, help="--lsm: keep the tables here, reuse them")
    parser.add_argument("--also", action="append", default=[],
                        help="--lsm: NAME=MODULE:CLASS, another data source timed alongside")
    args = parser.parse_args()
    if args.lsm:
        _lsm_main(args)
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Python workers import the floor source from here (the JVM passes it on).
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession
    from spark_floor import in_memory_source

    from lance_sql.spark import register, write_dataset

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
        "id", "cast(id * 1.5 AS double) AS x", "concat('s', cast(id % 100000 AS string)) AS s"
    ).cache()
    df.count()
    work = tempfile.mkdtemp(prefix="lance-sql-spark-bench-")
    ds_uri, helper_uri, pq = (os.path.join(work, n) for n in ("ds.lance", "wd.lance", "pq"))

    def clean_then(path: str) -> Callable[[], None]:
        return lambda: shutil.rmtree(path, ignore_errors=True)

    # The floor of any Python data source: the same rows kept in the Python worker's
    # memory (no file, no encode or decode), exchanged with Spark as Arrow batches.
    spark.dataSource.register(in_memory_source(args.rows, os.cpu_count() or 1))
    writes = interleaved_medians({
        "parquet": (lambda: df.write.mode("overwrite").parquet(pq), clean_then(pq)),
        "data source": (lambda: df.write.format("lance").mode("overwrite").save(ds_uri),
                        clean_then(ds_uri)),
        "write_dataset": (lambda: write_dataset(df, helper_uri, mode="overwrite"),
                          clean_then(helper_uri)),
        "floor": (lambda: df.write.format("in_memory_floor").mode("append").save(), None),
    }, args.repeat)

    def count(reader: Callable[[], object]) -> Callable[[], object]:
        return lambda: reader().count()  # type: ignore[attr-defined]

    def aggregate(reader: Callable[[], object]) -> Callable[[], object]:
        return lambda: reader().selectExpr(  # type: ignore[attr-defined]
            "sum(id)", "sum(x)", "max(length(s))").collect()

    readers = {
        "parquet": lambda: spark.read.parquet(pq),
        "lance": lambda: spark.read.format("lance").load(ds_uri),
        "floor": lambda: spark.read.format("in_memory_floor").load(),
    }
    assert all(read().count() == args.rows for read in readers.values())
    reads = interleaved_medians(
        {f"{kind} {name}": (job(read), None) for kind, job in (("count", count),
                                                               ("sum", aggregate))
         for name, read in readers.items()}, args.repeat)
    rows = [
        ("write: data source", writes["data source"], writes["parquet"]),
        ("write: write_dataset", writes["write_dataset"], writes["parquet"]),
        ("read: count", reads["count lance"], reads["count parquet"]),
        ("read: sum over all columns", reads["sum lance"], reads["sum parquet"]),
        ("floor: write", writes["floor"], writes["parquet"]),
        ("floor: count", reads["count floor"], reads["count parquet"]),
        ("floor: sum over all columns", reads["sum floor"], reads["sum parquet"]),
    ]
    print(f"\n{args.rows:,} rows, {args.partitions} partitions, Spark local[2], "
          f"median of {args.repeat} interleaved rounds after one untimed")
    print(formats_line(data_source=ds_uri, write_dataset=helper_uri))
    print(f"{'operation':<28}{'lance (s)':>11}{'parquet (s)':>13}{'ratio':>8}")
    for name, ours, theirs in rows:
        print(f"{name:<28}{ours:>11.3f}{theirs:>13.3f}{ours / theirs:>7.2f}x")
    print("(ratio = lance / Spark's Parquet; below 1 means lance is faster; 'floor' rows are a "
          "Python data source that reads and writes nothing: the cost of the Python data source "
          "API. Parquet answers count(*) from its footers; a Python data source cannot, it "
          "hands every row and column to Spark.)")
    _change_feed(spark, os.path.join(work, "feed.lance"), args.commits, args.repeat)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


def _change_feed(spark: object, path: str, commits: int, repeat: int) -> None:
    """The change feed of many small commits through Spark: one task per commit (the
    ``rowsPerPartition`` option) against partitions cut by size (the default)."""
    import pyarrow as pa

    import lance_sql
    from lance_sql.table.changes.feed import table_changes

    def rows(start: int, n: int) -> pa.Table:
        return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                         "v": [f"v{i}" for i in range(start, start + n)]})

    lance_sql.write_dataset(rows(0, 100_000), path, enable_stable_row_ids=True)
    for i in range(commits):  # appends of 10 rows; every third commit updates 2% of rows
        if i % 3 == 2:
            lance_sql.dataset(path).update({"v": "'u'"}, where=f"id % 50 = {i % 50}")
        else:
            lance_sql.write_dataset(rows(1_000_000 + 10 * i, 10), path, mode="append")

    def feed(**options: object) -> object:
        reader = spark.read.format("lance").option("readChangeFeed", "true")  # type: ignore[attr-defined]
        for name, value in {"startingVersion": 2, **options}.items():
            reader = reader.option(name, str(value))
        return reader.load(path)

    per_commit, by_size = feed(rowsPerPartition=1 << 30), feed()
    counts = {per_commit.count(), by_size.count(), table_changes(path, 2).num_rows}
    assert len(counts) == 1
    times = interleaved_medians({
        "per commit": (lambda: feed(rowsPerPartition=1 << 30).count(), None),
        "by size": (lambda: feed().count(), None),
        "in process": (lambda: table_changes(path, 2), None),
    }, repeat)
    print(f"\nchange feed of {commits} commits ({counts.pop():,} change rows), Spark count(*):")
    print(f"  one partition per commit ({per_commit.rdd.getNumPartitions()}): "
          f"{times['per commit']:.3f} s")
    print(f"  partitions by size ({by_size.rdd.getNumPartitions()}, the default): "
          f"{times['by size']:.3f} s")
    print(f"  table_changes in this process, for scale: {times['in process']:.3f} s")


def _lsm_main(args: argparse.Namespace) -> None:
    """Spark reads of an LSM table's view (see the module docstring)."""
    import importlib
    import time

    import numpy as np
    from bench_lsm import SCHEMA as LSM_SCHEMA
    from bench_lsm import base_batches as lsm_base_batches
    from bench_lsm import generation_ids, rows
    from pyspark.sql import SparkSession

    import lance_sql
    from lance_sql.format.region_spec import RegionSpec
    from lance_sql.memwal.api import MemWal
    from lance_sql.spark import register

    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.path.dirname(here), os.environ.get("PYTHONPATH")) if p)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    formats = ["lance"]
    for extra in args.also:
        name, _, target = extra.partition("=")
        module, _, cls = target.partition(":")
        spark.dataSource.register(getattr(importlib.import_module(module), cls))
        formats.append(name)
    root = args.path or tempfile.mkdtemp(prefix="lance-sql-spark-lsm-")
    rng = np.random.default_rng(1)
    gens, new_from = [], args.rows
    for _ in range(args.gens):
        gens.append(generation_ids(rng, args.rows, args.gen_rows, new_from))
        new_from += args.gen_rows
    key = int(gens[0][0])  # a key updated in the first generation
    for regions in (int(r) for r in args.regions.split(",")):
        path = os.path.join(root, f"lsm_{args.rows}_{regions}")
        if not os.path.isdir(os.path.join(path, "_versions")):
            start = time.perf_counter()
            lance_sql.write_dataset(lsm_base_batches(args.rows), path, schema=LSM_SCHEMA)
            lance_sql.dataset(path).create_scalar_index("id", "BTREE")
            mw = MemWal.initialize(lance_sql.dataset(path), RegionSpec.bucket("id", regions),
                                   durable_write=False, max_wal_flush_interval_ms=3_600_000,
                                   max_memtable_rows=10**9)
            with mw.writer() as writer:
                for g, ids in enumerate(gens, start=1):
                    writer.put(rows(ids, g))
                    writer.flush_memtable()
            print(f"built {path} in {time.perf_counter() - start:.1f} s")
        want = MemWal(lance_sql.dataset(path)).scanner().count_rows()

        def load(fmt: str, path: str = path) -> object:
            if fmt == "base only":  # the plain base table, for scale
                return spark.read.format("lance").option("baseOnly", "true").load(path)
            return spark.read.format(fmt).load(path)

        jobs = {
            "count()": lambda df: df.count(),
            "toPandas(id, v)": lambda df: df.select("id", "v").toPandas(),
            "cat = 7 collect": lambda df: df.filter("cat = 7").collect(),
            f"id = {key} collect": lambda df: df.filter(f"id = {key}").collect(),
        }
        counts = {fmt: load(fmt).count() for fmt in formats}  # type: ignore[attr-defined]
        assert counts["lance"] == want, counts
        if set(counts.values()) != {want}:
            print(f"rows counted (the view has {want:,}): {counts}")
        timed = [*formats, "base only"]
        times = interleaved_medians({
            f"{job} {fmt}": ((lambda j=fn, f=fmt: j(load(f))), None)
            for job, fn in jobs.items() for fmt in timed}, args.repeat)
        parts = load("lance").rdd.getNumPartitions()  # type: ignore[attr-defined]
        print(f"\nLSM view: {args.rows:,}-row base, {regions} region(s), {args.gens} generations "
              f"of {args.gen_rows:,} rows ({want:,} rows in the view; {parts} partitions), "
              f"Spark local[2], median of {args.repeat} interleaved rounds after one untimed")
        print(f"{'operation':<24}" + "".join(f"{f + ' (s)':>16}" for f in timed)
              + ("" if len(formats) < 2 else f"{'lance/' + formats[1]:>18}"))
        for job in jobs:
            line = f"{job:<24}" + "".join(f"{times[f'{job} {f}']:>16.3f}" for f in timed)
            if len(formats) > 1:
                line += f"{times[f'{job} lance'] / times[f'{job} {formats[1]}']:>17.2f}x"
            print(line)
        print("('base only': the base table alone through baseOnly=true, not the view)")
    spark.stop()
    if args.path is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
