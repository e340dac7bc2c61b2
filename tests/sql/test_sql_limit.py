"""SQL ``LIMIT`` (and ``OFFSET``) on a plain table: DataFusion pushes the fetch into the
scan, which then reads only the rows up to the one completing it. The rows equal
pylance's ``to_table(limit=, offset=)``, across fragments and deletion vectors."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.files.reader import FragmentReader

ROWS = 200_000
PER_FILE = 50_000


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sqllimit")
    ids = np.arange(ROWS, dtype=np.int64)
    data = pa.table({"id": ids, "cat": pa.array(ids % 7, pa.int32()),
                     "s": pa.array([f"r{i}" for i in range(ROWS)])})
    lance_sql.write_dataset(data, str(root / "t.lance"), max_rows_per_file=PER_FILE)
    # deletions at the head of fragment 0, all over fragment 1, the tail of fragment 2
    lance_sql.dataset(str(root / "t.lance")).delete(
        "id < 3 OR (id >= 50000 AND id < 100000 AND id % 4 = 1) OR "
        "(id >= 140000 AND id < 150000)")
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every ranged read of a fragment's columns: (fragment id, offset, rows)."""
    calls: list[tuple[int, int, int]] = []
    original = FragmentReader.read

    def read(reader: FragmentReader, fields, *, offset: int = 0, length: int | None = None):
        rows = reader.fragment.physical_rows - offset if length is None else length
        calls.append((reader.fragment.id, offset, rows))
        return original(reader, fields, offset=offset, length=length)

    monkeypatch.setattr(FragmentReader, "read", read)
    return calls


@pytest.fixture(params=["default", "own"], ids=["sigint-default", "sigint-handled"])
def sigint(request: pytest.FixtureRequest) -> Iterator[None]:
    """Queries run on the calling thread while SIGINT is Python's default handler; with
    another handler installed (PySpark installs one) they run on a worker thread, with
    the scan's units as partitions DataFusion reads side by side."""
    if request.param == "default":
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(("limit", "offset"), [(10, 0), (10, 7), (20, 49_990),
                                               (100, 99_950), (5, 137_490),
                                               (60_000, 20_000), (3, 170_000)])
@pytest.mark.parametrize("columns", [["id", "cat", "s"], ["s"], ["cat", "id"]])
def test_sql_limit_rows_equal_pylance(root: Path, limit: int, offset: int,
                                      columns: list[str], sigint: None) -> None:
    want = lance.dataset(str(root / "t.lance")).to_table(columns=columns, limit=limit,
                                                         offset=offset)
    session = lance_sql.connect(root)
    got = session.sql(f"SELECT {', '.join(columns)} FROM t LIMIT {limit} OFFSET {offset}"
                      ).to_arrow_table()
    assert got.equals(want.cast(got.schema))


def test_sql_limit_reads_only_the_rows_it_returns(root: Path, reads, sigint: None) -> None:
    session = lance_sql.connect(root)
    got = session.sql("SELECT * FROM t LIMIT 10").to_arrow_table()
    assert got.column("id").to_pylist() == list(range(3, 13))
    assert {frag for frag, _, _ in reads} == {0}
    assert max(rows for _, _, rows in reads) <= 13  # up to the 10th live row
    reads.clear()
    got = session.sql("SELECT s FROM t LIMIT 5 OFFSET 49995").to_arrow_table()
    assert got.column("s").to_pylist() == ["r49998", "r49999", "r50000", "r50002",
                                           "r50003"]
    # the fetch (offset + limit) ends in fragment 1, at its 3rd live row
    assert sum(rows for frag, _, rows in reads if frag == 1) <= 4
