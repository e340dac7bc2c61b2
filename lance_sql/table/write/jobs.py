"""Distributed write jobs: many workers write files, one coordinator commits.

An engine (Spark, or anything that can run functions on workers) uses this in
three steps:

1. the coordinator calls :func:`open_for_write` once, pinning the version the job
   reads (and so the version its single commit is built against);
2. each worker calls :func:`write_job_fragments` on its share of the data; files are
   named with the job's prefix and the fragments come back serialized;
3. the coordinator calls :func:`commit_job` with everything the workers returned —
   one transaction, rebased over concurrent commits by the commit loop — or
   :meth:`JobFiles.remove_all` to abort.

Because every file carries the job prefix, an abort also finds files written by
workers that died before reporting them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, SchemaError, StatementRefusedError
from lance_sql.format.fragment import DATA_DIR, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.pb import table_pb2
from lance_sql.format.schema import LanceSchema, check_column_names
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table.meta.field_ids import has_mem_wal
from lance_sql.table.meta.versions import VersionRef, load_manifest
from lance_sql.table.txn.commit import CommitConfig
from lance_sql.table.txn.operations import Append, Overwrite
from lance_sql.table.txn.writer import WriteContext, staging
from lance_sql.table.write.fragments import (
    DEFAULT_DATA_FORMAT,
    DEFAULT_MAX_ROWS_PER_FILE,
    FragmentWriter,
    conform_batch,
    with_primary_key,
)


@dataclass(frozen=True)
class JobFiles:
    """The naming scheme of one job's files."""

    job_id: str

    @classmethod
    def new(cls, job_id: str) -> JobFiles:
        if not job_id.isalnum():
            raise InvalidInputError(f"job id {job_id!r} must be alphanumeric")
        return cls(job_id)

    @property
    def prefix(self) -> str:
        return f"job-{self.job_id}-"

    def remove_all(self, uri: str, keys: Sequence[str] = ()) -> None:
        """Delete ``keys`` and every data file carrying this job's prefix."""
        store = open_store(uri)
        names = {k for k in keys}
        names |= {f"{DATA_DIR}/{n}" for n in store.list_dir(DATA_DIR) if n.startswith(self.prefix)}
        for key in names:
            store.delete(key)


@dataclass(frozen=True)
class WriteTarget:
    """What a job writes against: the pinned version and the schema to write.

    Engines ship this to every worker, so it names the pinned version rather than
    holding its manifest (100k fragments take ~13 MB and ~1 s to unpickle, per task);
    the commit loads that manifest again.
    """

    version: int | None  # the pinned version; None when there is no table yet
    naming: ManifestNaming
    schema: LanceSchema
    data_format: str

    def pinned(self, store: ObjectStore) -> Manifest | None:
        """The manifest of the pinned version (None when there was no table)."""
        if self.version is None:
            return None
        return load_manifest(store, VersionRef(self.version, self.naming))


def open_for_write(uri: str | os.PathLike[str], data_schema: pa.Schema, *,
                   overwrite: bool, commit_config: CommitConfig | None = None,
                   primary_key: Sequence[str] = (), stable_row_ids: bool = False) -> WriteTarget:
    """Pin the table's current version (if any) and decide the schema files are written in.

    The latest version is found as every other writer finds it (through the commit
    handler of ``commit_config``, e.g. an external manifest store), and a table whose
    writer feature flags we do not know is refused before any worker writes a file.
    ``primary_key`` (columns) and ``stable_row_ids`` are chosen when a table is created
    or overwritten; asking for them when appending to a table without them is an error.
    """
    store = open_store(uri)
    ctx = WriteContext.open(store, commit_config)
    previous, naming = ctx.base, ctx.naming
    version = previous.version if previous is not None else None
    if stable_row_ids and previous is not None and not previous.uses_stable_row_ids:
        raise InvalidInputError(
            f"{store.uri} was created without stable row ids; they can only be enabled when "
            "a table is created")
    if previous is not None and not overwrite:
        if has_mem_wal(previous):
            raise StatementRefusedError(
                f"{store.uri} has a MemWAL; its rows are written through the MemWAL's "
                "region writers (ds.mem_wal.writer(): put / delete), not appended to its "
                "base table, where its LSM view would hide or duplicate them (as SQL's "
                "INSERT refuses)")
        if primary_key and previous.schema.primary_key != list(primary_key):
            raise InvalidInputError(f"{store.uri}: the primary key is set when a table is "
                                    "created; appending cannot change it")
        return WriteTarget(version, naming, previous.schema, previous.data_format)
    data_format = previous.data_format if previous is not None else DEFAULT_DATA_FORMAT
    check_column_names(data_schema.names)
    schema = with_primary_key(data_schema, primary_key)
    return WriteTarget(version, naming, LanceSchema.from_arrow(schema), data_format)



def write_job_fragments(
    uri: str | os.PathLike[str],
    target: WriteTarget,
    job: JobFiles,
    batches: Iterable[pa.RecordBatch],
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
) -> tuple[list[Fragment], list[str]]:
    """Write one worker's batches; returns the fragments and the keys of their files."""
    store = open_store(uri)
    writer = FragmentWriter(store, target.schema, max_rows_per_file=max_rows_per_file,
                            data_format=target.data_format, file_prefix=job.prefix)
    table_schema = target.schema.to_arrow()
    try:
        for batch in batches:
            if batch.num_rows:
                writer.write(cast_to_table(batch, table_schema))
        fragments = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return fragments, list(writer.written_keys)


def cast_to_table(batch: pa.RecordBatch, table: pa.Schema) -> pa.RecordBatch:
    """An engine's batch in the table's types (checked casts: overflow is an error)."""
    columns = []
    for field in table:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            raise InvalidInputError(f"column {field.name!r} is missing from the data")
        column = batch.column(index)
        if column.type != field.type:
            column = _checked_cast(column, field)
        columns.append(column)
    return conform_batch(pa.RecordBatch.from_arrays(columns, names=table.names), table)


def _checked_cast(column: pa.Array, field: pa.Field) -> pa.Array:
    """``column`` cast to ``field``'s type, a SchemaError naming the column when a value
    does not fit; a float narrowed past its range (1e6 into a float16) fails too, where
    pyarrow's cast gives an infinity."""
    try:
        cast = column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"column {field.name!r}: {column.type} values do not fit the "
                          f"table's {field.type}: {exc}") from None
    if pa.types.is_floating(column.type) and pa.types.is_floating(field.type) and \
            field.type.bit_width < column.type.bit_width:
        overflowed = pc.and_(pc.is_finite(column), pc.invert(pc.is_finite(cast)))
        if pc.any(overflowed).as_py():
            first = column.filter(overflowed)[0].as_py()
            raise SchemaError(f"column {field.name!r}: {first} is out of the range of the "
                              f"table's {field.type}")
    return cast


def decode_fragments(serialized: Iterable[bytes]) -> list[Fragment]:
    """Fragments from the serialized DataFragment messages tasks hand the driver."""
    return [Fragment.from_proto(table_pb2.DataFragment.FromString(b)) for b in serialized]


def commit_job(
    uri: str | os.PathLike[str],
    target: WriteTarget,
    job: JobFiles,
    fragment_lists: Iterable[Iterable[bytes]],
    *,
    overwrite: bool,
    commit_config: CommitConfig | None = None,
    stable_row_ids: bool = False,
) -> Manifest:
    """Commit everything the workers wrote as one transaction; on failure remove it all.

    This is the commit ``write_dataset`` makes, through a :class:`WriteContext` with the
    same ``commit_config`` (its handler decides how the new manifest is published) on the
    pinned version (writer feature flags checked again); ``stable_row_ids`` applies when
    the commit creates the table.
    """
    store: ObjectStore = open_store(uri)
    fragments = tuple(f for serialized in fragment_lists for f in decode_fragments(serialized))
    with staging(store) as staged:
        staged.on_abort(lambda: job.remove_all(os.fspath(uri), [
            f"{DATA_DIR}/{d.path}" for f in fragments for d in f.files]))
        ctx = WriteContext.pinned(store, commit_config, target.version, target.naming)
        if ctx.base is not None and not overwrite:
            operation: Append | Overwrite = Append(fragments)
        else:
            operation = Overwrite(fragments, target.schema)
        return ctx.commit(operation, properties={"lance_sql.job": job.job_id},
                          data_format=target.data_format, stable_row_ids=stable_row_ids)
