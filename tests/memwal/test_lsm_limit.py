"""A limited LSM scan (``mw.scanner(limit=)``, SQL ``LIMIT`` on a MemWAL table) still
decides the winners first (newest row wins, hidden base rows left out), and reads the
base table in growing row ranges, so it stops soon after the rows it hands out: its rows
are the unlimited scan's first ones."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.table.files.reader import FragmentReader

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("cat", pa.int32()), pa.field("s", pa.string())])
BASE_ROWS = 120_000
PER_FILE = 60_000
_names = itertools.count()


def rows(ids, tag: str) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": ids, "cat": pa.array((ids % 7).astype(np.int32)),
                     "s": pa.array([f"{tag}-{i}" for i in ids.tolist()])}, schema=SCHEMA)


@pytest.fixture(params=[False, True], ids=["no-index", "key-index"])
def lsm(request):
    """A base of two fragments with deletions, a flushed generation and a MemTable that
    update and delete keys at the head of the base (hidden base rows) and add new keys."""
    name = f"lsm-limit{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    ds = lance_sql.write_dataset(rows(np.arange(BASE_ROWS), "base"), uri,
                                 max_rows_per_file=PER_FILE)
    ds.delete("id % 13 = 0 OR id = 1")
    if request.param:
        ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(rows([*range(0, 40, 3), *range(60_000, 60_020), 170_000], "g1"))
    writer.delete(pa.table({"id": pa.array([4, 8, 60_005], pa.int64())}))
    writer.flush_memtable()
    writer.put(rows([*range(2, 30, 5), 170_001], "mt"))
    yield mw, uri
    writer.close()


@pytest.mark.parametrize("filter", [None, "cat = 3", "id > 59990"])
def test_limited_lsm_scan_is_the_first_rows_of_the_unlimited_one(lsm, filter) -> None:
    mw, _ = lsm
    for columns in (None, ["s", "id"], ["cat"]):
        whole = mw.scanner(columns=columns, filter=filter).to_table()
        for limit in (0, 1, 7, 10, 500, 30_000, whole.num_rows, whole.num_rows + 3):
            got = mw.scanner(columns=columns, filter=filter, limit=limit).to_table()
            assert got.equals(whole.slice(0, min(limit, whole.num_rows))), (columns, limit)


def _base_reads(monkeypatch, base_uri: str) -> list[int]:
    """Rows of each ranged read of the base table's columns."""
    calls: list[int] = []
    original = FragmentReader.read

    def read(reader: FragmentReader, fields, *, offset: int = 0, length: int | None = None):
        if reader.store.uri == base_uri:
            calls.append(reader.fragment.physical_rows - offset if length is None else length)
        return original(reader, fields, offset=offset, length=length)

    monkeypatch.setattr(FragmentReader, "read", read)
    return calls


def test_limited_lsm_scan_reads_the_base_in_small_steps(lsm, monkeypatch) -> None:
    mw, uri = lsm
    want = mw.scanner().to_table().slice(0, 10)
    # 0, 3, 6, 9 (g1) and 2, 7, 12 (MemTable) are newer; 1, 4, 8, 13 deleted
    assert want.column("id").to_pylist()[:4] == [5, 10, 11, 14]
    reads = _base_reads(monkeypatch, mw.dataset.store.uri)
    got = mw.scanner(limit=10).to_table()
    assert got.equals(want)
    # not a whole fragment, nor 8k rows: without a filter about every row read is kept,
    # so the first range is sized by the limit (twice the rows, at least 1024)
    assert reads and max(reads) <= 1024
    reads.clear()
    session = lance_sql.connect()
    session.register("t", uri)
    sql = session.sql("SELECT id, cat, s FROM t LIMIT 10").to_arrow_table()
    assert sql.equals(want.select(sql.column_names).cast(sql.schema))
    assert reads and max(reads) <= 1024


def _newer_scans(monkeypatch) -> list[str]:
    """The labels of the newer sources (generations, MemTables) a plan scans."""
    from lance_sql.memwal.read import nodes

    seen: list[str] = []
    original = nodes.ScanExec.execute

    def execute(self, *args, **kwargs):
        if not self.source.is_base:
            seen.append(self.source.label)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(nodes.ScanExec, "execute", execute)
    return seen


@pytest.mark.parametrize("filter", [None, "cat = 3"])
def test_a_limit_the_base_fills_reads_no_newer_source(lsm, monkeypatch, filter) -> None:
    """The newer sources' rows come after the base's: a limit the base's rows fill never
    scans them (they were read ahead, in a thread, for nobody); one past the base's rows
    does, and both are the unlimited scan's first rows."""
    mw, uri = lsm
    whole = mw.scanner(filter=filter).to_table()
    seen = _newer_scans(monkeypatch)
    got = mw.scanner(filter=filter, limit=10).to_table()
    assert got.equals(whole.slice(0, 10))
    assert seen == []
    session = lance_sql.connect()
    session.register("t", uri)
    where = f" WHERE {filter}" if filter else ""
    sql = session.sql(f"SELECT id, cat, s FROM t{where} LIMIT 10").to_arrow_table()
    assert sql.equals(whole.slice(0, 10).cast(sql.schema))
    assert seen == []
    got = mw.scanner(filter=filter, limit=whole.num_rows).to_table()
    assert got.equals(whole)
    assert seen  # the last rows are the newer sources'


def test_a_rare_filter_reads_the_base_without_ranges_ahead(lsm, monkeypatch) -> None:
    """The limit sizes the base's ranges (as a hint: the winners may drop rows): once rows
    matched, the next range is sized by their rate and read alone, not 16k + 32k + ...
    rows ahead in a pool."""
    mw, _ = lsm
    rare = "s LIKE '%007'"  # one base row in 1000 (7 hidden by the MemTable, 7007 deleted)
    whole = mw.scanner(filter=rare).to_table()
    reads = _base_reads(monkeypatch, mw.dataset.store.uri)
    got = mw.scanner(filter=rare, limit=10).to_table()
    assert got.equals(whole.slice(0, 10))
    assert got.column("id").to_pylist()[:3] == [1007, 2007, 3007]
    assert sum(reads) <= 2 * 8192
