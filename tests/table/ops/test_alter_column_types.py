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


@pytest.mark.parametrize("nullable", [True, False])
def test_a_value_only_deleted_rows_hold_does_not_fail_a_change(tmp_path: Path,
                                                               nullable: bool) -> None:
    """3e9 fits no int32, but its row is deleted: narrowing x, SQL's ALTER COLUMN TYPE
    and add_columns over it succeed as in pylance, and pylance reads what they wrote; a
    live value that does not cast still fails, typed, leaving the table as it was."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.int64(), nullable)])
    rows = pa.table({"id": [1, 2, 3, 4], "x": [10, 20, 3_000_000_000, 40]}, schema=schema)
    for how in ("python", "sql"):
        uri = str(tmp_path / how / "t.lance")
        ds = lance_sql.write_dataset(rows, uri)
        ds.delete("id = 3")
        ds.add_columns({"y": "cast(x as int)"})
        if how == "sql":
            lance_sql.connect(tmp_path / how).sql("ALTER TABLE t ALTER COLUMN x TYPE INT")
        else:
            lance_sql.dataset(uri).alter_columns({"path": "x", "data_type": pa.int32()})
        theirs = lance.dataset(uri).to_table()
        assert theirs.schema.field("x").type == pa.int32()
        assert theirs.to_pydict() == {"id": [1, 2, 4], "x": [10, 20, 40], "y": [10, 20, 40]}
        assert lance_sql.dataset(uri).to_table().equals(theirs)
    uri = str(tmp_path / "live.lance")
    ds = lance_sql.write_dataset(rows, uri)
    ds.delete("id = 4")
    with pytest.raises(lance_sql.errors.InvalidInputError, match="cast"):
        ds.alter_columns({"path": "x", "data_type": pa.int32()})
    with pytest.raises(lance_sql.errors.InvalidInputError):
        ds.add_columns({"y": "cast(x as int)"})
    assert lance_sql.dataset(uri).version == 2
