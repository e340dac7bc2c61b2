"""A struct whose members live in different data files reads whole: pylance writes a
member whose type changed (``alter_columns`` of ``s.x``) into a new file, the other
members staying in the old one. lance_sql read the struct from the first member's file
only: every other member came back NULL, silently."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

STRUCT = pa.struct([("x", pa.int32()), ("y", pa.string()),
                    ("z", pa.struct([("p", pa.int32()), ("q", pa.string())]))])
ROWS = [{"x": 1, "y": "a", "z": {"p": 1, "q": "k"}}, None,
        {"x": None, "y": "c", "z": None}, {"x": 4, "y": None, "z": {"p": None, "q": "m"}}]


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3, 4], "s": pa.array(ROWS, STRUCT)}), path,
                        max_rows_per_file=2)
    lance.dataset(path).delete("id = 4")
    ds = lance.dataset(path)
    ds.alter_columns({"path": "s.x", "data_type": pa.int64()},
                     {"path": "s.z.p", "data_type": pa.int64()})
    return path


def test_the_struct_reads_as_pylance_reads_it(uri: str) -> None:
    theirs = lance.dataset(uri)
    ours = lance_sql.dataset(uri)
    assert ours.schema == theirs.schema
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table().column("s").to_pylist() == ROWS[:3]
    assert ours.to_table(columns=["s.y"]).column(0).to_pylist() == ["a", None, "c"]
    assert ours.to_table(filter="s.y = 'c'").column("id").to_pylist() == [3]
    assert ours.take([2, 0]).column("s").to_pylist() == [ROWS[2], ROWS[0]]
    assert ours.to_table(columns=["s"], filter="id = 1").column(0).to_pylist() == ROWS[:1]
