"""Scans that must not cost more per column or per fragment as tables grow.

* A wide table: each column read used to rebuild the data file's column map (one entry a
  column), and writes tested names against pyarrow's ``names`` lists (a new list each
  read): both cost columns² (2,000 columns scanned in 0.5 s, pylance 0.05 s).
* A ``_rowid`` / ``_rowaddr`` filter from Python: it now reads only the fragments and
  rows its addresses reach, as SQL does (it read every fragment: 800 fragments 0.4 s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read import scan as scan_module
from lance_sql.table.read import side_by_side


def _wide(columns: int, rows: int = 4) -> pa.Table:
    return pa.table({"id": np.arange(rows, dtype=np.int64),
                     **{f"c{i}": np.full(rows, i, np.int32) for i in range(columns)}})


def _fastest(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def test_a_fragment_reader_makes_each_data_files_column_map_once(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_wide(50), tmp_path / "t.lance")
    fragment = ds.manifest.fragments[0]
    reader = FragmentReader(ds.store, ds.manifest, fragment)
    data_file = fragment.files[0]
    first = reader._column_map(data_file)
    assert reader._column_map(data_file) is first
    assert first == dict(zip(data_file.fields, data_file.column_indices, strict=False))


def test_wide_scans_and_writes_grow_linearly_with_columns(tmp_path: Path) -> None:
    """4x the columns may cost about 4x (at most 8x: columns² was 14x and more)."""
    narrow = lance_sql.write_dataset(_wide(200), tmp_path / "narrow.lance")
    wide = lance_sql.write_dataset(_wide(800), tmp_path / "wide.lance")
    scan = [_fastest(lambda d=d: d.to_table()) for d in (narrow, wide)]
    assert wide.to_table().equals(_wide(800))
    upsert = []
    for ds, columns in ((narrow, 200), (wide, 800)):
        rows = _wide(columns, 2)
        upsert.append(_fastest(lambda ds=ds, rows=rows: ds.merge_insert("id")
                               .when_matched_update_all().when_not_matched_insert_all()
                               .execute(rows)))
    assert lance_sql.dataset(tmp_path / "wide.lance").count_rows() == 4
    assert scan[1] < 8 * scan[0] + 0.05, scan
    assert upsert[1] < 8 * upsert[0] + 0.05, upsert


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-ids"])
def test_row_id_filters_read_only_the_fragments_they_reach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stable: bool) -> None:
    data = pa.table({"x": np.arange(300, dtype=np.int64)})
    ds = lance_sql.write_dataset(data, tmp_path / "t.lance", max_rows_per_file=10,
                                 enable_stable_row_ids=stable)
    ds.delete("x = 55")
    ds = lance_sql.dataset(tmp_path / "t.lance")
    everything = ds.to_table(columns=["x"], with_row_id=True, with_row_address=True)
    rowid = dict(zip(everything["x"].to_pylist(), everything["_rowid"].to_pylist(),
                     strict=True))
    rowaddr = dict(zip(everything["x"].to_pylist(), everything["_rowaddr"].to_pylist(),
                       strict=True))
    read: list[tuple[int, int, int | None]] = []
    real = scan_module.scan_fragment

    def counting(store, manifest, fragment, plan, **kwargs):
        read.append((fragment.id, kwargs.get("offset", 0), kwargs.get("length")))
        return real(store, manifest, fragment, plan, **kwargs)

    monkeypatch.setattr(scan_module, "scan_fragment", counting)
    got = ds.to_table(filter=f"_rowid = {rowid[123]}")
    assert got["x"].to_pylist() == [123]
    assert {r[0] for r in read} == {12}  # (a read may probe its filter columns first)
    read.clear()
    got = ds.to_table(filter=f"_rowaddr >= {rowaddr[41]} AND _rowaddr < {rowaddr[58]}")
    assert got["x"].to_pylist() == [x for x in range(41, 58) if x != 55]
    assert {r[0] for r in read} == {4, 5}  # the two fragments the range reaches
    read.clear()
    ids = ", ".join(str(rowid[x]) for x in (3, 299, 150))
    assert ds.count_rows(f"_rowid IN ({ids})") == 3
    assert {r[0] for r in read} == {0, 15, 29}
    read.clear()
    limited = ds.scanner(filter=f"_rowid IN ({ids})", limit=2).to_table()
    assert limited["x"].to_pylist() == [3, 150]
    assert ds.count_rows(f"_rowid = {rowid[54]} OR x = 7") == 2  # prunes nothing


def test_tiny_fragments_are_read_in_tasks_of_many(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan hands its pool runs of consecutive fragments of at least MIN_TASK_ROWS rows,
    not a task per fragment (small fragments decode in Python, under the GIL: a task
    each only adds futures), and still returns every row in order."""
    monkeypatch.setattr(scan_module, "MIN_TASK_ROWS", 3000)
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)  # (the pool, even so)
    ds = lance_sql.write_dataset(pa.table({"id": np.arange(20_000)}), tmp_path / "t.lance",
                                 max_rows_per_file=1000)
    ds.delete("id % 10 = 0")
    tasks: list[int] = []
    real = scan_module.Scanner._read_group

    def counted(self: scan_module.Scanner, group: list) -> list[pa.Table]:
        tasks.append(len(group))
        return real(self, group)

    monkeypatch.setattr(scan_module.Scanner, "_read_group", counted)
    got = ds.to_table(filter="id % 3 = 0")["id"].to_pylist()
    assert got == [i for i in range(20_000) if i % 3 == 0 and i % 10 != 0]
    assert tasks == [3, 3, 3, 3, 3, 3, 2]
    sizes = [f.physical_rows for f in ds.manifest.fragments]
    groups = scan_module._task_groups([(f, 0, f.physical_rows) for f in ds.manifest.fragments])
    assert [len(g) for g in groups] == tasks
    assert [f for g in groups for f, _, _ in g] == list(ds.manifest.fragments)
    assert all(sum(stop - start for _, start, stop in g) >= 3000 for g in groups[:-1])
    assert sizes == [1000] * 20


def test_small_reads_run_on_the_calling_thread(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Fragments too small to gain from threads are read on the caller's thread (no pool
    started); fragments whose rows are wide enough are read in the pool; same rows."""
    monkeypatch.setattr(scan_module, "MIN_TASK_ROWS", 3000)
    rng = np.random.default_rng(5)
    n = 24_000
    table = pa.table({"id": np.arange(n),
                      "vec": pa.FixedSizeListArray.from_arrays(
                          pa.array(rng.random(n * 128).astype(np.float32)), 128)})
    ds = lance_sql.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=4000)
    pools: list[str] = []
    real = scan_module.WorkerPool

    def recorded(name: str, threads: int) -> object:
        pools.append(name)
        return real(name, threads)

    monkeypatch.setattr(scan_module, "WorkerPool", recorded)
    # 4000 rows of 8 bytes a read: far below the threshold
    assert ds.to_table(columns=["id"]).equals(table.select(["id"]))
    assert pools == []
    # 4000 rows of 520 bytes: about 2 MB a read; reads of 4 MB or more go side by side
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 4000 * 520)
    assert ds.to_table().equals(table)
    assert pools == ["scan"]
    pools.clear()
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 4000 * 520 + 1)
    assert ds.to_table(filter="id % 7 = 1").equals(table.filter(np.arange(n) % 7 == 1))
    assert pools == []
