"""Scan units hand DataFusion one batch per chunk read (up to 128k rows), not batches of
DataFusion's 8192-row batch size: each batch crossing into DataFusion has a fixed cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import lance_sql
from lance_sql.sql.provider import CHUNK_ROWS


def test_scans_hand_over_whole_chunks(tmp_path: Path) -> None:
    rows = 300_000
    table = pa.table({"id": np.arange(rows), "x": np.linspace(0, 1, rows)})
    lance_sql.write_dataset(table, tmp_path / "t.lance")
    session = lance_sql.connect(tmp_path)
    for query in ["SELECT id, x FROM t", "SELECT id, x FROM t WHERE x >= 0"]:
        got = session.sql(query).to_arrow_table()
        sizes = [len(chunk) for chunk in got.column("id").chunks]
        assert max(sizes) == CHUNK_ROWS, (query, sizes)
        assert sum(sizes) == rows
        assert got.sort_by("id").equals(table), query
