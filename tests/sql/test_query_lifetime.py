"""A query's scans end with the query: stopping early, failing or exiting never aborts.

DataFusion runs our scans on its own threads. A query that stopped early (LIMIT) or
failed used to return while those threads were still in our code; at interpreter exit
they were forced out and the process aborted ("FATAL: exception not rethrown", exit
status 134). Each scenario runs in fresh processes, many times, through the Python API
and the CLI; in-process tests check that nothing of a finished query is left running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError, QueryError
from lance_sql.sql.session import connect
from lance_sql.sql.streams import (
    held_units,
    running_scans,
    thread_state,
    thread_states,
    wait_for_idle_engine,
)
from lance_sql.table.read import side_by_side

ROWS = 300_000
LIMIT_QUERY = "SELECT id FROM m WHERE k = 3 LIMIT 3"
REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = str(Path(lance_sql.__file__).resolve().parent)


def _write(root: Path) -> Path:
    ids = np.arange(ROWS, dtype=np.int64)
    table = pa.table({"id": ids, "k": ids % 7, "s": pa.array(ids.astype(str))})
    lance_sql.write_dataset(table, root / "m.lance", max_rows_per_file=50_000)
    return root


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``ok``: table m, 300k rows in 6 fragments; ``broken``: the same without one data
    file (its scan fails mid-stream)."""
    ok = _write(tmp_path_factory.mktemp("ok"))
    broken = tmp_path_factory.mktemp("broken")
    shutil.copytree(ok / "m.lance", broken / "m.lance")
    files = sorted((broken / "m.lance" / "data").iterdir())
    files[2].unlink()
    return {"ok": ok, "broken": broken}


def threads_in_lance_sql() -> list[str]:
    """Threads other than this one that are running lance_sql code right now."""
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    busy = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        current = frame
        while current is not None:
            if current.f_code.co_filename.startswith(PACKAGE_DIR):
                busy.append(names.get(ident, str(ident)))
                break
            current = current.f_back
    return busy


def assert_nothing_left() -> None:
    """No thread runs our code, DataFusion holds no scan and no plan of ours."""
    assert threads_in_lance_sql() == []
    assert running_scans() == 0
    assert held_units() == 0


# -- in process: nothing of a finished query keeps running ----------------------------------

def test_limit_query_leaves_nothing_running(roots: dict[str, Path]) -> None:
    session = connect(roots["ok"])
    for _ in range(3):  # several tries: scans left running show up on most of them
        ids = session.sql(LIMIT_QUERY).to_arrow_table().column("id").to_pylist()
        assert len(ids) == 3 and all(i % 7 == 3 for i in ids)
        assert_nothing_left()


def test_printed_limit_query_leaves_nothing_running(roots: dict[str, Path]) -> None:
    text = repr(connect(roots["ok"]).sql(LIMIT_QUERY))
    assert text.count("\n") >= 5  # header and three rows
    assert_nothing_left()


def test_dropped_stream_leaves_nothing_running(roots: dict[str, Path]) -> None:
    stream = connect(roots["ok"]).sql("SELECT id, s FROM m WHERE k = 3").execute_stream()
    first = next(stream).to_pyarrow()
    assert first.num_rows > 0
    del stream
    assert_nothing_left()


def test_closed_stream_stops_and_keeps_its_rows(roots: dict[str, Path]) -> None:
    with connect(roots["ok"]).sql("SELECT id FROM m").execute_stream() as stream:
        batch = next(stream).to_pyarrow()
    assert batch.num_rows > 0
    assert list(stream) == []  # closed: nothing more, no error
    assert_nothing_left()


def test_partitioned_streams_end_when_the_last_is_closed(roots: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # (small units are read as one partition, see side_by_side: here, one each)
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
    streams = connect(roots["ok"]).sql("SELECT id FROM m").execute_stream_partitioned()
    assert len(streams) > 1
    rows = sum(b.to_pyarrow().num_rows for b in streams[0])  # read one partition whole
    assert 0 < rows < ROWS
    for stream in streams[1:]:
        stream.close()
    assert_nothing_left()


def test_error_mid_stream_is_typed_and_leaves_nothing_running(
        roots: dict[str, Path]) -> None:
    session = connect(roots["broken"])
    with pytest.raises(NotFoundError, match="not found"):
        session.sql("SELECT id FROM m WHERE k = 3").to_arrow_table()
    assert_nothing_left()
    with pytest.raises(QueryError, match="[Dd]ivide by zero"):
        connect(roots["ok"]).sql("SELECT id FROM m WHERE _rowaddr % 0 = 1").collect()
    assert_nothing_left()


def test_limit_and_offset_beyond_any_table(roots: dict[str, Path]) -> None:
    top = (1 << 63) - 1
    df = connect(roots["ok"]).sql(f"SELECT id FROM m LIMIT {top} OFFSET {top}")
    assert df.to_arrow_table().num_rows == 0
    df = connect(roots["ok"]).sql(f"SELECT id FROM m LIMIT {top} OFFSET 299998")
    assert df.to_arrow_table().num_rows == 2


def test_thread_state_reads_names_with_spaces_and_parentheses() -> None:
    assert thread_state(b"4242 (tokio-rt-worker) R 1 2 3") == ("tokio-rt-worker", "R")
    assert thread_state(b"7 (a (b) c)) S 0 0") == ("a (b) c)", "S")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread states in /proc")
def test_engine_workers_are_idle_once_a_query_returns(roots: dict[str, Path]) -> None:
    """What the exit hook waits for: after a query DataFusion's workers go idle (they
    must be seen while it runs, or this would pass without looking at them)."""
    session = connect(roots["ok"])
    engine_seen: list[bool] = []
    stream = session.sql("SELECT id, s FROM m WHERE k = 3").execute_stream()
    for batch in stream:
        assert batch.to_pyarrow().num_rows > 0
        engine_seen.append(any(name == "tokio-rt-worker" for name, _ in thread_states() or ()))
    del stream
    assert any(engine_seen)  # DataFusion's workers exist in this process
    assert wait_for_idle_engine(timeout=5.0)
    assert_nothing_left()


def test_a_second_collect_of_a_limited_frame_still_reads(roots: dict[str, Path]) -> None:
    """Ending one execution cancels its scans only, not the frame's next execution."""
    df = connect(roots["ok"]).sql(LIMIT_QUERY)
    assert df.to_arrow_table().num_rows == 3
    assert df.to_arrow_table().num_rows == 3
    assert df.count() == 3


# -- fresh processes: a clean exit every time -----------------------------------------------

PY_SCRIPT = """
import json, sys
import lance_sql
root, query, mode = sys.argv[1], sys.argv[2], sys.argv[3]
session = lance_sql.connect(root)
try:
    if mode == "print":
        print(session.sql(query))
        rows = session.sql(query).to_arrow_table().column(0).to_pylist()
    elif mode == "hold":  # a stream read once and kept until exit
        stream = session.sql(query).execute_stream()
        rows = next(stream).to_pyarrow().column(0).to_pylist()[:3]
    else:
        rows = session.sql(query).to_arrow_table().column(0).to_pylist()
    print(json.dumps({"rows": rows}))
except lance_sql.LanceError as exc:
    print(json.dumps({"error": type(exc).__name__}))
"""

# (name, root, query, Python mode, what the answer must be)
SCENARIOS = [
    ("limit", "ok", LIMIT_QUERY, "print", "three"),
    ("div0", "ok", "SELECT id FROM m WHERE _rowaddr % 0 = 1", "collect", "QueryError"),
    ("offset", "ok", "SELECT id FROM m LIMIT 9223372036854775807 OFFSET 9223372036854775807",
     "collect", "empty"),
    ("missing", "broken", "SELECT id FROM m WHERE k = 3", "collect", "NotFoundError"),
    ("held", "ok", "SELECT id FROM m WHERE k = 3", "hold", "three"),
]
RUNS_PER_SCENARIO = 5


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run_all(commands: list[list[str]]) -> Iterator[subprocess.CompletedProcess[str]]:
    env = _env()

    def one(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    with ThreadPoolExecutor(3) as pool:
        yield from pool.map(one, commands)


def _check_rows(rows: list[int], expected: str) -> None:
    if expected == "three":
        assert len(rows) == 3 and all(i % 7 == 3 for i in rows), rows
    else:
        assert expected == "empty" and rows == [], rows


@pytest.mark.slow
def test_python_processes_exit_cleanly(roots: dict[str, Path]) -> None:
    jobs = [s for s in SCENARIOS for _ in range(RUNS_PER_SCENARIO)]
    commands = [[sys.executable, "-c", PY_SCRIPT, str(roots[root]), query, mode]
                for _, root, query, mode, _ in jobs]
    for (name, _, _, _, expected), proc in zip(jobs, _run_all(commands), strict=True):
        assert proc.returncode == 0, (name, proc.returncode, proc.stderr[-2000:])
        assert "FATAL" not in proc.stderr and "Warning" not in proc.stderr, (
            name, proc.stderr[-2000:])
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        if "error" in answer:
            assert answer["error"] == expected, (name, answer)
        else:
            _check_rows(answer["rows"], expected)


@pytest.mark.slow
def test_cli_processes_exit_cleanly(roots: dict[str, Path]) -> None:
    jobs = [s for s in SCENARIOS if s[3] != "hold" for _ in range(RUNS_PER_SCENARIO)]
    commands = [[sys.executable, "-m", "lance_sql.cli.main", "sql", str(roots[root]), query,
                 "--format", "json"] for _, root, query, _, _ in jobs]
    for (name, _, _, _, expected), proc in zip(jobs, _run_all(commands), strict=True):
        assert "FATAL" not in proc.stderr and "Warning" not in proc.stderr, (
            name, proc.stderr[-2000:])
        if expected in ("three", "empty"):
            assert proc.returncode == 0, (name, proc.returncode, proc.stderr[-2000:])
            _check_rows([row["id"] for row in json.loads(proc.stdout or "[]")], expected)
        else:
            # a query error: one line on stderr, exit status 1
            assert proc.returncode == 1, (name, proc.returncode, proc.stderr[-2000:])
            assert proc.stderr.startswith("lance-sql: error:"), (name, proc.stderr)
