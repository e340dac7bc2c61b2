"""When a decode may spread over helper threads (format/datafile/parallel.py)."""

from __future__ import annotations

import threading

import pytest

from lance_sql.format.datafile import parallel


def _thread_names(items: int) -> set[str]:
    """Names of the threads that ran ``map_parts`` over ``items`` parts."""
    seen: set[str] = set()
    lock = threading.Lock()
    barrier_hit = threading.Event()

    def part(_: int) -> int:
        with lock:
            seen.add(threading.current_thread().name)
        barrier_hit.wait(0.05)  # keep each part busy long enough for helpers to join in
        return 0

    parallel.map_parts(part, range(items))
    return seen


@pytest.fixture
def three_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "threads", lambda: 3)


@pytest.mark.usefixtures("three_threads")
def test_a_decode_with_the_cores_to_itself_uses_helpers() -> None:
    names = _thread_names(12)
    assert any(n.startswith(parallel.THREAD_NAME) for n in names)
    assert threading.current_thread().name in names


@pytest.mark.usefixtures("three_threads")
def test_a_decode_on_a_scan_worker_stays_on_its_thread() -> None:
    out: list[set[str]] = []
    worker = threading.Thread(target=lambda: out.append(_thread_names(12)),
                              name="lance_sql-scan_0")
    worker.start()
    worker.join()
    assert out == [{"lance_sql-scan_0"}]


@pytest.mark.usefixtures("three_threads")
def test_a_second_decode_runs_alone_while_the_first_holds_helpers() -> None:
    inside = threading.Event()
    release = threading.Event()
    second: list[set[str]] = []

    def first_part(i: int) -> int:
        if i == 0:
            inside.set()
            release.wait(10)
        return i

    first = threading.Thread(target=parallel.map_parts, args=(first_part, range(4)),
                             name="reader-1")
    first.start()
    assert inside.wait(10)
    other = threading.Thread(target=lambda: second.append(_thread_names(12)),
                             name="reader-2")
    other.start()
    other.join(10)
    release.set()
    first.join(10)
    assert second == [{"reader-2"}]
    # once the first is done, a decode may spread again
    assert any(n.startswith(parallel.THREAD_NAME) for n in _thread_names(12))


@pytest.mark.usefixtures("three_threads")
def test_produce_then_place_on_a_worker_places_in_order_on_its_thread() -> None:
    placed: list[tuple[int, int, str]] = []

    def produce(i: int) -> tuple[int, int]:
        return i, i + 1

    def place(i: int, result: int, at: int) -> None:
        placed.append((i, at, threading.current_thread().name))

    def run() -> None:
        parallel.produce_then_place(produce, place, range(5))

    worker = threading.Thread(target=run, name="lance_sql-scan_1")
    worker.start()
    worker.join()
    assert placed == [(i, i * (i + 1) // 2, "lance_sql-scan_1") for i in range(5)]
