"""When a decode may spread over helper threads (format/datafile/parallel.py)."""

from __future__ import annotations

import threading
import time

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
def test_a_decode_inside_no_helpers_stays_on_its_thread_and_only_there() -> None:
    """no_helpers() keeps this thread's decodes on it (nested, and restored after); a
    thread outside the block, and no_helpers(False), still spread."""
    here = threading.current_thread().name
    elsewhere: list[set[str]] = []
    with parallel.no_helpers():
        assert _thread_names(12) == {here}
        with parallel.no_helpers(False):  # an inner "not alone" keeps the outer's
            assert _thread_names(12) == {here}
        other = threading.Thread(target=lambda: elsewhere.append(_thread_names(12)))
        other.start()
        other.join()
        assert _thread_names(12) == {here}
    assert any(n.startswith(parallel.THREAD_NAME) for n in elsewhere[0])
    assert any(n.startswith(parallel.THREAD_NAME) for n in _thread_names(12))
    with parallel.no_helpers(False):
        assert any(n.startswith(parallel.THREAD_NAME) for n in _thread_names(12))


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


def _no_helper_alive() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


@pytest.mark.usefixtures("three_threads")
def test_begun_work_runs_on_helpers_while_the_caller_does_other_work() -> None:
    """Items begun run on helpers before the caller asks for them (the caller is still
    busy elsewhere); finish gives the results in item order; no helper outlives it."""
    started = threading.Event()
    names: list[str] = []

    def part(i: int) -> int:
        names.append(threading.current_thread().name)
        started.set()
        return i * i

    job: parallel.Begun[int] = parallel.Begun(4)
    assert job.count == 3
    try:
        job.start(part, range(4))
        assert started.wait(10)  # a helper took an item while the caller waited here
        assert all(n.startswith(parallel.THREAD_NAME) for n in names[:1])
        assert job.finish() == [0, 1, 4, 9]
    finally:
        job.close()
    assert _no_helper_alive()


@pytest.mark.usefixtures("three_threads")
def test_begun_work_on_a_busy_machine_waits_for_the_caller() -> None:
    """With no idle CPU (idle_only), nothing runs until finish, on the caller alone."""
    import unittest.mock as mock

    names: list[str] = []
    with mock.patch.object(parallel, "idle_cpus", lambda: 0):
        job: parallel.Begun[int] = parallel.Begun(4, idle_only=True)
    assert job.count == 1
    job.start(lambda i: names.append(threading.current_thread().name) or i, range(4))
    assert names == []
    assert job.finish() == [0, 1, 2, 3]
    assert set(names) == {threading.current_thread().name}


@pytest.mark.usefixtures("three_threads")
def test_begun_work_closed_unfinished_joins_its_helpers_and_errors_are_raised() -> None:
    """Closing without finishing (the caller failed elsewhere) stops the handing out and
    joins the helpers; a second decode may then spread again. An item's error is
    raised by finish, once every helper has stopped."""
    release = threading.Event()
    ran: list[int] = []

    def slow(i: int) -> int:
        ran.append(i)
        release.wait(10)
        return i

    job: parallel.Begun[int] = parallel.Begun(50)
    job.start(slow, range(50))
    closer = threading.Thread(target=job.close)
    closer.start()  # stops the handing out, then waits for the two items under way
    while not job._queue._stopped:  # type: ignore[union-attr]
        time.sleep(0.001)
    release.set()
    closer.join(10)
    job.close()  # a second close does nothing
    assert _no_helper_alive() and len(ran) <= 2  # at most the items under way ran
    assert any(n.startswith(parallel.THREAD_NAME) for n in _thread_names(12))

    def failing(i: int) -> int:
        if i == 5:
            raise ValueError("item 5")
        return i

    job = parallel.Begun(10)
    job.start(failing, range(10))
    with pytest.raises(ValueError, match="item 5"):
        job.finish()
    assert _no_helper_alive()
