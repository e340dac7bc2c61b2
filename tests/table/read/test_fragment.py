"""``ds.get_fragments()`` / ``ds.get_fragment(id)``: pylance's LanceFragment reads.

Each table is written (and rows deleted) by pylance 14.0.2, then every fragment is read
through both libraries and compared.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.table.read.fragment import LanceFragment

lance = pytest.importorskip("lance")


@pytest.fixture()
def table(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(30), pa.int64()),
                     "s": [f"v{i}" for i in range(30)]})
    py = lance.write_dataset(data, uri, max_rows_per_file=10)
    py.delete("id IN (2, 3, 17)")
    return uri


def _pairs(uri):
    ours = lance_sql.dataset(uri).get_fragments()
    theirs = lance.dataset(uri).get_fragments()
    assert [f.fragment_id for f in ours] == [f.fragment_id for f in theirs]
    return list(zip(ours, theirs, strict=True))


def test_counts_and_files_match_pylance(table):
    for ours, theirs in _pairs(table):
        assert isinstance(ours, LanceFragment)
        assert ours.physical_rows == theirs.physical_rows
        assert ours.num_deletions == theirs.num_deletions
        assert ours.count_rows() == theirs.count_rows()
        assert ours.count_rows("id % 2 = 0") == theirs.count_rows("id % 2 = 0")
        assert ours.deletion_file() == theirs.deletion_file()
        assert [d.path for d in ours.data_files()] == [d.path for d in theirs.data_files()]
        assert ours.metadata.id == theirs.metadata.id == ours.fragment_id
        assert ours.schema == theirs.schema
    assert [o.num_deletions for o, _ in _pairs(table)] == [2, 1, 0]


def test_reads_match_pylance(table):
    for ours, theirs in _pairs(table):
        assert ours.to_table() == theirs.to_table()
        assert ours.head(4) == theirs.head(4)
        kwargs = {"columns": ["id"], "filter": "id >= 1", "with_row_id": True,
                  "limit": 3, "offset": 1}
        assert ours.to_table(**kwargs) == theirs.to_table(**kwargs)
        assert ours.scanner(columns=["s"]).to_table() == theirs.scanner(
            columns=["s"]).to_table()
        batches = list(ours.to_batches(columns=["id"]))
        assert pa.Table.from_batches(batches) == theirs.to_table(columns=["id"])
        # positions count live rows only, as pylance's take does
        live = theirs.count_rows()
        picks = [0, live // 2, live - 1]  # pylance's fragment take wants them ascending
        assert ours.take(picks) == theirs.take(picks)
        assert ours.take(picks, columns=["s"]) == theirs.take(picks, columns=["s"])
        # ours takes any order, as the dataset's take does
        assert ours.take(picks[::-1]) == theirs.take(picks).take([2, 1, 0])


def test_take_past_the_live_rows_is_refused(table):
    first = lance_sql.dataset(table).get_fragments()[0]  # 10 rows, 2 deleted
    with pytest.raises(InvalidInputError, match="fragment 0 has 8 rows"):
        first.take([8])
    with pytest.raises(InvalidInputError):
        first.take([-1])


def test_get_fragment_and_scanner_fragments(table):
    ds = lance_sql.dataset(table)
    assert ds.get_fragment(99) is None
    second = ds.get_fragment(1)
    assert second.fragment_id == 1
    py = lance.dataset(table)
    expected = py.scanner(fragments=[py.get_fragment(1)]).to_table()
    # the fragments get_fragments lists, or their manifest values
    assert ds.scanner(fragments=[second]).to_table() == expected
    assert ds.to_table(fragments=[second.metadata]) == expected


def test_fragments_stay_at_the_version_they_were_listed_from(table):
    ds = lance_sql.dataset(table)
    listed = ds.get_fragments()
    before = [f.to_table() for f in listed]
    ds.delete("id < 20")  # moves ds to a new version
    assert ds.count_rows() == 10
    assert [f.to_table() for f in listed] == before
    assert [f.count_rows() for f in listed] == [8, 9, 10]
    assert listed[0].take([7]).column("id").to_pylist() == [9]
