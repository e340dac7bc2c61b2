"""A base table holding a primary key twice (plain appends do not enforce the key): every
lookup takes the newest row, the highest ``_rowaddr`` (a later fragment, or a later row of
one fragment), whether the key index finds the candidates or a reverse scan does; one key
or many, single or composite keys, Python or SQL; newer MemTables and generations still
win over both base rows."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import sources

PK = {"lance-schema:unenforced-primary-key": "true"}


def _schema(composite: bool) -> pa.Schema:
    keys = [pa.field("a", pa.int64(), nullable=False, metadata=PK)]
    if composite:
        keys.append(pa.field("b", pa.int64(), nullable=False, metadata=PK))
    return pa.schema([*keys, pa.field("s", pa.string())])


def _rows(a: list[int] | np.ndarray, tags: list[str], composite: bool) -> pa.Table:
    a = np.asarray(a, np.int64)
    columns = {"a": a, **({"b": a % 7} if composite else {}), "s": tags}
    return pa.table(columns, schema=_schema(composite))


def _build(tmp_path: Path, composite: bool, indexed: bool) -> tuple[MemWal, object, str]:
    """Base: keys 0..1999 ("old"), then appended fragments holding 5 and 7 again
    ("new") and 9 twice in one fragment ("first9" then "second9"); a generation updates 7,
    the MemTable 11."""
    uri = str(tmp_path / "t.lance")
    ids = np.arange(2000)
    lance_sql.write_dataset(_rows(ids, [f"old{i}" for i in ids], composite), uri,
                            max_rows_per_file=1000)
    lance_sql.write_dataset(_rows([5, 7], ["new5", "new7"], composite), uri, mode="append")
    lance_sql.write_dataset(_rows([9, 3000, 9], ["first9", "x", "second9"], composite), uri,
                            mode="append")
    lance_sql.write_dataset(_rows([11], ["new11"], composite), uri, mode="append")
    if indexed:
        lance_sql.dataset(uri).create_scalar_index("a", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), None, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer(region=uuid.uuid4())
    writer.put(_rows([7], ["gen7"], composite))
    writer.flush_memtable()
    writer.put(_rows([11], ["mem11"], composite))
    return mw, writer, uri


EXPECTED = {5: "new5", 7: "gen7", 9: "second9", 11: "mem11", 3: "old3", 1500: "old1500"}


@pytest.mark.parametrize("composite", [False, True], ids=["single", "composite"])
@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "scanned"])
def test_lookups_take_the_newest_base_row(tmp_path: Path, composite: bool,
                                          indexed: bool) -> None:
    mw, writer, uri = _build(tmp_path, composite, indexed)
    try:
        before = (sources.COMPOSITE_BY_INDEX[0], sources.KEYS_FROM_INDEX[0])

        def query(keys: list[int]) -> dict:
            a = np.array(keys, np.int64)
            return {"a": a, "b": a % 7} if composite else {"a": a}

        for k, tag in EXPECTED.items():  # one key (the one-key path)
            assert mw.get(query([k]))["s"].to_pylist() == [tag], k
        asked = [9, 5, 1500, 7, 9, 11, 3, 424242]  # many keys, one asked twice, one absent
        got = mw.get(query(asked))
        assert got["s"].to_pylist() == [EXPECTED[k] for k in asked if k in EXPECTED]
        assert mw.get(query([9, 1500]))["s"].to_pylist() == ["second9", "old1500"]
        if indexed and composite:  # the candidates came from the index on "a"
            assert sources.COMPOSITE_BY_INDEX[0] > before[0]
        elif indexed:
            assert sources.KEYS_FROM_INDEX[0] > before[1]
        session = lance_sql.connect(Path(uri).parent)
        for k, tag in EXPECTED.items():
            where = f"a = {k}" + (f" AND b = {k % 7}" if composite else "")
            table = session.sql(f"SELECT s FROM t WHERE {where}").to_arrow_table()
            assert table["s"].to_pylist() == [tag], where
        if not composite:
            table = session.sql("SELECT a, s FROM t WHERE a IN (5, 7, 9, 11, 3, 1500) "
                                "ORDER BY a").to_arrow_table()
            assert table["s"].to_pylist() == [EXPECTED[k] for k in sorted(EXPECTED)]
    finally:
        writer.close()
