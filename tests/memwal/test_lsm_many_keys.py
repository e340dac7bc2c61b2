"""Lookups of many keys at once (``MemWal.get`` and SQL ``IN``) over a base table whose
BTREE index has many pages: the batched index page loads, the scattered takes (their
chunk reads joined only across small gaps, read straight into one buffer) and the LZ4
string chunks give the same rows as the page-by-page index search and as the LSM view's
scan, with deletions, several fragments, an unindexed fragment, nulls, absent keys and
repeated keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("s", pa.string())])
N = 60_000  # ~15 index pages of 4096 entries


def _rows(ids: np.ndarray, tag: str) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    s = pa.array([f"{tag}-{i}-{'x' * int(i % 5)}" for i in ids.tolist()],
                 mask=ids % 17 == 0)  # some NULL strings
    return pa.table({"id": ids, "v": ids * 0.5, "s": s}, schema=SCHEMA)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> MemWal:
    uri = str(tmp_path_factory.mktemp("many") / "t.lance")
    ds = lance_sql.write_dataset(_rows(np.arange(N), "base"), uri, max_rows_per_file=22_000)
    ds.create_scalar_index("id", "BTREE")
    lance_sql.dataset(uri).delete("id % 11 = 3")
    lance_sql.write_dataset(_rows(np.arange(N, N + 2000), "late"), uri, mode="append")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 4),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(4)
    writer = mw.writer()
    for g in range(2):  # two flushed generations: updates and new keys
        writer.put(_rows(np.r_[rng.choice(N, 3000, replace=False), N + 5000 + g * 100
                               + np.arange(100)], f"g{g}"))
        writer.delete(pa.table({"id": pa.array(rng.choice(N, 300), pa.int64())}))
        writer.flush_memtable()
    writer.put(_rows(rng.choice(N, 2000, replace=False), "mem"))  # the MemTable
    writer.delete(pa.table({"id": pa.array(rng.choice(N, 200), pa.int64())}))
    yield mw
    writer.close()


def _model(mw: MemWal) -> dict[int, tuple]:
    whole = mw.scanner().to_table()
    return dict(zip(whole.column("id").to_pylist(),
                    zip(whole.column("v").to_pylist(), whole.column("s").to_pylist(),
                        strict=True), strict=True))


def _expected(model: dict[int, tuple], keys: np.ndarray) -> list[tuple]:
    return [(k, *model[k]) for k in keys.tolist() if k in model]


def _rows_of(got: pa.Table) -> list[tuple]:
    return list(zip(got.column("id").to_pylist(), got.column("v").to_pylist(),
                    got.column("s").to_pylist(), strict=True))


def test_many_keys_equal_the_scan_and_the_page_by_page_search(table: MemWal,
                                                             monkeypatch) -> None:
    mw = table
    model = _model(mw)
    rng = np.random.default_rng(9)
    keys = np.r_[rng.integers(-100, N + 6000, 1500), [5, 5, 5, N + 10, -1]]
    expected = _expected(model, keys)
    assert len(expected) > 900 and len(set(keys.tolist()) - set(model)) > 50
    seen: list[int] = []
    keys_of = btree_mod.BTreeIndex.keys_of

    def counted(self, pages):
        seen.append(len(pages))
        return keys_of(self, pages)

    monkeypatch.setattr(btree_mod.BTreeIndex, "keys_of", counted)
    for batch_pages, warm in ((10**9, False), (8, False), (8, True), (1, False)):
        monkeypatch.setattr(btree_mod, "BATCH_PAGES", batch_pages)
        if not warm:
            current_runtime().cache.clear("index_pages")
        got = mw.get({"id": pa.array(keys, pa.int64())})
        assert _rows_of(got) == expected, (batch_pages, warm)
    assert seen and max(seen) >= 8  # the batched loads answered


def test_sql_in_of_many_keys_equals_the_scan(table: MemWal) -> None:
    mw = table
    model = _model(mw)
    keys = np.unique(np.random.default_rng(3).integers(-10, N + 6000, 1200))
    session = lance_sql.connect(str(Path(mw.dataset.uri).parent))
    listed = ", ".join(map(str, keys.tolist()))
    got = session.sql(f"SELECT id, v, s FROM t WHERE id IN ({listed}) ORDER BY id")
    assert _rows_of(got.to_arrow_table()) == _expected(model, keys)


def test_many_keys_without_columns_count_the_rows_found(table: MemWal) -> None:
    """A lookup asking for no column (SQL's ``count(*)`` over ``IN``) still has a row per
    key found (a take of a table without columns loses its rows)."""
    mw = table
    model = _model(mw)
    keys = np.unique(np.random.default_rng(5).integers(-10, N + 6000, 1200))
    assert mw.get({"id": pa.array(keys, pa.int64())}, columns=[]).num_rows == \
        len(_expected(model, keys))
    session = lance_sql.connect(str(Path(mw.dataset.uri).parent))
    listed = ", ".join(map(str, keys.tolist()))
    assert session.sql(f"SELECT count(*) AS n FROM t WHERE id IN ({listed})"
                       ).to_arrow_table().column("n").to_pylist() == [len(_expected(model, keys))]


def test_sql_in_list_read_as_arrow_equals_the_general_decode(table: MemWal,
                                                            monkeypatch) -> None:
    """A filter that is nothing but ``id IN (...)`` gives the lookup its key table straight
    from the pushed Arrow values (``_in_list_keys``), no literal decoded one by one: the
    same rows as the general decode and the model, with repeated and absent keys; an IN
    with another conjunct, or on a non-key column, is read the general way."""
    from lance_sql.sql import lsm_provider

    mw = table
    model = _model(mw)
    keys = np.r_[np.random.default_rng(13).integers(-10, N + 6000, 1100), 7, 7, 7]
    session = lance_sql.connect(str(Path(mw.dataset.uri).parent))
    listed = ", ".join(map(str, keys.tolist()))
    taken: list[bool] = []
    inner = lsm_provider._in_list_keys

    def spied(filter, view):
        found = inner(filter, view)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(lsm_provider, "_in_list_keys", spied)
    queries = {
        "alone": f"SELECT id, v, s FROM t WHERE id IN ({listed}) ORDER BY id",
        "and": f"SELECT id, v, s FROM t WHERE id IN ({listed}) AND v >= 100 ORDER BY id",
        "other column": f"SELECT id, v, s FROM t WHERE v IN ({listed}) ORDER BY id",
    }
    got = {name: _rows_of(session.sql(q).to_arrow_table()) for name, q in queries.items()}
    assert taken[0] and not any(taken[1:])
    expected = _expected(model, np.unique(keys))
    assert got["alone"] == expected and len(expected) > 900
    assert got["and"] == [r for r in expected if r[1] >= 100]
    assert got["other column"] == sorted((k, *r) for k, r in model.items()
                                         if r[0] in set(keys.tolist()))
    monkeypatch.setattr(lsm_provider, "_in_list_keys", lambda filter, view: None)
    for name, q in queries.items():
        assert _rows_of(session.sql(q).to_arrow_table()) == got[name], name


def test_many_string_keys_equal_the_scan(tmp_path: Path, monkeypatch) -> None:
    """A string primary key over ~10 index pages: batched and page-by-page index loads
    and the scan agree (repeated and absent keys, a deleted base row, newer sources)."""
    schema = pa.schema([pa.field("k", pa.string(), nullable=False, metadata=PK),
                        pa.field("n", pa.int64())])

    def rows(ids, tag: int) -> pa.Table:
        return pa.table({"k": [f"key{i:06d}" for i in ids], "n": [i * 10 + tag for i in ids]},
                        schema=schema)

    uri = str(tmp_path / "s.lance")
    ds = lance_sql.write_dataset(rows(range(40_000), 0), uri, max_rows_per_file=15_000)
    ds.create_scalar_index("k", "BTREE")
    lance_sql.dataset(uri).delete("n % 70 = 0")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("k", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(6)
    with mw.writer() as writer:
        writer.put(rows(rng.choice(40_000, 2000, replace=False), 1))
        writer.flush_memtable()
        writer.put(rows(rng.choice(40_000, 500, replace=False), 2))
        whole = mw.scanner().to_table()
        model = dict(zip(whole.column("k").to_pylist(), whole.column("n").to_pylist(),
                         strict=True))
        asked = [f"key{i:06d}" for i in rng.integers(-50, 40_050, 900)] + ["key000007"] * 2
        expected = [(k, model[k]) for k in asked if k in model]
        assert len(expected) > 700
        for batch_pages in (10**9, 1):
            monkeypatch.setattr(btree_mod, "BATCH_PAGES", batch_pages)
            current_runtime().cache.clear("index_pages")
            got = mw.get({"k": pa.array(asked)})
            assert list(zip(got.column("k").to_pylist(), got.column("n").to_pylist(),
                            strict=True)) == expected, batch_pages


@pytest.mark.parametrize("kind", ["int", "string"])
def test_key_subsets_and_code_probes_equal_the_general_ones(kind: str) -> None:
    """Subsets of subsets of lookup keys (taken lazily) hold the rows a filter gives, and
    probing a key set by codes alone finds what probing by the key columns finds."""
    from lance_sql.memwal.read.keys import Keys, KeySet

    rng = np.random.default_rng(2)
    raw = rng.integers(0, 500, 300)
    column = pa.array(raw) if kind == "int" else pa.array([f"s{v}" for v in raw])
    keys = Keys(pa.table({"k": column}))
    keys.codes  # noqa: B018 - inherited by the subsets below
    first = rng.random(300) < 0.6
    sub = keys.take(first)
    second = rng.random(sub.num_rows) < 0.5
    subsub = sub.take(second)
    expected = pa.table({"k": column}).filter(pa.array(first)).filter(pa.array(second))
    assert subsub.num_rows == expected.num_rows
    assert subsub.table.equals(expected)
    assert subsub.position.tolist() == np.flatnonzero(first)[second].tolist()
    stored = pa.array(np.arange(0, 500, 3)) if kind == "int" else pa.array(
        [f"s{v}" for v in range(0, 500, 3)])
    key_set = KeySet([stored])
    for probe in (keys, sub, subsub):
        general = key_set.find(probe.columns)
        assert probe.find_in(key_set).tolist() == general.tolist()
        assert (general >= 0).any() and (general < 0).any()
