"""A non-durable writer's resident memory stays bounded by its limits (in a subprocess:
peak RSS is per process).

2M rows (~70 MiB of MemTable rows) go through a writer limited to 16 MiB unflushed and
8 MiB MemTables. The bound allows the limits plus a fixed 56 MiB for everything else
(libraries warming up, flush temporaries, allocator slack): the writer measured 34-57
MiB in all (median 38, shared machine) once the index build counted against the limit
and WAL entries were cut by it, 45-76 MiB before, 84-109 MiB before the WAL entries
were bounded, the key index sorted in place and freed memory released; a writer
without backpressure holds every row. The peak is the child's own (``VmHWM`` after resetting
it): ``ru_maxrss`` would include the parent's resident memory at the spawn.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import sys, uuid
    import numpy as np, pyarrow as pa
    sys.path.insert(0, {root!r})
    import lance_sql
    from lance_sql.memwal.writer import RegionWriter, WriterConfig

    PK = {{"lance-schema:unenforced-primary-key": "true"}}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.float64()), pa.field("s", pa.string())])
    def rows(start, n=1000):
        ids = np.arange(start, start + n, dtype=np.int64)
        return pa.table({{"id": ids, "v": ids * 0.5,
                          "s": [f"value-{{i}}" for i in range(start, start + n)]}},
                        schema=schema)
    ds = lance_sql.write_dataset(rows(0, 1), {path!r})
    shared = [rows(i * 1000) for i in range(50)]
    w = RegionWriter(ds.store, uuid.uuid4(), ds.manifest.schema,
                     data_format=ds.manifest.data_format,
                     config=WriterConfig(durable_write=False, max_unflushed_bytes=16 << 20,
                                         max_memtable_bytes=8 << 20,
                                         max_memtable_rows=10**9))
    def status_kib(name):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    # the peak restarts from here (ru_maxrss would include the parent's memory)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = status_kib("VmRSS")
    for i in range(2000):
        ids = pa.array(np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64))
        w.put(shared[i % 50].set_column(0, "id", ids))
    w.close()
    print((status_kib("VmHWM") - before) / 1024)
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_peak_rss_growth_stays_within_the_limits_plus_a_fixed_allowance(tmp_path: Path
                                                                         ) -> None:
    code = CHILD.format(root=str(ROOT), path=str(tmp_path / "t.lance"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    growth = float(done.stdout.split()[-1])
    assert growth < 16 + 8 + 56, f"peak RSS grew {growth:.0f} MiB"


def test_puts_wait_for_the_memory_a_memtable_flush_builds_its_index_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a MemTable flush builds its indexes, their temporaries count against
    ``max_unflushed_bytes``: a put that would exceed the limit with them waits until the
    build is done (it returned at once when only the MemTables counted)."""
    import threading
    import uuid

    import numpy as np
    import pyarrow as pa

    import lance_sql
    import lance_sql.memwal.writer as writer_module
    from lance_sql.memwal.writer import RegionWriter, WriterConfig

    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk),
                        pa.field("v", pa.float64())])

    def rows(start: int, n: int) -> pa.Table:
        ids = np.arange(start, start + n, dtype=np.int64)
        return pa.table({"id": ids, "v": ids * 0.5}, schema=schema)

    building, release = threading.Event(), threading.Event()
    build = writer_module.write_generation_indexes

    def held_build(*args: object, **kwargs: object) -> object:
        building.set()
        assert release.wait(30)
        return build(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_module, "write_generation_indexes", held_build)
    ds = lance_sql.write_dataset(rows(0, 1), str(tmp_path / "t.lance"))
    # 10k rows are ~0.2 MiB of MemTable, the index build's allowance over 4 MiB
    w = RegionWriter(ds.store, uuid.uuid4(), ds.manifest.schema,
                     data_format=ds.manifest.data_format,
                     config=WriterConfig(durable_write=False, max_unflushed_bytes=2 << 20,
                                         max_memtable_rows=10**9))
    try:
        w.put(rows(0, 10_000))
        errors: list[BaseException] = []

        def run(step: object) -> None:
            try:
                step()  # type: ignore[operator]
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)

        flusher = threading.Thread(target=run, args=(w.flush_memtable,))
        putter = threading.Thread(target=run, args=(lambda: w.put(rows(10_000, 100)),))
        flusher.start()
        try:
            assert building.wait(30)
            putter.start()
            putter.join(0.5)
            assert putter.is_alive(), "the put did not wait for the index build's memory"
        finally:
            release.set()
            flusher.join(30)
            if putter.ident is not None:  # started
                putter.join(30)
        assert not flusher.is_alive() and not putter.is_alive()
        assert not errors, errors
        assert sum(m.num_rows for m in w.memtables()) == 100  # the 10k rows were flushed
        w.close()
    finally:
        w.abort()  # (after close: nothing left to stop)
