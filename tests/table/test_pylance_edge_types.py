"""Tables pylance writes with types at the edge of what the format holds, read by lance_sql
as pylance reads them."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_struct_without_fields_reads_as_empty_structs(tmp_path: Path, version: str) -> None:
    """Its column holds no values: every row is ``{}`` (it read as NULL)."""
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "v": pa.array([{}, {}, {}], pa.struct([]))}),
                        path, data_storage_version=version)
    want = lance.dataset(path).to_table()
    ds = lance_sql.dataset(path)
    assert ds.to_table().equals(want)
    assert ds.to_table()["v"].null_count == 0
    assert ds.take([1]).to_pylist() == [{"id": 2, "v": {}}]
    assert ds.to_table(filter="id > 1").to_pylist() == want.slice(1).to_pylist()
    got = lance_sql.connect(str(tmp_path)).sql("SELECT v FROM t WHERE id = 2").to_arrow_table()
    assert got.to_pylist() == [{"v": {}}]
