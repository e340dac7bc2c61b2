"""A base table holding a primary key twice (plain appends do not enforce the key): every
lookup takes the newest row, the last in the table's order (a fragment listed later in the
manifest, or a later row of one fragment; after a compaction the rewritten old rows sit in a
fragment of a higher id but keep their place), whether the key index finds the candidates
or a reverse scan does; one key or many, single or composite keys, Python or SQL; newer
MemTables and generations still win over both base rows."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
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
        # many keys (more than are looked up one by one), one asked twice, two absent
        asked = [9, 5, 1500, 7, 9, 11, 3, 424242, 424243]
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


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "scanned"])
def test_after_a_compaction_the_newest_row_is_the_last_in_table_order(
        tmp_path: Path, indexed: bool) -> None:
    """Compaction rewrites fragments 0 and 1 (holding "old1") into fragment 3, listed first:
    the highest ``_rowaddr`` is then the older row. One key and many keys, through the
    index or a reverse scan, agree on "new1" (they differed: by address or by place)."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows([1, 2], ["old1", "old2"], False), uri)
    lance_sql.write_dataset(_rows([3], ["x3"], False), uri, mode="append")
    later = [1, *range(10, 3000)]
    lance_sql.write_dataset(_rows(later, ["new1", *(f"y{i}" for i in later[1:])], False),
                            uri, mode="append")
    lance_sql.dataset(uri).compact_files(target_rows_per_fragment=1000)
    ds = lance_sql.dataset(uri)
    assert [f.id for f in ds.manifest.fragments] == [3, 2]
    if indexed:
        ds.create_scalar_index("a", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("a", 2))
    assert mw.get(pa.table({"a": [1]}), ["a", "s"])["s"].to_pylist() == ["new1"]
    assert mw.get(pa.table({"a": [2, 1, 3]}), ["a", "s"])["s"].to_pylist() == \
        ["old2", "new1", "x3"]
    session = lance_sql.connect(tmp_path)
    for where in ("a = 1", "a IN (1, 2)"):
        got = session.sql(f"SELECT s FROM t WHERE {where} ORDER BY a").to_arrow_table()
        assert got["s"].to_pylist()[0] == "new1", where
