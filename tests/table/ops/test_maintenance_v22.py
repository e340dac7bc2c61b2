"""Compaction of a 2.2 table (our default format) stays readable by pylance, row for row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql

lance = pytest.importorskip("lance")


def test_compacting_a_2_2_table(tmp_path: Path) -> None:
    n = 20_000
    data = pa.table({
        "id": np.arange(n),
        "s": [f"s{i % 50}" for i in range(n)],
        "v": pa.array([[float(i)] * 4 for i in range(n)], pa.list_(pa.float32(), 4)),
        "st": pa.array([{"a": i, "b": [i]} if i % 7 else None for i in range(n)]),
    })
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(data, uri, max_rows_per_file=3000)
    assert ds.data_storage_version == "2.2"
    ds.delete("id % 5 = 0")
    lance_sql.dataset(uri).optimize.compact_files()
    expected = data.filter(pa.array(np.arange(n) % 5 != 0))
    after = lance_sql.dataset(uri)
    assert after.version == 4 and len(after.manifest.fragments) < 7
    assert lance.dataset(uri).to_table() == expected
    assert after.to_table() == expected
