"""Sets of many string / binary keys searched in a BTREE index by the pages' fixed-width
bytes (numpy searches, not a set test of every value of every page): the same entries as
the set test and as a brute-force match of every entry, with each entry's key, for
indices written by pylance and by lance_sql; pages the form cannot hold (a value ending
in a NUL byte) are searched as before."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.btree import MAX_FIXED_WIDTH, KeySet, arrow_of_fixed, fixed_bytes
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.planner import btree_indices
from lance_sql.table.runtime.context import current_runtime

N = 30_000  # several index pages (4096 entries each)


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), pa.binary(),
                               pa.large_binary()])
def test_fixed_bytes_order_and_round_trip(t: pa.DataType) -> None:
    values = pa.array(["", "a", "ab", "b", "é", "a\x00b", "zz", "ab"]).cast(t)
    for array in (values, values.slice(2, 4)):
        fixed = fixed_bytes(array)
        assert fixed is not None
        assert arrow_of_fixed(fixed, t).equals(array)
        # numpy orders them as Arrow does (byte-wise)
        order = np.argsort(fixed, kind="stable")
        assert array.take(pa.array(order)).to_pylist() == sorted(
            array.to_pylist(), key=lambda v: v.encode() if isinstance(v, str) else v)
    assert fixed_bytes(pa.array(["a", "b\x00"]).cast(t)) is None  # padding-like: no form
    assert fixed_bytes(pa.array(["x" * (MAX_FIXED_WIDTH + 1)]).cast(t)) is None


def _index(tmp_path: Path, writer_lib: str, values: pa.Array) -> BTreeIndex:
    uri = str(tmp_path / f"{writer_lib}.lance")
    table = pa.table({"k": values, "n": np.arange(len(values))})
    if writer_lib == "pylance":
        lance.write_dataset(table, uri).create_scalar_index("k", "BTREE")
    else:
        lance_sql.write_dataset(table, uri).create_scalar_index("k", "BTREE")
    ds = lance_sql.dataset(uri)
    [meta] = btree_indices(ds.manifest)
    return BTreeIndex.open(ds.store, ds.manifest, meta, values.type)


def _brute(index: BTreeIndex, wanted: list) -> tuple[list, list]:
    """(ids, keys) of every entry equal to one of ``wanted``, in page_data order."""
    entries = index.entries()
    hit = [v in set(wanted) for v in entries.column("values").to_pylist()]
    ids = [i for i, h in zip(entries.column("ids").to_pylist(), hit, strict=True) if h]
    keys = [v for v, h in zip(entries.column("values").to_pylist(), hit, strict=True) if h]
    return ids, keys


@pytest.mark.parametrize("writer_lib", ["pylance", "lance_sql"])
def test_many_string_keys_equal_the_set_test(tmp_path: Path, writer_lib: str,
                                             monkeypatch) -> None:
    rng = np.random.default_rng(4)
    n = rng.integers(0, N // 2, N)  # most keys twice: runs of equal entries
    strings = [f"k{i:07d}" for i in n.tolist()]
    strings[:5] = ["", "", "é", "ü-long-key-with-more-bytes", "a\x00b"]
    values = pa.array(strings, mask=np.arange(N) % 997 == 0)  # and nulls
    index = _index(tmp_path, writer_lib, values)
    asked = [*[f"k{i:07d}" for i in rng.integers(-100, N // 2 + 100, 900).tolist()],
             "", "é", "a\x00b", "k0000003", "k0000003", "zzz", "0", "kk"]
    query = KeySet(pa.array([*asked, None]))  # a null never matches
    current_runtime().cache.clear("index_pages")
    for _ in range(2):  # pages read for the search, then from the cache
        before = btree_mod.BYTES_SET_SEARCHES[0]
        ids, keys = index.search_keyed(query)
        assert btree_mod.BYTES_SET_SEARCHES[0] == before + 1
        expected_ids, expected_keys = _brute(index, asked)
        assert ids.tolist() == expected_ids and len(expected_ids) > 900
        assert keys is not None and keys.to_pylist() == expected_keys
        with monkeypatch.context() as m:  # the set test of every value of each page
            m.setattr(btree_mod, "_sorted_bytes", lambda *args: None)
            general_ids, general_keys = index.search_keyed(query)
        assert btree_mod.BYTES_SET_SEARCHES[0] == before + 1
        assert general_ids.tolist() == ids.tolist()
        assert general_keys is not None and general_keys.equals(keys)
    # the pages found by numpy searches of the bounds' fixed-width bytes: those the
    # bounds' Python comparisons find
    wanted = btree_mod._sorted_bytes(query, values.type)
    assert wanted is not None and index.bounds.min_fixed is not None
    assert index.bounds.fixed_pages(wanted).tolist() == index.bounds.pages(query).tolist()
    none = index.search_keyed(KeySet(pa.array(["absent1", "absent2", "~"])))
    assert none[0].size == 0 and none[1] is not None and len(none[1]) == 0


@pytest.mark.parametrize("writer_lib", ["pylance", "lance_sql"])
def test_values_ending_in_nul_are_searched_as_before(tmp_path: Path, writer_lib: str
                                                     ) -> None:
    """A page holding a value that ends in a NUL byte has no fixed-width form (its padding
    would equal the value's end): the search tests its values as before, same entries."""
    raw = [f"b{i:06d}".encode() + (b"\x00" if i % 50 == 0 else b"") for i in range(N)]
    index = _index(tmp_path, writer_lib, pa.array(raw, pa.binary()))
    asked = [raw[i] for i in range(0, N, 37)] + [b"b000050", b"nope"]
    before = btree_mod.BYTES_SET_SEARCHES[0]
    ids, keys = index.search_keyed(KeySet(pa.array(asked, pa.binary())))
    assert btree_mod.BYTES_SET_SEARCHES[0] == before  # not this way
    expected_ids, expected_keys = _brute(index, asked)
    assert ids.tolist() == expected_ids and keys is not None
    assert keys.to_pylist() == expected_keys
    # keys with a trailing NUL asked of pages without one: also searched as before
    clean = _index(tmp_path / "clean", writer_lib,
                   pa.array([f"c{i:06d}".encode() for i in range(N)], pa.binary()))
    ids, _ = clean.search_keyed(KeySet(pa.array([b"c000001\x00", b"c000002", b"c029999"],
                                                pa.binary())))
    assert btree_mod.BYTES_SET_SEARCHES[0] == before
    assert sorted(_brute(clean, [b"c000002", b"c029999"])[0]) == sorted(ids.tolist())
