"""The latest-version probe from the hint (``versions.latest_version``): the four names it
asks about at once (the hinted version and the next one, in both naming schemes) give
the same answer as a listing of ``_versions/``, and a mixture of schemes next to the
hinted version still sends it to the listing, which reports it. Local stores answer the
four names in one walk (``exists_many``), other stores one name at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from lance_sql.errors import FormatError, NotFoundError
from lance_sql.format.naming import ManifestNaming
from lance_sql.io import LocalStore, MemoryStore
from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import latest_version, list_versions, write_hint


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(str(tmp_path / "t.lance"))
    name = f"probe-{request.node.name}"
    MemoryStore.reset(name)
    return MemoryStore(name)


def _commit(store: ObjectStore, naming: ManifestNaming, *versions: int) -> None:
    for version in versions:
        store.put(naming.key(version), b"manifest")


def _listed(store: ObjectStore) -> tuple[int, ManifestNaming]:
    ref = list_versions(store)[-1]
    return ref.version, ref.naming


@pytest.mark.parametrize("naming", [ManifestNaming.V2, ManifestNaming.V1])
def test_the_probe_equals_the_listing(store: ObjectStore, naming: ManifestNaming) -> None:
    with pytest.raises(NotFoundError):
        latest_version(store)
    _commit(store, naming, 1, 2, 3)
    for hint in (None, 3, 2, 1, 9):  # none, exact, stale by one and two, past the end
        if hint is not None:
            write_hint(store, hint)
        ref = latest_version(store)
        assert (ref.version, ref.naming) == _listed(store) == (3, naming), hint
    _commit(store, naming, 4, 5)  # committed after the hint (3 or 9) was written
    write_hint(store, 3)
    ref = latest_version(store)
    assert (ref.version, ref.naming) == _listed(store) == (5, naming)


@pytest.mark.parametrize("naming", [ManifestNaming.V2, ManifestNaming.V1])
@pytest.mark.parametrize("where", ["next", "same", "after a commit"])
def test_a_mixture_next_to_the_hint_is_reported(store: ObjectStore, naming: ManifestNaming,
                                                where: str) -> None:
    other = ManifestNaming.V1 if naming is ManifestNaming.V2 else ManifestNaming.V2
    _commit(store, naming, 1, 2, 3)
    write_hint(store, 3)
    if where == "next":
        _commit(store, other, 4)  # a writer of the other scheme committed next
    elif where == "same":
        _commit(store, other, 3)
    else:
        _commit(store, naming, 4)
        _commit(store, other, 5)
    with pytest.raises(FormatError, match="V1 and V2"):
        latest_version(store)


def test_exists_many_equals_exists(tmp_path: Path) -> None:
    """A local store's batched answer equals ``exists`` key by key, across directories,
    missing directories, a file used as a directory and links; a link out of the root
    is refused as ``exists`` refuses it."""
    from lance_sql.errors import PathEscapeError

    root = tmp_path / "root"
    store = LocalStore(str(root))
    store.put("a/x", b"1")
    store.put("b/y", b"2")
    (root / "a" / "link").symlink_to(root / "b" / "y")
    (root / "a" / "dangling").symlink_to(root / "b" / "nothing")
    (root / "linked_dir").symlink_to(root / "b")
    keys = ["a/x", "a/missing", "b/y", "a/link", "a/dangling", "linked_dir/y",
            "linked_dir/z", "none/x", "a/x/below", "top", "a"]
    assert store.exists_many(keys) == [store.exists(k) for k in keys]
    assert store.exists_many(keys) == [True, False, True, True, False, True, False, False,
                                       False, False, True]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"s")
    (root / "a" / "out").symlink_to(outside / "f")
    with pytest.raises(PathEscapeError):
        store.exists_many(["a/x", "a/out"])


def test_a_local_probe_walks_versions_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """Nothing committed since the hint: the hint's read (two segments) and one walk of
    ``_versions/`` with an ``lstat`` per name asked (four) — 7 ``lstat`` calls, where
    one walk per name took 10 — and no ``stat``."""
    import os

    store = LocalStore(str(tmp_path / "t.lance"))
    _commit(store, ManifestNaming.V2, 1, 2)
    write_hint(store, 2)
    latest_version(store)  # the root's real path is resolved once and kept
    calls: dict[str, int] = {"lstat": 0, "stat": 0}
    real_lstat, real_stat = os.lstat, os.stat

    def lstat(*args: object, **kwargs: object) -> os.stat_result:
        calls["lstat"] += 1
        return real_lstat(*args, **kwargs)  # type: ignore[arg-type]

    def stat(*args: object, **kwargs: object) -> os.stat_result:
        calls["stat"] += 1
        return real_stat(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "stat", stat)
    assert latest_version(store).version == 2
    assert calls == {"lstat": 7, "stat": 0}
