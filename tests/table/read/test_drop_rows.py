"""Rows left out of a scan as if deleted (``Scanner(drop_rows=...)``, what LSM reads push
into the base table), and the BTREE search of many keys at once (``key_rows``): both
checked against the general path (a filter on the rows' ids, an ``IN`` filter)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.index.planner import key_addresses, key_rows
from lance_sql.table.read.scan import Scanner


def _table(tmp_path, n: int = 3000, rows_per_file: int = 700):
    ids = np.arange(n, dtype=np.int64)
    data = pa.table({"id": ids,
                     "v": pa.array([None if i % 11 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([f"s{i % 13}-{i}" for i in range(n)]),
                     "k": pa.array([f"key{i:05d}" for i in range(n)])})
    ds = lance_sql.write_dataset(data, str(tmp_path / "t"), max_rows_per_file=rows_per_file)
    ds.delete("id % 17 = 0")  # deletion vectors too
    return lance_sql.dataset(str(tmp_path / "t"))


def _dropped(ds, seed: int) -> tuple[dict[int, np.ndarray], set[int]]:
    """Random physical offsets per fragment (some deleted already, some repeated) and
    the ids of those rows."""
    rng = np.random.default_rng(seed)
    drop, ids = {}, set()
    start = 0
    for frag in ds.manifest.fragments:
        rows = rng.choice(frag.physical_rows, frag.physical_rows // 9, replace=True)
        drop[frag.id] = rows
        ids |= {start + int(r) for r in rows}  # ids were written in address order
        start += frag.physical_rows
    return drop, ids


@pytest.mark.parametrize("filter", [None, "v > 1000", "s LIKE 's3-%'", "v IS NULL",
                                    "id < 100"])
@pytest.mark.parametrize("columns", [["id", "v", "s"], ["s"], ["id", "_rowaddr"]])
def test_dropped_rows_are_left_out_like_deleted_ones(tmp_path, filter, columns) -> None:
    ds = _table(tmp_path)
    drop, ids = _dropped(ds, 5)
    general = ds.to_table(columns=list(dict.fromkeys([*columns, "id"])), filter=filter)
    keep = ~np.isin(general.column("id").to_numpy(), sorted(ids))
    want = general.filter(pa.array(keep)).select(columns)
    scanner = Scanner(ds.store, ds.manifest, columns=columns, filter=filter, drop_rows=drop)
    got = scanner.to_table()
    assert got.equals(want)
    assert scanner.count_rows() == want.num_rows
    by_fragment = pa.concat_tables(list(Scanner(ds.store, ds.manifest, columns=columns,
                                                filter=filter, drop_rows=drop).to_tables()))
    assert by_fragment.equals(want)


def test_key_rows_finds_what_an_in_filter_finds(tmp_path) -> None:
    ds = _table(tmp_path)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("k", "BTREE")
    # rows appended after the index: a fragment it does not cover
    ds = lance_sql.write_dataset(pa.table({"id": pa.array([5000, 5001], pa.int64()),
                                           "v": [1.0, 2.0], "s": ["x", "y"],
                                           "k": ["key05000", "key00003"]}),
                                 ds.uri, mode="append")
    uncovered = ds.manifest.fragments[-1].id
    for column, values in [("id", pa.array([3, 4, 17, 699, 700, 2999, 5000, 9999, 4],
                                           pa.int32())),
                           ("k", pa.array(["key00003", "key01400", "nope", "key00000"]))]:
        found = key_rows(ds.store, ds.manifest, column, values)
        assert found is not None
        assert uncovered not in found.rows
        assert set(found.rows) == {f.id for f in ds.manifest.fragments} - {uncovered}
        literals = ", ".join(repr(v) if isinstance(v, str) else str(v)
                             for v in values.to_pylist())
        want = ds.to_table(columns=["_rowaddr"], filter=f"{column} IN ({literals})",
                           with_row_address=True)
        addresses = np.asarray(want.column("_rowaddr").to_numpy(), np.uint64)
        live = {int(a) for a in addresses if int(a) >> 32 != uncovered}
        got = {(f << 32) | int(r) for f, rows in found.rows.items() for r in rows}
        # deleted rows may be found too (key 17 and 0 are deleted): exactly those extra
        deleted = got - live
        assert live <= got
        assert all(int(ds.take_addresses([a], ["id"]).num_rows) == 0 for a in deleted)
    assert key_rows(ds.store, ds.manifest, "s", pa.array(["x"])) is None  # no index


@pytest.mark.parametrize("columns", [None, ["tags", "_rowid", "_row_created_at_version"],
                                     ["_rowaddr", "_row_last_updated_at_version", "s"],
                                     []])
def test_live_rows_are_read_column_by_column_like_the_whole_fragment(tmp_path,
                                                                     columns) -> None:
    """A scan with deleted and dropped rows filters each column as it is decoded and
    makes system columns for kept rows only: equal to reading every row (a scan from
    before the deletions) and keeping the live, undropped ones (nulls, strings, lists,
    row ids and versions of a table with stable row ids, several fragments)."""
    n = 2500
    ids = np.arange(n, dtype=np.int64)
    data = pa.table({"id": ids,
                     "v": pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([None if i % 5 == 0 else f"s{i}" * (i % 4)
                                    for i in range(n)]),
                     "tags": pa.array([[i, i + 1][: i % 3] for i in range(n)],
                                      pa.list_(pa.int32()))})
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(data, uri, max_rows_per_file=600, enable_stable_row_ids=True)
    lance_sql.dataset(uri).update({"v": "v + 1"}, where="id % 10 = 3")  # newer versions
    names = list(columns) if columns is not None else ["id", "v", "s", "tags"]
    system = ["_rowid", "_rowaddr", "_row_created_at_version",
              "_row_last_updated_at_version"]
    every = lance_sql.dataset(uri).to_table(columns=["id", "v", "s", "tags", *system])
    lance_sql.dataset(uri).delete("id % 13 = 0")
    ds = lance_sql.dataset(uri)
    assert len(ds.manifest.fragments) >= 4
    rng = np.random.default_rng(11)
    drop = {f.id: rng.choice(f.physical_rows, f.physical_rows // 8)
            for f in ds.manifest.fragments}
    addresses = every.column("_rowaddr").to_numpy()
    dropped = _named(addresses, drop)
    deleted = every.column("id").to_numpy() % 13 == 0
    want = every.filter(pa.array(~dropped & ~deleted)).select(names)
    scanner = Scanner(ds.store, ds.manifest, columns=names, drop_rows=drop)
    got = scanner.to_table()
    assert got.num_rows == want.num_rows == scanner.count_rows()
    if names:
        assert got.equals(want.cast(got.schema))


def _named(addresses: np.ndarray, drop: dict[int, np.ndarray]) -> np.ndarray:
    """Which of ``addresses`` the per-fragment row offsets ``drop`` name."""
    dropped = np.zeros(len(addresses), bool)
    for frag_id, rows in drop.items():
        dropped |= np.isin(addresses, (np.uint64(frag_id) << np.uint64(32))
                           | rows.astype(np.uint64))
    return dropped


def _multi_page_table(uri: str, writer: str, version: str) -> int:
    """A table whose string column spans several pages per file (big values, written in
    small batches), with nulls, a list column and deletions; returns its row count."""
    n = 3000
    data = pa.table({"id": np.arange(n, dtype=np.int64),
                     "v": pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([None if i % 5 == 0 else f"{i:05d}" * (1000 + i % 1000)
                                    for i in range(n)]),
                     "tags": pa.array([[i, i + 1][: i % 3] for i in range(n)],
                                      pa.list_(pa.int32()))})
    batches = pa.RecordBatchReader.from_batches(data.schema,
                                                data.to_batches(max_chunksize=300))
    if writer == "pylance":
        import lance

        lance.write_dataset(batches, uri, data_storage_version=version,
                            max_rows_per_file=2000)
    else:
        lance_sql.write_dataset(batches, uri, data_storage_version=version,
                                max_rows_per_file=2000)
    lance_sql.dataset(uri).delete("id % 13 = 0")
    return n


@pytest.fixture
def field_reads(monkeypatch) -> list[tuple[str, int | None]]:
    """(field name, rows) of every FragmentReader.read, in order. Whole fragments are
    read one by one (not a column of several at once, which bypasses FragmentReader.read:
    see test_batched_scan.py), as the tests using this check how a fragment is read."""
    from lance_sql.table.files.reader import FragmentReader
    from lance_sql.table.read import scan

    monkeypatch.setattr(scan, "BATCH_FRAGMENT_ROWS", 0)

    reads: list[tuple[str, int | None]] = []
    original = FragmentReader.read

    def spy(self, fields, *, offset=0, length=None):
        reads.extend((f.name, length) for f in fields)
        return original(self, fields, offset=offset, length=length)

    monkeypatch.setattr(FragmentReader, "read", spy)
    return reads


@pytest.mark.parametrize(("writer", "version"), [("lance_sql", "2.2"), ("lance_sql", "2.0"),
                                                 ("pylance", "2.1"), ("pylance", "2.2"),
                                                 ("pylance", "2.0")])
def test_columns_of_several_pages_are_filtered_page_by_page(tmp_path, field_reads, writer,
                                                            version) -> None:
    """A 2.1+ column whose pages split a fragment is read and filtered page by page (one
    chunk per page, no join of the pages' values first); 2.0 files and list columns are
    read whole. Either way the rows equal the general path's and pylance's, every row."""
    import lance

    from lance_sql.table.files.reader import FragmentReader

    uri = str(tmp_path / "t")
    _multi_page_table(uri, writer, version)
    ds = lance_sql.dataset(uri)
    columns = ["id", "v", "s", "tags"]
    every = ds.to_table(columns=[*columns, "_rowaddr"])  # live rows, general path
    rng = np.random.default_rng(3)
    drop = {f.id: rng.choice(f.physical_rows, f.physical_rows // 6)
            for f in ds.manifest.fragments}
    addresses = every.column("_rowaddr").to_numpy()
    dropped = _named(addresses, drop)
    want = every.filter(pa.array(~dropped)).select(columns)
    theirs = lance.dataset(uri).to_table(columns=columns, with_row_address=True)
    theirs = theirs.filter(pa.array(~np.isin(theirs.column("_rowaddr").to_numpy(),
                                             addresses[dropped]))).select(columns)

    reads = field_reads
    reads.clear()  # the reads of the scan below only
    got = Scanner(ds.store, ds.manifest, columns=columns, drop_rows=drop).to_table()
    assert got.num_rows == want.num_rows == theirs.num_rows > 0
    assert got.equals(want.cast(got.schema))
    assert got.equals(theirs.cast(got.schema))
    fragment_rows = {f.physical_rows for f in ds.manifest.fragments}
    s_lengths = [n for name, n in reads if name == "s"]
    whole = {name for name, n in reads if n in fragment_rows}
    assert "tags" in whole and "id" in whole  # list column: read whole; id: one page
    if version == "2.0":
        assert len(s_lengths) == len(ds.manifest.fragments)  # 2.0: no page bounds
        assert got.column("s").num_chunks == len(ds.manifest.fragments)
    else:  # one read and one chunk per page of s
        s_field = ds.manifest.schema.field("s")
        pages = [np.unique(FragmentReader(ds.store, ds.manifest, f).page_bounds(s_field)).size
                 - 1 for f in ds.manifest.fragments]
        assert sum(pages) > len(pages)
        assert len(s_lengths) == got.column("s").num_chunks == sum(pages)


@pytest.mark.parametrize(("writer", "version"), [("lance_sql", "2.2"), ("lance_sql", "2.0"),
                                                 ("pylance", "2.1"), ("pylance", "2.2")])
def test_columns_of_several_pages_are_read_page_by_page(tmp_path, field_reads, writer,
                                                        version) -> None:
    """A plain scan (no deleted rows) reads a 2.1+ column whose pages split a fragment
    page by page too, into one chunk per page rather than one array joined by a copy;
    the rows equal pylance's, every row."""
    import lance

    from lance_sql.table.files.reader import FragmentReader

    uri = str(tmp_path / "t")
    _multi_page_table(uri, writer, version)
    ds = lance_sql.dataset(uri, version=1)  # before the deletions
    columns = ["id", "v", "s", "tags"]
    theirs = lance.dataset(uri, version=1).to_table(columns=columns)
    reads = field_reads
    reads.clear()  # the reads of the scan below only
    got = ds.to_table(columns=columns)
    assert got.num_rows == theirs.num_rows == 3000
    assert got.equals(theirs.cast(got.schema))
    s_reads = [n for name, n in reads if name == "s"]
    if version == "2.0":  # no page bounds: one read a fragment
        assert len(s_reads) == got.column("s").num_chunks == len(ds.manifest.fragments)
    else:
        s_field = ds.manifest.schema.field("s")
        pages = sum(np.unique(FragmentReader(ds.store, ds.manifest, f).page_bounds(s_field))
                    .size - 1 for f in ds.manifest.fragments)
        assert pages > len(ds.manifest.fragments)
        assert len(s_reads) == got.column("s").num_chunks == pages


def test_bool_array_packs_what_pyarrow_converts() -> None:
    from lance_sql.table.read.masks import bool_array

    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000):
        mask = rng.random(n) < 0.7
        got = bool_array(mask)
        assert got.equals(pa.array(mask)) and got.null_count == 0
        assert got.to_numpy(zero_copy_only=False).tolist() == mask.tolist()
        assert pa.array(np.arange(n)).filter(got).equals(pa.array(np.flatnonzero(mask)))
    with pytest.raises(TypeError):
        bool_array(np.ones(3, np.int8))


@pytest.mark.parametrize("dense", [True, False])
def test_winner_membership_by_table_and_by_search(monkeypatch, dense) -> None:
    """``members`` (which rows of a source batch are winners) gathers from a table over
    the winners' address span when it is dense, and searches the sorted winners
    otherwise; both answer as ``np.isin``, for addresses in and outside the span."""
    from lance_sql.memwal.read import nodes

    searched = []
    original = np.searchsorted

    def spy(*args, **kwargs):
        searched.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(nodes.np, "searchsorted", spy)
    rng = np.random.default_rng(1)
    for trial in range(50):
        base = np.uint64(int(rng.integers(0, 4))) << np.uint64(32)
        pool = base + np.arange(int(rng.integers(2, 400)), dtype=np.uint64)
        winners = np.sort(rng.choice(pool, int(rng.integers(pool.size // 2, pool.size)),
                                     replace=False))  # dense: at least every other address
        if not dense:  # a second fragment: the span is then far too wide for a table
            winners = np.concatenate([winners, [np.uint64(9) << np.uint64(32)]])
        probe = rng.choice(np.concatenate([pool, winners, [np.uint64(0), np.uint64(2**63),
                                                          base + np.uint64(10**6)]]), 80)
        before = len(searched)
        got = nodes.members(winners, probe)
        assert (len(searched) > before) != dense  # (np.isin may search too: after this)
        assert np.array_equal(got, np.isin(probe, winners)), trial


def _flat(found) -> list[int]:
    return sorted((f << 32) | int(r) for f, rows in found.rows.items() for r in rows)


def test_key_addresses_are_key_rows_as_addresses(tmp_path) -> None:
    """``key_addresses`` (a one-key lookup's search: no per-fragment split) finds the
    addresses ``key_rows`` finds, sorted, for int (values cast)
    and string keys, one key or many, absent keys; None without an index or when the
    index misses a fragment; an indexed row past its fragment's end is the same
    FormatError."""
    from lance_sql.errors import FormatError

    ds = _table(tmp_path)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("k", "BTREE")
    cases = [("id", pa.array([17], pa.int64())), ("id", pa.array([700], pa.int32())),
             ("id", pa.array([3, 4, 17, 699, 700, 2999, 9999, 4], pa.int32())),
             ("id", pa.array([10**6], pa.int64())), ("k", pa.array(["key01400"])),
             ("k", pa.array(["key00003", "nope", "key00000", "key02999"]))]
    for column, values in cases:
        got = key_addresses(ds.store, ds.manifest, column, values)
        found = key_rows(ds.store, ds.manifest, column, values)
        assert got is not None and found is not None
        assert got.dtype == np.uint64
        assert got.tolist() == _flat(found), (column, values)
    assert key_addresses(ds.store, ds.manifest, "s", pa.array(["x"])) is None  # no index
    shrunk = replace(ds.manifest, fragments=[
        replace(f, physical_rows=5) if f.id == ds.manifest.fragments[1].id else f
        for f in ds.manifest.fragments])
    past = pa.array([int(ds.manifest.fragments[0].physical_rows) + 10], pa.int64())
    for search in (key_addresses, key_rows):
        with pytest.raises(FormatError, match="does not exist .*the index is corrupt"):
            search(ds.store, shrunk, "id", past)
    appended = lance_sql.write_dataset(
        pa.table({"id": pa.array([5000], pa.int64()), "v": [1.0], "s": ["x"],
                  "k": ["key05000"]}), ds.uri, mode="append")
    assert key_addresses(appended.store, appended.manifest, "id", pa.array([3])) is None


def test_one_key_address_checks_equal_the_general_ones(tmp_path) -> None:
    """One key's address (checked as plain integers) is what the vectorised check of
    several gives: kept when in range, left out when its fragment is no longer in the
    manifest, the same FormatError past its fragment's end."""
    from lance_sql.errors import FormatError

    ds = _table(tmp_path)
    ds.create_scalar_index("id", "BTREE")
    manifest = ds.manifest
    second = manifest.fragments[1]
    key = 700 + 5  # in the second fragment (700 rows a file)
    one = key_addresses(ds.store, manifest, "id", pa.array([key]))
    assert one.tolist() == [(second.id << 32) | 5]
    assert one.tolist() == key_addresses(ds.store, manifest, "id",
                                         pa.array([key, 10**6]))[:1].tolist()
    # the fragment gone from the manifest, its fragment ids kept by the index
    gone = replace(manifest, fragments=[f for f in manifest.fragments if f.id != second.id])
    alone = key_addresses(ds.store, gone, "id", pa.array([key]))
    together = key_addresses(ds.store, gone, "id", pa.array([key, 3]))
    assert alone is not None and together is not None
    assert alone.tolist() == [] and alone.dtype == np.uint64
    assert together.tolist() == [(manifest.fragments[0].id << 32) | 3]
    shrunk = replace(manifest, fragments=[replace(f, physical_rows=5) if f.id == second.id
                                          else f for f in manifest.fragments])
    with pytest.raises(FormatError) as single:
        key_addresses(ds.store, shrunk, "id", pa.array([key]))
    with pytest.raises(FormatError) as several:
        key_addresses(ds.store, shrunk, "id", pa.array([key, 3]))
    assert str(single.value) == str(several.value)
