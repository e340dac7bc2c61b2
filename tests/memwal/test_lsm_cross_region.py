"""A key written to two regions (a region spec over a non-key column, the key's column
changed between puts): the spec requires a key to stay in one region, so this is the
user's mistake, but reads must still agree. The scan, a lookup, a split read and an
exact search all show the key once, and the same row: the one the spec's
DeduplicateExec order puts first (highest ``_gen``; the same generation in two regions:
the region whose id sorts first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read.split import FragmentRange, base_plan, plan_split, region_plan

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("cat", pa.int32()), pa.field("v", pa.string()),
                    pa.field("vec", pa.list_(pa.float32(), 2))])


def _rows(ids: list[int], cat: int, tag: str) -> pa.Table:
    return pa.table({"id": ids, "cat": [cat] * len(ids), "v": [f"{tag}{i}" for i in ids],
                     "vec": [[float(i), 0.0] for i in ids]}, schema=SCHEMA)


@pytest.fixture
def moved(tmp_path: Path) -> MemWal:
    """Base 0..9 (cat 0); regions cat=1 (R1) and cat=2 (R2). Key 1: R1 gens 1 and 2,
    then R2 gen 3. Key 2: R1 gen 1, then R2 gen 2. Key 3: gen 1 of both (a tie)."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10)), 0, "base"), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.identity("cat"))
    with mw.writer() as w:
        w.put(_rows([1, 2, 3, 4], 1, "a1-"))
        w.put(_rows([3, 5], 2, "b1-"))
        w.flush_memtable()
        w.put(_rows([1], 1, "a2-"))
        w.put(_rows([2], 2, "b2-"))
        w.flush_memtable()
        w.put(_rows([1], 2, "b3-"))
        w.put(_rows([4], 1, "a3-"))
        w.flush_memtable()
    return MemWal(lance_sql.dataset(uri))


def _by_id(table: pa.Table) -> dict[int, str]:
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"a key listed twice: {sorted(ids)}"
    return dict(zip(ids, table.column("v").to_pylist(), strict=True))


def test_a_key_in_two_regions_reads_once_and_alike(moved: MemWal) -> None:
    regions = {r.region_id for r in moved.regions()}
    assert len(regions) == 2
    flushed = {r.region_id: [g.generation for g in r.flushed_generations] for r in moved.regions()}
    assert sorted(map(sorted, flushed.values())) == [[1, 2, 3], [1, 2, 3]]
    scan = _by_id(moved.scanner(["id", "v"]).to_table())
    # the highest _gen wins whatever the region: key 1 R2 gen 3 over R1 gen 2, key 2
    # R2 gen 2 over R1 gen 1; key 3 (gen 1 in both) goes to the lower region id
    assert scan[1] == "b3-1" and scan[2] == "b2-2" and scan[4] == "a3-4"
    gens = moved.scanner(["id", "cat", "_gen", "_region"], "id = 3").to_table()
    assert gens.num_rows == 1 and gens.column("_gen")[0].as_py() == 1
    first = min(regions, key=lambda r: r.bytes)
    assert gens.column("_region")[0].as_py() == str(first)
    keys = pa.table({"id": pa.array(list(range(12)), pa.int64())})
    got = moved.get(keys, ["id", "v"])
    assert _by_id(got) == scan
    for k in range(12):  # one key at a time (the one-key path) agrees too
        one = moved.get({"id": [k]}, ["id", "v"])
        assert _by_id(one) == ({k: scan[k]} if k in scan else {})
    # a filter on the older row does not bring it back
    assert _by_id(moved.scanner(["id", "v"], "v = 'a1-2'").to_table()) == {}


def test_a_split_read_agrees_with_the_scan(moved: MemWal) -> None:
    moved.refresh_index()
    view = MemWal(lance_sql.dataset(moved.dataset.uri)).view("snapshot")
    split = plan_split(view)
    assert all(part.masks for part in split.regions)
    ranges = [[FragmentRange(f.id, 0, f.physical_rows)] for f in view.base.manifest.fragments]
    tables = [base_plan(view, r, split.masks, ["id", "v"]).to_table() for r in ranges]
    for part in split.regions:
        node = region_plan(view, part, ["id", "v"])
        assert node is not None
        tables.append(node.to_table())
    assert _by_id(pa.concat_tables(tables)) == _by_id(moved.scanner(["id", "v"]).to_table())


def test_an_exact_search_agrees_with_the_scan(moved: MemWal) -> None:
    near = moved.nearest("vec", np.array([1.0, 0.0]), k=12, columns=["id", "v"], exact=True)
    assert _by_id(near) == _by_id(moved.scanner(["id", "v"]).to_table())
