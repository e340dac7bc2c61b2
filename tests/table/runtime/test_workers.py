"""Read threads belong to the read: however it stops, its workers are joined."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError
from lance_sql.table.read import side_by_side
from lance_sql.table.read.scan import Scanner
from lance_sql.table.runtime.workers import WorkerPool, live_workers

REPO = Path(__file__).resolve().parents[3]


def scan(uri: str, **kwargs: object) -> Scanner:
    """A scanner reading two fragments at a time whatever the machine's cores."""
    scanner = lance_sql.dataset(uri).scanner(**kwargs)
    scanner.num_threads = 2
    return scanner


@pytest.fixture(autouse=True)
def side_by_side_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tables are small, and a scan reads small fragments on the calling thread
    (see side_by_side): here, where the pool itself is tested, every scan uses it."""
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    ids = np.arange(80_000, dtype=np.int64)
    path = tmp_path_factory.mktemp("w") / "t.lance"
    lance_sql.write_dataset(pa.table({"id": ids, "k": ids % 7}), path,
                            max_rows_per_file=10_000)
    return str(path)


def test_scan_threads_are_named_and_gone_after_a_full_read(uri: str) -> None:
    seen: set[str] = set()
    rows = 0
    for batch in scan(uri).to_batches():
        seen.update(t.name for t in live_workers())
        rows += batch.num_rows
    assert rows == 80_000
    assert seen and all(name.startswith("lance_sql-scan") for name in seen)
    assert live_workers() == []


def test_limit_reached_joins_the_workers(uri: str) -> None:
    before = set(threading.enumerate())
    table = scan(uri, filter="k = 3", limit=3).to_table()
    assert table.column("id").to_pylist() == [3, 10, 17]
    assert live_workers() == []
    assert set(threading.enumerate()) <= before


def test_dropped_iterator_joins_the_workers(uri: str) -> None:
    batches = scan(uri).to_batches()
    assert next(batches).num_rows > 0
    assert live_workers()  # reading ahead
    del batches
    assert live_workers() == []


def test_error_mid_scan_joins_the_workers(tmp_path: Path, uri: str) -> None:
    ids = np.arange(40_000, dtype=np.int64)
    path = tmp_path / "broken.lance"
    lance_sql.write_dataset(pa.table({"id": ids}), path, max_rows_per_file=5_000)
    sorted((path / "data").iterdir())[3].unlink()
    with pytest.raises(NotFoundError):
        scan(str(path)).to_table()
    assert live_workers() == []


def test_closing_ordered_results_drops_work_not_started() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.02)
        return i

    with WorkerPool("test", 2) as pool:
        results = pool.ordered(work, range(100), window=4)
        assert next(results) == 0
        results.close()
    assert live_workers() == []
    assert len(started) <= 6  # the window, not the 100 items


def test_a_pool_is_closed_at_exit_without_its_owner(uri: str) -> None:
    """An iterator still reading when the interpreter exits: a clean, prompt exit."""
    script = ("import sys, lance_sql\n"
              "from lance_sql.table.read import side_by_side\n"
              "side_by_side.SIDE_BY_SIDE_MIN_BYTES = 0  # (the pool, as above)\n"
              "it = lance_sql.dataset(sys.argv[1]).to_batches()\n"
              "next(it)\n"
              "print('read one batch')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", script, uri], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "read one batch" and proc.stderr == ""
