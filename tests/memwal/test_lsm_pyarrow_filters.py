"""LSM reads take a pyarrow expression as their filter, as a base table's scanner does:
read as its tree (it raised a raw AttributeError in scans; a search ignored it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.memwal import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("my id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64()),
                    pa.field("vec", pa.list_(pa.float32(), 2))])


def test_scans_lookups_and_searches_take_pyarrow_filters(tmp_path: Path) -> None:
    ids = list(range(8))
    data = pa.table({"my id": ids, "v": [i / 10 for i in ids],
                     "vec": [[float(i), 0.0] for i in ids]}, schema=SCHEMA)
    ds = lance_sql.write_dataset(data, tmp_path / "t.lance")
    mw = ds.initialize_mem_wal(region_spec=RegionSpec.bucket("my id", 2))
    with mw.writer() as w:
        w.put(pa.table({"my id": [3], "v": [9.0], "vec": [[3.0, 0.0]]}, schema=SCHEMA))
    mw = lance_sql.dataset(tmp_path / "t.lance").mem_wal
    got = mw.scanner(filter=pc.field("my id") == 3).to_table()
    assert got["v"].to_pylist() == [9.0]
    sql = mw.scanner(filter='"my id" = 3 OR v > 0.55').to_table().sort_by("my id")
    expr = mw.scanner(filter=(pc.field("my id") == 3) | (pc.field("v") > 0.55)).to_table()
    assert expr.sort_by("my id").equals(sql)
    near = mw.nearest("vec", [0.0, 0.0], 3, filter=pc.field("v") > 0.25)
    assert near["my id"].to_pylist() == [3, 4, 5]  # the filter is applied, not dropped
    with pytest.raises(InvalidInputError, match="write it as SQL"):
        mw.scanner(filter=(pc.field("v") + 1) > 2).to_table()
