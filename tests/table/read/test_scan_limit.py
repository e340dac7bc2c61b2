"""Scans with a limit and an offset read only the rows they hand out: the same rows as
pylance's ``to_table(limit=, offset=)`` (and as the unlimited scan's first rows), across
fragment boundaries and deletion vectors, with only the first fragments' leading rows
decoded."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read.scan import Scanner

ROWS = 5000
PER_FILE = 1200  # fragments of 1200, 1200, 1200, 1200, 200 rows


@pytest.fixture(scope="module")
def table_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("limit") / "t")
    ids = np.arange(ROWS, dtype=np.int64)
    data = pa.table({"id": ids,
                     "cat": pa.array(ids % 7, pa.int32()),
                     "s": pa.array([f"row-{i}" for i in range(ROWS)])})
    lance_sql.write_dataset(data, path, max_rows_per_file=PER_FILE)
    # deletions at the start of fragment 0, all over fragment 1, and the whole of the
    # last rows of fragment 2
    lance_sql.dataset(path).delete("id < 5 OR (id >= 1200 AND id % 3 = 0) "
                                   "OR (id >= 3000 AND id < 3600)")
    return path


class Reads:
    """Records every ranged read of a fragment's columns: (fragment id, offset, rows)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int, int]] = []
        original = FragmentReader.read

        def read(reader: FragmentReader, fields, *, offset: int = 0,
                 length: int | None = None):
            rows = reader.fragment.physical_rows - offset if length is None else length
            self.calls.append((reader.fragment.id, offset, rows))
            return original(reader, fields, offset=offset, length=length)

        monkeypatch.setattr(FragmentReader, "read", read)

    def rows(self) -> int:
        return sum(rows for _, _, rows in self.calls)

    def fragments(self) -> set[int]:
        return {frag for frag, _, _ in self.calls}


def _same(got: pa.Table, want: pa.Table) -> bool:
    """Equal tables (column-less ones by their row counts: ``cast`` and ``equals`` lose
    or tell apart those)."""
    if got.num_columns == 0:
        return want.num_columns == 0 and got.num_rows == want.num_rows
    return got.equals(want.cast(got.schema))


CASES = [(10, 0), (0, 3), (7, 1195), (50, 1190), (1300, 100), (10, 2390), (10, 2999),
         (500, 3000), (10, 4000), (10, 4395), (100, 4399), (10, 9000), (None, 4390),
         (3, None), (4995, 0)]


@pytest.mark.parametrize(("limit", "offset"), CASES)
@pytest.mark.parametrize("columns", [None, ["s", "id"], ["id", "_rowaddr"], []])
def test_limited_rows_equal_pylance(table_path, limit, offset, columns) -> None:
    ours = lance_sql.dataset(table_path)
    want = lance.dataset(table_path).to_table(columns=columns, limit=limit, offset=offset)
    got = ours.to_table(columns=columns, limit=limit, offset=offset)
    assert got.num_rows == want.num_rows
    assert _same(got, want)
    whole = ours.to_table(columns=columns)
    start = min(offset or 0, whole.num_rows)
    stop = whole.num_rows if limit is None else min(whole.num_rows, start + limit)
    # lengths explicit: slices of a table without columns are not clamped
    assert _same(got, whole.slice(start, stop - start))
    batches = list(ours.scanner(columns=columns, limit=limit, offset=offset,
                                batch_size=64).to_batches())
    assert sum(b.num_rows for b in batches) == got.num_rows
    assert ours.scanner(columns=columns, limit=limit, offset=offset).count_rows() == \
        got.num_rows


@pytest.mark.parametrize("filter", ["cat = 3", "s LIKE 'row-1%'", "cat = 3 OR id > 4000"])
@pytest.mark.parametrize(("limit", "offset"), [(10, 0), (5, 1000), (300, 50), (2000, 0),
                                               (10, 700)])
def test_filtered_limited_rows_equal_pylance(table_path, filter, limit, offset) -> None:
    want = lance.dataset(table_path).to_table(filter=filter, limit=limit, offset=offset)
    got = lance_sql.dataset(table_path).to_table(filter=filter, limit=limit, offset=offset)
    assert got.equals(want.cast(got.schema))


def test_limit_reads_only_the_leading_rows_of_the_first_fragment(table_path,
                                                                  monkeypatch) -> None:
    reads = Reads(monkeypatch)
    got = lance_sql.dataset(table_path).to_table(limit=10)
    assert got.column("id").to_pylist() == list(range(5, 15))
    assert reads.fragments() == {0}
    assert reads.rows() <= 3 * 15  # up to the 10th live row, per column read


def test_offset_skips_fragments_unread(table_path, monkeypatch) -> None:
    ds = lance_sql.dataset(table_path)
    reads = Reads(monkeypatch)
    got = ds.to_table(columns=["id"], limit=5, offset=2500)
    assert reads.fragments() == {3}  # fragments 0-2 (2395 live rows) counted, unread
    ids = lance.dataset(table_path).to_table(columns=["id"], limit=5, offset=2500)
    assert got.equals(ids)
    assert reads.rows() < 200


def test_filtered_limit_stops_reading_early(tmp_path, monkeypatch) -> None:
    ids = np.arange(300_000, dtype=np.int64)
    path = str(tmp_path / "big")
    lance_sql.write_dataset(pa.table({"id": ids, "cat": pa.array(ids % 5, pa.int32())}),
                            path, max_rows_per_file=150_000)
    reads = Reads(monkeypatch)
    scanner = Scanner(lance_sql.dataset(path).store, lance_sql.dataset(path).manifest,
                      filter="cat = 4", limit=10, num_threads=1)
    got = scanner.to_table()
    assert got.column("id").to_pylist() == list(range(4, 50, 5))
    assert reads.fragments() == {0}
    assert reads.rows() < 150_000  # not even one column of the first fragment whole


def test_limit_joins_its_read_threads(table_path) -> None:
    import threading

    before = {t.ident for t in threading.enumerate()}
    ds = lance_sql.dataset(table_path)
    batches = ds.scanner(limit=4000, offset=10, batch_size=100).to_batches()
    next(batches)
    batches.close()
    ds.to_table(filter="cat = 1", limit=3)
    left = [t for t in threading.enumerate()
            if t.ident not in before and t.name.startswith("lance_sql-")]
    assert not left
