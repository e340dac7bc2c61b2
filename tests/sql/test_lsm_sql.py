"""SQL over MemWAL tables: a LanceSession reads them as their LSM view (each key's newest
row over the base table, flushed generations and this process's MemTables).

Checked against a dict model (last write wins) and the Python reads (``mw.scanner``,
``mw.get``, ``mw.nearest``) after random puts, deletes, flushes and merges; plus the
plans EXPLAIN prints, time travel, the consistency options and query lifetimes.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, LanceError
from lance_sql.expr import Call, Column, Literal
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.lsm_provider import _pushable
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("s", pa.string()),
                    pa.field("e", pa.list_(pa.float32(), 2))])
KEYS = 50
REPO = Path(__file__).resolve().parents[2]


def rows(model: dict[int, tuple[int, str]], ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "v": [model[i][0] for i in ids],
                     "s": [model[i][1] for i in ids],
                     "e": [[float(i), float(model[i][0])] for i in ids]}, schema=SCHEMA)


def as_dict(table: pa.Table) -> dict[int, tuple[int, str]]:
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key came out twice"
    return dict(zip(ids, zip(table.column("v").to_pylist(), table.column("s").to_pylist(),
                             strict=True), strict=True))


def q(session, sql: str) -> pa.Table:
    return session.sql(sql).to_arrow_table()


def make_table(root: Path, model: dict[int, tuple[int, str]], regions: int = 3) -> MemWal:
    ds = lance_sql.write_dataset(rows(model, sorted(model)), root / "t.lance")
    return MemWal.initialize(ds, RegionSpec.bucket("id", regions), durable_write=False,
                             max_wal_flush_interval_ms=3_600_000)


def check(session, mw: MemWal, model: dict[int, tuple[int, str]], rng: random.Random) -> None:
    assert as_dict(q(session, "SELECT id, v, s FROM t")) == model
    assert as_dict(q(session, "SELECT * FROM t")) == as_dict(mw.scanner().to_table())
    threshold = rng.randrange(100)
    want = {k: v for k, v in model.items() if v[0] > threshold}
    # the stale-row case: a key whose newest v fails the filter shows no older version
    assert as_dict(q(session, f"SELECT id, v, s FROM t WHERE v > {threshold}")) == want
    tag = rng.choice("abc")
    want = {k: v for k, v in model.items() if v[1].startswith(tag)}
    assert as_dict(q(session, f"SELECT id, v, s FROM t WHERE s LIKE '{tag}%'")) == want
    counts = q(session, "SELECT count(*) AS n, sum(v) AS total, max(s) AS top FROM t")
    assert counts.to_pylist() == [{"n": len(model),
                                   "total": sum(v for v, _ in model.values()) or None,
                                   "top": max((s for _, s in model.values()), default=None)}]
    key = rng.randrange(KEYS)
    got = q(session, f"SELECT id, v, s FROM t WHERE id = {key}")
    assert as_dict(got) == ({key: model[key]} if key in model else {})
    probe = rng.sample(range(KEYS + 5), 6)
    got = q(session, f"SELECT id, v, s FROM t WHERE id IN ({', '.join(map(str, probe))})")
    assert as_dict(got) == {k: model[k] for k in probe if k in model}
    assert as_dict(got) == as_dict(mw.get({"id": probe}))
    # a key lookup with another condition on the newest row
    got = q(session, f"SELECT id, v, s FROM t WHERE id = {key} AND v > {threshold}")
    want = {key: model[key]} if key in model and model[key][0] > threshold else {}
    assert as_dict(got) == want
    joined = q(session, "SELECT a.id, a.v, b.s FROM t a JOIN t b ON a.id = b.id "
                        "WHERE b.v >= 50")
    assert as_dict(joined) == {k: v for k, v in model.items() if v[0] >= 50}
    limited = q(session, f"SELECT id, v, s FROM t WHERE v > {threshold} LIMIT 3")
    got_limited = as_dict(limited)
    assert len(got_limited) == min(3, sum(v[0] > threshold for v in model.values()))
    assert all(model[k] == v for k, v in got_limited.items())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_sql_matches_a_last_write_wins_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    model = {i: (i, f"a{i}") for i in range(0, KEYS, 3)}
    mw = make_table(tmp_path, model)
    session = connect(tmp_path)
    writer = mw.writer()
    merged = 0
    try:
        check(session, mw, model, rng)
        for step in range(30):
            op = rng.choices(["put", "delete", "memtable", "merge", "gc"],
                             weights=[6, 2, 2, 1, 1])[0]
            if op == "put":
                ids = list(dict.fromkeys(rng.randrange(KEYS) for _ in range(rng.randint(1, 8))))
                for i in ids:
                    model[i] = (rng.randrange(100), f"{rng.choice('abc')}{step}")
                writer.put(rows(model, ids))
            elif op == "delete":
                ids = rng.sample(range(KEYS), rng.randint(1, 4))
                for i in ids:
                    model.pop(i, None)
                writer.delete(pa.table({"id": pa.array(ids, pa.int64())}))
            elif op == "memtable":
                writer.flush_memtable()
            elif op == "merge":
                merged += len(mw.merge())
            else:  # merged generations and old versions go
                lance_sql.dataset(mw.dataset.uri).cleanup_old_versions(older_than=timedelta(0))
                mw.collect_garbage(grace=timedelta(0))
            check(session, mw, model, rng)
        writer.flush_memtable()
        merged += len(mw.merge())
        check(session, mw, model, rng)
        assert merged
    finally:
        writer.close()


@pytest.fixture
def table(tmp_path: Path):
    """Base ids 0..9 (v=0); gen 1 flushed: ids 1, 2, 3 (v=1); MemTable: 2, 11 (v=2),
    3 deleted."""
    model = {i: (0, f"a{i}") for i in range(10)}
    mw = make_table(tmp_path, model, regions=2)
    w = mw.writer()
    model.update({i: (1, f"b{i}") for i in (1, 2, 3)})
    w.put(rows(model, [1, 2, 3]))
    w.flush_memtable()
    model.update({i: (2, f"c{i}") for i in (2, 11)})
    w.put(rows(model, [2, 11]))
    w.delete(pa.table({"id": pa.array([3], pa.int64())}))
    del model[3]
    try:
        yield tmp_path, mw, model
    finally:
        w.close()


def test_a_filter_never_shows_an_older_version(table) -> None:
    root, _, model = table
    session = connect(root)
    # ids 1 and 2 had v=0 in the base, newer versions do not: they must not appear
    got = q(session, "SELECT id FROM t WHERE v = 0 ORDER BY id")
    assert got["id"].to_pylist() == [0, 4, 5, 6, 7, 8, 9]
    # id 3 was deleted in the MemTable: neither its base nor its gen-1 row shows
    assert q(session, "SELECT id FROM t WHERE s = 'b3' OR s = 'a3'").num_rows == 0
    assert q(session, "SELECT count(*) AS n FROM t WHERE v < 2").to_pylist() == \
        [{"n": sum(v < 2 for v, _ in model.values())}]


def test_aggregates_when_the_schema_has_metadata(tmp_path: Path) -> None:
    """The LSM view of a table whose schema carries metadata answers aggregates and
    DataFrame.count() (DataFusion compares the planned scan's schema, metadata too)."""
    model = {i: (i % 3, f"a{i}") for i in range(8)}
    table = rows(model, sorted(model))
    table = table.replace_schema_metadata({"origin": "a test"})
    ds = lance_sql.write_dataset(table, tmp_path / "m.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        model.update({i: (5, f"b{i}") for i in (1, 20)})
        writer.put(rows(model, [1, 20]).replace_schema_metadata({"origin": "a test"}))
        session = connect(tmp_path)
        assert q(session, "SELECT sum(v) AS s, count(*) AS n FROM m WHERE v > 0").to_pylist() \
            == [{"s": sum(v for v, _ in model.values() if v > 0),
                 "n": sum(v > 0 for v, _ in model.values())}]
        assert session.sql("SELECT id FROM m WHERE v = 5").count() == 2
    finally:
        writer.close()


def test_system_columns_hidden_from_star_returned_when_named(table) -> None:
    root, mw, model = table
    session = connect(root)
    star = q(session, "SELECT * FROM t")
    assert star.column_names == ["id", "v", "s", "e"]
    named = q(session, "SELECT *, _gen, _region, _rowaddr FROM t ORDER BY id")
    assert named.column_names == ["id", "v", "s", "e", "_gen", "_region", "_rowaddr"]
    want = mw.scanner(columns=["id", "_gen", "_region", "_rowaddr"]).to_table().sort_by("id")
    assert named.select(["id", "_gen", "_region", "_rowaddr"]).to_pylist() == want.to_pylist()
    gens = dict(zip(named["id"].to_pylist(), named["_gen"].to_pylist(), strict=True))
    assert gens[0] == -1 and gens[1] == 1 and gens[2] == 2 and gens[11] == 2
    newest = q(session, "SELECT id FROM t WHERE _gen >= 1 ORDER BY id")
    assert newest["id"].to_pylist() == [1, 2, 11]
    # rows not merged yet have no row id: NULL (base rows keep theirs), filters exact
    nulls = q(session, "SELECT id, _rowid FROM t WHERE _rowid IS NULL AND v > 0 ORDER BY id")
    assert nulls.to_pylist() == [{"id": k, "_rowid": None} for k in (1, 2, 11)]
    assert q(session, "SELECT id FROM t WHERE _rowid = 1").num_rows == 0


def test_filters_the_planner_cannot_read_apply_above_the_view() -> None:
    known = Call(">", (Column(("v",)), Literal(3)))
    unknown = Call("unknown", (Column(("s",)),))
    expr = pc.field("v") > 3
    assert _pushable(known, expr) == (known, None)
    pushed, residual = _pushable(Call("and", (known, unknown)), expr)
    assert pushed == known and residual is expr  # the readable part still prunes
    assert _pushable(unknown, expr) == (None, expr)


def test_a_sessions_dataset_hands_out_the_mem_wal(table) -> None:
    """``session.dataset(name)`` opens a table as ``lance_sql.dataset`` does: its
    ``mem_wal`` reads the same view as the session's SQL and the handle's own reads."""
    root, mw, model = table
    session = connect(root)
    handle = session.dataset("t").mem_wal
    assert handle is not None
    keys = sorted(model)[:3] + [KEYS + 1]
    assert as_dict(handle.get({"id": keys})) == {k: model[k] for k in keys if k in model}
    assert as_dict(handle.scanner(["id", "v", "s"]).to_table()) == model
    assert as_dict(q(session, "SELECT id, v, s FROM t")) == model


def test_point_lookups_plan_as_the_spec_lookup_and_equal_get(table) -> None:
    root, mw, model = table
    session = connect(root)
    for keys in ([2], [3], [11], [0, 2, 3, 11, 40]):
        text = ", ".join(map(str, keys))
        got = q(session, f"SELECT id, v, s FROM t WHERE id IN ({text})")
        assert as_dict(got) == as_dict(mw.get({"id": keys}))
        assert as_dict(got) == {k: model[k] for k in keys if k in model}
    plan = session.explain("SELECT v FROM t WHERE id = 2")
    assert "LsmPointLookup" in plan
    lines = [line.strip() for line in plan.splitlines()]
    at = lines.index("CoalesceFirstExec: return_first_non_null")
    assert lines[at + 1].startswith("BloomFilterGuardExec")
    assert lines[at + 2].startswith("TakeLastExec")
    assert any(line.startswith("TakeLastExec: base_table[gen=-1]") for line in lines)
    # an integer key compared with 2.5 matches nothing (and must not be a lookup of 2)
    assert q(session, "SELECT id FROM t WHERE id = 2.5").num_rows == 0


def test_composite_key_lookup(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("tenant", pa.string(), nullable=False, metadata=PK),
                        pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    base = pa.table({"tenant": ["A"] * 5 + ["B"] * 5, "id": list(range(5)) * 2,
                     "v": [0] * 10}, schema=schema)
    ds = lance_sql.write_dataset(base, tmp_path / "c.lance")
    mw = MemWal.initialize(ds, RegionSpec.identity("tenant"),
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(pa.table({"tenant": ["A", "B"], "id": [1, 1], "v": [7, 8]}, schema=schema))
        session = connect(tmp_path)
        got = q(session, "SELECT tenant, id, v FROM c WHERE tenant = 'B' AND id = 1")
        assert got.to_pylist() == [{"tenant": "B", "id": 1, "v": 8}]
        got = q(session, "SELECT tenant, id, v FROM c WHERE tenant IN ('A', 'B') "
                         "AND id IN (1, 2) ORDER BY tenant, id")
        assert got.to_pylist() == mw.get({"tenant": ["A", "A", "B", "B"],
                                          "id": [1, 2, 1, 2]}).to_pylist()
        assert "LsmPointLookup" in session.explain(
            "SELECT v FROM c WHERE tenant = 'A' AND id = 3")
        scan = session.explain("SELECT v FROM c WHERE tenant = 'A'")  # not every key column
        assert "LsmScan" in scan and "RegionPruning: kept 1 of 2 regions" in scan


def test_explain_prints_the_lsm_tree_beneath_datafusion_plan(table) -> None:
    root, mw, _ = table
    session = connect(root)
    plan = session.explain("SELECT v FROM t WHERE v > 0")
    lines = [line.strip() for line in plan.splitlines()]
    dataset = next(i for i, line in enumerate(lines) if line.startswith("DatasetExec"))
    assert lines[dataset + 1].startswith("LsmViewExec: t[v=")
    assert lines[dataset + 2].startswith("LsmScan: consistency=strong")
    assert lines[dataset + 3].startswith("RegionPruning: kept 2 of 2 regions")
    assert lines[dataset + 4] == "ProjectionExec: columns=[v]"
    assert lines[dataset + 5].startswith("DeduplicateExec: partition_by=[id]")
    assert lines[dataset + 6] == "UnionExec"
    scans = [line for line in lines if line.startswith("ScanExec:")]
    assert scans[0].startswith("ScanExec: base_table[gen=-1]")
    assert sum("source=memtable" in s for s in scans) == 2
    assert sum("source=flushed" in s for s in scans) == 2
    assert all("filter=[(v > 0)]" in s for s in scans)


def test_consistency_snapshot_and_base(table) -> None:
    root, mw, model = table
    base = connect(root, consistency="base")
    assert as_dict(q(base, "SELECT id, v, s FROM t")) == {i: (0, f"a{i}") for i in range(10)}
    snapshot = connect(root, consistency="snapshot")
    # no index refresh yet: the snapshot lists no generation, so it reads the base
    assert as_dict(q(snapshot, "SELECT id, v, s FROM t")) == \
        as_dict(mw.scanner(columns=["id", "v", "s"], consistency="snapshot").to_table())
    mw.refresh_index()
    got = as_dict(q(snapshot, "SELECT id, v, s FROM t"))
    assert got == as_dict(mw.scanner(consistency="snapshot").to_table())
    assert got[1] == (1, "b1") and 11 not in got  # the flushed gen, not the MemTable
    assert as_dict(q(connect(root), "SELECT id, v, s FROM t")) == model
    with pytest.raises(InvalidInputError):
        connect(root, consistency="eventual")


def test_nearest_in_a_base_session_searches_the_base_table(table) -> None:
    root, mw, _ = table
    version = mw.refresh_index().version  # its index lists gen 1 as flushed
    sql = "SELECT id FROM nearest('t', 'e', [3.0, 0.0], 1{}) ORDER BY _distance"
    # the base table still holds id 3 at [3, 0]; the LSM view deleted it
    base = connect(root, consistency="base")
    assert q(base, sql.format(""))["id"].to_pylist() == [3]
    assert q(base, sql.format(f", 'l2', {version}"))["id"].to_pylist() == [3]
    assert q(connect(root), sql.format(""))["id"].to_pylist() == [4]
    assert mw.nearest("e", [3.0, 0.0], 1)["id"].to_pylist() == [4]


def test_an_expression_region_spec_prunes_and_routes_inside_datafusion(tmp_path: Path) -> None:
    """A custom expression is evaluated by DataFusion; pruning and key routing run while
    DataFusion plans the query, so they evaluate it on a thread of their own (driving
    DataFusion from inside its runtime panics)."""
    model = {i: (i, f"a{i}") for i in range(12)}
    ds = lance_sql.write_dataset(rows(model, sorted(model)), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.expression("col0 % 3", ["id"], "int64"),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        model.update({i: (50 + i, f"b{i}") for i in (1, 4, 7, 20)})
        w.put(rows(model, [1, 4, 7, 20]))
        w.flush_memtable()
    session = connect(tmp_path)
    assert as_dict(q(session, "SELECT id, v, s FROM t WHERE id = 7")) == {7: model[7]}
    plan = session.explain("SELECT id FROM t WHERE id = 4 AND v > 0")  # through DataFusion
    assert "RegionPruning: kept 1 of 2 regions" in plan and "(expr=1)" in plan
    got = q(session, "SELECT id, v, s FROM t WHERE id IN (1, 2, 20, 30) AND v >= 0")
    assert as_dict(got) == {k: model[k] for k in (1, 2, 20)}
    got = q(session, "SELECT id, v, s FROM t WHERE id = 4 AND v > 50")
    assert as_dict(got) == {4: model[4]}
    assert as_dict(q(session, "SELECT id, v, s FROM t WHERE v > 20")) == {
        k: x for k, x in model.items() if x[0] > 20}


def test_version_as_of_reads_base_plus_that_versions_generations(table) -> None:
    root, mw, model = table
    ds = mw.refresh_index()  # lists gen 1 of one region as flushed
    version = ds.version
    session = connect(root)
    at = as_dict(q(session, f"SELECT id, v, s FROM t VERSION AS OF {version}"))
    assert at == as_dict(mw.scanner(version=version).to_table())
    assert at[1] == (1, "b1") and at[3] == (1, "b3") and 11 not in at
    assert as_dict(q(session, f'SELECT id, v, s FROM "t@{version}"')) == at
    older = as_dict(q(session, f"SELECT id, v, s FROM t VERSION AS OF {version - 1}"))
    assert older == {i: (0, f"a{i}") for i in range(10)}
    plan = session.explain(f"SELECT id FROM t VERSION AS OF {version}")
    assert "consistency=snapshot" in plan and "source=memtable" not in plan


def test_nearest_table_function(table) -> None:
    root, mw, _ = table
    session = connect(root)
    for metric in ("l2", "cosine", "dot"):
        got = q(session, f"SELECT id, _distance FROM nearest('t', 'e', [1.0, 2.0], 4, "
                         f"'{metric}') ORDER BY _distance, id")
        want = mw.nearest("e", [1.0, 2.0], 4, metric=metric).select(["id", "_distance"])
        assert got.num_rows == 4
        assert sorted(got["id"].to_pylist()) == sorted(want["id"].to_pylist())
    got = q(session, "SELECT id, v FROM nearest('t', 'e', [2.0, 2.0], 1)")
    assert got.to_pylist() == [{"id": 2, "v": 2}]  # the MemTable's row, not gen 1's
    with pytest.raises(InvalidInputError):
        q(session, "SELECT * FROM nearest('t', 'e', [1.0, 2.0], 3, 'hamming')")
    with pytest.raises(InvalidInputError):
        q(session, "SELECT * FROM nearest('t', 'e', [1.0, 2.0], 0)")
    with pytest.raises(LanceError):
        q(session, "SELECT * FROM nearest('t', 'e', [1.0, 2.0, 3.0], 3)")


SCRIPT = textwrap.dedent("""
    import shutil, sys, threading
    from pathlib import Path
    import pyarrow as pa
    import lance_sql
    from lance_sql.errors import LanceError
    from lance_sql.format.region_spec import RegionSpec
    from lance_sql.memwal.api import MemWal
    from lance_sql.sql.session import connect

    root = Path(sys.argv[1])
    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk),
                        pa.field("k", pa.int64())])
    ids = pa.array(range(200_000), pa.int64())
    ds = lance_sql.write_dataset(pa.table({"id": ids, "k": pa.compute.bit_wise_and(ids, 7)},
                                          schema=schema), root / "t.lance",
                                 max_rows_per_file=20_000)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), max_wal_flush_interval_ms=3_600_000)
    w = mw.writer()
    w.put(pa.table({"id": pa.array([1, 5, 9], pa.int64()), "k": [3, 3, 3]}, schema=schema))
    w.flush_memtable()
    w.close()
    session = connect(root)
    for _ in range(5):
        got = session.sql("SELECT id FROM t WHERE k = 3 LIMIT 3").to_arrow_table()
        assert got.num_rows == 3, got
    # the first LSM scan of a base version read every fragment's keys (are any held
    # twice?), leaving every data file open in the cache, where an unlinked file still
    # reads: closed first, so that the scan below fails
    from lance_sql.table.runtime.context import current_runtime
    current_runtime().clear("data_files")
    for f in sorted((root / "t.lance" / "data").iterdir())[3:]:
        f.unlink()  # the base table's scan fails part-way
    try:
        session.sql("SELECT sum(k) FROM t").to_arrow_table()
    except LanceError as exc:
        print("typed", type(exc).__name__)
    else:
        raise SystemExit("no error")
    extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()
             and not t.daemon]
    print("threads", extra)
""")


def test_limit_and_failing_queries_leave_no_threads(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "typed " in proc.stdout
    assert "threads []" in proc.stdout


def test_a_version_before_the_mem_wal_index_reads_its_base_table_in_sql_and_python(
        table) -> None:  # fmt: skip
    """Version 1 was written before ``MemWal.initialize`` (version 2): SQL's ``VERSION AS
    OF 1`` reads the plain table then, and the Python reads at that version agree (no
    regions, no generations, none of this process's MemTables)."""
    root, mw, _ = table
    before = 1
    assert lance_sql.dataset(root / "t.lance", before).list_indices() == []
    session = connect(root)
    want = {i: (0, f"a{i}") for i in range(10)}
    assert as_dict(q(session, f"SELECT id, v, s FROM t VERSION AS OF {before}")) == want
    assert as_dict(mw.scanner(["id", "v", "s"], version=before).to_table()) == want
    assert mw.scanner(filter="id = 2", version=before).to_table().column("v").to_pylist() \
        == [0]
    assert mw.scanner(version=before).count_rows() == 10
    view = mw.view(version=before)
    assert view.consistency == "snapshot" and view.base.version == before
    assert "kept 0 of 0 regions" in mw.scanner(version=before).explain()
    keys = pa.table({"id": pa.array([2, 11, 3], pa.int64())})
    got = mw.get(keys, ["id", "v"], version=before)
    sql = q(session, f"SELECT id, v FROM t VERSION AS OF {before} WHERE id IN (2, 11, 3)")
    assert got.to_pylist() == [{"id": 2, "v": 0}, {"id": 3, "v": 0}]
    assert sorted(sql.to_pylist(), key=lambda r: r["id"]) == got.to_pylist()
    near = mw.nearest("e", [2.0, 2.0], 3, columns=["id"], version=before)
    sql = q(session, f"SELECT id FROM nearest('t', 'e', [2.0, 2.0], 3, 'l2', {before})")
    assert sorted(near.column("id").to_pylist()) == sorted(sql.column("id").to_pylist()) \
        == [1, 2, 3]
