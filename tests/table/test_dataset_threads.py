"""A dataset object moves to the version its own writes commit (as pylance's does) while
other threads may be reading through it: at every step of a move they must see one
version, never the version number of one and the manifest of another."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

import lance_sql
from lance_sql.table.dataset import LanceDataset

WAIT = 10.0


_CONTROLS = ("armed", "writer", "seen", "check")


class _PausedMoves(LanceDataset):
    """Each attribute this dataset's writing thread sets while ``armed`` is followed, with
    that thread held, by ``check()`` on another thread (what a reader sees then)."""

    armed = False
    writer: threading.Thread | None = None
    seen: list[Any]

    def check(self) -> Any:
        raise NotImplementedError

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if self.armed and name not in _CONTROLS and threading.current_thread() is self.writer:
            got: list[Any] = []

            def look() -> None:
                try:
                    got.append(self.check())
                except BaseException as exc:  # noqa: BLE001 - the test reports it
                    got.append(exc)

            reader = threading.Thread(target=look)
            reader.start()
            reader.join(WAIT)
            self.seen.append((name, got[0] if got else "no answer"))


def _versions(ds: LanceDataset) -> list[tuple[int, int, str]]:
    """(version, rows, summary) of each version as ``ds.versions()`` lists them."""
    return [(v["version"], v["num_rows"], str(v["metadata"])) for v in ds.versions()]


def test_readers_of_a_moving_dataset_see_one_version_at_a_time(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": list(range(10))}), uri)
    ds = lance_sql.dataset(uri)
    moving = _PausedMoves.__new__(_PausedMoves)
    moving.__dict__.update(ds.__dict__)  # the same dataset, observed
    moving.seen = []

    def check() -> tuple:
        # what the moving dataset says, and the table's versions as a fresh reader lists them
        return (moving.version, moving.count_rows(), _versions(moving),
                _versions(lance_sql.dataset(uri)))

    moving.check = check  # type: ignore[method-assign]
    moving.writer = threading.current_thread()
    moving.armed = True
    moving.delete("id < 3")  # version 2
    moving.armed = False
    assert any(not isinstance(got, BaseException) and got[0] == 2 for _, got in moving.seen), \
        "no reader looked once the dataset had moved"
    for name, got in moving.seen:
        assert not isinstance(got, BaseException), f"after setting {name}: {got!r}"
        version, rows, listed, truth = got
        assert listed == truth, f"after setting {name}: versions() mixed two versions"
        assert rows == dict((v, r) for v, r, _ in truth)[version], name
    assert [v[:2] for v in _versions(lance_sql.dataset(uri))] == [(1, 10), (2, 7)]
    assert moving.version == 2 and moving.count_rows() == 7


def test_takes_through_a_dataset_its_writes_move_match_one_version(tmp_path: Path) -> None:
    """A thread storm: takes by position while the same object deletes and updates rows
    (each take's row count and rows must be one version's)."""
    uri = str(tmp_path / "t.lance")
    n = 20_000
    lance_sql.write_dataset(pa.table({"id": list(range(n)), "v": [i % 97 for i in range(n)]}),
                            uri, max_rows_per_file=5000)
    ds = lance_sql.dataset(uri)
    positions = [0, 1, 2, 100, 5000, 9999]
    writes = 16
    taken: list[tuple[int, ...]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for i in range(writes):
                if i % 2:
                    ds.delete(f"id % 60 = {i}")
                else:
                    ds.update({"v": "v + 1"}, where=f"id % 50 = {i}")
        finally:
            done.set()

    def take() -> None:
        while not done.is_set():
            try:
                taken.append(tuple(ds.take(positions, ["id"]).column("id").to_pylist()))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often: the windows between reads are hit
    try:
        threads = [threading.Thread(target=write)] + [threading.Thread(target=take)
                                                       for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(before)
    assert not errors, errors
    assert ds.version == writes + 1
    answers = {tuple(lance_sql.dataset(uri, v).take(positions, ["id"]).column("id").to_pylist())
               for v in range(1, writes + 2)}
    assert len(taken) > writes
    wrong = [t for t in taken if t not in answers]
    assert not wrong, f"{len(wrong)} of {len(taken)} takes matched no version: {wrong[:3]}"


def test_a_commit_reporting_late_never_moves_the_object_back(tmp_path) -> None:
    """Threads writing through one object: the commit that finishes first may report
    last; the object stays at the newest version it committed."""
    uri = str(tmp_path / "late")
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), uri)
    first = ds.manifest
    ds.delete("id = 1")
    newer = ds.version
    ds._moved_to(first)  # the older commit's report, arriving late
    assert ds.version == newer and ds.count_rows() == 0
