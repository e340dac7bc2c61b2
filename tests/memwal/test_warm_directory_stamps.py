"""A warm view skips its version probe, its listing of ``_mem_wal/`` and a region's
manifest probe while the directory keeps the settled stamp it had before the last probe
(see :mod:`lance_sql.memwal.read.warm`). Strong reads still see, at the very next read,
a commit, a new region and a flush made by another process right before, and a commit
made in the same clock tick as the one before (simulated with a one-second clock)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest
from warm_helpers import counting, keyed_table, value

import lance_sql
from lance_sql.io import local
from lance_sql.io.local import LocalStore
from lance_sql.memwal.read import warm

ROOT = Path(__file__).resolve().parents[2]



def _settle() -> None:
    time.sleep(local.STAMP_SETTLED_NS / 1e9 + 0.02)


def _run(script: str, *args: str) -> None:
    """``script`` in another process (its commits are another process's)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


DELETE = """
import sys
import lance_sql
lance_sql.dataset(sys.argv[1]).delete(sys.argv[2])
"""

PUT_AND_FLUSH = """
import sys
import pyarrow as pa
import lance_sql
from lance_sql.memwal.api import MemWal
mw = MemWal(lance_sql.dataset(sys.argv[1]))
keys = [int(k) for k in sys.argv[2].split(",")]
writer = mw.writer()
writer.put(pa.table({"id": pa.array(keys, pa.int64()), "v": [f"w{k}" for k in keys]}))
writer.close()  # the MemTable flushed: a new generation in the region's manifest
"""


def test_warm_reads_skip_probes_while_nothing_changes(tmp_path: Path, monkeypatch) -> None:
    uri, mw = keyed_table(tmp_path, 4)
    with mw.writer() as writer:  # regions with manifests
        writer.put(pa.table({"id": pa.array(range(20, 40), pa.int64()), "v": ["m"] * 20}))
    for key in (7, 8, 9):
        assert value(mw, key) == [f"b{key}"]
    _settle()
    for key in (7, 8, 9):  # probes made, stamps settled: remembered
        assert value(mw, key) == [f"b{key}"]
    listed = counting(monkeypatch, warm, "list_versions")
    names = counting(monkeypatch, LocalStore, "list_dir")
    probed = counting(monkeypatch, LocalStore, "exists_many")
    for key in (7, 8, 9):
        assert value(mw, key) == [f"b{key}"]
    assert listed[0] == names[0] == probed[0] == 0


def test_commit_by_another_process_is_seen_at_once(tmp_path: Path, monkeypatch) -> None:
    uri, mw = keyed_table(tmp_path, 4)
    assert value(mw, 7) == ["b7"]
    _settle()
    assert value(mw, 7) == ["b7"]
    listed = counting(monkeypatch, warm, "list_versions")
    _run(DELETE, uri, "id = 7")  # a new version, committed elsewhere just now
    assert value(mw, 7) == []
    assert listed[0] == 1  # _versions/ moved: probed again
    assert value(mw, 8) == ["b8"]


def test_new_region_and_flush_by_another_process_are_seen(tmp_path: Path) -> None:
    uri, mw = keyed_table(tmp_path, 4)
    with mw.writer() as writer:  # some regions claimed and flushed from here first
        writer.put(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["m1", "m2"]}))
    assert value(mw, 1) == ["m1"]
    _settle()
    assert value(mw, 1) == ["m1"]  # every stamp settled and remembered
    keys = list(range(10, 60))  # every region: new ones and those flushed above
    _run(PUT_AND_FLUSH, uri, ",".join(map(str, keys)))
    got = mw.get({"id": pa.array(keys, pa.int64())})
    assert got.column("v").to_pylist() == [f"w{k}" for k in keys]
    assert [value(mw, k) for k in (1, 2, 10, 11)] == [["m1"], ["m2"], ["w10"], ["w11"]]
    _settle()
    assert value(mw, 12) == ["w12"]
    _run(PUT_AND_FLUSH, uri, "1,2,12")  # only flushes in regions that exist (manifests)
    assert [value(mw, k) for k in (1, 2, 12)] == [["w1"], ["w2"], ["w12"]]


TICK = 1_000_000_000  # the simulated clock's tick: one second


@pytest.fixture
def coarse_clock(monkeypatch) -> None:
    """Directory times that move once a second (a filesystem keeping whole seconds),
    settled by the store's own rule: two changes in one second leave the same stamp."""
    real = LocalStore.directory_stamp
    real_with = LocalStore.stamp_and_identities

    def coarsened(found, started: int):  # type: ignore[no-untyped-def]
        if found is None:
            return None
        dev, ino, mtime, ctime = found[0]
        mtime, ctime = mtime // TICK * TICK, ctime // TICK * TICK
        return (dev, ino, mtime, ctime), local.stamp_settled(mtime, ctime, started)

    def coarse(self: LocalStore, prefix: str):
        started = time.time_ns()
        return coarsened(real(self, prefix), started)

    def coarse_with(self: LocalStore, prefix: str, names,  # type: ignore[no-untyped-def]
                    **options):
        started = time.time_ns()
        found, identities = real_with(self, prefix, names, **options)
        return coarsened(found, started), identities

    monkeypatch.setattr(LocalStore, "directory_stamp", coarse)
    monkeypatch.setattr(LocalStore, "stamp_and_identities", coarse_with)


def _start_of_a_second() -> None:
    """Waits until a second has just begun (the steps after it fit in that second)."""
    time.sleep(1 - (time.time_ns() % TICK) / TICK + 0.01)


def test_commits_in_one_clock_tick_are_seen(tmp_path: Path, coarse_clock: None) -> None:
    uri, mw = keyed_table(tmp_path, 4)
    assert value(mw, 7) == ["b7"]
    for key in (7, 8, 9):
        _start_of_a_second()
        lance_sql.dataset(uri).delete(f"id = {key - 1}")
        assert value(mw, key) == [f"b{key}"]  # a new view
        assert value(mw, key) == [f"b{key}"]  # current: a stamp of this tick, not settled
        lance_sql.dataset(uri).delete(f"id = {key}")  # same tick, so the same stamp
        assert value(mw, key) == []
    _start_of_a_second()
    with mw.writer() as writer:  # one region claimed, its first generation flushed
        writer.put(pa.table({"id": pa.array([50], pa.int64()), "v": ["m50"]}))
    assert value(mw, 50) == ["m50"]
    assert value(mw, 50) == ["m50"]  # current: stamps of this tick, not settled
    keys = list(range(50, 70))  # a new generation there, and new regions, same tick
    with mw.writer() as writer:
        writer.put(pa.table({"id": pa.array(keys, pa.int64()), "v": [f"n{k}" for k in keys]}))
    got = mw.get({"id": pa.array(keys, pa.int64())})
    assert got.column("v").to_pylist() == [f"n{k}" for k in keys]
    assert [value(mw, k) for k in keys] == [[f"n{k}"] for k in keys]


def test_manifest_rewritten_in_place_reopens_the_view(tmp_path: Path, monkeypatch) -> None:
    uri, mw = keyed_table(tmp_path, 4)
    assert value(mw, 7) == ["b7"]
    _settle()
    assert value(mw, 7) == ["b7"]  # the stamp of _versions/ remembered
    opened = counting(monkeypatch, warm, "dataset")
    assert value(mw, 8) == ["b8"]
    assert opened[0] == 0  # nothing changed: the warm view
    manifest = lance_sql.dataset(uri).manifest_key
    path = Path(uri) / manifest
    data = path.read_bytes()
    time.sleep(0.015)  # past a coarse clock's tick
    with open(path, "r+b") as f:  # the same name, the same directory entry: no stamp move
        f.write(data)
    assert value(mw, 8) == ["b8"]
    assert opened[0] == 1  # the manifest is another file now: the version opened again
