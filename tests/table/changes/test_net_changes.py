"""Net change feeds (``mode="net"``): one change per row for a whole window, checked
against full snapshots keyed by ``_rowid`` over random histories."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.table.changes.net import net_changes
from lance_sql.table.changes.rows import DELETE, INSERT, POSTIMAGE, PREIMAGE, ChangeRows

COLS = ["id", "v", "_rowid", "_row_last_updated_at_version"]


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def _snap(path: Path, version: int) -> dict[int, dict]:
    if version < 1:
        return {}
    table = lance_sql.dataset(path, version).to_table(columns=COLS)
    return {r["_rowid"]: r for r in table.to_pylist()}


def expected_net(path: Path, start: int, end: int) -> list[tuple]:
    """The net effect from snapshots: what existed before the window, what exists at its
    end, and the last version in which each row came, went or had its values rewritten."""
    snaps = {v: _snap(path, v) for v in range(start - 1, end + 1)}
    last_change: dict[int, int] = {}
    for v in range(start, end + 1):
        old, new = snaps[v - 1], snaps[v]
        for i in old.keys() ^ new.keys():
            last_change[i] = v
        for i in old.keys() & new.keys():
            if old[i]["_row_last_updated_at_version"] != new[i]["_row_last_updated_at_version"]:
                last_change[i] = v
    before, after = snaps[start - 1], snaps[end]
    out = []
    for i, v in last_change.items():
        if i in after and i not in before:
            out.append((v, "insert", i, after[i]["id"], after[i]["v"]))
        elif i in before and i not in after:
            out.append((v, "delete", i, before[i]["id"], before[i]["v"]))
        elif i in before and i in after:
            out += [(v, "update_preimage", i, before[i]["id"], before[i]["v"]),
                    (v, "update_postimage", i, after[i]["id"], after[i]["v"])]
    return sorted(out)


def _tuples(table: pa.Table) -> list[tuple]:
    return sorted((r["_commit_version"], r["_change_type"], r["_rowid"], r["id"], r["v"])
                  for r in table.to_pylist())


def _random_history(path: Path, seed: int, steps: int = 9) -> int:
    """A table with random appends, deletes, updates, upserts and a compaction."""
    rng = random.Random(seed)
    lance_sql.write_dataset(_rows(list(range(8)), "a"), path, max_rows_per_file=4,
                            enable_stable_row_ids=True)
    next_id = 8
    for step in range(steps):
        ds = lance_sql.dataset(path)
        live = ds.to_table(columns=["id"]).column("id").to_pylist()
        op = rng.choice(["append", "delete", "update", "update", "upsert", "compact"])
        picked = rng.sample(live, min(len(live), rng.randint(1, 3))) if live else []
        if op == "append" or not live:
            new = list(range(next_id, next_id + rng.randint(1, 4)))
            next_id = new[-1] + 1
            lance_sql.write_dataset(_rows(new, f"s{step}_"), path, mode="append")
        elif op == "delete":
            ds.delete(f"id IN ({', '.join(map(str, picked))})")
        elif op == "update":
            ds.update({"v": f"'u{step}'"}, where=f"id IN ({', '.join(map(str, picked))})")
        elif op == "upsert":
            data = _rows([*picked, next_id], f"m{step}_")
            next_id += 1
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all() \
                .execute(data)
        else:
            ds.optimize.compact_files(target_rows_per_fragment=64)
    return lance_sql.dataset(path).version


@pytest.mark.parametrize("seed", range(5))
def test_net_feed_matches_the_snapshot_model(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "t.lance"
    last = _random_history(path, seed)
    rng = random.Random(1000 + seed)
    windows = [(1, last), (2, last)] + [tuple(sorted(rng.sample(range(1, last + 1), 2)))
                                         for _ in range(4)]
    for start, end in windows:
        got = lance_sql.dataset(path).table_changes(start, end, mode="net")
        assert _tuples(got) == expected_net(path, start, end), (seed, start, end)
        # at most one change per row (two for an update), never for a row that came and
        # went inside the window
        kinds = got.group_by("_rowid").aggregate([("_change_type", "count")])
        assert set(kinds.column("_change_type_count").to_pylist()) <= {1, 2}
    # a one-version window's net feed is that version's feed
    for v in range(1, last + 1):
        ds = lance_sql.dataset(path)
        assert _tuples(ds.table_changes(v, v, mode="net")) == _tuples(ds.table_changes(v, v))


def test_inserted_then_deleted_rows_vanish_and_updates_pair(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_rows([0, 1, 2], "a"), path, enable_stable_row_ids=True)
    lance_sql.write_dataset(_rows([3, 4], "b"), path, mode="append")            # v2
    ds = lance_sql.dataset(path)
    ds.update({"v": "'x'"}, where="id IN (0, 3)")                               # v3
    ds.delete("id IN (1, 4)")                                                   # v4
    ds.update({"v": "'y'"}, where="id = 0")                                     # v5
    got = ds.table_changes(2, 5, mode="net", columns=["id", "v", "_change_type",
                                                        "_commit_version"])
    assert got.to_pylist() == [  # by version; inserts, update pairs, deletes
        {"id": 3, "v": "x", "_change_type": "insert", "_commit_version": 3},
        {"id": 1, "v": "a1", "_change_type": "delete", "_commit_version": 4},
        {"id": 0, "v": "a0", "_change_type": "update_preimage", "_commit_version": 5},
        {"id": 0, "v": "y", "_change_type": "update_postimage", "_commit_version": 5},
    ]
    # the default mode is unchanged: every change of every version
    assert ds.table_changes(2, 5).num_rows == 2 + 4 + 2 + 2


def test_filters_apply_to_the_net_rows(tmp_path: Path) -> None:
    """A metadata filter must not prune versions before netting: row 3 was inserted in v2
    and updated in v3, so its net insert carries v3 and ``_commit_version = 2`` misses it."""
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_rows([0, 1], "a"), path, enable_stable_row_ids=True)
    lance_sql.write_dataset(_rows([3], "b"), path, mode="append")               # v2
    ds = lance_sql.dataset(path)
    ds.update({"v": "'x'"}, where="id = 3")                                     # v3
    assert ds.table_changes(2, 3, mode="net", filter="_commit_version = 2").num_rows == 0
    assert ds.table_changes(2, 3, filter="_commit_version = 2").num_rows == 1
    got = ds.table_changes(2, 3, mode="net", filter="_commit_version = 3 AND v = 'x'")
    assert got.select(["id", "_change_type"]).to_pylist() == [
        {"id": 3, "_change_type": "insert"}]
    assert ds.table_changes(2, 3, mode="net", filter="_change_type = 'update_postimage'"
                            ).num_rows == 0


def test_restored_row_is_an_update_from_before_the_window(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_rows([0, 1], "a"), path, enable_stable_row_ids=True)
    ds = lance_sql.dataset(path)
    ds.delete("id = 1")                                                         # v2
    lance_sql.dataset(path, 1).restore()                                        # v3
    got = lance_sql.dataset(path).table_changes(2, 3, mode="net",
                                                columns=["id", "v", "_change_type"])
    assert got.to_pylist() == [{"id": 1, "v": "a1", "_change_type": "update_preimage"},
                               {"id": 1, "v": "a1", "_change_type": "update_postimage"}]


def test_net_changes_on_planned_rows() -> None:
    """The pure step: group by row id in version order, keep first and last."""
    kind = np.array([INSERT, PREIMAGE, POSTIMAGE, INSERT, PREIMAGE, POSTIMAGE, DELETE,
                     DELETE], np.int8)
    version = np.array([2, 2, 2, 2, 3, 3, 3, 4], np.uint64)
    row_id = np.array([7, 5, 5, 8, 7, 7, 5, 8], np.uint64)
    source = np.array([2, 1, 2, 2, 2, 3, 2, 3], np.int64)
    position = np.arange(8, dtype=np.int64)
    alt = np.where(kind == PREIMAGE, position + 100, -1)
    net = net_changes(ChangeRows(version, kind, row_id, source, position, position, alt, alt))
    # 7: inserted v2, updated v3 -> insert at v3 (values of its v3 post-image, position 5)
    # 5: updated v2, deleted v3 -> delete at v3 (values from before: position 1)
    # 8: inserted v2, deleted v4 -> nothing
    assert net.row_id.tolist() == [7, 5]
    assert net.kind.tolist() == [INSERT, DELETE]
    assert net.version.tolist() == [3, 3]
    assert net.offset.tolist() == [5, 1] and net.source.tolist() == [3, 1]
    assert net.alt_fragment.tolist() == [-1, -1]  # the pre-image's commit is not v3
    assert len(net_changes(net.take(np.array([], np.int64)))) == 0


def test_bad_mode_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_rows([0], "a"), path, enable_stable_row_ids=True)
    with pytest.raises(InvalidInputError, match="change mode"):
        ds.table_changes(1, 1, mode="latest")


def test_memwal_merges_appear_in_the_base_tables_feed(tmp_path: Path) -> None:
    """The merger's commits are merge_inserts: put, flush, merge -> inserts and updates."""
    uri = str(tmp_path / "t.lance")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    ds = lance_sql.write_dataset(_rows(list(range(6)), "base").cast(schema), uri,
                                 enable_stable_row_ids=True, primary_key=["id"])
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    before = lance_sql.dataset(uri).version
    with mw.writer() as w:
        w.put(_rows([1, 2, 10, 11], "new").cast(schema))
        w.delete(pa.table({"id": pa.array([4], pa.int64())}))
        w.flush_memtable()
    assert mw.merge()
    end = lance_sql.dataset(uri).version
    assert end > before
    feed = lance_sql.dataset(uri).table_changes(before + 1, end, mode="net",
                                                columns=["id", "v", "_change_type"])
    got = sorted((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist())
    assert got == sorted([
        ("insert", 10, "new10"), ("insert", 11, "new11"),
        ("update_preimage", 1, "base1"), ("update_postimage", 1, "new1"),
        ("update_preimage", 2, "base2"), ("update_postimage", 2, "new2"),
        ("delete", 4, "base4")])
    every = lance_sql.dataset(uri).table_changes(before + 1, end)
    assert sorted(every.column("_change_type").to_pylist()) == sorted(
        r[0] for r in got)  # each merge commit's changes, one commit per generation here
