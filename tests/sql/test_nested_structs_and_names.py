"""Struct-in-struct columns reach DataFusion unsliced (a sliced one made arrow-rs panic,
a PanicException that escapes ``except Exception``), through scans, the change feed and
LSM views; and ``"t@1"`` exposes the system columns as ``t VERSION AS OF 1`` does."""

from __future__ import annotations

from pathlib import Path

import datafusion
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.sql.batch_export import exportable

INNER = pa.struct([("c", pa.string())])
STRUCT = pa.struct([("a", pa.int32()), ("b", INNER)])


def _table(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"s{i}" for i in range(n)],
                     "st": pa.array([{"a": i, "b": {"c": f"c{i}"}} for i in range(n)], STRUCT),
                     "fs": pa.array([[{"b": {"c": str(i)}}] for i in range(n)],
                                    pa.list_(pa.struct([("b", INNER)]), 1))})


@pytest.mark.parametrize("column", ["st", "fs"])
def test_a_sliced_batch_is_copied_only_where_datafusion_needs_it(column: str) -> None:
    batch = _table(10).combine_chunks().to_batches()[0].slice(3, 4)
    out = exportable(batch)
    assert out.to_pylist() == batch.to_pylist()
    assert out.column(column).offset == 0
    assert out.column("s").offset == 3  # (a flat column passes as it is)
    got = datafusion.SessionContext().from_arrow(out.select([column])).to_arrow_table()
    assert got.column(0).to_pylist() == batch.column(column).to_pylist()
    whole = _table(4).combine_chunks().to_batches()[0]
    assert exportable(whole) is whole


def test_table_changes_of_nested_structs_through_sql(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_table(3), str(tmp_path / "t.lance"),
                                 enable_stable_row_ids=True)
    ds.update({"s": "'u'"}, where="id = 1")  # the pre-image's struct read elsewhere
    big = lance_sql.write_dataset(_table(20_000), str(tmp_path / "big.lance"),
                                  enable_stable_row_ids=True)
    session = lance_sql.connect(tmp_path)
    for name, data, version in (("t", ds, 2), ("big", big, 1)):
        want = data.table_changes(version, version, columns=["s", "st", "fs", "_change_type"])
        got = session.sql(f"SELECT s, st, fs, _change_type FROM table_changes('{name}', "
                          f"{version}, {version})").to_arrow_table()
        assert got.to_pylist() == want.to_pylist()
    scanned = session.sql("SELECT st, fs FROM big WHERE id >= 5000").to_arrow_table()
    assert scanned.to_pylist() == big.to_table(columns=["st", "fs"],
                                               filter="id >= 5000").to_pylist()


def test_a_version_in_the_name_exposes_the_system_columns(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3]}), str(tmp_path / "t.lance"),
                                 enable_stable_row_ids=True)
    ds.delete("id = 2")
    session = lance_sql.connect(tmp_path)
    columns = "id, _rowid, _rowaddr, _row_created_at_version, _row_last_updated_at_version"
    want = session.sql(f"SELECT {columns} FROM t VERSION AS OF 1 ORDER BY id").to_pylist()
    assert len(want) == 3
    assert session.sql(f'SELECT {columns} FROM "t@1" ORDER BY id').to_pylist() == want
    assert session.sql('SELECT id FROM "t@1" WHERE _rowid = 1').to_pylist() == [{"id": 2}]
    assert session.sql('SELECT * FROM "t@1" ORDER BY id').to_pylist() == [
        {"id": 1}, {"id": 2}, {"id": 3}]  # (hidden from *)
