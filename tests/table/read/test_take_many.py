"""``take_addresses`` of many addresses takes each column from every fragment at once
(:mod:`lance_sql.table.read.take_many`, :mod:`lance_sql.format.datafile.point_pages`).

Every row and column equals the fragment-by-fragment path and the rows pylance reads at
those addresses, for tables written by pylance and by lance_sql: bitpacked and flat
numbers, LZ4 and plain strings, nulls, several pages per column (rows at page edges),
deleted rows, addresses out of order; repeats, filters' system columns and columns of
other shapes fall back; the path is counted; a corrupt chunk is a FormatError."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.datafile import lz4_frames, parallel, point_pages
from lance_sql.table.read import take_many

N = 60_000


def _data(n: int = N) -> pa.Table:
    rng = np.random.default_rng(3)
    ids = np.arange(n, dtype=np.int64)
    words = [f"w{i}-{'z' * int(i % 9)}" for i in rng.integers(0, 10**6, n)]
    return pa.table({
        "id": ids,
        "small": pa.array(rng.integers(0, 300, n).astype(np.int32)),
        "f": pa.array(rng.standard_normal(n)),
        "s": pa.array(words),
        "s_lz4": pa.array([w * 3 for w in words]),
        "maybe": pa.array(rng.integers(0, 9, n), mask=rng.random(n) < 0.1),
    })


def _schema(table: pa.Table) -> pa.Schema:
    return pa.schema([f.with_metadata({"lance-encoding:compression": "lz4"})
                      if f.name == "s_lz4" else f for f in table.schema])


@pytest.fixture(scope="module", params=["lance_sql", "pylance"])
def written(request, tmp_path_factory) -> tuple[str, pa.Table]:
    table = _data()
    table = pa.Table.from_arrays(table.columns, schema=_schema(table))
    uri = str(tmp_path_factory.mktemp("many") / "t.lance")
    if request.param == "pylance":
        lance.write_dataset(table, uri, max_rows_per_file=17_000, data_storage_version="2.1")
    else:
        lance_sql.write_dataset(table, uri, max_rows_per_file=17_000)
    lance_sql.dataset(uri).delete("id % 97 = 5")
    return uri, table


def _addresses(uri: str, seed: int, count: int) -> np.ndarray:
    """Random row addresses of the table, in random order, with rows at page edges."""
    ds = lance_sql.dataset(uri)
    rng = np.random.default_rng(seed)
    out = []
    for f in ds.manifest.fragments:
        rows = rng.choice(f.physical_rows, count // len(ds.manifest.fragments), replace=False)
        edges = np.array([0, 1, 4095, 4096, 4097, f.physical_rows - 1])
        out.append(np.unique(np.r_[rows, edges]).astype(np.uint64)
                    | (np.uint64(f.id) << np.uint64(32)))
    addresses = np.concatenate(out)
    return addresses[rng.permutation(addresses.size)]


@pytest.fixture
def counted(monkeypatch) -> list[bool]:
    """Whether each take_rows call answered (True) or fell back (False)."""
    seen: list[bool] = []
    inner = take_many.take_rows

    def spied(*args):
        out = inner(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(take_many, "take_rows", spied)
    return seen


def _by_fragment(uri, addresses, columns, monkeypatch) -> pa.Table:
    with monkeypatch.context() as m:
        m.setattr(take_many, "take_rows", lambda *a: None)
        return lance_sql.dataset(uri).take_addresses(addresses, columns)


def _split_frames(monkeypatch) -> None:
    """LZ4 chunks of every size inflated in several frames, side by side (two threads)."""
    monkeypatch.setattr(lz4_frames, "SPLIT_BYTES", 1)
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    monkeypatch.setattr(parallel, "idle_cpus", lambda: 1)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("columns", [["id", "small", "f", "s_lz4", "_rowaddr"],
                                     ["s_lz4", "id"], ["f"]])
def test_many_addresses_equal_fragment_by_fragment_and_pylance(written, columns, split,
                                                               counted, monkeypatch) -> None:
    """(``split``: the LZ4 strings' chunks inflated in several frames on two threads.)"""
    uri, table = written
    addresses = _addresses(uri, 1, 1500)
    if split:
        _split_frames(monkeypatch)
    splits, begun = lz4_frames.SPLIT_CALLS[0], point_pages.BEGUN_CALLS[0]
    got = lance_sql.dataset(uri).take_addresses(addresses, columns)
    assert counted == [True]
    assert lz4_frames.SPLIT_CALLS[0] == splits + (split and "s_lz4" in columns)
    # the LZ4 strings begun first and collected after the other columns
    assert point_pages.BEGUN_CALLS[0] == begun + ("s_lz4" in columns)
    assert got.equals(_by_fragment(uri, addresses, columns, monkeypatch))
    # pylance's rows at those addresses (deleted ones left out), compared one by one
    theirs = lance.dataset(uri).to_table(columns=[c for c in columns if c != "_rowaddr"],
                                         with_row_address=True)
    at = {a: i for i, a in enumerate(theirs.column("_rowaddr").to_pylist())}
    live = [a for a in addresses.tolist() if a in at]
    assert got.num_rows == len(live) < addresses.size
    expected = theirs.take(pa.array([at[a] for a in live]))
    for name in columns:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name


def test_sorted_addresses_come_back_in_their_order(written, counted, monkeypatch) -> None:
    """Addresses in ascending order (a key index's), over every fragment and with deleted
    ones among them: the rows come back in that order (nothing to reorder)."""
    uri, _ = written
    addresses = np.sort(_addresses(uri, 5, 1200))
    columns = ["id", "f", "s_lz4", "_rowaddr"]
    got = lance_sql.dataset(uri).take_addresses(addresses, columns)
    assert counted == [True]
    expected = _by_fragment(uri, addresses, columns, monkeypatch)
    assert got.equals(expected)
    held = got.column("_rowaddr").to_numpy()
    assert np.all(held[1:] > held[:-1]) and held.size < addresses.size
    assert np.all(np.isin(held, addresses))
    # the same addresses out of order come back in that order (reordered)
    shuffled = addresses[np.random.default_rng(2).permutation(addresses.size)]
    again = lance_sql.dataset(uri).take_addresses(shuffled, columns)
    live = shuffled[np.isin(shuffled, held)]
    assert again.column("_rowaddr").to_numpy().tolist() == live.tolist()


@pytest.mark.parametrize("count", [2, 300, 3000])
def test_a_take_of_no_column_keeps_a_row_per_live_address(written, count) -> None:
    """Rows without columns (a count): one per live address, however the addresses are
    ordered, as pylance's take gives them (Arrow's concatenation, take and metadata
    calls on tables without columns lose their rows)."""
    uri, _ = written
    addresses = _addresses(uri, 11, count)
    ds = lance_sql.dataset(uri)
    live = ds.take_addresses(addresses, ["id"]).num_rows
    assert count < 3000 or live < addresses.size  # (some of them deleted)
    assert ds.take_addresses(addresses, []).num_rows == live
    positions = np.random.default_rng(2).permutation(ds.count_rows())[:count]
    assert ds.take(positions, columns=[]).num_rows == positions.size
    if count > 2:  # (pylance 14.0.2 raises "No data files found" on the two-row take)
        assert lance.dataset(uri).take(positions, columns=[]).num_rows == positions.size


def test_a_few_addresses_take_this_path_too(written, counted, monkeypatch) -> None:
    """From MIN_ROWS addresses on (a lookup of a few keys, spread over fragments) the
    columns are taken from every fragment at once: the same rows as fragment by
    fragment; fewer go fragment by fragment."""
    uri, _ = written
    ds = lance_sql.dataset(uri)
    live = ds.to_table(columns=["id"], with_row_address=True).column("_rowaddr")
    rng = np.random.default_rng(9)
    columns = ["id", "small", "f", "s_lz4", "_rowaddr"]
    for count in (take_many.MIN_ROWS, take_many.MIN_ROWS - 1):
        addresses = np.asarray(live.to_numpy(), np.uint64)[
            rng.choice(len(live), count, replace=False)]
        counted.clear()
        got = ds.take_addresses(addresses, columns)
        assert counted == ([True] if count >= take_many.MIN_ROWS else [])
        assert got.num_rows == count
        assert got.equals(_by_fragment(uri, addresses, columns, monkeypatch))
        assert got.column("_rowaddr").to_pylist() == addresses.tolist()


def test_strings_inflate_on_a_helper_while_the_numbers_are_taken(written, counted,
                                                                 monkeypatch) -> None:
    """With a CPU idle, the LZ4 strings' frames inflate on a decode helper while the
    calling thread takes the number columns (the helper's first frame waits until the
    caller has begun them: taken one after the other, it would wait in vain), the rows
    equal the fragment-by-fragment path, and no helper outlives the take."""
    import threading

    uri, _ = written
    _split_frames(monkeypatch)
    numbers_begun = threading.Event()
    waited: list[bool] = []
    inner_begin, inner_decompress = point_pages.begin_pages, lz4_frames._decompress

    def begin(parts, files=None):
        if not pa.types.is_string(parts[0][0].leaf_type):
            numbers_begun.set()
        return inner_begin(parts, files)

    def decompress(*args):
        if threading.current_thread().name.startswith(parallel.THREAD_NAME) and not waited:
            waited.append(numbers_begun.wait(10))
        return inner_decompress(*args)

    monkeypatch.setattr(point_pages, "begin_pages", begin)
    monkeypatch.setattr(lz4_frames, "_decompress", decompress)
    addresses = _addresses(uri, 4, 1500)
    columns = ["id", "s_lz4", "f", "small"]
    got = lance_sql.dataset(uri).take_addresses(addresses, columns)
    assert counted == [True] and waited == [True]
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]
    assert got.equals(_by_fragment(uri, addresses, columns, monkeypatch))


def test_a_failing_column_after_begun_strings_joins_the_helper(written, monkeypatch) -> None:
    """A column failing after the strings were begun: the error comes out, and the
    helper inflating the strings is joined before the take returns."""
    import threading

    uri, _ = written
    _split_frames(monkeypatch)
    inner_begin = point_pages.begin_pages

    def begin(parts, files=None):
        if parts[0][0].leaf_type == pa.float64():
            raise FormatError("t: a broken column")
        return inner_begin(parts, files)

    monkeypatch.setattr(point_pages, "begin_pages", begin)
    begun = point_pages.BEGUN_CALLS[0]
    with pytest.raises(FormatError, match="a broken column"):
        lance_sql.dataset(uri).take_addresses(_addresses(uri, 6, 1500), ["s_lz4", "f"])
    assert point_pages.BEGUN_CALLS[0] == begun  # never collected
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_columns_of_other_shapes_and_repeats_fall_back(written, counted,
                                                       monkeypatch) -> None:
    """A column with nulls (levels stored) is taken page by page, as are repeated
    addresses and a take of no columns; plain strings (LZ4 chunks by lance_sql's default,
    not pylance's) go either way; row addresses alone are made at once; the rows equal
    the fragment-by-fragment path."""
    uri, _ = written
    ds = lance_sql.dataset(uri)
    addresses = _addresses(uri, 2, 600)
    cases = [(addresses, ["maybe", "id"]), (np.r_[addresses, addresses[:50]], ["id", "f"]),
             (addresses, []), (addresses, ["s"]), (addresses, ["_rowaddr"])]
    for asked, columns in cases:
        got = ds.take_addresses(asked, columns)
        assert got.equals(_by_fragment(uri, asked, columns, monkeypatch)), columns
    # nulls stored, repeats, no columns: fragment by fragment; row addresses alone: at once
    assert counted[:3] == [False, False, False] and counted[-1]


@pytest.mark.parametrize("split", [False, True])
def test_take_pages_equals_the_general_path(written, split, monkeypatch) -> None:
    """take_pages of one column over every file equals the general decode (the point
    path off) of each file and point's page-by-page take, joined, for rows in several
    pages of each file (``split``: LZ4 chunks inflated in several frames)."""
    from lance_sql.format.datafile import point
    from lance_sql.table.files.reader import FragmentReader

    uri, _ = written
    if split:
        _split_frames(monkeypatch)
    ds = lance_sql.dataset(uri)
    rng = np.random.default_rng(5)
    for name in ("id", "small", "f", "s_lz4"):
        field = next(f for f in ds.manifest.schema.fields if f.name == name)
        parts, general = [], []
        for frag in ds.manifest.fragments:
            reader = FragmentReader(ds.store, ds.manifest, frag)
            column = reader.point_column(field)
            assert column is not None
            rows = np.unique(rng.integers(0, frag.physical_rows, 300))
            parts.append((column, rows))
            with monkeypatch.context() as m:
                m.setattr(point, "take_leaf", lambda *a, **k: None)
                m.setattr(point_pages, "take_pages", lambda parts: None)
                general.append(reader.take([field], rows)[0])
        tiled, splits = point.TILED_CALLS[0], lz4_frames.SPLIT_CALLS[0]
        together = point_pages.take_pages(parts)
        assert together is not None, name
        # LZ4 strings: every file's chunks inflate into one buffer (or a few), read at once
        assert point.TILED_CALLS[0] == tiled + (name == "s_lz4"), name
        assert lz4_frames.SPLIT_CALLS[0] == splits + (split and name == "s_lz4"), name
        assert together.equals(pa.concat_arrays(general)), name
        assert together.equals(pa.concat_arrays([point.take_leaf(c, r) for c, r in parts]))
    assert point_pages.take_pages([]) is None


def test_take_pages_of_pages_without_power_of_two_chunks(written, monkeypatch) -> None:
    """Pages whose chunks do not all hold ``2**shift`` rows find each row's chunk by a
    search of the chunks' row ends: with every other page made such a page (its shift
    forgotten; its row ends still true) take_pages gives the same values, and a row past
    a page's chunks (its chunk list cut short) is a FormatError either way."""
    from lance_sql.table.files.reader import FragmentReader

    uri, _ = written
    ds = lance_sql.dataset(uri)
    rng = np.random.default_rng(9)
    for name in ("id", "s_lz4"):
        field = next(f for f in ds.manifest.schema.fields if f.name == name)
        parts = []
        for frag in ds.manifest.fragments:
            column = FragmentReader(ds.store, ds.manifest, frag).point_column(field)
            assert column is not None
            parts.append((column, np.unique(rng.integers(0, frag.physical_rows, 200))))
        plain = point_pages.take_pages(parts)
        assert plain is not None
        pages = [page for column, _ in parts
                 for page in map(column.page, range(column.info.row_starts.size - 1))
                 if page.shift is not None]  # (loaded: take_pages loads those it takes)
        assert pages, name  # (pylance writes strings in chunks of 256 rows but no shift)
        with monkeypatch.context() as m:
            for page in pages[::2]:
                m.setattr(page, "shift", None)
            assert point_pages.take_pages(parts) == plain, name
            for page in pages[:2]:  # shift or none: a row past the cut chunks
                m.setattr(page, "chunk_sizes", page.chunk_sizes[:1])
            with pytest.raises(FormatError, match="past the page's chunks"):
                point_pages.take_pages(parts)
        assert point_pages.take_pages(parts) == plain


def test_a_corrupt_chunk_is_a_format_error(tmp_path, monkeypatch) -> None:
    """A chunk header claiming a value buffer past its chunk, found while taking many
    rows together (never fragment by fragment here): a FormatError."""
    from lance_sql.table.read import scan

    def never(*args, **kwargs):
        raise AssertionError("taken fragment by fragment")

    monkeypatch.setattr(scan, "scan_rows", never)

    from lance_sql.table.files.reader import FragmentReader

    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_data(20_000).select(["id", "f"]), uri, max_rows_per_file=7_000)
    ds = lance_sql.dataset(uri)
    field = next(f for f in ds.manifest.schema.fields if f.name == "f")
    frag = ds.manifest.fragments[1]
    column = FragmentReader(ds.store, ds.manifest, frag).point_column(field)
    assert column is not None
    page = column.page(0)
    page.load()
    at = page.buffers[1][0] + int(page.chunk_offsets[1]) + 2  # chunk 1's buffer size
    copy = _corrupted_copy(uri, tmp_path, frag, at, (0xFFFF).to_bytes(2, "little"))
    broken = lance_sql.dataset(copy)
    addresses = np.arange(0, 7_000, 50, dtype=np.uint64) | (np.uint64(frag.id) << np.uint64(32))
    with pytest.raises(FormatError, match="run past"):
        broken.take_addresses(addresses, ["f"])


def test_added_and_altered_columns(tmp_path, counted, monkeypatch) -> None:
    """A column added later (its own data file in each fragment) is taken at once with
    the others; a column whose type was altered (a cast on output) goes fragment by
    fragment; both equal the fragment-by-fragment path."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_data(20_000).select(["id", "f"]), uri, max_rows_per_file=7_000)
    ds = lance_sql.dataset(uri)
    ds.add_columns({"twice": "id * 2"})
    ds = lance_sql.dataset(uri)
    addresses = _addresses(uri, 4, 900)
    got = ds.take_addresses(addresses, ["twice", "f", "id"])
    assert got.equals(_by_fragment(uri, addresses, ["twice", "f", "id"], monkeypatch))
    assert got.column("twice").to_pylist() == [2 * i for i in got.column("id").to_pylist()]
    assert counted == [True]
    ds.alter_columns({"path": "f", "data_type": pa.float32()})
    ds = lance_sql.dataset(uri)
    got = ds.take_addresses(addresses, ["f", "id"])
    assert got.equals(_by_fragment(uri, addresses, ["f", "id"], monkeypatch))
    assert got.schema.field("f").type == pa.float32()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_take_pages_read_file_by_file_mapped_or_not(tmp_path, version, monkeypatch) -> None:
    """take_pages reads the chunks of all the pages of a file from its whole mapping (one
    gather per file, aligned words when the chunks' starts allow): for LZ4 and ZSTD
    strings, bitpacked and flat numbers over several files and pages (rows in one chunk, at chunk
    and page edges, every file or none of some), the values equal the general decode
    of each file, mapped or not (each page's chunks then read on their own), aligned
    gathers or not."""
    from lance_sql.format.datafile import point
    from lance_sql.table.files.reader import FragmentReader

    n = 30_000
    rng = np.random.default_rng(11)
    words = [f"v{i}-{'q' * int(i % 13)}" for i in rng.integers(0, 10**6, n)]
    table = pa.table({"id": np.arange(n, dtype=np.int64), "f": rng.standard_normal(n),
                      "s_lz4": words, "s_zstd": words})
    compression = {"s_lz4": "lz4", "s_zstd": "zstd"}
    schema = pa.schema([f.with_metadata({"lance-encoding:compression": compression[f.name]})
                        if f.name in compression else f for f in table.schema])
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.Table.from_arrays(table.columns, schema=schema), uri,
                        max_rows_per_file=7_000, data_storage_version=version)
    ds = lance_sql.dataset(uri)
    frags = ds.manifest.fragments
    picks = [np.unique(np.minimum(np.r_[rng.integers(0, f.physical_rows, 150), 0, 1023, 1024,
                                        4096, f.physical_rows - 1], f.physical_rows - 1))
             for f in frags]
    picks[1] = picks[1][:0]  # a file none of whose rows is asked
    picks[2] = np.array([5, 6, 7])  # rows of one chunk
    for name in table.column_names:
        field = next(f for f in ds.manifest.schema.fields if f.name == name)
        parts, general = [], []
        for frag, rows in zip(frags, picks, strict=True):
            reader = FragmentReader(ds.store, ds.manifest, frag)
            column = reader.point_column(field)
            assert column is not None
            parts.append((column, rows))
            with monkeypatch.context() as m:
                m.setattr(point, "take_leaf", lambda *a, **k: None)
                m.setattr(point_pages, "take_pages", lambda parts: None)
                general.append(reader.take([field], rows)[0])
        expected = pa.concat_arrays(general)
        assert expected.to_pylist() == table.column(name).take(pa.array(np.concatenate(
            [rows + i * 7_000 for i, rows in enumerate(picks)]))).to_pylist()
        got = point_pages.take_pages(parts)
        assert got is not None and got.equals(expected), name
        with monkeypatch.context() as m:  # unaligned word gathers
            m.setattr(point_pages.MappedFiles, "aligned", lambda self, read: False)
            assert point_pages.take_pages(parts).equals(expected), name
        with monkeypatch.context() as m:  # no file mapped: each page's chunks read
            m.setattr(point_pages.MappedFiles, "whole", lambda self, read: None)
            assert point_pages.take_pages(parts).equals(expected), name


def test_a_corrupt_lz4_prefix_is_a_format_error_naming_its_page(tmp_path) -> None:
    """An LZ4 value buffer whose size prefix claims more than its bytes can inflate to,
    met while taking many rows of several files at once: a FormatError naming the page,
    before anything is inflated."""
    from lance_sql.table.files.reader import FragmentReader

    uri = str(tmp_path / "t.lance")
    table = _data(20_000).select(["id", "s_lz4"])
    table = pa.Table.from_arrays(table.columns, schema=_schema(table))
    lance_sql.write_dataset(table, uri, max_rows_per_file=7_000)
    ds = lance_sql.dataset(uri)
    field = next(f for f in ds.manifest.schema.fields if f.name == "s_lz4")
    frag = ds.manifest.fragments[1]
    page = FragmentReader(ds.store, ds.manifest, frag).point_column(field).page(0)
    page.load()
    at = page.buffers[1][0] + int(page.chunk_offsets[2]) + 8  # chunk 2's size prefix
    copy = _corrupted_copy(uri, tmp_path, frag, at, (0x7FFFFFF0).to_bytes(4, "little"))
    broken = lance_sql.dataset(copy)
    parts = []
    for f in broken.manifest.fragments:
        column = FragmentReader(broken.store, broken.manifest, f).point_column(field)
        parts.append((column, np.arange(0, f.physical_rows, 40)))
    with pytest.raises(FormatError, match=r"page 0: LZ4 buffer claims 2147483632 bytes"):
        point_pages.take_pages(parts)


def _corrupted_copy(uri: str, tmp_path: Path, frag, at: int, damage: bytes) -> str:
    """A copy of the table at ``uri`` whose data file of fragment ``frag`` has
    ``damage`` written at byte ``at``."""
    name = Path(frag.files[0].path).name
    copy = tmp_path / "bad.lance"
    shutil.copytree(uri, copy)
    [bad] = list(copy.rglob(name))
    raw = bytearray(bad.read_bytes())
    raw[at : at + len(damage)] = damage
    bad.write_bytes(bytes(raw))
    return str(copy)


def _several_files_of_lz4_strings(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    table = _data(20_000)  # (its other columns make each file larger than its LZ4 page)
    lance_sql.write_dataset(pa.Table.from_arrays(table.columns, schema=_schema(table)), uri,
                            max_rows_per_file=7_000)
    return uri


def _parts(uri: str, step: int) -> list:
    from lance_sql.table.files.reader import FragmentReader

    ds = lance_sql.dataset(uri)
    field = next(f for f in ds.manifest.schema.fields if f.name == "s_lz4")
    return [(FragmentReader(ds.store, ds.manifest, f).point_column(field),
             np.arange(0, f.physical_rows, step)) for f in ds.manifest.fragments]


def test_files_too_large_for_a_binary_view_are_still_inflated_in_frames(tmp_path,
                                                                        monkeypatch) -> None:
    """A file at least as large as a binary view reaches (2 GiB; here the limit is
    lowered below the files' size) is read page by page, so the LZ4 buffers of its
    pages (each far smaller) still go into frames; the values are unchanged."""
    from lance_sql.format.datafile import memory

    uri = _several_files_of_lz4_strings(tmp_path)
    parts = _parts(uri, 7)
    expected = point_pages.take_pages(parts)
    smallest = min(p.stat().st_size for p in Path(uri).rglob("data/*.lance"))
    pages = [column.page(k) for column, _ in parts for k in range(len(column.info.pages))]
    largest = max(int(p.buffers[1][1]) for p in pages)  # (a page's chunks, in bytes)
    assert largest + 1 < smallest
    monkeypatch.setattr(memory, "VIEW_LIMIT", largest + 1)
    before = lz4_frames.RUNS_CALLS[0]
    got = point_pages.take_pages(parts)
    assert lz4_frames.RUNS_CALLS[0] == before + 1  # framed, not block by block
    assert got is not None and got.equals(expected)


@pytest.mark.parametrize("split", [False, True])
def test_a_corrupt_lz4_block_is_a_format_error_naming_its_file_and_page(tmp_path, split,
                                                                       monkeypatch) -> None:
    """A corrupt LZ4 block met while many rows of several files inflate in one frame
    (or several, side by side): the FormatError names the file and page of the block at
    fault, not the frame's first."""

    from lance_sql.table.files.reader import FragmentReader

    if split:
        _split_frames(monkeypatch)
    uri = _several_files_of_lz4_strings(tmp_path)
    ds = lance_sql.dataset(uri)
    field = next(f for f in ds.manifest.schema.fields if f.name == "s_lz4")
    frag = ds.manifest.fragments[1]
    page = FragmentReader(ds.store, ds.manifest, frag).point_column(field).page(0)
    page.load()
    at = int(page.buffers[1][0]) + int(page.chunk_offsets[3]) + 12  # chunk 3's block
    name = Path(frag.files[0].path).name
    # literal lengths running past the block's end
    parts = _parts(_corrupted_copy(uri, tmp_path, frag, at, b"\xff" * 64), 40)
    with pytest.raises(FormatError, match="corrupt LZ4") as caught:
        point_pages.take_pages(parts)
    assert name in str(caught.value) and "page 0" in str(caught.value)
    others = {Path(f.files[0].path).name for f in ds.manifest.fragments} - {name}
    assert not [o for o in others if o in str(caught.value)]
