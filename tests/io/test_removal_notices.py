"""A local store tells the caches above it what it deleted (a file, or a whole tree),
spelt as its sources spell the files they open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lance_sql.io import LocalStore, descriptors


@pytest.fixture
def heard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    got: list[tuple[str, bool]] = []
    monkeypatch.setattr(descriptors, "_removal_listeners",
                        [*descriptors._removal_listeners, lambda p, t: got.append((p, t))])
    yield got


def test_deletes_are_heard(tmp_path: Path, heard: list[tuple[str, bool]]) -> None:
    store = LocalStore(str(tmp_path))
    store.put("t.lance/data/a.lance", b"x")
    store.put("t.lance/data/b.lance", b"x")
    source = store.open_source("t.lance/data/a.lance")
    store.delete("t.lance/data/a.lance")
    store.delete_prefix("t.lance")
    assert heard == [(source.path, False), (f"{store.root}/t.lance", True)]
    assert source.unlinked()
    source.close()
    assert source.unlinked()  # closed: holds nothing worth keeping


def test_a_live_file_is_not_unlinked(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put("a", b"x" * 100_000)
    source = store.open_source("a")
    assert not source.unlinked()
    source.close()
