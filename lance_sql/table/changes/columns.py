"""Which column of an older version holds each of the end version's columns.

The feed shows every change row with the window's end columns, reading a row's values
from the version it comes from. A column usually keeps its field id from version to
version, but not always:

- a type change (``alter_columns``) gives the column a new id; the older versions hold
  its values under the old id, in the old type;
- an overwrite numbers the new schema's fields afresh, so an id of the older schema may
  be another column altogether (``b`` now has the id ``a`` had);
- a restore brings back an older version's fields, ids and files, also ones the versions
  between dropped;
- a column dropped and added again may get its old id back (pylance and lance_sql reuse
  the ids a compaction freed), while older files still hold the dropped column's values
  under it: those must read NULL.

:func:`column_sources` follows each end column back one version at a time, reading a
commit's operation only where ids alone cannot tell (an id vanished, or changed name or
type). Pure: it is given the schemas and operations, and is tested without files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lance_sql.format.schema import LanceField, LanceSchema

__all__ = ["Commit", "column_sources"]


@dataclass(frozen=True)
class Commit:
    """What a commit's operation says of its columns' identity."""

    overwrite: bool = False  # a new schema, its ids unrelated to the older ones
    restored: int | None = None  # the older version a restore made current again


SchemaOf = Callable[[int], LanceSchema]
CommitOf = Callable[[int], Commit]


def column_sources(end: int, version: int, fields: Sequence[LanceField],
                   schema_of: SchemaOf, commit_of: CommitOf
                   ) -> tuple[LanceField | None, ...]:
    """For each of ``fields`` (top-level columns of version ``end``), the field of version
    ``version``'s schema holding its values, or None when that version had no such
    column (its rows read NULL). Where the column is the same field as at the end (same
    id and type) the end's own field object is given, so a caller tells "read as it is"
    by identity."""
    held: list[LanceField | None] = list(fields)
    v = end
    while v > version and any(h is not None for h in held):
        newer, older = schema_of(v), schema_of(v - 1)
        older_by_id = {f.id: f for f in older.fields}
        if any(h is not None and not _continues(h, older_by_id.get(h.id)) for h in held):
            commit = commit_of(v)
            if commit.restored is not None and version <= commit.restored < v:
                v = commit.restored  # version v is that version again, field for field
                continue
            held = [_older(h, newer, older, older_by_id, commit) for h in held]
        else:
            held = [None if h is None else older_by_id[h.id] for h in held]
        v -= 1
    return tuple(f if h is not None and h.id == f.id and h.arrow_type == f.arrow_type
                 else h for f, h in zip(fields, held, strict=True))


def _continues(field: LanceField | None, older: LanceField | None) -> bool:
    """Whether ``older`` (the older version's field of ``field``'s id) is plainly the same
    column: same name and type."""
    return field is None or (older is not None and older.name == field.name
                             and older.arrow_type == field.arrow_type)


def _older(field: LanceField | None, newer: LanceSchema, older: LanceSchema,
           older_by_id: dict[int, LanceField], commit: Commit) -> LanceField | None:
    """``field`` (a column of ``newer``) one version back, in ``older``."""
    if field is None:
        return None
    if commit.overwrite:
        # ids of the two schemas are unrelated: a column of the same name and type
        same = next((f for f in older.fields if f.name == field.name), None)
        return same if same is not None and same.arrow_type == field.arrow_type else None
    old = older_by_id.get(field.id)
    if old is not None:  # renamed (a type never changes under one id)
        return old if old.arrow_type == field.arrow_type else None
    # the id is new here: a type change of a column whose old id left in this commit
    # (found by name, or by place when renamed in the same change), else added here
    newer_ids = set(newer.field_ids())
    left = [f for f in older.fields if f.id not in newer_ids]
    same = next((f for f in left if f.name == field.name), None)
    if same is not None:
        return same
    if len(older.fields) == len(newer.fields):
        at = next(i for i, f in enumerate(newer.fields) if f.id == field.id)
        if older.fields[at] in left:
            return older.fields[at]
    return None
