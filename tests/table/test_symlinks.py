"""Symbolic links never lead out of a table: reads, writes and deletes through a link that
points outside the table root raise PathEscapeError and touch nothing outside, while
links that stay inside the root, and a root reached through a link, keep working."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import PathEscapeError
from lance_sql.io import LocalStore


def make_table(path: Path, versions: int = 3) -> str:
    uri = str(path)
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    for v in range(1, versions):
        lance_sql.write_dataset(pa.table({"id": pa.array([100 + v], pa.int64())}), uri,
                                mode="append")
    return uri


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def move_out_and_link(inside: Path, outside: Path) -> None:
    """Replace ``inside`` (a file or directory of the table) by a link to ``outside``."""
    shutil.move(str(inside), str(outside))
    os.symlink(outside, inside)


def test_a_data_file_linked_outside_is_not_read(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t.lance", versions=1)
    (name,) = os.listdir(os.path.join(uri, "data"))
    move_out_and_link(Path(uri, "data", name), tmp_path / "secret.lance")
    with pytest.raises(PathEscapeError, match="outside the table root"):
        lance_sql.dataset(uri).to_table()
    store = LocalStore(uri)
    for probe in (lambda: store.read(f"data/{name}"), lambda: store.size(f"data/{name}"),
                  lambda: store.open_source(f"data/{name}")):
        with pytest.raises(PathEscapeError):
            probe()


def test_a_linked_transactions_dir_does_not_make_a_commit_write_outside(tmp_path: Path
                                                                        ) -> None:
    uri = make_table(tmp_path / "t.lance")
    outside = tmp_path / "elsewhere"
    move_out_and_link(Path(uri, "_transactions"), outside)
    before = snapshot(outside)
    with pytest.raises(PathEscapeError):
        lance_sql.write_dataset(pa.table({"id": pa.array([7], pa.int64())}), uri,
                                mode="append")
    assert snapshot(outside) == before
    assert lance_sql.dataset(uri).version == 3  # nothing committed


def test_a_linked_versions_dir_is_refused(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t.lance")
    outside = tmp_path / "versions_elsewhere"
    move_out_and_link(Path(uri, "_versions"), outside)
    before = snapshot(outside)
    with pytest.raises(PathEscapeError):
        lance_sql.dataset(uri)
    with pytest.raises(PathEscapeError):
        lance_sql.write_dataset(pa.table({"id": pa.array([7], pa.int64())}), uri,
                                mode="append")
    assert snapshot(outside) == before


def test_cleanup_never_deletes_outside_through_a_linked_directory(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t.lance")
    lance_sql.dataset(uri).delete("id = 3")
    outside = tmp_path / "deletions_elsewhere"
    move_out_and_link(Path(uri, "_deletions"), outside)
    (outside / "unrelated.txt").write_bytes(b"not the table's")
    before, manifests = snapshot(outside), sorted(os.listdir(os.path.join(uri, "_versions")))
    for unverified in (False, True):
        with pytest.raises(PathEscapeError):
            lance_sql.dataset(uri, 1).cleanup_old_versions(older_than=timedelta(0),
                                                           delete_unverified=unverified)
    assert snapshot(outside) == before
    # refused before deleting anything: every version is still there
    assert sorted(os.listdir(os.path.join(uri, "_versions"))) == manifests
    # a linked data directory: the same
    data_outside = tmp_path / "data_elsewhere"
    move_out_and_link(Path(uri, "data"), data_outside)
    data_before = snapshot(data_outside)
    with pytest.raises(PathEscapeError):
        lance_sql.dataset(uri, 1).cleanup_old_versions(older_than=timedelta(0))
    assert snapshot(data_outside) == data_before


def test_store_delete_unlinks_a_link_never_its_target(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "data").mkdir(parents=True)
    target = tmp_path / "precious.bin"
    target.write_bytes(b"keep me")
    os.symlink(target, root / "data" / "link.lance")
    os.symlink(tmp_path, root / "dir_link")
    store = LocalStore(str(root))
    with pytest.raises(PathEscapeError):
        store.delete("dir_link/precious.bin")
    with pytest.raises(PathEscapeError):
        store.put("dir_link/new.bin", b"x")
    with pytest.raises(PathEscapeError):
        store.list_dir("dir_link")
    store.delete("data/link.lance")
    assert target.read_bytes() == b"keep me" and not (root / "dir_link" / "new.bin").exists()
    assert not os.path.lexists(root / "data" / "link.lance")


def test_links_inside_the_root_and_a_linked_root_keep_working(tmp_path: Path) -> None:
    real = tmp_path / "real" / "t.lance"
    real.parent.mkdir()
    make_table(real)
    # a data file moved to another directory of the same table, linked from data/
    name = sorted(os.listdir(real / "data"))[0]
    (real / "moved").mkdir()
    shutil.move(str(real / "data" / name), str(real / "moved" / name))
    os.symlink(Path("..", "moved", name), real / "data" / name)
    # the whole table reached through a link, as /tmp is on some systems
    via = tmp_path / "via"
    os.symlink(tmp_path / "real", via)
    uri = str(via / "t.lance")
    expected = sorted(list(range(10)) + [101, 102])
    assert sorted(lance_sql.dataset(uri).to_table()["id"].to_pylist()) == expected
    lance_sql.write_dataset(pa.table({"id": pa.array([700], pa.int64())}), uri, mode="append")
    lance_sql.dataset(uri).delete("id = 101")
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    expected = sorted([i for i in expected if i != 101] + [700])
    assert sorted(lance_sql.dataset(uri).to_table()["id"].to_pylist()) == expected
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == expected


def test_a_shallow_clone_reads_its_source_through_a_base_path(tmp_path: Path) -> None:
    source = make_table(tmp_path / "src.lance")
    clone = lance_sql.dataset(source).shallow_clone(str(tmp_path / "clone.lance"), 2)
    assert sorted(clone.to_table()["id"].to_pylist()) == sorted(list(range(10)) + [101])
