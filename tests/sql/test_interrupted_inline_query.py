"""Ctrl-C during a small query run on the calling thread: the KeyboardInterrupt keeps
nothing of the query. Raised while the cancelled query's error was being handled, it
kept that error as its context, whose traceback pinned the query's scans: an uncaught
interrupt then held the interpreter's exit ~30 s (waiting for them) and warned."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lance_sql

SCRIPT = textwrap.dedent('''
    import os, signal, sys
    import numpy as np, pyarrow as pa
    import lance_sql
    from lance_sql.sql import streams
    from lance_sql.table.read import scan

    root = sys.argv[1]
    ids = np.arange(200_000)
    lance_sql.write_dataset(pa.table({"id": ids, "f": ids % 10 / 10}), root + "/m.lance",
                            max_rows_per_file=40_000)
    session = lance_sql.connect(root)
    real = scan._scan_compared
    calls = []

    def interrupted(*args, **kwargs):  # Ctrl-C lands while the query reads a fragment
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    scan._scan_compared = interrupted
    try:
        session.sql("SELECT * FROM m WHERE f > 0.3 LIMIT 10").to_arrow_table()
    except KeyboardInterrupt as exc:
        print("context", exc.__context__ is None and exc.__cause__ is None, flush=True)
        print("held", streams.held_units(), flush=True)
        if sys.argv[2] == "uncaught":
            raise
    print("done", flush=True)
''')


def _run(root: Path, mode: str) -> tuple[subprocess.CompletedProcess, float]:
    package = str(Path(lance_sql.__file__).parent.parent)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(root), mode],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": package, "PATH": ""})
    return done, time.monotonic() - started


def test_the_interrupt_keeps_no_scan_alive(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, "caught")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "context True" in done.stdout and "held 0" in done.stdout, done.stdout
    assert "still held by DataFusion" not in done.stderr


def test_an_uncaught_interrupt_exits_at_once(tmp_path: Path) -> None:
    done, took = _run(tmp_path, "uncaught")
    assert done.returncode in (-2, 130, 1) and "KeyboardInterrupt" in done.stderr, \
        done.stderr[-2000:]
    assert "still held by DataFusion" not in done.stderr
    assert took < 20, f"exit took {took:.1f} s"
