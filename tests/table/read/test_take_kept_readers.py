"""A take of many row addresses reuses the fragment readers its dataset keeps with the
take plan of those columns (as one-row takes do): a later take of other rows of the same
fragments makes no reader, finds its files and checks its rows no more, and gives the
rows a scan gives; after a write (a new version) the readers are made anew and deleted
rows are left out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.files import reader as reader_mod
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read import take_many


def _expected(ds, addresses: np.ndarray, columns: list[str]) -> pa.Table:
    """The rows at ``addresses`` (live ones), in their order, from a scan."""
    full = ds.to_table(columns=["id", "v", "s", "_rowaddr"])
    at = {a: i for i, a in enumerate(full.column("_rowaddr").to_pylist())}
    rows = [at[a] for a in addresses.tolist() if a in at]
    return full.take(pa.array(rows, pa.int64())).select(columns)


# numbers: taken column by column from every fragment (take_many); with the strings:
# fragment by fragment (their small pages are not of the shape take_many takes)
@pytest.mark.parametrize("columns", [["v", "_rowaddr"], ["v", "s", "_rowaddr"]])
def test_many_row_takes_reuse_the_kept_readers(tmp_path, monkeypatch, columns) -> None:
    n = 6000
    data = pa.table({"id": np.arange(n, dtype=np.int64), "v": np.arange(n) * 0.5,
                     "s": pa.array([f"s{i % 17}-{i}" for i in range(n)])})
    uri = str(tmp_path / "t")
    ds = lance_sql.write_dataset(data, uri, max_rows_per_file=1000)
    made: list[int] = []
    checked: list[int] = []
    inner_init, inner_checked = FragmentReader.__init__, reader_mod.checked_rows

    def counting_init(self, store, manifest, fragment) -> None:
        made.append(fragment.id)
        inner_init(self, store, manifest, fragment)

    def counting_checked(store, manifest, fragment, **kw):
        checked.append(fragment.id)
        return inner_checked(store, manifest, fragment, **kw)

    together: list[bool] = []
    inner_take = take_many.take_rows
    monkeypatch.setattr(take_many, "take_rows", lambda *a: (
        lambda got: together.append(got is not None) or got)(inner_take(*a)))
    monkeypatch.setattr(FragmentReader, "__init__", counting_init)
    monkeypatch.setattr(reader_mod, "checked_rows", counting_checked)
    rng = np.random.default_rng(3)
    fragments = [f.id for f in ds.manifest.fragments]
    for round_ in range(3):
        offsets = rng.choice(1000, 40, replace=False)
        addresses = np.array([(f << 32) | int(o) for f in fragments for o in offsets],
                             np.uint64)
        rng.shuffle(addresses)
        expected = _expected(ds, addresses, columns)
        made.clear()
        checked.clear()
        got = ds.take_addresses(addresses, columns)
        assert got.equals(expected)
        if round_ == 0:
            assert sorted(made) == fragments  # one reader a fragment, kept
        else:
            assert made == [] and checked == []  # the kept readers: nothing made again
    assert together == [columns == ["v", "_rowaddr"]] * 3  # the path taken
    ds.delete("id % 3 = 0")
    ds = lance_sql.dataset(uri)
    expected = _expected(ds, addresses, columns)
    made.clear()
    got = ds.take_addresses(addresses, columns)
    assert sorted(made) == fragments  # a new version: readers of its fragments
    assert got.equals(expected)
    ids = (addresses >> np.uint64(32)) * np.uint64(1000) + (addresses & np.uint64(0xFFFFFFFF))
    assert got.num_rows == int(np.count_nonzero(ids % np.uint64(3) != 0))  # deleted: left out
