"""The change data feed, checked against a diff of full snapshots keyed by ``_rowid``."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError, VersionCleanedUpError
from lance_sql.io.uri import open_store
from lance_sql.table.changes.feed import resolve_window, table_changes
from lance_sql.table.changes.query import ChangeQuery
from lance_sql.table.changes.rows import META_SCHEMA, ChangeRows

DATA = ["id", "v"]
LINEAGE = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def _snapshot(path: Path, version: int) -> dict[int, dict]:
    table = lance_sql.dataset(path, version).to_table(columns=DATA + LINEAGE)
    return {row["_rowid"]: row for row in table.to_pylist()}


def expected(path: Path, start: int, end: int) -> list[tuple]:
    """Changes from snapshots: ids that came, went, or whose last-updated version moved."""
    out = []
    for v in range(start, end + 1):
        old = _snapshot(path, v - 1) if v > 1 else {}
        new = _snapshot(path, v)

        def row(r: dict, kind: str, v: int = v) -> tuple:
            return (v, kind, r["_rowid"], r["id"], r["v"])

        out += [row(new[i], "insert") for i in new.keys() - old.keys()]
        out += [row(old[i], "delete") for i in old.keys() - new.keys()]
        for i in old.keys() & new.keys():
            if old[i]["_row_last_updated_at_version"] != new[i]["_row_last_updated_at_version"]:
                out += [row(old[i], "update_preimage"), row(new[i], "update_postimage")]
    return sorted(out)


def actual(table: pa.Table) -> list[tuple]:
    return sorted((r["_commit_version"], r["_change_type"], r["_rowid"], r["id"], r["v"])
                  for r in table.to_pylist())


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """A table whose versions exercise each kind of commit; returns it and version names."""
    path = tmp_path_factory.mktemp("changes") / "t.lance"
    names = {}
    ds = lance_sql.write_dataset(_rows(range(6), "a"), path, max_rows_per_file=3,
                                 enable_stable_row_ids=True)
    names["create"] = ds.version
    names["append"] = lance_sql.write_dataset(_rows(range(6, 9), "b"), path,
                                              mode="append").version
    ds = lance_sql.dataset(path)
    ds.delete("id IN (1, 7)")
    names["delete"] = ds.version
    ds.update({"v": "'x'"}, where="id < 3")
    names["update"] = ds.version
    lance.dataset(path).update({"v": "'p'"}, where="id = 4")   # the reference as writer
    names["pylance_update"] = lance_sql.dataset(path).version
    ds = lance_sql.dataset(path)
    ds.delete("id >= 3 AND id < 6")      # fragment 1 loses every live row
    names["delete_fragment"] = ds.version
    ds.optimize.compact_files(target_rows_per_fragment=100)
    names["compact"] = lance_sql.dataset(path).version
    ds = lance_sql.dataset(path)
    ds.update({"v": "'c'"}, where="id = 6", update_mode="rewrite_columns")
    names["rewrite_columns"] = ds.version
    return path, names


def test_every_version_matches_the_snapshot_diff(history: tuple[Path, dict[str, int]]) -> None:
    path, names = history
    last = max(names.values())
    got = table_changes(path, 1, last)
    assert got.schema.names == [*DATA, "_change_type", "_commit_version", "_commit_timestamp",
                                "_rowid"]
    assert got.schema.field("_commit_version").type == pa.uint64()
    assert got.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert actual(got) == expected(path, 1, last)
    kinds = set(got["_change_type"].to_pylist())
    assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}
    for v in range(1, last + 1):  # windows are inclusive at both ends
        assert actual(table_changes(path, v, v)) == expected(path, v, v)
    assert actual(table_changes(path, 3, 5)) == expected(path, 3, 5)


def test_each_commit_kind(history: tuple[Path, dict[str, int]]) -> None:
    path, names = history

    def summary(name: str) -> list[tuple]:
        t = table_changes(path, names[name], names[name])
        return [(r["_change_type"], r["id"], r["v"]) for r in t.to_pylist()]

    assert summary("append") == [("insert", 6, "b6"), ("insert", 7, "b7"), ("insert", 8, "b8")]
    assert summary("delete") == [("delete", 1, "a1"), ("delete", 7, "b7")]
    # Pre-image right before its post-image, ordered by row id.
    assert summary("update") == [("update_preimage", 0, "a0"), ("update_postimage", 0, "x"),
                                 ("update_preimage", 2, "a2"), ("update_postimage", 2, "x")]
    assert summary("pylance_update") == [("update_preimage", 4, "a4"),
                                         ("update_postimage", 4, "p")]
    assert summary("delete_fragment") == [("delete", 3, "a3"), ("delete", 4, "p"),
                                          ("delete", 5, "a5")]
    assert summary("compact") == []       # rows moved, nothing changed
    assert summary("rewrite_columns") == [("update_preimage", 6, "b6"),
                                          ("update_postimage", 6, "c")]


def test_restore_brings_rows_back_as_changes(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_rows(range(4), "a"), path, enable_stable_row_ids=True)
    ds = lance_sql.dataset(path)
    ds.delete("id = 1")
    ds.update({"v": "'x'"}, where="id = 2")
    ds = lance_sql.dataset(path, 1)
    ds.restore()
    last = lance_sql.dataset(path).version
    got = table_changes(path, last, last)
    assert actual(got) == expected(path, last, last)
    assert sorted(got["_change_type"].to_pylist()) == ["insert", "update_postimage",
                                                      "update_preimage"]


def test_projection_and_filters(history: tuple[Path, dict[str, int]]) -> None:
    path, names = history
    last = max(names.values())
    every = expected(path, 1, last)
    got = table_changes(path, 1, last, columns=["id", "_commit_version"],
                        filter="_change_type = 'delete' AND id > 1")
    assert got.column_names == ["id", "_commit_version"]
    assert sorted((r["_commit_version"], r["id"]) for r in got.to_pylist()) == sorted(
        (c[0], c[3]) for c in every if c[1] == "delete" and c[3] > 1)
    got = table_changes(path, 1, last, columns=["_rowid"],
                        filter=f"_commit_version = {names['update']} OR v = 'p'")
    assert sorted(got["_rowid"].to_pylist()) == sorted(
        c[2] for c in every if c[0] == names["update"] or c[4] == "p")
    assert table_changes(path, 1, last, columns=[]).num_rows == len(every)
    with pytest.raises(NotFoundError):
        table_changes(path, 1, last, columns=["nope"])


def test_timestamps_pick_versions(history: tuple[Path, dict[str, int]]) -> None:
    path, names = history
    feed = table_changes(path, 1, max(names.values()), columns=["_commit_version",
                                                                "_commit_timestamp"])
    stamps = dict(zip(feed["_commit_version"].to_pylist(),
                      feed["_commit_timestamp"].to_pylist(), strict=True))
    start, end = names["delete"], names["pylance_update"]
    by_time = table_changes(path, stamps[start], stamps[end].isoformat())
    assert actual(by_time) == expected(path, start, end)
    # Just after a commit: the window starts at the next one.
    later = stamps[start] + dt.timedelta(microseconds=1)
    assert actual(table_changes(path, later, end)) == expected(path, start + 1, end)
    with pytest.raises(NotFoundError):
        table_changes(path, stamps[max(stamps)] + dt.timedelta(days=1))


def test_bad_windows(history: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    path, names = history
    last = max(names.values())
    with pytest.raises(InvalidInputError, match="after end"):
        table_changes(path, 3, 2)
    with pytest.raises(NotFoundError, match=f"versions: 1, 2, .*{last}$"):
        table_changes(path, 1, last + 5)
    with pytest.raises(InvalidInputError):
        table_changes(path, 0, 2)
    with pytest.raises(NotFoundError, match="nor a tag"):  # text that is no tag
        table_changes(path, "yesterday", 2)
    plain = tmp_path / "plain.lance"
    lance_sql.write_dataset(_rows(range(3), "a"), plain)
    with pytest.raises(InvalidInputError, match="enable_stable_row_ids=True"):
        table_changes(plain, 1, 1)


def test_cleaned_up_history_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_rows(range(4), "a"), path, enable_stable_row_ids=True)
    for i in range(3):
        lance_sql.dataset(path).delete(f"id = {i}")
    ds = lance_sql.dataset(path)
    ds.cleanup_old_versions(older_than=dt.timedelta(0))
    assert [v["version"] for v in ds.versions()] == [4]
    with pytest.raises(VersionCleanedUpError, match="readable from version 5"):
        table_changes(path, 2, 4)
    with pytest.raises(NotFoundError):  # the parent class still catches it
        table_changes(path, 4, 4)


def test_missing_old_data_file_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_rows(range(4), "a"), path, enable_stable_row_ids=True)
    lance.dataset(path).update({"v": "'x'"}, where="id = 0")  # lance_sql never opened it
    old_file = lance_sql.dataset(path, 1).manifest.fragments[0].files[0].path
    lance_sql.write_dataset(_rows(range(4, 5), "b"), path, mode="append")
    os.remove(path / "data" / old_file)
    with pytest.raises(VersionCleanedUpError, match="no longer exist"):
        table_changes(path, 2, 3)
    # Only inserts: nothing of the removed file is needed.
    assert table_changes(path, 3, 3)["id"].to_pylist() == [4]


def test_version_filters_limit_the_planned_versions(
        history: tuple[Path, dict[str, int]]) -> None:
    path, names = history
    window = resolve_window(open_store(str(path)), 1, max(names.values()))
    query = ChangeQuery.build(window.schema, ["id"], "_commit_version BETWEEN 3 AND 4 AND id > 0")
    assert query.versions(window) == [3, 4]
    assert query.prefilter is not None  # the metadata conjunct prunes before any read
    assert ChangeQuery.build(window.schema, None, "id > 0").versions(window) == list(
        range(1, max(names.values()) + 1))


@pytest.mark.parametrize("text", [
    "_change_type = 'insert'", "_change_type <> 'update_preimage'", "'delete' = _change_type",
    "_change_type IN ('insert', 'delete')", "NOT (_change_type IN ('nothing'))",
    "_commit_version >= 3", "4 > _commit_version", "_rowid BETWEEN 5 AND 40",
    "_rowid IN (1, 7, 99) OR _commit_version = 2",
    "_change_type = 'update_postimage' AND NOT _rowid < 10",
    "_change_type LIKE 'update%'",  # not simple: evaluated by pyarrow
    "_commit_timestamp > '2020-01-01'",
])
def test_metadata_prefilter_on_numpy_agrees_with_pyarrow(text: str) -> None:
    """Simple metadata filters run on numpy; the result must be pyarrow's, whatever path."""
    rng = np.random.default_rng(7)
    n = 500
    rows = ChangeRows(
        version=rng.integers(1, 6, n).astype(np.uint64), kind=rng.integers(0, 4, n).astype(np.int8),
        row_id=rng.integers(0, 60, n).astype(np.uint64), source=np.zeros(n, np.int64),
        fragment=np.zeros(n, np.int64), offset=np.arange(n, dtype=np.int64),
        alt_fragment=np.full(n, -1, np.int64), alt_offset=np.full(n, -1, np.int64))
    stamps = {v: 1_700_000_000_000_000 + v for v in range(1, 6)}
    query = ChangeQuery.build(META_SCHEMA, None, text)
    got = query.prune(rows, stamps)
    table = rows.metadata(stamps).append_column("_pos", pa.array(np.arange(n)))
    expected = table.filter(query.prefilter).column("_pos").to_numpy()
    assert got.offset.tolist() == expected.tolist()


def test_cached_plans_never_outlive_the_table_they_describe(tmp_path: Path) -> None:
    """Plans are cached per version; a table re-created at the same place is planned anew."""
    import shutil

    path = tmp_path / "t"
    lance_sql.write_dataset(_rows(range(5), "a"), path, enable_stable_row_ids=True)
    lance_sql.dataset(path).delete("id = 1")
    first = table_changes(path, 2, 2)
    assert actual(first) == expected(path, 2, 2)
    assert actual(table_changes(path, 2, 2)) == actual(first)  # served from the cache
    shutil.rmtree(path)
    lance_sql.write_dataset(_rows(range(5), "b"), path, enable_stable_row_ids=True)
    lance_sql.dataset(path).delete("id >= 3")
    again = table_changes(path, 2, 2)
    assert actual(again) == expected(path, 2, 2)
    assert sorted(r[3] for r in actual(again)) == [3, 4]


def test_preimage_columns_the_update_did_not_modify_come_from_the_new_files() -> None:
    """Only the modified column of a pre-image is read from the old files."""
    from lance_sql.io import MemoryStore

    MemoryStore.reset("cdf_preimage")
    uri = "memory://cdf_preimage"
    data = pa.table({"id": pa.array(range(40), pa.int64()), "v": [f"s{i}" for i in range(40)],
                     "w": pa.array([i * 0.5 for i in range(40)])})
    lance_sql.write_dataset(data, uri, enable_stable_row_ids=True, max_rows_per_file=20)
    lance_sql.dataset(uri).update({"w": "w + 100"}, where="id % 7 = 0")
    old_files = {f"data/{d.path}" for f in lance_sql.dataset(uri, 1).manifest.fragments
                 for d in f.files}
    expected_pre = {r["_rowid"]: r for r in lance_sql.dataset(uri, 1).to_table(
        columns=["id", "v", "w", "_rowid"]).to_pylist() if r["id"] % 7 == 0}
    store = MemoryStore("cdf_preimage")
    for columns, reads_old in ((["id", "v", "_rowid"], False), (["w", "_rowid"], True)):
        # files are read again, plans made again
        lance_sql.default_runtime().clear("data_files", "change_plans")
        seen: list[str] = []
        store.add_hook(lambda op, key, seen=seen: seen.append(key))
        got = table_changes(uri, 2, 2, columns=columns,
                            filter="_change_type = 'update_preimage'")
        store.clear_hooks()
        assert got.num_rows == len(expected_pre)
        for row in got.to_pylist():
            want = expected_pre[row["_rowid"]]
            assert all(row[c] == want[c] for c in columns)
        assert bool(set(seen) & old_files) == reads_old, (columns, seen)
