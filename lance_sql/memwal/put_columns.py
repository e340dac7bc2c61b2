"""A writer's puts name the table's columns as they are now, whatever changed since it opened.

A writer keeps the schema the table had when it opened: its WAL entries and generations
are written in it, and readers match them to the table's columns by field id
(:func:`~.column_match.match_columns`). The table may rename, retype, drop and add columns
while a writer is open, so each put (and delete) is read against the table's latest
version (one version probe a put, ~0.1 ms against a put's milliseconds; the schema is
read again only when the version moved):

* A renamed column is put under its current name and lands under its field id. Its old
  name is an unknown column (SchemaError naming the new one): after two columns swapped
  names, the old names would mean the other column.
* A column with fields renamed inside it (a struct's member) is put as the table names
  them now; its values land under the writer's names, by field id.
* A retyped column is put under its name, cast to the writer's type: SchemaError when a
  value does not come back the same from the writer's type (``0.1`` into a writer's
  float32, an integer out of its range): open a new writer to write the new type.
* A column dropped since is not put (the writer's own column is filled with NULL, never
  read). Put under its old name it is an unknown column: SchemaError, not silently
  dropped values. A dropped column the writer holds as non-nullable cannot be filled:
  puts raise SchemaError (open a new writer).
* A column added since cannot be written (the writer's WAL schema lacks it): put, it
  raises SchemaError (open a new writer); left out, the rows are accepted and read NULL
  there, an upsert replacing the whole row (as the merger writes them).

While nothing changed, a put passes through as it is. A table whose MemWAL is gone since
(an overwrite replaces the table without it) fences the writer: its puts would never be
read (WriterFencedError).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import NotFoundError, SchemaError, WriterFencedError
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField, LanceSchema
from lance_sql.io.commit import CommitHandler
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.column_match import match_columns, named_by_id, relabelled
from lance_sql.table.meta.field_ids import has_mem_wal
from lance_sql.table.meta.versions import latest_version, load_manifest

__all__ = ["PutColumns"]


@dataclass(frozen=True)
class _Names:
    """How the table's current columns relate to the writer's (by name)."""

    to_written: dict[str, str]        # current name -> writer's name (matched columns)
    added: frozenset[str]             # current names the writer has no column for
    dropped: tuple[LanceField, ...]   # writer's columns the table no longer has
    renamed: dict[str, str]           # writer's name -> current name, where they differ
    retyped: dict[str, pa.DataType]   # current name -> the writer's type, where they differ
    # current name -> (the table's type, the writer's) where only nested names differ
    relabel: dict[str, tuple[pa.DataType, pa.DataType]]
    unchanged: bool                   # every name means the writer's column of that name

    @classmethod
    def of(cls, written: LanceSchema, table: LanceSchema) -> _Names:
        matched = match_columns(written, table)
        to_written = {now.name: next(f.name for f in written.fields if f.id == i)
                      for i, now in matched.items()}
        added = frozenset(f.name for f in table.fields if f.name not in to_written)
        dropped = tuple(f for f in written.fields if f.id not in matched)
        renamed = {w: now for now, w in to_written.items() if w != now}
        mine = {f.id: f for f in written.fields}
        retyped, relabel = {}, {}
        for i, now in matched.items():
            theirs = mine[i].arrow_type
            if theirs.equals(now.arrow_type):
                continue
            if named_by_id(now, mine[i]).arrow_type.equals(theirs):  # renamed inside
                relabel[now.name] = (now.arrow_type, theirs)
            else:
                retyped[now.name] = theirs
        unchanged = not added and not dropped and not renamed and not retyped and not relabel
        return cls(to_written, added, dropped, renamed, retyped, relabel, unchanged)


class PutColumns:
    """Translates a put's columns from the table's current names to the writer's
    (see the module docstring); thread-safe."""

    def __init__(self, store: ObjectStore, written: LanceSchema,
                 handler: CommitHandler | None = None) -> None:
        """``store``: rooted at the table; ``written``: the writer's schema (the table's
        when it opened, without ``_tombstone``)."""
        self._store = store
        self._written = written
        self._handler = handler
        self._lock = threading.Lock()
        self._seen: tuple[object, _Names] | None = None
        self._had_mem_wal: bool | None = None  # (the first version seen had a MemWAL)

    _ATTEMPTS = 5

    def _names(self) -> _Names:
        for attempt in range(self._ATTEMPTS):
            try:
                ref = latest_version(self._store, self._handler)
            except NotFoundError as exc:
                raise WriterFencedError(f"{self._store.uri}: the table this writer wrote is "
                                        "gone (deleted, or written again at its place)") from exc
            key = (ref.version, ref.identity)
            with self._lock:
                seen = self._seen
            if seen is not None and seen[0] == key:
                return seen[1]
            try:
                manifest = load_manifest(self._store, ref)
            except NotFoundError:
                if attempt + 1 == self._ATTEMPTS:
                    raise
                continue  # newer versions came and cleanup removed this one: look again
            self._check_mem_wal(manifest)
            names = _Names.of(self._written, manifest.schema)
            with self._lock:
                self._seen = (key, names)
            return names
        raise AssertionError("unreachable")

    def _check_mem_wal(self, manifest: Manifest) -> None:
        """WriterFencedError when the table had a MemWAL and this version has none."""
        has = has_mem_wal(manifest)
        with self._lock:
            if self._had_mem_wal is None:
                self._had_mem_wal = has
            had = self._had_mem_wal
        if had and not has:
            raise WriterFencedError(
                f"{self._store.uri}: the table has no MemWAL since version "
                f"{manifest.version} (an overwrite, or its index dropped): this writer's "
                "puts would never be read; it writes no more")

    def written(self, data: pa.Table, keys: Collection[str] | None = None) -> pa.Table:
        """``data`` (named as the table names its columns now) with the writer's column
        names, the columns dropped since filled with NULL; ``keys``: the writer's
        primary-key names for a delete (only they are read: other columns are left out,
        unknown ones too, and nothing is filled)."""
        names = self._names()
        if names.unchanged:
            return data
        out_names, columns = [], []
        for name, column in zip(data.column_names, data.columns, strict=True):
            mine = names.to_written.get(name)
            if keys is not None and mine not in keys and name not in keys:
                continue  # (an old key name is not skipped: it raises, saying the new one)
            if mine is None:
                raise SchemaError(self._unknown(names, name))
            wanted = names.retyped.get(name)
            if wanted is not None and not _fits(column, wanted):
                raise SchemaError(f"column {name!r} changed type after this writer opened, "
                                  f"and its values do not fit the writer's {wanted}: open a "
                                  "new writer to write the new type")
            if name in names.relabel:
                now, theirs = names.relabel[name]
                if not column.type.equals(now):
                    raise SchemaError(f"column {name!r} has fields renamed inside it after "
                                      f"this writer opened: put it as the table's {now}, "
                                      f"not {column.type}")
                column = relabelled(pa.chunked_array(column), theirs)
            out_names.append(mine)
            columns.append(column)
        if keys is None:
            for f in names.dropped:
                if not f.nullable:
                    raise SchemaError(f"column {f.name!r} was dropped from the table after "
                                      "this writer opened, and the writer holds it as "
                                      "non-nullable: open a new writer")
                out_names.append(f.name)
                columns.append(pa.nulls(data.num_rows, f.arrow_type))
        return pa.Table.from_arrays(columns, names=out_names)

    def current_name(self, name: str) -> str:
        """The table's current name of the writer's column ``name`` (for messages)."""
        seen = self._seen
        return seen[1].renamed.get(name, name) if seen is not None else name

    @staticmethod
    def _unknown(names: _Names, name: str) -> str:
        if name in names.added:
            return (f"column {name!r} was added to the table after this writer opened; "
                    "it cannot write it (open a new writer), or leave it out (the rows "
                    "read NULL there)")
        if name in names.renamed:
            return (f"column {name!r} was renamed to {names.renamed[name]!r} after this "
                    "writer opened: put the table's current names")
        if any(f.name == name for f in names.dropped):
            return (f"column {name!r} was dropped from the table after this writer "
                    "opened: its values would be lost")
        return f"the table has no column {name!r}"


def _fits(column: pa.ChunkedArray | pa.Array, to: pa.DataType) -> bool:
    """Whether ``column``'s values come back the same from type ``to`` (NULLs stay NULL,
    NaN stays NaN)."""
    try:
        back = column.cast(to).cast(column.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    if pa.types.is_nested(column.type):  # (no element-wise equality for these: whole
        return bool(back.equals(column))  # values, a NaN inside never equal)
    same = pc.equal(back, column)
    if pa.types.is_floating(column.type):
        same = pc.or_(same, pc.and_(pc.is_nan(back), pc.is_nan(column)))
    return bool(pc.all(pc.fill_null(same, True)).as_py())
