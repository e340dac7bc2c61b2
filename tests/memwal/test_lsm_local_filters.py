"""Filters whose conjuncts mix a source's own columns (``_gen``, ``_region``, ``_rowid``)
with data columns: each source applies such a conjunct to its rows itself, so it must
read the data columns it names even when the query outputs none of them. It read only
the output's columns, and ``_gen < 0 OR v > 'second'`` failed: column 'v' not found."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from lsm_split_helpers import lsm_table
from test_lsm_split import _read

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.read.split import plan_split

FILTERS = ["_gen > 0 OR v = 'base12'", "NOT (_gen < 0 OR g = 0)",
           "_region IS NULL OR v LIKE 'third%'", "_rowid < 3 OR v = 'second5'",
           "(_gen = 2 OR g = 1) AND id < 60"]


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.mark.parametrize("where", FILTERS)
def test_every_read_path_reads_the_columns_its_filter_names(tmp_path: Path, where: str
                                                            ) -> None:
    mw = lsm_table(tmp_path / "t.lance", RegionSpec.bucket("id", 3))
    # the rows the filter keeps, read with every column (the filter's columns among them)
    everything = mw.scanner(["id", "g", "v", "_gen", "_region", "_rowid"]).to_table()
    expected = _ids(mw.scanner(["id", "g", "v", "_gen", "_region", "_rowid"],
                               filter=where).to_table())
    assert expected and len(expected) < everything.num_rows  # (the filter selects)
    assert _ids(mw.scanner(["id"], filter=where).to_table()) == expected
    session = lance_sql.connect(str(tmp_path))
    assert _ids(session.sql(f"SELECT id FROM t WHERE {where}").to_arrow_table()) == expected
    counted = session.sql(f"SELECT count(*) AS n FROM t WHERE {where}").to_pylist()
    assert counted == [{"n": len(expected)}]
    if "_gen" in where or "_region" in where:
        return  # (the split reads of Spark have no _gen or _region)
    view = mw.view()
    parts = _read(view, plan_split(view, where), ["id"], where)
    assert sorted(i for t in parts for i in t.column("id").to_pylist()) == expected


def test_a_search_reads_the_columns_its_filter_names(tmp_path: Path) -> None:
    key = pa.field("id", pa.int64(), nullable=False,
                   metadata={"lance-schema:unenforced-primary-key": "true"})
    schema = pa.schema([key, pa.field("v", pa.int64()),
                        pa.field("vec", pa.list_(pa.float32(), 2))])

    def rows(ids: list[int], values: list[int]) -> pa.Table:
        vectors = pa.array([[float(i), 0.0] for i in ids], schema.field("vec").type)
        return pa.table({"id": ids, "v": values, "vec": vectors}, schema=schema)

    ds = lance_sql.write_dataset(rows([1, 2, 3], [10, 95, 50]), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as writer:
        writer.put(rows([2, 4], [5, 99]))
        writer.flush_memtable()
    found = mw.nearest("vec", [0.0, 0.0], 10, columns=["id"], filter="_gen < 0 OR v > 90")
    assert _ids(found) == [1, 3, 4]  # (2's newest row, v = 5, is in generation 1)
