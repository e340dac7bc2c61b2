"""``lance-sql memwal status|merge|refresh|gc|run``: the jobs run, the status table tells
regions, epochs, generations and WAL backlog, and ``run`` stops cleanly on SIGINT/SIGTERM
(exit 0, its worker joined)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.cli.main import main
from lance_sql.cli.memwal import parse_duration
from lance_sql.format.region_spec import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
# main() in a child, then a check that no thread outlived the command
CHILD = ("import sys, threading\n"
         "from lance_sql.cli.main import main\n"
         "code = main(sys.argv[1:])\n"
         "others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]\n"
         "assert not others, others\n"
         "sys.exit(code)\n")


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


def _table(tmp_path: Path) -> str:
    """Two regions (bucket of 2), each with flushed generations, one with a WAL backlog."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(range(10), "base"), uri)
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 2), durable_write=True)
    w = mw.writer()
    w.put(_rows(range(5, 30), "a"))
    w.flush_memtable()
    w.put(_rows(range(0, 30), "b"))
    w.flush_memtable()
    w.delete(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64())}))
    w.close(flush_memtable=False)  # the delete in the WAL only
    return uri


def _status(capsys: pytest.CaptureFixture[str], uri: str) -> list[list[str]]:
    assert main(["memwal", "status", uri, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"table {uri} version ") and "bucket(id, 2)" in lines[0]
    assert lines[1] == ("region,spec,epoch,manifest,writing_gen,flushed_gens,merged_up_to,"
                        "unmerged,wal_backlog")
    return [line.split(",") for line in lines[2:]]


def test_status_merge_refresh_gc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = _table(tmp_path)
    before = _status(capsys, uri)
    assert len(before) == 2
    for _, spec, epoch, _, writing, flushed, merged, unmerged, backlog in before:
        assert (spec, epoch, writing, flushed, merged, unmerged) == ("1", "1", "3", "1-2",
                                                                     "0", "2")
        assert backlog == "1"  # the delete's WAL entry, not in a generation yet
    assert main(["memwal", "merge", uri, "--max-generations", "1"]) == 0
    merged_one = capsys.readouterr().out
    assert re.fullmatch(r"merge: 1 generation\(s\) merged \(\+(\d+) ~(\d+) -0 rows\)\n",
                        merged_one)
    assert [(r[6], r[7]) for r in _status(capsys, uri)] in ([("1", "1"), ("0", "2")],
                                                            [("0", "2"), ("1", "1")])
    assert main(["memwal", "merge", uri]) == 0
    assert "merge: 3 generation(s) merged" in capsys.readouterr().out
    assert [(r[6], r[7]) for r in _status(capsys, uri)] == [("2", "0"), ("2", "0")]
    table = lance_sql.dataset(uri).to_table()
    assert dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(),
                    strict=True)) == {i: f"b{i}" for i in range(30)}
    assert main(["memwal", "refresh", uri]) == 0
    assert "snapshot of 2 region(s), table version" in capsys.readouterr().out
    assert main(["memwal", "refresh", uri]) == 0
    assert capsys.readouterr().out == "refresh: snapshot of 2 region(s) unchanged\n"
    assert main(["memwal", "gc", uri]) == 0  # old base versions still need them
    assert capsys.readouterr().out.startswith("gc: removed 0 generation(s)")
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert main(["memwal", "gc", uri, "--keep-manifests", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gc: removed 4 generation(s), 4 WAL entries, ")
    assert [r[5] for r in _status(capsys, uri)] == ["-", "-"]


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = str(tmp_path / "p.lance")
    lance_sql.write_dataset(_rows(range(3), "x"), plain)
    assert main(["memwal", "status", plain]) == 1
    assert "has no MemWAL" in capsys.readouterr().err
    assert main(["memwal", "run", plain, "--every", "1s"]) == 1
    assert main(["memwal", "merge", str(tmp_path / "missing")]) == 1
    with pytest.raises(SystemExit) as exc:
        main(["memwal", "run", plain, "--every", "soon"])
    assert exc.value.code == 2
    assert "expected a duration" in capsys.readouterr().err
    assert [parse_duration(t) for t in ("10s", "500ms", "2m", "1h", "1.5")] == [
        10.0, 0.5, 120.0, 3600.0, 1.5]


def test_run_rounds_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = _table(tmp_path)
    assert main(["memwal", "run", uri, "--every", "50ms", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "round 1 merge: 4 generation(s) merged" in out
    assert "round 2 merge: nothing to merge" in out and "round 2 refresh" in out
    assert out.endswith("2 round(s), 0 failed job(s)\n")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_run_stops_cleanly_on_a_signal(tmp_path: Path, signum: int) -> None:
    uri = _table(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "memwal", "run", uri,
                             "--every", "200ms"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while b"round 2 gc" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                seen += chunk
        assert b"round 2 gc" in seen, seen.decode(errors="replace")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode(errors="replace")
    assert b"stopped" in err and b"Traceback" not in err
    assert b"failed job(s)" in out
    assert lance_sql.dataset(uri).to_table().num_rows == 30
