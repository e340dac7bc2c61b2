"""A BTREE search for one integer key binary-searches the page's values in the file the
first times a page is searched (``BTreeIndex._search_one``; the third search of the page
decodes and keeps it); it finds what the decoded page finds, and what a scan finds:
unique and repeated keys (runs across page edges), signed and unsigned types, absent
keys and keys past either end, deleted rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.btree import VALUES, KeyRange, KeySet
from lance_sql.format.datafile import point
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.planner import btree_indices
from lance_sql.table.runtime.cache import INDEX_PAGES
from lance_sql.table.runtime.context import current_runtime

ROWS = 30_000


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[str, pa.Table]:
    rng = np.random.default_rng(4)
    data = pa.table({
        "id": pa.array(rng.permutation(ROWS).astype(np.int64) * 5 - 40_000),
        "rep": pa.array(rng.integers(-50, 3000, ROWS).astype(np.int32)),   # repeats
        "big": pa.array(rng.permutation(ROWS).astype(np.uint64) * np.uint64(2**49)),
        "v": pa.array(np.arange(ROWS)),
    })
    uri = str(tmp_path_factory.mktemp("one") / "t.lance")
    ds = lance_sql.write_dataset(data, uri, max_rows_per_file=7_000)
    for column in ("id", "rep", "big"):
        ds.create_scalar_index(column, "BTREE")
    lance_sql.dataset(uri).delete("v % 11 = 0")
    return uri, data


def _index(ds: lance_sql.LanceDataset, column: str) -> BTreeIndex:
    field = ds.manifest.schema.field(column)
    meta = next(i for i in btree_indices(ds.manifest) if i.fields[0] == field.id)
    return BTreeIndex.open(ds.store, ds.manifest, meta, field.to_scan_arrow().type)


def _probes(values: np.ndarray) -> list[int]:
    rng = np.random.default_rng(9)
    info = np.iinfo(values.dtype)
    picked = [int(x) for x in rng.choice(values, 40)]
    ends = [int(values.min()), int(values.max())]
    return sorted({*picked, *ends, *(k + 1 for k in picked + ends if k < info.max),
                   *(k - 1 for k in ends if k > info.min), int(info.min), int(info.max)})


@pytest.mark.parametrize("column", ["id", "rep", "big"])
def test_one_key_search_equals_the_decoded_page_search(table, monkeypatch, column) -> None:
    uri, data = table
    ds = lance_sql.dataset(uri)
    index = _index(ds, column)
    searched = []
    search_sorted = point.search_sorted

    def counted(*args):
        out = search_sorted(*args)
        searched.append(out is not None)
        return out

    monkeypatch.setattr(point, "search_sorted", counted)
    key_type = index.key_type
    cache = current_runtime().cache
    for key in _probes(data.column(column).to_numpy()):
        current_runtime().clear("index_pages")
        one = KeySet(pa.array([key], key_type))
        cold = np.sort(index.search(one))  # searched in the file
        pages = index.bounds.pages(one).tolist()
        decoded = [(index.path, index.uuid, p, VALUES) for p in pages]
        assert all(cache.peek(INDEX_PAGES, d) is None for d in decoded)
        scalar = pa.scalar(key, key_type)
        again = np.sort(index.search(KeyRange(scalar, scalar)))  # in the file again
        assert all(cache.peek(INDEX_PAGES, d) is None for d in decoded)
        third = np.sort(index.search(one))  # asked often: decoded and kept
        assert all(cache.peek(INDEX_PAGES, d) is not None for d in decoded)
        warm = np.sort(index.search(one))  # the decoded page
        assert np.array_equal(cold, warm) and np.array_equal(again, warm), key
        assert np.array_equal(third, warm), key
    assert sum(searched) > 40  # most keys were searched in the file


@pytest.mark.slow
@pytest.mark.parametrize("column", ["id", "rep", "big"])
def test_one_key_filters_equal_a_scan(table, column) -> None:
    uri, data = table
    ds = lance_sql.dataset(uri)
    for key in _probes(data.column(column).to_numpy())[::3]:
        current_runtime().clear("index_pages")
        text = f"{column} = {key}"
        indexed = ds.to_table(filter=text, use_scalar_index=True).sort_by("v")
        scanned = ds.to_table(filter=text, use_scalar_index=False).sort_by("v")
        assert indexed.equals(scanned), text


def _edge_probes(index: BTreeIndex, values: np.ndarray) -> list[int]:
    """:func:`_probes` and each page's first and last key, and the keys beside them."""
    info = np.iinfo(values.dtype)
    lo, hi = index.bounds.min_keys, index.bounds.max_keys
    assert lo is not None and hi is not None
    edges = {int(k) for k in [*lo.tolist(), *hi.tolist()]}
    near = {k + d for k in edges for d in (-1, 1) if info.min <= k + d <= info.max}
    return sorted({*_probes(values), *edges, *near})


@pytest.mark.parametrize("column", ["id", "rep", "big"])
def test_search_one_finds_every_entry_of_its_key(table, monkeypatch, column) -> None:
    """``search_one`` (two scalar searches of the bounds, the page searched in the file,
    the id read alone) gives the ids of the entries holding the key, in entry order,
    checked against every entry of the index: keys at each page's edges (runs of a
    repeated key across them), absent keys, keys past either end, signed and unsigned
    (past 2**63); the first, second and third (decoding) search of a page alike."""
    uri, data = table
    ds = lance_sql.dataset(uri)
    index = _index(ds, column)
    entries = index.entries()
    held = entries.column(0).to_numpy()
    ids = entries.column(1).to_numpy()
    general = []
    search = BTreeIndex.search

    def counted(self, query):
        general.append(query)
        return search(self, query)

    monkeypatch.setattr(BTreeIndex, "search", counted)
    probes = _edge_probes(index, data.column(column).to_numpy())
    for key in probes:
        current_runtime().clear("index_pages")
        value = pa.array([key], index.key_type)
        expected = ids[held == key].tolist()
        for turn in range(4):  # in the file, again, decoded, the decoded page
            assert index.search_one(value).tolist() == expected, (key, turn)
    answered_alone = len(probes) * 4 - len(general)
    assert answered_alone > len(probes)  # most first searches needed no general search
    assert all(isinstance(q, KeySet) for q in general)


def test_search_one_of_a_corrupt_page_is_a_format_error(tmp_path) -> None:
    """A page of the index's values whose chunks claim more bytes than they hold: the
    one-key search is a FormatError naming the index file, not a wrong id."""
    from pathlib import Path

    from lance_sql.errors import FormatError
    from lance_sql.format.datafile import BytesSource, LanceFileReader

    uri = str(tmp_path / "c.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(np.arange(20_000) * 3)}), uri)
    ds.create_scalar_index("id", "BTREE")
    ds = lance_sql.dataset(uri)
    index = _index(ds, "id")
    assert index.search_one(pa.array([300], pa.int64())).tolist() == [100]
    [path] = (Path(uri) / "_indices").rglob("page_data.lance")
    data = bytearray(path.read_bytes())
    reader = LanceFileReader(BytesSource(bytes(data)))
    column = reader._leaf_column(0, reader.schema.fields[0], pa.int64())
    page = column.page(0)
    page.load()
    width = 4 if page.large else 2
    for c in range(int(page.chunk_sizes.size)):  # every chunk's value-buffer size
        at = page.buffers[1][0] + int(page.chunk_offsets[c]) + 2
        data[at : at + width] = (0xFFFF).to_bytes(width, "little")
    path.write_bytes(bytes(data))
    current_runtime().cache.clear()
    ds = lance_sql.dataset(uri)
    with pytest.raises(FormatError, match="page_data"):
        _index(ds, "id").search_one(pa.array([300], pa.int64()))
