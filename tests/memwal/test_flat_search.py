"""Top-k search on a plain table (no MemWAL: the search plan with one source), from
Python and SQL, against brute-force numpy distances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

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
        dist = -(vectors @ query)
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
