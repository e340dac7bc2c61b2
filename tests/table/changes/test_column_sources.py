"""Which older field holds an end column, from schemas and commit kinds alone: type
changes (new id, old values), overwrites (ids renumbered), restores (fields back), and
ids reused by a new column after a drop (NULL before it)."""

from __future__ import annotations

import pyarrow as pa

from lance_sql.format.schema import LanceSchema
from lance_sql.table.changes.columns import Commit, column_sources


def _schema(*columns: tuple[str, pa.DataType, int]) -> LanceSchema:
    schema = LanceSchema.from_arrow(pa.schema([(n, t) for n, t, _ in columns]))
    ids = iter(i for *_, i in columns)
    return LanceSchema(tuple(f.__class__(**{**f.__dict__, "id": next(ids)})
                             for f in schema.fields), schema.metadata)


def _sources(history: dict[int, LanceSchema], version: int,
             commits: dict[int, Commit] | None = None) -> list[tuple[str, int] | None]:
    end = max(history)
    fields = list(history[end].fields)
    calls: list[int] = []

    def commit_of(v: int) -> Commit:
        calls.append(v)
        return (commits or {}).get(v, Commit())

    found = column_sources(end, version, fields, history.__getitem__, commit_of)
    for f, s in zip(fields, found, strict=True):
        if s is not None and s.id == f.id and s.arrow_type == f.arrow_type:
            assert s is f  # the end's own field: read as it is
    return [None if s is None else (s.name, s.id) for s in found]


I32, I64, STR = pa.int32(), pa.int64(), pa.string()


def test_unchanged_ids_map_to_themselves_without_reading_commits() -> None:
    history = {1: _schema(("id", I64, 0), ("a", STR, 1)),
               2: _schema(("id", I64, 0), ("a", STR, 1))}
    assert _sources(history, 1) == [("id", 0), ("a", 1)]


def test_a_type_change_maps_to_the_old_id() -> None:
    history = {1: _schema(("id", I64, 0), ("n", I32, 1)),
               2: _schema(("id", I64, 0), ("n", I64, 2)),
               3: _schema(("id", I64, 0), ("n", I64, 2))}
    assert _sources(history, 1) == [("id", 0), ("n", 1)]
    assert _sources(history, 2) == [("id", 0), ("n", 2)]


def test_a_rename_and_type_change_at_once_maps_by_place() -> None:
    history = {1: _schema(("id", I64, 0), ("n", I32, 1)),
               2: _schema(("id", I64, 0), ("m", I64, 2))}
    assert _sources(history, 1) == [("id", 0), ("n", 1)]


def test_an_overwrite_maps_by_name_and_type_not_by_id() -> None:
    history = {1: _schema(("id", I64, 0), ("a", STR, 1), ("b", STR, 2)),
               2: _schema(("id", I64, 0), ("b", STR, 1), ("c", I32, 2))}
    overwrite = {2: Commit(overwrite=True)}
    assert _sources(history, 1, overwrite) == [("id", 0), ("b", 2), None]
    # the same schemas without the overwrite: a renamed b (read as the end's field: the
    # same id and type), the old b dropped, c added
    assert _sources(history, 1) == [("id", 0), ("b", 1), None]


def test_a_column_added_again_under_its_old_id_reads_null_before() -> None:
    history = {1: _schema(("id", I64, 0), ("b", STR, 1)),
               2: _schema(("id", I64, 0)),
               3: _schema(("id", I64, 0), ("b", STR, 1))}
    assert _sources(history, 1) == [("id", 0), None]
    assert _sources(history, 2) == [("id", 0), None]


def test_a_restore_brings_the_fields_back() -> None:
    history = {1: _schema(("id", I64, 0), ("b", STR, 1)),
               2: _schema(("id", I64, 0)),
               3: _schema(("id", I64, 0), ("b", STR, 1))}
    restore = {3: Commit(restored=1)}
    assert _sources(history, 1, restore) == [("id", 0), ("b", 1)]
    assert _sources(history, 2, restore) == [("id", 0), None]  # (v2 had no b)
