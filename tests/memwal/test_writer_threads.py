"""No writer thread outlives its writer: close, errors, and interpreter exit."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from pathlib import Path

import pyarrow as pa
import pytest
from memwal_writer_helpers import REGION, flushed_rows, memory_table, open_writer, rows

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.memwal import RegionSpec
from lance_sql.memwal.wal import WalLog
from lance_sql.memwal.writer import open_writers

ROOT = Path(__file__).resolve().parents[2]


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("memwal-writer-")]


def test_close_and_context_exit_join_the_thread() -> None:
    ds = memory_table()
    before = set(_writer_threads())
    with open_writer(ds, durable_write=False) as w:
        w.put(rows([1]))
        assert w._thread.is_alive()
    assert not w._thread.is_alive()
    assert set(_writer_threads()) <= before
    a = open_writer(ds)
    a.abort()
    assert not a._thread.is_alive()


def test_a_failed_background_flush_stops_the_thread_and_surfaces() -> None:
    ds = memory_table()
    w = open_writer(ds, durable_write=False, max_wal_flush_interval_ms=10)

    def broken(op: str, key: str) -> None:
        if op == "put_if_absent" and "/wal/" in key:
            raise OSError("disk on fire")

    ds.store.add_hook(broken)
    w.put(rows([1]))
    w._thread.join(10)
    ds.store.clear_hooks()
    assert not w._thread.is_alive()
    try:
        w.put(rows([2]))
    except OSError as exc:
        assert "disk on fire" in str(exc)
    else:
        raise AssertionError("the background failure was not reported")
    try:
        w.close()
    except OSError:
        pass
    assert not w._thread.is_alive()


def test_process_exiting_without_close_ends_cleanly_and_keeps_its_rows(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    script = textwrap.dedent(f"""
        import pyarrow as pa, uuid, lance_sql
        from lance_sql.memwal.writer import RegionWriter, WriterConfig
        pk = {{"lance-schema:unenforced-primary-key": "true"}}
        schema = pa.schema([pa.field("id", pa.int64(), False, pk), pa.field("v", pa.float64()),
                            pa.field("s", pa.string())])
        ds = lance_sql.write_dataset(pa.table({{"id": [0], "v": [0.0], "s": ["a"]}},
                                              schema=schema), {uri!r})
        w = RegionWriter.for_dataset(ds, uuid.UUID({str(REGION)!r}),
                                     config=WriterConfig(durable_write=False,
                                                         max_wal_flush_interval_ms=3600000))
        w.put(pa.table({{"id": [1, 2], "v": [1.0, 2.0], "s": ["b", "c"]}}, schema=schema))
        print("put done", flush=True)
        # no close(): the interpreter must still exit, and the rows reach the WAL
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "put done" in done.stdout
    import lance_sql

    ds = lance_sql.dataset(uri)
    wal = WalLog(ds.store, REGION)
    assert list(wal.ids_after(0)) == [1]
    assert wal.read(1).rows.column("id").to_pylist() == [1, 2]


def test_a_put_racing_close_is_refused_or_flushed() -> None:
    """A put from another thread while ``close()`` runs used to be taken after the last
    flush and dropped (the writer was marked closed only after it): every put that
    returns is in a generation, later ones raise."""
    for durable in (False, True):
        ds = memory_table()
        w = open_writer(ds, durable_write=durable)
        acknowledged: list[int] = []
        started = threading.Event()

        def put_until_refused(w=w, acknowledged=acknowledged, started=started) -> None:
            for key in range(10_000):
                try:
                    w.put(rows([key]))
                except InvalidInputError:
                    return
                acknowledged.append(key)
                started.set()

        thread = threading.Thread(target=put_until_refused)
        thread.start()
        started.wait(10)
        w.close()
        thread.join(30)
        assert not thread.is_alive()
        kept = sorted(k for t in flushed_rows(ds) for k in t.column("id").to_pylist())
        assert acknowledged and kept == acknowledged, durable
        with pytest.raises(InvalidInputError, match="closed"):
            w.put(rows([99_999]))


def test_an_abandoned_writer_of_a_deleted_table_is_let_go(tmp_path: Path) -> None:
    """A writer its caller dropped unclosed stays registered while its table lives (this
    process's readers see its MemTable), and lets go of its thread and rows once the
    table is deleted."""
    key = pa.field("id", pa.int64(), nullable=False,
                   metadata={"lance-schema:unenforced-primary-key": "true"})
    schema = pa.schema([key, pa.field("v", pa.float64())])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [0], "v": [0.0]}, schema=schema), uri)
    mw = ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 2))
    router = mw.writer(max_wal_flush_interval_ms=20)
    router.put(pa.table({"id": [1, 2, 3], "v": [0.1, 0.2, 0.3]}, schema=schema))
    gone = [weakref.ref(w) for w in router.writers]
    threads = [w._thread for w in router.writers]
    assert len(gone) == 2
    del router
    time.sleep(0.2)  # several background rounds: a live table keeps its writers
    assert all(ref() is not None for ref in gone)
    assert all(t.is_alive() for t in threads)
    assert lance_sql.dataset(uri).mem_wal.scanner().to_table().num_rows == 4
    del mw, ds
    shutil.rmtree(uri)
    for thread in threads:
        thread.join(10)
    gc.collect()
    assert not any(t.is_alive() for t in threads)
    assert all(ref() is None for ref in gone)
    assert not [w for w in open_writers() if str(tmp_path) in w.store.uri]
