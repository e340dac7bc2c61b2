"""A set of many integer keys whose index pages were all seen to hold consecutive keys
(``DensePages``), each key within one page's bounds, is found by arithmetic alone
(``_dense_found``): the same entries and keys as the page-by-page search, keys absent,
repeated or out of range included; a set touching a page not noted, or a key within two
pages' bounds (a key repeated across a page edge), is searched as before."""

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
from lance_sql.table.runtime.context import current_runtime

N = 40_000


def _index(tmp_path: Path, keys: np.ndarray) -> BTreeIndex:
    uri = str(tmp_path / "t.lance")
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": np.arange(keys.size)})
    lance_sql.write_dataset(table, uri, max_rows_per_file=15_000).create_scalar_index(
        "k", "BTREE")
    ds = lance_sql.dataset(uri)
    [meta] = btree_indices(ds.manifest)
    return BTreeIndex.open(ds.store, ds.manifest, meta, pa.int64())


def _searched_page_by_page(index: BTreeIndex, query: KeySet, monkeypatch
                           ) -> tuple[np.ndarray, np.ndarray]:
    """The ids and keys of the usual search (the arithmetic path turned off)."""
    with monkeypatch.context() as m:
        m.setattr(BTreeIndex, "_dense_found", lambda self, q: None)
        ids, keys = index.search_keyed(query)
    assert isinstance(keys, np.ndarray)
    return ids, keys


def _asked(rng: np.random.Generator, high: int) -> pa.Array:
    """Many keys over the whole range, some absent (below, above), one repeated."""
    keys = np.r_[rng.integers(0, high, 600), -5, high + 7, 17, 17, 0, high - 1]
    return pa.array(keys, pa.int64())


def test_dense_pages_found_by_arithmetic(tmp_path: Path, monkeypatch) -> None:
    index = _index(tmp_path, np.arange(N, dtype=np.int64))
    current_runtime().cache.clear()
    rng = np.random.default_rng(5)
    first = KeySet(_asked(rng, N))
    before = btree_mod.DENSE_SET_SEARCHES[0]
    index.search_keyed(first)  # the pages loaded and noted dense
    assert btree_mod.DENSE_SET_SEARCHES[0] == before
    for _ in range(3):
        query = KeySet(_asked(rng, N))
        expected_ids, expected_keys = _searched_page_by_page(index, query, monkeypatch)
        before = btree_mod.DENSE_SET_SEARCHES[0]
        ids, keys = index.search_keyed(query)
        assert btree_mod.DENSE_SET_SEARCHES[0] == before + 1
        assert isinstance(keys, np.ndarray) and keys.dtype == np.int64
        assert np.array_equal(ids, expected_ids) and np.array_equal(keys, expected_keys)
        wanted = np.unique(query.values.to_numpy())
        assert np.array_equal(keys, wanted[(wanted >= 0) & (wanted < N)])
        assert np.array_equal(ids.astype(np.int64) & 0xFFFFFFFF, keys % 15_000)


@pytest.mark.parametrize("layout", ["gaps", "edge_repeat"])
def test_other_pages_searched_as_before(tmp_path: Path, monkeypatch, layout: str) -> None:
    keys = np.arange(N, dtype=np.int64)
    if layout == "gaps":  # the last pages skip keys: never noted dense
        keys[30_000:] = 30_000 + 2 * np.arange(N - 30_000)
    else:  # a key at the end of one page repeated at the start of the next
        keys[4096] = keys[4095]
        keys[4097:] -= 1
    index = _index(tmp_path, keys)
    current_runtime().cache.clear()
    rng = np.random.default_rng(6)
    high = int(keys[-1]) + 1
    index.search_keyed(KeySet(_asked(rng, high)))  # the dense pages noted
    # (a random set may miss key 4095, and so every page edge: then by arithmetic)
    for asked, as_before in ((_asked(rng, high), layout == "gaps"),
                             (pa.array([4095, 4096, *range(0, high, 997)], pa.int64()), True)):
        query = KeySet(asked)
        expected_ids, expected_keys = _searched_page_by_page(index, query, monkeypatch)
        before = btree_mod.DENSE_SET_SEARCHES[0]
        ids, found = index.search_keyed(query)
        if as_before:
            assert btree_mod.DENSE_SET_SEARCHES[0] == before
        assert np.array_equal(ids, expected_ids)
        assert found is not None and np.array_equal(found, expected_keys)
        truth = np.flatnonzero(np.isin(keys, asked.to_numpy()))
        assert np.array_equal(np.sort(found), np.sort(keys[truth]))


@pytest.mark.parametrize("key_type, start", [(pa.date32(), 0), (pa.timestamp("us"), 10**15)])
def test_dates_and_times_of_consecutive_values_keep_the_usual_search(
        tmp_path: Path, key_type: pa.DataType, start: int) -> None:
    """Dates and times have an integer form and consecutive ones make dense pages, but
    their keys are not returned as numbers (``search_keyed`` promises keys for integer
    and string keys only): the arithmetic path stays with integers."""
    width = pa.int32() if key_type == pa.date32() else pa.int64()
    column = pa.array(np.arange(N, dtype=np.int64) + start, width).cast(key_type)
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"k": column, "v": np.arange(N)}), uri,
                            max_rows_per_file=15_000).create_scalar_index("k", "BTREE")
    ds = lance_sql.dataset(uri)
    [meta] = btree_indices(ds.manifest)
    index = BTreeIndex.open(ds.store, ds.manifest, meta, key_type)
    current_runtime().cache.clear()
    rng = np.random.default_rng(3)
    index.search_keyed(KeySet(column.take(pa.array(rng.integers(0, N, 700)))))  # pages noted
    before = btree_mod.DENSE_SET_SEARCHES[0]
    asked = np.unique(rng.integers(0, N, 700))
    ids, keys = index.search_keyed(KeySet(column.take(pa.array(asked))))
    assert btree_mod.DENSE_SET_SEARCHES[0] == before
    assert keys is None
    assert ids.size == asked.size  # every key found, once
