"""Whole small fragments read together: each column of a run of fragments decoded in one
pass (``scan_fragments``, :mod:`lance_sql.table.read.batched`). Every result is checked
against the fragment-by-fragment path (``BATCH_FRAGMENT_ROWS = 0``) and against pylance,
on tables of many small fragments of several types, with nulls in some fragments only,
deletions, rows dropped, system columns, both 2.1+ file versions and both writers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.datafile import batched as format_batched
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read import batched, scan, side_by_side
from lance_sql.table.read.scan import Scanner

FRAGMENT_ROWS = 300
FRAGMENTS = 12


def _rows(start: int, n: int) -> pa.Table:
    """Rows ``start .. start + n``: nulls only in some fragments (so some pages of a column
    have levels and others not), low-cardinality strings (dictionary pages), lists,
    fixed-size lists, a struct."""
    ids = np.arange(start, start + n, dtype=np.int64)
    frag = start // FRAGMENT_ROWS
    nulls = frag % 3 == 1
    rng = np.random.default_rng(start)
    f32 = rng.random(n * 4).astype(np.float32)
    return pa.table({
        "id": ids,
        "i8": pa.array((ids % 100 - 50).astype(np.int8)),
        "u16": pa.array((ids * 7 % 60000).astype(np.uint16)),
        "i32": pa.array([None if nulls and i % 4 == 0 else int(i % 1000) for i in ids],
                        pa.int32()),
        "f64": pa.array([None if nulls and i % 5 == 0 else float(i) / 3 for i in ids]),
        "f32": pa.array(rng.random(n).astype(np.float32)),
        "b": pa.array([bool(i % 3) for i in ids]),
        "s": pa.array([None if nulls and i % 6 == 0 else f"s{i}-" + "x" * int(i % 17)
                       for i in ids]),
        "cat": pa.array([f"c{i % 4}" for i in ids]),
        "bin": pa.array([bytes([int(i % 251)]) * int(i % 5) for i in ids], pa.binary()),
        "ts": pa.array(ids * 1_000_000, pa.timestamp("us")),
        "tags": pa.array([[int(i), int(i) + 1][: int(i % 3)] for i in ids],
                         pa.list_(pa.int32())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(f32), 4),
        "st": pa.StructArray.from_arrays(
            [pa.array(ids.astype(np.int32)), pa.array([f"t{i % 9}" for i in ids])],
            names=["a", "b"]),
    })


def _write(uri: str, writer: str, version: str, fragments: int = FRAGMENTS,
           rows: int = FRAGMENT_ROWS) -> None:
    for k in range(fragments):
        data = _rows(k * rows, rows)
        mode = "create" if k == 0 else "append"
        if writer == "pylance":
            import lance

            lance.write_dataset(data, uri, mode=mode, data_storage_version=version)
        else:
            lance_sql.write_dataset(data, uri, mode=mode, data_storage_version=version)


@pytest.fixture(params=[("lance_sql", "2.2"), ("pylance", "2.1"), ("pylance", "2.2"),
                        ("lance_sql", "2.0")], ids=lambda p: f"{p[0]}-{p[1]}")
def table(request, tmp_path) -> str:
    writer, version = request.param
    uri = str(tmp_path / "t")
    _write(uri, writer, version)
    lance_sql.dataset(uri).delete("id % 13 = 0 OR (id >= 600 AND id < 900)")
    return uri


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """Pages decoded per call of the batched decode (what it got to do)."""
    calls: list[int] = []
    original = format_batched.decode_whole

    def spy(pages):
        calls.append(len(pages))
        return original(pages)

    monkeypatch.setattr(batched, "decode_whole", spy)
    return calls


def _one_by_one(fn, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(scan, "BATCH_FRAGMENT_ROWS", 0)
        return fn()


def _pylance(uri: str, **kwargs) -> pa.Table:
    import lance

    return lance.dataset(uri).to_table(**kwargs)


@pytest.mark.parametrize("kwargs", [
    {},
    {"columns": ["id", "s", "vec"]},
    {"columns": ["f64", "i32", "cat"], "with_row_id": True},
    {"columns": ["st", "tags", "id"], "with_row_address": True},
])
def test_scans_equal_the_fragment_by_fragment_path_and_pylance(table, decodes, monkeypatch,
                                                               kwargs) -> None:
    ds = lance_sql.dataset(table)
    got = ds.to_table(**kwargs)
    want = _one_by_one(lambda: ds.to_table(**kwargs), monkeypatch)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    assert got.equals(_pylance(table, **kwargs).cast(got.schema))
    if ds.data_storage_version != "2.0":
        assert decodes and max(decodes) >= 2  # columns of several fragments at once
    else:
        assert not decodes  # 2.0 files: one by one


def test_rows_dropped_limits_offsets_and_batches(table, monkeypatch) -> None:
    ds = lance_sql.dataset(table)
    rng = np.random.default_rng(5)
    drop = {f.id: rng.choice(f.physical_rows, 40) for f in ds.manifest.fragments[::2]}

    def dropped():
        return Scanner(ds.store, ds.manifest, columns=["id", "s", "f64", "tags"],
                       with_row_address=True, drop_rows=drop).to_table()

    got = dropped()
    want = _one_by_one(dropped, monkeypatch)
    assert got.equals(want)
    dropped_ids = {f.id * FRAGMENT_ROWS + int(r) for f in ds.manifest.fragments
                   for r in drop.get(f.id, [])}  # (fragment k holds ids from k * rows)
    assert dropped_ids and not set(got.column("id").to_pylist()) & dropped_ids
    for kwargs in ({"limit": 500, "offset": 700}, {"offset": 250}):
        got = ds.to_table(**kwargs)
        assert got.equals(_one_by_one(lambda kw=kwargs: ds.to_table(**kw), monkeypatch))
    batches = list(ds.to_batches(batch_size=128))
    assert all(b.num_rows <= 128 for b in batches)
    assert pa.Table.from_batches(batches).equals(
        _one_by_one(ds.to_table, monkeypatch).combine_chunks())


@pytest.mark.parametrize("where", [
    "i32 > 500 AND cat = 'c1'",  # comparisons: filter columns first, then the others
    "i32 = 7",  # few rows a fragment: the others taken
    "id % 3 = 1",  # a general filter over the whole table of each fragment
    "f64 IS NULL OR s LIKE 's1%'",
    "id < 0",  # nothing matches
    "id >= 0",  # everything matches
])
def test_filtered_scans_equal_the_fragment_by_fragment_path(table, decodes, monkeypatch,
                                                            where) -> None:
    ds = lance_sql.dataset(table)
    kwargs = {"filter": where, "columns": ["id", "s", "vec", "st", "f64"],
              "with_row_address": True}
    got = ds.to_table(**kwargs)
    want = _one_by_one(lambda: ds.to_table(**kwargs), monkeypatch)
    assert got.equals(want)
    theirs = _pylance(table, **kwargs)
    assert got.num_rows == theirs.num_rows
    assert got.equals(theirs.cast(got.schema))
    if ds.data_storage_version != "2.0":
        assert decodes and max(decodes) >= 2
    rng = np.random.default_rng(7)
    drop = {f.id: rng.choice(f.physical_rows, 50) for f in ds.manifest.fragments}

    def dropped():
        return Scanner(ds.store, ds.manifest, columns=["id", "s", "tags"], filter=where,
                       with_row_id=True, drop_rows=drop).to_table()

    assert dropped().equals(_one_by_one(dropped, monkeypatch))


def test_reads_in_worker_threads(tmp_path, decodes, monkeypatch) -> None:
    """Reads that are not small go to a pool: each task's run of fragments is read
    together there too."""
    uri = str(tmp_path / "t")
    _write(uri, "lance_sql", "2.2", fragments=8, rows=20_000)
    ds = lance_sql.dataset(uri)
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
    got = Scanner(ds.store, ds.manifest, columns=["id", "s", "vec"], num_threads=2).to_table()
    want = _one_by_one(lambda: Scanner(ds.store, ds.manifest, columns=["id", "s", "vec"],
                                       num_threads=2).to_table(), monkeypatch)
    assert got.equals(want) and got.num_rows == 160_000
    assert decodes and max(decodes) >= 2


def test_a_failed_batched_decode_falls_back(table, monkeypatch) -> None:
    """Pages whose joint decode fails are read one by one (whose decoders name the file
    of any error)."""
    ds = lance_sql.dataset(table)
    want = _one_by_one(ds.to_table, monkeypatch)
    monkeypatch.setattr(batched, "decode_whole", lambda pages: None)
    assert ds.to_table().equals(want)


def test_corrupt_chunk_metadata_is_a_format_error(tmp_path) -> None:
    """A page whose chunk sizes claim more bytes than its buffer holds fails the scan
    with a FormatError, as it does read alone."""
    uri = str(tmp_path / "t")
    _write(uri, "lance_sql", "2.2", fragments=4)
    ds = lance_sql.dataset(uri)
    fragment = ds.manifest.fragments[2]
    reader = FragmentReader(ds.store, ds.manifest, fragment)
    field = ds.manifest.schema.field("id")
    page = reader.leaf_pages(field)[0]
    offset, size = page.buffers[0]
    path = tmp_path / "t" / "data" / fragment.files[0].path
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = b"\xff" * size
    path.write_bytes(bytes(data))
    fresh = lance_sql.dataset(uri)  # (a new runtime cache would do as well)
    from lance_sql.table.runtime.context import current_runtime

    current_runtime().cache.clear()
    with pytest.raises(FormatError):
        fresh.to_table(columns=["id"])


def test_whole_columns_leaves_out_what_it_cannot_share(table) -> None:
    """Columns of 2.0 files come back as None (read the usual way), as do fields with a
    dictionary-encoded leaf (``st.b``); leaves and lists of 2.1+ files as the fragment's
    whole column."""
    ds = lance_sql.dataset(table)
    readers = [FragmentReader(ds.store, ds.manifest, f) for f in ds.manifest.fragments]
    for r in readers:
        r.check_rows()
    schema = ds.manifest.schema
    for name in ("id", "tags", "st"):
        field = schema.field(name)
        got = batched.whole_columns(readers, field)
        if ds.data_storage_version == "2.0":
            assert got == [None] * len(readers)
            continue
        # (pages of encodings of their own, bit widths say, are read alone)
        least = {"id": len(readers), "tags": 2, "st": 0}[name]
        assert sum(a is not None for a in got) >= least, name
        for reader, array in zip(readers, got, strict=True):
            if array is not None:
                assert array.equals(reader.read([field])[0])


@pytest.mark.parametrize(("writer", "version"), [("lance_sql", "2.2"), ("pylance", "2.1")])
def test_sql_scans_read_runs_of_small_fragments_together(tmp_path, decodes, monkeypatch,
                                                         writer, version) -> None:
    """SQL reads a run of small units in one partition; their fragments are read together
    there, and the rows equal those read fragment by fragment (and the Python scan's)."""
    uri = str(tmp_path / "t.lance")
    _write(uri, writer, version)
    lance_sql.dataset(uri).delete("id % 11 = 0")
    session = lance_sql.connect(str(tmp_path))
    queries = ["SELECT * FROM t", "SELECT id, s, vec, tags FROM t",
               "SELECT i32, f64 FROM t WHERE cat = 'c2'", "SELECT id FROM t LIMIT 700",
               "SELECT count(*) FROM t WHERE i32 < 100", "SELECT _rowaddr, s FROM t"]
    for query in queries:
        decodes.clear()
        got = session.sql(query).to_arrow_table()
        want = _one_by_one(lambda q=query: session.sql(q).to_arrow_table(), monkeypatch)
        assert got.num_rows == want.num_rows > 0
        assert got.equals(want)
        if query == "SELECT * FROM t":
            assert decodes and max(decodes) >= 2
            python = lance_sql.dataset(uri).to_table()
            assert got.sort_by("id").equals(python.sort_by("id").cast(got.schema))


def test_runs_are_bounded(tmp_path, decodes, monkeypatch) -> None:
    """A run read together holds at most ``batch_rows`` rows (BATCH_ROWS, fewer for wide
    rows: BATCH_BYTES), in Python and SQL scans alike; the rows are the same."""
    uri = str(tmp_path / "t.lance")
    _write(uri, "lance_sql", "2.2")
    ds = lance_sql.dataset(uri)
    want = _one_by_one(ds.to_table, monkeypatch)
    session = lance_sql.connect(str(tmp_path))
    want_sql = _one_by_one(lambda: session.sql("SELECT id, s FROM t").to_arrow_table(),
                           monkeypatch)
    monkeypatch.setattr(scan, "BATCH_ROWS", 3 * FRAGMENT_ROWS)
    assert ds.to_table().equals(want)
    assert decodes and max(decodes) == 3
    decodes.clear()
    assert session.sql("SELECT id, s FROM t").to_arrow_table().equals(want_sql)
    assert decodes and max(decodes) == 3
    decodes.clear()
    plan = ds.scanner(columns=["id"]).plan
    monkeypatch.setattr(scan, "BATCH_BYTES", 2 * FRAGMENT_ROWS * 8)  # id: 8 bytes a row
    assert scan.batch_rows(plan) == 2 * FRAGMENT_ROWS
    assert ds.to_table(columns=["id"]).equals(want.select(["id"]))
    assert decodes and max(decodes) == 2


def test_runs_read_together_cut_at_the_row_bound_and_around_other_items() -> None:
    from lance_sql.table.read.scan import runs_read_together

    asked = []

    def limit() -> int:
        asked.append(1)
        return 10

    items = [4, 4, 4, -1, 11, 3, -2, 2]  # negative: not read together; value: its rows
    runs = list(runs_read_together(items, lambda n: n > 0, lambda n: n, limit))
    assert runs == [([4, 4], True), ([4], True), ([-1], False), ([11], True), ([3], True),
                    ([-2], False), ([2], True)]
    assert asked == [1]
    assert list(runs_read_together([-1], lambda n: n > 0, lambda n: n, limit)) == [([-1], False)]
    assert asked == [1]


PLAIN = ["id", "i8", "u16", "i32", "f64", "f32", "b", "s", "bin", "ts", "vec"]


@pytest.fixture(params=[("lance_sql", "2.2"), ("pylance", "2.1"), ("pylance", "2.2")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def plain(request, tmp_path) -> str:
    """A table of many small fragments whose columns all decode over a whole run (no
    dictionaries, lists or structs), with deleted rows."""
    writer, version = request.param
    uri = str(tmp_path / "t")
    for k in range(FRAGMENTS):
        data = _rows(k * FRAGMENT_ROWS, FRAGMENT_ROWS).select(PLAIN)
        mode = "create" if k == 0 else "append"
        if writer == "pylance":
            import lance

            lance.write_dataset(data, uri, mode=mode, data_storage_version=version)
        else:
            lance_sql.write_dataset(data, uri, mode=mode, data_storage_version=version)
    lance_sql.dataset(uri).delete("id % 13 = 0 OR (id >= 600 AND id < 900)")
    return uri


@pytest.fixture
def whole_runs(monkeypatch) -> list[bool]:
    """Per run of fragments read together: whether it was assembled once for the whole
    run (``_scan_run``) rather than fragment by fragment."""
    calls: list[bool] = []
    original = scan._scan_run

    def spy(*args, **kwargs):
        got = original(*args, **kwargs)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(scan, "_scan_run", spy)
    return calls


@pytest.mark.parametrize("kwargs", [
    {},
    {"columns": ["s", "id"]},
    {"filter": "i32 > 500 AND s LIKE 's1%'"},  # comparisons
    {"filter": "i32 = 7", "columns": ["id", "vec"]},  # a few rows a fragment
    {"filter": "id % 3 = 1 OR f64 IS NULL"},  # a general filter
    {"filter": "100 / (id % 13) > 0"},  # fails on deleted rows only: never evaluated there
    {"filter": "id < 0"},  # nothing matches: the other columns are never decoded
    {"filter": "id >= 0", "columns": ["b", "ts"]},
])
def test_runs_of_whole_columns_are_assembled_once(plain, whole_runs, monkeypatch,
                                                  kwargs) -> None:
    """Deleted rows, the filter and the output types applied to a run's columns at once,
    each fragment's rows a slice of the result: the same tables as fragment by fragment
    and as pylance."""
    ds = lance_sql.dataset(plain)
    got = ds.to_table(**kwargs)
    assert whole_runs and all(whole_runs)
    want = _one_by_one(lambda: ds.to_table(**kwargs), monkeypatch)
    assert got.equals(want)
    assert got.equals(_pylance(plain, **kwargs).cast(got.schema))
    batches = list(ds.to_batches(batch_size=100, **kwargs))
    assert all(b.num_rows <= 100 for b in batches)
    assert pa.Table.from_batches(batches, schema=got.schema).equals(got)


def test_a_run_with_rows_dropped_and_counted(plain, whole_runs, monkeypatch) -> None:
    """Rows dropped (an LSM view's hidden rows) and a count without columns, over whole
    runs: the same as fragment by fragment."""
    ds = lance_sql.dataset(plain)
    rng = np.random.default_rng(3)
    drop = {f.id: rng.choice(f.physical_rows, 60) for f in ds.manifest.fragments[1::2]}
    for kwargs in ({"columns": ["id", "s", "f64"]}, {"columns": ["id"], "filter": "i8 > 0"},
                   {"columns": [], "filter": "i8 > 0"},
                   {"columns": [], "filter": "i8 * 2 < id % 50"}):
        def read(kw=kwargs):
            tables = list(Scanner(ds.store, ds.manifest, drop_rows=drop, **kw).to_tables())
            return [t.num_rows for t in tables], pa.concat_tables(tables)

        whole_runs.clear()
        got = read()
        assert whole_runs and all(whole_runs), kwargs
        want = _one_by_one(read, monkeypatch)
        assert got[0] == want[0] and sum(got[0]) > 0  # the same rows from each fragment
        assert got[1].equals(want[1])


def test_a_run_whose_fragments_decode_in_groups_is_joined_in_order(tmp_path, whole_runs,
                                                                   monkeypatch) -> None:
    """Fragments of short and long strings are encoded differently (two groups decoded
    apart, interleaved): the run's column joins them back in fragment order."""
    uri = str(tmp_path / "t")
    lengths = [3, 3, 200, 200, 3, 200]
    for k, n in enumerate(lengths):
        ids = np.arange(k * 300, k * 300 + 300)
        lance_sql.write_dataset(pa.table({"id": ids, "s": [f"{'x' * n}{i}" for i in ids]}),
                                uri, mode="create" if k == 0 else "append")
    ds = lance_sql.dataset(uri)
    readers = [FragmentReader(ds.store, ds.manifest, f) for f in ds.manifest.fragments]
    for r in readers:
        r.check_rows()
    field = next(f for f in ds.manifest.schema.fields if f.name == "s")
    keys = [tuple(p.batch_key() for p in r.leaf_pages(field)) for r in readers]
    assert len(set(keys)) == 2  # (else this test tests nothing)
    joined = batched.WholeColumns(readers, [field]).joined("s")
    assert joined is not None and joined.to_pylist() == pa.concat_tables(
        [_one_by_one(ds.to_table, monkeypatch)]).column("s").to_pylist()
    got = ds.to_table(filter="id % 7 = 1")
    assert whole_runs and all(whole_runs)
    assert got.equals(_one_by_one(lambda: ds.to_table(filter="id % 7 = 1"), monkeypatch))


def test_a_run_that_does_not_conform_is_read_fragment_by_fragment(plain, monkeypatch) -> None:
    """Output the run cannot conform to the schema (a damaged file) is read fragment by
    fragment, which names the fragment at fault."""
    ds = lance_sql.dataset(plain)
    want = _one_by_one(ds.to_table, monkeypatch)
    original = scan.conformed
    runs = []

    def refuse_runs(arrays, schema, store, fragment, fields=None):
        if len(arrays[0]) > FRAGMENT_ROWS:  # a whole run's columns
            runs.append(fragment.id)
            raise FormatError("refused")
        return original(arrays, schema, store, fragment, fields)

    monkeypatch.setattr(scan, "conformed", refuse_runs)
    assert ds.to_table().equals(want)
    assert runs


def _nested_rows(start: int, n: int, with_map: bool) -> pa.Table:
    """Lists, structs and maps, nested, with nulls and empty lists in some fragments."""
    ids = np.arange(start, start + n)
    holes = (start // FRAGMENT_ROWS) % 2 == 1

    def some(i: int, value):
        return None if holes and i % 7 == 0 else value

    columns = {
        "id": pa.array(ids),
        "li": pa.array([some(i, [some(i + 1, int(i)), 2][: i % 3]) for i in ids],
                       pa.list_(pa.int64())),
        "ls": pa.array([some(i, [f"s{i}"] * (i % 4)) for i in ids], pa.list_(pa.string())),
        "lol": pa.array([some(i, [[int(i)] * (i % 2)] * (i % 3)) for i in ids],
                        pa.list_(pa.list_(pa.int16()))),
        "los": pa.array([some(i, [{"k": int(i), "v": some(i + 3, "v")}] * (i % 3))
                         for i in ids],
                        pa.list_(pa.struct([("k", pa.int64()), ("v", pa.string())]))),
        "sl": pa.array([some(i, {"a": some(i + 2, int(i)), "l": [float(i)] * (i % 2)})
                        for i in ids],
                       pa.struct([("a", pa.int32()), ("l", pa.list_(pa.float64()))])),
        "big": pa.array([some(i, [int(i)] * (i % 3)) for i in ids], pa.large_list(pa.int32())),
    }
    if with_map:
        columns["m"] = pa.array([some(i, [("a", int(i)), ("b", None)][: i % 3]) for i in ids],
                                pa.map_(pa.string(), pa.int64()))
    return pa.table(columns)


@pytest.mark.parametrize(("writer", "version"), [("lance_sql", "2.2"), ("pylance", "2.1"),
                                                 ("pylance", "2.2"), ("lance_sql", "2.1")])
def test_nested_columns_of_small_fragments_are_built_once_per_run(tmp_path, monkeypatch,
                                                                   writer, version) -> None:
    """Lists, structs and maps of many small fragments: their leaf columns decoded across
    the fragments and each field built once, with rows deleted and dropped, equal to the
    fragment-by-fragment path and to pylance."""
    uri = str(tmp_path / "t")
    for k in range(FRAGMENTS):
        data = _nested_rows(k * FRAGMENT_ROWS, FRAGMENT_ROWS, with_map=version == "2.2")
        mode = "create" if k == 0 else "append"
        if writer == "pylance":
            import lance

            lance.write_dataset(data, uri, mode=mode, data_storage_version=version)
        else:
            lance_sql.write_dataset(data, uri, mode=mode, data_storage_version=version)
    lance_sql.dataset(uri).delete("id % 11 = 0")
    ds = lance_sql.dataset(uri)
    built: list[str] = []
    original = batched.build_field

    def spy(field, *args, **kwargs):
        built.append(field.name)
        return original(field, *args, **kwargs)

    monkeypatch.setattr(batched, "build_field", spy)
    got = ds.to_table()
    # (list<struct> and maps: their leaves' encodings differ between fragments more often)
    assert {"li", "ls", "lol", "sl", "big"} <= set(built)
    want = _one_by_one(ds.to_table, monkeypatch)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    assert got.equals(_pylance(uri).cast(got.schema))
    drops = {f.id: np.arange(0, f.physical_rows, 5) for f in ds.manifest.fragments}
    dropped = Scanner(ds.store, ds.manifest, drop_rows=drops).to_table()
    assert dropped.equals(_one_by_one(
        lambda: Scanner(ds.store, ds.manifest, drop_rows=drops).to_table(), monkeypatch))
    assert dropped.num_rows < got.num_rows


def test_a_failed_levels_decode_falls_back(tmp_path, monkeypatch) -> None:
    """Lists whose joint decode fails are read fragment by fragment."""
    uri = str(tmp_path / "t")
    for k in range(4):
        lance_sql.write_dataset(_nested_rows(k * 100, 100, with_map=False), uri,
                                mode="create" if k == 0 else "append")
    ds = lance_sql.dataset(uri)
    want = _one_by_one(ds.to_table, monkeypatch)
    monkeypatch.setattr(batched, "decode_whole_levels", lambda pages: None)
    assert ds.to_table().equals(want)


def test_a_corrupt_list_page_is_a_format_error(tmp_path) -> None:
    """A list page whose chunk sizes claim more bytes than it holds fails the scan with a
    FormatError, as it does read alone."""
    uri = str(tmp_path / "t")
    for k in range(4):
        lance_sql.write_dataset(_nested_rows(k * 100, 100, with_map=False), uri,
                                mode="create" if k == 0 else "append")
    ds = lance_sql.dataset(uri)
    fragment = ds.manifest.fragments[2]
    reader = FragmentReader(ds.store, ds.manifest, fragment)
    ((_, column),) = reader.field_columns(ds.manifest.schema.field("li"))
    offset, size = column.page(0).buffers[0]
    path = tmp_path / "t" / "data" / fragment.files[0].path
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = b"\xff" * size
    path.write_bytes(bytes(data))
    from lance_sql.table.runtime.context import current_runtime

    current_runtime().cache.clear()
    with pytest.raises(FormatError):
        lance_sql.dataset(uri).to_table(columns=["li"])


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-ids"])
@pytest.mark.parametrize("kwargs", [
    {"with_row_id": True},
    {"with_row_address": True, "columns": ["v"]},
    {"with_row_id": True, "filter": "id > 250"},
    {"with_row_id": True, "with_row_address": True, "filter": "v > 30"},
    # (a constant not of its column's type: the run's general filter)
    {"with_row_id": True, "with_row_address": True, "filter": "f >= 30.5"},
])
def test_system_columns_of_a_run_are_made_for_the_run(tmp_path, monkeypatch, stable,
                                                       kwargs) -> None:
    """``_rowid`` / ``_rowaddr`` of a run of small fragments (some rows deleted, some
    moved by an update) are made for the whole run at once; they and the rows equal the
    fragment-by-fragment path's and pylance's."""
    uri = str(tmp_path / "t")
    for k in range(10):
        data = pa.table({"id": np.arange(k * 100, k * 100 + 100),
                         "v": np.arange(100) * 1.5,
                         "f": pa.array(np.arange(100, dtype=np.float32) / 2)})
        lance_sql.write_dataset(data, uri, mode="create" if k == 0 else "append",
                                enable_stable_row_ids=stable)
    lance_sql.dataset(uri).delete("id % 7 = 0")
    lance_sql.dataset(uri).update({"v": "v + 1"}, where="id % 5 = 0")
    ds = lance_sql.dataset(uri)
    made: list[tuple[str, ...]] = []
    original = scan._run_system_arrays

    def spy(*args):
        made.append(tuple(args[-1]))
        return original(*args)

    monkeypatch.setattr(scan, "_run_system_arrays", spy)
    got = ds.to_table(**kwargs)
    assert made
    want = _one_by_one(lambda: ds.to_table(**kwargs), monkeypatch)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    key = "id" if "id" in got.column_names else got.column_names[-1]
    assert got.sort_by(key).equals(_pylance(uri, **kwargs).cast(got.schema).sort_by(key))


def test_row_versions_of_a_run_equal_the_fragment_by_fragment_path(tmp_path,
                                                                    monkeypatch) -> None:
    """The row-version columns of a run of small fragments, through SQL."""
    uri = str(tmp_path / "t")
    for k in range(6):
        data = pa.table({"id": np.arange(k * 50, k * 50 + 50)})
        lance_sql.write_dataset(data, uri, mode="create" if k == 0 else "append",
                                enable_stable_row_ids=True)
    lance_sql.dataset(uri).update({"id": "id + 1000"}, where="id % 4 = 0")
    session = lance_sql.LanceSession()
    session.register("t", uri)
    query = ("SELECT id, _rowid, _row_created_at_version, _row_last_updated_at_version "
             "FROM t ORDER BY id")
    got = session.sql(query).to_arrow_table()
    want = _one_by_one(lambda: session.sql(query).to_arrow_table(), monkeypatch)
    assert got.num_rows == 300
    assert got.equals(want)
    assert set(got.column("_row_last_updated_at_version").to_pylist()) == set(range(1, 8))
