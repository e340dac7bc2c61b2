"""One-key lookups of the base table through a view's kept :class:`OneKeyTake` (the
index search and the take resolved once per base version and column list): the same
rows as the general path, whatever happened to the key or the table between two gets
(deleted rows, newer generations and MemTables, new versions, renames, compaction, a key
appended twice, a whole fragment deleted)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import IndexFallbackWarning
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import sources
from lance_sql.table.index.planner import OneKeySearch
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
INT64 = pa.int64()


def _rows(ids: Sequence[int], tag: str, key: pa.DataType = INT64) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    keys = (pa.array([f"k{i:05d}" for i in ids.tolist()]) if pa.types.is_string(key)
            else pa.array(ids, key))
    schema = pa.schema([pa.field("id", key, nullable=False, metadata=PK),
                        pa.field("v", pa.float64()), pa.field("s", pa.string())])
    return pa.table({"id": keys, "v": ids * 0.5, "s": [f"{tag}{i}" for i in ids.tolist()]},
                    schema=schema)


@pytest.fixture(params=[pa.int64(), pa.string()], ids=["int64", "string"])
def table(request, tmp_path: Path) -> Iterator[tuple]:
    """Base ids 0..5999 in three fragments, 100..109 deleted; a flushed generation of
    200..209, a MemTable of 300..304 and a tombstone of 400."""
    key = request.param
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(range(6000), "b", key), uri, max_rows_per_file=2000)
    ds.create_scalar_index("id", "BTREE")
    column = "v" if pa.types.is_string(key) else "id"
    lance_sql.dataset(uri).delete(f"{column} >= {100 * (0.5 if column == 'v' else 1)} "
                                  f"AND {column} < {110 * (0.5 if column == 'v' else 1)}")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(_rows(range(200, 210), "g", key))
    writer.flush_memtable()
    writer.put(_rows(range(300, 305), "m", key))
    writer.delete(_rows([400], "d", key).select(["id"]))
    try:
        yield uri, mw, writer, key
    finally:
        for region_writer in writer.writers:
            region_writer.abort()


def _key(key: pa.DataType, i: int) -> int | str:
    return f"k{i:05d}" if pa.types.is_string(key) else i


def _get(mw: MemWal, key: pa.DataType, i: int, columns: list[str] | None = None
         ) -> pa.Table:
    return mw.get({"id": [_key(key, i)]}, columns)


def _general(mw: MemWal, key: pa.DataType, i: int, columns: list[str] | None,
             monkeypatch) -> pa.Table:
    """The lookup through the general path (no kept take)."""
    with monkeypatch.context() as m:
        m.setattr(sources.BaseSource, "_one_key_take", lambda self, names: None)
        return _get(mw, key, i, columns)


def _s(table: pa.Table, column: str = "s") -> list:
    return table.column(column).to_pylist()


BASE_ASKED = [0, 1999, 2000, 5999, 6000, -1, 105]  # hits, absent keys, a deleted row


@pytest.mark.parametrize("columns", [None, ["s"], ["v", "id"], []])
def test_the_kept_take_answers_as_the_general_path(table, columns, monkeypatch) -> None:
    _, mw, _, key = table
    before = sources.ONE_KEY_TAKES[0]
    for i in [*BASE_ASKED, 205, 302, 400, 0, 5999]:  # (asked twice: the kept take)
        got = _get(mw, key, i, columns)
        assert got.equals(_general(mw, key, i, columns, monkeypatch)), i
    assert sources.ONE_KEY_TAKES[0] - before == len(BASE_ASKED) + 2
    if columns is None:
        assert _s(_get(mw, key, 0)) == ["b0"] and _s(_get(mw, key, 5999)) == ["b5999"]
        assert _get(mw, key, 0).column("id").to_pylist() == [_key(key, 0)]
        assert _get(mw, key, 105).num_rows == 0 and _get(mw, key, 6000).num_rows == 0
        assert _s(_get(mw, key, 205)) == ["g205"] and _s(_get(mw, key, 302)) == ["m302"]
        assert _get(mw, key, 400).num_rows == 0
    if columns == []:
        assert _get(mw, key, 0, columns).num_rows == 1
    if columns == ["v", "id"]:  # the projection's order, each column its own values
        for i in (1999, 2000, 0):
            got = _get(mw, key, i, columns)
            assert got.column_names == ["v", "id"]
            assert got.to_pylist() == [{"v": i * 0.5, "id": _key(key, i)}]


def test_the_kept_take_follows_the_table(table, monkeypatch) -> None:
    """New versions between two gets: a deleted row, a renamed column, compacted
    fragments, a whole fragment deleted, and newer rows of the key (each get also
    checked against the general path)."""
    uri, mw, writer, key = table
    column = "v" if pa.types.is_string(key) else "id"

    def where(i: int) -> str:
        return f"{column} = {i * 0.5 if column == 'v' else i}"

    def check(i: int, columns: list[str] | None = None) -> pa.Table:
        got = _get(mw, key, i, columns)
        assert got.equals(_general(mw, key, i, columns, monkeypatch)), i
        return got

    assert _s(check(10)) == ["b10"]
    lance_sql.dataset(uri).delete(where(10))
    assert check(10).num_rows == 0 and _s(check(11)) == ["b11"]
    lance_sql.dataset(uri).alter_columns({"path": "s", "name": "t"})
    assert _s(check(11), "t") == ["b11"] and _s(check(12, ["t"]), "t") == ["b12"]
    lance_sql.dataset(uri).delete(f"{column} < {2000 * 0.5 if column == 'v' else 2000}")
    assert check(11).num_rows == 0 and _s(check(2500), "t") == ["b2500"]
    lance_sql.dataset(uri).compact_files(target_rows_per_fragment=10_000)
    for i in (11, 1999, 2000, 4321, 5999):
        assert _s(check(i), "t") == ([] if i < 2000 else [f"b{i}"])
    writer.put(_rows([4321], "n", key).rename_columns(["id", "v", "t"]))
    assert _s(check(4321), "t") == ["n4321"]


def test_a_key_appended_twice_takes_the_newest_row(tmp_path: Path, monkeypatch) -> None:
    """Plain appends do not enforce the key: the index then holds the key twice, and the
    lookup takes the newest row, as the general path does."""
    uri = str(tmp_path / "d.lance")
    lance_sql.write_dataset(_rows(range(500), "b"), uri, max_rows_per_file=200)
    lance_sql.write_dataset(_rows([7, 300], "again"), uri, mode="append")
    lance_sql.dataset(uri).create_scalar_index("id", "BTREE")
    ds = lance_sql.dataset(uri)
    assert OneKeySearch.of(ds.manifest, "id") is not None  # every fragment covered
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    for i, expected in ((7, "again7"), (300, "again300"), (8, "b8"), (7, "again7")):
        got = _get(mw, pa.int64(), i)
        assert _s(got) == [expected]
        assert got.equals(_general(mw, pa.int64(), i, None, monkeypatch))


def test_one_key_search_finds_what_key_addresses_finds(table) -> None:
    """The kept search against :func:`key_addresses` (deleted rows included)."""
    from lance_sql.table.index.planner import key_addresses

    uri, _, _, key = table
    ds = lance_sql.dataset(uri)
    search = OneKeySearch.of(ds.manifest, "id")
    assert search is not None
    for i in (0, 105, 1999, 2000, 5999, 6000, -3):
        value = pa.array([_key(key, i)], key)
        expected = key_addresses(ds.store, ds.manifest, "id", value)
        assert expected is not None
        assert search.addresses(ds.store, value).tolist() == expected.tolist()


def test_an_unreadable_index_falls_back_as_the_general_path(tmp_path: Path,
                                                            monkeypatch) -> None:
    """Index files gone after the take was resolved: the lookup scans instead, with the
    same warning and row as the general path."""
    uri = str(tmp_path / "e.lance")
    lance_sql.write_dataset(_rows(range(3000), "b"), uri, max_rows_per_file=1000)
    lance_sql.dataset(uri).create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    view = mw.view()
    key_table = view.one_key_table({"id": [5]})
    assert key_table is not None
    before = sources.ONE_KEY_TAKES[0]
    assert _s(view.lookup_one(key_table)) == ["b5"]  # resolved, the index opened once
    assert sources.ONE_KEY_TAKES[0] - before == 1
    current_runtime().cache.clear()  # (the opened index and its pages forgotten)
    removed = [p for p in (Path(uri) / "_indices").rglob("*") if p.is_file()]
    for path in removed:
        path.unlink()
    assert removed
    with pytest.warns(IndexFallbackWarning):
        got = view.fresh().lookup_one(view.one_key_table({"id": [2500]}))
    assert got is not None and _s(got) == ["b2500"]
    assert sources.ONE_KEY_TAKES[0] - before == 1  # (the kept take did not answer)
    with pytest.warns(IndexFallbackWarning):
        assert got.equals(_general(mw, INT64, 2500, None, monkeypatch))


def test_threads_share_the_kept_takes(table) -> None:
    """Gets from several threads at once, through one handle (one kept take per column
    list, made by whichever thread comes first): every answer right."""
    _, mw, _, key = table
    rng = np.random.default_rng(5)
    asked = [rng.integers(1000, 6000, 60).tolist() for _ in range(4)]
    columns = [None, ["s"], ["s", "id"], ["v"]]

    def run(keys: list[int], names: list[str] | None) -> list[list]:
        return [_get(mw, key, i, names).to_pylist() for i in keys]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(run, asked, columns))
    for keys, names, got in zip(asked, columns, answers, strict=True):
        for i, rows in zip(keys, got, strict=True):
            full = {"id": _key(key, i), "v": i * 0.5, "s": f"b{i}"}
            assert rows == [{n: full[n] for n in (names or ["id", "v", "s"])}], i
