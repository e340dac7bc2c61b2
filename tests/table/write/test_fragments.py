"""Checks the fragment writer makes before any data file sees the rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError, SchemaError


def _dictionary_with_a_null_entry() -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()),
                                          pa.array(["x", None]))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_null_dictionary_entries_in_a_non_nullable_column(tmp_path: Path, version: str) -> None:
    """A NULL in the dictionary (Arrow's null_count counts only NULL indices) is a NULL
    of a column that may not hold one: a SchemaError, as pylance refuses it (the files
    were written, and pylance could not read them)."""
    words = _dictionary_with_a_null_entry()
    assert words.null_count == 0
    field = pa.field("d", words.type, nullable=False)
    child = pa.field("w", words.type, nullable=False)
    nested = pa.StructArray.from_arrays([words], fields=[child])
    for name, table in (("top", pa.Table.from_arrays([words], schema=pa.schema([field]))),
                        ("child", pa.table({"st": nested}))):
        uri = tmp_path / f"{name}.lance"
        with pytest.raises(SchemaError, match="not nullable but the data has 1 null"):
            lance_sql.write_dataset(table, uri, data_storage_version=version)
        with pytest.raises(NotFoundError):
            lance_sql.dataset(uri)
