"""The base table's lookups build the key column from the BTREE index's entries (the key
of each address it found) instead of reading it from the data files: the same rows as
reading it (many keys, one key, keys asked twice, absent and deleted keys; integer and
string keys), over base tables written by pylance and by lance_sql; tables the index
cannot serve this way (no index, composite keys) read the key column as before."""

from __future__ import annotations

import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import sources
from lance_sql.table.index.btree import BYTES_SET_SEARCHES, BTreeIndex
from lance_sql.table.index.planner import btree_indices
from lance_sql.table.runtime.cache import INDEX_PAGES
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
INT64 = pa.int64()
N = 30_000  # several index pages: dense ones (ascending ids) and gapped ones


def _base_ids() -> np.ndarray:
    """Ascending ids over the first half (dense index pages), every third id after."""
    return np.r_[np.arange(N // 2), N // 2 + 3 * np.arange(N // 2)].astype(np.int64)


def _rows(ids, tag: str, key: pa.DataType = INT64) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    keys = pa.array([f"k{i:06d}" for i in ids.tolist()]) if pa.types.is_string(key) \
        else pa.array(ids, key)
    schema = pa.schema([pa.field("id", key, nullable=False, metadata=PK),
                        pa.field("v", pa.float64()), pa.field("s", pa.string())])
    return pa.table({"id": keys, "v": ids * 0.5,
                     "s": [f"{tag}{i}" for i in ids.tolist()]}, schema=schema)


def _build(tmp_path: Path, writer_lib: str, key: pa.DataType = INT64,
           indexed: bool = True) -> tuple[MemWal, object]:
    uri = str(tmp_path / "t.lance")
    base = _rows(_base_ids(), "b", key)
    if writer_lib == "pylance":
        ds = lance.write_dataset(base, uri, max_rows_per_file=11_000)
        if indexed:
            ds.create_scalar_index("id", "BTREE")
        ds.delete("v < 40 AND v >= 30")  # ids 60..79 deleted in the base
    else:
        ours = lance_sql.write_dataset(base, uri, max_rows_per_file=11_000)
        if indexed:
            ours.create_scalar_index("id", "BTREE")
        lance_sql.dataset(uri).delete("v < 40 AND v >= 30")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    rng = np.random.default_rng(3)
    writer.put(_rows(rng.choice(N, 500, replace=False), "g", key))
    writer.flush_memtable()
    writer.put(_rows(rng.choice(N, 300, replace=False), "m", key))  # the MemTable
    writer.delete(_rows(np.arange(200, 220), "d", key).select(["id"]))  # tombstones
    return mw, writer


def _keys() -> np.ndarray:
    """Hits in dense and gapped pages, absent keys (gaps, past the end, negative),
    deleted ones (in the base, and by the MemTable's tombstones), and keys asked
    twice."""
    rng = np.random.default_rng(8)
    return np.r_[rng.integers(-50, N // 2 + 3 * (N // 2) + 50, 1200),
                 np.arange(55, 85), np.arange(198, 222),
                 [7, 7, 7, N // 2 + 1, N // 2 + 3, N // 2 + 3]]


def _query(key: pa.DataType, keys: np.ndarray) -> dict:
    if pa.types.is_string(key):
        return {"id": pa.array([f"k{i:06d}" for i in keys.tolist()])}
    return {"id": pa.array(keys, key)}


def _read_key_column(monkeypatch) -> None:
    """The old path: the index's keys withheld, so the key column is read."""
    found = sources.keyed_addresses

    def without_keys(*args):
        result = found(*args)
        return None if result is None else (result[0], None)

    monkeypatch.setattr(sources, "keyed_addresses", without_keys)


def _both(mw: MemWal, monkeypatch, query: dict) -> tuple[pa.Table, pa.Table, int]:
    """(the lookup with keys from the index, as reading the key column, lookups whose
    key column came from the index)."""
    before = sources.KEYS_FROM_INDEX[0]
    new = mw.get(query)
    used = sources.KEYS_FROM_INDEX[0] - before
    with monkeypatch.context() as m:
        _read_key_column(m)
        old = mw.get(query)
    return new, old, used


@pytest.mark.parametrize("key", [pa.int64(), pa.string()])
@pytest.mark.parametrize("writer_lib", ["pylance", "lance_sql"])
def test_many_keys_take_the_key_column_from_the_index(tmp_path: Path, writer_lib: str,
                                                      key: pa.DataType, monkeypatch) -> None:
    """Integer keys and string keys alike (a string key's entries are found by the
    pages' fixed-width bytes, their keys with them)."""
    mw, writer = _build(tmp_path, writer_lib, key)
    try:
        keys = _keys()
        query = _query(key, keys)
        searches = BYTES_SET_SEARCHES[0]
        new, old, used = _both(mw, monkeypatch, query)
        assert used >= 1
        assert (BYTES_SET_SEARCHES[0] > searches) == pa.types.is_string(key)
        assert new.equals(old)
        model = mw.scanner().to_table()
        live = dict(zip(model.column("id").to_pylist(), model.column("s").to_pylist(),
                        strict=True))
        asked = query["id"].to_pylist()
        expected = [(k, live[k]) for k in asked if k in live]
        got = list(zip(new.column("id").to_pylist(), new.column("s").to_pylist(),
                       strict=True))
        assert got == expected  # keys asked twice: their row twice, in the keys' order
        tombstoned = set(_query(key, np.arange(200, 220))["id"].to_pylist())
        assert tombstoned & set(asked) and not tombstoned & set(new.column("id").to_pylist())
        deleted = _query(key, np.arange(60, 80))["id"].to_pylist()
        assert not set(deleted) & set(new.column("id").to_pylist()) - set(
            live)  # deleted base rows stay deleted
        assert new.column("id").type == key
        sql = lance_sql.connect(mw.dataset.uri.rsplit("/", 1)[0])
        name = mw.dataset.uri.rsplit("/", 1)[1].removesuffix(".lance")
        in_list = ",".join(f"'{k}'" if isinstance(k, str) else str(k) for k in asked)
        table = sql.sql(f"SELECT id, s FROM {name} WHERE id IN ({in_list})").to_arrow_table()
        assert sorted(zip(table.column("id").to_pylist(), table.column("s").to_pylist(),
                          strict=True)) == sorted(set(expected))
    finally:
        writer.close()


@pytest.mark.parametrize("key", [pa.int64(), pa.string()])
@pytest.mark.parametrize("writer_lib", ["pylance", "lance_sql"])
def test_one_key_takes_its_key_column_from_the_key_asked(tmp_path: Path, writer_lib: str,
                                                         key: pa.DataType,
                                                         monkeypatch) -> None:
    """One key (lookup_one) of an integer or string key: the index's equality is exact,
    so a base row found holds the very key asked, and its key column is not read; the
    same rows as reading it."""
    mw, writer = _build(tmp_path, writer_lib, key)
    try:
        # a base row in a dense page, in a gapped page, a deleted one, a gap, past the end
        for k in (5, N // 2 + 3, 70, N // 2 + 1, 10 * N):
            query = _query(key, np.array([k]))
            before = sources.KEY_AS_ASKED[0]
            new = mw.get(query)
            given = sources.KEY_AS_ASKED[0] - before
            with monkeypatch.context() as m:  # the old path: the key column read
                m.setattr(sources, "_exact_equality", lambda t: False)
                old = mw.get(query)
                assert sources.KEY_AS_ASKED[0] - before == given
            assert new.equals(old), k
            assert given == 1, k  # (the base is asked last: only keys no newer source has)
            assert new.column("id").to_pylist() == (
                [] if k in (70, N // 2 + 1, 10 * N)
                else _query(key, np.array([k]))["id"].to_pylist())
    finally:
        writer.close()


@pytest.mark.parametrize("key", [pa.int64(), pa.string()])
def test_tables_without_an_index_read_the_key_column(tmp_path: Path, key: pa.DataType,
                                                     monkeypatch) -> None:
    mw, writer = _build(tmp_path, "lance_sql", key, indexed=False)
    try:
        keys = _keys()
        new, old, used = _both(mw, monkeypatch, _query(key, keys))
        assert used == 0
        assert new.equals(old) and new.num_rows > 500
    finally:
        writer.close()


def test_composite_keys_read_the_key_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "c.lance")
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False, metadata=PK),
                        pa.field("b", pa.int64(), nullable=False, metadata=PK),
                        pa.field("s", pa.string())])
    a = np.arange(5000, dtype=np.int64)
    ds = lance_sql.write_dataset(pa.table({"a": a, "b": a % 7, "s": [f"r{i}" for i in a]},
                                          schema=schema), uri)
    ds.create_scalar_index("a", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), None, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer(region=uuid.uuid4())
    try:
        writer.put(pa.table({"a": [1, 2], "b": [1, 5], "s": ["new1", "new2"]}, schema=schema))
        ask = np.array([1, 2, 3, 10, 4999, 6000, 3], np.int64)
        before = sources.KEYS_FROM_INDEX[0]
        got = mw.get({"a": ask, "b": ask % 7})
        assert sources.KEYS_FROM_INDEX[0] == before
        assert list(zip(got.column("a").to_pylist(), got.column("b").to_pylist(),
                        got.column("s").to_pylist(), strict=True)) == [
            (1, 1, "new1"), (2, 2, "r2"), (3, 3, "r3"), (10, 3, "r10"), (4999, 1, "r4999"),
            (3, 3, "r3")]
    finally:
        writer.close()


def test_the_index_gives_the_key_of_each_entry_found(tmp_path: Path) -> None:
    """search_keyed's keys are the entries' own values (pylance-written index; dense
    pages by arithmetic, gapped pages from their values), in the order of the ids."""
    uri = str(tmp_path / "k.lance")
    ds = lance.write_dataset(_rows(_base_ids(), "b"), uri, max_rows_per_file=11_000)
    ds.create_scalar_index("id", "BTREE")
    ours = lance_sql.dataset(uri)
    [meta] = btree_indices(ours.manifest)
    index = BTreeIndex.open(ours.store, ours.manifest, meta, pa.int64())
    entries = index.entries()
    by_id = dict(zip(entries.column("ids").to_pylist(), entries.column("values").to_pylist(),
                     strict=True))
    keys = pa.array(np.unique(_keys()), pa.int64())
    for _ in range(2):  # the second time dense pages are known and found by arithmetic
        ids, found = index.search_keyed(lance_sql.format.btree.KeySet(keys))
        assert found is not None and ids.size > 500
        assert found.tolist() == [by_id[i] for i in ids.tolist()]
    facts = current_runtime().cache.peek(INDEX_PAGES, (index.path, index.uuid, "dense"))
    assert facts is not None and facts.known.any() and not facts.known.all()
    ids, found = index.search_keyed(lance_sql.format.btree.KeySet(pa.array([N // 2 + 3])))
    assert found is not None and found.tolist() == [N // 2 + 3] and ids.size == 1
