"""Fixed-size lists of fixed-size lists with NULLs at every level, written by lance_sql
and read by pylance (and back), and pylance pages lance_sql refused: all-null inner
lists stored without their inner layers, and bools stored a byte each (full-zip).

Each fixed-size-list layer of a page carries the validity of its own items (the inner
lists under an outer layer, the values under the innermost): the writer put the
values' validity on the outer layer and dropped the inner lists', so a NULL inner list
read back as zeros and pylance could not read the file at all."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import UnsupportedFeatureError

lance = pytest.importorskip("lance")

NESTED = pa.list_(pa.list_(pa.float32(), 4), 2)
SHAPES = {
    "inner_list_null": [[[0.0, 1.0, 2.0, 3.0], None], [[8.0, 9.0, 10.0, 11.0], None]],
    "row_and_value_null": [None, [[1.0, None, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]],
    "every_level": [[None, [1.0, None, 3.0, 4.0]], None, [[5.0, 6.0, 7.0, 8.0], None],
                    [[None, None, None, None], [9.0, 9.5, 9.75, 10.0]]] * 700,
    "inner_all_null": [[None, None], None, [None, None]],
}


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_nested_fixed_size_lists_keep_their_nulls(tmp_path: Path, version: str,
                                                  shape: str) -> None:
    table = pa.table({"c": pa.array(SHAPES[shape], NESTED),
                      "id": pa.array(range(len(SHAPES[shape])), pa.int64())})
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    lance_sql.write_dataset(table, ours, data_storage_version=version)
    lance.write_dataset(table, theirs, data_storage_version=version)
    assert lance.dataset(ours).to_table().equals(table)
    for uri in (ours, theirs):
        assert lance_sql.dataset(uri).to_table().equals(table), uri
        rows = [0, len(table) - 1]
        assert lance_sql.dataset(uri).take(rows).equals(table.take(rows)), uri


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_bools_stored_a_byte_each_read(tmp_path: Path, version: str) -> None:
    meta = {"lance-encoding:structural-encoding": "fullzip"}
    values = pa.array([i % 3 == 0 for i in range(1000)], mask=[i % 7 == 0 for i in range(1000)])
    table = pa.table({"b": values}).cast(pa.schema([pa.field("b", pa.bool_(), metadata=meta)]))
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table, uri, data_storage_version=version)
    ours = lance_sql.dataset(uri)
    assert ours.to_table().column("b").equals(table.column("b"))
    assert ours.take([0, 3, 7, 999]).column("b").equals(table.column("b").take([0, 3, 7, 999]))


def test_maps_need_format_2_2_as_in_pylance(tmp_path: Path) -> None:
    """pylance refuses map columns in 2.1 files: it could not append to a 2.1 table
    lance_sql had written one in."""
    table = pa.table({"m": pa.array([[("a", 1)], [], None], pa.map_(pa.string(), pa.int32()))})
    uri = tmp_path / "t.lance"
    with pytest.raises(UnsupportedFeatureError, match="map columns need Lance 2.2"):
        lance_sql.write_dataset(table, str(uri), data_storage_version="2.1")
    assert not (uri / "_versions").exists()
    lance_sql.write_dataset(table, str(uri))
    lance.write_dataset(table, str(uri), mode="append")
    assert lance_sql.dataset(str(uri)).count_rows() == 6
