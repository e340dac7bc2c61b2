"""Model-based test of LSM reads: random puts, deletes, WAL and MemTable flushes, merges
and garbage collection across regions, checked after every step against a dict (last
write wins): full scans, filtered scans on a non-key column (the stale-row case),
counts, point lookups and multi-key lookups."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import unindexed

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("s", pa.string())])
_names = itertools.count()
KEYS = 60


def rows(model: dict[int, tuple[int, str]], ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "v": [model[i][0] for i in ids],
                     "s": [model[i][1] for i in ids]}, schema=SCHEMA)


def as_dict(table: pa.Table) -> dict[int, tuple[int, str]]:
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key came out twice"
    return dict(zip(ids, zip(table.column("v").to_pylist(), table.column("s").to_pylist(),
                             strict=True), strict=True))


def check(mw: MemWal, model: dict[int, tuple[int, str]], rng: random.Random) -> None:
    assert as_dict(mw.scanner().to_table()) == model
    for threshold in (rng.randrange(100), rng.randrange(100)):
        want = {k: v for k, v in model.items() if v[0] > threshold}
        assert as_dict(mw.scanner(filter=f"v > {threshold}").to_table()) == want
    tag = rng.choice("abc")
    want = {k: v for k, v in model.items() if v[1].startswith(tag)}
    assert as_dict(mw.scanner(filter=f"s LIKE '{tag}%'").to_table()) == want
    assert mw.scanner().count_rows() == len(model)
    key = rng.randrange(KEYS)
    got = mw.scanner(filter=f"id = {key}").to_table()
    assert as_dict(got) == ({key: model[key]} if key in model else {})
    probe = rng.sample(range(KEYS + 5), rng.choice([3, 20]))  # both ways of routing keys
    got = mw.get(pa.table({"id": pa.array(probe, pa.int64())}))
    assert got.column("id").to_pylist() == [k for k in probe if k in model]
    assert as_dict(got) == {k: model[k] for k in probe if k in model}
    one = mw.get({"id": [key]})
    assert as_dict(one) == ({key: model[key]} if key in model else {})


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lsm_reads_match_a_last_write_wins_model(seed: int) -> None:
    rng = random.Random(seed)
    name = f"lsm-model{next(_names)}"
    MemoryStore.reset(name)
    model: dict[int, tuple[int, str]] = {i: (i, f"a{i}") for i in range(0, KEYS, 3)}
    ds = lance_sql.write_dataset(rows(model, sorted(model)), f"memory://{name}")
    if seed % 2:  # base lookups through the key's BTREE index, else by reverse scan
        ds.create_scalar_index("id", "BTREE")
        ds = lance_sql.dataset(ds.uri)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 4), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    plan = mw.view().lookup_plan(pa.table({"id": pa.array([3], pa.int64())})).explain()
    assert ("index=id_idx" if seed % 2 else "reverse_scan") in plan
    writer = mw.writer()
    collected = merged = 0
    blocks = unindexed.BLOCK_BUILDS[0]
    try:
        check(mw, model, rng)
        for step in range(45):
            op = rng.choices(["put", "delete", "wal", "memtable", "merge", "gc", "index"],
                             weights=[6, 2, 1, 2, 1, 1, 1])[0]
            if op == "put":
                ids = [rng.randrange(KEYS) for _ in range(rng.randint(1, 8))]
                for i in ids:  # duplicates within one put: the later one wins
                    model[i] = (rng.randrange(100), f"{rng.choice('abc')}{step}")
                batch = pa.table({"id": ids, "v": [model[i][0] for i in ids],
                                  "s": [model[i][1] for i in ids]}, schema=SCHEMA)
                # write each duplicate's earlier value first, so the last one is the model's
                stale = pa.table({"id": ids, "v": [-1] * len(ids), "s": ["x"] * len(ids)},
                                 schema=SCHEMA)
                writer.put(pa.concat_tables([stale, batch]))
            elif op == "delete":
                ids = rng.sample(range(KEYS), rng.randint(1, 4))
                for i in ids:
                    model.pop(i, None)
                writer.delete(pa.table({"id": pa.array(ids, pa.int64())}))
            elif op == "wal":
                writer.flush()
            elif op == "memtable":
                if rng.random() < 0.5:
                    writer.flush_memtable()
                elif writer.writers:
                    rng.choice(writer.writers).flush_memtable()
            elif op == "merge":
                merged += len(mw.merge())
            elif op == "index":
                # the index catches up with the merged fragments (until then lookups and
                # scans search those fragments' keys in memory: memwal/read/unindexed.py)
                if seed % 2:
                    lance_sql.dataset(mw.dataset.uri).optimize.optimize_indices()
            else:
                current = lance_sql.dataset(mw.dataset.uri)
                current.cleanup_old_versions(older_than=timedelta(0))
                collected += len(mw.collect_garbage(grace=timedelta(0)).generations)
            check(mw, model, rng)
        writer.flush_memtable()  # then merge and collect everything, reading between
        merged += len(mw.merge())
        check(mw, model, rng)
        lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
        collected += len(mw.collect_garbage(grace=timedelta(0)).generations)
        check(mw, model, rng)
        assert merged and collected
        assert (unindexed.BLOCK_BUILDS[0] > blocks) == bool(seed % 2)
        writer.put(rows(model, sorted(model)[:5]))  # one more generation, unmerged
        writer.flush_memtable()
        mw.refresh_index()
        snapshot = mw.scanner(consistency="snapshot").to_table()
        assert as_dict(snapshot) == model  # every row flushed: the snapshot has them all
    finally:
        writer.close()
