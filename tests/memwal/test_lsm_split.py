"""The LSM view cut per region: the parts together are the view, each region's rows once."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from lsm_split_helpers import lsm_table, rows

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.read.nodes import format_plan
from lance_sql.memwal.read.split import RegionPart, region_parts, region_plan, region_split
from lance_sql.memwal.routing import region_id_for
from lance_sql.memwal.transforms import region_values


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def test_region_parts_together_are_the_view(tmp_path: Path) -> None:
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    view = mw.view()
    split = region_split(view)
    assert split is not None and len(split.regions) == 3
    assert {r.region_id for r in view.regions(None)} == set(split.regions)
    parts = [region_plan(view, split, i).to_table() for i in range(3)]
    assert _sorted(pa.concat_tables(parts)) == _sorted(mw.scanner().to_table())
    spec = mw.region_spec
    assert spec is not None
    for i, part in enumerate(parts):
        values = region_values(spec, [part.column("id").combine_chunks()], part.num_rows)
        assert {region_id_for(spec, values, r) for r in range(part.num_rows)} <= {
            split.regions[i]}
    # newest wins inside a part: updated, new and deleted keys
    every = {r["id"]: r["v"] for p in parts for r in p.to_pylist()}
    assert every[2] == "third2" and every[5] == "second5" and every[0] == "first0"
    assert 7 not in every and 50 not in every and 20 not in every
    assert every[61] == "third61" and every[39] == "base39"
    plans = [format_plan(region_plan(view, split, i, ["id", "v"])) for i in range(3)]
    assert sum(p.count("ScanExec") > 1 for p in plans) >= 2  # generations of its own
    for i, plan in enumerate(plans):  # a part reads its own region's sources only
        labels = {f"region_{r.hex[:8]}" for r in split.regions}
        assert [x for x in labels if x in plan] == [f"region_{split.regions[i].hex[:8]}"]
        assert "DeduplicateExec" in plan


def test_unclaimed_base_rows_go_to_the_first_part(tmp_path: Path) -> None:
    """Base rows of a bucket no writer claimed yet are read (once) by part 0."""
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 64))
    view = mw.view()
    split = region_split(view)
    assert split is not None and len(split.regions) < 64
    parts = [region_plan(view, split, i, ["id", "v"]).to_table()
             for i in range(len(split.regions))]
    assert _sorted(pa.concat_tables(parts)) == _sorted(mw.scanner(["id", "v"]).to_table())


def test_spec_over_non_key_columns_cannot_split(tmp_path: Path) -> None:
    """A key's rows may sit in two regions when a non-key column routes them."""
    ds = lance_sql.write_dataset(rows(list(range(10)), "base"), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.identity("g"))
    with mw.writer() as w:
        w.put(rows([1, 2], "new"))
        w.flush_memtable()
    assert region_split(mw.view()) is None


def test_pruning_on_a_non_key_spec_never_returns_a_stale_row(tmp_path: Path) -> None:
    """Key 1 moves from g=1 (its base row) to g=0 (region g=0): a filter g = 1 prunes
    region g=0, whose newer row must still hide key 1's base row."""
    ds = lance_sql.write_dataset(rows([1, 2, 3], "base"), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.identity("g"))
    moved = pa.table({"id": [1, 4], "g": [0, 0], "v": ["moved1", "new4"]},
                     schema=rows([], "").schema)
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


def test_a_filter_prunes_the_parts(tmp_path: Path) -> None:
    """Only regions whose values can match get a part; when none can, one part reads the
    base rows of unclaimed region values alone."""
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 64))
    view = mw.view()
    split = region_split(view)
    assert split is not None
    spec = mw.region_spec
    assert spec is not None

    def region_of(key: int):
        return region_id_for(spec, region_values(spec, [pa.array([key], pa.int64())], 1))

    claimed = next(k for k in range(40) if region_of(k) in split.regions)
    unclaimed = next(k for k in range(40) if region_of(k) not in split.regions)
    for key, want in ((claimed, [RegionPart(region_of(claimed), True)]),
                      (unclaimed, [RegionPart(None, True)])):
        where = f"id = {key}"
        parts = region_parts(view, split, where)
        assert parts == want
        got = pa.concat_tables([region_plan(view, split, p, ["id", "v"], where).to_table()
                                for p in parts])
        assert got.to_pylist() == mw.scanner(["id", "v"], filter=where).to_table().to_pylist()
        assert got.num_rows == (0 if key in (7, 8, 9, 10, 11, 20, 50) else 1)
    every = region_parts(view, split, "v LIKE 'third%'")
    assert [p.region for p in every] == list(split.regions)  # no pruning on v
    got = pa.concat_tables([region_plan(view, split, p, ["id", "v"], "v LIKE 'third%'")
                            .to_table() for p in every])
    assert _sorted(got) == _sorted(mw.scanner(["id", "v"], filter="v LIKE 'third%'")
                                   .to_table())
