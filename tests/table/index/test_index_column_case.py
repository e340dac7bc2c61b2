"""create_scalar_index finds its column as pylance does: a name of another case indexes
the column when only one matches so, and the index is named after the column (it was
refused); a struct field, which pylance indexes and lance_sql does not, is refused as an
unsupported feature, not as a missing column."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import UnsupportedFeatureError

TABLE = pa.table({"id": [1, 2, 3], "Name": ["a", "b", "a"],
                  "s": pa.array([{"x": 1}, {"x": 2}, {"x": 3}], pa.struct([("x", pa.int64())]))})


@pytest.mark.parametrize(("given", "kind", "column"), [
    ("ID", "BTREE", "id"), ("name", "BITMAP", "Name")])
def test_a_column_of_another_case_is_indexed_as_by_pylance(tmp_path: Path, given: str,
                                                          kind: str, column: str) -> None:
    listed = {}
    for lib in (lance, lance_sql):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        lance.write_dataset(TABLE, uri)
        lib.dataset(uri).create_scalar_index(given, kind)
        # each library reads the other's index
        other = lance_sql if lib is lance else lance
        (index,) = other.dataset(uri).describe_indices()
        listed[lib.__name__] = (index.name, list(index.field_names))
        assert other.dataset(uri).to_table(filter=f"{column} = 2" if column == "id"
                                           else f"{column} = 'b'").num_rows == 1
    assert listed["lance_sql"] == listed["lance"] == (f"{column}_idx", [column])


def test_a_struct_field_is_an_unsupported_feature(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, uri)
    with pytest.raises(UnsupportedFeatureError, match="top-level"):
        lance_sql.dataset(uri).create_scalar_index("s.x", "BTREE")
