"""The one column matcher readers and the merger share: a generation's columns to the
table's by field id; a retyped column (new id, its name, its place, another type) by
name; a column dropped and added again under its name is another column."""

from __future__ import annotations

import dataclasses
import itertools

import pyarrow as pa

from lance_sql.format.schema import LanceField, LanceSchema
from lance_sql.memwal.column_match import match_columns

WRITTEN = LanceSchema.from_arrow(pa.schema([
    ("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("x", pa.int32()),
    ("_tombstone", pa.bool_())]))  # ids 0..4


def _field(name: str, t: pa.DataType, field_id: int) -> LanceField:
    return LanceField.from_arrow(pa.field(name, t), itertools.count(field_id))


def _table(*fields: LanceField) -> LanceSchema:
    return LanceSchema(tuple(fields))


def _by_id(field_id: int) -> LanceField:
    return next(f for f in WRITTEN.fields if f.id == field_id)


def _names(matched: dict[int, LanceField]) -> dict[int, tuple[str, int]]:
    return {i: (f.name, f.id) for i, f in matched.items()}


def test_by_field_id_whatever_the_name() -> None:
    renamed = dataclasses.replace(_by_id(1), name="v2")
    table = _table(_by_id(0), renamed, _by_id(2), _by_id(3))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",))) == {
        0: ("id", 0), 1: ("v2", 1), 2: ("s", 2), 3: ("x", 3)}


def test_a_retyped_column_by_name() -> None:
    """x int32 -> int64 rewrote it under id 5, in its place."""
    table = _table(_by_id(0), _by_id(1), _by_id(2), _field("x", pa.int64(), 5))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",)))[3] == ("x", 5)
    middle = _table(_by_id(0), _field("v", pa.float64(), 5), _by_id(2), _by_id(3))
    assert _names(match_columns(WRITTEN, middle, skip=("_tombstone",)))[1] == ("v", 5)


def test_dropped_and_added_again_is_another_column() -> None:
    # s dropped, s added again (same type, at the end): the old values are not its
    table = _table(_by_id(0), _by_id(1), _by_id(3), _field("s", pa.string(), 5))
    assert 2 not in match_columns(WRITTEN, table, skip=("_tombstone",))
    # v dropped, v added again with another type: not where v stood
    table = _table(_by_id(0), _by_id(2), _by_id(3), _field("v", pa.float64(), 5))
    assert 1 not in match_columns(WRITTEN, table, skip=("_tombstone",))
    # the last column dropped and added again with its type: dropped
    table = _table(_by_id(0), _by_id(1), _by_id(2), _field("x", pa.int32(), 5))
    assert 3 not in match_columns(WRITTEN, table, skip=("_tombstone",))


def test_a_name_taken_by_a_renamed_column() -> None:
    """s dropped, then v renamed to s: s's values are gone, v's read as s."""
    table = _table(_by_id(0), dataclasses.replace(_by_id(1), name="s"), _by_id(3))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",))) == {
        0: ("id", 0), 1: ("s", 1), 3: ("x", 3)}


def test_skipped_columns_never_match() -> None:
    """The generation's own _tombstone shares no id or name with the table's columns."""
    table = _table(_by_id(0), _field("_tombstone", pa.int64(), 4))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",))) == {0: ("id", 0)}


def test_altered_to_its_own_type_in_its_place() -> None:
    """v altered to int64 (its type): rewritten under id 5 in its place, still v."""
    table = _table(_by_id(0), _field("v", pa.int64(), 5), _by_id(2), _by_id(3))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",)))[1] == ("v", 5)
    # v and s both altered so: each still has a surviving column after it (x)
    table = _table(_by_id(0), _field("v", pa.int64(), 5), _field("s", pa.string(), 6),
                   _by_id(3))
    assert _names(match_columns(WRITTEN, table, skip=("_tombstone",)))[2] == ("s", 6)
    # v dropped, v added again (its type): appended, not in its place
    table = _table(_by_id(0), _by_id(2), _by_id(3), _field("v", pa.int64(), 5))
    assert 1 not in match_columns(WRITTEN, table, skip=("_tombstone",))
