"""A non-durable writer's resident memory stays bounded by its limits (in a subprocess:
peak RSS is per process).

2M rows (~70 MiB of MemTable rows) go through a writer limited to 16 MiB unflushed and
8 MiB MemTables. The bound allows the limits plus a fixed 72 MiB for everything else
(libraries warming up, flush temporaries, allocator slack): the writer measured 61-76
MiB in all when this test was written, 84-109 MiB before the WAL entries were bounded,
the key index sorted in place and freed memory released; a writer without
backpressure holds every row. The peak is the child's own (``VmHWM`` after resetting
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_peak_rss_growth_stays_within_the_limits_plus_a_fixed_allowance(tmp_path: Path
                                                                         ) -> None:
    code = CHILD.format(root=str(ROOT), path=str(tmp_path / "t.lance"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    growth = float(done.stdout.split()[-1])
    assert growth < 16 + 8 + 72, f"peak RSS grew {growth:.0f} MiB"
