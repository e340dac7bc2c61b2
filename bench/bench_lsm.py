"""LSM reads over a MemWAL table: lance_sql's LSM view vs its plain base scan and pylance
14.0.2's LsmScanner / LsmPointLookupPlanner, same run, same data.

Setup (local filesystem): a base table of ``--rows`` rows (``id`` int64 primary key with a
BTREE index, ``v`` float64, ``cat`` int32 in 0..999, ``s`` string), ``--regions`` regions
(bucket on ``id``), ``--gens`` flushed generations of ``--gen-rows`` rows each (half
updates of existing keys, half new keys) and an open MemTable of ``--memtable-rows`` rows
(half updates). pylance gets the same base and the same generations, one shard per
region; its scans cover the flushed generations only (its LsmScanner reads one writer's
MemTable, not eight), so it does a little less work than lance_sql here.

Timed (medians, operations interleaved round by round):

* full scan: ``mw.scanner().to_table()`` vs ``ds.to_table()`` vs pylance's LsmScanner;
* a selective filter on a non-key column (``cat = 7``, 0.1% of rows): LSM vs base;
* point lookups through Python (``mw.get``): a key whose newest row is in the MemTable, a
  key only in the base table, vs pylance's LsmPointLookupPlanner; a 1000-key lookup;
* the lookups, ``cat = 7`` and ``count(*)`` through SQL (``lance_sql.connect``); the full
  scan and ``cat = 7`` through SQL against a ``consistency="base"`` session (the base
  table alone), interleaved;
* ``--scan-only``: the scans alone (Python and SQL), no lookups;
* ``--scaling``: single-key lookups on a small table with 1 region and with 64, the
  same data and keys, alternating (CPU time; see :func:`scaling`);
* ``--key-counts``: lookups of 1, 2, 4, ... 1000 keys (Python ``mw.get`` and SQL
  ``=`` / ``IN``), CPU-time medians, with pylance's LsmPointLookupPlanner beside them (one
  key per plan: n lookups of one key); ``--key-type string`` keys the table by
  ``f"k{n:09d}"`` strings instead of int64 (a table of its own under ``--path``).

    python bench/bench_lsm.py --rows 10000000 [--repeat 5] [--scaling] [--path DIR]
                              [--lookups-only] [--key-counts [--key-type string]]
    python bench/bench_lsm.py --scaling-only [--lookups 400] [--path DIR]

``--path DIR`` keeps the tables in ``DIR`` and reuses lance_sql's base table and flushed
generations when they are there (same ``--rows`` etc. expected); the MemTable is put
again each run, and the writer is aborted at the end so its rows never reach the WAL.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_medians, median_time

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.transforms import region_values

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("cat", pa.int32()),
                    pa.field("s", pa.string())])


def with_string_key() -> None:
    """Key the table by strings ``k000000042`` (``--key-type string``)."""
    global SCHEMA
    SCHEMA = SCHEMA.set(0, pa.field("id", pa.string(), nullable=False, metadata=PK))


def key_array(ids: np.ndarray) -> pa.Array:
    """The keys of rows ``ids`` as the table types them."""
    ids = np.asarray(ids, np.int64)
    if pa.types.is_string(SCHEMA.field("id").type):
        return pa.array(np.char.add("k", np.char.zfill(ids.astype(str), 9)), pa.string())
    return pa.array(ids, pa.int64())


def with_s_compression(compression: str | None) -> None:
    """Write column ``s`` with this ``lance-encoding:compression`` (None: the writer's
    default, LZ4 chunks of 16 KiB)."""
    global SCHEMA
    if compression is not None:
        meta = {"lance-encoding:compression": compression}
        SCHEMA = SCHEMA.set(3, SCHEMA.field("s").with_metadata(meta))


def rows(ids: np.ndarray, tag: int) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": key_array(ids), "v": ids.astype(np.float64) + tag,
                     "cat": (ids % 1000).astype(np.int32),
                     "s": pa.array(np.char.add(f"t{tag}-", ids.astype(str)))}, schema=SCHEMA)


def base_batches(n: int, chunk: int = 1_000_000):
    for start in range(0, n, chunk):
        yield from rows(np.arange(start, min(n, start + chunk)), 0).to_batches()


def generation_ids(rng: np.random.Generator, n_base: int, size: int, new_from: int
                   ) -> np.ndarray:
    updates = rng.choice(n_base, size // 2, replace=False)
    return np.concatenate([updates, np.arange(new_from, new_from + size - size // 2)])


def buckets(ids: np.ndarray, regions: int) -> np.ndarray:
    spec = RegionSpec.bucket("id", regions)
    return np.asarray(region_values(spec, [key_array(ids)], len(ids))
                      .column(0).to_numpy())


def per_call_median(fn: Callable[[int], object], keys: np.ndarray) -> float:
    times = []
    for k in keys:
        start = time.perf_counter()
        fn(int(k))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def build_ours(root: str, args: argparse.Namespace, gens: list[np.ndarray],
               memtable: np.ndarray):
    if args.path is not None and os.path.isdir(os.path.join(root, "_versions")):
        mw = MemWal(lance_sql.dataset(root))  # reused: base and generations are there
        writer = mw.writer()
        atexit.register(_abort, writer)  # (before the writers' own exit hook flushes)
        writer.put(rows(memtable, len(gens) + 1))
        held = sum(m.num_rows for w in writer.writers for m in w.memtables())
        if held != len(memtable):  # WAL entries replayed on top of the put
            raise SystemExit(f"{root}: the MemTables hold {held} rows, not the "
                             f"{len(memtable)} just put: its WAL has entries of a writer "
                             f"that was not aborted; build the tables again in a new --path")
        return mw, writer
    ds = lance_sql.write_dataset(base_batches(args.rows), root, schema=SCHEMA)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", args.regions),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    for g, ids in enumerate(gens, start=1):
        writer.put(rows(ids, g))
        writer.flush_memtable()
    if args.path is not None:
        atexit.register(_abort, writer)
    writer.put(rows(memtable, len(gens) + 1))
    return mw, writer


def _abort(writer) -> None:
    """Stop ``writer``'s region writers without I/O: a kept table's MemTable never reaches
    its WAL, even when the run fails (the writers' own exit hook would flush it there, and
    every later run would replay it into its MemTable)."""
    for region_writer in writer.writers:
        region_writer.abort()


def build_theirs(root: str, args: argparse.Namespace, gens: list[np.ndarray]):
    import lance

    if args.path is not None and os.path.isdir(os.path.join(root, "_mem_wal")):
        return lance.dataset(root), _snapshots(root, sorted(  # reused, as build_ours does
            n for n in os.listdir(os.path.join(root, "_mem_wal")) if _is_uuid(n)))
    ds = lance.write_dataset(pa.RecordBatchReader.from_batches(SCHEMA, base_batches(args.rows)),
                             root)
    ds.create_scalar_index("id", "BTREE")
    ds.initialize_mem_wal(unsharded=True)
    ds = lance.dataset(root)
    shards = [str(uuid.uuid4()) for _ in range(args.regions)]
    for g, ids in enumerate(gens, start=1):
        owner = buckets(ids, args.regions)
        for r, shard in enumerate(shards):
            part = ids[owner == r]
            if part.size:
                w = ds.mem_wal_writer(shard, durable_write=False)
                w.put(rows(part, g))
                w.close()  # flushes the MemTable: one generation
    return lance.dataset(root), _snapshots(root, shards)


def _is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True


def _snapshots(root: str, shards: list[str]) -> list:
    """pylance's snapshot of every shard's flushed generations."""
    from lance.mem_wal import ShardSnapshot

    snaps = []
    for shard in shards:
        snap = ShardSnapshot(shard)
        for name in sorted(os.listdir(os.path.join(root, "_mem_wal", shard))):
            if "_gen_" in name:
                snap = snap.with_sstable(int(name.split("_gen_")[1]), name)
        snaps.append(snap)
    return snaps


def scaling(tmp: str, repeat_keys: int) -> dict[str, float]:
    """Single-key lookups with 1 region and with 64 (a 200k-row base without a key index,
    so a base-only key is found by the reverse scan): both tables get the same base, the
    same 20k generation rows (one flush: one generation per region) and the same keys,
    and the lookups alternate between them key by key (CPU time, medians and quartiles).

    First lookups: one key of each of the 64 regions, before anything of that region is
    cached (the 1-region table sees the same keys: all but the first in a warm region).
    Then the steady state, every region touched: keys only in the base, keys in a
    generation."""
    out: dict[str, float] = {}
    rng = np.random.default_rng(7)
    n_base = 200_000
    in_gen = rng.choice(n_base, 20_000, replace=False)
    only_base = np.setdiff1d(np.arange(n_base), in_gen)
    rng.shuffle(only_base)
    with contextlib.ExitStack() as writers:
        mws = {}
        for regions in (1, 64):
            root = os.path.join(tmp, f"scaling_{regions}")
            shutil.rmtree(root, ignore_errors=True)  # small: built afresh even under --path
            lance_sql.write_dataset(base_batches(n_base), root, schema=SCHEMA)
            mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", regions),
                                   durable_write=False, max_wal_flush_interval_ms=3_600_000)
            w = writers.enter_context(mw.writer())
            w.put(rows(in_gen, 1))
            w.flush_memtable()
            mws[regions] = MemWal(lance_sql.dataset(root))  # a reader of its own

        def timed(keys: np.ndarray, label: str) -> None:
            cpu: dict[int, list[float]] = {1: [], 64: []}
            for i, k in enumerate(keys.tolist()):
                for regions in ((1, 64) if i % 2 else (64, 1)):
                    start = time.process_time()
                    mws[regions].get({"id": [k]})
                    cpu[regions].append(time.process_time() - start)
            for regions, ts in cpu.items():
                ms = 1000 * np.asarray(ts)
                q1, q3 = np.percentile(ms, [25, 75])
                name = f"{label}, {regions} region(s)"
                out[name] = float(np.median(ms))
                print(f"  {name}: CPU median {np.median(ms):.3f} ms, "
                      f"quartiles {q1:.3f}-{q3:.3f}")

        print("scaling (CPU ms):")
        for label, pool in (("first lookup ms, key only in base", only_base),
                            ("first lookup ms, key in a generation", in_gen)):
            firsts = pool[np.unique(buckets(pool, 64), return_index=True)[1]]
            rng.shuffle(firsts)
            timed(firsts, label)  # one key of each region: cold in the 64-region table
        timed(only_base[-repeat_keys:], "lookup ms, key only in base")
        timed(in_gen[-repeat_keys:], "lookup ms, key in a generation")
    return out


def many_keys_only(mw: MemWal, writer, tmp: str, args: argparse.Namespace,
                 rng: np.random.Generator) -> None:
    """The 1000-key lookups alone, Python and SQL ``IN``, after a first run of each (the
    index pages it touches cached, as a full LSM scan leaves them in the full run): wall
    time, then CPU time, medians."""
    session = lance_sql.connect(tmp)

    def keys() -> np.ndarray:
        return rng.choice(args.rows, 1000)

    def sql_in() -> pa.Table:
        listed = ",".join(map(str, keys().tolist()))
        return session.sql(f"SELECT * FROM ours WHERE id IN ({listed})").to_arrow_table()

    for _ in range(3):  # warm: every index page cached
        mw.get({"id": rng.choice(args.rows, 20_000)})
    ops = {"1000-key lookup s: LSM": (lambda: mw.get({"id": keys()}), None),
           "SQL 1000-key IN s: LSM": (sql_in, None)}
    results = interleaved_medians(ops, args.repeat)
    # CPU time too (all threads of the process): steadier than wall time on a shared machine
    cpu: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(args.repeat):
        for name, (fn, _) in ops.items():
            start = time.process_time()
            fn()
            cpu[name].append(time.process_time() - start)
    for name, times in cpu.items():
        results[name.replace(" s:", " CPU s:")] = statistics.median(times)
    for region_writer in writer.writers:
        region_writer.abort()
    for key, value in results.items():
        print(f"{key:45s} {value:10.4f}")


def key_counts(mw: MemWal, tmp: str, args: argparse.Namespace, rng: np.random.Generator,
               pylance_lookup: Callable[[pa.Array], object] | None) -> None:
    """Lookups of each of ``--key-counts`` keys (random base rows, some updated in a
    generation or the MemTable), Python and SQL, interleaved round by round after the
    index pages are cached: medians of CPU time (all threads) and wall time, in ms."""
    session = lance_sql.connect(tmp)
    counts = [int(c) for c in args.key_counts.split(",")]
    string = pa.types.is_string(SCHEMA.field("id").type)

    def sql(keys: pa.Array) -> pa.Table:
        listed = [f"'{k}'" if string else str(k) for k in keys.to_pylist()]
        where = f"id = {listed[0]}" if len(listed) == 1 else f"id IN ({','.join(listed)})"
        return session.sql(f"SELECT * FROM ours WHERE {where}").to_arrow_table()

    ops: dict[str, Callable[[pa.Array], object]] = {
        "py": lambda keys: mw.get({"id": keys}), "sql": sql}
    if pylance_lookup is not None:
        ops["pylance"] = lambda keys: [pylance_lookup(keys.slice(i, 1))
                                       for i in range(len(keys))]
    for _ in range(3):  # warm: every index page cached
        mw.get({"id": key_array(rng.choice(args.rows, 20_000))})
    check = key_array(rng.choice(args.rows, 100))
    assert sql(check).sort_by("id").equals(mw.get({"id": check}).sort_by("id")), "SQL == py"
    cpu: dict[tuple[str, int], list[float]] = {}
    wall: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.repeat + 1):
        for n in counts:
            for name, fn in ops.items():
                if name == "pylance" and n > args.pylance_max_keys:
                    continue
                keys = key_array(rng.choice(args.rows, n))
                start, start_cpu = time.perf_counter(), time.process_time()
                fn(keys)
                if round_:  # the first round untimed
                    cpu.setdefault((name, n), []).append(time.process_time() - start_cpu)
                    wall.setdefault((name, n), []).append(time.perf_counter() - start)
    print(f"{SCHEMA.field('id').type} keys, medians of {args.repeat} rounds, ms "
          "(CPU: all threads of the process)")
    names = list(ops)
    print(f"{'keys':>6s} " + " ".join(f"{n + ' CPU':>12s} {n + ' wall':>12s}" for n in names)
          + f" {'py CPU/key':>11s}")
    for n in counts:
        cells = " ".join(f"{1000 * statistics.median(cpu[(name, n)]):12.2f} "
                         f"{1000 * statistics.median(wall[(name, n)]):12.2f}"
                         if (name, n) in cpu else f"{'-':>12s} {'-':>12s}" for name in names)
        print(f"{n:6d} {cells} {1000 * statistics.median(cpu[('py', n)]) / n:11.3f}")


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--gens", type=int, default=3)
    parser.add_argument("--gen-rows", type=int, default=100_000)
    parser.add_argument("--memtable-rows", type=int, default=50_000)
    parser.add_argument("--regions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--scaling-only", action="store_true",
                        help="run only --scaling (its own small tables; --rows unused)")
    parser.add_argument("--path", default=None,
                        help="keep the tables here and reuse them when present")
    parser.add_argument("--no-pylance", action="store_true")
    parser.add_argument("--many-keys-only", action="store_true",
                        help="time only the 1000-key lookups (Python and SQL IN)")
    parser.add_argument("--lookups-only", action="store_true",
                        help="time the single-key lookups only (Python and SQL), no scans")
    parser.add_argument("--scan-only", action="store_true",
                        help="time the scans only (Python and SQL), no lookups")
    parser.add_argument("--key-counts", nargs="?", const="1,2,4,8,16,32,63,64,65,128,1000",
                        default=None, help="time lookups of these many keys (comma list)")
    parser.add_argument("--key-type", choices=("int64", "string"), default="int64",
                        help="type of the primary key id (string: k000000042)")
    parser.add_argument("--pylance-max-keys", type=int, default=16,
                        help="--key-counts: time pylance's lookups (one plan a key) up to "
                             "this many keys")
    parser.add_argument("--pylance-path", default=None,
                        help="keep pylance's tables here instead of under --path")
    parser.add_argument("--s-compression", default=None,
                        help="lance-encoding:compression of column s (e.g. none)")
    parser.add_argument("--pylance-scan-repeat", type=int, default=1,
                        help="runs of pylance's full LSM scan (slow)")
    args = parser.parse_args()
    with_s_compression(args.s_compression)
    if args.key_type == "string":
        with_string_key()
    rng = np.random.default_rng(1)
    gens, new_from = [], args.rows
    for _ in range(args.gens):
        gens.append(generation_ids(rng, args.rows, args.gen_rows, new_from))
        new_from += args.gen_rows
    memtable = generation_ids(rng, args.rows, args.memtable_rows, new_from)
    if args.path is not None:
        os.makedirs(args.path, exist_ok=True)
    tmp = args.path or tempfile.mkdtemp(prefix="bench_lsm_")
    results: dict[str, float] = {}
    try:
        if args.scaling_only:
            results.update(scaling(tmp, args.lookups))
            _report(argparse.Namespace(**{**vars(args), "lookups_only": True}), results)
            return
        start = time.perf_counter()
        mw, writer = build_ours(os.path.join(tmp, "ours"), args, gens, memtable)
        print(f"lance_sql setup {time.perf_counter() - start:.1f} s")
        base = lance_sql.dataset(os.path.join(tmp, "ours"))
        if args.many_keys_only:
            many_keys_only(mw, writer, tmp, args, rng)
            return
        if args.key_counts is not None:
            lookup = None
            if not args.no_pylance:
                from lance.mem_wal import LsmPointLookupPlanner

                start = time.perf_counter()
                theirs, snaps = build_theirs(
                    os.path.join(args.pylance_path or tmp, "theirs"), args, gens)
                print(f"pylance setup {time.perf_counter() - start:.1f} s")
                planner = LsmPointLookupPlanner(theirs, snaps)

                def lookup(key: pa.Array) -> pa.Table:
                    return planner.plan_lookup(key).to_table()
            key_counts(mw, tmp, args, rng, lookup)
            _close(args, writer)
            return
        ops = {
            "full scan s: LSM": (lambda: mw.scanner().to_table(), None),
            "full scan s: base only": (lambda: base.to_table(), None),
            "cat = 7 s: LSM": (lambda: mw.scanner(filter="cat = 7").to_table(), None),
            "cat = 7 s: base only": (lambda: base.to_table(filter="cat = 7"), None),
        }
        if not args.scan_only:
            ops["1000-key lookup s: LSM"] = (
                lambda: mw.get({"id": rng.choice(args.rows, 1000)}), None)
        if not args.no_pylance:
            from lance.mem_wal import LsmPointLookupPlanner, LsmScanner

            start = time.perf_counter()
            theirs, snaps = build_theirs(os.path.join(tmp, "theirs"), args, gens)
            print(f"pylance setup {time.perf_counter() - start:.1f} s")
            ops["cat = 7 s: pylance LsmScanner"] = (
                lambda: LsmScanner.from_snapshots(theirs, snaps).filter("cat = 7").to_table(),
                None)
        if not args.lookups_only:
            results.update(interleaved_medians(ops, args.repeat))
        # the scans through SQL: the LSM view vs a session reading the base table alone
        session = lance_sql.connect(tmp)
        base_session = lance_sql.connect(tmp, consistency="base")
        if not args.lookups_only:
            results.update(interleaved_medians({
                "SQL full scan s: LSM": (
                    lambda: session.sql("SELECT * FROM ours").to_arrow_table(), None),
                "SQL full scan s: base only": (
                    lambda: base_session.sql("SELECT * FROM ours").to_arrow_table(), None),
                "SQL cat = 7 s: LSM": (
                    lambda: session.sql("SELECT * FROM ours WHERE cat = 7").to_arrow_table(),
                    None),
                "SQL cat = 7 s: base only": (
                    lambda: base_session.sql(
                        "SELECT * FROM ours WHERE cat = 7").to_arrow_table(), None),
            }, args.repeat))
        if not args.no_pylance and not args.lookups_only:
            # slow here (tens of seconds at 2M rows): timed apart
            results["full scan s: pylance LsmScanner"] = median_time(
                lambda: LsmScanner.from_snapshots(theirs, snaps).to_table(),
                args.pylance_scan_repeat)
        expected = len(np.union1d(np.arange(args.rows), np.concatenate([*gens, memtable])))
        if not args.lookups_only:
            assert mw.scanner().count_rows() == expected, "LSM scan row count"
        if args.scan_only:
            _close(args, writer)
            _report(args, results)
            return
        in_memtable = memtable[: args.lookups]
        only_base = np.setdiff1d(rng.choice(args.rows, args.lookups * 3),
                                 np.concatenate([*gens, memtable]))[: args.lookups]
        results["lookup ms: key in MemTable"] = 1000 * per_call_median(
            lambda k: mw.get({"id": [k]}), in_memtable)
        results["lookup ms: key only in base"] = 1000 * per_call_median(
            lambda k: mw.get({"id": [k]}), only_base)
        if not args.no_pylance:
            planner = LsmPointLookupPlanner(theirs, snaps)
            results["lookup ms: pylance, key only in base"] = 1000 * per_call_median(
                lambda k: planner.plan_lookup(pa.array([k], pa.int64())).to_table(),
                only_base)
            results["lookup ms: pylance, key in a generation"] = 1000 * per_call_median(
                lambda k: planner.plan_lookup(pa.array([k], pa.int64())).to_table(),
                gens[-1][: args.lookups])
        # the same reads through SQL (the session's LSM view of table "ours")
        results["SQL lookup ms: key in MemTable"] = 1000 * per_call_median(
            lambda k: session.sql(f"SELECT * FROM ours WHERE id = {k}").to_arrow_table(),
            in_memtable)
        results["SQL lookup ms: key only in base"] = 1000 * per_call_median(
            lambda k: session.sql(f"SELECT * FROM ours WHERE id = {k}").to_arrow_table(),
            only_base)
        if not args.lookups_only:
            results["SQL count(*) s: LSM"] = median_time(
                lambda: session.sql("SELECT count(*) FROM ours").to_arrow_table(),
                args.repeat)
        _close(args, writer)
        if args.scaling:
            results.update(scaling(tmp, args.lookups))
        _report(args, results)
    finally:
        if args.path is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _close(args: argparse.Namespace, writer) -> None:
    if args.path is None:  # a table thrown away after: its MemTable needs no generation
        writer.close(flush_memtable=False)
    else:  # a kept table's MemTable stays out of its WAL: the next run puts it again
        _abort(writer)


def _report(args: argparse.Namespace, results: dict[str, float]) -> None:
    for key, value in results.items():
        print(f"{key:45s} {value:10.4f}")
    r = results
    if args.lookups_only:
        return
    print(f"ratio LSM / base full scan: {r['full scan s: LSM'] / r['full scan s: base only']:.2f}"
          " (target <= 1.3)")
    print(f"ratio LSM / base cat = 7:   {r['cat = 7 s: LSM'] / r['cat = 7 s: base only']:.2f}"
          " (target <= 1.5)")
    print("SQL ratio LSM / base full scan: "
          f"{r['SQL full scan s: LSM'] / r['SQL full scan s: base only']:.2f} (target <= 1.3)")
    print("SQL ratio LSM / base cat = 7:   "
          f"{r['SQL cat = 7 s: LSM'] / r['SQL cat = 7 s: base only']:.2f} (target <= 1.5)")
    if not args.no_pylance:
        print(f"ratio LSM / pylance full scan: "
              f"{r['full scan s: LSM'] / r['full scan s: pylance LsmScanner']:.2f} "
              "(target <= 1.0)")


if __name__ == "__main__":
    main()
