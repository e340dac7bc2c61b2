"""Struct fields written in another order than the table's are matched by name, as
pylance matches them: by append and merge_insert, at any depth (both were refused)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.table.write.field_order import (
    array_in_table_order,
    table_in_table_order,
    type_in_table_order,
)

XY = pa.struct([("x", pa.int32()), ("y", pa.string())])
YX = pa.struct([("y", pa.string()), ("x", pa.int32())])
DEEP = pa.struct([("n", pa.list_(XY)), ("m", XY)])
DEEP_REORDERED = pa.struct([("m", YX), ("n", pa.list_(YX))])


def test_the_type_follows_the_table_at_every_depth() -> None:
    assert type_in_table_order(YX, XY) == XY
    assert type_in_table_order(DEEP_REORDERED, DEEP) == DEEP
    assert type_in_table_order(pa.large_list(YX), pa.large_list(XY)) == pa.large_list(XY)
    assert type_in_table_order(pa.list_(YX, 2), pa.list_(XY, 2)) == pa.list_(XY, 2)
    other = pa.struct([("y", pa.string()), ("z", pa.int32())])
    assert type_in_table_order(other, XY) == other  # other names: left for the check
    assert type_in_table_order(pa.int64(), XY) == pa.int64()


def test_sliced_and_null_values_keep_their_rows() -> None:
    rows = [{"m": {"y": str(i), "x": i}, "n": None if i % 3 == 0 else
             [{"y": f"{i}.{j}", "x": j} for j in range(i % 4)]} if i % 5 else None
            for i in range(40)]
    values = pa.array(rows, DEEP_REORDERED).slice(7, 25)
    got = array_in_table_order(values, DEEP)
    assert got.type == DEEP
    got.validate(full=True)
    assert got.to_pylist() == values.to_pylist()  # (dicts compare by name)
    fixed = pa.array([[{"y": "a", "x": 1}, None], None, [{"y": "b", "x": 2}] * 2],
                     pa.list_(YX, 2)).slice(1)
    moved = array_in_table_order(fixed, pa.list_(XY, 2))
    moved.validate(full=True)
    assert moved.type == pa.list_(XY, 2)
    assert moved.to_pylist() == fixed.to_pylist()
    table = pa.table({"s": values, "k": pa.array(range(25))})
    assert table_in_table_order(table, pa.schema([("s", DEEP)])).schema.field("s").type \
        == DEEP


def _tables(tmp_path: Path) -> tuple[str, pa.Table, pa.Table]:
    base = pa.table({"id": pa.array([1, 2], pa.int64()),
                     "st": pa.array([{"x": 1, "y": "a"}, None], XY)})
    source = pa.table({"st": pa.array([{"y": "b", "x": 2}, {"y": "c", "x": None}], YX),
                       "id": pa.array([2, 3], pa.int64())})
    return str(tmp_path / "t.lance"), base, source


def test_append_matches_struct_fields_by_name_as_pylance(tmp_path: Path) -> None:
    ours, base, source = _tables(tmp_path)
    theirs = str(tmp_path / "theirs.lance")
    lance_sql.write_dataset(base, ours)
    lance.write_dataset(base, theirs)
    lance_sql.write_dataset(source, ours, mode="append")
    lance.write_dataset(source, theirs, mode="append")
    expected = lance.dataset(theirs).to_table()
    assert lance_sql.dataset(ours).to_table().equals(expected)
    assert lance.dataset(ours).to_table().equals(expected)
    assert expected.num_rows == 4


def test_merge_insert_matches_struct_fields_by_name_as_pylance(tmp_path: Path) -> None:
    ours, base, source = _tables(tmp_path)
    theirs = str(tmp_path / "theirs.lance")
    lance_sql.write_dataset(base, ours)
    lance.write_dataset(base, theirs)
    for lib, uri in ((lance_sql, ours), (lance, theirs)):
        (lib.dataset(uri).merge_insert("id").when_matched_update_all()
         .when_not_matched_insert_all().execute(source))
    expected = lance.dataset(theirs).to_table().sort_by("id")
    assert lance_sql.dataset(ours).to_table().sort_by("id").equals(expected)
    assert expected.column("st").to_pylist() == [{"x": 1, "y": "a"}, {"x": 2, "y": "b"},
                                                 {"x": None, "y": "c"}]


def test_struct_fields_of_other_names_are_still_refused(tmp_path: Path) -> None:
    ours, base, _ = _tables(tmp_path)
    lance_sql.write_dataset(base, ours)
    other = pa.table({"id": pa.array([5], pa.int64()),
                      "st": pa.array([{"y": "b", "z": 2}],
                                     pa.struct([("y", pa.string()), ("z", pa.int32())]))})
    with pytest.raises(SchemaError, match="st"):
        lance_sql.write_dataset(other, ours, mode="append")
    assert lance_sql.dataset(ours).version == 1
