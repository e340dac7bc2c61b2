"""Object stores: atomic create, path safety, fault hooks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lance_sql.errors import NotFoundError, PathEscapeError
from lance_sql.io import LocalStore, MemoryStore, open_store


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    name = f"stores-{request.node.name}"
    MemoryStore.reset(name)
    return MemoryStore(name)


def test_put_read_list_delete(store) -> None:
    store.put("a/b.bin", b"hello")
    assert store.read("a/b.bin") == b"hello"
    assert store.size("a/b.bin") == 5
    assert store.list_dir("a") == ["b.bin"]
    assert store.open_source("a/b.bin").read_at(1, 3) == b"ell"
    store.delete("a/b.bin")
    assert not store.exists("a/b.bin")
    with pytest.raises(NotFoundError):
        store.read("a/b.bin")


def test_put_if_absent_has_exactly_one_winner(store) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        results.append(store.put_if_absent("v/1.manifest", f"writer {i}".encode()))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert store.read("v/1.manifest").startswith(b"writer ")


def test_rename_if_absent(store) -> None:
    store.put("staging/x", b"1")
    store.put("final/y", b"old")
    assert store.rename_if_absent("staging/x", "final/y") is False
    assert store.read("final/y") == b"old"
    assert store.rename_if_absent("staging/x", "final/z") is True
    assert store.read("final/z") == b"1"
    assert not store.exists("staging/x")


@pytest.mark.parametrize("key", ["../x", "a/../../x", "/etc/passwd", "a/./b", "", "a\\b"])
def test_keys_cannot_escape_the_root(store, key: str) -> None:
    with pytest.raises(PathEscapeError):
        store.read(key)
    with pytest.raises(PathEscapeError):
        store.put(key, b"x")


def test_failed_stream_write_leaves_nothing(store) -> None:
    with pytest.raises(RuntimeError):
        with store.open_writer("data/f.lance") as sink:
            sink.write(b"partial")
            raise RuntimeError("boom")
    assert not store.exists("data/f.lance")
    assert store.list_dir("data") == []
    with store.open_writer("data/g.lance") as sink:
        sink.write(b"whole")
    assert store.read("data/g.lance") == b"whole"


def test_memory_hooks_inject_faults() -> None:
    MemoryStore.reset("hooks")
    store = MemoryStore("hooks")

    def fail_manifests(op: str, key: str) -> None:
        if op == "put_if_absent" and key.endswith(".manifest"):
            raise OSError("injected")

    store.add_hook(fail_manifests)
    store.put("data/a", b"1")
    with pytest.raises(OSError, match="injected"):
        store.put_if_absent("_versions/1.manifest", b"m")
    assert store.keys() == ["data/a"]


def test_open_store_uris(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    mem = open_store("memory://bucket/prefix")
    assert isinstance(mem, MemoryStore) and mem.uri == "memory://bucket/prefix"
    with pytest.raises(ValueError):
        open_store("s3://bucket/table")


def test_delete_prefix_removes_a_tree(store) -> None:
    for key in ("gen/a", "gen/sub/b", "gen/sub/deeper/c", "keep/d"):
        store.put(key, b"x")
    store.delete_prefix("gen")
    assert store.list_dir("gen") == [] and store.read("keep/d") == b"x"
    store.delete_prefix("absent")  # nothing there: nothing happens


def test_local_delete_prefix_never_leaves_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    store = LocalStore(str(tmp_path / "root"))
    store.put("gen/a", b"x")
    (tmp_path / "root" / "gen" / "link").symlink_to(outside)
    store.delete_prefix("gen")
    assert (outside / "precious").read_bytes() == b"keep me"
    assert not (tmp_path / "root" / "gen").exists()
    with pytest.raises(PathEscapeError):
        store.delete_prefix("")


def test_local_delete_prefix_on_a_link_removes_only_the_link(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"))
    store.put("data/keep.lance", b"x")
    (tmp_path / "root" / "a_gen_1").symlink_to(tmp_path / "root" / "data")
    store.delete_prefix("a_gen_1")
    assert store.read("data/keep.lance") == b"x"
    assert not (tmp_path / "root" / "a_gen_1").is_symlink()


def test_local_read_ranges_equal_read_at(tmp_path: Path) -> None:
    """A local file's ``read_ranges`` gives the bytes of each range back to back, as
    ``read_at`` of each; a range outside the file is a ``FormatError``; a reader's
    ``ranges`` over a source without ``read_ranges`` gives the same bytes."""
    import numpy as np

    from lance_sql.errors import FormatError
    from lance_sql.format.datafile import BytesSource
    from lance_sql.format.datafile.source import SourceReads
    from lance_sql.io.local import LocalSource

    data = np.random.default_rng(0).integers(0, 256, 200_000).astype(np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    source = LocalSource(str(tmp_path / "f"))
    offsets = np.array([0, 5, 70_000, 199_990, 1234, 100_000], np.int64)
    lengths = np.array([3, 0, 65_536, 10, 99, 1], np.int64)
    expected = b"".join(data[o : o + n] for o, n in zip(offsets, lengths, strict=True))
    assert source.read_ranges(offsets, lengths).tobytes() == expected
    assert SourceReads(source).ranges(offsets, lengths).tobytes() == expected
    assert SourceReads(BytesSource(data)).ranges(offsets, lengths).tobytes() == expected
    for bad_offset, bad_length in ((199_999, 2), (-1, 1), (0, -1), (2**62, 2**62)):
        with pytest.raises(FormatError):
            source.read_ranges(np.array([0, bad_offset]), np.array([1, bad_length]))
    source.close()


def test_local_exists_answers_from_the_walk_as_a_stat_would(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """``exists`` takes its answer from the ``lstat`` of the path's last segment (no
    second ``stat``) except for a link, whose target it checks; every answer equals
    ``os.path.exists`` of the path, and a link out of the root is still refused."""
    import os

    root = tmp_path / "root"
    store = LocalStore(str(root))
    store.put("dir/file", b"x")
    (root / "dir" / "inner_link").symlink_to(root / "dir" / "file")
    (root / "dir" / "dangling").symlink_to(root / "dir" / "nothing")
    (root / "dir_link").symlink_to(root / "dir")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (root / "escape").symlink_to(outside)
    cases = ["dir/file", "dir", "dir/missing", "missing/file", "dir/file/below",
             "dir/inner_link", "dir/dangling", "dir_link/file", "dir_link/missing",
             "dir//file", "dir/"]
    for key in cases:
        assert store.exists(key) == os.path.exists(root / key.rstrip("/")), key
    with pytest.raises(PathEscapeError):
        store.exists("escape/secret")
    with pytest.raises(PathEscapeError):
        store.exists("dir/../../outside/secret")
    stats: list[object] = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: stats.append(a) or real_stat(*a, **k))
    assert store.exists("dir/file") and not store.exists("dir/missing")
    assert store.exists("dir") and not store.exists("missing/file")
    assert stats == []  # answered by the walk's lstat
    assert store.exists("dir/inner_link") and not store.exists("dir/dangling")
    assert len(stats) == 2  # a link's target is checked
