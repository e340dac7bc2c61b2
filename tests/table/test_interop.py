"""Interoperability with pylance 14.0.2, both directions, every row compared.

* tables lance_sql writes (every type, several fragments, deletion files of both kinds,
  create/append/delete/overwrite) read identically in pylance at every version, and
  pylance can keep writing to them;
* tables pylance writes with ``data_storage_version="2.0"`` read identically in lance_sql
  at every version, with the same filters, ``take`` and ``take_rows``;
* tags and version listings are shared; pylance's 2.1 and 2.2 tables take lance_sql's
  writes; both manifest naming schemes work and a mixture of them is an error.

Every expectation is checked three ways where possible: lance_sql == pylance == a model
of the table built from the generated rows (independent of both).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import FormatError

BIG = 5600  # rows of the first write; its first fragment holds 5500 rows
BIG_FRAGMENT = 5500
PYLANCE_DELETION_KIND = {"arrow": "array", "bitmap": "bitmap"}


@dataclass
class History:
    """A table directory and what every version of it must contain."""

    uri: str
    expected: dict[int, pa.Table] = field(default_factory=dict)

    def record(self, version: int, table: pa.Table) -> None:
        assert version not in self.expected
        self.expected[version] = table

    @property
    def latest(self) -> int:
        return max(self.expected)


def _delete_where(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table.filter(pa.array(~mask))


def _ids(table: pa.Table) -> np.ndarray:
    return table["id"].to_numpy()


def _first_column(table: pa.Table) -> str:
    return table.column_names[0]


def check_version(history: History, version: int, tables) -> None:
    """lance_sql and pylance agree with the model (and each other) at ``version``."""
    expected = history.expected[version]
    sql = lance_sql.dataset(history.uri, version=version)
    py = lance.dataset(history.uri, version=version)
    assert sql.version == py.version == version
    py.validate()  # pylance's own integrity check of the manifest and its files
    assert sql.schema.equals(py.schema, check_metadata=True), f"v{version} schemas differ"
    tables.assert_equal(sql.to_table(), expected, f"lance_sql v{version}")
    tables.assert_equal(py.to_table(), expected, f"pylance v{version}")
    assert sql.count_rows() == py.count_rows() == expected.num_rows
    assert sql.to_table(columns=[]).num_rows == py.to_table(columns=[]).num_rows
    assert sql.to_table(columns=[]).num_rows == expected.num_rows
    assert sql.data_storage_version == py.data_storage_version
    # the fragment lists agree: ids, physical rows and deletion files
    sql_frags = [(f.id, f.physical_rows, f.num_deleted_rows,
                  f.deletion_file.kind if f.deletion_file else None)
                 for f in sql.manifest.fragments]
    py_frags = [(f.metadata.id, f.metadata.physical_rows,
                 f.metadata.deletion_file.num_deleted_rows if f.metadata.deletion_file else 0,
                 f.metadata.deletion_file.file_type if f.metadata.deletion_file else None)
                for f in py.get_fragments()]
    assert [(i, r, d, PYLANCE_DELETION_KIND.get(k)) for i, r, d, k in sql_frags] == py_frags
    # _rowid and _rowaddr, with a projection and with none
    key = _first_column(expected)
    sql_sys = sql.to_table(columns=[key], with_row_id=True, with_row_address=True)
    py_sys = py.to_table(columns=[key], with_row_id=True, with_row_address=True)
    assert sql_sys.column_names == [key, "_rowid", "_rowaddr"]
    tables.assert_equal(sql_sys, py_sys, f"system columns v{version}")
    sql_addr = sql.to_table(with_row_address=True)
    assert sql_addr.column_names == expected.column_names + ["_rowaddr"]
    assert sql_addr["_rowaddr"].equals(py_sys["_rowaddr"])


def check_all_versions(history: History, tables) -> None:
    for version in sorted(history.expected):
        check_version(history, version, tables)
    sql_versions = [v["version"] for v in lance_sql.dataset(history.uri).versions()]
    py_versions = [v["version"] for v in lance.dataset(history.uri).versions()]
    assert sql_versions == py_versions == sorted(history.expected)


def _deletion_kinds(uri: str) -> set[str]:
    return {os.path.splitext(n)[1] for n in os.listdir(os.path.join(uri, "_deletions"))}


# --------------------------------------------------------------------------------------------
# Tables written by lance_sql
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["2.0", "2.2"])
def file_format(request: pytest.FixtureRequest) -> str:
    """Every history is written in both data-file formats lance_sql writes."""
    return request.param


@pytest.fixture(scope="module")
def sql_history(tmp_path_factory: pytest.TempPathFactory, tables,
                file_format: str) -> History:
    """create / append / delete (.bin, .arrow, whole fragment) / overwrite / append."""
    uri = str(tmp_path_factory.mktemp("sql") / "t.lance")
    h = History(uri)
    first = tables.make(BIG, seed=1)
    ds = lance_sql.write_dataset(first, uri, max_rows_per_file=BIG_FRAGMENT,
                                 data_storage_version=file_format)
    h.record(ds.version, first)
    second = tables.make(300, start=BIG, seed=2)
    ds = lance_sql.write_dataset(second, uri, mode="append", max_rows_per_file=100)
    rows = pa.concat_tables([first, second])
    h.record(ds.version, rows)
    ds.delete("id < 5100")  # 5100 rows of fragment 0: a roaring bitmap
    rows = _delete_where(rows, _ids(rows) < 5100)
    h.record(ds.version, rows)
    ds.delete("id % 7 = 3")  # a few rows of every fragment: Arrow files (fragment 0 stays .bin)
    rows = _delete_where(rows, _ids(rows) % 7 == 3)
    h.record(ds.version, rows)
    ds.delete("id >= 5700 AND id < 5800")  # all of fragment 3: the fragment goes away
    rows = _delete_where(rows, (_ids(rows) >= 5700) & (_ids(rows) < 5800))
    h.record(ds.version, rows)
    other = tables.make_other(250, seed=3)
    ds = lance_sql.write_dataset(other, uri, mode="overwrite", max_rows_per_file=100)
    h.record(ds.version, other)
    more = tables.make_other(50, start=250, seed=4)
    ds = lance_sql.write_dataset(more, uri, mode="append")
    h.record(ds.version, pa.concat_tables([other, more]))
    assert sorted(h.expected) == list(range(1, 8))
    return h


def test_lance_sql_tables_read_identically_in_pylance(sql_history: History, tables) -> None:
    check_all_versions(sql_history, tables)


def test_lance_sql_writes_both_deletion_file_kinds(sql_history: History) -> None:
    assert _deletion_kinds(sql_history.uri) == {".arrow", ".bin"}
    frags = lance.dataset(sql_history.uri, version=4).get_fragments()
    kinds = [(f.metadata.id, f.metadata.deletion_file.file_type) for f in frags]
    assert kinds == [(0, "bitmap"), (1, "array"), (2, "array"), (3, "array"), (4, "array")]
    assert frags[0].metadata.deletion_file.num_deleted_rows == 5100 + len(
        [i for i in range(5100, BIG_FRAGMENT) if i % 7 == 3]
    )
    assert [f.metadata.id for f in lance.dataset(sql_history.uri, version=5).get_fragments()] == [
        0, 1, 2, 4
    ]
    # overwrite continues fragment ids after the high-water mark (as pylance 14 does)
    assert [f.metadata.id for f in lance.dataset(sql_history.uri, version=7).get_fragments()] == [
        5, 6, 7, 8
    ]


def test_pylance_continues_a_lance_sql_table(tmp_path: Path, tables) -> None:
    """lance_sql writes, pylance appends and deletes (both kinds), lance_sql continues."""
    h = History(str(tmp_path / "t.lance"))
    first = tables.make(BIG, seed=21)
    ds = lance_sql.write_dataset(first, h.uri, max_rows_per_file=BIG_FRAGMENT)
    h.record(ds.version, first)
    second = tables.make(150, start=BIG, seed=22)
    ds = lance_sql.write_dataset(second, h.uri, mode="append", max_rows_per_file=100)
    rows = pa.concat_tables([first, second])
    h.record(ds.version, rows)

    third = tables.make(200, start=BIG + 150, seed=23)
    py = lance.write_dataset(third, h.uri, mode="append", max_rows_per_file=120)
    rows = pa.concat_tables([rows, third])
    h.record(py.version, rows)
    py.delete("id < 5050")
    rows = _delete_where(rows, _ids(rows) < 5050)
    h.record(py.version, rows)
    py.delete("id % 5 = 1")
    rows = _delete_where(rows, _ids(rows) % 5 == 1)
    h.record(py.version, rows)
    assert _deletion_kinds(h.uri) == {".arrow", ".bin"}  # both written by pylance
    check_all_versions(h, tables)

    ds = lance_sql.dataset(h.uri)
    ds.delete("id % 5 = 2 OR id >= 5800")  # on top of pylance's deletion files
    rows = _delete_where(rows, (_ids(rows) % 5 == 2) | (_ids(rows) >= 5800))
    h.record(ds.version, rows)
    fourth = tables.make(30, start=10_000, seed=24)
    ds = lance_sql.write_dataset(fourth, h.uri, mode="append")
    rows = pa.concat_tables([rows, fourth])
    h.record(ds.version, rows)
    appended = ds.version
    other = tables.make_other(40, seed=25)
    py = lance.write_dataset(other, h.uri, mode="overwrite")
    h.record(py.version, other)
    check_all_versions(h, tables)
    # pylance's own view of what lance_sql wrote: its fragment-level counts and stats
    assert sorted(h.expected) == list(range(1, 9))
    py_appended = lance.dataset(h.uri, version=appended)
    assert py_appended.count_rows() == h.expected[appended].num_rows
    assert py_appended.count_rows("id >= 10000") == 30
    assert py_appended.stats.dataset_stats()["num_deleted_rows"] == sum(
        f.num_deleted_rows for f in lance_sql.dataset(h.uri, version=appended).manifest.fragments
    ) > 5050


# --------------------------------------------------------------------------------------------
# Tables written by pylance
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def py_history(tmp_path_factory: pytest.TempPathFactory, tables,
               file_format: str) -> History:
    uri = str(tmp_path_factory.mktemp("py") / "t.lance")
    h = History(uri)
    first = tables.make(BIG, seed=11)
    ds = lance.write_dataset(first, uri, data_storage_version=file_format,
                             max_rows_per_file=BIG_FRAGMENT)
    h.record(ds.version, first)
    second = tables.make(300, start=BIG, seed=12)
    ds = lance.write_dataset(second, uri, mode="append", max_rows_per_file=100)
    rows = pa.concat_tables([first, second])
    h.record(ds.version, rows)
    ds.delete("id < 5100")
    rows = _delete_where(rows, _ids(rows) < 5100)
    h.record(ds.version, rows)
    ds.delete("id % 7 = 3")
    rows = _delete_where(rows, _ids(rows) % 7 == 3)
    h.record(ds.version, rows)
    ds.delete("id >= 5700 AND id < 5800")
    rows = _delete_where(rows, (_ids(rows) >= 5700) & (_ids(rows) < 5800))
    h.record(ds.version, rows)
    other = tables.make_other(250, seed=13)
    ds = lance.write_dataset(other, uri, mode="overwrite", max_rows_per_file=100)
    h.record(ds.version, other)
    more = tables.make_other(50, start=250, seed=14)
    ds = lance.write_dataset(more, uri, mode="append")
    h.record(ds.version, pa.concat_tables([other, more]))
    assert sorted(h.expected) == list(range(1, 8))
    assert _deletion_kinds(uri) == {".arrow", ".bin"}
    return h


def test_same_operations_give_the_same_fragments(sql_history: History,
                                                py_history: History) -> None:
    """Both histories ran the same operations on the same row counts: the fragment ids,
    sizes and deletion files must match version for version (pylance decides the ids)."""
    for version in sorted(py_history.expected):
        layouts = []
        for uri in (sql_history.uri, py_history.uri):
            frags = lance.dataset(uri, version=version).get_fragments()
            layouts.append([
                (f.metadata.id, f.metadata.physical_rows,
                 [(tuple(d.fields), tuple(d.column_indices), d.file_major_version,
                   d.file_minor_version) for d in f.metadata.files],
                 f.metadata.deletion_file and (f.metadata.deletion_file.file_type,
                                               f.metadata.deletion_file.num_deleted_rows))
                for f in frags
            ])
        assert layouts[0] == layouts[1], f"version {version}"
        sql_manifest = lance_sql.dataset(sql_history.uri, version=version).manifest
        py_manifest = lance_sql.dataset(py_history.uri, version=version).manifest
        assert sql_manifest.max_fragment_id == py_manifest.max_fragment_id
        assert sql_manifest.schema == py_manifest.schema  # field ids, types, flags
        assert sql_manifest.data_format == py_manifest.data_format
        assert sql_manifest.next_row_id == py_manifest.next_row_id
        assert sql_manifest.reader_feature_flags == py_manifest.reader_feature_flags
        assert sql_manifest.writer_feature_flags == py_manifest.writer_feature_flags


def test_pylance_tables_read_identically_in_lance_sql(py_history: History, tables) -> None:
    check_all_versions(py_history, tables)


FULL_PREDICATES = [
    "id > 5500",
    "id % 10 = 4",
    "id IN (1, 5100, 5101, 5600, 5890, 5899)",
    "id BETWEEN 5200 AND 5300",
    "c_int32 IS NULL",
    "c_int32 IS NOT NULL AND c_int32 > 0",
    "c_int8 < -100 OR c_int16 > 30000",
    "c_uint64 > 9223372036854775807",
    "c_uint8 >= 200",
    "c_float >= 500.5",
    "c_double < 0 OR c_bool",
    "NOT c_bool",
    "c_string = 'lance'",
    "c_string LIKE 'x%'",
    "c_string IS NULL OR c_string = ''",
    "c_large_string = 'lancelance'",
    "c_date32 > date '2000-01-01'",
    "c_dec128 > 0",
    "c_struct.a > 500",
    "c_struct.b IS NULL",
    "c_dict = 'red'",
    "(id > 5300 AND c_bool) OR (id < 5300 AND NOT c_bool)",
    "c_halffloat > 0",
    "c_ts_utc < timestamp '2000-01-01 00:00:00'",
    "c_fsb IS NULL",
    "c_binary IS NOT NULL AND c_bool = false",
    "c_vector IS NULL",
    "c_list IS NULL",
    "c_list_struct IS NOT NULL AND id > 5400",
    "_rowaddr < 4294967296 + 50",
    "_rowid >= 4294967296",
]
OTHER_PREDICATES = [
    "key < 'k000100'",
    "value > 0.5",
    "value IS NULL",
    "point.x > 0",
    "key LIKE 'k0002%' AND value < 0",
]


@pytest.fixture(params=["pylance-written", "lance_sql-written"])
def any_history(request: pytest.FixtureRequest, file_format: str) -> History:
    """Both histories: the same reads must agree whoever wrote the files."""
    name = "py_history" if request.param == "pylance-written" else "sql_history"
    return request.getfixturevalue(name)


@pytest.mark.parametrize(("version", "predicate"),
                         [(4, p) for p in FULL_PREDICATES] + [(7, p) for p in OTHER_PREDICATES])
def test_filters_agree_with_pylance(any_history: History, version: int, predicate: str,
                                    tables) -> None:
    py_history = any_history
    sql = lance_sql.dataset(py_history.uri, version=version)
    py = lance.dataset(py_history.uri, version=version)
    expected = py.to_table(filter=predicate)
    total = py.count_rows()
    assert 0 < expected.num_rows < total, "the predicate must select some rows, not all"
    tables.assert_equal(sql.to_table(filter=predicate), expected, predicate)
    assert sql.count_rows(predicate) == py.count_rows(predicate) == expected.num_rows
    assert sql.to_table(columns=[], filter=predicate).num_rows == expected.num_rows
    key = _first_column(expected)
    projected = sql.to_table(columns=[key], filter=predicate, with_row_id=True,
                             with_row_address=True)
    tables.assert_equal(
        projected,
        py.to_table(columns=[key], filter=predicate, with_row_id=True, with_row_address=True),
        f"{predicate} with system columns",
    )


@pytest.mark.parametrize(("predicate", "error"), [
    ("nope = 1", lance_sql.NotFoundError),
    ("id >", lance_sql.InvalidInputError),
    ("id = = 2", lance_sql.InvalidInputError),
    ("id = 'abc'", lance_sql.InvalidInputError),
    ("c_struct > 1", lance_sql.InvalidInputError),
    ("c_vector = 1", lance_sql.InvalidInputError),
    ("c_dur_s > 0", lance_sql.InvalidInputError),
])
def test_filters_pylance_rejects_are_typed_errors(py_history: History, predicate: str,
                                                  error: type) -> None:
    py = lance.dataset(py_history.uri, version=4)
    with pytest.raises(OSError, match="Invalid user input"):
        py.count_rows(predicate)
    sql = lance_sql.dataset(py_history.uri, version=4)
    with pytest.raises(error):
        sql.count_rows(predicate)
    with pytest.raises(error):
        sql.to_table(filter=predicate)


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_take_and_take_rows_agree_with_pylance(any_history: History, version: int,
                                               tables) -> None:
    py_history = any_history
    sql = lance_sql.dataset(py_history.uri, version=version)
    py = lance.dataset(py_history.uri, version=version)
    n = py.count_rows()
    rng = np.random.default_rng(version)
    indices = [0, n - 1, *rng.choice(n, 40, replace=False).tolist(), 0, 3, 2]
    tables.assert_equal(sql.take(indices), py.take(indices), f"take v{version}")
    tables.assert_equal(sql.take(indices), py_history.expected[version].take(indices), "model")
    key = _first_column(py_history.expected[version])
    tables.assert_equal(sql.take(indices, columns=[key]), py.take(indices, columns=[key]),
                        f"take v{version} projected")

    addresses = py.to_table(columns=[key], with_row_address=True)["_rowaddr"].to_numpy()
    chosen = [int(a) for a in rng.permutation(addresses)[:40]] + [int(addresses[-1])]
    # plus addresses of rows deleted later on (skipped by both)
    v1_addresses = lance.dataset(py_history.uri, version=1).to_table(
        columns=[_first_column(py_history.expected[1])], with_row_address=True
    )["_rowaddr"].to_numpy()
    gone = []
    if version in (4, 5):  # fragment 0 still exists, most of its rows deleted
        gone = [int(a) for a in np.setdiff1d(v1_addresses, addresses)[:5]]
        assert len(gone) == 5 and max(gone) >> 32 == 0
    for addrs in (chosen, gone + chosen[:3], gone):
        got = sql.take_rows(addrs)
        tables.assert_equal(got, py._take_rows(addrs), f"take_rows v{version}")
    assert sql.take_rows(gone).num_rows == 0


def test_lance_sql_writes_on_a_pylance_table(tmp_path: Path, tables) -> None:
    """The other direction on pylance's own files: lance_sql appends and deletes."""
    h = History(str(tmp_path / "t.lance"))
    first = tables.make(400, seed=31)
    ds = lance.write_dataset(first, h.uri, data_storage_version="2.0", max_rows_per_file=150)
    h.record(ds.version, first)
    ds.delete("id % 3 = 0")
    rows = _delete_where(first, _ids(first) % 3 == 0)
    h.record(ds.version, rows)
    more = tables.make(100, start=400, seed=32)
    sql = lance_sql.write_dataset(more, h.uri, mode="append", max_rows_per_file=60)
    rows = pa.concat_tables([rows, more])
    h.record(sql.version, rows)
    sql.delete("id % 3 = 1 AND id < 450")
    rows = _delete_where(rows, (_ids(rows) % 3 == 1) & (_ids(rows) < 450))
    h.record(sql.version, rows)
    py = lance.dataset(h.uri)
    py.delete("id = 455")
    rows = _delete_where(rows, _ids(rows) == 455)
    h.record(py.version, rows)
    check_all_versions(h, tables)


def test_multi_page_pylance_files(tmp_path: Path, tables) -> None:
    """Small pages: every column spans several pages; scans, takes and filters cross them."""
    from lance.file import LanceFileReader as PylanceFileReader

    uri = str(tmp_path / "t.lance")
    data = tables.make(3000, seed=41)
    py = lance.write_dataset(data, uri, data_storage_version="2.0", max_page_bytes=4096,
                             max_rows_per_file=2000)
    py.delete("id % 11 = 5")
    data = _delete_where(data, _ids(data) % 11 == 5)
    frag0 = py.get_fragments()[0].metadata.files[0].path
    pages = [len(c.pages) for c in PylanceFileReader(f"{uri}/data/{frag0}").metadata().columns]
    assert sum(n > 1 for n in pages) > len(pages) // 2
    sql = lance_sql.dataset(uri)
    tables.assert_equal(sql.to_table(), data, "multi-page scan")
    tables.assert_equal(sql.to_table(with_row_id=True, with_row_address=True),
                        py.to_table(with_row_id=True, with_row_address=True), "system columns")
    rng = np.random.default_rng(41)
    indices = rng.choice(data.num_rows, 200, replace=False).tolist()
    tables.assert_equal(sql.take(indices), data.take(indices), "multi-page take")
    addresses = rng.choice(3000, 100, replace=False).tolist()
    addresses = [(a // 2000) << 32 | a % 2000 for a in addresses]
    tables.assert_equal(sql.take_rows(addresses), py._take_rows(addresses), "take_rows")
    for predicate in ("c_string = 'lance' AND id > 1000", "c_list IS NULL", "c_struct.a < 10"):
        tables.assert_equal(sql.to_table(filter=predicate), py.to_table(filter=predicate),
                            predicate)
    batches = list(sql.to_batches(batch_size=333))
    assert max(b.num_rows for b in batches) == 333
    tables.assert_equal(pa.Table.from_batches(batches), data, "batches")


def test_multi_page_lance_sql_files(tmp_path: Path) -> None:
    """lance_sql starts a new page every 8 MiB of a column: pylance reads across them."""
    from lance.file import LanceFileReader as PylanceFileReader

    uri = str(tmp_path / "t.lance")
    n = 40_000
    rng = np.random.default_rng(43)
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(n * 128).astype(np.float32)), 128,
        mask=pa.array(rng.random(n) < 0.05))
    text = pa.array(["x" * int(k) for k in rng.integers(0, 900, n)], mask=rng.random(n) < 0.1)
    data = pa.table({"id": np.arange(n), "v": vectors, "s": text})
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=1000))
    ds = lance_sql.write_dataset(reader, uri)
    path = f"{uri}/data/{ds.manifest.fragments[0].files[0].path}"
    pages = [len(c.pages) for c in PylanceFileReader(path).metadata().columns]
    assert pages[1] >= 2 and pages[2] >= 2, pages  # 20 MB of vectors, 18 MB of text
    py = lance.dataset(uri)
    assert py.to_table() == data
    indices = [0, n - 1, 12_345, 16_000, 16_500, 33_000]
    assert py.take(indices) == data.take(indices)
    assert py.count_rows("s IS NULL") == data["s"].null_count


# --------------------------------------------------------------------------------------------
# Tags and versions
# --------------------------------------------------------------------------------------------


def _small(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": [f"r{i}" for i in ids]})


def test_tags_are_shared(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_small(0, 10), uri)
    lance.write_dataset(_small(10, 5), uri, mode="append")
    lance_sql.write_dataset(_small(15, 5), uri, mode="append")
    sql, py = lance_sql.dataset(uri), lance.dataset(uri)

    py.tags.create("from-pylance", 1)
    assert sql.tags.list()["from-pylance"]["version"] == 1
    assert lance_sql.dataset(uri, version="from-pylance").to_table() == _small(0, 10)
    sql.tags.create("from-sql", 2)
    assert lance.dataset(uri).tags.list()["from-sql"]["version"] == 2
    assert lance.dataset(uri, version="from-sql").to_table() == pa.concat_tables(
        [_small(0, 10), _small(10, 5)]
    )
    assert py.tags.get_version("from-sql") == 2
    assert set(lance.dataset(uri).tags.list()) == set(sql.tags.list()) == {"from-pylance",
                                                                          "from-sql"}
    sql.tags.update("from-sql", 3)
    assert lance.dataset(uri).tags.list()["from-sql"]["version"] == 3
    py.tags.update("from-pylance", 2)
    assert sql.tags.get_version("from-pylance") == 2
    py.tags.delete("from-sql")
    assert list(sql.tags.list()) == ["from-pylance"]
    sql.tags.delete("from-pylance")
    assert lance.dataset(uri).tags.list() == {}
    assert [v["version"] for v in sql.versions()] == [v["version"] for v in py.versions()] == [
        1, 2, 3
    ]


# --------------------------------------------------------------------------------------------
# Newer data files, manifest naming
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("file_version", ["2.1", "2.2", None])
def test_pylance_tables_of_each_newer_format_read_and_take_appends(
        tmp_path: Path, file_version: str | None) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_small(0, 10), uri, data_storage_version=file_version)
    named = file_version or "2.2"  # pylance 14's default
    ds = lance_sql.dataset(uri)
    assert ds.data_storage_version == lance.dataset(uri).data_storage_version == named
    assert ds.to_table() == lance.dataset(uri).to_table()
    assert ds.take([3, 1]) == lance.dataset(uri).take([3, 1])
    lance_sql.write_dataset(_small(10, 5), uri, mode="append")
    assert lance.dataset(uri).to_table() == pa.concat_tables([_small(0, 10), _small(10, 5)])
    assert {d.file_minor_version for f in lance.dataset(uri).get_fragments()
            for d in f.data_files()} == {int(named[-1])}  # the table's format is kept


def _manifest_names(uri: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(uri, "_versions")) if n.endswith(".manifest"))


def test_v1_manifest_naming_from_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_small(0, 10), uri, data_storage_version="2.0",
                        enable_v2_manifest_paths=False)
    assert _manifest_names(uri) == ["1.manifest"]
    assert lance_sql.dataset(uri).to_table() == _small(0, 10)
    ds = lance_sql.write_dataset(_small(10, 5), uri, mode="append")
    ds.delete("id = 3")
    assert _manifest_names(uri) == ["1.manifest", "2.manifest", "3.manifest"]
    expected = pa.concat_tables([_small(0, 3), _small(4, 11)])
    assert lance.dataset(uri).to_table() == expected
    assert lance.dataset(uri, version=2).count_rows() == 15


def test_v1_manifest_naming_from_lance_sql(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_small(0, 10), uri, enable_v2_manifest_paths=False)
    assert _manifest_names(uri) == ["1.manifest"]
    py = lance.write_dataset(_small(10, 5), uri, mode="append")
    py.delete("id = 12")
    assert _manifest_names(uri) == ["1.manifest", "2.manifest", "3.manifest"]
    expected = pa.concat_tables([_small(0, 12), _small(13, 2)])
    assert lance_sql.dataset(uri).to_table() == expected
    assert lance_sql.dataset(uri, version=1).to_table() == _small(0, 10)
    assert [v["version"] for v in lance_sql.dataset(uri).versions()] == [1, 2, 3]


def test_v2_manifest_names_match_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_small(0, 10), uri)
    lance.write_dataset(_small(10, 5), uri, mode="append")
    lance_sql.write_dataset(_small(15, 5), uri, mode="append")
    u64 = (1 << 64) - 1
    assert _manifest_names(uri) == sorted(f"{u64 - v:020d}.manifest" for v in (1, 2, 3))
    assert lance.dataset(uri).version == lance_sql.dataset(uri).version == 3


@pytest.mark.parametrize("v2_first", [True, False])
def test_mixed_manifest_naming_is_an_error(tmp_path: Path, v2_first: bool, tables) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_small(0, 10), uri, data_storage_version="2.0",
                        enable_v2_manifest_paths=v2_first)
    lance.write_dataset(_small(10, 5), uri, mode="append")
    u64 = (1 << 64) - 1
    latest, other = (f"{u64 - 2:020d}.manifest", "3.manifest") if v2_first else (
        "2.manifest", f"{u64 - 3:020d}.manifest")
    assert latest in _manifest_names(uri)
    versions = os.path.join(uri, "_versions")
    shutil.copy(os.path.join(versions, latest), os.path.join(versions, other))
    before = tables.snapshot(uri)
    for attempt in (lambda: lance_sql.dataset(uri), lambda: lance_sql.dataset(uri, version=1),
                    lambda: lance_sql.write_dataset(_small(15, 1), uri, mode="append")):
        with pytest.raises(FormatError, match="V1 and V2") as info:
            attempt()
        assert os.path.join(uri, "_versions") in str(info.value)
    assert tables.snapshot(uri) == before


def test_time_travel_by_tag_and_number_agree(py_history: History, tables) -> None:
    """pylance and lance_sql resolve the same tag to the same rows."""
    py = lance.dataset(py_history.uri)
    py.tags.create("interop-v3", 3)
    try:
        got = lance_sql.dataset(py_history.uri, version="interop-v3")
        assert got.version == 3
        tables.assert_equal(got.to_table(), py_history.expected[3], "by tag")
        assert lance_sql.dataset(py_history.uri).checkout_version("interop-v3").version == 3
        counts = pc.sum(pc.equal(got.to_table(columns=["id"])["id"], 5100)).as_py()
        assert counts == 1
    finally:
        py.tags.delete("interop-v3")
