"""ObjectStore.directory_stamp: a local directory's stamp moves whenever an entry is added,
removed or replaced, tells a directory made again from the one before, and is settled
only once the directory's times lie well before the call (a listing may be remembered
under it then); links are followed inside the root and refused out of it."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from lance_sql.errors import PathEscapeError
from lance_sql.io import local
from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore


def _settle() -> None:
    time.sleep(local.STAMP_SETTLED_NS / 1e9 + 0.02)


def test_stamp_moves_with_every_entry_change(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "t"))
    store.put("_versions/1.manifest", b"x")
    _settle()
    found = store.directory_stamp("_versions")
    assert found is not None and found[1]  # unchanged for a while: settled
    stamp = found[0]
    assert store.directory_stamp("_versions") == (stamp, True)  # reading changes nothing
    store.read("_versions/1.manifest")
    assert store.directory_stamp("_versions") == (stamp, True)
    changes = [lambda: store.put("_versions/2.manifest", b"y"),  # a new entry
               lambda: store.put("_versions/2.manifest", b"z"),  # replaced (renamed over)
               lambda: store.put_if_absent("_versions/3.manifest", b"w"),
               lambda: store.delete("_versions/1.manifest")]
    for change in changes:
        before = store.directory_stamp("_versions")
        time.sleep(0.015)  # past a coarse clock's tick (kernels without fine-grained times)
        change()
        after = store.directory_stamp("_versions")
        assert before is not None and after is not None and after[0] != before[0]
        assert not after[1]  # changed just now: not settled


def test_a_directory_made_again_has_another_stamp(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "t"))
    store.put("_versions/1.manifest", b"x")
    _settle()
    first = store.directory_stamp("_versions")
    shutil.rmtree(tmp_path / "t")
    assert store.directory_stamp("_versions") is None  # gone
    store.put("_versions/1.manifest", b"x")  # the same names again
    again = store.directory_stamp("_versions")
    assert first is not None and again is not None and again[0] != first[0]


def test_unchanged_directory_is_not_settled_at_first(tmp_path: Path, monkeypatch) -> None:
    store = LocalStore(str(tmp_path / "t"))
    store.put("d/a", b"x")
    found = store.directory_stamp("d")
    assert found is not None and not found[1]
    monkeypatch.setattr(local, "STAMP_SETTLED_NS", 0)
    found = store.directory_stamp("d")
    assert found is not None and found[1]
    # a directory whose times lie ahead of the clock (a clock set back) is never settled
    future = time.time_ns() + 10**12
    os.utime(tmp_path / "t" / "d", ns=(future, future))
    found = store.directory_stamp("d")
    assert found is not None and not found[1]


def test_missing_file_and_linked_directories(tmp_path: Path) -> None:
    root = tmp_path / "t"
    store = LocalStore(str(root))
    store.put("d/a", b"x")
    assert store.directory_stamp("missing") is None
    assert store.directory_stamp("missing/deeper") is None
    assert store.directory_stamp("d/a") is None  # a file, not a directory
    assert store.directory_stamp("") is not None  # the root
    os.symlink(root / "d", root / "inside")
    inside, real = store.directory_stamp("inside"), store.directory_stamp("d")
    assert inside is not None and real is not None and inside[0] == real[0]
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "out")
    with pytest.raises(PathEscapeError):
        store.directory_stamp("out")


def test_memory_store_has_no_stamps(tmp_path: Path) -> None:
    store = MemoryStore(f"stamp-{tmp_path.name}")
    try:
        store.put("d/a", b"x")
        assert store.directory_stamp("d") is None
    finally:
        MemoryStore.reset(f"stamp-{tmp_path.name}")


def test_times_in_whole_seconds_settle_a_coarse_tick_later() -> None:
    """A filesystem keeping whole seconds stamps a change made up to a second (FAT: two)
    after its time: such times are settled only once that tick has surely passed; fine
    times after the usual margin."""
    second = 1_000_000_000
    now = 1_700_000_000 * second + 400_000_000
    fine = now - local.STAMP_SETTLED_NS - 1
    assert local.stamp_settled(fine, fine, now)
    whole = (now // second - 1) * second  # 1.4 s ago, in whole seconds
    assert not local.stamp_settled(whole, whole, now)
    old = (now // second - 3) * second
    assert local.stamp_settled(old, old, now)
    assert local.stamp_settled(whole, whole + 1, now)  # one time finer: a fine clock
    assert not local.stamp_settled(old, now - 1, now)  # the later of the two times rules


def test_stamp_and_identities_answer_as_the_two_calls(tmp_path: Path) -> None:
    """One walk of the directory for its stamp and its files' identities: the same
    answers as directory_stamp and identities asked one after the other, links to files
    followed inside the root and refused out of it."""
    root = tmp_path / "t"
    store = LocalStore(str(root))
    store.put("d/e/a", b"x")
    store.put("d/e/b", b"yy")
    (tmp_path / "secret").write_bytes(b"s")
    os.symlink(root / "d" / "e" / "a", root / "d" / "e" / "to_a")
    _settle()
    names = ["a", "b", "missing", "to_a"]
    got = store.stamp_and_identities("d/e", names)
    assert got == (store.directory_stamp("d/e"),
                   store.identities([f"d/e/{n}" for n in names]))
    assert got[1][0] is not None and got[1][3] == got[1][0] and got[1][2] is None
    store.put("d/e/c", b"z")  # a new entry: a new stamp, and c found
    after = store.stamp_and_identities("d/e", ["c"])
    assert after[0] is not None and after[0][0] != got[0][0]  # type: ignore[index]
    assert after[1] == store.identities(["d/e/c"]) and after[1][0] is not None
    assert store.stamp_and_identities("missing", ["a"]) == (None, [None])
    assert store.stamp_and_identities("d/e/a", ["x"]) == (None, [None])  # a file
    assert store.stamp_and_identities("", ["d"])[0] == store.directory_stamp("")
    os.symlink(tmp_path / "secret", root / "d" / "e" / "out")
    with pytest.raises(PathEscapeError):
        store.stamp_and_identities("d/e", ["out"])
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "d" / "away")
    with pytest.raises(PathEscapeError):
        store.stamp_and_identities("d/away", ["a"])


def test_identities_beside_a_stamp_only_are_not_asked_of_a_store_without_stamps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``if_stamped``: a store that keeps no directory stamps (memory, object stores) is
    asked for no identity a caller would drop (a strong read's check of _versions/);
    without it the identities still come."""
    name = f"stamp-identities-{uuid.uuid4().hex}"  # its own bucket, forgotten after
    store = MemoryStore(name)
    try:
        store.put("_versions/1.manifest", b"m")
        asked: list[list[str]] = []
        inner = store.identities

        def counted(keys: list[str]) -> list[object]:
            asked.append(list(keys))
            return inner(keys)

        monkeypatch.setattr(store, "identities", counted)
        assert store.stamp_and_identities("_versions", ["1.manifest"], if_stamped=True) == \
            (None, [None])
        assert asked == []
        stamp, seen = store.stamp_and_identities("_versions", ["1.manifest"])
        assert stamp is None and asked == [["_versions/1.manifest"]]
        assert seen == inner(["_versions/1.manifest"])
    finally:
        MemoryStore.reset(name)


def test_if_stamped_gives_no_identities_of_a_missing_local_directory(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "t"))
    store.put("d/a", b"x")
    assert store.stamp_and_identities("e", ["a"], if_stamped=True) == (None, [None])
    stamp, seen = store.stamp_and_identities("d", ["a"], if_stamped=True)
    assert stamp == store.directory_stamp("d") and seen == store.identities(["d/a"])
