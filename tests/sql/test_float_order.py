"""Filters on float columns holding NaN keep the rows SQL keeps: DataFusion orders NaN
above every number and equal to itself, so ``v > 74.0`` keeps NaN rows. Our scans
evaluate pushed comparisons themselves (as masks); they must agree with DataFusion over
the same values, and the Python API with pylance."""

from __future__ import annotations

from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

VALUES = [1.0, float("nan"), 80.0, -0.0, None, float("nan"), 3.0, float("inf"), 0.0]
FILTERS = ["v > 74.0", "v >= 80.0", "v < 5", "v <= 0.0", "v = 0.0", "v != 1.0",
           "v > 74.0 AND id > 1", "v = 'NaN'::double", "v < 'NaN'::double",
           "v BETWEEN 2.0 AND 100.0",
           # shapes scans hand to pyarrow's engine rather than evaluating as masks
           "v > 74.0 OR id = 0", "v NOT BETWEEN 0 AND 50", "v IN (1.0, 80.0) OR v > 100",
           "NOT (v <= 74.0)", "v > 74.0 OR s = 'a'", "v + 1 > 75", "coalesce(v, 0) > 74"]


def _table() -> pa.Table:
    n = len(VALUES) * 50
    return pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "v": pa.array(VALUES * 50, pa.float64()),
                     "s": pa.array(["a", "b", "c"] * (n // 3))})


@pytest.mark.parametrize("flt", FILTERS)
def test_sql_float_filters_match_datafusion(tmp_path: Path, flt: str) -> None:
    table = _table()
    lance_sql.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=120)
    session = lance_sql.LanceSession()
    session.register("t", tmp_path / "t.lance")
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("m", [table.to_batches()])
    query = "SELECT id FROM {} WHERE " + flt + " ORDER BY id"
    ours = session.sql(query.format("t")).to_arrow_table().column(0).to_pylist()
    want = ctx.sql(query.format("m")).to_arrow_table().column(0).to_pylist()
    assert ours == want
    assert want, "each filter keeps some rows"


@pytest.mark.parametrize("flt", [f for f in FILTERS if "::" not in f and "coalesce" not in f])
def test_python_float_filters_match_pylance(tmp_path: Path, flt: str) -> None:
    lance = pytest.importorskip("lance")
    table = _table()
    lance.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=120)
    ours = lance_sql.dataset(tmp_path / "t.lance").to_table(filter=flt)
    theirs = lance.dataset(str(tmp_path / "t.lance")).to_table(filter=flt)
    assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()


def test_lsm_and_change_feed_sql_filters_match_datafusion(tmp_path: Path) -> None:
    """The same through an LSM view (MemWAL table) and a change feed: each filtered
    query equals DataFusion filtering the unfiltered result."""
    root = tmp_path / "lsm.lance"
    pk = {"lance-schema:unenforced-primary-key": "true"}
    table = _table()
    table = table.cast(table.schema.set(0, table.schema.field("id").with_nullable(False)
                                        .with_metadata(pk)))
    lance_sql.write_dataset(table.slice(0, 300), root, max_rows_per_file=120,
                            enable_stable_row_ids=True)
    lance_sql.write_dataset(table.slice(300, 50), root, mode="append")
    mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    writer.put(table.slice(350, 60))
    writer.flush_memtable()
    try:
        session = lance_sql.LanceSession()
        session.register("t", root)
        for source in ["t", "table_changes('t', 1, 2)"]:
            everything = session.sql(f"SELECT * FROM {source}").to_arrow_table()
            ctx = datafusion.SessionContext()
            ctx.register_record_batches("m", [everything.to_batches()])
            for flt in FILTERS:
                query = "SELECT id FROM {} WHERE " + flt + " ORDER BY id"
                ours = session.sql(query.format(source)).to_arrow_table()
                want = ctx.sql(query.format("m")).to_arrow_table()
                assert ours.column(0).to_pylist() == want.column(0).to_pylist(), (source, flt)
    finally:
        for w in writer.writers:
            w.abort()


@pytest.mark.parametrize("where", ["h > 3", "h BETWEEN 1 AND 4", "h = 1", "h IN (1, 80)",
                                   "h > 3.5", "h < 'NaN'::double"])
def test_half_float_columns_compare_with_integer_literals(tmp_path: Path, where: str) -> None:
    """DataFusion types the literal of ``h > 3`` as a half float too, which Arrow cannot
    compare: the pushed filter failed (InvalidInputError) where DataFusion answers."""
    values = pa.array(np.array(VALUES, dtype=np.float16), pa.float16(), from_pandas=False)
    table = pa.table({"id": pa.array(range(len(VALUES)), pa.int64()), "h": values})
    lance_sql.write_dataset(table, str(tmp_path / "t.lance"))
    got = lance_sql.connect(str(tmp_path)).sql(f"SELECT id FROM t WHERE {where} ORDER BY id")
    engine = datafusion.SessionContext()
    engine.register_record_batches("m", [table.to_batches()])
    expected = engine.sql(f"SELECT id FROM m WHERE {where} ORDER BY id").to_arrow_table()
    assert got.to_arrow_table().column("id").to_pylist() == \
        expected.column("id").to_pylist()
