"""Real processes on the local filesystem: a writer process is fenced by a newer one.

Process A puts keys durably in a loop and logs each acknowledged key; while it runs, this
process claims the region (writer B), writes and flushes. A must stop with
WriterFencedError, and every key A acknowledged must be in the region afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
from memwal_writer_helpers import REGION, SCHEMA, region_state, rows

import lance_sql
from lance_sql.memwal.writer import RegionWriter, WriterConfig

ROOT = Path(__file__).resolve().parents[2]

WRITER_A = """
import sys, uuid
import pyarrow as pa
import lance_sql
from lance_sql.errors import WriterFencedError
from lance_sql.memwal.writer import RegionWriter, WriterConfig
uri, region, log = sys.argv[1], uuid.UUID(sys.argv[2]), sys.argv[3]
ds = lance_sql.dataset(uri)
w = RegionWriter.for_dataset(ds, region, config=WriterConfig(max_wal_flush_interval_ms=3600000))
schema = ds.schema
with open(log, "a") as out:
    for key in range(1, 100000):
        try:
            w.put(pa.table({"id": [key], "v": [float(key)], "s": ["a"]}, schema=schema))
        except WriterFencedError:
            print("fenced", flush=True)
            w.abort()
            sys.exit(0)
        out.write(f"{key}\\n")
        out.flush()
print("never fenced", flush=True)
w.close()
"""


def _acked(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [int(x) for x in log.read_text().split()]


def test_a_writer_process_is_fenced_and_loses_nothing_it_acknowledged(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(rows([0]), uri)
    log = tmp_path / "acked.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    a = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER_A), uri, str(REGION),
                          str(log)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_acked(log)) < 20:
            assert a.poll() is None, a.stderr.read() if a.stderr else ""
            assert time.monotonic() < deadline, "writer A made no progress"
            time.sleep(0.01)
        ds = lance_sql.dataset(uri)
        b = RegionWriter.for_dataset(ds, REGION, config=WriterConfig(
            max_wal_flush_interval_ms=3600000))
        b.put(pa.table({"id": [-1], "v": [0.0], "s": ["b"]}, schema=SCHEMA))
        b.flush_memtable()
        out, err = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 0, err
    assert out.strip() == "fenced"
    acked = _acked(log)
    b.put(pa.table({"id": [-2], "v": [0.0], "s": ["b"]}, schema=SCHEMA))
    state = region_state(ds, b)
    b.close()
    assert set(acked) <= set(state), sorted(set(acked) - set(state))[:10]
    assert {-1, -2} <= set(state)
