"""Compaction and schema changes through an old handle (opened at an older version, or
before another writer committed) are built on that handle's version, as pylance builds
them: a compaction rewrites the handle's fragments and leaves newer ones alone; new,
recast or dropped columns (whose commit lists the whole schema or every fragment) are a
RetryableConflict when the table moved on, nothing committed. Before, all of them
silently acted on the newest version."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import RetryableConflict


def _three_versions(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri)
    lance.write_dataset(pa.table({"a": [3, 4]}), uri, mode="append")
    lance.write_dataset(pa.table({"a": [5, 6]}), uri, mode="append")
    return uri


def test_compaction_of_an_old_version_leaves_newer_fragments_alone(tmp_path: Path) -> None:
    uri = _three_versions(tmp_path)
    old = lance_sql.dataset(uri, version=2)
    old.optimize.compact_files()
    latest = lance.dataset(uri)
    assert old.version == latest.version == 5  # (fragment ids reserved, then the rewrite)
    # v2's two fragments became one; v3's stays as it was (pylance: the same)
    assert sorted(f.count_rows() for f in latest.get_fragments()) == [2, 4]
    assert sorted(latest.to_table().column("a").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert lance_sql.dataset(uri).to_table().equals(latest.to_table())


@pytest.mark.parametrize("change", [
    lambda ds: ds.add_columns({"b": "a * 2"}),
    lambda ds: ds.add_columns(pa.field("b", pa.int64())),
    lambda ds: ds.alter_columns({"path": "a", "data_type": pa.int32()}),
], ids=["sql", "null-column", "cast"])
def test_new_columns_on_an_old_version_are_a_retryable_conflict(tmp_path: Path,
                                                                change) -> None:
    uri = _three_versions(tmp_path)
    with pytest.raises(RetryableConflict):
        change(lance_sql.dataset(uri, version=2))
    latest = lance_sql.dataset(uri)
    assert latest.version == 3
    assert latest.schema == pa.schema([pa.field("a", pa.int64())])
    change(latest)  # on the newest version it applies
    assert lance.dataset(uri).count_rows() == 6


def test_a_drop_through_a_stale_handle_is_a_retryable_conflict(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1, 2], "a2": [1, 2]}), uri)
    stale = lance_sql.dataset(uri)
    lance.dataset(uri).add_columns({"b": "a + 1"})  # another writer
    with pytest.raises(RetryableConflict):
        stale.drop_columns(["a2"])  # (it would have dropped b too, or kept a2)
    assert lance.dataset(uri).schema.names == ["a", "a2", "b"]


def test_a_rename_through_a_stale_handle_rebases_over_a_delete(tmp_path: Path) -> None:
    uri = _three_versions(tmp_path)
    stale = lance_sql.dataset(uri)
    lance.dataset(uri).delete("a = 1")
    stale.alter_columns({"path": "a", "name": "z"})
    latest = lance.dataset(uri)
    assert stale.version == latest.version == 5
    assert latest.schema.names == ["z"]
    assert sorted(latest.to_table().column("z").to_pylist()) == [2, 3, 4, 5, 6]


def test_the_conflict_is_an_oserror_as_pylances_is(tmp_path: Path) -> None:
    """pylance raises its CommitConflictError, an OSError; code catching that catches
    ours too."""
    uri = _three_versions(tmp_path)
    for lib in (lance, lance_sql):
        with pytest.raises(OSError, match="(?i)conflict|preempted"):
            lib.dataset(uri, version=2).add_columns({"b": "a * 2"})
