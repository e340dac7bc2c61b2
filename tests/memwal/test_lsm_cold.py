"""The first LSM scan in a fresh process stays off pandas: pyarrow imports pandas
(~0.4 s of CPU) on its first ``pa.array`` / ``to_numpy`` / scalar, and a Python-API scan
(base through its BTREE key index, flushed generations, dedup) now builds and reads its
arrays from buffers (lance_sql/numpy_arrow.py). The cold scan's rows are checked against a
last-write-wins model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()), pa.field("s", pa.string())])

_COLD_SCAN = r"""
import sys
import lance_sql
from lance_sql.memwal.api import MemWal
import pyarrow.feather as feather
scanner = MemWal(lance_sql.dataset(sys.argv[1])).scanner()
table = scanner.to_table()
print("pandas" in sys.modules)
feather.write_feather(table, sys.argv[2], compression="uncompressed")
"""


def _rows(ids: np.ndarray, gen: int) -> pa.Table:
    return pa.table({"id": ids, "v": (ids * 10 + gen).astype(np.float64),
                     "s": pa.array([f"g{gen}-{i}" for i in ids.tolist()])}, schema=SCHEMA)


def _table(tmp_path: Path) -> tuple[str, dict[int, tuple[float, str]]]:
    """A MemWAL table (BTREE-indexed base, two flushed generations, 3 regions) and its
    last-write-wins model."""
    root = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(np.arange(2000, dtype=np.int64), 0), root,
                                 max_rows_per_file=700)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(root), RegionSpec.bucket("id", 3),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000,
                           max_memtable_rows=10**9)
    writer = mw.writer()
    model = {i: (float(i * 10), f"g0-{i}") for i in range(2000)}
    for gen, ids in ((1, np.arange(0, 3000, 7)), (2, np.arange(5, 2500, 11))):
        ids = ids.astype(np.int64)
        writer.put(_rows(ids, gen))
        writer.flush_memtable()
        model.update({i: (float(i * 10 + gen), f"g{gen}-{i}") for i in ids.tolist()})
    writer.close()
    return root, model


def _cold(script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(Path(lance_sql.__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", script, *args], env=env,
                          capture_output=True, text=True, check=True, timeout=300)
    return done.stdout + done.stderr


def test_cold_lsm_scan_does_not_import_pandas(tmp_path: Path) -> None:
    root, model = _table(tmp_path)
    out = tmp_path / "scan.feather"
    printed = _cold(_COLD_SCAN, root, str(out))
    assert printed.strip() == "False", printed

    got = feather.read_table(out).sort_by("id")
    keys = sorted(model)
    assert got.column("id").to_pylist() == keys
    assert got.column("v").to_pylist() == [model[k][0] for k in keys]
    assert got.column("s").to_pylist() == [model[k][1] for k in keys]


_COLD_FILTERED = r"""
import sys
import lance_sql
from lance_sql.memwal.api import MemWal
import pyarrow.feather as feather
mw = MemWal(lance_sql.dataset(sys.argv[1]))
tables = [mw.scanner(filter=f).to_table() for f in sys.argv[3:]]
print("pandas" in sys.modules)  # (before feather, which imports it)
for i, table in enumerate(tables):
    feather.write_feather(table, f"{sys.argv[2]}.{i}", compression="uncompressed")
"""

# filters of comparisons, BETWEEN and IN lists: evaluated as masks, not by pyarrow's
# expression engine (which imports pandas with its dataset module)
_FILTERS = {
    "v > 1000 AND id BETWEEN 100 AND 1500": lambda i, v, s: v > 1000 and 100 <= i <= 1500,
    "id IN (3, 7, 2001, 2950, 5000)": lambda i, v, s: i in (3, 7, 2001, 2950, 5000),
    "s = 'g2-16'": lambda i, v, s: s == "g2-16",
    "id = 14": lambda i, v, s: i == 14,
}


def test_cold_filtered_lsm_scans_do_not_import_pandas(tmp_path: Path) -> None:
    root, model = _table(tmp_path)
    out = tmp_path / "scan"
    printed = _cold(_COLD_FILTERED, root, str(out), *_FILTERS)
    assert printed.strip() == "False", printed
    for i, keep in enumerate(_FILTERS.values()):
        got = feather.read_table(f"{out}.{i}").sort_by("id")
        want = sorted(k for k, (v, s) in model.items() if keep(k, v, s))
        assert want, "each filter keeps some rows"
        assert got.column("id").to_pylist() == want
        assert got.column("v").to_pylist() == [model[k][0] for k in want]
        assert got.column("s").to_pylist() == [model[k][1] for k in want]
