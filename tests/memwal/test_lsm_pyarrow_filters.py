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
    sql = mw.scanner(filter='`my id` = 3 OR v > 0.55').to_table().sort_by("my id")
    expr = mw.scanner(filter=(pc.field("my id") == 3) | (pc.field("v") > 0.55)).to_table()
    assert expr.sort_by("my id").equals(sql)
    near = mw.nearest("vec", [0.0, 0.0], 3, filter=pc.field("v") > 0.25)
    assert near["my id"].to_pylist() == [3, 4, 5]  # the filter is applied, not dropped
    with pytest.raises(InvalidInputError, match="write it as SQL"):
        mw.scanner(filter=(pc.field("v") + 1) > 2).to_table()


@pytest.mark.parametrize("name", ["_tombstone", "_gen", "_region", "_key", "_distance"])
def test_columns_named_as_what_lsm_reads_add_are_refused(tmp_path: Path, name: str) -> None:
    """A user column ``_gen`` (``_region``, ``_key``, ``_distance``) read as the values the
    LSM view adds under that name: generation numbers, region ids, key positions. Such a
    table is refused a MemWAL; one renamed so after its MemWAL began refuses LSM reads."""
    from lance_sql.errors import SchemaError
    from lance_sql.memwal.read import nodes
    from lance_sql.memwal.wal import RESERVED_COLUMNS

    assert {nodes.GEN, nodes.REGION, nodes.KEY_POSITION, nodes.DISTANCE} < set(RESERVED_COLUMNS)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field(name, pa.int64())])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], name: [100, 200]}, schema=schema),
                                 tmp_path / "t.lance")
    with pytest.raises(SchemaError, match="reserves"):
        ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 1))
    ds.alter_columns({"path": name, "name": "x"})
    mw = lance_sql.dataset(tmp_path / "t.lance").initialize_mem_wal(
        region_spec=RegionSpec.bucket("id", 1))
    lance_sql.dataset(tmp_path / "t.lance").alter_columns({"path": "x", "name": name})
    with pytest.raises(SchemaError, match="reserves"):
        lance_sql.dataset(tmp_path / "t.lance").mem_wal.scanner().to_table()
    with pytest.raises(SchemaError, match="reserves"):
        lance_sql.connect(str(tmp_path)).sql("SELECT * FROM t").to_arrow_table()
    assert mw is not None
