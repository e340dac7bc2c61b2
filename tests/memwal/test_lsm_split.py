"""The LSM view cut into base parts (fragment ranges) and region parts: together they are
the view, the base table is read once, and no part needs another part's rows."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pytest
from lsm_split_helpers import SCHEMA, lsm_table, rows

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal import MemWal
from lance_sql.memwal.read import split as split_module
from lance_sql.memwal.read.nodes import ExecNode, ScanExec, format_plan
from lance_sql.memwal.read.planner import LsmView
from lance_sql.memwal.read.split import (
    FragmentRange,
    LsmSplit,
    PartBaseSource,
    base_plan,
    plan_split,
    region_plan,
)
from lance_sql.memwal.routing import region_id_for
from lance_sql.memwal.transforms import region_values
from lance_sql.table.runtime.context import current_runtime


def _base_source(node: ExecNode) -> PartBaseSource:
    """The base source a base part's plan scans."""
    while not isinstance(node, ScanExec):
        node = node.children[0]
    assert isinstance(node.source, PartBaseSource)
    return node.source


def _canonical(table: pa.Table) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


def _ranges(view: LsmView, cut: int) -> list[list[FragmentRange]]:
    """The base's fragments cut into ranges of at most ``cut`` rows, in groups of two
    ranges (a group: one base part)."""
    pieces = [FragmentRange(f.id, s, min(f.physical_rows, s + cut))
              for f in view.base.manifest.fragments for s in range(0, f.physical_rows, cut)]
    return [pieces[i:i + 2] for i in range(0, len(pieces), 2)]


def _read(view: LsmView, split: LsmSplit, columns: list[str] | None, where: str | None,
          cut: int = 7) -> list[pa.Table]:
    out = [base_plan(view, group, split.masks, columns, where).to_table()
           for group in _ranges(view, cut)]
    for part in split.regions:
        node = region_plan(view, part, columns, where)
        assert node is not None
        out.append(node.to_table())
    return out


FILTERS = [None,
           "v LIKE 'base%'",              # stale rows: keys updated since must not show
           "g = 0 AND v < 'second9'",
           "id IN (2, 7, 50, 61)",        # updated, deleted, deleted+new, new
           "id = 3",
           "v IS NULL OR id > 38"]
COLUMNS = [None, ["v", "id"], ["v"], ["id", "_rowid", "_rowaddr"]]


# (a BTREE index on the key, whether base parts may use it to find hidden rows)
INDEXING = [(False, False), (True, False), (True, True)]


@pytest.mark.slow
@pytest.mark.parametrize(("indexed", "use_index"), INDEXING)
@pytest.mark.parametrize("buckets", [3, 64])
def test_the_parts_together_are_the_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         buckets: int, indexed: bool, use_index: bool
                                         ) -> None:
    """Every filter and projection, with and without a BTREE index on the key (hidden
    base rows found in it, or keys compared), fragments cut into ranges: the parts'
    rows are the view's, each once."""
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", buckets))
    if indexed:
        mw.dataset.create_scalar_index("id", "BTREE")
        mw = MemWal(lance_sql.dataset(mw.dataset.uri))
    monkeypatch.setattr(split_module, "INDEX_RATIO", 0 if use_index else 1 << 30)
    view = mw.view()
    found = _base_source(base_plan(view, _ranges(view, 7)[0], plan_split(view).masks))
    assert (found.key_index() is not None) == use_index
    for where in FILTERS:
        split = plan_split(view, where)
        for columns in COLUMNS:
            got = pa.concat_tables(_read(view, split, columns, where))
            want = mw.scanner(columns, filter=where).to_table()
            assert got.column_names == want.column_names
            assert _canonical(got) == _canonical(want), (where, columns)
        counted = sum(t.num_rows for t in _read(view, split, [], where))
        assert counted == mw.scanner(filter=where).count_rows()
    every = {r["id"]: r["v"] for t in _read(view, plan_split(view), None, None)
             for r in t.to_pylist()}
    assert every[2] == "third2" and every[5] == "second5" and every[0] == "first0"
    assert 7 not in every and 50 not in every and 20 not in every
    assert every[61] == "third61" and every[39] == "base39"


def test_region_parts_hold_their_regions_rows_and_base_parts_base_rows(tmp_path: Path
                                                                        ) -> None:
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    view = mw.view()
    split = plan_split(view)
    spec = mw.region_spec
    assert spec is not None
    # a part per region with generations not merged yet (one of the three has none)
    unmerged = {r.region_id for r in view.regions(None)
                if any(g > view.details.merged_generation(r.region_id) for g, _ in r.flushed)}
    assert len(unmerged) == 2
    assert {p.region for p in split.regions} == unmerged
    assert set(split.masks) == {g for p in split.regions for g in p.generations}
    for part in split.regions:
        node = region_plan(view, part, ["id", "_rowid"])
        assert node is not None
        got = node.to_table()
        values = region_values(spec, [got.column("id").combine_chunks()], got.num_rows)
        assert {region_id_for(spec, values, r) for r in range(got.num_rows)} == {part.region}
        assert got.column("_rowid").null_count == got.num_rows  # not merged yet
        plan = format_plan(node)
        labels = {f"region_{p.region.hex[:8]}" for p in split.regions}
        assert [x for x in labels if x in plan] == [f"region_{part.region.hex[:8]}"]
        assert "DeduplicateExec" in plan and "base_table" not in plan
    for group in _ranges(view, 7):
        plan = base_plan(view, group, split.masks, ["id"])
        assert format_plan(plan).count("ScanExec") == 1  # the base alone; keys mask it
        got = plan.to_table()
        assert got.num_rows <= sum(r.stop - r.start for r in group)


@pytest.mark.parametrize(("indexed", "use_index"), INDEXING)
def test_each_base_fragment_is_read_once_per_full_read(monkeypatch: pytest.MonkeyPatch,
                                                       indexed: bool, use_index: bool
                                                       ) -> None:
    """Each part run as a fresh executor (the process's caches cleared first): every base
    data file is read by exactly one part, once; the old one-part-per-region split read
    each of them once per region."""
    monkeypatch.setattr(split_module, "INDEX_RATIO", 0 if use_index else 1 << 30)
    name = f"lsm-split-once-{indexed}-{use_index}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    lance_sql.write_dataset(rows(list(range(120)), "base"), uri, max_rows_per_file=25)
    if indexed:
        lance_sql.dataset(uri).create_scalar_index("id", "BTREE")
    mw = lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 4))
    with mw.writer() as w:
        w.put(rows(list(range(0, 150, 4)), "new"))
        w.delete(pa.table({"id": pa.array([1, 5, 9], pa.int64())}))
        w.flush_memtable()
        w.put(rows(list(range(0, 150, 6)), "newer"))
        w.flush_memtable()
    mw = MemWal(lance_sql.dataset(uri))
    view = mw.view()
    split = plan_split(view)
    assert len(split.regions) == 4
    base_files = {f"data/{d.path}" for f in view.base.manifest.fragments for d in f.files}
    assert len(base_files) == 5
    store = MemoryStore(name)
    touched: list[str] = []
    store.add_hook(lambda op, key: touched.append(key))
    reads: collections.Counter[str] = collections.Counter()
    tables = []
    try:
        # each part handed the base's superseded rows as planned (as Spark's tasks are):
        # found once by plan_split, not by every part reading every key
        ranges = [[FragmentRange(f.id, 0, f.physical_rows)]
                  for f in view.base.manifest.fragments]
        plans = [base_plan(view, r, split.masks, superseded=split.superseded_in(r))
                 for r in ranges]
        plans += [region_plan(view, p) for p in split.regions]  # type: ignore[misc]
        for plan in plans:
            current_runtime().clear()
            touched.clear()
            tables.append(plan.to_table())
            reads.update(k for k in touched if k in base_files)
    finally:
        store.clear_hooks()
    assert reads == dict.fromkeys(base_files, 1)
    assert _canonical(pa.concat_tables(tables)) == _canonical(mw.scanner().to_table())


def test_a_filter_prunes_region_parts_and_their_files_are_never_read() -> None:
    """Only regions whose values can match get a part; a pruned region's generations are
    neither read by any part nor used to mask (the spec is over the key)."""
    name = "lsm-split-prune"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    lance_sql.write_dataset(rows(list(range(40)), "base"), uri, max_rows_per_file=16)
    mw = lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 4))
    with mw.writer() as w:
        w.put(rows(list(range(0, 60, 3)), "new"))
        w.flush_memtable()
    mw = MemWal(lance_sql.dataset(uri))
    view = mw.view()
    spec = mw.region_spec
    assert spec is not None

    def region_of(key: int):
        return region_id_for(spec, region_values(spec, [pa.array([key], pa.int64())], 1))

    where = "id IN (6, 7) AND v LIKE 'base%'"
    split = plan_split(view, where)
    kept = {region_of(6), region_of(7)}
    assert {p.region for p in split.regions} == kept
    assert {g.region for g in split.masks} == kept
    store = MemoryStore(name)
    touched: list[str] = []
    store.add_hook(lambda op, key: touched.append(key))
    try:
        current_runtime().clear()
        got = pa.concat_tables(_read(view, split, None, where))
    finally:
        store.clear_hooks()
    assert got.to_pylist() == [{"id": 7, "g": 1, "v": "base7"}]  # 6's newest is "new6"
    opened = {k.split("/")[1] for k in touched if k.startswith("_mem_wal/")}
    assert opened and opened <= {str(r) for r in kept}
    # a range does not prune buckets
    assert len(plan_split(view, "id > 35").regions) == 4
    assert plan_split(view, "id = 1000").regions == tuple(
        p for p in plan_split(view).regions if p.region == region_of(1000))


def test_spec_over_non_key_columns_splits_and_masks_with_pruned_regions(tmp_path: Path
                                                                        ) -> None:
    """Key 1 moves from g=1 (its base row) to g=0 (region g=0): a filter g = 1 prunes
    region g=0, whose newer row must still hide key 1's base row."""
    ds = lance_sql.write_dataset(rows([1, 2, 3, 5], "base"), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.identity("g"))
    moved = pa.table({"id": [1, 4], "g": [0, 0], "v": ["moved1", "new4"]}, schema=SCHEMA)
    with mw.writer() as w:
        w.put(moved)
        w.put(rows([5], "again"))  # region g=1
        w.flush_memtable()
    with mw.writer() as w:
        w.put(rows([2], "again"))  # region g=0
        w.flush_memtable()
    mw = MemWal(lance_sql.dataset(str(tmp_path / "t.lance")))
    view = mw.view()
    everything = {r["id"]: r for r in mw.scanner().to_table().to_pylist()}
    assert everything[1]["v"] == "moved1"
    for where in (None, "g = 1", "g = 0", "g = 1 AND v LIKE 'base%'", "v LIKE 'base%'"):
        split = plan_split(view, where)
        if where is not None and where.startswith("g = 1"):
            assert len(split.regions) == 1  # g=0 pruned, its keys still mask
            assert {g.region for g in split.masks} == {r.region_id for r in
                                                       view.regions(None)}
        got = pa.concat_tables(_read(view, split, None, where, cut=2))
        assert _canonical(got) == _canonical(mw.scanner(filter=where).to_table()), where
    split = plan_split(view, "g = 1")
    got = pa.concat_tables(_read(view, split, None, "g = 1"))
    assert sorted(r["id"] for r in got.to_pylist()) == [3, 5]  # not base1


def test_pruning_on_a_non_key_spec_never_returns_a_stale_row(tmp_path: Path) -> None:
    """The local scan, same case: region g=0 pruned, its newer row of key 1 still hides."""
    ds = lance_sql.write_dataset(rows([1, 2, 3], "base"), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.identity("g"))
    moved = pa.table({"id": [1, 4], "g": [0, 0], "v": ["moved1", "new4"]}, schema=SCHEMA)
    with mw.writer() as w:
        w.put(moved)
        w.flush_memtable()
    with mw.writer() as w:
        w.put(rows([2], "again"))  # region g=0 only
        w.flush_memtable()
    everything = {r["id"]: r for r in mw.scanner().to_table().to_pylist()}
    assert everything[1]["v"] == "moved1"
    scan = mw.scanner(filter="g = 1")
    got = scan.to_table().to_pylist()
    assert got == [r for r in everything.values() if r["g"] == 1]  # 3 only: not "base1"
    assert "kept 0 of 1 regions" in scan.explain()
    assert mw.view().scan_plan(["id"], "g = 1 AND v LIKE 'base%'").to_table()[
        "id"].to_pylist() == [3]


def test_the_parts_read_the_sources_pinned_when_planned(tmp_path: Path) -> None:
    """A generation flushed after planning is seen by no part (not by the region part
    while the base parts miss its keys): the read is the view as planned."""
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    view = mw.view()
    split = plan_split(view)
    before = mw.scanner().to_table()
    with mw.writer() as w:
        w.put(rows([30, 31, 32, 33, 34, 35], "later"))
        w.flush_memtable()
    after = MemWal(lance_sql.dataset(mw.dataset.uri)).scanner().to_table()
    assert _canonical(after) != _canonical(before)
    later = LsmView(lance_sql.dataset(mw.dataset.uri), consistency="snapshot")
    got = pa.concat_tables(_read(later, split, None, None))
    assert _canonical(got) == _canonical(before)


def test_a_range_outside_the_version_is_refused(tmp_path: Path) -> None:
    from lance_sql.errors import InvalidInputError

    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    view = mw.view()
    fragment = view.base.manifest.fragments[0]
    with pytest.raises(InvalidInputError, match="not in version"):
        base_plan(view, [FragmentRange(fragment.id, 0, fragment.physical_rows + 1)], ())
    with pytest.raises(InvalidInputError, match="not in version"):
        base_plan(view, [FragmentRange(9999, 0, 1)], ())


def test_an_older_version_splits_as_its_view(tmp_path: Path) -> None:
    """Time travel: the base as of version v and the generations its MemWAL index lists
    as unmerged, cut into parts, are that version's view."""
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    mw.refresh_index()
    version = lance_sql.dataset(mw.dataset.uri).version
    with mw.writer() as w:
        w.put(rows([30, 31, 32], "later"))
        w.flush_memtable()
    mw.merge()
    mw = MemWal(lance_sql.dataset(mw.dataset.uri))
    old = mw.view(version=version)
    split = plan_split(old)
    assert split.regions  # generations not merged at that version
    for where in (None, "v LIKE 'base%'", "id IN (2, 30)"):
        want = old.scan_plan(filter=where).to_table()
        got = pa.concat_tables(_read(old, split, None, where))
        assert _canonical(got) == _canonical(want), where
    assert _canonical(pa.concat_tables(_read(old, split, None, None))) != _canonical(
        mw.scanner().to_table())
