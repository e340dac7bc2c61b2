"""A writer opened before a column rename keeps its schema: its MemTable's rows must
still read under the table's new names (matched by field id, as flushed generations
are), in scans, filters, one-key and many-key lookups, searches and SQL, in the process
that holds the writer; and the same once the writer has flushed them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.session import connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string()), pa.field("vec", pa.list_(pa.float32(), 2))])


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids],
                     "vec": [[float(i), 0.0] for i in ids]}, schema=SCHEMA)


def _expected() -> dict[int, str]:
    out = {i: f"b{i}" for i in range(300)}
    out.update({i: f"g{i}" for i in range(0, 300, 5)})
    out.update({i: f"m{i}" for i in range(0, 400, 3)})
    return out


@pytest.mark.parametrize("renamed_key", [False, True])
def test_memtable_rows_read_under_the_new_names(tmp_path: Path, renamed_key: bool) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(list(range(300)), "b"), uri)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(_rows(list(range(0, 300, 5)), "g"))
        writer.flush_memtable()
        writer.put(_rows(list(range(0, 400, 3)), "m"))  # stays in the MemTables
        renames = [{"path": "v", "name": "w"}]
        if renamed_key:
            renames.append({"path": "id", "name": "key"})
        lance_sql.dataset(uri).alter_columns(*renames)
        key = "key" if renamed_key else "id"
        expected = _expected()
        now = MemWal(lance_sql.dataset(uri))
        table = now.scanner([key, "w"]).to_table()
        assert dict(zip(table.column(key).to_pylist(), table.column("w").to_pylist(),
                        strict=True)) == expected
        assert now.scanner([key], "w = 'm9'").to_table().column(key).to_pylist() == [9]
        one = now.get({key: [9]}, ["w"])
        assert one.column("w").to_pylist() == ["m9"]
        asked = list(range(0, 420, 2))
        many = now.get(pa.table({key: pa.array(asked, pa.int64())}), [key, "w"])
        assert dict(zip(many.column(key).to_pylist(), many.column("w").to_pylist(),
                        strict=True)) == {k: expected[k] for k in asked if k in expected}
        near = now.nearest("vec", np.array([399.0, 0.0]), k=1, columns=[key, "w"])
        assert near.column("w").to_pylist() == ["m399"]
        session = connect()
        session.register("t", uri)
        sql = session.sql(f"SELECT w FROM t WHERE {key} = 12").to_arrow_table()
        assert sql.column("w").to_pylist() == ["m12"]
    finally:
        writer.close()
    table = MemWal(lance_sql.dataset(uri)).scanner([key, "w"]).to_table()  # flushed now
    assert dict(zip(table.column(key).to_pylist(), table.column("w").to_pylist(),
                    strict=True)) == expected
