"""Errors name what the caller wrote: a projection or an update value is not a "filter",
and a merge condition's typo lists the columns it may name, not internal ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError, SchemaError


@pytest.fixture
def ds(tmp_path: Path) -> lance_sql.LanceDataset:
    table = pa.table({"id": [1, 2], "name": ["a", "b"], "st": [{"x": 1}, {"x": 2}]})
    return lance_sql.write_dataset(table, str(tmp_path / "t.lance"))


def test_a_projection_typo_is_not_called_a_filter(ds: lance_sql.LanceDataset) -> None:
    with pytest.raises(NotFoundError) as err:
        ds.to_table(columns=["st.z"])
    assert "'st.z' not found" in str(err.value) and "filter" not in str(err.value)


def test_update_values_are_sql_text(ds: lance_sql.LanceDataset) -> None:
    with pytest.raises(InvalidInputError, match="SQL expressions.*got 5 for 'id'"):
        ds.update({"id": 5})
    with pytest.raises(NotFoundError) as err:
        ds.update({"name": "zzz"})
    assert "filter" not in str(err.value)
    assert ds.update({"id": "5"}) == {"num_rows_updated": 2}


def test_a_merge_condition_typo_lists_only_what_it_may_name(ds: lance_sql.LanceDataset
                                                           ) -> None:
    source = pa.table({"id": [1], "name": ["z"], "st": [{"x": 9}]})
    builder = ds.merge_insert("id").when_matched_update_all("nope = 1")
    with pytest.raises(NotFoundError) as err:
        builder.execute(source)
    message = str(err.value)
    assert "target.id" in message and "source.name" in message
    assert "__merge" not in message


def test_a_merge_source_null_in_a_non_nullable_column_is_a_schema_error(tmp_path: Path
                                                                        ) -> None:
    # (it escaped as pyarrow's ArrowInvalid, which is no lance_sql error; nothing commits)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("w", pa.int32(), nullable=False)])
    ds = lance_sql.write_dataset(pa.table({"id": [1], "w": [1]}, schema=schema),
                                 str(tmp_path / "n.lance"))
    source = pa.table({"id": pa.array([1, 2], pa.int64()), "w": pa.array([None, 3], pa.int32())})
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    with pytest.raises(SchemaError, match="column 'w' is not nullable"):
        builder.execute(source)
    assert ds.version == 1 and ds.to_table().to_pylist() == [{"id": 1, "w": 1}]
