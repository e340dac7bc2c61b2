"""``select_rows`` of ds.delete / ds.update: addresses are checked against the version
the write starts from (typed errors, nothing committed) before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, LanceError, NotFoundError

Write = Callable[[lance_sql.LanceDataset, Callable], object]
WRITES: dict[str, Write] = {
    "delete": lambda ds, sel: ds.delete("unused", select_rows=sel),
    "update": lambda ds, sel: ds.update({"s": "'x'"}, select_rows=sel),
}


@pytest.fixture
def ds(tmp_path: Path) -> lance_sql.LanceDataset:
    """Fragments 0 (rows 0-3, offset 1 deleted) and 1 (rows 4-7)."""
    table = pa.table({"id": list(range(8)), "s": [f"s{i}" for i in range(8)]})
    out = lance_sql.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=4)
    out.delete("id = 1")
    return out


def _state(ds: lance_sql.LanceDataset) -> tuple[int, dict]:
    fresh = lance_sql.dataset(ds.uri)
    return fresh.version, fresh.to_table().sort_by("id").to_pydict()


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize(("addresses", "error", "match"), [
    ([0, 1], InvalidInputError, "deleted row"),                      # fragment 0, offset 1
    ([(1 << 32) | 4], InvalidInputError, "past the 4 rows"),
    ([(7 << 32) | 0], NotFoundError, "fragment 7"),
    (np.array([-1, 0]), InvalidInputError, "negative"),
    (np.array([0.5]), InvalidInputError, "integers"),
    (pa.array([0, None], pa.uint64()), InvalidInputError, "NULL"),
])
def test_bad_addresses_are_typed_and_commit_nothing(ds, write: str, addresses, error,
                                                    match: str) -> None:
    before = _state(ds)
    with pytest.raises(error, match=match):
        WRITES[write](ds, lambda base: addresses)
    assert _state(ds) == before
    assert not list(Path(ds.uri).glob("_deletions/*_3.*"))  # no file for a next version


def test_live_rows_are_written_and_rows_that_moved_are_refused(ds) -> None:
    moved = (1 << 32) | 2  # id 6: the update rewrites it into a new fragment
    assert ds.update({"s": "'x'"}, select_rows=lambda base: np.array([0, moved]))[
        "num_rows_updated"] == 2
    with pytest.raises(InvalidInputError, match="deleted row"):  # its old address
        ds.delete("unused", select_rows=lambda base: pa.array([moved], pa.uint64()))
    assert ds.delete("unused", select_rows=lambda base: pa.array([(1 << 32) | 3],
                                                                   pa.uint64()))[
        "num_deleted_rows"] == 1
    got = lance_sql.dataset(ds.uri).to_table().sort_by("id").to_pydict()
    assert got["id"] == [0, 2, 3, 4, 5, 6]
    assert got["s"] == ["x", "s2", "s3", "s4", "s5", "x"]


def test_many_addresses_are_checked_at_once(tmp_path: Path) -> None:
    n = 200_000
    table = pa.table({"id": np.arange(n)})
    ds = lance_sql.write_dataset(table, tmp_path / "big.lance")
    ds.delete("id % 1000 = 999")
    everything = np.arange(n, dtype=np.uint64)
    with pytest.raises(LanceError, match="200 selected row"):
        ds.delete("unused", select_rows=lambda base: everything)
    alive = everything[everything % 1000 != 999]
    assert ds.delete("unused", select_rows=lambda base: alive)["num_deleted_rows"] == len(alive)
    assert lance_sql.dataset(ds.uri).count_rows() == 0
