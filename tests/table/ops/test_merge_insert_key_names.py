"""merge_insert finds its key columns as pylance does: a name of another case matches
the column when only one does (``on="ID"`` for ``id``; it was refused), and a struct
column as the key is a typed refusal (pyarrow's ArrowInvalid escaped from the join)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

STRUCT = pa.struct([("x", pa.int64())])
TABLE = pa.table({"id": [1, 2, 3], "Name": ["a", "b", "c"],
                  "s": pa.array([{"x": 1}, {"x": 2}, {"x": 3}], STRUCT)})
SOURCE = pa.table({"id": [2, 4], "Name": ["b", "D"],
                   "s": pa.array([{"x": 20}, {"x": 40}], STRUCT)})


def _upsert(ds, on):
    return ds.merge_insert(on).when_matched_update_all().when_not_matched_insert_all() \
        .execute(SOURCE)


@pytest.mark.parametrize("on", ["ID", ["Id", "NAME"], ["id", "ID"]])
def test_a_key_of_another_case_matches_as_in_pylance(tmp_path: Path, on) -> None:
    results = {}
    for lib in (lance, lance_sql):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        lance.write_dataset(TABLE, uri)
        stats = _upsert(lib.dataset(uri), on)
        results[lib.__name__] = (stats, lance.dataset(uri).to_table().sort_by("id"))
    assert results["lance_sql"][0] == results["lance"][0] == {
        "num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert results["lance_sql"][1].equals(results["lance"][1])


def test_a_struct_key_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, uri)
    with pytest.raises(InvalidInputError, match="struct"):
        _upsert(lance_sql.dataset(uri), "s")
    assert lance_sql.dataset(uri).version == 1
