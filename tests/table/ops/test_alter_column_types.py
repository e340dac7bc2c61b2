"""alter_columns changes the type of nested top-level columns too (a list to a large
list was refused), and cuts times to a coarser unit as pylance does; pylance reads the
result, and where pylance can make the change itself, it makes the same."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

TABLE = pa.table({
    "id": pa.array([1, 2, 3], pa.int64()),
    "l": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
    "st": pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int32())])),
    "ts": pa.array([1_500_000, -1, None], pa.timestamp("us", "UTC")),
})


@pytest.mark.parametrize(("column", "target", "pylance_can"), [
    ("l", pa.large_list(pa.int64()), True),
    ("ts", pa.timestamp("s", "UTC"), True),
    ("st", pa.struct([("a", pa.int64())]), False),
    ("l", pa.list_(pa.string()), False),
])
def test_a_column_changes_type_as_pylance_changes_it(tmp_path: Path, column: str,
                                                      target: pa.DataType,
                                                      pylance_can: bool) -> None:
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(TABLE, uri)
    lance_sql.dataset(ours).alter_columns({"path": column, "data_type": target})
    got = lance_sql.dataset(ours).to_table()
    assert got.schema.field(column).type == target
    assert lance.dataset(ours).to_table().equals(got)  # pylance reads it alike
    assert got.column(column).to_pylist() == TABLE.column(column).cast(
        target, safe=False).to_pylist()
    if pylance_can:
        lance.dataset(theirs).alter_columns({"path": column, "data_type": target})
        assert lance.dataset(theirs).to_table().equals(got)


def test_a_field_inside_a_struct_cannot_change_type_alone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(TABLE, uri)
    with pytest.raises(lance_sql.InvalidInputError, match="top-level"):
        lance_sql.dataset(uri).alter_columns({"path": "st.a", "data_type": pa.int64()})
    assert lance_sql.dataset(uri).version == 1
