"""SQL over a MemWAL table through the catalog's warm strong view, and lookups whose filter
is exactly the key pins (not applied a second time).

The warm view is only a shortcut: a put, a MemTable flush, a merge, a delete or a new
region between two queries of one session must show in the next query, and the base
table is opened again only when a commit made a new version.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.expr import Call, Column, Literal, parse_predicate
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read.planner import LsmView
from lance_sql.sql import catalog as catalog_module
from lance_sql.sql.lsm_provider import _lookup_keys
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("s", pa.string())])


def rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids), "s": [f"s{i}-{v}" for i in ids]},
                    schema=SCHEMA)


def lookup(session, key: int) -> list[dict]:
    return session.sql(f"SELECT id, v, s FROM t WHERE id = {key}").to_arrow_table().to_pylist()


def every(session) -> dict[int, int]:
    got = session.sql("SELECT id, v FROM t").to_arrow_table()
    return dict(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True))


@pytest.fixture
def counted_opens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions the catalog opens the base table at (a cold LSM view each)."""
    opened: list[int] = []
    real = catalog_module.dataset

    def counting(uri, version=None, **kwargs):
        opened.append(version)
        return real(uri, version, **kwargs)

    monkeypatch.setattr(catalog_module, "dataset", counting)
    return opened


def test_a_warm_view_sees_puts_flushes_merges_and_new_regions(tmp_path: Path,
                                                             counted_opens: list[int]) -> None:
    ds = lance_sql.write_dataset(rows(list(range(10)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 4), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    model = dict.fromkeys(range(10), 0)
    session = connect(tmp_path)
    with mw.writer() as w:
        assert every(session) == model
        assert len(counted_opens) == 1
        for step in range(1, 4):  # no commit between queries: the base is not re-opened
            assert lookup(session, step) == [{"id": step, "v": 0, "s": f"s{step}-0"}]
        assert len(counted_opens) == 1

        w.put(rows([2, 20], 1))  # into a MemTable (20: a region not seen before)
        model.update({2: 1, 20: 1})
        assert lookup(session, 2) == [{"id": 2, "v": 1, "s": "s2-1"}]
        assert lookup(session, 20) == [{"id": 20, "v": 1, "s": "s20-1"}]
        assert every(session) == model

        w.flush_memtable()  # a flushed generation in the region manifests
        w.put(rows([3], 2))
        model[3] = 2
        assert lookup(session, 2) == [{"id": 2, "v": 1, "s": "s2-1"}]
        assert lookup(session, 3) == [{"id": 3, "v": 2, "s": "s3-2"}]
        assert every(session) == model
        assert len(counted_opens) == 1  # MemTables and regions only: still warm

        w.delete(pa.table({"id": pa.array([4], pa.int64())}))
        del model[4]
        assert lookup(session, 4) == []
        assert every(session) == model

        w.flush_memtable()
        assert mw.merge()  # a new base version: opened once, then warm again
        assert lookup(session, 3) == [{"id": 3, "v": 2, "s": "s3-2"}]
        assert lookup(session, 4) == []
        assert len(counted_opens) == 2
        assert every(session) == model
        w.put(rows([5, 40], 3))
        model.update({5: 3, 40: 3})
        assert lookup(session, 5) == [{"id": 5, "v": 3, "s": "s5-3"}]
        assert lookup(session, 40) == [{"id": 40, "v": 3, "s": "s40-3"}]
        assert every(session) == model
        assert len(counted_opens) == 2
    # snapshot and time-travel reads never use the warm view
    snapshot = connect(tmp_path, consistency="snapshot")
    assert lookup(snapshot, 40) == []  # a MemTable row: not in the index snapshot
    assert len(counted_opens) == 3


def test_two_sessions_keep_their_own_warm_views(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(rows([1, 2], 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    first, second = connect(tmp_path), connect(tmp_path)
    assert lookup(first, 1) == lookup(second, 1) == [{"id": 1, "v": 0, "s": "s1-0"}]
    with mw.writer() as w:
        w.put(rows([1], 5))
        assert lookup(first, 1) == lookup(second, 1) == [{"id": 1, "v": 5, "s": "s1-5"}]
        w.flush_memtable()
        assert mw.merge()
        w.put(rows([1], 6))
        assert lookup(second, 1) == lookup(first, 1) == [{"id": 1, "v": 6, "s": "s1-6"}]


def _view(tmp_path: Path, key_type: pa.DataType) -> LsmView:
    schema = pa.schema([pa.field("id", key_type, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    ids = pa.array(["1", "2"] if pa.types.is_string(key_type) else [1, 2], key_type)
    ds = lance_sql.write_dataset(pa.table({"id": ids, "v": [0, 0]}, schema=schema),
                                 tmp_path / "k.lance")
    MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                      max_wal_flush_interval_ms=3_600_000)
    return LsmView(lance_sql.dataset(tmp_path / "k.lance"), consistency="snapshot")


@pytest.mark.parametrize(("text", "exact"), [
    ("id = 5", True),
    ("id IN (1, 2, 3)", True),
    ("id = 1 OR id = 2", True),
    ("id = 1 AND v > 0", False),   # another condition: applied to the lookup's rows
    ("id = 1 AND id = 2", False),  # only the first pin is the lookup's
    ("v > 0 AND id = 1", False),
])
def test_a_filter_of_only_key_pins_is_exact(tmp_path: Path, text: str, exact: bool) -> None:
    found = _lookup_keys(parse_predicate(text), _view(tmp_path, pa.int64()))
    assert found is not None
    assert found[1] is exact


def test_literals_the_key_type_changes_are_not_exact(tmp_path: Path) -> None:
    floats = _view(tmp_path, pa.float64())
    # a float key is never looked up: SQL's = is IEEE's (-0.0 = 0.0, NaN = nothing), a
    # lookup matches the key's bits; the scan answers
    for value in (1.5, -0.0, float("nan")):
        assert _lookup_keys(Call("=", (Column(("id",)), Literal(value))), floats) is None
    strings = _view(tmp_path / "s", pa.string())
    raw = Call("=", (Column(("id",)), Literal(b"1")))  # bytes: not the string '1' exactly
    found = _lookup_keys(raw, strings)
    assert found is None or found[1] is False


def test_lookup_results_equal_the_scan_for_edge_filters(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(rows(list(range(6)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 3), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    session = connect(tmp_path)
    with mw.writer() as w:
        w.put(rows([1, 7], 4))
        w.delete(pa.table({"id": pa.array([2], pa.int64())}))
        for where in ("id = 1", "id = 1.0", "id IN (1, 2, 7, NULL)", "id = 2",
                      "id = 1 AND id = 7", "id = 1 AND v > 3", "id = 1 AND v > 4",
                      "id = 1 OR id = 3", "(id = 1 OR id = 3) AND s LIKE 's1%'"):
            looked = session.sql(f"SELECT id, v, s FROM t WHERE {where} ORDER BY id")
            # DataFusion casts for 1.0, keeps NULL in the IN and folds id = 1 AND id = 7
            # to false: those three scan
            if not any(m in where for m in ("1.0", "NULL", "id = 7")):
                assert "LsmPointLookup" in session.explain(f"SELECT v FROM t WHERE {where}")
            scanned = session.sql(f"SELECT id, v, s FROM t WHERE ({where}) AND id + 0 = id "
                                  "ORDER BY id")
            assert looked.to_arrow_table() == scanned.to_arrow_table(), where
            counted = session.sql(f"SELECT count(*) AS n, max(s) AS m FROM t WHERE {where}")
            want = session.sql(f"SELECT count(*) AS n, max(s) AS m FROM t "
                               f"WHERE ({where}) AND id + 0 = id")
            assert counted.to_arrow_table() == want.to_arrow_table(), where


def test_the_kept_warm_view_holds_no_reads_memtables(tmp_path: Path) -> None:
    """Reads run on fresh copies of the kept view, the first read too: the view kept
    warm between queries holds no MemTables (a closed writer's would stay in memory)."""
    ds = lance_sql.write_dataset(rows(list(range(10)), 0), tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 1), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(rows([1, 2], 5))
    session = connect(tmp_path)
    assert every(session)[1] == 5
    warm = session.schema_provider._warm[str(tmp_path / "t.lance")]
    kept = warm._keyed[1]
    assert isinstance(kept, LsmView)
    assert kept.moment.memtables == {} and kept.moment.listed is None
    writer.close()
