"""The ids of a few index entries (a lookup of a few keys) are read run by run of
consecutive entries from their chunks, not by a take of the ids column: the same ids as
that take, for indices written by pylance and by lance_sql, one entry, a run, scattered
entries and both at once; more than a few take as before."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.planner import btree_indices

N = 40_000


@pytest.mark.parametrize("writer_lib", ["pylance", "lance_sql"])
def test_few_ids_run_by_run_equal_the_take(tmp_path: Path, writer_lib: str,
                                           monkeypatch) -> None:
    uri = str(tmp_path / "t.lance")
    rng = np.random.default_rng(6)
    table = pa.table({"k": pa.array(rng.permutation(N) * 3, pa.int64()),
                      "v": np.arange(N, dtype=np.float64)})
    if writer_lib == "pylance":
        lance.write_dataset(table, uri, max_rows_per_file=15_000).create_scalar_index(
            "k", "BTREE")
    else:
        lance_sql.write_dataset(table, uri, max_rows_per_file=15_000).create_scalar_index(
            "k", "BTREE")
    ds = lance_sql.dataset(uri)
    [meta] = btree_indices(ds.manifest)
    index = BTreeIndex.open(ds.store, ds.manifest, meta, pa.int64())
    ids = index.entries().column("ids").to_numpy()
    calls: list[tuple[int, int]] = []
    ints_at = index.data.ints_at

    def counted(field, columns, start, stop):
        calls.append((start, stop))
        return ints_at(field, columns, start, stop)

    monkeypatch.setattr(index.data, "ints_at", counted)
    cases = [np.array([7]), np.arange(4090, 4100), np.array([3, 9000, 20_000, N - 1]),
             np.r_[np.arange(10, 14), [5000], np.arange(39_990, 40_000)][:btree_mod._FEW_IDS],
             np.sort(rng.choice(N, btree_mod._FEW_IDS, replace=False))]
    for rows in cases:
        rows = rows.astype(np.int64)
        calls.clear()
        got = index.ids_at(rows)
        runs = 1 + int(np.count_nonzero(np.diff(rows) != 1))
        assert len(calls) == runs
        assert got.tolist() == ids[rows].tolist()
        with monkeypatch.context() as m:  # the take of the ids column
            m.setattr(BTreeIndex, "_few_ids", lambda self, rows: None)
            assert index.ids_at(rows).tolist() == got.tolist()
    calls.clear()
    many = np.sort(rng.choice(N, btree_mod._FEW_IDS + 1, replace=False))
    assert index.ids_at(many).tolist() == ids[many].tolist() and not calls
