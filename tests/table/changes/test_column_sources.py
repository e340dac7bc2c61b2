"""Which older field holds an end column, from schemas and commit kinds alone: type
changes (new id, old values), overwrites (ids renumbered), restores (fields back), and
ids reused by a new column after a drop (NULL before it)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lance_sql.format.schema import LanceSchema
from lance_sql.table.changes.columns import Commit, column_sources, column_sources_many


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


def test_a_restore_maps_the_versions_after_the_restored_one_to_its_columns() -> None:
    """Between the version restored and its restore, a column is the field that
    continues the restored one: b at v2 is v1's b although v3 dropped it."""
    history = {1: _schema(("id", I64, 0), ("b", STR, 1)),
               2: _schema(("id", I64, 0), ("b", STR, 1)),
               3: _schema(("id", I64, 0)),
               4: _schema(("id", I64, 0), ("b", STR, 1))}
    restore = {4: Commit(restored=1)}
    assert _sources(history, 2, restore) == [("id", 0), ("b", 1)]
    assert _sources(history, 3, restore) == [("id", 0), None]
    # the same after an overwrite that dropped it (ids of the new schema unrelated)
    history[3] = _schema(("b2", I64, 0))
    assert _sources(history, 2, {3: Commit(overwrite=True), **restore}) == [("id", 0),
                                                                           ("b", 1)]


def test_a_column_added_again_before_a_restore_is_not_the_restored_one() -> None:
    """v3's b was added after v2 dropped the b v4 restores: v3's rows read NULL, whether
    the new b got the old id back or another one."""
    for again in (1, 2):
        history = {1: _schema(("id", I64, 0), ("b", STR, 1)),
                   2: _schema(("id", I64, 0)),
                   3: _schema(("id", I64, 0), ("b", STR, again)),
                   4: _schema(("id", I64, 0), ("b", STR, 1))}
        restore = {4: Commit(restored=1)}
        assert _sources(history, 3, restore) == [("id", 0), None], again
        assert _sources(history, 1, restore) == [("id", 0), ("b", 1)], again


def test_a_restore_between_a_restore_and_the_version_it_restored_brings_the_column_back(
        ) -> None:
    """v3 dropped b; v4 and v5 both restore v2 (the feed model's seed 749 restored twice
    in a row): v4 is v2 again, its rows hold v2's b, not NULL."""
    history = {1: _schema(("id", I64, 0), ("b", STR, 1)),
               2: _schema(("id", I64, 0), ("b", STR, 1)),
               3: _schema(("id", I64, 0)),
               4: _schema(("id", I64, 0), ("b", STR, 1)),
               5: _schema(("id", I64, 0), ("b", STR, 1))}
    restores = {4: Commit(restored=2), 5: Commit(restored=2)}
    assert _sources(history, 4, restores) == [("id", 0), ("b", 1)]
    assert _sources(history, 3, restores) == [("id", 0), None]
    # v4 restores v1, older than the v2 that v5 restores: v1's b is the b v2 continues
    restores[4] = Commit(restored=1)
    assert _sources(history, 4, restores) == [("id", 0), ("b", 1)]
    # ... unless v2's b was added after v1 (v1 without it: v4 neither)
    history[1] = history[4] = _schema(("id", I64, 0))
    assert _sources(history, 4, restores) == [("id", 0), None]


def test_a_type_change_before_a_restore_reads_the_changed_column() -> None:
    """n retyped at v3 (a new id), v4 restores v2: v3's rows hold n under its new id."""
    history = {1: _schema(("id", I64, 0), ("n", I32, 1)),
               2: _schema(("id", I64, 0), ("n", I32, 1)),
               3: _schema(("id", I64, 0), ("n", I64, 2)),
               4: _schema(("id", I64, 0), ("n", I32, 1))}
    restore = {4: Commit(restored=2)}
    assert _sources(history, 3, restore) == [("id", 0), ("n", 2)]


def _random_history(rng: random.Random, versions: int
                    ) -> tuple[dict[int, LanceSchema], dict[int, Commit]]:
    """Schemas of ``versions`` versions made by random adds, drops, renames, type
    changes, overwrites, restores and commits that change no column."""
    columns = [("id", I64, 0), ("a", STR, 1)]
    next_id = 2
    history, commits = {1: _schema(*columns)}, {}
    for v in range(2, versions + 1):
        op = rng.choice(["same", "same", "same", "add", "drop", "rename", "retype",
                         "overwrite", "restore", "restore"])
        if op == "add":
            columns = [*columns, (f"c{next_id}", rng.choice([I32, STR]), next_id)]
            next_id += 1
        elif op == "drop" and len(columns) > 1:
            columns = [c for c in columns if c != rng.choice(columns[1:])]
        elif op == "rename" and len(columns) > 1:
            i = rng.randrange(1, len(columns))
            columns = [(f"r{v}", c[1], c[2]) if j == i else c for j, c in enumerate(columns)]
        elif op == "retype" and len(columns) > 1:
            i = rng.randrange(1, len(columns))
            columns = [(c[0], I64 if c[1] != I64 else I32, next_id) if j == i else c
                       for j, c in enumerate(columns)]
            next_id += 1
        elif op == "overwrite":
            rng.shuffle(columns)
            columns = [(n, t, i) for i, (n, t, _) in enumerate(columns)]
            next_id = len(columns)
            commits[v] = Commit(overwrite=True)
        elif op == "restore":
            restored = rng.randrange(1, v)
            columns = [(f.name, f.arrow_type, f.id) for f in history[restored].fields]
            next_id = max(next_id, *(i + 1 for *_, i in columns))
            commits[v] = Commit(restored=restored)
        history[v] = _schema(*columns)
    return history, commits


@pytest.mark.parametrize("seed", range(40))
def test_one_walk_for_many_versions_answers_as_a_walk_for_each(seed: int) -> None:
    """The walks for two versions part at a restore between them: one walk down for
    every version must give each the fields a walk of its own gives."""
    rng = random.Random(seed)
    history, commits = _random_history(rng, rng.randrange(2, 40))
    end = max(history)
    fields = list(history[end].fields)
    commit_of = lambda v: commits.get(v, Commit())  # noqa: E731
    asked = rng.sample(sorted(history), rng.randrange(1, len(history) + 1))
    together = column_sources_many(end, asked, fields, history.__getitem__, commit_of)
    assert sorted(together) == sorted(asked)
    for version in asked:
        alone = column_sources(end, version, fields, history.__getitem__, commit_of)
        assert together[version] == alone, version


def test_many_versions_cost_one_step_each() -> None:
    """Each older version's schema is read about once for the whole window (a walk from
    the end for each version read V²/2 of them: 16 s for 2,000 versions)."""
    schema = _schema(("id", I64, 0), ("a", STR, 1))
    reads: list[int] = []

    def schema_of(v: int) -> LanceSchema:
        reads.append(v)
        return schema

    found = column_sources_many(500, range(1, 500), list(schema.fields), schema_of,
                                lambda v: Commit())
    assert all(held == tuple(schema.fields) for held in found.values())
    assert len(reads) <= 2 * 500
