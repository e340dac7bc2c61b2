"""Which of the table's columns holds each column of a flushed generation now (pure).

A generation keeps the schema its writer had; the table may have renamed, retyped, dropped
and added columns since. Readers (:func:`~.generation_tables.named_as_table`) and the
merger (:func:`~.merger.merge`) both ask this one matcher:

* By field id: the same id is the same column, whatever it is called now.
* A column whose id the table no longer has was dropped, or was altered to a type (a
  type change, even to the type it had, rewrites the column under a new id, keeping its
  name and its place: so do our ``alter_columns`` and pylance's). It is matched by name
  only when it looks like the latter: the table's column of that name has an id the
  generation never had and the same place (the same surviving neighbours on both
  sides); of the same type, also a surviving column after it.
* Otherwise it is gone: a column dropped and then added again under the same name is
  another column (another id), appended at the end; the generation's rows have no value
  for it (NULL), not the dropped column's old values.

Fields nested in a column (struct members, list items) are matched by id alone
(:func:`named_by_id`): a rename inside a struct keeps the field's id, and a nested field
cannot change type.

Known limit: a column altered to the type it already had with no surviving column after
it has the schema a column dropped and appended again would have; it is taken for the
latter, so the generation's rows read NULL there. Our ``alter_columns`` keeps such a
column's id on a table with a MemWAL (pylance refuses type changes there), so only a
table altered so before that (or before it had a MemWAL, with no generations) has it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import pyarrow as pa

from lance_sql.format.schema import LanceField, LanceSchema

__all__ = ["match_columns", "named_by_id", "relabelled"]


def match_columns(written: LanceSchema, table: LanceSchema,
                  skip: Collection[str] = ()) -> dict[int, LanceField]:
    """For each top-level field id of ``written`` (a generation's schema), the field of
    ``table`` holding its values now; ids left out are gone. ``skip``: names of
    ``written``'s own columns (``_tombstone``) that are never the table's."""
    mine = [f for f in written.fields if f.name not in skip]
    theirs = list(table.fields)
    table_ids = {f.id: f for f in theirs}
    written_ids = {f.id for f in mine}
    out = {f.id: table_ids[f.id] for f in mine if f.id in table_ids}
    survivors = set(out)
    by_name = {f.name: f for f in theirs}
    for at, field in enumerate(mine):
        if field.id in out:
            continue
        other = by_name.get(field.name)
        if other is None or other.id in written_ids:
            continue  # dropped; or its name now belongs to another column written here
        place = _neighbours(mine, at, survivors)
        if place != _neighbours(theirs, theirs.index(other), survivors):
            continue  # not where the column stood: added elsewhere
        if other.arrow_type.equals(field.arrow_type) and place[1] is None:
            continue  # the same type with nothing after it: maybe dropped and appended
        out[field.id] = other
    return out


def _neighbours(fields: Sequence[LanceField], at: int, survivors: set[int]
                ) -> tuple[int | None, int | None]:
    """The ids of the nearest fields before and after ``fields[at]`` that both schemas
    hold (None: none on that side)."""
    before = next((f.id for f in reversed(fields[:at]) if f.id in survivors), None)
    after = next((f.id for f in fields[at + 1:] if f.id in survivors), None)
    return before, after


def named_by_id(written: LanceField, now: LanceField) -> LanceField:
    """``written`` (a generation's or a writer's column) named as ``now`` (the table's
    column holding its values) names it, and each field nested in it named as ``now``'s
    nested field of the same id. A nested field ``now`` has no field of (dropped) keeps
    its name, unless one of ``now``'s fields took it: then it is hidden under a name no
    reader asks for, as a dropped column is (see :func:`~.generation_tables.named_schema`).
    Types are left as written. The same object when no name changes."""
    kids = {c.id: c for c in now.children}
    taken = {c.name for c in now.children}
    children = tuple(named_by_id(c, kids[c.id]) if c.id in kids
                     else dataclasses.replace(c, name=f"{c.name} (dropped field {c.id})")
                     if c.name in taken else c
                     for c in written.children)
    same_kids = all(a is b for a, b in zip(children, written.children, strict=True))
    if same_kids and written.name == now.name:
        return written
    return dataclasses.replace(written, name=now.name, children=children)


def relabelled(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """``column`` as type ``to``, of the same layout with other nested field names (no
    copy: a rename inside a struct changes no value; a cast would match struct members
    by name and read a renamed one as NULL)."""
    if column.type.equals(to):
        return column
    return pa.chunked_array([chunk.view(to) for chunk in column.chunks], type=to)
