"""Top-k search at its edges: a stored vector equal to the query is at distance 0 (the
query rounded to the column's float type, as pylance casts it), cosine distances are
never negative, and bad calls (a clashing ``_distance`` column, k out of range, unknown
columns) are the same typed errors on plain and MemWAL tables, in Python and SQL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.memwal import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}


def _vectors(rows: list[list[float]], t: pa.DataType) -> pa.Array:
    return pa.array(rows, pa.list_(t, len(rows[0])))


@pytest.mark.parametrize("t", [pa.float16(), pa.float32(), pa.float64()])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_a_stored_copy_of_the_query_is_at_distance_zero(tmp_path: Path, t: pa.DataType,
                                                        metric: str) -> None:
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(200, 5)).tolist()
    ds = lance_sql.write_dataset(pa.table({"id": np.arange(200), "v": _vectors(rows, t)}),
                                 str(tmp_path / "t.lance"))
    for i in (0, 17, 199):
        got = ds.nearest("v", rows[i], k=1, metric=metric)
        assert got["id"].to_pylist() == [i]
        assert got["_distance"].to_pylist() == [0.0]
    every = ds.nearest("v", rows[3], k=200, metric=metric)["_distance"].to_numpy()
    assert (every >= 0).all()
    sql = lance_sql.connect(tmp_path).sql(
        f"SELECT id FROM nearest('t', 'v', {rows[17]}, 3, '{metric}') WHERE _distance = 0")
    assert sql.to_arrow_table()["id"].to_pylist() == [17]


def test_huge_float32_vectors_find_their_copy(tmp_path: Path) -> None:
    rows = [[0.1, 0.2], [0.3, 0.7], [3e38, 3e38]]
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3],
                                           "v": _vectors(rows, pa.float32())}),
                                 str(tmp_path / "t.lance"))
    got = ds.nearest("v", [3e38, 3e38], k=1)
    assert got.to_pydict() == {"id": [3], "v": [[pytest.approx(3e38, rel=1e-6)] * 2],
                               "_distance": [0.0]}


def _both(tmp_path: Path, extra: dict | None = None) -> list:
    """A plain table and a MemWAL table of the same rows (plus ``extra`` columns)."""
    key = pa.field("id", pa.int64(), nullable=False, metadata=PK)
    columns = {"id": pa.array([0, 1, 2], pa.int64()),
               "v": _vectors([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], pa.float32()),
               **(extra or {})}
    schema = pa.schema([key, *(pa.field(n, a.type) for n, a in list(columns.items())[1:])])
    plain = lance_sql.write_dataset(pa.table(columns, schema=schema), str(tmp_path / "p.lance"))
    lsm = lance_sql.write_dataset(pa.table(columns, schema=schema), str(tmp_path / "l.lance"))
    lsm.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 2))
    return [lance_sql.dataset(plain.uri), lance_sql.dataset(lsm.uri)]


def test_a_column_named_distance_is_a_schema_error(tmp_path: Path) -> None:
    """A plain table's search refuses it; a MemWAL table cannot have it (reserved)."""
    with pytest.raises(SchemaError, match="_distance"):
        _both(tmp_path, {"_distance": pa.array([1.0, 2.0, 3.0])})
    ds = lance_sql.dataset(tmp_path / "p.lance")
    session = lance_sql.connect(tmp_path)
    with pytest.raises(SchemaError, match="_distance"):
        ds.nearest("v", [0.0, 1.0], k=1)
    for name in ("p",):
        with pytest.raises(SchemaError, match="_distance"):
            session.sql(f"SELECT id FROM nearest('{name}', 'v', [0.0, 1.0], 1)").to_arrow_table()


def test_bad_calls_are_the_same_typed_errors_on_every_table(tmp_path: Path) -> None:
    session = lance_sql.connect(tmp_path)
    for name, ds in zip(("p", "l"), _both(tmp_path), strict=True):
        with pytest.raises(InvalidInputError, match="1..1000000"):
            ds.nearest("v", [0.0, 1.0], k=2**70)
        with pytest.raises(InvalidInputError, match="1..1000000"):
            ds.nearest("v", [0.0, 1.0], k=1_000_001)
        with pytest.raises(InvalidInputError, match="no column 'nope'"):
            ds.nearest("nope", [0.0, 1.0], k=1)
        with pytest.raises(InvalidInputError, match="names no column"):
            ds.nearest("v", [0.0, 1.0], k=1, filter="nope = 1")
        with pytest.raises(InvalidInputError, match="no column 'nope'"):
            session.sql(f"SELECT id FROM nearest('{name}', 'nope', [0.0, 1.0], 1)")
        with pytest.raises(InvalidInputError):
            session.sql(f"SELECT id FROM nearest('{name}', 'v', [0.0, 1.0], 1, "
                        "{'filter': 'nope = 1'})")
        with pytest.raises(InvalidInputError, match="list of column names"):
            ds.nearest("v", [0.0, 1.0], k=1, columns="id")
        assert ds.nearest("v", [0.0, 1.0], k=1_000_000)["id"].to_pylist()[0] == 0
