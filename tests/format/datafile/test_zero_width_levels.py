"""pylance packs a page's definition levels out of line at a width of 0 bits when every
level is 0 (a list column's later page holding no empty list): each value is 0, with no
bytes at all. lance_sql refused such pages ("implausible width of 0 bits per value")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql

lance = pytest.importorskip("lance")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_page_of_levels_packed_at_zero_bits_reads(tmp_path: Path, version: str) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, 1025)
    lengths[0] = 0  # one empty list, in the first page only
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(rng.integers(-100, 100, int(offsets[-1])).astype(np.int8))
    table = pa.table({"l": pa.ListArray.from_arrays(pa.array(offsets), values),
                      "id": pa.array(np.arange(1025))})
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table, uri, data_storage_version=version)
    ours = lance_sql.dataset(uri)
    assert ours.to_table().equals(table)
    assert ours.take([0, 1, 700, 1024]).equals(table.take([0, 1, 700, 1024]))
