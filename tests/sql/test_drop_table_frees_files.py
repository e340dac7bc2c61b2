"""DROP TABLE lets go of the table's files the caches keep open, so the disk space of
the dropped table comes back while the process runs on."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

import lance_sql
from lance_sql.table import Runtime


def _open_paths(runtime: Runtime) -> list[str]:
    """Paths of the data files ``runtime`` keeps open."""
    items = runtime.cache._caches["data_files"]._items
    return [reader.source.path for reader, _ in list(items.values())]


def test_drop_table_lets_go_of_its_open_files(tmp_path: Path) -> None:
    table = pa.table({"id": np.arange(40_000), "v": np.arange(40_000.0)})
    lance_sql.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=10_000)
    lance_sql.write_dataset(table, str(tmp_path / "keep.lance"), max_rows_per_file=20_000)
    runtime = Runtime()
    session = lance_sql.connect(str(tmp_path), runtime=runtime)
    count = session.sql("SELECT count(*) AS n FROM t WHERE v >= 0").to_arrow_table()
    assert count.to_pydict()["n"] == [40_000]
    total = session.sql("SELECT sum(v) AS s FROM keep").to_arrow_table()
    assert total.to_pydict()["s"] == [table["v"].to_numpy().sum()]
    assert len(_open_paths(runtime)) == 6
    session.sql("DROP TABLE t").to_arrow_table()
    left = _open_paths(runtime)
    assert len(left) == 2 and all(os.path.exists(p) and "keep.lance" in p for p in left)
