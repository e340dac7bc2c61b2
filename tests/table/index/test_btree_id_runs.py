"""Pages of an index whose ids count up by one (a table written in key order) are noted
when the page is decoded, and their ids are then found by arithmetic, not read from the
ids column: the same ids as the file holds, for pages decoded one at a time and read
together, pages of a run next to pages that are not (a fragment boundary, a table not in
key order), one entry and many."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.btree import KeySet
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.planner import btree_indices

N = 40_000


def _index(tmp_path: Path, keys: np.ndarray) -> BTreeIndex:
    uri = str(tmp_path / "t.lance")
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": np.arange(N, dtype=np.float64)})
    lance_sql.write_dataset(table, uri, max_rows_per_file=15_000).create_scalar_index(
        "k", "BTREE")
    ds = lance_sql.dataset(uri)
    [meta] = btree_indices(ds.manifest)
    return BTreeIndex.open(ds.store, ds.manifest, meta, pa.int64())


def _runs(ids: np.ndarray, size: int) -> list[bool]:
    """Whether each page's ids count up by one (the truth, from the whole ids column)."""
    return [bool((np.diff(ids[p : p + size].astype(np.int64)) == 1).all())
            for p in range(0, ids.size, size)]


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_ids_of_run_pages_by_arithmetic_equal_the_file(tmp_path: Path, order: str,
                                                        monkeypatch) -> None:
    rng = np.random.default_rng(3)
    keys = np.arange(N) * 3 if order == "sorted" else rng.permutation(N) * 3
    index = _index(tmp_path, keys)
    ids = index.entries().column("ids").to_numpy()
    size = index.lookup.batch_size
    truth = _runs(ids, size)
    pages = index.lookup.num_pages
    assert len(truth) == pages >= 8
    if order == "sorted":  # a page across a fragment boundary is not a run
        assert not all(truth) and sum(truth) >= pages - 3
    else:
        assert not any(truth)
    read: list[int] = []
    take = index.data.take

    def counted(fields, columns, rows):
        read.append(int(rows.size))
        return take(fields, columns, rows)

    monkeypatch.setattr(index.data, "take", counted)
    before = btree_mod.ID_RUN_CALLS[0]
    # nothing decoded yet: ids read from the file
    rows = np.sort(rng.choice(N, 100, replace=False))
    assert index.ids_at(rows).tolist() == ids[rows].tolist() and read == [100]
    assert btree_mod.ID_RUN_CALLS[0] == before
    # pages decoded one by one and read together note their runs
    half = pages // 2
    for p in range(half):
        index.keys(p)
    index.keys_of(list(range(half, pages)))
    for _ in range(5):
        rows = np.sort(rng.choice(N, 300, replace=False))
        read.clear()
        assert index.ids_at(rows).tolist() == ids[rows].tolist()
        in_runs = np.array(truth)[rows // size]
        assert read == ([int(np.count_nonzero(~in_runs))] if not in_runs.all() else [])
        for row in rows[in_runs][:3].tolist() + rows[~in_runs][:3].tolist():
            one = np.array([row])
            assert index.ids_at(one).tolist() == ids[one].tolist()
    assert btree_mod.ID_RUN_CALLS[0] > before if order == "sorted" else \
        btree_mod.ID_RUN_CALLS[0] == before
    # a search's ids (one key, many keys) are the file's
    for wanted in ([int(keys[5])], keys[rng.choice(N, 50, replace=False)].tolist()):
        query = KeySet(pa.array(wanted, pa.int64()))
        expected = np.sort(ids[np.isin(keys[np.argsort(keys, kind="stable")], wanted)])
        assert np.sort(index.search(query)).tolist() == expected.tolist()
