"""Filters run on the thread that asks for them, never on Arrow's CPU pool.

``Table.filter(expression)`` runs an Acero plan on Arrow's thread pool, whose workers
free the plan's batches (our numpy-backed buffers, which take the GIL to free) after
the call has returned. A process that exits right after a filtered query could have a
worker take the GIL while the interpreter finalises, and abort ("terminate called
without an active exception"). So no filter of ours starts that pool: a fresh process
that runs filtered scans through the Python API, SQL and the change feed has no native
threads beyond those it had before, apart from DataFusion's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import filter_rows, filter_serially, to_pyarrow

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, sys, threading
import lance_sql

def native_threads():
    # threads neither Python nor DataFusion started (Arrow's pools among them)
    python = {t.native_id for t in threading.enumerate()}
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:  # (ended meanwhile)
            continue
        if int(task) not in python and name != "tokio-rt-worker":
            found.append(int(task))
    return sorted(found)

uri = sys.argv[1]
ds = lance_sql.dataset(uri)
ds.to_table()  # (imports and one unfiltered scan: the baseline)
before = native_threads()
text = "id % 7 = 3 OR s LIKE 'v1%'"  # not a conjunction of comparisons: the general path
api = ds.to_table(filter=text).num_rows
session = lance_sql.connect(os.path.dirname(uri))
sql = session.sql("SELECT count(*) AS n FROM t WHERE " + text).to_pydict()["n"][0]
feed = ds.table_changes(1, ds.version, filter="id % 7 = 3").num_rows
print(json.dumps({"before": before, "after": native_threads(),
                  "rows": [api, sql, feed]}))
"""


def _table(n: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"v{i}" for i in ids])})


def test_filtered_queries_start_no_arrow_pool_threads(tmp_path: Path) -> None:
    uri = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(20_000), uri, max_rows_per_file=5_000,
                            enable_stable_row_ids=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(uri)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    expected = sum(1 for i in range(20_000) if i % 7 == 3 or str(i).startswith("1"))
    assert found["rows"][:2] == [expected, expected]
    assert found["rows"][2] == sum(1 for i in range(20_000) if i % 7 == 3)
    # (a thread of the unfiltered scan may have ended meanwhile: none may have started)
    assert set(found["after"]) <= set(found["before"]), found


def test_serial_filter_keeps_order_and_types_errors() -> None:
    table = pa.Table.from_batches(_table(10_000).to_batches(max_chunksize=1_000))
    expression = to_pyarrow("id % 3 = 1", table.schema)
    kept = filter_serially(table, expression)
    assert kept.column("id").to_pylist() == list(range(1, 10_000, 3))
    assert kept.equals(table.filter(expression))
    bad = pc.field("s").cast(pa.int64()) > 3  # 'v0' is no number
    with pytest.raises(InvalidInputError, match="fails on the table's values"):
        filter_rows(table, bad)
