"""Rows whose distance is undefined (a NaN in the vector; for cosine a zero vector) are
no neighbours, as in pylance's flat search; system columns in a plain table's search
filter; ``k`` checked. Compared with pylance 14.0.2 and brute force."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.memwal import RegionSpec

lance = pytest.importorskip("lance")
NAN = float("nan")
KEY = pa.field("id", pa.int64(), nullable=False,
               metadata={"lance-schema:unenforced-primary-key": "true"})
SCHEMA = pa.schema([KEY, pa.field("vec", pa.list_(pa.float32(), 2))])


def _ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()


def _pylance(uri: str, query: list[float], k: int, metric: str) -> list[int]:
    got = lance.dataset(uri).to_table(nearest={"column": "vec", "q": query, "k": k,
                                                "metric": metric, "use_index": False})
    return _ids(got)


@pytest.mark.parametrize("metric", ["l2", "dot", "cosine"])
def test_a_nan_vector_neither_wins_nor_hides_the_true_neighbours(tmp_path: Path,
                                                                 metric: str) -> None:
    uri = str(tmp_path / "t")
    # the NaN row comes first, in its own fragment, so it is met before the real ones
    rows = pa.table({"id": [0, 1, 2, 3, 4, 5],
                     "vec": [[NAN, 0], [5, 5], [0.1, 0.2], [0.2, 0.1], [NAN, NAN], [-1, 3]]},
                    schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, uri, max_rows_per_file=2)
    query = [1.0, 0.5]
    for k in (1, 2, 4):
        expected = _pylance(uri, query, k, metric)
        assert 0 not in expected and 4 not in expected
        got = ds.nearest("vec", query, k=k, metric=metric)
        assert _ids(got) == expected
        assert not np.isnan(got.column("_distance").to_numpy()).any()
    session = lance_sql.LanceSession()
    session.register("t", uri)
    sql = session.sql(f"SELECT id FROM nearest('t', 'vec', [1.0, 0.5], 4, '{metric}')")
    assert [r["id"] for r in sql.to_pylist()] == _pylance(uri, query, 4, metric)


def test_cosine_leaves_out_zero_vectors(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table({"id": [0, 1, 2, 3], "vec": [[0, 0], [1, 0], [-1, 0], [NAN, 1]]},
                    schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, uri)
    got = ds.nearest("vec", [1.0, 0.0], k=3, metric="cosine")
    assert _ids(got) == _pylance(uri, [1.0, 0.0], 3, "cosine") == [1, 2]
    assert got.column("_distance").to_pylist() == [0.0, 2.0]
    assert ds.nearest("vec", [0.0, 0.0], k=3, metric="cosine").num_rows == 0


def test_memwal_search_skips_nan_vectors(tmp_path: Path) -> None:
    rows = pa.table({"id": [0, 1, 2, 3], "vec": [[NAN, 0], [5, 5], [0.1, 0], [0.2, 0]]},
                    schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, str(tmp_path / "lsm"), max_rows_per_file=2)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 4))
    with mw.writer() as writer:
        writer.put(pa.table({"id": [10], "vec": [[0.3, 0.0]]}, schema=SCHEMA))
        got = mw.nearest("vec", [0.0, 0.0], k=2)
    assert _ids(got) == [2, 3]


def test_plain_table_search_filters_on_system_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table({"id": [0, 1, 2], "vec": [[1, 0], [0.5, 0], [0, 1]]}, schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, uri, enable_stable_row_ids=True)
    ds.delete("id = 0")
    ds.merge_insert("id").when_matched_update_all().execute(
        pa.table({"id": [2], "vec": [[0, 2]]}, schema=SCHEMA))
    got = ds.nearest("vec", [1, 0], k=3, filter="_rowid < 2", columns=["id", "_rowid"])
    assert got.to_pydict()["id"] == [1] and got.to_pydict()["_rowid"] == [1]
    updated = ds.nearest("vec", [1, 0], k=3, filter=f"_row_last_updated_at_version = "
                         f"{ds.version}")
    assert _ids(updated) == [2]
    session = lance_sql.LanceSession()
    session.register("t", uri)
    sql = session.sql("SELECT id FROM nearest('t', 'vec', [1.0, 0.0], 3, "
                      "{'filter': '_rowaddr >= 0 AND _rowid > 1'})").to_pylist()
    assert sql == [{"id": 2}]


def test_k_must_be_a_whole_number(tmp_path: Path) -> None:
    rows = pa.table({"id": [0, 1], "vec": [[1, 0], [0, 1]]}, schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, str(tmp_path / "t"))
    for bad in (2.5, True, 0, "2"):
        with pytest.raises(InvalidInputError, match="k must be"):
            ds.nearest("vec", [1, 0], k=bad)
    assert ds.nearest("vec", [1, 0], k=np.int64(1)).num_rows == 1
