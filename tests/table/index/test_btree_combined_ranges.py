"""AND / OR / NOT of one indexed column's comparisons, answered by asking the BTREE index
for the keys the whole tree selects: rows equal to an unindexed scan's and pylance's, and
the index hands back no more rows than match (a wide half of an ANDed pair is never
looked up on its own)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.index import btree as btree_mod

N = 3000
SORT = [("payload", "ascending")]


def _table() -> pa.Table:
    i = np.arange(N)
    nulls = i % 11 == 0
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    f = np.where(i % 17 == 0, np.nan, (i % 300) / 4 - 10)
    f = np.where(i % 19 == 0, -0.0, f)
    return pa.table({
        "i64": pa.array(i[::-1] * 3, pa.int64(), mask=nulls),
        "f64": pa.array(f, pa.float64(), mask=nulls),
        "s": pa.array([f"k{v % 400:04d}" for v in i], pa.string(), mask=nulls),
        "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(v % 900)) for v in i],
                      pa.date32(), mask=nulls),
        "ts": pa.array([base + dt.timedelta(minutes=int(v % 1000)) for v in i],
                       pa.timestamp("us", "UTC"), mask=nulls),
        "payload": pa.array([f"row-{v}" for v in i]),
    })


FILTERS = {
    "i64": ["i64 >= 100 AND i64 < 400 OR i64 > 8700",
            "(i64 < 300 OR i64 > 8000) AND i64 != 150 AND NOT (i64 BETWEEN 8100 AND 8200)",
            "NOT (i64 >= 30) AND i64 > 3",
            "i64 IN (3, 6, 9, 900) AND i64 > 5 OR i64 BETWEEN 9 AND 30",
            "NOT (i64 IN (3, 6) OR i64 > 30)",
            "i64 > 100 AND i64 < 50",
            "i64 NOT IN (3, NULL) AND i64 < 60",
            "i64 IS NOT NULL AND i64 < 20",
            "NOT (i64 IS NULL) AND i64 <= 12 OR i64 IS NULL AND i64 > 5",
            "NOT (i64 NOT BETWEEN 10 AND 40)",
            "i64 >= 8950 OR i64 <= 8960 AND i64 > 8900"],
    "f64": ["f64 > 64.0 OR f64 < -9.5",
            "NOT (f64 <= 64.5) AND f64 != 64.75",
            "f64 >= 0.0 AND f64 <= 0.0",
            "f64 BETWEEN -0.5 AND 0.25 OR f64 IN (3.0, 4.0) AND f64 > 3.5"],
    "s": ["s >= 'k0100' AND s < 'k0103' OR s > 'k0398'",
          "NOT (s < 'k0398') AND s != 'k0399'",
          "s IN ('k0001', 'k0002', 'k0390') AND s > 'k0001' OR s BETWEEN 'k0200' AND 'k0201'"],
    "d": ["d >= DATE '2020-01-05' AND d < DATE '2020-01-08' OR d > DATE '2022-06-15'",
          "NOT (d > DATE '2020-01-04') AND d != DATE '2020-01-02'"],
    "ts": ["ts < TIMESTAMP '2024-01-01 00:02:00+00:00' OR "
           "ts >= TIMESTAMP '2024-01-01 10:00:00+00:00' AND "
           "ts < TIMESTAMP '2024-01-01 10:03:00+00:00'"],
}


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (floats compared as their text)."""
    def text(t: pa.Table) -> pa.Table:
        return pa.table({n: c.cast(pa.string()) if pa.types.is_floating(c.type) else c
                         for n, c in zip(t.column_names, t.columns, strict=True)})
    return a.schema.equals(b.schema) and text(a).equals(text(b))


@pytest.fixture(scope="module")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranges") / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    for key in FILTERS:
        ds.create_scalar_index(key, "BTREE")
    return path


@pytest.mark.parametrize("key", sorted(FILTERS))
def test_combined_ranges_through_the_index(table_path: Path, key: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    found: list[int] = []
    original = btree_mod.BTreeIndex.search

    def counting(self: btree_mod.BTreeIndex, query: object) -> np.ndarray:
        ids = original(self, query)  # type: ignore[arg-type]
        found.append(len(ids))
        return ids

    monkeypatch.setattr(btree_mod.BTreeIndex, "search", counting)
    ds = lance_sql.dataset(table_path)
    theirs = lance.dataset(str(table_path))
    for flt in FILTERS[key]:
        found.clear()
        scanner = ds.scanner(filter=flt, use_scalar_index=True)
        plan = scanner.explain_plan()
        assert "ScalarIndexQuery" in plan and f"@{key}_idx" in plan, (flt, plan)
        got = scanner.to_table()
        assert "refine" not in plan, plan  # the index answered the whole filter...
        assert sum(found) == got.num_rows, (flt, found)  # ...and found just those rows
        assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
        assert _same(got.sort_by(SORT), theirs.to_table(filter=flt).sort_by(SORT)), flt


def test_sql_asks_the_index_for_the_combined_ranges(table_path: Path) -> None:
    session = lance_sql.connect(table_path.parent)
    theirs = lance.dataset(str(table_path))
    asked = {"i64 >= 100 AND i64 < 400 OR i64 > 8700": "(i64 >= 100 AND i64 < 400)@",
             "NOT (i64 >= 30) AND i64 > 3": "(i64 > 3 AND i64 < 30)@",
             "s >= 'k0100' AND s < 'k0103' OR s > 'k0398'": "(s >= 'k0100' AND s < 'k0103')@"}
    for flt, searched in asked.items():
        sql = f"SELECT payload FROM t WHERE {flt} ORDER BY payload"
        plan = session.explain(sql)
        # one search of the narrow range, not of its wide halves apart
        assert "ScalarIndexQuery" in plan and searched in plan, plan
        got = session.sql(sql).to_arrow_table()["payload"].to_pylist()
        assert got == sorted(theirs.to_table(filter=flt)["payload"].to_pylist()), flt


def test_negations_reading_the_whole_index_scan_instead(tmp_path: Path) -> None:
    """``k != 5`` or ``NOT (k < 100)`` select nearly every row: their ranges read every
    page of the index, so the table is scanned instead (unless the index is asked for),
    however few the pages."""
    path = tmp_path / "t.lance"
    keys = np.random.default_rng(5).permutation(20_000)
    ds = lance_sql.write_dataset(pa.table({"k": keys, "v": keys * 2}), path)
    ds.create_scalar_index("k", "BTREE")  # 5 pages
    for flt in ("k != 5", "NOT (k < 100)", "k IS NOT NULL AND k NOT IN (1, 2)"):
        plan = ds.scanner(filter=flt).explain_plan()
        assert "not used: up to" in plan, plan
        forced = ds.scanner(filter=flt, use_scalar_index=True)
        assert "indexed 1 of 1 fragments" in forced.explain_plan()
        expected = ds.to_table(filter=flt, use_scalar_index=False)
        assert forced.to_table().sort_by("k").equals(expected.sort_by("k"))
        assert ds.to_table(filter=flt).sort_by("k").equals(expected.sort_by("k"))
    narrow = ds.scanner(filter="NOT (k >= 100) AND k != 5")
    assert "indexed 1 of 1 fragments, 99 rows" in narrow.explain_plan()
