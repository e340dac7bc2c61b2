"""``ds.to_table(nearest=...)``: pylance's vector search call, answered exactly, row for
row as pylance answers it (a flat search there too: the tables have no vector index)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.memwal import RegionSpec

lance = pytest.importorskip("lance")

KEY = pa.field("id", pa.int64(), nullable=False,
               metadata={"lance-schema:unenforced-primary-key": "true"})


def _table(n: int = 300, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 3)).astype(np.float32)
    vectors[7] = [0.25, -0.5, 1.0]  # the query itself: at distance 0
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 3)
    valid = np.ones(n, bool)
    valid[[3, n - 2]] = False  # rows without a vector are no neighbours
    column = pa.array(column.to_pylist(), column.type, mask=~valid)
    return pa.table({"id": pa.array(np.arange(n), pa.int64()), "v": column,
                     "grp": pa.array(rng.integers(0, 4, n), pa.int32())},
                    schema=pa.schema([KEY, pa.field("v", column.type),
                                      pa.field("grp", pa.int32())]))


CASES = [
    {"nearest": {"column": "v", "q": [0.25, -0.5, 1.0], "k": 5}},
    {"nearest": {"column": "v", "q": [0.25, -0.5, 1.0], "k": 5, "metric": "cosine"}},
    {"nearest": {"column": "v", "q": [0.25, -0.5, 1.0], "k": 5, "metric": "dot"}},
    {"nearest": {"column": "v", "q": [0.25, -0.5, 1.0]}},  # k defaults to 10
    {"nearest": {"column": "v", "q": [1.0, 0.0, 0.0], "k": 20}, "filter": "grp = 1"},
    {"nearest": {"column": "v", "q": [1.0, 0.0, 0.0], "k": 20}, "filter": "grp = 1",
     "prefilter": True},
    {"columns": ["id"], "nearest": {"column": "v", "q": [0.0, 1.0, 0.0], "k": 8},
     "with_row_id": True},
    {"columns": ["grp", "id"], "nearest": {"column": "v", "q": [0.0, 1.0, 0.0], "k": 8},
     "limit": 3, "offset": 2},
    {"columns": ["id"], "nearest": {"column": "v", "q": np.array([0.0, 0.0, 1.0], np.float32),
                                    "k": 4, "nprobes": 20, "refine_factor": 2}},
    # the distance placed by the columns, filtered on after the search
    {"columns": ["_distance", "id"], "nearest": {"column": "v", "q": [0.0, 1.0, 0.0], "k": 6}},
    {"columns": ["id"], "nearest": {"column": "v", "q": [0.0, 1.0, 0.0], "k": 30},
     "filter": "_distance < 1.5 AND grp <> 3"},
    # expressions of the columns found; a matrix of queries (one search each)
    {"columns": {"twice": "id * 2", "g": "grp"},
     "nearest": {"column": "v", "q": np.array([[0.0, 1.0, 0.0]]), "k": 6}, "with_row_id": True},
    {"columns": ["id"], "nearest": {"column": "v", "q": [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]],
                                    "k": 4}, "filter": "grp <> 1"},
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_nearest_scans_match_pylance_row_for_row(tmp_path: Path, case: dict) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lance.dataset(uri).to_table(**case)
    ours = lance_sql.dataset(uri).to_table(**case)
    if isinstance(case.get("columns"), dict):  # (computed columns: nullable here)
        assert [(f.name, f.type) for f in ours.schema] == \
            [(f.name, f.type) for f in theirs.schema]
    else:
        assert ours.schema == theirs.schema
    for name in ours.schema.names:
        if name != "_distance":
            assert ours.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    assert np.allclose(ours.column("_distance").to_numpy(),
                       theirs.column("_distance").to_numpy(), rtol=1e-5, atol=1e-6)
    if not isinstance(case.get("columns"), dict):
        assert ours.drop_columns(["_distance"]).equals(theirs.drop_columns(["_distance"]))


def test_a_post_filter_may_return_fewer_than_k_and_a_prefilter_does_not(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_table(), tmp_path / "t.lance")
    search = {"column": "v", "q": [0.25, -0.5, 1.0], "k": 10}
    post = ds.to_table(nearest=search, filter="grp = 2")
    pre = ds.to_table(nearest=search, filter="grp = 2", prefilter=True)
    assert post.num_rows < 10 == pre.num_rows
    assert set(post["grp"].to_pylist()) == set(pre["grp"].to_pylist()) == {2}
    unfiltered = ds.to_table(nearest=search)
    assert post["id"].to_pylist() == [i for i, g in zip(unfiltered["id"].to_pylist(),
                                                        unfiltered["grp"].to_pylist(),
                                                        strict=True) if g == 2]
    assert ds.scanner(nearest=search, filter="grp = 2").count_rows() == post.num_rows
    batches = list(ds.to_batches(nearest=search, batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 2]


def test_a_table_with_a_mem_wal_searches_its_base_as_pylance_does(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_table(50), tmp_path / "t.lance")
    mw = ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 2))
    with mw.writer() as writer:  # row 7, the nearest, moved far away in the MemWAL
        writer.put(pa.table({"id": [7], "v": [[9.0, 9.0, 9.0]], "grp": [0]},
                            schema=ds.schema))
    search = {"column": "v", "q": [0.25, -0.5, 1.0], "k": 1}
    assert lance_sql.dataset(tmp_path / "t.lance").to_table(nearest=search)["id"].to_pylist() \
        == [7]
    assert mw.nearest("v", [0.25, -0.5, 1.0], k=1)["id"].to_pylist() != [7]


@pytest.mark.parametrize(("nearest", "message"), [
    ({"q": [1.0, 0.0, 0.0]}, "needs 'column' and 'q'"),
    ({"column": "v", "q": [1.0], "k": 0}, "positive whole number"),
    ({"column": "v", "q": [1.0, 0.0, 0.0], "metric": "hamming"}, "unknown metric"),
    ({"column": "v", "q": [1.0, 0.0, 0.0], "nprobe": 3}, "unknown keys"),
    ({"column": "grp", "q": [1.0, 0.0, 0.0]}, "not vectors"),
    ("v", "is a dict"),
])
def test_bad_searches_are_refused_before_reading(tmp_path: Path, nearest: object,
                                                 message: str) -> None:
    ds = lance_sql.write_dataset(_table(20), tmp_path / "t.lance")
    with pytest.raises(InvalidInputError, match=message):
        ds.to_table(nearest=nearest)
