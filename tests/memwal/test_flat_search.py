"""Top-k search on a plain table (no MemWAL: the search plan with one source), from
Python and SQL, against brute-force numpy distances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec

N, DIM = 3000, 8


def _table(seed: int = 3) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)
    table = pa.table({
        "id": np.arange(N, dtype=np.int64),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM),
        "grp": rng.integers(0, 4, N),
    })
    return table, vectors.astype(np.float64)


def _expected(vectors: np.ndarray, query: np.ndarray, metric: str, k: int,
              keep: np.ndarray) -> list[int]:
    if metric == "l2":
        dist = ((vectors - query) ** 2).sum(axis=1)
    elif metric == "cosine":
        dist = 1 - vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    else:
        dist = 1 - vectors @ query
    dist = np.where(keep, dist, np.inf)
    return np.argsort(dist, kind="stable")[:k].tolist()


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_plain_table_nearest_equals_brute_force(tmp_path: Path, metric: str) -> None:
    table, vectors = _table()
    ds = lance_sql.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=700)
    query = np.linspace(-1, 1, DIM)
    got = ds.nearest("vec", query, k=7, metric=metric, columns=["id"])
    assert got.column_names == ["id", "_distance"]
    assert got["id"].to_pylist() == _expected(vectors, query, metric, 7, np.ones(N, bool))
    assert got["_distance"].to_pylist() == sorted(got["_distance"].to_pylist())
    filtered = ds.nearest("vec", query, k=5, metric=metric, columns=["id", "grp"],
                          filter="grp = 2")
    keep = table["grp"].to_numpy() == 2
    assert filtered["id"].to_pylist() == _expected(vectors, query, metric, 5, keep)


def test_sql_nearest_on_a_plain_table(tmp_path: Path) -> None:
    table, vectors = _table(5)
    lance_sql.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=1000)
    query = [0.25] * DIM
    session = lance_sql.connect(str(tmp_path))
    got = session.sql(f"SELECT id, _distance FROM nearest('t', 'vec', {query}, 4) "
                      "ORDER BY _distance").to_arrow_table()
    assert got["id"].to_pylist() == _expected(vectors, np.array(query), "l2", 4,
                                              np.ones(N, bool))
    with pytest.raises(InvalidInputError):
        lance_sql.dataset(str(tmp_path / "t.lance")).nearest("nope", query, k=3)


PK = {"lance-schema:unenforced-primary-key": "true"}
LSM = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                 pa.field("vec", pa.list_(pa.float32(), 4))])


def _lsm_rows(model: dict[int, np.ndarray], ids: list[int], rng: np.random.Generator
              ) -> pa.Table:
    vectors = rng.normal(size=(len(ids), 4)).astype(np.float32)
    model.update(zip(ids, vectors.astype(np.float64), strict=True))
    return pa.table({"id": ids, "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(vectors.reshape(-1)), 4)}, schema=LSM)


def _brute(model: dict[int, np.ndarray], query: np.ndarray, k: int) -> list[int]:
    ids = np.array(sorted(model))
    vectors = np.stack([model[i] for i in ids])
    return ids[_expected(vectors, query, "l2", k, np.ones(len(ids), bool))].tolist()


def test_nearest_reads_an_old_version_of_an_lsm_table(tmp_path: Path) -> None:
    """version=n searches base version n plus the generations its MemWAL index lists as
    unmerged (as VERSION AS OF scans), from Python and SQL, against brute force."""
    rng = np.random.default_rng(11)
    model: dict[int, np.ndarray] = {}
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_lsm_rows(model, list(range(300)), rng), uri,
                                 max_rows_per_file=100)
    plain_then = ds.version
    plain_model = dict(model)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as w:
        w.put(_lsm_rows(model, list(range(0, 300, 7)) + [400, 401], rng))
        w.delete(pa.table({"id": pa.array([3, 4, 5], pa.int64())}))
        for gone in (3, 4, 5):
            model.pop(gone)
        w.flush_memtable()
    then = mw.refresh_index().version  # lists the flushed generations as unmerged
    old = dict(model)
    query = np.array([0.3, -0.2, 0.5, 0.1])
    with mw.writer() as w:  # afterwards: new rows right at the query, merged
        near = _lsm_rows(model, list(range(1, 300, 5)), rng)
        w.put(near.set_column(1, "vec", pa.FixedSizeListArray.from_arrays(pa.array(
            np.tile(query, near.num_rows).astype(np.float32)), 4)))
        w.flush_memtable()
    mw.merge()
    mw.refresh_index()
    want = _brute(old, query, 9)
    latest = lance_sql.dataset(uri)
    assert latest.nearest("vec", query, k=9, columns=["id"])["id"].to_pylist() != want
    view = latest.mem_wal.scanner(version=then).to_table()
    assert {r["id"] for r in view.to_pylist()} == set(old)  # the view at version `then`
    assert latest.nearest("vec", query, k=9, columns=["id"], version=then)[
        "id"].to_pylist() == want
    assert latest.mem_wal.nearest("vec", query, 9, columns=["id"], exact=True,
                                  version=then)["id"].to_pylist() == want
    session = lance_sql.connect(str(tmp_path))
    q = query.tolist()
    for sql in (f"SELECT id FROM nearest('t', 'vec', {q}, 9, 'l2', {then}) "
                "ORDER BY _distance",
                f"SELECT id FROM nearest('t@{then}', 'vec', {q}, 9) ORDER BY _distance"):
        assert session.sql(sql).to_arrow_table()["id"].to_pylist() == want
    # a version before the MemWAL: the plain table's own rows
    assert latest.nearest("vec", query, k=5, columns=["id"], version=plain_then)[
        "id"].to_pylist() == _brute(plain_model, query, 5)
    got = session.sql(f"SELECT id FROM nearest('t', 'vec', {q}, 5, 'l2', {plain_then}) "
                      "ORDER BY _distance").to_arrow_table()
    assert got["id"].to_pylist() == _brute(plain_model, query, 5)
    with pytest.raises(InvalidInputError, match="version"):
        session.sql(f"SELECT * FROM nearest('t@{then}', 'vec', {q}, 9, 'l2', {then})"
                    ).to_arrow_table()
    with pytest.raises(lance_sql.LanceError):
        session.sql(f"SELECT * FROM nearest('t', 'vec', {q}, 9, 'l2', 999)").to_arrow_table()


@pytest.mark.parametrize("exact", [False, True])
def test_nearest_never_returns_a_key_put_and_deleted_in_one_generation(
        tmp_path: Path, exact: bool) -> None:
    """A key put twice, or put then deleted, within one MemTable or one flushed generation
    has one live row at most: nearest (bloom or exact, Python and SQL) equals brute force
    over a last-write-wins model."""
    rng = np.random.default_rng(13)
    model: dict[int, np.ndarray] = {}
    ds = lance_sql.write_dataset(_lsm_rows(model, list(range(100)), rng),
                                 str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    query = np.array([0.5, 0.5, 0.5, 0.5])
    near = np.tile(query, 4).astype(np.float32)
    with mw.writer() as w:
        for flush in (True, False):  # a flushed generation, then the MemTable
            first = 200 if flush else 300
            keys = [first, first + 1, 5 + first // 100, 6 + first // 100]
            w.put(pa.table({"id": keys, "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(near), 4)}, schema=LSM))  # right at the query
            w.delete(pa.table({"id": pa.array(keys[:1] + keys[2:3], pa.int64())}))
            w.put(_lsm_rows(model, keys[1:2] + keys[3:], rng))  # moved away
            model.pop(keys[2])
            if flush:
                w.flush_memtable()
        got = mw.nearest("vec", query, k=6, columns=["id"], exact=exact)
        assert got["id"].to_pylist() == _brute(model, query, 6)
        session = lance_sql.connect(str(tmp_path))
        sql = (f"SELECT id FROM nearest('t', 'vec', {query.tolist()}, 6) "
               "ORDER BY _distance")
        assert session.sql(sql).to_arrow_table()["id"].to_pylist() == _brute(model, query, 6)


@pytest.mark.parametrize("exact", [False, True])
def test_nearest_skips_a_base_row_a_later_base_row_of_its_key_supersedes(
        tmp_path: Path, exact: bool) -> None:
    """Plain appends may hold a key twice in the base: only its newest (last) row is a
    candidate, as LSM scans and lookups read it; the older copy right at the query never
    shows (Python, bloom or exact, and SQL)."""
    rng = np.random.default_rng(17)
    model: dict[int, np.ndarray] = {}
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_lsm_rows(model, list(range(60)), rng), uri, max_rows_per_file=25)
    query = np.array([0.5, -0.5, 0.5, -0.5])
    at_query = pa.table({"id": [7, 8], "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(np.tile(query, 2).astype(np.float32)), 4)}, schema=LSM)
    lance_sql.write_dataset(at_query, uri, mode="append")  # key 7 and 8 again, at the query
    model[7] = model[8] = query
    lance_sql.write_dataset(_lsm_rows(model, [7], rng), uri, mode="append")  # 7: moved away
    ds = lance_sql.dataset(uri)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as w:
        w.put(_lsm_rows(model, [100, 101], rng))
        got = mw.nearest("vec", query, k=5, columns=["id"], exact=exact)
        assert got["id"].to_pylist() == _brute(model, query, 5)
        assert got["id"].to_pylist()[0] == 8 and got["id"].to_pylist().count(7) <= 1
        session = lance_sql.connect(str(tmp_path))
        sql = f"SELECT id FROM nearest('t', 'vec', {query.tolist()}, 5) ORDER BY _distance"
        assert session.sql(sql).to_arrow_table()["id"].to_pylist() == _brute(model, query, 5)
