"""The pieces every engine shares to read a table: the one scan-plan builder, pruning by
row address, and the range intersection behind it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import intersect_ranges, parse_predicate
from lance_sql.format.fragment import Fragment
from lance_sql.table import (
    address_ranges,
    build_scan_plan,
    fragment_spans,
    scan_fragment,
)
from lance_sql.table.read.scan import plan_scan


def _normalized(points: list[int]) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-touching ranges from a list of cut points."""
    cuts = sorted(set(points))
    ranges = [(lo, hi) for lo, hi in zip(cuts[::2], cuts[1::2], strict=False)]
    return [r for i, r in enumerate(ranges) if i == 0 or r[0] > ranges[i - 1][1]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60)), st.lists(st.integers(0, 60)))
def test_intersect_ranges_matches_sets(a: list[int], b: list[int]) -> None:
    left, right = _normalized(a), _normalized(b)
    members = {x for lo, hi in left for x in range(lo, hi)} & {
        x for lo, hi in right for x in range(lo, hi)}
    got = intersect_ranges(left, right)
    assert {x for lo, hi in got for x in range(lo, hi)} == members
    assert got == sorted(got) and all(lo < hi for lo, hi in got)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3)), min_size=1, max_size=5,
                unique_by=lambda f: f[0]),
       st.one_of(st.none(), st.lists(  # addresses near fragment starts, where edges matter
           st.builds(lambda frag, row: (frag << 32) + row, st.integers(0, 13),
                     st.integers(0, 4)), max_size=8)))
def test_fragment_spans_cover_exactly_what_ranges_reach(
        frags: list[tuple[int, int]], points: list[int] | None) -> None:
    """Per fragment with live rows: the smallest span of physical rows holding every
    address the ranges reach (by brute force over the fragment's rows)."""
    fragments = [Fragment(id=i, files=(), physical_rows=rows) for i, rows in frags]
    ranges = None if points is None else _normalized(points)
    got = {frag.id: (start, stop) for frag, start, stop in fragment_spans(fragments, ranges)}
    want = {}
    for frag in fragments:
        if frag.physical_rows == 0:
            continue
        reached = [row for row in range(frag.physical_rows) if ranges is None or any(
            lo <= (frag.id << 32) + row < hi for lo, hi in ranges)]
        if reached:
            want[frag.id] = (reached[0], reached[-1] + 1)
    assert got == want


@pytest.fixture
def stable(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array(range(30), pa.int64())}), uri,
                            max_rows_per_file=10, enable_stable_row_ids=True)
    ds = lance_sql.dataset(uri)
    ds.delete("id = 12")
    return uri


def test_address_ranges_look_stable_row_ids_up(stable: str) -> None:
    """Row ids 11..13 live in fragment 1; id 12 was deleted, so two single rows remain."""
    ds = lance_sql.dataset(stable)
    ids = ds.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    by_id = dict(zip(ids["_rowid"].to_pylist(), ids["_rowaddr"].to_pylist(), strict=True))
    got = address_ranges(ds.store, ds.manifest, parse_predicate("_rowid BETWEEN 11 AND 13"))
    assert got == [(by_id[11], by_id[11] + 1), (by_id[13], by_id[13] + 1)]
    both = parse_predicate(f"_rowid BETWEEN 11 AND 13 AND _rowaddr >= {by_id[13]}")
    assert address_ranges(ds.store, ds.manifest, both) == [(by_id[13], by_id[13] + 1)]
    assert address_ranges(ds.store, ds.manifest, parse_predicate("id > 3")) is None


def test_build_scan_plan_is_what_the_python_api_plans(stable: str) -> None:
    ds = lance_sql.dataset(stable)
    tree = parse_predicate("id > 25")
    api = plan_scan(ds.manifest, ["id", "_rowaddr"], "id > 25")
    built = build_scan_plan(ds.manifest, ["id", "_rowaddr"], predicate=tree,
                            filter_text="id > 25", filter_tree=tree)
    assert built.filter.equals(api.filter)
    assert replace(built, filter=None) == replace(api, filter=None)
    # the filter text is the whole filter: its comparisons are evaluated as masks
    assert api.comparisons is not None and api.comparisons[0].op == ">"
    # A pyarrow filter (what DataFusion pushes) gives the same rows.
    pushed = build_scan_plan(ds.manifest, ["id"], filter=pc.field("id") > 25,
                             filter_columns={"id"}, schema_metadata=False)
    frag = ds.manifest.fragments[-1]
    assert scan_fragment(ds.store, ds.manifest, frag, pushed)["id"].to_pylist() == \
        [26, 27, 28, 29]
    with pytest.raises(InvalidInputError, match="columns it reads"):
        build_scan_plan(ds.manifest, ["id"], filter=pc.field("id") > 25)
    with pytest.raises(NotFoundError, match="nope"):
        build_scan_plan(ds.manifest, ["nope"])
