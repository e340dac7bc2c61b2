"""Errors name what the caller wrote: a projection or an update value is not a "filter",
and a merge condition's typo lists the columns it may name, not internal ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError


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
