"""Out of descriptors (EMFILE), lance_sql trades the files its caches keep open for the
one it needs, instead of failing; and the caches leave half the limit to the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, resource, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # before lance_sql is imported
import numpy as np, pyarrow as pa
import lance_sql
from lance_sql.table.runtime.open_files import OPEN_FILES

assert OPEN_FILES.bound == 128, OPEN_FILES.bound  # half of the limit left to the rest
root = sys.argv[1]
many = lance_sql.write_dataset(pa.table({"v": np.arange(120)}), root + "/many.lance",
                               max_rows_per_file=1)
for name in ("warm", "cold"):
    lance_sql.write_dataset(pa.table({"v": np.arange(10)}), f"{root}/{name}.lance")
assert lance_sql.dataset(root + "/warm.lance").to_table().num_rows == 10  # (lazy imports)
assert many.to_table().num_rows == 120  # the caches now keep 120 files open
mine = []
try:
    while True:  # the application takes every descriptor left
        mine.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
assert lance_sql.dataset(root + "/cold.lance").to_table()["v"].to_pylist() == list(range(10))
lance_sql.write_dataset(pa.table({"v": [1]}), root + "/cold.lance", mode="append")
assert lance_sql.dataset(root + "/cold.lance").count_rows() == 11
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs RLIMIT_NOFILE")
def test_reads_and_writes_out_of_descriptors_take_them_from_the_caches(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
