"""Ctrl-C cancels a running query: ``lance-sql sql`` exits 130, the shell returns to its
prompt, and Python gets its KeyboardInterrupt with the query's scans stopped.

The long query is a join DataFusion runs as a nested loop: it holds the thread that
polls it for minutes, so without the session's worker thread SIGINT was never seen.
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql

LANCE_SQL = [sys.executable, "-m", "lance_sql.cli.main"]
# ~9 * 10^10 comparisons: minutes of work, and no hash join to speed it up.
NESTED_LOOP = "SELECT count(*) AS n FROM t a, t b WHERE a.x + b.x = -1"
HASH_JOIN = "SELECT count(*) AS n FROM t a JOIN t b ON a.x % 100 = b.x % 100"
PROMPT_S = 5.0  # how soon an interrupted query must give control back


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interrupt")
    lance_sql.write_dataset(pa.table({"x": pa.array(range(300_000), pa.int64())}),
                            root / "t.lance")
    return root


class Terminal:
    """A process on a pseudo-terminal, read as it writes."""

    def __init__(self, argv: list[str]) -> None:
        self.leader, follower = os.openpty()
        env = dict(os.environ, TERM="dumb", LANCE_SQL_HISTORY=os.devnull)
        self.proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower,
                                     env=env, close_fds=True, start_new_session=True)
        os.close(follower)
        self.seen = b""

    def read_until(self, marker: bytes, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while marker not in self.seen and time.monotonic() < deadline:
            ready, _, _ = select.select([self.leader], [], [], 0.05)
            if ready:
                try:
                    self.seen += os.read(self.leader, 65536)
                except OSError:
                    break
        assert marker in self.seen, self.seen[-2000:].decode(errors="replace")
        self.seen = self.seen[self.seen.index(marker) + len(marker):]

    def write(self, data: bytes) -> None:
        os.write(self.leader, data)

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.leader], [], [], 0.05)
            if ready:
                try:
                    self.seen += os.read(self.leader, 65536)
                except OSError:
                    pass
        return self.proc.poll()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.leader)


def test_ctrl_c_stops_lance_sql_sql_with_exit_130(root: Path) -> None:
    term = Terminal([*LANCE_SQL, "sql", str(root), f"SELECT 'go' AS ready; {NESTED_LOOP}"])
    try:
        term.read_until(b"go")
        term.read_until(b"0 rows, 0 batches")  # the progress line: the join is running
        term.proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        code = term.wait(PROMPT_S + 10)
        elapsed = time.monotonic() - started
        assert code == 130, term.seen.decode(errors="replace")
        assert elapsed < PROMPT_S, elapsed
        assert b"interrupted" in term.seen and b"Traceback" not in term.seen
    finally:
        term.close()


@pytest.mark.slow
def test_ctrl_c_in_the_shell_returns_to_the_prompt(root: Path) -> None:
    term = Terminal([*LANCE_SQL, "shell", str(root)])
    try:
        term.read_until(b"lance-sql> ")
        term.write(NESTED_LOOP.encode() + b";\r")
        term.read_until(b"0 rows, 0 batches")
        term.proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        term.read_until(b"interrupted", timeout=PROMPT_S + 10)
        term.read_until(b"lance-sql> ")
        assert time.monotonic() - started < PROMPT_S
        term.write(b"SELECT 41 + 1 AS answer;\r")
        term.read_until(b"42")
        term.read_until(b"lance-sql> ")
        term.write(b".quit\r")
        assert term.wait(30) == 0
        assert b"Traceback" not in term.seen
    finally:
        term.close()


def test_keyboard_interrupt_during_to_arrow_table(root: Path) -> None:
    """In a fresh interpreter, SIGINT during ``to_arrow_table()`` raises KeyboardInterrupt."""
    code = f"""
import os, sys, time, lance_sql
df = lance_sql.connect({str(root)!r}).sql({NESTED_LOOP!r})
print("running", flush=True)
try:
    df.to_arrow_table()
except KeyboardInterrupt:
    print("interrupted", True, flush=True)
    os._exit(0)
os._exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "running\n"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = proc.communicate(timeout=PROMPT_S + 20)
        assert time.monotonic() - started < PROMPT_S, (out, err)
        assert (proc.returncode, out) == (0, "interrupted True\n"), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_interrupting_a_query_stops_its_scans(root: Path) -> None:
    """The cancelled query's worker ends: its Lance scans refuse further batches."""
    df = lance_sql.connect(root).sql(HASH_JOIN)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            df.to_arrow_table()
    finally:
        timer.cancel()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            t.name == "lance-sql-query" and t.is_alive() for t in threading.enumerate()):
        time.sleep(0.05)
    assert not any(t.name == "lance-sql-query" and t.is_alive() for t in threading.enumerate())


SLOW_FEW_ROWS = ("SELECT a.x FROM t a JOIN t b ON a.x % 100 = b.x % 100 "
                 "WHERE a.x + b.x < 1000")


@pytest.mark.parametrize("statement", [
    f"CREATE TABLE interrupted AS {SLOW_FEW_ROWS}",
    f"INSERT INTO target {SLOW_FEW_ROWS}",
])
def test_an_interrupted_write_leaves_the_table_as_it_was(root: Path, statement: str) -> None:
    target = root / "target.lance"
    if not target.exists():
        lance_sql.write_dataset(pa.table({"x": pa.array([1], pa.int64())}), target)
    files_before = sorted(os.listdir(target / "data"))
    session = lance_sql.connect(root)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.sql(statement)
    finally:
        timer.cancel()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            t.name == "lance-sql-query" and t.is_alive() for t in threading.enumerate()):
        time.sleep(0.05)
    assert not (root / "interrupted.lance").exists()
    assert lance_sql.dataset(target).version == 1
    assert sorted(os.listdir(target / "data")) == files_before
