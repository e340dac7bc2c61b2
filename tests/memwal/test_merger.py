"""The MemTable merger: generations merge in order, newest row per key wins, tombstones
delete, progress is atomic with the data, and racing mergers never merge twice."""

from __future__ import annotations

import itertools
import threading
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError
from lance_sql.format.memwal import FlushedGeneration
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.merger import (
    MergeResult,
    _merge_one,
    latest_rows,
    merge,
    region_ids,
)
from lance_sql.memwal.naming import GenerationDir, RegionPaths
from lance_sql.memwal.read.keys import latest_positions
from lance_sql.memwal.region_log import RegionLog

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
A = uuid.UUID("aaaaaaaa-2222-4333-8444-555555555555")
B = uuid.UUID("bbbbbbbb-2222-4333-8444-555555555555")
_counter = itertools.count()


def _base(root: Path) -> lance_sql.LanceDataset:
    data = pa.table({"id": list(range(10)), "v": [f"base{i}" for i in range(10)]},
                    schema=SCHEMA)
    ds = lance_sql.write_dataset(data, str(root / "t.lance"))
    return mem_wal_index.initialize(ds)


def _flush(ds: lance_sql.LanceDataset, region: uuid.UUID, rows: list[tuple]) -> int:
    """Write a generation table (rows of id, v, tombstone) and record it in the region."""
    log = RegionLog(ds.store, region)
    manifest = log.latest() or log.claim()
    generation = manifest.current_generation
    directory = GenerationDir.new(generation)
    ids, values, dead = zip(*rows, strict=True) if rows else ((), (), ())
    table = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()),
                      "_tombstone": pa.array(dead, pa.bool_())})
    lance_sql.write_dataset(table, f"{ds.uri}/{RegionPaths(region).generation(directory)}")
    log.update(lambda m: m.evolve(
        current_generation=generation + 1,
        flushed_generations=m.flushed_generations + (
            FlushedGeneration(generation, directory.name, physical_rows=len(rows)),)),
        epoch=manifest.writer_epoch)
    return generation


def _rows(ds: lance_sql.LanceDataset) -> dict[int, str]:
    table = lance_sql.dataset(ds.uri).to_table()
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(),
                    strict=True))


def test_generations_merge_in_order_with_tombstones(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a1", False), (1, "a1-later", False), (20, "new", False),
                   (2, "x", True)])
    _flush(ds, A, [(20, "newer", False), (3, None, True), (21, "gone", False),
                   (21, None, True)])
    _flush(ds, B, [(4, "b4", False)])
    results = merge(ds)
    assert [(r.region_id, r.generation) for r in results] == [(A, 1), (A, 2), (B, 1)]
    assert all(r.version is not None for r in results)
    rows = _rows(ds)
    assert rows[1] == "a1-later" and rows[20] == "newer" and rows[4] == "b4"
    assert 2 not in rows and 3 not in rows and 21 not in rows
    _, details = mem_wal_index.load(lance_sql.dataset(ds.uri))
    assert details.merged_generation(A) == 2 and details.merged_generation(B) == 1
    assert merge(ds) == []  # nothing left
    lance = pytest.importorskip("lance")
    assert lance.dataset(ds.uri).to_table().sort_by("id") == lance_sql.dataset(
        ds.uri).to_table().sort_by("id")


def test_a_crash_after_the_commit_does_not_merge_again(tmp_path: Path) -> None:
    """Appendix 2, scenario 2: progress is in the commit, so a new merger skips it."""
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "first", False)])
    assert [r.generation for r in merge(ds, max_generations=1)] == [1]
    _flush(ds, A, [(1, "second", False)])
    version = lance_sql.dataset(ds.uri).version
    assert [r.generation for r in merge(ds)] == [2]
    assert lance_sql.dataset(ds.uri).version == version + 1
    assert _rows(ds)[1] == "second"


def test_racing_mergers_merge_each_generation_once(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    for g in range(4):
        _flush(ds, A, [(100 + g, f"g{g}", False), (g, f"upd{g}", False)])
    outcomes: list[list] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            outcomes.append(merge(lance_sql.dataset(ds.uri)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    done = [r.generation for rs in outcomes for r in rs if r.version is not None]
    assert sorted(done) == [1, 2, 3, 4]  # each merged by exactly one merger
    rows = _rows(ds)
    assert len(rows) == 14 and all(rows[g] == f"upd{g}" for g in range(4))
    _, details = mem_wal_index.load(lance_sql.dataset(ds.uri))
    assert details.merged_generation(A) == 4


def test_latest_rows_keeps_the_newest_per_key() -> None:
    rows = pa.table({"k": ["a", "b", "a", None, None, "b"],
                     "n": [1, 1, 2, 1, 1, 1],
                     "_rowaddr": pa.array([5, 1, 9, 3, 4, 0], pa.uint64())})
    kept = latest_rows(rows, ["k", "n"]).sort_by("_rowaddr").to_pydict()
    assert kept["_rowaddr"] == [1, 4, 5, 9]


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint32(), pa.int8()])
def test_latest_rows_of_one_integer_key_equal_the_general_sort(kind: pa.DataType) -> None:
    rng = np.random.default_rng(2)
    n = 5000
    rows = pa.table({"k": pa.array(rng.integers(0, 100, n), kind),
                     "v": pa.array(rng.random(n)),
                     "_rowaddr": pa.array(rng.permutation(n * 3)[:n].astype(np.uint64))})
    fast = latest_rows(rows, ["k"])
    general = rows.take(pa.array(latest_positions([rows.column("k")],
                                                  rows.column("_rowaddr").to_numpy())))
    assert fast.equals(general)
    assert fast.num_rows == len(np.unique(rows["k"].to_numpy()))


def test_a_table_without_mem_wal_is_refused(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), str(tmp_path / "plain.lance"))
    with pytest.raises(NotFoundError, match="no MemWAL index"):
        merge(ds)
    assert region_ids(ds) == []


def test_a_generation_merged_and_collected_meanwhile_is_skipped(tmp_path: Path) -> None:
    ds = _base(tmp_path)
    _flush(ds, A, [(1, "a", False)])
    (first,) = RegionLog(ds.store, A).latest().flushed_generations
    stale = lance_sql.dataset(ds.uri)  # a merger that looked before the others merged
    merge(ds)
    ds.store.delete_prefix(RegionPaths(A).generation(first.path))  # and the GC collected
    assert _merge_one(stale, A, 1, first.path, ["id"]) == MergeResult(A, 1, None)
    _flush(ds, A, [(2, "b", False)])  # missing although nobody merged it: an error
    second = RegionLog(ds.store, A).latest().flushed_generations[-1]
    ds.store.delete_prefix(RegionPaths(A).generation(second.path))
    with pytest.raises(NotFoundError):
        merge(ds)


def _written_then_evolved(tmp_path: Path) -> tuple[lance_sql.LanceDataset, pa.Table]:
    """A table whose writer flushed a generation before its schema changed: ``v``
    renamed to ``v2``, ``x`` widened from int32 to int64, ``s`` dropped and a new ``s``
    added (a new field id under the old name)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.int64()), pa.field("s", pa.string()),
                        pa.field("x", pa.int32())])

    def rows(ids: list[int], tag: int) -> pa.Table:
        return pa.table({"id": ids, "v": [i * 10 + tag for i in ids],
                         "s": [f"{tag}-{i}" for i in ids], "x": ids}, schema=schema)

    ds = lance_sql.write_dataset(rows(list(range(6)), 0), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(None)
    written = rows([2, 3, 8, 9], 1)  # two updates, two inserts
    with mw.writer(region=uuid.uuid4()) as writer:
        writer.put(written)
    table = lance_sql.dataset(ds.uri)
    table.alter_columns({"path": "v", "name": "v2"})
    table.alter_columns({"path": "x", "data_type": pa.int64()})
    table.drop_columns(["s"])
    table.add_columns({"s": "'fresh'"})
    return lance_sql.dataset(ds.uri), written


def test_a_generation_merges_by_field_id_after_the_schema_changed(tmp_path: Path) -> None:
    """The renamed column's values arrive under its new name (they were dropped, leaving
    the old value on updated keys and NULL on inserted ones), the widened column is cast
    (the merge used to fail on every try, the region stuck unmerged), and the merged
    table reads as the LSM view did before the merge for ``x`` and ``s``. The new ``s`` is another
    column than the dropped one (another field id): the dropped column's values reach
    it neither in the view nor in the merge (they did, matched by name)."""
    ds, written = _written_then_evolved(tmp_path)
    view = {r["id"]: r for r in ds.mem_wal.scanner(["id", "x", "s"]).to_table().to_pylist()}
    (result,) = merge(ds)
    assert (result.inserted, result.updated) == (2, 2)
    table = lance_sql.dataset(ds.uri)
    merged = {r["id"]: r for r in table.to_table().to_pylist()}
    assert {i: r["v2"] for i, r in merged.items() if i in (2, 3, 8, 9)} == {
        r["id"]: r["v"] for r in written.to_pylist()}
    assert {i: {"id": i, "x": r["x"]} for i, r in merged.items()} == {
        i: {"id": i, "x": r["x"]} for i, r in view.items()}
    assert [view[i]["s"] for i in (2, 3, 8, 9)] == [None] * 4  # the generation has no s
    # an upsert replaces the whole row: the updated keys read NULL in the column added
    # after the flush, as in the view (the merge kept the base's value)
    assert [merged[i]["s"] for i in (2, 3, 8, 9)] == [None] * 4
    assert [view[i]["x"] for i in (2, 3, 8, 9)] == [2, 3, 8, 9]
    assert merged[0] == {"id": 0, "v2": 0, "x": 0, "s": "fresh"}
    assert table.schema.field("x").type == pa.int64()
