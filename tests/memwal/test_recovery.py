"""``MemWal.recover()``: a writer process acknowledges durable puts and is killed
(SIGKILL) before its MemTable flush; its rows are in the WAL only, so a reader in another
process does not see them (the spec's eventual consistency) until recovery flushes the
backlog as a generation. Recovery leaves alone a region whose WAL was written within
``idle`` and a region whose writer is open in its own process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.cli.main import main
from lance_sql.errors import InvalidInputError, WriterFencedError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.writer import RegionWriter

ROOT = Path(__file__).resolve().parents[2]
PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])

WRITER = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    import lance_sql
    from lance_sql.memwal.api import MemWal
    uri, log = sys.argv[1], sys.argv[2]
    mw = MemWal(lance_sql.dataset(uri))
    w = mw.writer(durable_write=True)
    schema = mw.dataset.schema
    for key in range(100, 130):
        w.put(pa.table({"id": [key], "v": [f"w{key}"]}, schema=schema))
    with open(log, "w") as out:
        out.write("acked\\n")
    time.sleep(600)  # killed here: no MemTable flush, no close
""")

READER = textwrap.dedent("""
    import json, sys
    import lance_sql
    from lance_sql.memwal.api import MemWal
    mw = MemWal(lance_sql.dataset(sys.argv[1]))
    print(json.dumps(sorted(mw.scanner(["id"]).to_table().column("id").to_pylist())))
    print(json.dumps(mw.get({"id": [105]}, ["v"]).column("v").to_pylist()))
""")


def _run(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _read_elsewhere(uri: str) -> tuple[list[int], list[str]]:
    proc = _run(READER, uri)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    ids, found = out.strip().splitlines()
    return json.loads(ids), json.loads(found)


@pytest.fixture
def killed(tmp_path: Path) -> MemWal:
    """Base keys 0..9; a writer process put keys 100..129 durably and was killed."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": list(range(10)),
                                           "v": [f"b{i}" for i in range(10)]},
                                          schema=SCHEMA), uri)
    MemWal.initialize(ds, RegionSpec.bucket("id", 2))
    log = tmp_path / "acked"
    proc = _run(WRITER, uri, str(log))
    try:
        deadline = time.monotonic() + 120
        while not log.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return MemWal(lance_sql.dataset(uri))


@pytest.mark.slow
def test_recovery_makes_a_killed_writers_acknowledged_rows_visible(
        killed: MemWal, capsys: pytest.CaptureFixture[str]) -> None:
    uri = killed.dataset.uri
    ids, found = _read_elsewhere(uri)
    assert ids == list(range(10)) and found == []  # only in the WAL: unseen
    assert sum(r["wal_backlog"] for r in killed.status()) > 0
    # written just now: a live writer may still flush them itself
    busy = killed.recover()
    assert busy and all(r.generation is None and "within" in r.reason for r in busy)
    assert main(["memwal", "recover", uri]) == 0  # the command line job: the same
    assert "recover: 0 region(s) flushed (0 WAL entries), 2 left" in capsys.readouterr().out
    assert _read_elsewhere(uri)[0] == list(range(10))
    done = killed.recover(idle=timedelta(0))
    assert len(done) == 2 and all(r.generation == 1 for r in done)
    assert sum(r.entries for r in done) == 30
    ids, found = _read_elsewhere(uri)
    assert ids == [*range(10), *range(100, 130)] and found == ["w105"]
    assert all(r["wal_backlog"] == 0 for r in killed.status())
    assert killed.recover(idle=timedelta(0)) == []  # nothing left to do
    assert main(["memwal", "recover", uri, "--idle", "1ms"]) == 0
    assert "recover: 0 region(s) flushed (0 WAL entries)" in capsys.readouterr().out
    assert all(r["writer_epoch"] == 2 for r in killed.status())  # claimed once each


def test_recovery_skips_regions_written_here_and_checks_its_arguments(killed: MemWal
                                                                       ) -> None:
    writer = killed.writer()
    try:
        writer.put(pa.table({"id": list(range(100, 110)), "v": ["x"] * 10}, schema=SCHEMA))
        mine = {w.region_id for w in writer.writers}  # both regions claimed here
        assert len(mine) == 2
        skipped = killed.recover(idle=timedelta(0))
        assert {r.region for r in skipped} == mine
        assert all(r.reason == "its writer is open here" for r in skipped)
    finally:
        writer.close()
    with pytest.raises(InvalidInputError):
        killed.recover(idle=timedelta(seconds=-1))
    with pytest.raises(InvalidInputError, match="timedelta or seconds"):
        killed.recover(idle="1 hour")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        killed.recover(idle=-1)
    assert killed.recover(idle=3600) == []  # seconds: everything was written within it
    with pytest.raises(InvalidInputError):
        killed.recover([uuid.uuid4()], idle=timedelta(0))


def test_a_region_claimed_by_another_writer_meanwhile_is_reported_not_fatal(
        killed: MemWal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer takes a region between recovery's claim and its flush: that region
    is reported with the reason (its backlog is the new writer's to replay) and the
    other regions are still recovered (the job stopped at the first)."""
    flush = RegionWriter.flush_memtable
    calls: list[uuid.UUID] = []

    def fenced_once(self: RegionWriter, *args: object, **kwargs: object) -> object:
        calls.append(self.region_id)
        if len(calls) == 1:
            raise WriterFencedError("fenced by a newer writer (test)")
        return flush(self, *args, **kwargs)

    monkeypatch.setattr(RegionWriter, "flush_memtable", fenced_once)
    results = killed.recover(idle=timedelta(0))
    assert len(results) == 2
    fenced = [r for r in results if r.generation is None]
    assert len(fenced) == 1 and "fenced" in fenced[0].reason
    assert fenced[0].region == calls[0]
    assert [r.generation for r in results if r is not fenced[0]] == [1]
