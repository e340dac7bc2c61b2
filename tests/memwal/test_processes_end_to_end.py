"""Real processes on the local filesystem, all at once: 4 writers on distinct regions,
2 mergers and a garbage collector (with base-version cleanup); one writer is killed with
SIGKILL mid-stream and a new process re-claims its region (replaying its WAL). At the end
the merged base table must equal a model of every acknowledged put and delete (last write
wins per key).

Each writer logs an operation *before* calling it (``B``) and once it returned (``A``),
durable mode: an acknowledged operation is in the WAL. The killed writer's last logged
operation may or may not have reached the WAL, so its region may end in either state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.memwal.region_log import RegionLog

ROOT = Path(__file__).resolve().parents[2]
PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
REGIONS = [uuid.UUID(f"{i}{i}{i}{i}{i}{i}{i}{i}-0000-4000-8000-000000000000")
           for i in range(1, 5)]
BASE_KEYS = 200
KEYS_PER_REGION = 150  # region i owns keys 4k+i, k < 150 (half of them in the base)

WRITER = """
import json, random, sys, uuid
import pyarrow as pa
import lance_sql
uri, region, index, tag, ops, log = sys.argv[1:7]
index, ops = int(index), int(ops)
rng = random.Random(f"{tag}-{index}")
ds = lance_sql.dataset(uri)
schema = ds.schema
keys = [4 * k + index for k in range(150)]
w = ds.mem_wal.writer(region=uuid.UUID(region), durable_write=True, max_memtable_rows=120,
                      max_wal_flush_interval_ms=50)
with open(log, "a") as out:
    for n in range(ops):
        chosen = sorted(rng.sample(keys, rng.randint(1, 8)))
        if rng.random() < 0.2:
            op = {"delete": chosen}
        else:
            op = {"put": {str(k): f"{tag}{n}.{k}" for k in chosen}}
        out.write("B " + json.dumps(op) + "\\n")
        out.flush()
        if "delete" in op:
            w.delete(pa.table({"id": pa.array(chosen, pa.int64())}))
        else:
            w.put(pa.table({"id": pa.array(chosen, pa.int64()),
                            "v": [op["put"][str(k)] for k in chosen]}, schema=schema))
        out.write("A\\n")
        out.flush()
        if n % 25 == 24:
            w.flush_memtable()
w.flush_memtable()
w.close()
print("done", w.epoch, flush=True)
"""

MERGER = """
import os, sys, time
import lance_sql
from lance_sql.errors import CommitConflict
from lance_sql.memwal.merger import merge
uri, stop = sys.argv[1:3]
merged = conflicts = 0
while True:  # at least one round after the stop file appears
    last = os.path.exists(stop)
    try:
        merged += sum(r.version is not None for r in merge(lance_sql.dataset(uri)))
    except CommitConflict:
        conflicts += 1
    if last:
        break
    time.sleep(0.05)
print("merged", merged, "conflicts", conflicts, flush=True)
"""

COLLECTOR = """
import os, sys, time
from datetime import timedelta
import lance_sql
from lance_sql.memwal.gc import collect_garbage
uri, stop = sys.argv[1:3]
removed = rounds = 0
while True:
    last = os.path.exists(stop)
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=1))
    removed += len(collect_garbage(lance_sql.dataset(uri), keep_manifests=5,
                                   grace=timedelta(seconds=30)).generations)
    rounds += 1
    if last:
        break
    time.sleep(0.2)
print("removed", removed, "rounds", rounds, flush=True)
"""


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_log(path: Path) -> tuple[list[dict], dict | None]:
    """(acknowledged operations in order, the operation in flight when the log ends)."""
    acked, pending = [], None
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # torn by the kill
        if line.startswith("B "):
            pending = json.loads(line[2:])
        elif line == "A\n":
            assert pending is not None
            acked.append(pending)
            pending = None
    return acked, pending


def _apply(state: dict[int, str | None], ops: list[dict]) -> dict[int, str | None]:
    state = dict(state)
    for op in ops:
        if "delete" in op:
            state.update(dict.fromkeys(op["delete"]))
        else:
            state.update({int(k): v for k, v in op["put"].items()})
    return state


def _region_keys(state: dict[int, str | None], index: int) -> dict[int, str | None]:
    return {k: v for k, v in state.items() if k % 4 == index}


def _wait(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process did not finish in {timeout}s: {out}\n{err}")


@pytest.mark.slow
def test_writers_mergers_collector_and_a_killed_writer(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    base = {k: f"base{k}" for k in range(BASE_KEYS)}
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(list(base), pa.int64()),
                                           "v": list(base.values())}, schema=SCHEMA), uri)
    ds.initialize_mem_wal()  # manual regions: each writer process owns one
    stop = tmp_path / "stop"
    logs = [tmp_path / f"w{i}.log" for i in range(4)]
    procs: list[subprocess.Popen[str]] = []
    try:
        victim = _spawn(WRITER, uri, str(REGIONS[0]), "0", "a", "100000", str(logs[0]))
        writers = [_spawn(WRITER, uri, str(REGIONS[i]), str(i), "a", "60", str(logs[i]))
                   for i in range(1, 4)]
        jobs = [_spawn(MERGER, uri, str(stop)), _spawn(MERGER, uri, str(stop)),
                _spawn(COLLECTOR, uri, str(stop))]
        procs = [victim, *writers, *jobs]
        # kill the first writer mid-stream, once it has flushed generations
        deadline = time.monotonic() + 60
        while len(_read_log(logs[0])[0]) < 60:
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline, "the first writer made no progress"
            time.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
        _wait(victim, 10)
        assert victim.returncode == -signal.SIGKILL
        killed_acked, in_flight = _read_log(logs[0])
        # a new process claims the region: it replays the WAL, then writes on
        heir_log = tmp_path / "w0b.log"
        heir = _spawn(WRITER, uri, str(REGIONS[0]), "0", "b", "40", str(heir_log))
        procs.append(heir)
        heir_out, heir_err = _wait(heir, 60)
        assert heir.returncode == 0, heir_err
        assert heir_out.split() == ["done", "2"]  # epoch 2: it fenced the killed writer
        for w in writers:
            out, err = _wait(w, 60)
            assert w.returncode == 0, err
            assert out.split() == ["done", "1"]
        time.sleep(0.5)  # let the jobs see the last generations
        stop.touch()
        job_output = []
        for job in jobs:
            out, err = _wait(job, 60)
            assert job.returncode == 0, err
            job_output.append(out.split())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()

    assert sum(int(o[1]) for o in job_output[:2]) > 0  # the mergers merged concurrently
    # the model: every acknowledged operation, in each region's order
    model = dict(base)
    for i in range(1, 4):
        acked, pending = _read_log(logs[i])
        assert pending is None and len(acked) == 60
        model = _apply(model, acked)
    heir_acked, heir_pending = _read_log(heir_log)
    assert heir_pending is None and len(heir_acked) == 40
    region0 = [_apply(model, killed_acked + heir_acked)]
    if in_flight is not None:  # it may have reached the WAL before the kill
        region0.append(_apply(model, [*killed_acked, in_flight, *heir_acked]))
    # whatever the background jobs left unmerged is merged now
    mw = lance_sql.dataset(uri).mem_wal
    assert mw is not None
    mw.merge()
    table = lance_sql.dataset(uri).to_table()
    got = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert table.num_rows == len(got)  # one row per key
    expected = [{k: v for k, v in m.items() if v is not None} for m in region0]
    for i in range(1, 4):
        assert _region_keys(got, i) == _region_keys(expected[0], i)
    assert _region_keys(got, 0) in [_region_keys(e, 0) for e in expected]
    assert all(row["unmerged"] == 0 and row["wal_backlog"] == 0 for row in mw.status())
    assert RegionLog(mw.dataset.store, REGIONS[0]).latest().writer_epoch == 2
