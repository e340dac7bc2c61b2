"""The one-key lookup path (``LsmView.lookup_one``, what ``MemWal.get`` and a one-key plan
take) equals the plan nodes' answer (``lookup_plan(...).root``) key by key: keys whose newest
row is in a MemTable, a flushed generation or the base table, deleted in any of them,
unknown keys, keys of no region; int and string keys, with and without the base's BTREE
index, routed by a spec or in a manual region; every projection, system columns too."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import planner

PK = {"lance-schema:unenforced-primary-key": "true"}


def _schema(key: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("id", key, nullable=False, metadata=PK),
                      pa.field("v", pa.string()), pa.field("n", pa.float64())])


def _rows(ids, tag: str, key: pa.DataType) -> pa.Table:
    ids = [int(i) for i in ids]
    keys = [f"k{i:05d}" for i in ids] if pa.types.is_string(key) else ids
    return pa.table({"id": pa.array(keys, key), "v": [f"{tag}{i}" for i in ids],
                     "n": pa.array([None if i % 5 == 0 else i / 2 for i in ids],
                                   pa.float64())}, schema=_schema(key))


def _deletes(ids, key: pa.DataType) -> pa.Table:
    keys = [f"k{int(i):05d}" for i in ids] if pa.types.is_string(key) else [int(i)
                                                                          for i in ids]
    return pa.table({"id": pa.array(keys, key)})


def _changes() -> list[tuple[str, list[int]]]:
    """What ``_build`` writes through the MemWal, in order: ("put <tag>", ids),
    ("delete", ids) or ("flush", [])."""
    rng = np.random.default_rng(2)
    steps: list[tuple[str, list[int]]] = []
    for g in range(2):  # two flushed generations: updates, new keys, deletes
        steps.append((f"put g{g}-", [int(i) for i in rng.choice(500, 80, replace=False)]))
        steps.append(("delete", [int(i) for i in rng.choice(500, 10, replace=False)]))
        steps.append(("flush", []))
    steps.append(("put m-", [int(i) for i in rng.choice(500, 60, replace=False)]))  # MemTable
    steps.append(("delete", [1, 2, 3, 450]))
    steps.append(("put again-", [2]))  # deleted, then put again
    return steps


def _one_key_per_history() -> list[int]:
    """The first key of 0..519 of each distinct history (in the base or not, deleted
    there, then put / deleted in which generation or the MemTable): every case the
    one-key path meets in ``_build``'s table, each once."""
    histories: dict[int, list[str]] = {i: ["base"] for i in range(400)}
    for i in (7, 8):
        histories[i].append("base delete")
    generation = 0
    for what, ids in _changes():
        if what == "flush":
            generation += 1
        for i in ids:
            histories.setdefault(i, []).append(f"{what} in {generation}")
    first: dict[tuple[str, ...], int] = {}
    for i in range(520):
        first.setdefault(tuple(histories.get(i, [])), i)
    return sorted(first.values())


def _build(tmp_path: Path, key: pa.DataType, indexed: bool, manual: bool
           ) -> tuple[MemWal, object]:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(range(400), "b", key), uri, max_rows_per_file=150,
                                 enable_stable_row_ids=True)
    if indexed:
        ds.create_scalar_index("id", "BTREE")
    lance_sql.dataset(uri).delete("v = 'b7' OR v = 'b8'")
    spec = None if manual else RegionSpec.bucket("id", 3)
    mw = MemWal.initialize(lance_sql.dataset(uri), spec, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer(region=uuid.uuid4()) if manual else mw.writer()
    for what, ids in _changes():
        if what == "flush":
            writer.flush_memtable()
        elif what == "delete":
            writer.delete(_deletes(ids, key))
        else:
            writer.put(_rows(ids, what.removeprefix("put "), key))
    return mw, writer


@pytest.mark.slow
@pytest.mark.parametrize(("key", "indexed", "manual"), [
    (pa.int64(), True, False), (pa.int64(), False, False), (pa.string(), True, False),
    (pa.int64(), True, True),
])
def test_one_key_lookup_equals_the_plan(tmp_path: Path, key: pa.DataType, indexed: bool,
                                        manual: bool) -> None:
    mw, writer = _build(tmp_path, key, indexed, manual)
    try:
        view = mw.view()
        projections = [None, ["v"], ["n", "id"], ["id", "_gen", "_region", "_rowaddr"],
                       ["v", "_rowid", "_row_created_at_version"],
                       ["_key", "_rowaddr", "_tombstone"]]
        answered = 0
        for i in [*_one_key_per_history(), 10**6]:
            keys = _deletes([i], key)
            for columns in projections:
                one = view.lookup_one(keys, columns)
                plan = view.lookup_plan(keys, columns)
                nodes = plan.root.to_table()  # the plan's nodes
                assert one is not None
                assert one.schema.equals(nodes.schema) and one.equals(nodes), (i, columns)
                # a one-key plan runs the same way (SQL lookups), its nodes for EXPLAIN
                assert plan.to_table().equals(nodes)
                streamed = list(plan.execute())
                assert pa.Table.from_batches(streamed, nodes.schema).equals(nodes)
                answered += one.num_rows
            got = mw.get(keys)  # the handle's warm view takes this path too
            assert got.equals(view.lookup_plan(keys).root.to_table())
        assert answered > 100  # 19 of the 30 keys have a row, in each projection
    finally:
        writer.close()


def test_one_key_lookup_declines_many_keys_and_checks_its_input(tmp_path: Path) -> None:
    mw, writer = _build(tmp_path, pa.int64(), True, False)
    try:
        view = mw.view()
        assert view.lookup_one(pa.table({"id": pa.array([1, 2], pa.int64())})) is None
        with pytest.raises(lance_sql.errors.InvalidInputError):
            view.lookup_one(pa.table({"x": [1]}))
        with pytest.raises(lance_sql.errors.NotFoundError):
            view.lookup_one(pa.table({"id": [1]}), ["nope"])
        got = mw.get({"id": [5, 6]})  # two keys: one by one (lookup_few)
        assert got.num_rows == 2
    finally:
        writer.close()


@pytest.mark.parametrize(("key", "indexed"), [(pa.int64(), True), (pa.string(), False)])
def test_a_few_keys_are_looked_up_one_by_one(tmp_path: Path, monkeypatch, key: pa.DataType,
                                             indexed: bool) -> None:
    """Up to ONE_BY_ONE_KEYS keys (``MemWal.get``, SQL point lookups) are looked up key by
    key, with no plan built: the plan's rows, in the keys' order, duplicates and unknown
    or deleted keys included; more keys, or a key the one-key path declines, take the
    plan."""
    mw, writer = _build(tmp_path, key, indexed, False)
    try:
        view = mw.view()
        rng = np.random.default_rng(4)
        pool = [*_one_key_per_history(), 10**6]
        plans = []
        original = type(view).lookup_plan

        def counted(self, *args, **kwargs):
            plans.append(1)
            return original(self, *args, **kwargs)

        for n in range(2, planner.ONE_BY_ONE_KEYS + 1):
            ids = [int(i) for i in rng.choice(pool, n)]
            ids[-1] = ids[0]  # a key asked twice answers twice
            keys = _deletes(ids, key)
            for columns in (None, ["v", "_gen"], ["n", "id", "_rowaddr"]):
                want = view.lookup_plan(keys, columns).root.to_table()
                few = view.lookup_few(keys, columns)
                assert few is not None and few.schema.equals(want.schema), (ids, columns)
                assert few.equals(want), (ids, columns)
            want = view.lookup_plan(keys).root.to_table()
            with monkeypatch.context() as m:
                m.setattr(type(view), "lookup_plan", counted)
                assert mw.get(keys).equals(want)
                assert not plans
        many = _deletes(pool[: planner.ONE_BY_ONE_KEYS + 1], key)
        assert view.lookup_few(many) is None
        monkeypatch.setattr(type(view), "lookup_plan", counted)
        assert mw.get(many).num_rows > 0 and plans
        plans.clear()
        # the one-key path declines the second key: the plan answers for all of them
        one = type(view).lookup_one
        monkeypatch.setattr(type(view), "lookup_one", lambda self, k, c=None: None if
                            k.column(0)[0] == many.column(0)[1] else one(self, k, c))
        keys = many.slice(0, 3)
        assert view.lookup_few(keys) is None
        assert mw.get(keys).equals(original(view, keys).root.to_table()) and plans
    finally:
        writer.close()


def test_a_one_key_lookup_plan_reads_the_moment_it_was_made(tmp_path: Path) -> None:
    """A lookup plan reads the MemTable as it was when planned, as a scan does: its
    nodes, run again after a put, still answer the key's row of that moment (a query
    reads one state); a new lookup sees the put."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.string())])
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": [1, 2], "v": ["b1", "b2"]}, schema=schema), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 1),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"id": [3], "v": ["m3"]}, schema=schema))  # a non-empty MemTable
        plan = mw.view().lookup_plan(pa.table({"id": [1]}))
        assert plan.to_table().column("v").to_pylist() == ["b1"]
        writer.put(pa.table({"id": [1], "v": ["new"]}, schema=schema))
        assert plan.root.to_table().column("v").to_pylist() == ["b1"]
        assert mw.get({"id": [1]}).column("v").to_pylist() == ["new"]
        assert mw.view().lookup_plan(pa.table({"id": [1]})).to_table() \
            .column("v").to_pylist() == ["new"]
    finally:
        writer.close()


@pytest.mark.parametrize("key", [pa.int64(), pa.string()])
def test_a_memtable_answers_one_key_from_its_key_index_alone(
        tmp_path: Path, key: pa.DataType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-key path asks a MemTable ``MemTable.lookup_one`` (its key index and a
    one-row slice), never the batch probe and take the plan's nodes use; the answers
    equal the nodes' for keys in the MemTable, deleted there, and elsewhere."""
    from lance_sql.memwal.memtable import MemTable
    from lance_sql.memwal.read.sources import MemTableSource

    mw, writer = _build(tmp_path, key, True, False)
    try:
        view = mw.view()
        keys = [_deletes([i], key) for i in [*range(0, 500, 3), 1, 2, 3, 450]]
        nodes = [view.lookup_plan(k, None).root.to_table() for k in keys]
        calls: list[int] = []
        real = MemTable.lookup_one
        monkeypatch.setattr(MemTable, "lookup_one",
                            lambda self, k, upto=None: calls.append(1) or real(self, k, upto))

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("the batch path was taken for one key")

        monkeypatch.setattr(MemTableSource, "might_hold", refuse)
        monkeypatch.setattr(MemTableSource, "lookup", refuse)
        from_memtable = 0
        for k, expected in zip(keys, nodes, strict=True):
            before = len(calls)
            one = view.lookup_one(k, None)
            assert one is not None and one.equals(expected)
            assert len(calls) > before  # the MemTable was asked through lookup_one
            from_memtable += int(one.num_rows == 1 and
                                 one.column("v")[0].as_py().startswith(("m-", "again-")))
        assert from_memtable > 10
    finally:
        writer.close()


def test_one_key_routes_as_the_many_key_path(tmp_path: Path) -> None:
    """A single key's region (its shortcut in ``_lookup_regions``) is the one the batch
    routing gives the same key asked twice: the same region state, or none (-2) for a
    key whose region does not exist."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(range(50), "b", pa.int64()), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 16),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(_rows([1, 2, 3], "m-", pa.int64()))  # a few of the 16 regions exist
        view = mw.view()
        seen = set()
        for i in [*range(0, 60), 10**6, -5]:
            one_table = view._lookup_keys(pa.table({"id": pa.array([i], pa.int64())}))
            two_table = view._lookup_keys(pa.table({"id": pa.array([i, i], pa.int64())}))
            one, one_index = view.fresh()._lookup_regions(one_table)
            two, two_index = view.fresh()._lookup_regions(two_table)
            assert one_index is not None and two_index is not None
            assert one_index.tolist() == two_index.tolist()[:1]
            got = [one[j].region_id for j in one_index.tolist() if j >= 0]
            want = [two[j].region_id for j in two_index.tolist()[:1] if j >= 0]
            assert got == want
            seen.add(len(got))
            assert view.lookup_one(one_table).equals(view.lookup_plan(one_table).root.to_table())
        assert seen == {0, 1}  # keys of existing regions and of none
    finally:
        writer.close()


def test_the_base_answers_one_key_from_its_index_alone(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """With a BTREE on the key, the one-key path asks the base ``BaseSource.lookup_one``
    (one search, one take), never the batch ``lookup``; its answers equal the plan
    nodes' for keys only in the base, deleted there, and unknown."""
    from lance_sql.memwal.read.sources import BaseSource

    mw, writer = _build(tmp_path, pa.int64(), True, False)
    try:
        view = mw.view()
        projections = [None, ["v"], ["id", "_rowaddr", "_gen", "_tombstone", "_key"],
                       ["n", "_rowid"]]
        cases = [(_deletes([i], pa.int64()), columns)
                 for i in [*range(0, 520, 3), 7, 8, 10**6] for columns in projections]
        nodes = [view.lookup_plan(k, c).root.to_table() for k, c in cases]

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("the batch lookup was taken for one key")

        monkeypatch.setattr(BaseSource, "lookup", refuse)
        from_base = 0
        for (k, columns), expected in zip(cases, nodes, strict=True):
            one = view.lookup_one(k, columns)
            assert one is not None and one.equals(expected), (k, columns)
            if columns is None and one.num_rows:
                from_base += int(one.column("v")[0].as_py().startswith("b"))
        assert from_base > 50
    finally:
        writer.close()


def test_the_base_row_of_a_plain_projection_is_kept_as_taken(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A base-only key's row, for a projection the base row holds in its types, is the
    taken row's columns as they are (no per-column rebuild through ``_one_column``); it
    equals the plan nodes' answer. Projections naming ``_gen``/``_tombstone``/``_key``
    still take the general build, equal too."""
    from lance_sql.memwal.read import planner

    mw, writer = _build(tmp_path, pa.int64(), True, False)
    try:
        view = mw.view()
        plain = [None, ["v"], ["n", "id"], ["id", "_rowaddr", "_rowid"]]
        general = [["id", "_gen", "_region"], ["v", "_tombstone", "_key"]]
        ids = [*range(0, 400, 3), 7, 8, 10**6]
        cases = [(_deletes([i], pa.int64()), c) for i in ids for c in [*plain, *general]]
        nodes = [view.lookup_plan(k, c).root.to_table() for k, c in cases]
        built = planner._one_column
        calls = {"general": 0}

        def counted(*args: object, **kwargs: object) -> pa.Array:
            calls["general"] += 1
            return built(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(planner, "_one_column", counted)
        base_rows = 0
        for (k, columns), expected in zip(cases, nodes, strict=True):
            gen = view.lookup_one(k, ["_gen"])
            only_base = columns in plain and gen is not None and gen.num_rows == 1 and \
                gen.column("_gen")[0].as_py() == -1
            before = calls["general"]
            one = view.lookup_one(k, columns)
            assert one is not None and one.equals(expected), (k, columns)
            assert one.schema.equals(expected.schema, check_metadata=True)
            if only_base:
                base_rows += 1
                assert calls["general"] == before, (k, columns)  # kept as taken
            if columns in general and one.num_rows:
                assert calls["general"] > before
        assert base_rows > 100
    finally:
        writer.close()


def test_fresh_views_share_what_the_base_version_fixes(tmp_path: Path) -> None:
    """A warm view's fresh copies share the column lists found valid, the spec's source
    names and the generations' store keys (they depend on the base version only): the
    lookups are the same from every copy, names still unknown are refused every time,
    and each kept key is the one the region's paths give."""
    from lance_sql.memwal.naming import RegionPaths

    mw, writer = _build(tmp_path, pa.int64(), True, False)
    try:
        first = mw.view()
        expected = {i: first.lookup_plan(_deletes([i], pa.int64()), ["v", "id"]).root.to_table()
                    for i in range(0, 500, 37)}
        for _ in range(3):
            view = first.fresh()
            for i, nodes in expected.items():
                assert view.lookup_one(_deletes([i], pa.int64()), ["v", "id"]).equals(nodes)
            for _ in range(2):
                with pytest.raises(lance_sql.errors.NotFoundError):
                    view.lookup_one(_deletes([1], pa.int64()), ["v", "nope"])
        assert view._valid_columns is first._valid_columns
        assert ("v", "id") in first._valid_columns
        assert ("v", "nope") not in first._valid_columns
        assert first._spec_names == [["id"]]
        kept = first._generation_keys
        assert kept and view._generation_keys is kept
        for (region, path), key in kept.items():
            assert key == RegionPaths(region).generation(path)
    finally:
        writer.close()


def test_kept_column_lists_refuse_what_is_not_a_name(tmp_path: Path) -> None:
    """A column list holding something that is not a name (a list, say) is the
    NotFoundError of an unknown column, every time, not a TypeError of the memo of
    column lists found valid; one-pass iterables of names are read once."""
    mw, writer = _build(tmp_path, pa.int64(), True, False)
    try:
        view = mw.view()
        expected = view.lookup_one(_deletes([7], pa.int64()), ["v", "id"])
        for _ in range(2):
            with pytest.raises(lance_sql.errors.NotFoundError):
                view.lookup_one(_deletes([7], pa.int64()), ["v", ["id"]])  # type: ignore[list-item]
            got = view.lookup_one(_deletes([7], pa.int64()), iter(["v", "id"]))
            assert got.equals(expected)
    finally:
        writer.close()
