"""Writes that change no row still commit a version, as pylance's do, with the same
transaction: an empty Update for update / merge_insert, an empty Delete for delete."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

DATA = pa.table({"id": [1, 2], "s": ["a", "b"]})


def _noop_writes(lib, path: Path) -> list[int]:
    """Versions after each write matching nothing (update, delete, merge_insert)."""
    seen = []
    lib.dataset(path).update({"s": "'x'"}, where="id = 9")
    seen.append(lib.dataset(path).version)
    lib.dataset(path).delete("id = 9")
    seen.append(lib.dataset(path).version)
    stats = lib.dataset(path).merge_insert("id").when_matched_update_all().execute(
        pa.table({"id": [9], "s": ["q"]}))
    assert stats == {"num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0}
    seen.append(lib.dataset(path).version)
    return seen


@pytest.mark.parametrize("stable", [False, True])
def test_no_op_writes_commit_versions_like_pylance(tmp_path: Path, stable: bool) -> None:
    lance.write_dataset(DATA, tmp_path / "theirs.lance", enable_stable_row_ids=stable)
    lance_sql.write_dataset(DATA, tmp_path / "ours.lance", enable_stable_row_ids=stable)
    theirs = _noop_writes(lance, tmp_path / "theirs.lance")
    assert theirs == [2, 3, 4]
    assert _noop_writes(lance_sql, tmp_path / "ours.lance") == theirs
    # the same operations, and pylance reads ours (rows unchanged)
    ours = lance_sql.dataset(tmp_path / "ours.lance")
    assert [v["operation"] for v in ours.versions()] == ["overwrite", "update", "delete",
                                                          "update"]
    read_back = lance.dataset(tmp_path / "ours.lance")
    assert read_back.version == 4
    assert read_back.to_table().sort_by("id") == DATA
    ops = [type(t.operation).__name__ for t in read_back.get_transactions()]
    assert ops == [type(t.operation).__name__
                   for t in lance.dataset(tmp_path / "theirs.lance").get_transactions()]


def test_sql_no_op_statements_commit_versions(tmp_path: Path) -> None:
    session = lance_sql.connect(tmp_path)
    session.sql("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a')) AS v(id, s)")
    for sql in ["UPDATE t SET s = 'x' WHERE id = 9", "DELETE FROM t WHERE id = 9",
                "UPDATE t SET s = 'x' WHERE id IN (SELECT 9)",
                "MERGE INTO t USING (VALUES (9, 'q')) AS src(id, s) ON t.id = src.id "
                "WHEN MATCHED THEN UPDATE SET *"]:
        before = session.dataset("t").version
        session.sql(sql)
        assert session.dataset("t").version == before + 1, sql
    assert session.sql("SELECT * FROM t").to_pydict() == {"id": [1], "s": ["a"]}


def test_a_merge_that_can_change_nothing_is_refused_or_skipped(tmp_path: Path) -> None:
    """No clause at all: pylance's merge_insert refuses it, and so does ours; a SQL MERGE
    whose clauses all DO NOTHING commits nothing."""
    lance_sql.write_dataset(DATA, tmp_path / "t")
    with pytest.raises(ValueError, match="not configured to change"):
        lance.dataset(tmp_path / "t").merge_insert("id").execute(DATA)
    with pytest.raises(InvalidInputError, match="nothing to do"):
        lance_sql.dataset(tmp_path / "t").merge_insert("id").execute(DATA)
    assert lance_sql.dataset(tmp_path / "t").version == 1
    session = lance_sql.connect(tmp_path)
    done = session.sql("MERGE INTO t USING (VALUES (1, 'q')) AS src(id, s) ON t.id = src.id "
                       "WHEN MATCHED THEN DO NOTHING").to_pylist()
    assert done == [{"num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0,
                     "version": 1}]
    assert session.dataset("t").version == 1


def test_an_update_whose_values_fail_is_a_typed_error(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"a": [1, 2]}), tmp_path / "t")
    with pytest.raises(InvalidInputError, match="divide by zero"):
        ds.update({"a": "a / 0"})
    assert ds.version == 1
