"""The feed across schema history: a column's older rows keep their values through a
type change (cast; each value that does not cast NULL), a restore (NULL too), and an
overwrite (another column's values, or a FormatError); the answer does not depend on
the queries run before it (a cached plan ignored the window's end); and a cleanup gap
names what is readable."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import VersionCleanedUpError


def _rows(ds: lance_sql.LanceDataset, start: int, end: int, column: str,
          mode: str = "all") -> list[tuple]:
    table = ds.table_changes(start, end, mode=mode).sort_by(
        [("_commit_version", "ascending"), ("id", "ascending"), ("_change_type", "ascending")])
    return [(r["_commit_version"], r["_change_type"], r["id"], r[column])
            for r in table.to_pylist()]


@pytest.mark.parametrize("who", ["lance_sql", "pylance", "sql"])
def test_a_type_change_keeps_the_columns_history(tmp_path: Path, who: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()),
                                      "n": pa.array([10, 20], pa.int32())}), uri,
                            enable_stable_row_ids=True)
    if who == "sql":
        lance_sql.connect(tmp_path).sql("ALTER TABLE t ALTER COLUMN n TYPE BIGINT")
    else:
        (lance if who == "pylance" else lance_sql).dataset(uri).alter_columns(
            {"path": "n", "data_type": pa.int64()})
    ds = lance_sql.dataset(uri)
    assert ds.schema.field("n").type == pa.int64()
    assert _rows(ds, 1, 2, "n") == [
        (1, "insert", 1, 10), (1, "insert", 2, 20),
        (2, "update_postimage", 1, 10), (2, "update_preimage", 1, 10),
        (2, "update_postimage", 2, 20), (2, "update_preimage", 2, 20)]
    net = ds.table_changes(2, 2, mode="net").to_pylist()
    assert sorted((r["_change_type"], r["n"]) for r in net) == [
        ("update_postimage", 10), ("update_postimage", 20),
        ("update_preimage", 10), ("update_preimage", 20)]


def _dropped_readded_restored(tmp_path: Path) -> str:
    """v1 writes c, v2 updates row 1's c, v3 drops c, v4 adds a new c, v5 restores v1."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "c": [10, 20]}), uri,
                                 enable_stable_row_ids=True)
    ds.update({"c": "c + 1"}, where="id = 1")
    ds.drop_columns(["c"])
    ds.add_columns({"c": "id * 100"})
    ds.restore(1)
    return uri


def test_rows_between_a_restored_version_and_its_restore_keep_its_columns(
        tmp_path: Path) -> None:
    """v2's update wrote c; v3 dropped c; v4 restored v1, c with it. v2's change rows
    show the c they had (it is v4's c, never dropped on v4's history); a c added again
    before the restore is another column: NULL in the rows of its versions."""
    uri = _dropped_readded_restored(tmp_path)
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 2, 5, "c") == [
        (2, "update_postimage", 1, 11), (2, "update_preimage", 1, 10),
        (4, "update_postimage", 1, None), (4, "update_preimage", 1, None),
        (4, "update_postimage", 2, None), (4, "update_preimage", 2, None),
        (5, "update_postimage", 1, 10), (5, "update_preimage", 1, None),
        (5, "update_postimage", 2, 20), (5, "update_preimage", 2, None)]
    got = lance_sql.connect(tmp_path).sql(
        "SELECT c FROM table_changes('t', 2, 2) WHERE _change_type = 'update_postimage'")
    assert got.to_pylist() == [{"c": 11}]


def test_net_pre_images_show_the_values_from_before_the_window(tmp_path: Path) -> None:
    """Net pre-images are the rows before the window (v1 here, whose c v5's restore
    brought back), also row 2's, whose first change in the window (v4) came after c was
    dropped: its version before that change has no c."""
    uri = _dropped_readded_restored(tmp_path)
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 2, 5, "c", mode="net") == [
        (5, "update_postimage", 1, 10), (5, "update_preimage", 1, 10),
        (5, "update_postimage", 2, 20), (5, "update_preimage", 2, 20)]
    got = lance_sql.connect(tmp_path).sql(
        "SELECT c FROM table_changes('t', 2, 5, 'net') WHERE _rowid = 1 "
        "AND _change_type = 'update_preimage'")
    assert got.to_pylist() == [{"c": 20}]
    # the other way round: v6 drops c and v7 restores v5 (no row changes); a window from
    # v7 has c at its end but not before it (v6), where net pre-images come from
    ds.drop_columns(["c"])                                                   # v6
    ds.restore(5)                                                            # v7
    ds = lance_sql.dataset(uri)
    ds.update({"id": "id + 10"}, where="id = 2")                             # v8
    assert _rows(ds, 7, 8, "c") == [(8, "update_preimage", 2, 20),
                                    (8, "update_postimage", 12, 20)]
    assert _rows(ds, 7, 8, "c", mode="net") == [(8, "update_preimage", 2, None),
                                                (8, "update_postimage", 12, 20)]


def test_a_pre_image_of_a_column_retyped_since_reads_its_old_value(tmp_path: Path) -> None:
    """v2 updates n, v3 changes n's type (a new field id). v2's pre-image reads n where
    pre-images live, not at its post-image: the update modified n under its old id."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()),
                                           "n": pa.array([10, 20], pa.int32())}), uri,
                                 enable_stable_row_ids=True)
    ds.update({"n": "n + 5"}, where="id = 1")                                # v2
    ds.alter_columns({"path": "n", "data_type": pa.int64()})                 # v3
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 2, 3, "n")[:2] == [(2, "update_postimage", 1, 15),
                                        (2, "update_preimage", 1, 10)]
    got = lance_sql.connect(tmp_path).sql(
        "SELECT n FROM table_changes('t', 2, 3) "
        "WHERE _change_type = 'update_preimage' AND _commit_version = 2")
    assert got.to_pylist() == [{"n": 10}]


def test_a_restored_column_keeps_its_values(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "v": ["a", "b"]}), uri,
                                 enable_stable_row_ids=True)
    ds.drop_columns(["v"])
    ds.restore(1)                                                        # v3
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 1, 3, "v") == [(1, "insert", 1, "a"), (1, "insert", 2, "b")]


def test_a_column_restored_twice_keeps_its_values_in_the_first_restore(
        tmp_path: Path) -> None:
    """v2 drops c, v4 and v5 both restore v1: v4 is v1 again, its re-inserted row has c
    (the end's c, v1's), not NULL as after v2's drop."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "c": [10, 20]}), uri,
                                 enable_stable_row_ids=True)
    ds.drop_columns(["c"])                                               # v2
    ds.delete("id = 2")                                                  # v3
    ds.restore(1)                                                        # v4
    ds.restore(1)                                                        # v5
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 4, 5, "c") == [(4, "insert", 2, 20)]
    got = lance_sql.connect(tmp_path).sql("SELECT id, c FROM table_changes('t', 4, 5)")
    assert got.to_pylist() == [{"id": 2, "c": 20}]


def test_restores_between_versions_with_and_without_a_column(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2]}), uri, enable_stable_row_ids=True)
    ds.add_columns({"c": "id * 10"})                                     # v2
    ds.update({"c": "c + 1"}, where="id = 1")                            # v3
    ds.restore(1)                                                        # v4: no c
    ds.restore(3)                                                        # v5: c again
    ds = lance_sql.dataset(uri)
    got = [r for r in _rows(ds, 3, 5, "c") if r[2] == 1]
    assert got == [(3, "update_postimage", 1, 11), (3, "update_preimage", 1, 10),
                   (4, "update_postimage", 1, None), (4, "update_preimage", 1, 11),
                   (5, "update_postimage", 1, 11), (5, "update_preimage", 1, None)]


@pytest.mark.parametrize("writer", ["lance_sql", "pylance"])
def test_an_overwrite_shows_the_deleted_rows_own_columns(tmp_path: Path, writer: str) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": [1, 2], "a": ["A1", "A2"], "b": ["b1", "b2"]}),
                            uri, enable_stable_row_ids=True)
    new = pa.table({"id": [3], "b": ["b3"]})
    (lance if writer == "pylance" else lance_sql).write_dataset(new, uri, mode="overwrite")
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 2, 2, "b") == [(2, "delete", 1, "b1"), (2, "delete", 2, "b2"),
                                    (2, "insert", 3, "b3")]


def test_an_overwrite_with_other_nested_columns_reads_no_wrong_layout(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({
        "id": [1, 2], "l": pa.array([[1], [2, 3]], pa.list_(pa.int32())),
        "st": pa.array([{"x": 1}, {"x": 2}], pa.struct([("x", pa.int32())]))}), uri,
        enable_stable_row_ids=True)
    lance_sql.write_dataset(pa.table({
        "id": [3], "st": pa.array([{"x": 3}], pa.struct([("x", pa.int32())]))}), uri,
        mode="overwrite")
    ds = lance_sql.dataset(uri)
    assert _rows(ds, 2, 2, "st") == [(2, "delete", 1, {"x": 1}), (2, "delete", 2, {"x": 2}),
                                     (2, "insert", 3, {"x": 3})]


def _dropped_and_added_again(uri: str) -> lance_sql.LanceDataset:
    ds = lance_sql.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()),
                                           "a": ["a1", "a2"], "b": ["OLD-b1", "OLD-b2"]}),
                                 uri, enable_stable_row_ids=True)          # v1
    ds.update({"a": "'x'"}, where="id = 1")                                # v2
    ds.drop_columns(["b"])                                                 # v3
    ds.optimize.compact_files(target_rows_per_fragment=100)
    ds = lance_sql.dataset(uri)
    ds.add_columns(pa.field("b", pa.string()))                             # b, its old id
    return lance_sql.dataset(uri)


@pytest.mark.parametrize("order", ["short first", "long first"])
def test_an_answer_does_not_depend_on_the_query_before_it(tmp_path: Path, order: str) -> None:
    ds = _dropped_and_added_again(str(tmp_path / "t.lance"))

    def short() -> list:  # b existed, with its values, in every version of 2..2
        return [r["b"] for r in ds.table_changes(2, 2, columns=["b"]).to_pylist()]

    def long() -> list:  # the end's b is a new, empty column
        return [r["b"] for r in ds.table_changes(2, ds.version, columns=["b"],
                                                 filter="_commit_version = 2").to_pylist()]

    if order == "short first":
        got_short, got_long = short(), long()
    else:
        got_long, got_short = long(), short()
    assert got_short == ["OLD-b1", "OLD-b1"]
    assert got_long == [None, None]


def test_a_column_named_twice_is_returned_once(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2]}), str(tmp_path / "t.lance"),
                                 enable_stable_row_ids=True)
    assert ds.table_changes(1, 1, columns=["id", "id"]).to_pylist() == [{"id": 1}, {"id": 2}]


def test_a_cleanup_gap_behind_a_tag_is_named(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(range(6), pa.int64())}), uri,
                                 enable_stable_row_ids=True)
    for i in range(5):
        ds.delete(f"id = {i}")                                             # v2..v6
    ds.tags.create("keep", 2)
    time.sleep(0.01)
    ds.cleanup_old_versions(older_than=dt.timedelta(0),
        error_if_tagged_old_versions=False)
    assert [v["version"] for v in lance_sql.dataset(uri).versions()] == [2, 6]
    with pytest.raises(VersionCleanedUpError, match="version 5 .*readable from version 7 "):
        ds.table_changes(6, 6)
    with pytest.raises(VersionCleanedUpError, match="versions 2, 6 remain"):
        ds.table_changes(2, 6)


def test_older_values_cast_by_datafusion_inside_a_sql_query(tmp_path: Path) -> None:
    """Floats in a list to text is DataFusion's own cast; the feed makes it for older rows
    while DataFusion runs the SQL query that reads them (a second query on its threads
    panicked: "Cannot start a runtime from within a runtime")."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({
        "id": [1, 2], "l": pa.array([[1.0, -0.0], None], pa.list_(pa.float64()))}), uri,
        enable_stable_row_ids=True)
    ds.alter_columns({"path": "l", "data_type": pa.list_(pa.string())})
    want = [(1, "insert", ["1.0", "-0.0"]), (1, "update_postimage", ["1.0", "-0.0"]),
            (1, "update_preimage", ["1.0", "-0.0"]), (2, "insert", None),
            (2, "update_postimage", None), (2, "update_preimage", None)]
    got = lance_sql.connect(tmp_path).sql(
        "SELECT id, _change_type, l FROM table_changes('t', 1, 2) "
        "ORDER BY id, _change_type").to_pylist()
    assert [(r["id"], r["_change_type"], r["l"]) for r in got] == want


@pytest.mark.parametrize("who", ["lance_sql", "sql"])
def test_a_narrowed_column_nulls_only_the_values_that_do_not_cast(tmp_path: Path,
                                                                  who: str) -> None:
    """x narrowed to int32 after the rows holding 3e9 were deleted: their older values
    read NULL, every other older value (the same batch) its own (it was all NULL)."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(
        pa.table({"id": pa.array(range(1, 9), pa.int64()),
                  "x": pa.array([10, 20, 3_000_000_000, 40, 50, -3_000_000_000, 70, 80],
                                pa.int64())}), uri, enable_stable_row_ids=True)   # v1
    ds.update({"x": "x + 1"}, where="id = 2")                                    # v2
    ds.delete("id = 3 OR id = 6")                                                # v3
    ds.optimize.compact_files()
    ds = lance_sql.dataset(uri)
    ds.alter_columns({"path": "x", "data_type": pa.int32()})
    end = lance_sql.dataset(uri).version
    if who == "sql":
        rows = lance_sql.connect(tmp_path).sql(
            f"SELECT _commit_version, _change_type, id, x FROM table_changes('t', 1, {end}) "
            "WHERE _commit_version <= 3").to_pylist()
        got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["x"]) for r in rows)
    else:
        got = sorted(r for r in _rows(lance_sql.dataset(uri), 1, end, "x") if r[0] <= 3)
    inserts = [(1, "insert", i, x) for i, x in
               zip(range(1, 9), [10, 20, None, 40, 50, None, 70, 80], strict=True)]
    assert got == sorted([*inserts, (2, "update_postimage", 2, 21),
                          (2, "update_preimage", 2, 20),
                          (3, "delete", 3, None), (3, "delete", 6, None)])
