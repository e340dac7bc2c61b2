"""Restores and tags of an old version racing ``cleanup_old_versions``: either cleanup
keeps the version (and its files) or the restore / tag fails with a typed error and
leaves nothing behind; never an acknowledged restore or tag pointing at deleted files.

Each interleaving is forced with a hook on cleanup's looks at in-flight writers (the
first before it picks versions, the second after it has set their manifests aside).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError, RetryableConflict, VersionCleanedUpError
from lance_sql.format.naming import LATEST_HINT
from lance_sql.io.uri import open_store
from lance_sql.table.meta.versions import find_version, read_hint, write_hint
from lance_sql.table.ops import cleanup as cleanup_module
from lance_sql.table.runtime.context import current_runtime

lance = pytest.importorskip("lance")
ZERO = timedelta(0)


@pytest.fixture()
def uri(tmp_path: Path) -> str:
    """v1 holds ids 1-3; v2 overwrote them, so only v1 references their data file."""
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": [1, 2, 3]}), path)
    lance_sql.write_dataset(pa.table({"id": [4]}), path, mode="overwrite")
    return path


def _during_look(monkeypatch, which: int, action: Callable[[], None]) -> list[object]:
    """Run ``action`` just before cleanup's look number ``which`` (1 or 2) at in-flight
    writers; what it returned or raised is recorded."""
    real = cleanup_module._in_flight_read_version
    calls, outcome = [], []

    def hooked(*args, **kwargs):
        calls.append(1)
        if len(calls) == which:
            try:
                outcome.append(action())
            except Exception as exc:  # noqa: BLE001 - recorded for the test to check
                outcome.append(exc)
        return real(*args, **kwargs)

    monkeypatch.setattr(cleanup_module, "_in_flight_read_version", hooked)
    return outcome


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def test_a_restore_before_the_set_aside_keeps_its_version(uri: str, monkeypatch) -> None:
    outcome = _during_look(monkeypatch, 1, lambda: lance_sql.dataset(uri).restore(1))
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert outcome == [None] and stats.old_versions == 0
    assert lance_sql.dataset(uri).to_table().column("id").to_pylist() == [1, 2, 3]
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [1, 2, 3]


def test_a_restore_whose_check_came_first_is_seen_on_the_second_look(
        uri: str, monkeypatch) -> None:
    # the restore's transaction file and its check of version 1 happen before cleanup
    # sets version 1 aside; its commit lands while cleanup is between its two looks
    from lance_sql.table.txn import commit as commit_module
    real_find = commit_module.find_version
    restored: list[object] = []

    def find_then_let_cleanup_pick(store, version, handler=None):
        ref = real_find(store, version, handler)
        if version == 1 and not restored:
            restored.append("checked")
        return ref

    monkeypatch.setattr(commit_module, "find_version", find_then_let_cleanup_pick)
    outcome = _during_look(monkeypatch, 2, lambda: None)
    real_set_aside = cleanup_module._set_aside_and_look_again

    def restore_after_its_check(store, picked, manifests, grace):
        # cleanup picked version 1 without seeing the restore (it had not begun); the
        # restore now writes its transaction file, checks version 1 and commits, all
        # before the set-aside
        lance_sql.dataset(uri).restore(1)
        return real_set_aside(store, picked, manifests, grace)

    monkeypatch.setattr(cleanup_module, "_set_aside_and_look_again", restore_after_its_check)
    lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert restored == ["checked"] and outcome == [None]
    ds = lance_sql.dataset(uri)
    assert ds.version == 3 and ds.to_table().column("id").to_pylist() == [1, 2, 3]
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [1, 2, 3]


def test_a_restore_after_the_set_aside_fails_and_leaves_nothing(uri: str,
                                                                monkeypatch) -> None:
    before = sorted(os.listdir(os.path.join(uri, "_transactions")))
    outcome = _during_look(monkeypatch, 2, lambda: lance_sql.dataset(uri).restore(1))
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert isinstance(outcome[0], NotFoundError)
    assert stats.old_versions == 1
    ds = lance_sql.dataset(uri)
    assert ds.version == 2 and ds.to_table().column("id").to_pylist() == [4]
    # its transaction file went with it; the version it needed is gone for good
    after = set(os.listdir(os.path.join(uri, "_transactions")))
    assert after <= set(before)
    with pytest.raises(VersionCleanedUpError):
        lance_sql.dataset(uri, version=1)


def test_a_tag_before_the_set_aside_keeps_its_version(uri: str, monkeypatch) -> None:
    outcome = _during_look(monkeypatch, 1, lambda: lance_sql.dataset(uri).tags.create("k", 1))
    files = _data_files(uri)
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert outcome == [None] and stats.old_versions == 0 and _data_files(uri) == files
    assert lance_sql.dataset(uri, version="k").to_table().column("id").to_pylist() == [1, 2, 3]


def test_a_tag_after_the_set_aside_fails_and_leaves_no_tag(uri: str, monkeypatch) -> None:
    outcome = _during_look(monkeypatch, 2, lambda: lance_sql.dataset(uri).tags.create("k", 1))
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert isinstance(outcome[0], NotFoundError) and stats.old_versions == 1
    assert lance_sql.dataset(uri).tags.list() == {}
    assert lance.dataset(uri).tags.list() == {}


def test_a_tag_moved_onto_a_set_aside_version_is_moved_back(uri: str, monkeypatch) -> None:
    lance_sql.dataset(uri).tags.create("k", 2)
    outcome = _during_look(monkeypatch, 2, lambda: lance_sql.dataset(uri).tags.update("k", 1))
    lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert isinstance(outcome[0], NotFoundError)
    assert lance_sql.dataset(uri).tags.get_version("k") == 2


def _set_aside_by_a_dead_cleanup(uri: str, version: int) -> str:
    store = open_store(uri)
    ref = find_version(store, version)
    key = f"{ref.key}.{1}{cleanup_module.SET_ASIDE}"  # set aside long ago
    assert store.rename_if_absent(ref.key, key)
    return key


def test_a_dead_cleanups_leftovers_are_finished(uri: str) -> None:
    key = _set_aside_by_a_dead_cleanup(uri, 1)
    assert [v["version"] for v in lance_sql.dataset(uri).versions()] == [2]
    assert [v["version"] for v in lance.dataset(uri).versions()] == [2]
    files = _data_files(uri)
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert stats.files_removed >= 2  # the set-aside manifest and v1's data file
    assert not os.path.exists(os.path.join(uri, key))
    assert len(_data_files(uri)) == len(files) - 1
    assert lance_sql.dataset(uri).to_table().column("id").to_pylist() == [4]


def test_a_dead_cleanups_leftover_now_tagged_is_put_back(uri: str) -> None:
    _set_aside_by_a_dead_cleanup(uri, 1)
    store = open_store(uri)
    # a tag written while the version was set aside (its own check then failed, but
    # the tagger died before taking the tag back)
    (Path(uri) / "_refs" / "tags").mkdir(parents=True)
    (Path(uri) / "_refs" / "tags" / "k.json").write_text(json.dumps(
        {"branch": None, "version": 1, "manifestSize": 1, "metadata": {}}))
    lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
    assert [r.version for r in cleanup_module.list_versions(store)] == [1, 2]
    assert lance_sql.dataset(uri, version="k").to_table().column("id").to_pylist() == [1, 2, 3]


def test_the_hint_only_moves_up(uri: str) -> None:
    store = open_store(uri)
    write_hint(store, 2)
    write_hint(store, 1)  # a writer whose hint landed late
    assert read_hint(store) == 2
    write_hint(store, 1, lower=True)
    assert json.loads((Path(uri) / LATEST_HINT).read_text()) == {"version": 1}


def test_reads_of_a_removed_version_say_cleanup_removed_it(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": list(range(5000))}), path, max_rows_per_file=1000)
    held = lance_sql.dataset(path)  # a reader still on version 1
    lance_sql.write_dataset(pa.table({"id": [1]}), path, mode="overwrite")
    lance_sql.dataset(path).cleanup_old_versions(older_than=ZERO)
    with pytest.raises(VersionCleanedUpError, match="version 1 was removed"):
        held.to_table()
    with pytest.raises(VersionCleanedUpError, match="cleanup_old_versions removed it"):
        lance_sql.dataset(path, version=1)
    with pytest.raises(NotFoundError) as missing:
        lance_sql.dataset(path, version=7)  # never existed
    assert not isinstance(missing.value, VersionCleanedUpError)


def test_a_removed_versions_deletion_file_says_cleanup_removed_it(tmp_path: Path) -> None:
    """The data files outlive the version (a later delete only replaced its deletion
    file): reading the deletion file was a bare NotFoundError naming the file."""
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": list(range(10))}), path)
    lance_sql.dataset(path).delete("id = 1")
    held = lance_sql.dataset(path)  # version 2: its deletion file not read yet
    lance_sql.dataset(path).delete("id = 2")  # version 3: another deletion file
    lance_sql.dataset(path).cleanup_old_versions(older_than=ZERO)
    current_runtime().clear()  # (the second delete read the first one's file)
    with pytest.raises(VersionCleanedUpError, match="version 2 was removed"):
        held.to_table()
    with pytest.raises(VersionCleanedUpError, match="version 2 was removed"):
        held.count_rows("id > 3")
    assert lance_sql.dataset(path).count_rows() == 8


def test_opening_the_latest_while_cleanup_removes_it_looks_again(uri: str,
                                                                 monkeypatch) -> None:
    from lance_sql.table.meta import versions
    real = versions.load_manifest
    calls: list[int] = []

    def newer_then_cleanup(store, ref):
        if not calls:  # between finding the newest (v2) and reading it
            calls.append(ref.version)
            lance_sql.write_dataset(pa.table({"id": [5]}), uri, mode="append")
            lance_sql.dataset(uri).cleanup_old_versions(older_than=ZERO)
        return real(store, ref)

    monkeypatch.setattr(versions, "load_manifest", newer_then_cleanup)
    ds = lance_sql.dataset(uri)
    assert calls == [2] and ds.version == 3
    assert ds.to_table().column("id").to_pylist() == [4, 5]


def test_a_memwal_put_while_cleanup_removes_the_version_it_found(tmp_path: Path,
                                                                 monkeypatch) -> None:
    import uuid

    from lance_sql.memwal import put_columns
    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk),
                        pa.field("v", pa.string())])
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": [0], "v": ["b"]}, schema=schema), path)
    lance_sql.dataset(path).initialize_mem_wal(region_spec=None)
    writer = lance_sql.dataset(path).mem_wal.writer(region=uuid.UUID(int=1))
    writer.put(pa.table({"id": [1], "v": ["a"]}, schema=schema))
    lance_sql.dataset(path).update_config({"a": "1"})  # a version the next put finds
    real = put_columns.load_manifest
    fired: list[int] = []

    def commit_and_clean(store, ref):
        if not fired:
            fired.append(ref.version)
            lance_sql.dataset(path).update_config({"b": "2"})
            lance_sql.dataset(path).cleanup_old_versions(older_than=ZERO)
        return real(store, ref)

    monkeypatch.setattr(put_columns, "load_manifest", commit_and_clean)
    try:
        writer.put(pa.table({"id": [2], "v": ["c"]}, schema=schema))
    finally:
        writer.close()
    assert fired
    got = lance_sql.dataset(path).mem_wal.scanner().to_table().sort_by("id")
    assert got.column("id").to_pylist() == [0, 1, 2]


WRITES: dict[str, Callable[[lance_sql.LanceDataset], object]] = {
    "compact": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=1000),
    "delete": lambda ds: ds.delete("id < 3"),
    "update": lambda ds: ds.update({"id": "id + 100"}, where="id < 3"),
    "merge_insert": lambda ds: ds.merge_insert("id").when_matched_update_all()
    .when_not_matched_insert_all().execute(pa.table({"id": pa.array([1, 99], pa.int64())})),
    "index": lambda ds: ds.create_scalar_index("id", "BTREE"),
    "add_columns": lambda ds: ds.add_columns({"twice": "id * 2"}),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_whose_version_is_cleaned_up_while_it_reads_may_retry(
        tmp_path: Path, monkeypatch, write: str) -> None:
    """The write read version 2, the newest; before it read its files an overwrite and
    a cleanup removed them. It raised VersionCleanedUpError, which says a version asked
    for is gone for good; it is a RetryableConflict (its retry succeeds)."""
    from lance_sql.io.local import LocalStore
    path = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), path,
                            max_rows_per_file=2)
    lance_sql.dataset(path).delete("id = 9")
    real = LocalStore.open_source
    raced: list[str] = []

    def overwritten_and_cleaned_first(store, key):
        if not raced and key.startswith("data/"):
            raced.append(key)
            lance_sql.write_dataset(pa.table({"id": pa.array([1, 2, 5], pa.int64())}), path,
                                    mode="overwrite")
            lance_sql.dataset(path).cleanup_old_versions(older_than=ZERO)
        return real(store, key)

    current_runtime().clear()
    monkeypatch.setattr(LocalStore, "open_source", overwritten_and_cleaned_first)
    with pytest.raises(RetryableConflict, match="removed meanwhile: retry"):
        WRITES[write](lance_sql.dataset(path))
    assert raced
    monkeypatch.undo()
    assert sorted(lance_sql.dataset(path).to_table(columns=["id"]).column("id").to_pylist()) \
        == [1, 2, 5]
    WRITES[write](lance_sql.dataset(path))  # the retry
