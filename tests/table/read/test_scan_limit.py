"""Scans with a limit and an offset read only the rows they hand out: the same rows as
pylance's ``to_table(limit=, offset=)`` (and as the unlimited scan's first rows), across
fragment boundaries and deletion vectors, with only the first fragments' leading rows
decoded."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read import scan as scan_module
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


@pytest.fixture(scope="module")
def rare_path(tmp_path_factory) -> str:
    """300k rows in two fragments, ``cat = id % 1000`` (``cat = 7``: one row in 1000)."""
    path = str(tmp_path_factory.mktemp("rare") / "t")
    ids = np.arange(300_000, dtype=np.int64)
    lance_sql.write_dataset(pa.table({"id": ids, "cat": pa.array(ids % 1000, pa.int32()),
                                      "s": pa.array([f"r{i}" for i in range(300_000)])}),
                            path, max_rows_per_file=150_000)
    return path


class FieldReads(Reads):
    """:class:`Reads`, and the rows of each read and take per column read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch)
        self.by_column: dict[str, int] = {}
        read, take = FragmentReader.read, FragmentReader.take

        def counted_read(reader: FragmentReader, fields, *, offset: int = 0,
                         length: int | None = None):
            rows = reader.fragment.physical_rows - offset if length is None else length
            for f in fields:
                self.by_column[f.name] = self.by_column.get(f.name, 0) + rows
            return read(reader, fields, offset=offset, length=length)

        def counted_take(reader: FragmentReader, fields, rows):
            for f in fields:
                self.by_column[f.name] = self.by_column.get(f.name, 0) + len(rows)
            return take(reader, fields, rows)

        monkeypatch.setattr(FragmentReader, "read", counted_read)
        monkeypatch.setattr(FragmentReader, "take", counted_take)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_a_rare_filter_reads_no_range_ahead_of_the_limit(rare_path, monkeypatch,
                                                          threads) -> None:
    """Once rows matched, the next range is sized by their rate and read alone: no pool
    reads further ranges nobody takes (it did: 8k + 16k + 32k + 64k rows of ``cat`` for
    10 rows found in the first 10k)."""
    ds = lance_sql.dataset(rare_path)
    reads = FieldReads(monkeypatch)
    got = Scanner(ds.store, ds.manifest, filter="cat = 7", limit=10,
                  num_threads=threads).to_table()
    assert got.column("id").to_pylist() == list(range(7, 10_000, 1000))
    assert reads.by_column["cat"] <= 2 * 8192
    # the other columns of the 10 rows only (not of the 9th row's range's 8 others)
    assert reads.by_column["s"] == reads.by_column["id"] == 10


@pytest.mark.parametrize("filter", ["cat < 500", "s >= 'r'", "cat < 500 OR id < 0"])
def test_a_common_filter_reads_other_columns_up_to_the_limit(rare_path, monkeypatch,
                                                              filter) -> None:
    """The output columns the filter does not read are read only up to the row that
    completes the limit, not over the whole range the filter was tested on."""
    ds = lance_sql.dataset(rare_path)
    want = lance.dataset(rare_path).to_table(filter=filter, limit=10, offset=3)
    reads = FieldReads(monkeypatch)
    got = ds.to_table(filter=filter, limit=10, offset=3)
    assert got.equals(want.cast(got.schema))
    others = [c for c in ("id", "cat", "s") if c not in filter]
    assert others and all(reads.by_column[c] <= 13 for c in others)  # (offset 3 + 10)


@pytest.mark.parametrize("limit", [1, 10, 5000])
def test_a_filter_matching_nothing_reads_each_row_once(rare_path, monkeypatch,
                                                       limit) -> None:
    """No pathological restarts: a limited scan whose filter never matches reads the
    filter column of every row once, as the unlimited scan does, and no other column."""
    ds = lance_sql.dataset(rare_path)
    reads = FieldReads(monkeypatch)
    assert ds.to_table(filter="cat = 5000", limit=limit).num_rows == 0
    assert reads.by_column == {"cat": 300_000}


def test_range_sizer_sizes_by_the_rate_rows_matched_at() -> None:
    from lance_sql.table.read.scan import LIMITED_FIRST_ROWS, LIMITED_MAX_ROWS, RangeSizer

    sizer = RangeSizer(100)
    assert sizer.next_rows() == LIMITED_FIRST_ROWS and not sizer.expects_done
    sizer.record(LIMITED_FIRST_ROWS, 0)  # nothing yet: four times the last range
    assert sizer.next_rows() == 4 * LIMITED_FIRST_ROWS and not sizer.expects_done
    sizer.record(4 * LIMITED_FIRST_ROWS, 40)  # 40 in 40k rows: 60 more in ~60k, twice
    assert sizer.still_wanted() == 60 and sizer.expects_done
    assert sizer.next_rows() == 2 * 60 * 1024
    sizer.record(400_000, 1)  # rarer: 59 more at 41 in 440,960 rows: more than the most
    assert not sizer.expects_done and sizer.next_rows() == LIMITED_MAX_ROWS
    sizer.record(10, 80)  # more than wanted (a consumer dropping rows): doubling again
    assert sizer.still_wanted() == 0 and not sizer.expects_done
    assert sizer.next_rows() == LIMITED_MAX_ROWS
    small = RangeSizer(10, first=1024)  # (a scan without a filter: every row matches)
    assert small.next_rows() == 1024
    small.record(1024, 3)  # 7 more at 3 in 1024 rows: 2389 rows, twice
    assert small.next_rows() == 4779 and small.expects_done
    unknown = RangeSizer(None)
    unknown.next_rows()
    unknown.record(LIMITED_FIRST_ROWS, 50)
    assert unknown.still_wanted() is None and not unknown.expects_done
    assert unknown.next_rows() == 4 * LIMITED_FIRST_ROWS


@pytest.mark.parametrize("drop", [None, [], [1190, 3, 3, 700, 5, 1199], [0, 1]])
def test_a_ranges_live_mask_is_the_fragments_sliced(table_path, drop) -> None:
    """A range's live mask (deletions and dropped rows, made for the range alone) is the
    whole fragment's mask sliced, for ranges inside, at the edges and without drops."""
    from lance_sql.table.read.scan import _live_mask

    ds = lance_sql.dataset(table_path)
    dropped = None if drop is None else np.array(drop, np.int64)
    for frag in ds.manifest.fragments[:3]:  # deletions at the head, all over, none
        reader = FragmentReader(ds.store, ds.manifest, frag)
        whole = _live_mask(reader, dropped)
        for offset, length in [(0, 1200), (0, 8), (2, 700), (695, 505), (1199, 1)]:
            got = _live_mask(reader, dropped, offset, length)
            if whole is None:
                assert got is None
            else:
                assert got is not None and got.tolist() == whole[offset:offset + length].tolist()


def test_the_first_batch_reads_only_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """``to_batches()`` of a whole scan reads the first batch's rows alone before the
    rest of the first fragment, so the first batch does not wait for the fragment; the
    batches still equal ``to_table()``, filters and deletions included."""
    n = 50_000
    ds = lance_sql.write_dataset(
        pa.table({"id": np.arange(n), "s": pa.array([f"v{i % 97}" for i in range(n)])}),
        tmp_path / "t.lance", max_rows_per_file=30_000)
    ds.delete("id % 7 = 3")
    reads: list[tuple[int, int | None]] = []
    real = scan_module.scan_fragment

    def recorded(*args, **kwargs):
        reads.append((kwargs.get("offset", 0), kwargs.get("length")))
        return real(*args, **kwargs)

    monkeypatch.setattr(scan_module, "scan_fragment", recorded)
    batches = ds.to_batches(batch_size=1000)
    first = next(iter(batches))
    assert first.num_rows <= 1000 and reads == [(0, 1000)]
    for kwargs in ({}, {"filter": "id % 5 = 1"}, {"columns": ["s"], "filter": "s = 'v3'"}):
        got = pa.Table.from_batches(list(ds.to_batches(batch_size=1000, **kwargs)))
        want = ds.to_table(**kwargs)
        assert got.equals(want)
        assert all(b.num_rows <= 1000 for b in ds.to_batches(batch_size=1000, **kwargs))
    assert pc.sum(ds.to_table()["id"]).as_py() == sum(i for i in range(n) if i % 7 != 3)
