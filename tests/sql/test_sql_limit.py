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


def test_sql_filtered_limit_reads_a_small_range_first(root: Path, reads,
                                                      sigint: None) -> None:
    """A filter and a LIMIT: the first read is a small range (it was 128k rows, a whole
    fragment here), and the other columns are read only for the rows returned."""
    session = lance_sql.connect(root)
    got = session.sql("SELECT id, s FROM t WHERE cat = 3 LIMIT 10").to_arrow_table()
    want = lance.dataset(str(root / "t.lance")).to_table(columns=["id", "s"],
                                                         filter="cat = 3", limit=10)
    assert got.equals(want.cast(got.schema))
    assert [rows for _, _, rows in reads] == [8192]  # cat; id and s taken at 10 rows


def test_sql_rare_filter_limit_reads_each_row_at_most_once(tmp_path: Path, reads,
                                                           sigint: None) -> None:
    """Reads after the first are sized by the rate rows matched at, across fragments (a
    sequence's units share that count): the rows of a rare filter's LIMIT and OFFSET,
    each row read once; a filter matching nothing reads each row once, no more."""
    ids = np.arange(300_000, dtype=np.int64)
    lance_sql.write_dataset(pa.table({"id": ids, "cat": pa.array(ids % 1000, pa.int32())}),
                            str(tmp_path / "r.lance"), max_rows_per_file=100_000)
    session = lance_sql.connect(tmp_path)
    got = session.sql("SELECT id FROM r WHERE cat = 999 LIMIT 150 OFFSET 5"
                      ).to_arrow_table()
    assert got.column("id").to_pylist() == list(range(5999, 155_000, 1000))
    assert sorted(reads) == sorted(set(reads))
    assert sum(rows for _, _, rows in reads) <= 200_000  # to the end of fragment 1 at most
    reads.clear()
    assert session.sql("SELECT id FROM r WHERE cat = 5000 LIMIT 3").to_arrow_table(
        ).num_rows == 0
    assert sorted(reads) == sorted(set(reads))  # no range read twice
    assert sum(rows for _, _, rows in reads) == 300_000


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handling (queries may then run on the calling thread)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_sql_limit_of_a_large_scan_runs_on_the_calling_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_sigint: None) -> None:
    """A scan-only query with a LIMIT reads on the calling thread (no worker thread, no
    second planning) however large its table: it stops at the rows it returns. With
    ORDER BY the LIMIT is DataFusion's top-k over the whole scan, on a worker."""
    from lance_sql.sql import interrupt
    from lance_sql.sql import session as session_module

    ids = np.arange(600_000, dtype=np.int64)
    lance_sql.write_dataset(pa.table({"id": ids, "cat": pa.array(ids % 1000, pa.int32())}),
                            str(tmp_path / "big.lance"), max_rows_per_file=200_000)
    session = lance_sql.connect(tmp_path)
    started: list[int] = []
    real_run = interrupt.run_interruptibly
    for module in (session_module, interrupt):
        monkeypatch.setattr(module, "run_interruptibly",
                            lambda fn, cancel: started.append(1) or real_run(fn, cancel))
    got = session.sql("SELECT id FROM big WHERE cat = 7 LIMIT 4").to_arrow_table()
    assert got.column("id").to_pylist() == [7, 1007, 2007, 3007] and started == []
    got = session.sql("SELECT id FROM big WHERE cat = 7 ORDER BY id DESC LIMIT 3"
                      ).to_arrow_table()
    assert got.column("id").to_pylist() == [599_007, 598_007, 597_007] and started == [1]
    got = session.sql("SELECT id FROM big WHERE cat = 7 ORDER BY id LIMIT 2 OFFSET 1"
                      ).to_arrow_table()
    assert got.column("id").to_pylist() == [1007, 2007]
