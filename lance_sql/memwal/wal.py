"""WAL entries: Lance data files of a region's MemTable rows, one per WAL flush.

An entry holds the MemTable schema — the table's columns with their field ids plus
``_tombstone: bool not null`` (id = the table's largest id + 1) — and records the writer's
epoch (and the MemTable generation) in the file's schema metadata. Entries are written
put-if-absent at ``_mem_wal/{region}/wal/{bit-reversed id}.lance``: a writer that loses a
position learns that another writer wrote there (:class:`WalLog.append` tells who by the
epoch). Recovery reads entries from ``replay_after_wal_id + 1`` upward until one is
missing, with existence checks rather than listings.

Encoding and decoding are pure (bytes in, values out); :class:`WalLog` does the I/O.
"""

from __future__ import annotations

import io
import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from lance_sql.errors import FormatError, LanceError, NotFoundError, SchemaError
from lance_sql.format.datafile import BytesSource, LanceFileReader, LanceFileWriter
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.fragment import DataFile
from lance_sql.format.schema import LanceField, LanceSchema
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.column_match import match_columns, named_by_id, relabelled
from lance_sql.memwal.naming import RegionPaths, bit_reversed
from lance_sql.memwal.value_cast import as_column_type

__all__ = [
    "EPOCH_KEY", "GENERATION_KEY", "TOMBSTONE", "WalEntry", "WalLog", "decode_entry",
    "encode_entry", "memtable_schema",
]

TOMBSTONE = "_tombstone"
# Column names a MemWAL table's own columns may not take: the tombstone flag its files
# store, and what its LSM reads add by name (the view's ``_gen`` and ``_region``, a
# lookup's ``_key``, a search's ``_distance``; see :mod:`.read.nodes`). A user column of
# one of these names would read as the added values.
RESERVED_COLUMNS = (TOMBSTONE, "_gen", "_region", "_key", "_distance")


def check_reserved_columns(table: LanceSchema, where: str) -> None:
    """SchemaError when a top-level column of ``table`` has a reserved name."""
    taken = [f.name for f in table.fields if f.name in RESERVED_COLUMNS]
    if taken:
        raise SchemaError(f"{where}: column {taken[0]!r} has a name a MemWAL table reserves "
                          f"({', '.join(RESERVED_COLUMNS)}): its LSM reads would show "
                          "their own values there; rename it (alter_columns)")
EPOCH_KEY = "writer_epoch"
GENERATION_KEY = "generation"


def memtable_schema(table: LanceSchema) -> LanceSchema:
    """The table's schema (same field ids) plus ``_tombstone``, as WAL entries and flushed
    generations store it.

    Columns other than the key become nullable: a tombstone row carries only its key.
    """
    check_reserved_columns(table, "the table")
    fields = tuple(f if f.unenforced_primary_key or f.nullable else replace(f, nullable=True)
                   for f in table.fields)
    ids = itertools.count(table.max_field_id() + 1)
    tombstone = LanceField.from_arrow(pa.field(TOMBSTONE, pa.bool_(), nullable=False), ids)
    return LanceSchema((*fields, tombstone), {})


def data_file_of(schema: LanceSchema, path: str, size: int, version: tuple[int, int],
                 base_id: int | None) -> DataFile:
    """The manifest entry of a file holding every column of ``schema``, one per leaf."""
    leaves = [c for f in schema.fields for c in column_fields(f)]
    return DataFile(path=path, fields=tuple(f.id for f in leaves),
                    column_indices=tuple(range(len(leaves))), file_major_version=version[0],
                    file_minor_version=version[1], file_size_bytes=size, base_id=base_id)


@dataclass(frozen=True)
class WalEntry:
    """One WAL entry: who wrote it (epoch), for which generation, and its rows."""

    entry_id: int
    writer_epoch: int
    generation: int
    rows: pa.Table
    size_bytes: int
    file_version: tuple[int, int]
    # the entry was written with other columns than the schema asked for (its rows were
    # matched to it): the file cannot serve as a generation's data file under that schema
    rewritten: bool = False


def encode_entry(schema: LanceSchema, rows: pa.Table | Sequence[pa.Table], *,
                 writer_epoch: int, generation: int, data_format: str,
                 path: str = "<wal entry>") -> bytes:
    """The bytes of a WAL entry holding ``rows`` (columns of ``schema``, in order).

    Several tables (a WAL flush's MemTable fragments) are written one after the other,
    never concatenated: the file writer buffers each column up to a page anyway, so an
    entry costs its pages' encoding, not another copy of every row.
    """
    tagged = LanceSchema(schema.fields, {EPOCH_KEY: str(writer_epoch).encode(),
                                         GENERATION_KEY: str(generation).encode()})
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, tagged, path=path, version=data_format)
    for part in [rows] if isinstance(rows, pa.Table) else rows:
        if part.num_rows:
            writer.write_batch(part)
    writer.finish()
    return sink.getvalue()


def _metadata_int(schema: LanceSchema, key: str, path: str, *, required: bool) -> int:
    raw = schema.metadata.get(key)
    if raw is None:
        if required:
            raise FormatError(f"{path}: not a WAL entry (no {key!r} in the schema metadata)")
        return 0
    text = bytes(raw).decode(errors="replace")
    if not text.isdigit():
        raise FormatError(f"{path}: WAL entry {key} is {text!r}, not a number")
    return int(text)


def decode_entry(data: bytes, entry_id: int, path: str,
                 expected: LanceSchema | None = None) -> WalEntry:
    """Parse a WAL entry; FormatError naming ``path`` when it is corrupt or truncated.

    With ``expected`` (the writer's MemTable schema) the rows come back in that schema:
    an entry written before the table's columns changed (added, dropped, renamed,
    retyped) has its columns matched to the table's as a flushed generation's are
    (:func:`~.column_match.match_columns`), and a column added since reads NULL.
    """
    try:
        reader = LanceFileReader(BytesSource(data, path))
        schema = reader.schema
        epoch = _metadata_int(schema, EPOCH_KEY, path, required=True)
        generation = _metadata_int(schema, GENERATION_KEY, path, required=False)
        leaves = [c for f in schema.fields for c in column_fields(f)]
        colmap = {f.id: i for i, f in enumerate(leaves)}
        arrays = reader.read(list(schema.fields), colmap)
        same = expected is not None and [(f.id, f.name, f.logical_type) for f in schema.walk()] \
            == [(f.id, f.name, f.logical_type) for f in expected.walk()]
        rewritten = expected is not None and not same
        if expected is None or same:
            target = (expected or schema).to_arrow()
            rows = pa.Table.from_arrays(arrays, schema=pa.schema(
                [target.field(f.name) for f in schema.fields]))
        else:
            rows = _as_memtable_rows(arrays, schema, expected, path)
    except (FormatError, SchemaError):
        raise  # (SchemaError: a value that does not fit its column's type now)
    except LanceError as exc:
        raise FormatError(f"{path}: corrupt WAL entry: {exc}") from exc
    except (pa.ArrowException, ValueError, TypeError, IndexError) as exc:
        raise FormatError(f"{path}: corrupt WAL entry: {exc}") from exc
    return WalEntry(entry_id, epoch, generation, rows, len(data),
                    (reader.major, reader.minor), rewritten)


def _as_memtable_rows(arrays: Sequence[pa.Array], written: LanceSchema,
                      expected: LanceSchema, path: str) -> pa.Table:
    """An entry's columns (``arrays`` of ``written``) as the MemTable schema ``expected``
    of a writer opened after the table's columns changed."""
    mine = {f.name: (f, a) for f, a in zip(written.fields, arrays, strict=True)}
    if TOMBSTONE not in mine or mine[TOMBSTONE][0].logical_type != "bool":
        raise FormatError(f"{path}: a WAL entry without a boolean {TOMBSTONE} column")
    table = LanceSchema(tuple(f for f in expected.fields if f.name != TOMBSTONE), {})
    matched = match_columns(written, table, skip=(TOMBSTONE,))
    source = {now.id: f for f in written.fields if (now := matched.get(f.id)) is not None}
    by_id = {f.id: a for f, a in zip(written.fields, arrays, strict=True)}
    target = expected.to_arrow()
    columns = []
    for field, arrow in zip(expected.fields, target, strict=True):
        if field.name == TOMBSTONE:
            columns.append(mine[TOMBSTONE][1])
            continue
        old = source.get(field.id)
        if old is None:
            if not arrow.nullable:
                raise FormatError(f"{path}: the WAL entry has no values for column "
                                  f"{field.name!r}, which takes no NULLs")
            columns.append(pa.nulls(len(mine[TOMBSTONE][1]), arrow.type))
            continue
        named = named_by_id(old, field).to_arrow().type
        column = relabelled(pa.chunked_array([by_id[old.id]]), named)
        column = as_column_type(column, arrow.type, f"{path}: the WAL entry's column "
                                                    f"{old.name!r} (the table's {field.name!r})")
        columns.append(column.combine_chunks())
    return pa.Table.from_arrays(columns, schema=target)


class WalLog:
    """A region's WAL entries in ``store`` (rooted at the table)."""

    def __init__(self, store: ObjectStore, region_id: uuid.UUID) -> None:
        self.store = store
        self.paths = RegionPaths(region_id)

    def key(self, entry_id: int) -> str:
        return self.paths.wal_entry(entry_id)

    @staticmethod
    def file_name(entry_id: int) -> str:
        """The entry's name inside the WAL directory (a generation's data file path)."""
        return f"{bit_reversed(entry_id)}.lance"

    def uri(self) -> str:
        """Where the WAL directory is, as a flushed generation's base path records it."""
        return f"{self.store.uri}/{self.paths.wal_dir}"

    def append(self, entry_id: int, data: bytes) -> bool:
        """Write entry ``entry_id`` unless the position is taken; False when it was."""
        return self.store.put_if_absent(self.key(entry_id), data)

    def exists(self, entry_id: int) -> bool:
        return self.store.exists(self.key(entry_id))

    def read(self, entry_id: int, expected: LanceSchema | None = None) -> WalEntry:
        """Entry ``entry_id``; NotFoundError when absent, FormatError when corrupt."""
        key = self.key(entry_id)
        return decode_entry(self.store.read(key), entry_id, f"{self.store.uri}/{key}",
                            expected)

    def ids_after(self, after: int) -> Iterator[int]:
        """Ids of the entries after ``after``, probed one by one until one is missing."""
        entry_id = after + 1
        while self.exists(entry_id):
            yield entry_id
            entry_id += 1

    def read_after(self, after: int, expected: LanceSchema | None = None
                   ) -> Iterator[WalEntry]:
        """The entries after ``after`` in order (stops at the first missing one)."""
        for entry_id in self.ids_after(after):
            try:
                yield self.read(entry_id, expected)
            except NotFoundError:  # removed between the probe and the read (GC)
                return
