"""``take_addresses`` of a single address (a point lookup's row) skips the grouping by
fragment; its answers equal the general path's (the same address among others) for
live rows, deleted rows, system columns, and the same errors for bad addresses."""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.table.read import scan


def _table(tmp_path):
    n = 2000
    data = pa.table({"id": np.arange(n, dtype=np.int64),
                     "v": pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([f"s{i % 13}-{i}" for i in range(n)])})
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(data, uri, max_rows_per_file=600, enable_stable_row_ids=True)
    lance_sql.dataset(uri).delete("id % 5 = 0")
    return lance_sql.dataset(uri)


def test_one_address_equals_the_general_path(tmp_path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    ds = _table(tmp_path)
    addresses = [(f.id << 32) | r for f in ds.manifest.fragments
                 for r in sorted({0, 1, 4, 5, 150, f.physical_rows - 1})]
    column_sets = [None, ["s"], ["id", "_rowaddr", "_rowid"],
                   ["v", "_row_created_at_version", "_row_last_updated_at_version"]]
    general = {}
    for a in addresses:
        other = (ds.manifest.fragments[0].id << 32) | 2  # a live row before or after
        for columns in column_sets:
            both = ds.take_addresses([a, other], columns)
            general[a, str(columns)] = both.slice(0, both.num_rows - 1)
    grouped: list[int] = []
    real = scan.by_fragment
    monkeypatch.setattr(scan, "by_fragment",
                        lambda *args: grouped.append(1) or real(*args))
    live = 0
    for a in addresses:
        for columns in column_sets:
            one = ds.take_addresses([a], columns)
            assert one.equals(general[a, str(columns)]), (a, columns)
            live += one.num_rows
    assert grouped == []  # one address: never grouped by fragment
    assert 0 < live < len(addresses) * len(column_sets)  # deleted rows left out
    ids = ds.take_addresses([addresses[2]], ["id"]).column("id").to_pylist()
    assert ids == ds.take_addresses([addresses[2], addresses[3]], ["id"])["id"].to_pylist()[:1]


def test_one_bad_address_fails_as_the_general_path(tmp_path) -> None:
    ds = _table(tmp_path)
    frag = ds.manifest.fragments[0]
    past = (frag.id << 32) | frag.physical_rows
    for bad, error in (((999 << 32) | 1, NotFoundError), (past, InvalidInputError)):
        with pytest.raises(error) as one:
            ds.take_addresses([bad])
        with pytest.raises(error) as many:
            ds.take_addresses([bad, bad])
        assert str(one.value) == str(many.value)


def _mixed(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    nulls = rng.random(n) < 0.2
    words = [f"word-{i % 97}-{'abc' * (i % 5)}-{i}" for i in range(n)]
    lz4 = pa.field("s_lz4", pa.string(), metadata={"lance-encoding:compression": "lz4"})
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.float64()),
                        pa.field("cat", pa.int32()), pa.field("s", pa.string()), lz4,
                        pa.field("s_null", pa.string())])
    return pa.table([pa.array(np.arange(n)), pa.array(rng.standard_normal(n), mask=nulls),
                     pa.array((np.arange(n) % 1000).astype(np.int32), mask=nulls),
                     pa.array(words), pa.array([w * 3 for w in words]),
                     pa.array(words, mask=nulls)], schema=schema)


@pytest.mark.parametrize(("writer", "version"), [
    ("lance_sql", "2.0"), ("lance_sql", "2.2"),  # the formats lance_sql writes
    ("pylance", "2.0"), ("pylance", "2.1"), ("pylance", "2.2")])
def test_one_row_of_every_column_in_one_pass(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                             writer: str, version: str) -> None:
    """A fragment without deletions gives its row through the fused one-row take: equal
    to the general path (the same address among others) and to the data written, for
    files lance_sql and pylance wrote (2.0, 2.1, 2.2; nulls, plain / LZ4 / FSST strings);
    read back by pylance too."""
    data = _mixed(5000)
    uri = str(tmp_path / "t")
    if writer == "pylance":
        import lance

        lance.write_dataset(data, uri, max_rows_per_file=2000, data_storage_version=version)
    else:
        lance_sql.write_dataset(data, uri, max_rows_per_file=2000,
                                data_storage_version=version)
    ds = lance_sql.dataset(uri)
    assert ds.data_storage_version == version
    fused: list[int] = []
    real = scan.FragmentReader.take_row
    monkeypatch.setattr(scan.FragmentReader, "take_row",
                        lambda self, fields, row: fused.append(row) or real(self, fields, row))
    columns = [None, ["s_lz4", "_rowaddr", "id"], ["s_null", "cat"], ["_rowaddr"]]
    start = 0
    for frag in ds.manifest.fragments:
        for row in sorted({r for r in (0, 1, 511, 1024) if r < frag.physical_rows}
                          | {frag.physical_rows - 1}):
            address = (frag.id << 32) | row
            other = (frag.id << 32) | ((row + 7) % frag.physical_rows)
            for names in columns:
                one = ds.take_addresses([address], names)
                both = ds.take_addresses([address, other], names)
                assert one.equals(both.slice(0, 1)), (version, address, names)
            expected = data.slice(start + row, 1)
            assert ds.take_addresses([address]).equals(expected), (version, address)
        start += frag.physical_rows
    assert fused  # the one-row takes went through the fused take
    if writer == "lance_sql":
        import lance

        assert lance.dataset(uri).to_table().equals(data)


def test_kept_take_plan_follows_the_version(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset plans a take of the same columns once per version: repeated takes plan
    nothing and equal a freshly planned take; after a schema change moves the dataset to
    a new version its takes see the new schema; unknown columns fail every time."""
    ds = _table(tmp_path)
    address = (ds.manifest.fragments[1].id << 32) | 3
    planned: list[object] = []
    real = scan.plan_scan
    module = importlib.import_module("lance_sql.table.dataset")  # (the package's name
    monkeypatch.setattr(module, "plan_scan",  # lance_sql.table.dataset is a function)
                        lambda manifest, columns: planned.append(columns) or real(manifest,
                                                                                  columns))
    for _ in range(3):
        for columns in (None, ["s", "_rowaddr"]):
            got = ds.take_addresses([address], columns)
            assert got.equals(scan.take_addresses(ds.store, ds.manifest,
                                                  np.array([address], np.uint64), columns))
    assert planned == [None, ["s", "_rowaddr"]]
    before = ds.version
    ds.alter_columns({"path": "s", "name": "text"})
    assert ds.version > before
    assert ds.take_addresses([address]).column_names == ["id", "v", "text"]
    with pytest.raises(NotFoundError):
        ds.take_addresses([address], ["s"])
    with pytest.raises(NotFoundError):
        ds.take_addresses([address], ["s"])
    with pytest.raises(InvalidInputError):
        ds.take_addresses([address], "text")


def test_kept_take_plan_reads_columns_once(tmp_path) -> None:
    """Columns given as a one-pass iterable are taken as given (not consumed by the
    plan cache's key, leaving the plan no columns), and a column list holding something
    unhashable is the NotFoundError of an unknown column, not a TypeError of the cache."""
    ds = _table(tmp_path)
    addresses = [(ds.manifest.fragments[1].id << 32) | 3, 1]
    expected = ds.take_addresses(addresses, ["s", "id"])
    assert expected.num_columns == 2 and expected.num_rows == 2
    for _ in range(2):  # planned, then kept
        assert ds.take_addresses(addresses, (c for c in ["s", "id"])).equals(expected)
        assert ds.take_addresses(addresses[:1], iter(["s", "id"])).equals(expected[:1])
        with pytest.raises(NotFoundError):
            ds.take_addresses(addresses, [["id"]])  # type: ignore[list-item]


def test_take_plan_is_of_the_manifest_taken_from(tmp_path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A write landing between a take's read of the dataset's version and its planning
    (another thread's, say) cannot pair the new version's plan with the old version's
    rows: the take answers as the version it read, whole."""
    ds = _table(tmp_path)
    addresses = [(ds.manifest.fragments[1].id << 32) | 3, 1]
    expected = ds.take_addresses(addresses)
    ds._take_plans = None  # planned afresh below
    module = importlib.import_module("lance_sql.table.dataset")
    real = module.LanceDataset._take_plan
    moved: list[int] = []

    def write_first(self, *args):
        if not moved:  # the other thread's write: a new column, the dataset moved on
            moved.append(self.version)
            self.add_columns({"w": "id * 2"})
        return real(self, *args)

    monkeypatch.setattr(module.LanceDataset, "_take_plan", write_first)
    assert ds.take_addresses(addresses).equals(expected)
    assert ds.version > moved[0]
    assert ds.take_addresses(addresses).column_names == ["id", "v", "s", "w"]


def test_one_row_takes_keep_their_fragment_readers(tmp_path, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """A kept take plan keeps one reader per fragment for its one-row takes (the files,
    the fields grouped by file, the row check: made once); answers equal the general
    path's, and a new version starts afresh."""
    n = 1500
    data = pa.table({"id": np.arange(n, dtype=np.int64),
                     "s": pa.array([f"s{i}" for i in range(n)])})
    uri = str(tmp_path / "k")
    lance_sql.write_dataset(data, uri, max_rows_per_file=500)
    ds = lance_sql.dataset(uri)
    grouped: list[int] = []
    real = scan.FragmentReader._groups
    monkeypatch.setattr(scan.FragmentReader, "_groups",
                        lambda self, fields: grouped.append(1) or real(self, fields))
    addresses = [(f.id << 32) | r for f in ds.manifest.fragments for r in (0, 7, 499)]
    one_row_groupings = 0
    for columns in (None, ["s", "_rowaddr"]):
        for _ in range(2):
            for a in addresses:
                before = len(grouped)
                one = ds.take_addresses([a], columns)
                one_row_groupings += len(grouped) - before
                assert one.equals(ds.take_addresses([a, a], columns).slice(0, 1))
        kept = ds._take_plans
        assert kept is not None and kept[0] is ds.manifest
        plan, readers = kept[1][None if columns is None else tuple(columns)]
        assert sorted(readers) == [f.id for f in ds.manifest.fragments]
        assert all(r.manifest is ds.manifest for r in readers.values())
    # one-row takes: one grouping per fragment and column list, none when repeated
    assert one_row_groupings == 2 * len(ds.manifest.fragments)
    ds.delete("id = 7")  # a new version: its own plans and readers, the row gone
    ds = lance_sql.dataset(uri)
    assert ds.take_addresses([7], ["id"]).num_rows == 0
    assert ds.take_addresses([8], ["id"]).column("id").to_pylist() == [8]
