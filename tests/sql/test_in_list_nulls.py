"""IN lists DataFusion pushes into scans answer NULL for a NULL value, as SQL's IN does:
under a NOT the row is dropped, as DataFusion over the same rows in memory drops it
(pyarrow's is_in, which DataFusion pushes, answers FALSE there, and NOT FALSE kept it)."""

from __future__ import annotations

from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
ROWS = pa.table({"id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
                 "x": pa.array([None, 1, 5, None, 7, 2], pa.int32()),
                 "s": pa.array([None, "a", "b", "c", "d", None], pa.string())},
                schema=pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                                  pa.field("x", pa.int32()), pa.field("s", pa.string())]))
QUERIES = [
    "SELECT id FROM {t} WHERE NOT (x IN (1, 2, 3, 4) AND s <> 'zz')",
    "SELECT id FROM {t} WHERE NOT (s IN ('a', 'x', 'y', 'z') OR x > 6)",
    "SELECT id FROM {t} WHERE x NOT IN (1, 2, 3, 4)",
    "SELECT id FROM {t} WHERE NOT (x IN (1, 2, 3, 4))",
    "SELECT id FROM {t} WHERE (x IN (1, 2, 3, 4)) IS NOT TRUE",
    "SELECT id FROM {t} WHERE (x IN (1, 2, 3, 4)) IS NULL",
    "SELECT id FROM {t} WHERE x NOT IN (1, 2, 3, 4, NULL)",
    "SELECT count(*) AS n FROM {t} WHERE NOT (x IN (5, 6, 7, 8) AND id > 0)",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inlists")
    lance_sql.write_dataset(ROWS, str(root / "plain"))
    base = lance_sql.write_dataset(ROWS.slice(0, 3), str(root / "lsm"))
    mw = base.initialize_mem_wal(RegionSpec.bucket("id", 2))
    with mw.writer() as w:
        w.put(ROWS.slice(3))
        w.flush_memtable()
    return root


@pytest.mark.parametrize("query", QUERIES)
def test_pushed_in_lists_keep_sqls_nulls(root: Path, query: str) -> None:
    memory = datafusion.SessionContext()
    memory.register_record_batches("t", [ROWS.to_batches()])
    want = sorted(map(str, memory.sql(query.format(t="t")).to_arrow_table().to_pylist()))
    session = lance_sql.connect(str(root))
    for table in ("plain", "lsm"):
        got = session.sql(query.format(t=table)).to_arrow_table().to_pylist()
        assert sorted(map(str, got)) == want, table


def test_in_lists_under_and_or_alone_filter_as_pushed() -> None:
    """Only an IN list whose FALSE and NULL could differ is made again (a NOT above it):
    a 100,000-value IN under AND filters as DataFusion pushed it, in every partition."""
    import pyarrow.compute as pc

    from lance_sql.sql.pyarrow_filter import decode, rows_filter

    schema = pa.schema([pa.field("i", pa.int64()), pa.field("s", pa.string())])
    plain = pc.field("i").isin(list(range(100_000))) & (pc.field("s") != "x")
    assert rows_filter(plain, decode(plain), schema) is plain
    negated = ~pc.field("i").isin([1, 2, 3, 4])
    assert rows_filter(negated, decode(negated), schema) is not negated
