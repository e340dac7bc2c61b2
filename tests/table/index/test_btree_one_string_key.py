"""A BTREE search for one string / binary key binary-searches the page's values in the
file the first times a page is searched, as one integer key does
(``BTreeIndex._search_one``; the third search of the page decodes and keeps it): it
finds what the decoded page finds and what a scan finds, in indexes written by lance_sql
and by pylance: unique keys, repeated keys (runs across page edges), empty strings,
non-ASCII text, binaries with NUL and 0xFF bytes, absent keys between values, before the
first and after the last."""

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

ROWS = 20_000
COLUMNS = ("s", "rep", "b")


def _data() -> pa.Table:
    rng = np.random.default_rng(4)
    words = ["", "é", "日本", "Ω", "zz", "\U0001f600", "a\x01", "~"]
    unique = [f"k{int(i):07d}" for i in rng.choice(10 * ROWS, ROWS - len(words),
                                                   replace=False)] + words
    rep = np.sort(rng.integers(0, ROWS, ROWS))  # runs of equal keys (a few long)
    rep[5000:9500] = 1234  # a run over a whole index page (4096 entries) and its edges
    binary = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8))
              for n in rng.integers(4, 9, ROWS - 4)] + [b"", b"\x00", b"\xff\xff", b"\x00a"]
    order = rng.permutation(ROWS)  # the table in no particular order
    return pa.table({
        "s": pa.array(unique, pa.string()).take(order),
        "rep": pa.array([f"r{int(v):05d}é" for v in rep], pa.string()).take(order),
        "b": pa.array(binary, pa.binary()).take(order),
        "v": pa.array(np.arange(ROWS)),
    })


@pytest.fixture(scope="module", params=["lance_sql", "pylance"])
def table(request, tmp_path_factory) -> tuple[str, pa.Table]:
    data = _data()
    uri = str(tmp_path_factory.mktemp("one_string") / "t.lance")
    if request.param == "pylance":
        import lance

        ds = lance.write_dataset(data, uri, max_rows_per_file=7_000)
        for column in COLUMNS:
            ds.create_scalar_index(column, "BTREE")
    else:
        ours = lance_sql.write_dataset(data, uri, max_rows_per_file=7_000)
        for column in COLUMNS:
            ours.create_scalar_index(column, "BTREE")
    return uri, data


def _index(ds: lance_sql.LanceDataset, column: str) -> BTreeIndex:
    field = ds.manifest.schema.field(column)
    meta = next(i for i in btree_indices(ds.manifest) if i.fields[0] == field.id)
    return BTreeIndex.open(ds.store, ds.manifest, meta, field.to_scan_arrow().type)


def _layouts(index: BTreeIndex) -> set[str]:
    """What the index's pages of values are: "dictionary" for dictionary-encoded ones
    (a column of many repeats; not searched in the file), else "plain"."""
    data = index.data
    field = data.schema.fields[0]
    column = data._leaf_column(index.column_map[field.id], field, field.arrow_type)
    out = set()
    for p in range(column.info.row_starts.size - 1):
        page = column.page(p)
        page.load()
        out.add("dictionary" if getattr(page, "dictionary", None) is not None else "plain")
    return out


def _probes(values: pa.Array) -> list[bytes]:
    """Keys present (the first, the last, random ones), just above each (a NUL
    appended: between values, or after the last), just below some (the last byte cut),
    and keys before the first and after every value."""
    rng = np.random.default_rng(9)
    raw = sorted(v.encode() if isinstance(v, str) else v for v in values.to_pylist())
    picked = {raw[0], raw[-1], *(raw[int(i)] for i in rng.integers(0, len(raw), 25))}
    near = {k + b"\x00" for k in picked} | {k[:-1] for k in list(picked)[:10] if k}
    out = picked | near | {b"", b"\x00", "\U0010ffff".encode(), "é".encode()}
    if pa.types.is_string(values.type):  # keys of a string column are valid UTF-8
        out = {k for k in out if _utf8(k)}
    return sorted(out)


def _utf8(k: bytes) -> bool:
    try:
        k.decode()
    except UnicodeDecodeError:
        return False
    return True


def _scalar(key: bytes, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(key.decode() if pa.types.is_string(t) else key, t)


@pytest.mark.parametrize("column", COLUMNS)
def test_one_key_search_equals_the_decoded_page_search(table, column) -> None:
    uri, data = table
    ds = lance_sql.dataset(uri)
    index = _index(ds, column)
    key_type = index.key_type
    cache = current_runtime().cache
    entries = index.entries().column(VALUES).to_pylist()  # the order the search relies on
    raw = [v.encode() if isinstance(v, str) else v for v in entries]
    assert raw == sorted(raw) and len(raw) == ROWS  # byte order (UTF-8: code points)
    in_file = 0
    for key in _probes(data.column(column).combine_chunks()):
        current_runtime().clear("index_pages")
        scalar = _scalar(key, key_type)
        one = KeySet(pa.array([scalar.as_py()], key_type))
        before = point.SORTED_BYTES_SEARCHES[0]
        cold, cold_keys = index.search_keyed(one)  # searched in the file
        in_file += point.SORTED_BYTES_SEARCHES[0] - before
        pages = index.bounds.pages(one).tolist()
        decoded = [(index.path, index.uuid, p, VALUES) for p in pages]
        if len(pages) == 1 and point.SORTED_BYTES_SEARCHES[0] > before:
            assert all(cache.peek(INDEX_PAGES, d) is None for d in decoded), key
        again = np.sort(index.search(KeyRange(scalar, scalar)))  # in the file again
        third = np.sort(index.search(one))  # asked often: decoded and kept
        assert all(cache.peek(INDEX_PAGES, d) is not None for d in decoded)
        warm, warm_keys = index.search_keyed(one)  # the decoded page
        assert np.array_equal(np.sort(cold), np.sort(warm)), key
        assert np.array_equal(again, np.sort(warm)) and np.array_equal(third, np.sort(warm))
        assert cold_keys is not None and warm_keys is not None
        assert cold_keys.equals(pa.array([scalar.as_py()] * len(cold), key_type)), key
        assert warm_keys.equals(cold_keys), key
    if column != "rep" or "dictionary" not in _layouts(index):
        assert in_file > 25  # most keys were searched in the file (the counter)


@pytest.mark.parametrize("column", ["s", "rep"])
def test_one_key_filters_equal_a_scan(table, column) -> None:
    uri, data = table
    ds = lance_sql.dataset(uri)
    for key in _probes(data.column(column).combine_chunks())[::2]:
        current_runtime().clear("index_pages")
        text = "{} = '{}'".format(column, key.decode().replace("'", "''"))
        indexed = ds.to_table(filter=text, use_scalar_index=True).sort_by("v")
        scanned = ds.to_table(filter=text, use_scalar_index=False).sort_by("v")
        assert indexed.equals(scanned), text


def test_the_one_key_search_is_off_without_the_file_search(table, monkeypatch) -> None:
    """With the in-file search switched off, a one-key search decodes the page on its
    first search (what the counters above tell apart)."""
    uri, data = table
    ds = lance_sql.dataset(uri)
    index = _index(ds, "s")
    monkeypatch.setattr(point, "_search_bytes", lambda *args: None)
    current_runtime().clear("index_pages")
    key = data.column("s")[0].as_py()
    one = KeySet(pa.array([key], pa.string()))
    before = point.SORTED_BYTES_SEARCHES[0]
    found = index.search(one)
    assert found.size == 1 and point.SORTED_BYTES_SEARCHES[0] == before
    [page] = index.bounds.pages(one).tolist()
    assert current_runtime().cache.peek(INDEX_PAGES, (index.path, index.uuid, page,
                                                       VALUES)) is not None
