"""``LanceDataset.update`` types its values as pylance's does: a literal takes the type of
the column it meets, so ``i8 + 1`` is an int8 that wraps around (127 + 1 is -128) and a
literal the column cannot hold is refused (the update was refused at 127: the int64 sum
did not fit back). SQL's UPDATE keeps DataFusion's typing."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

TABLE = pa.table({"id": [1, 2, 3], "a": pa.array([127, 1, None], pa.int8()),
                  "f": pa.array([1.5, 2.0, 3.0], pa.float32())})


@pytest.mark.parametrize(("values", "column", "expected"), [
    ({"a": "a + 1"}, "a", [-128, 2, None]),
    ({"a": "a * 2"}, "a", [-2, 2, None]),
    ({"f": "f + 1e40"}, "f", [float("inf")] * 3),
])
def test_update_values_are_typed_as_pylance_types_them(tmp_path: Path, values, column,
                                                       expected) -> None:
    for lib in (lance, lance_sql):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        lance.write_dataset(TABLE, uri)
        lib.dataset(uri).update(values)
        assert lance.dataset(uri).to_table().sort_by("id").column(column).to_pylist() \
            == expected


def test_a_literal_the_column_cannot_hold_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, uri)
    with pytest.raises(InvalidInputError, match="does not convert"):
        lance_sql.dataset(uri).update({"a": "a + 1000"})
    assert lance_sql.dataset(uri).version == 1


def test_sql_update_keeps_datafusion_typing(tmp_path: Path) -> None:
    lance.write_dataset(TABLE, str(tmp_path / "t.lance"))
    session = lance_sql.connect(tmp_path)
    session.sql("UPDATE t SET a = a + 100 WHERE id = 2")  # an int64 sum, fits the column
    assert lance_sql.dataset(str(tmp_path / "t.lance")).to_table().sort_by("id") \
        .column("a").to_pylist() == [127, 101, None]
    with pytest.raises(InvalidInputError):
        session.sql("UPDATE t SET a = a + 1 WHERE id = 1")  # 128 does not fit
