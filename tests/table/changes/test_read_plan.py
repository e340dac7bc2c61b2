"""The change feed's read plan kept with a version's cached change plan.

A repeated query of one whole version reuses how its values are read (fragment groups,
offsets, row order) and its metadata columns; the result must be exactly what a freshly
planned read gives, and what the general (pruned, uncached) path gives for the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.changes import feed
from lance_sql.table.changes.feed import table_changes


def _data(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    x = pa.array(ids * 0.5, pa.float64(), mask=ids % 7 == 0)
    s = pa.array([None if i % 5 == 0 else f"s{i}" for i in ids.tolist()], pa.string())
    return pa.table({"id": ids, "x": x, "s": s})


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """Versions: create (4 fragments), append, 10% update of x, delete, compaction,
    an update of s over several fragments."""
    path = tmp_path_factory.mktemp("read_plan") / "t.lance"
    lance_sql.write_dataset(_data(0, 2000), path, max_rows_per_file=500,
                            enable_stable_row_ids=True)
    lance_sql.write_dataset(_data(2000, 300), path, mode="append")
    lance_sql.dataset(path).update({"x": "x + 1"}, where="id % 10 = 3")
    lance_sql.dataset(path).delete("id % 13 = 0 OR (id > 400 AND id < 450)")
    lance_sql.dataset(path).optimize.compact_files(target_rows_per_fragment=1200)
    lance_sql.dataset(path).update({"s": "'u'"}, where="id % 9 = 1")
    return path, lance_sql.dataset(path).version


def _forget() -> None:
    lance_sql.default_runtime().clear("change_plans")


def _count_group_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    plan = feed._GroupRead.plan

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return plan(*args, **kwargs)

    monkeypatch.setattr(feed._GroupRead, "plan", staticmethod(counted))
    return calls


def test_repeated_query_reuses_the_read_plan_with_identical_results(
        history: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, last = history
    calls = _count_group_plans(monkeypatch)
    for version in range(1, last + 1):
        _forget()
        first = table_changes(path, version, version)
        planned = calls[0]
        again = table_changes(path, version, version)
        if first.num_rows:  # the read plan was kept: no group planned again
            assert calls[0] == planned, version
        assert again.equals(first)
        # a metadata filter keeping every row keeps the rows as they are (and their plan)
        planned = calls[0]
        assert table_changes(path, version, version, filter="_rowid >= 0").equals(first)
        if first.num_rows:
            assert calls[0] == planned, version
            # the general path (rows pruned by a metadata filter) agrees
            dropped = first["_rowid"][0].as_py()
            general = table_changes(path, version, version, filter=f"_rowid <> {dropped}")
            assert calls[0] > planned, version
            assert general.equals(first.filter(pa.compute.not_equal(first["_rowid"], dropped)))


def test_kinds_and_values_of_a_cached_read(history: tuple[Path, int]) -> None:
    path, _ = history
    _forget()
    fresh = table_changes(path, 3, 3)
    cached = table_changes(path, 3, 3)
    assert cached.equals(fresh)
    kinds = cached["_change_type"].to_pylist()
    assert set(kinds) == {"update_preimage", "update_postimage"}
    pre = cached.filter(pa.compute.equal(cached["_change_type"], "update_preimage"))
    post = cached.filter(pa.compute.equal(cached["_change_type"], "update_postimage"))
    assert pre["id"].equals(post["id"]) and pre["s"].equals(post["s"])
    # pre-images hold the old x (nulls stay null), post-images x + 1
    old = pre["x"].to_numpy(zero_copy_only=False)
    new = post["x"].to_numpy(zero_copy_only=False)
    assert np.array_equal(np.isnan(old), np.isnan(new))
    live = ~np.isnan(old)
    assert np.allclose(new[live], old[live] + 1)
    assert np.allclose(old[live], pre["id"].to_numpy()[live] * 0.5)


def test_projection_and_net_mode_over_cached_plans(history: tuple[Path, int]) -> None:
    path, last = history
    _forget()
    for _ in range(2):  # planned, then from the cache
        assert table_changes(path, 3, 3, columns=["x", "_change_type"]).equals(
            table_changes(path, 3, 3).select(["x", "_change_type"]))
        assert table_changes(path, last, last, columns=["_rowid"]).equals(
            table_changes(path, last, last).select(["_rowid"]))
    _forget()
    net = table_changes(path, 2, last, mode="net")
    assert table_changes(path, 2, last, mode="net").equals(net)


def test_sql_table_changes_repeated(history: tuple[Path, int]) -> None:
    path, last = history
    session: Any = lance_sql.connect(path.parent)  # type: ignore[operator]
    _forget()
    query = "SELECT * FROM table_changes('t', 3, 3) ORDER BY _rowid, _change_type"
    first = session.sql(query).to_arrow_table()
    assert session.sql(query).to_arrow_table().equals(first)
    expected = table_changes(path, 3, 3)
    assert first.num_rows == expected.num_rows
    assert sorted(first["_rowid"].to_pylist()) == sorted(expected["_rowid"].to_pylist())


def test_commit_timestamps_for_one_and_many_versions(history: tuple[Path, int]) -> None:
    path, last = history
    micros = {v: lance_sql.dataset(path, v).manifest.timestamp_ns // 1000
              for v in range(1, last + 1)}
    for start, end in ((3, 3), (1, last), (2, 4)):
        got = table_changes(path, start, end, columns=["_commit_version", "_commit_timestamp"])
        assert got.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
        stamps = got["_commit_timestamp"].cast(pa.int64()).to_pylist()
        assert stamps == [micros[v] for v in got["_commit_version"].to_pylist()]
        assert got.num_rows > 0


def _sorted(table: pa.Table) -> list[tuple]:
    return sorted(tuple(map(repr, row.values())) for row in table.to_pylist())


def test_sql_reads_a_whole_version_with_its_cached_read_plan(
        history: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """SQL's partition of a whole version is a slice of the cached change rows: it reads
    with the version's cached read plan, and gives what table_changes gives."""
    path, last = history
    session: Any = lance_sql.connect(path.parent)  # type: ignore[operator]
    calls = _count_group_plans(monkeypatch)
    for version in (3, last):
        _forget()
        expected = table_changes(path, version, version)
        assert expected.num_rows
        planned = calls[0]
        for _ in range(2):
            got = session.sql(f"SELECT * FROM table_changes('t', {version}, {version})")
            assert _sorted(got.to_arrow_table()) == _sorted(expected)
            assert calls[0] == planned, version
        # a pushed filter that drops rows plans its own read
        dropped = expected["_rowid"][0].as_py()
        got = session.sql(f"SELECT * FROM table_changes('t', {version}, {version}) "
                          f"WHERE _rowid <> {dropped}")
        kept = expected.filter(pa.compute.not_equal(expected["_rowid"], dropped))
        assert _sorted(got.to_arrow_table()) == _sorted(kept)
        assert calls[0] > planned
