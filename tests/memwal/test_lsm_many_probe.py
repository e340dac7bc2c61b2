"""Lookups of many keys answered with every newer source probed at once
(:mod:`lance_sql.memwal.read.many`): the same table as the plan's nodes give, row for row
and column for column (``_gen``, ``_region``, ``_rowaddr`` too), and as the LSM scan, with
tombstones in generations and in MemTables, keys deleted and put again, repeated and
absent keys, keys routed to regions and (a spec on a non-key column) keys of any region;
and the path is taken (its counter), from Python and from SQL ``IN``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.memtable import MemTable
from lance_sql.memwal.read import many as many_mod
from lance_sql.memwal.read.many import MANY_KEYS
from lance_sql.memwal.read.sources import GenerationSource, MemTableSource
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("cat", pa.int32()),
                    pa.field("s", pa.string())])
N = 20_000


def _rows(ids, tag: int, cat: int | None = None) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    cats = (ids % 3).astype(np.int32) if cat is None else np.full(ids.size, cat, np.int32)
    return pa.table({"id": ids, "v": ids * 1.0 + tag, "cat": cats,
                     "s": pa.array([f"t{tag}-{i}" for i in ids.tolist()])}, schema=SCHEMA)


def _delete(writer, ids, cat: int | None = None) -> None:
    ids = np.asarray(ids, np.int64)
    if cat is None:
        writer.delete(pa.table({"id": pa.array(ids, pa.int64())}))
    else:  # a spec on cat routes deletes by it too
        writer.delete(pa.table({"id": pa.array(ids, pa.int64()),
                                "cat": pa.array(np.full(ids.size, cat, np.int32))}))


def _base(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(np.arange(N), 0), uri, max_rows_per_file=7_000)
    ds.create_scalar_index("id", "BTREE")
    return uri


@pytest.fixture(scope="module")
def routed(tmp_path_factory) -> MemWal:
    """Bucketed on the key: 4 regions, 3 flushed generations, a MemTable; tombstones in
    generations and in the MemTable, keys deleted then put again."""
    uri = _base(tmp_path_factory.mktemp("routed"))
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 4),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(5)
    writer = mw.writer()
    for g in range(1, 4):
        writer.put(_rows(np.r_[rng.choice(N, 1500, replace=False),
                               N + 100 * g + np.arange(50)], g))
        _delete(writer, rng.choice(N, 200, replace=False))
        writer.put(_rows(np.arange(g * 10, g * 10 + 5), g))  # put again after deletes
        writer.flush_memtable()
    writer.put(_rows(rng.choice(N, 800, replace=False), 9))
    _delete(writer, np.r_[rng.choice(N, 100, replace=False), [10, 11]])  # MemTable tombstones
    yield mw
    writer.close()


@pytest.fixture(scope="module")
def unrouted(tmp_path_factory) -> MemWal:
    """Regions by ``cat`` (not a key column): a key's rows move between regions, so each
    key may live in any region."""
    uri = _base(tmp_path_factory.mktemp("unrouted"))
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.identity("cat"),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(8)
    writer = mw.writer()
    moved = rng.choice(N, 600, replace=False)
    for g in range(1, 3):
        writer.put(_rows(moved, g, cat=g))  # the same keys, another region each time
        writer.put(_rows(rng.choice(N, 500, replace=False), g))
        _delete(writer, moved[:50], cat=g)
        writer.flush_memtable()
    writer.put(_rows(moved[100:300], 7, cat=0))
    _delete(writer, moved[300:320], cat=1)
    yield mw
    writer.close()


def _keys(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.r_[rng.integers(-30, N + 500, 1200), [10, 10, 11, 12, 12, -1, N + 101]]
    return pa.table({"id": pa.array(ids, pa.int64())})


def _model(mw: MemWal) -> dict[int, tuple]:
    whole = mw.scanner(columns=["id", "v", "s"]).to_table()
    return {i: (i, v, s) for i, v, s in zip(*(whole.column(c).to_pylist()
                                              for c in ("id", "v", "s")), strict=True)}


@pytest.mark.parametrize("which", ["routed", "unrouted"])
@pytest.mark.parametrize("columns", [None, ["s", "_gen", "_region", "_rowaddr", "id"]])
def test_many_keys_equal_the_nodes_and_the_scan(which: str, columns, routed: MemWal,
                                                unrouted: MemWal) -> None:
    mw = routed if which == "routed" else unrouted
    keys = _keys(3)
    plan = mw.view().lookup_plan(keys, columns)
    assert plan.many is not None
    fast = plan.many.to_table()
    nodes = plan.root.to_table()  # the CoalesceFirstExec over the per-source nodes
    assert plan.many.runs == 1
    assert fast.schema.equals(nodes.schema)
    assert fast.equals(nodes)
    assert fast.num_rows > 800
    got = mw.get(keys)
    assert got.equals(mw.view().lookup_plan(keys).root.to_table())
    if columns is not None:  # the base, generations and the MemTable all answered
        gens = set(fast.column("_gen").to_pylist())
        assert -1 in gens and len(gens) >= 3
    # unrouted too: a key written to several regions is one row in the scan, the one
    # the lookup gives (the DeduplicateExec order across regions)
    model = _model(mw)
    expected = [model[k] for k in keys.column("id").to_pylist() if k in model]
    assert list(zip(*(got.column(c).to_pylist() for c in ("id", "v", "s")),
                    strict=True)) == expected


def test_the_newest_source_wins_in_every_case(routed: MemWal) -> None:
    """Keys put again after a delete, deleted in the MemTable, and in several sources:
    the answer is the newest row (or none)."""
    keys = pa.table({"id": pa.array(np.r_[np.arange(10, 40), np.arange(N, N + 500)]
                                    .astype(np.int64))})
    plan = routed.view().lookup_plan(keys, ["id", "v", "_gen"])
    fast = plan.many.to_table()
    assert fast.equals(plan.root.to_table())
    got = dict(zip(fast.column("id").to_pylist(), fast.column("v").to_pylist(), strict=True))
    assert 10 not in got and 11 not in got  # deleted in the MemTable
    assert got[12] == 12 + 1.0 and got[22] == 22 + 2.0 and got[32] == 32 + 3.0
    assert got[N + 301] == N + 301 + 3.0  # a new key of generation 3


def test_sql_in_takes_the_probe(routed: MemWal, monkeypatch) -> None:
    runs: list[int] = []
    to_table = many_mod.ManyKeyLookup.to_table

    def counted(self):
        runs.append(self.keys.num_rows)
        return to_table(self)

    monkeypatch.setattr(many_mod.ManyKeyLookup, "to_table", counted)
    ids = np.unique(_keys(11).column("id").to_numpy())
    session = lance_sql.connect(str(Path(routed.dataset.uri).parent))
    listed = ", ".join(map(str, ids.tolist()))
    got = session.sql(f"SELECT id, v, s FROM t WHERE id IN ({listed}) ORDER BY id"
                      ).to_arrow_table()
    model = _model(routed)
    assert list(zip(*(got.column(c).to_pylist() for c in ("id", "v", "s")),
                    strict=True)) == [model[k] for k in ids.tolist() if k in model]
    assert runs == [ids.size]


def test_few_keys_and_other_keys_take_the_nodes(routed: MemWal, tmp_path: Path,
                                                monkeypatch) -> None:
    few = pa.table({"id": pa.array(np.arange(many_mod.MANY_KEYS - 1), pa.int64())})
    assert routed.view().lookup_plan(few).many is None
    enough = pa.table({"id": pa.array(np.arange(many_mod.MANY_KEYS), pa.int64())})
    assert routed.view().lookup_plan(enough).many is not None
    assert f"ManyKeyProbe: {many_mod.MANY_KEYS} keys" in routed.view().lookup_plan(
        enough).explain()
    assert "ManyKeyProbe" not in routed.view().lookup_plan(few).explain()
    # generations too large for a directory: the nodes, with the same answer
    expected = routed.view().lookup_plan(enough).to_table()
    monkeypatch.setattr(many_mod, "MAX_DIRECTORY_KEYS", 1000)
    plan = routed.view().lookup_plan(enough)
    assert plan.many is None and plan.to_table().equals(expected)
    schema = pa.schema([pa.field("k", pa.string(), nullable=False, metadata=PK),
                        pa.field("n", pa.int64())])
    uri = str(tmp_path / "s.lance")
    lance_sql.write_dataset(pa.table({"k": [f"k{i}" for i in range(500)],
                                      "n": list(range(500))}, schema=schema), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("k", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(pa.table({"k": ["k1", "k2"], "n": [10, 20]}, schema=schema))
        w.flush_memtable()
        plan = mw.view().lookup_plan(pa.table({"k": [f"k{i}" for i in range(100)]}))
        assert plan.many is not None  # hashed keys: the probe confirms them too
        assert plan.to_table().column("n").to_pylist()[:3] == [0, 10, 20]
        assert plan.many.runs == 1 and plan.many.to_table().equals(plan.root.to_table())
    float_schema = pa.schema([pa.field("f", pa.float64(), nullable=False, metadata=PK),
                              pa.field("n", pa.int64())])
    uri = str(tmp_path / "f.lance")
    lance_sql.write_dataset(pa.table({"f": [i / 2 for i in range(50)],
                                      "n": list(range(50))}, schema=float_schema), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("f", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as w:
        w.put(pa.table({"f": [0.5], "n": [7]}, schema=float_schema))
        plan = mw.view().lookup_plan(pa.table({"f": [0.0, 0.5, 1.0]}))
        assert plan.many is None  # other key types: the nodes
        assert plan.to_table().column("n").to_pylist() == [0, 7, 2]


@pytest.mark.parametrize("which", ["routed", "unrouted"])
def test_memtables_probed_by_key_codes_equal_the_key_table_probe(
        which: str, routed: MemWal, unrouted: MemWal, monkeypatch) -> None:
    """Each MemTable is probed by the keys' codes alone (counted), and the rows are the
    same as when it is probed with the key table (MemTable.lookup) and as the nodes'."""
    mw = routed if which == "routed" else unrouted
    columns = ["s", "_gen", "_region", "_rowaddr", "id", "v"]
    held = [s.memtable.to_table().column("id") for s in
            mw.view().lookup_plan(_keys(6), columns).many.sources
            if isinstance(s, MemTableSource)]
    keys = pa.table({"id": pa.concat_arrays([_keys(6).column("id").combine_chunks(),
                                             *(h.combine_chunks()[:60] for h in held)])})
    plan = mw.view().lookup_plan(keys, columns)
    assert plan.many is not None
    probes = many_mod.CODE_PROBES[0]
    fast = plan.many.to_table()
    assert many_mod.CODE_PROBES[0] > probes
    tag = np.array(fast.column("v").to_pylist()) - np.array(fast.column("id").to_pylist())
    if which == "routed":  # (unrouted: the moved keys' older rows in listed-first
        assert (tag == 9).sum() >= 20  # regions win, as the nodes' coalesce picks them)
    monkeypatch.setattr(MemTable, "lookup_codes", lambda self, codes, key_type, upto=None: None)
    probes = many_mod.CODE_PROBES[0]
    general = mw.view().lookup_plan(keys, columns).many.to_table()
    assert many_mod.CODE_PROBES[0] == probes
    assert fast.equals(general)
    assert fast.equals(plan.root.to_table())


@pytest.mark.parametrize("joined", [True, False])
def test_rows_taken_from_the_joined_generations_equal_a_take_from_each(
        joined: bool, routed: MemWal, monkeypatch) -> None:
    """The generations' rows joined in the key directory (one take for every winner)
    or, too large to join, taken generation by generation: the same rows as the nodes,
    and the joined take counted only when used."""
    cache = current_runtime().cache
    cache.clear("lsm_key_directories")  # built again, with or without the joined rows
    if not joined:
        monkeypatch.setattr(many_mod, "MAX_JOINED_ROW_BYTES", 0)
    keys = _keys(4)
    plan = routed.view().lookup_plan(keys, ["s", "_gen", "_region", "_rowaddr", "id", "v"])
    assert plan.many is not None
    takes = many_mod.JOINED_TAKES[0]
    fast = plan.many.to_table()
    regions = {s.region_index for s in plan.many.sources[1:]}
    # one joined take per region whose generations win a key
    assert (1 <= many_mod.JOINED_TAKES[0] - takes <= len(regions)) if joined else \
        many_mod.JOINED_TAKES[0] == takes
    assert fast.equals(plan.root.to_table())
    assert len(set(fast.column("_gen").to_pylist()) - {-1}) >= 3  # several generations
    cache.clear("lsm_key_directories")


def test_repeats_count_each_keys_entries() -> None:
    """Entries equal to each wanted code, found from its left search, for codes held
    once, several times, not at all, below the first and past the last."""
    codes = np.array([2, 2, 2, 5, 7, 7, 9], np.int64)
    wanted = np.array([7, 1, 2, 9, 10, 5, 6, 2], np.int64)
    lo = np.searchsorted(codes, wanted, "left")
    expected = np.searchsorted(codes, wanted, "right") - lo
    assert many_mod._repeats(codes, wanted, lo).tolist() == expected.tolist() == \
        [2, 0, 3, 1, 0, 1, 0, 3]
    empty = np.zeros(0, np.int64)
    assert many_mod._repeats(empty, wanted, np.zeros(wanted.size, np.int64)).sum() == 0


def test_the_key_directories_are_built_once(routed: MemWal) -> None:
    """A lookup over every region searches one directory of all the generations; a lookup
    whose keys touch some regions only (the others pruned) one directory per region, so
    lookups of other keys, touching other sets of regions, build none again; the rows
    are the nodes' either way."""
    cache = current_runtime().cache
    cache.clear("lsm_key_directories")
    misses = cache.stats()["lsm_key_directories"].misses
    keys = _keys(21)
    plan = routed.view().lookup_plan(keys)
    assert plan.many is not None and plan.many.every_region
    first = plan.to_table()
    assert first.equals(plan.root.to_table())
    assert cache.stats()["lsm_key_directories"].entries == 1
    assert routed.get(keys).equals(first)
    # keys of one region (a generation of a region routed by key holds its keys), then
    # of two: one directory per region, each built once
    held = [s.key_rows().keys[0] for s in plan.many.sources[1:]
            if isinstance(s, GenerationSource)]
    by_region = {}
    for s, k in zip([s for s in plan.many.sources[1:] if isinstance(s, GenerationSource)],
                    held, strict=True):
        by_region.setdefault(s.region, k)
    a, b = list(by_region.values())[:2]
    for ids in (a[:MANY_KEYS], a[MANY_KEYS:40], pa.concat_arrays([a[:5], b[:5]]),
                b[10:30]):
        few_plan = routed.view().lookup_plan(pa.table({"id": ids}))
        assert few_plan.many is not None and not few_plan.many.every_region
        fewer = few_plan.many.to_table()
        assert fewer.equals(few_plan.root.to_table()) and fewer.num_rows
    stats = cache.stats()["lsm_key_directories"]
    assert stats.entries == 3  # all the generations, region a's, region b's
    assert stats.misses == misses + 3



@pytest.mark.parametrize("region", [0, 2, -2])
def test_keys_are_asked_only_of_their_region(routed: MemWal, region: int) -> None:
    """Keys routed to one region (or to none: -2) are asked of that region's sources and
    the base only, as the nodes ask them, even where another region holds the key."""
    from lance_sql.memwal.read.keys import Keys
    from lance_sql.memwal.read.nodes import (
        BloomFilterGuardExec,
        CoalesceFirstExec,
        ProjectionExec,
        TakeLastExec,
    )

    table = _keys(17)
    output = ["id", "v", "_gen", "_region"]
    plan = routed.view().lookup_plan(table, output)
    assert plan.many is not None
    sources, schema = plan.many.sources, plan.many.schema
    keys = Keys(table, np.full(table.num_rows, region, np.int64))
    base = TakeLastExec(sources[0], schema, keys)
    children = [BloomFilterGuardExec(s, TakeLastExec(s, schema, keys)) for s in sources[1:]]
    nodes = ProjectionExec(CoalesceFirstExec([*children, base], keys), output).to_table()
    fast = many_mod.ManyKeyLookup(sources, schema, output, keys, base).to_table()
    assert fast.equals(nodes)
    regions = set(fast.column("_region").to_pylist()) - {None}
    if region == -2:
        assert not regions and set(fast.column("_gen").to_pylist()) == {-1}
    else:  # only the one region answered
        assert regions == {str(s.region) for s in sources[1:] if s.region_index == region}
    assert not fast.equals(plan.many.to_table())  # other regions' newer rows not seen


def test_many_keys_route_by_number_as_the_join_and_the_dictionary(routed: MemWal,
                                                                   monkeypatch) -> None:
    """Many keys of a bucket spec find their region by a search of the known region
    values (no join), bucketed in numpy (no region values table): the same position
    for every key as from the region values table, as the join gives, and as the
    few-keys dictionary gives key by key; values of no known region give -1, and
    nullable or non-integer region values are left to the join."""
    from lance_sql.memwal.read import planner as planner_mod

    view = routed.view()
    keys = pa.table({"id": pa.array(np.r_[np.arange(-40, 1200), [N + 101, 2**62]],
                                    pa.int64())})
    taken: list[bool] = []
    inner = planner_mod._route_numbers

    def spied(values, where):
        out = inner(values, where)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(planner_mod, "_route_numbers", spied)
    bucketed: list[bool] = []
    inner_bucket = planner_mod.bucket_numbers
    monkeypatch.setattr(planner_mod, "bucket_numbers", lambda spec, columns: (
        bucketed.append(True), inner_bucket(spec, columns))[1])
    by_bucket = view._route(keys)  # bucketed in numpy, no region values table
    assert bucketed == [True] and taken == [] and by_bucket is not None
    monkeypatch.setattr(planner_mod, "bucket_numbers", lambda spec, columns: None)
    by_number = view._route(keys)
    assert taken == [True] and by_number is not None
    assert np.array_equal(by_bucket, by_number)
    assert set(by_number.tolist()) == set(range(4))  # four regions, every key in one
    monkeypatch.setattr(planner_mod, "_route_numbers", lambda values, where: None)
    assert np.array_equal(by_number, view._route(keys))  # the join
    few = np.concatenate([view._route(keys.slice(i, 16))
                          for i in range(0, keys.num_rows, 16)])  # the dictionary
    assert np.array_equal(by_number, few)
    values = pa.table({"f": pa.array([0, 1, 2, 3, 1], pa.int32())})
    assert inner(values, {(1,): 5, (3,): 7}).tolist() == [-1, 5, -1, 7, 5]
    assert inner(pa.table({"f": pa.array([1, None], pa.int32())}), {(1,): 5}) is None
    assert inner(pa.table({"f": pa.array(["a"])}), {("a",): 5}) is None


STRING_SCHEMA = pa.schema([pa.field("k", pa.string(), nullable=False, metadata=PK),
                           pa.field("n", pa.int64())])


def _string_rows(ids, tag: int) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"k": [f"key-{i:05d}" for i in ids.tolist()], "n": ids * 10 + tag},
                    schema=STRING_SCHEMA)


def _string_keys() -> pa.Table:
    rng = np.random.default_rng(4)
    ids = np.r_[rng.integers(-20, 3_300, 700), [5, 5, 6, -3]]  # absent and repeated too
    return pa.table({"k": [f"key-{i:05d}" for i in ids.tolist()]})


def _string_table(tmp_path: Path, memtable: bool):
    """String keys bucketed into 3 regions: flushed generations with updates, new keys and
    tombstones (and a MemTable with more of each when ``memtable``)."""
    uri = str(tmp_path / "strings.lance")
    ds = lance_sql.write_dataset(_string_rows(np.arange(3_000), 0), uri)
    ds.create_scalar_index("k", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("k", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(6)
    writer = mw.writer()
    for g in range(1, 4):
        writer.put(_string_rows(np.r_[rng.choice(3_000, 300, replace=False),
                                      3_000 + 50 * g + np.arange(20)], g))
        writer.delete(_string_rows(rng.choice(3_000, 40, replace=False), g).select(["k"]))
        writer.flush_memtable()
    if memtable:
        writer.put(_string_rows(rng.choice(3_100, 200, replace=False), 9))
        writer.delete(_string_rows(np.r_[rng.choice(3_000, 30, replace=False), [6]], 9)
                      .select(["k"]))
    return mw, writer


def test_string_keys_take_the_probe_and_equal_the_nodes(tmp_path: Path) -> None:
    """Many string keys: the probe answers (its hash codes confirmed against the keys
    held), the same table as the nodes, generations, MemTable and base all answering."""
    mw, writer = _string_table(tmp_path, memtable=True)
    try:
        keys = _string_keys()
        for columns in (None, ["k", "n", "_gen", "_region", "_rowaddr"]):
            plan = mw.view().lookup_plan(keys, columns)
            assert plan.many is not None
            fast = plan.many.to_table()
            assert plan.many.runs == 1
            nodes = plan.root.to_table()
            assert fast.schema.equals(nodes.schema) and fast.equals(nodes)
            assert fast.num_rows > 500
        gens = set(mw.view().lookup_plan(keys, ["_gen"]).many.to_table()
                   .column("_gen").to_pylist())
        assert -1 in gens and len(gens) >= 4  # the base, generations and the MemTable
        assert mw.get(keys).equals(mw.view().lookup_plan(keys).root.to_table())
    finally:
        writer.close()


def test_string_keys_sharing_a_hash_code_are_told_apart(tmp_path: Path,
                                                        monkeypatch) -> None:
    """Hash codes of string keys that collide (forced: 8 codes for every key) find entries
    of other keys in the directories; each is confirmed against its key, so the answer is
    the one without collisions."""
    mw, writer = _string_table(tmp_path, memtable=False)
    try:
        keys = _string_keys()
        expected = mw.view().lookup_plan(keys).root.to_table()
        assert expected.num_rows > 500
        from lance_sql.memwal import memtable as memtable_mod
        from lance_sql.memwal.read import keys as keys_mod
        real = keys_mod.key_hashes

        def colliding(columns):
            return real(columns) & np.uint64(7)

        current_runtime().cache.clear()  # directories and key sets built again, colliding
        with monkeypatch.context() as m:
            m.setattr(keys_mod, "key_hashes", colliding)
            m.setattr(memtable_mod, "key_hashes", colliding)
            before = many_mod.CODE_COLLISIONS[0]
            plan = mw.view().lookup_plan(keys)
            assert plan.many is not None
            assert plan.many.to_table().equals(expected)
            assert many_mod.CODE_COLLISIONS[0] - before > 1000
    finally:
        current_runtime().cache.clear()  # no colliding key sets left for other tests
        writer.close()


@pytest.mark.parametrize("columns", [["_key", "_tombstone", "_rowid", "v"],
                                     ["cat", "_region", "_gen", "_key"], ["s"]])
def test_system_and_tag_columns_equal_the_nodes(routed: MemWal, columns) -> None:
    """The answers put in the keys' order by one take, with ``_gen`` / ``_region`` /
    ``_key`` made per answer and ``_tombstone`` / ``_rowid`` (NULL or false where a
    source lacks them): the nodes' table, column for column, with every source
    answering (the base, generations, the MemTable)."""
    keys = _keys(11)
    plan = routed.view().lookup_plan(keys, columns)
    assert plan.many is not None
    fast = plan.many.to_table()
    nodes = plan.root.to_table()
    assert fast.schema.equals(nodes.schema)
    assert fast.equals(nodes)
    assert fast.num_rows > 800
    if "_key" in columns:  # each answer's key, in the keys' order
        asked = fast.column("_key").to_pylist()
        assert asked == sorted(asked) and len(set(asked)) == len(asked)


def test_deleted_base_rows_and_a_compacted_order_equal_the_nodes(tmp_path: Path) -> None:
    """Many keys over a base table with deleted rows (the take leaves them out) and
    with a key appended again (its newest row, the last in the table's order, wins):
    rows in the table's order take one search of their codes; the answers equal the
    nodes' and a model's, keys asked twice answered twice."""
    uri = _base(tmp_path)
    lance_sql.dataset(uri).delete("id >= 100 AND id < 140")
    lance_sql.write_dataset(_rows([7, 150, 9_000], 5), uri, mode="append")
    ds = lance_sql.dataset(uri)
    ds.create_scalar_index("id", "BTREE", replace=True)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 4),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as writer:
        writer.put(_rows([8, 120], 9))
        writer.flush_memtable()
        writer.put(_rows([150, 121], 8))
        ids = pa.array([7, 8, 99, 100, 120, 121, 139, 150, 150, 9_000, 7, N + 5, 140],
                       pa.int64())
        plan = mw.view().lookup_plan(pa.table({"id": ids}), ["id", "v", "_gen"])
        assert plan.many is not None
        fast = plan.many.to_table()
        assert fast.equals(plan.root.to_table())
        got = list(zip(fast.column("id").to_pylist(), fast.column("v").to_pylist(),
                       strict=True))
        assert got == [(7, 12.0), (8, 17.0), (99, 99.0), (120, 129.0), (121, 129.0),
                       (150, 158.0), (150, 158.0), (9_000, 9_005.0), (7, 12.0),
                       (140, 140.0)]
