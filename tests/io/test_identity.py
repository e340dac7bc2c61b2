"""ObjectStore.identity: an object written again under the same key is told apart from
the one before it, and a probe of many keys gives what single ``identity`` calls give."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lance_sql.errors import NotFoundError
from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore


def test_a_file_written_again_has_another_identity(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "t"))
    store.put("_versions/1.manifest", b"x" * 100)
    first = store.identity("_versions/1.manifest")
    assert store.identity("_versions/1.manifest") == first
    shutil.rmtree(tmp_path / "t")
    store.put("_versions/1.manifest", b"y" * 100)  # same size, maybe the same inode
    assert store.identity("_versions/1.manifest") != first
    assert store.identities(["_versions/1.manifest", "_versions/2.manifest", "no/such"]) == [
        store.identity("_versions/1.manifest"), None, None]
    with pytest.raises(NotFoundError):
        store.identity("_versions/2.manifest")


def test_identities_follow_links_inside_the_root(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put("a/real", b"data")
    os.symlink(tmp_path / "a" / "real", tmp_path / "a" / "link")
    os.symlink(tmp_path / "a" / "gone", tmp_path / "a" / "dangling")
    assert store.identities(["a/link", "a/dangling"]) == [store.identity("a/real"), None]
    assert store.exists_many(["a/link", "a/dangling", "a/real"]) == [True, False, True]


def test_memory_store_identity(tmp_path: Path) -> None:
    store = MemoryStore(f"identity-{tmp_path.name}")
    try:
        store.put("k", b"one")
        first = store.identity("k")
        store.delete("k")
        store.put("k", b"two")
        assert store.identity("k") != first
        assert store.identities(["k", "missing"]) == [store.identity("k"), None]
    finally:
        MemoryStore.reset(f"identity-{tmp_path.name}")
