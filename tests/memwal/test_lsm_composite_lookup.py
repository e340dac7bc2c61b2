"""Lookups of a composite primary key on a base table with a BTREE index on one of its
columns: the base finds its candidate rows by that index (one search, one take; counted)
instead of scanning the key columns of every fragment, and gives the same rows as the
scan: keys asked twice, absent keys (their indexed column matching other rows), base rows
deleted, keys tombstoned in a generation and in the MemTable, keys only in the MemTable;
over base tables written by pylance and by lance_sql. Too many candidates, or no index,
scan as before."""

from __future__ import annotations

import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import sources
from lance_sql.memwal.read.sources import BaseSource

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False, metadata=PK),
                    pa.field("b", pa.string(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64())])
N = 12_000


def _rows(a, tag: float) -> pa.Table:
    a = np.asarray(a, np.int64)
    return pa.table({"a": a, "b": [f"b{i % 3}" for i in a.tolist()],
                     "v": a * 1.0 + tag}, schema=SCHEMA)


def _keys(a, b=None) -> pa.Table:
    a = np.asarray(a, np.int64)
    bs = [f"b{i % 3}" for i in a.tolist()] if b is None else b
    return pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(bs, pa.string())})


@pytest.fixture(params=["pylance", "lance_sql"])
def table(request, tmp_path: Path):
    uri = str(tmp_path / "c.lance")
    if request.param == "pylance":
        ds = lance.write_dataset(_rows(np.arange(N), 0), uri, max_rows_per_file=5_000)
        ds.create_scalar_index("a", "BTREE")
        ds.delete("a >= 100 AND a < 110")
    else:
        ours = lance_sql.write_dataset(_rows(np.arange(N), 0), uri, max_rows_per_file=5_000)
        ours.create_scalar_index("a", "BTREE")
        lance_sql.dataset(uri).delete("a >= 100 AND a < 110")
    mw = MemWal.initialize(lance_sql.dataset(uri), None, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer(region=uuid.uuid4())
    writer.put(_rows([5, 6, 7, 20, 21], 1))
    writer.delete(_keys([30, 31]))  # tombstones in a generation
    writer.flush_memtable()
    writer.put(_rows([6, 40, N + 1, N + 2], 2))  # N + 1, N + 2: only in the MemTable
    writer.delete(_keys([41, 20]))  # tombstones in the MemTable
    yield mw
    writer.close()


def _asked() -> pa.Table:
    rng = np.random.default_rng(2)
    a = np.r_[rng.integers(0, N, 300), [5, 5, 6, 20, 30, 31, 40, 41, 100, 105, N + 1, N + 2,
                                        N + 7, -3]]
    keys = _keys(a)
    # the same a with another b: the index finds rows, none of them the key
    return pa.concat_tables([keys, _keys([7, 8, 9], ["nope", "b0", "b1"])])


def _model(mw: MemWal) -> dict[tuple, float]:
    whole = mw.scanner(columns=["a", "b", "v"]).to_table()
    return {(a, b): v for a, b, v in zip(*(whole.column(c).to_pylist() for c in "abv"),
                                         strict=True)}


@pytest.mark.parametrize("count", [1, 2, 317])
def test_composite_keys_by_the_index_equal_the_scan(table: MemWal, count: int,
                                                    monkeypatch) -> None:
    asked = _asked()
    asked = asked.slice(asked.num_rows - count) if count < asked.num_rows else asked
    before = sources.COMPOSITE_BY_INDEX[0]
    got = table.get(asked)
    used = sources.COMPOSITE_BY_INDEX[0] - before  # (once a key when looked up key by key)
    assert used > 0
    with monkeypatch.context() as m:
        m.setattr(BaseSource, "_candidates_take", lambda self, keys, columns: None)
        scanned = table.get(asked)
    assert sources.COMPOSITE_BY_INDEX[0] == before + used
    assert got.equals(scanned)
    model = _model(table)
    expected = [(a, b, model[(a, b)]) for a, b in zip(asked.column("a").to_pylist(),
                                                      asked.column("b").to_pylist(),
                                                      strict=True) if (a, b) in model]
    assert list(zip(*(got.column(c).to_pylist() for c in "abv"), strict=True)) == expected


def test_too_many_candidates_or_no_index_scan(table: MemWal, monkeypatch) -> None:
    asked = _asked()
    expected = table.get(asked)
    monkeypatch.setattr(sources, "_CANDIDATES_MIN", 0)
    monkeypatch.setattr(sources, "_CANDIDATES_PER_KEY", 0)
    before = sources.COMPOSITE_BY_INDEX[0]
    assert table.get(asked).equals(expected)
    assert sources.COMPOSITE_BY_INDEX[0] == before


def test_fragments_added_since_the_index_was_built_are_searched_in_memory(
        tmp_path: Path, monkeypatch) -> None:
    """Rows appended after the index on ``a`` (new keys, and base keys again: the newer
    row wins): the candidates of those fragments come from their values in memory, and
    the answers equal the key-column scan's."""
    uri = str(tmp_path / "lag.lance")
    ds = lance_sql.write_dataset(_rows(np.arange(N), 0), uri, max_rows_per_file=5_000)
    ds.create_scalar_index("a", "BTREE")
    lance_sql.write_dataset(_rows(np.r_[np.arange(N, N + 50), [5, 6, 7]], 3), uri,
                            mode="append")
    mw = MemWal.initialize(lance_sql.dataset(uri), None, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    asked = _keys([5, 6, 7, 8, N + 3, N + 49, N + 60, 11_000])
    before = sources.COMPOSITE_BY_INDEX[0]
    got = mw.get(asked)
    assert sources.COMPOSITE_BY_INDEX[0] > before
    with monkeypatch.context() as m:
        m.setattr(BaseSource, "_candidates_take", lambda self, keys, columns: None)
        assert got.equals(mw.get(asked))
    assert dict(zip(got.column("a").to_pylist(), got.column("v").to_pylist(),
                    strict=True)) == {5: 8.0, 6: 9.0, 7: 10.0, 8: 8.0, N + 3: N + 6.0,
                                      N + 49: N + 52.0, 11_000: 11_000.0}
