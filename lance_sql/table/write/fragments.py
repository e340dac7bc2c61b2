"""Writing data into fragments: input normalisation, schema checks, file rollover.

Everything the caller passes is validated against the target schema *before* the
first data file is written, and if writing fails part-way the files already
written are removed, so a failed write leaves no trace besides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, SchemaError, UnsupportedFeatureError
from lance_sql.format.datafile import DEFAULT_DATA_FORMAT, LanceFileWriter
from lance_sql.format.datafile.writer import WRITABLE_VERSIONS
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.naming import data_file_name
from lance_sql.format.schema import PK_KEY, PK_POSITION_KEY, LanceSchema
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import refuse_json

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
DEFAULT_MAX_ROWS_PER_GROUP = 1024
SUPPORTED_WRITE_FORMATS = WRITABLE_VERSIONS
# ``data_storage_version`` names pylance 14 takes besides numbers ("legacy" is the 0.1
# format, which lance_sql does not write, and "next" an unstable one)
STORAGE_VERSION_ALIASES = {"stable": "2.2"}


def to_reader(data: Any, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """Accept the inputs pylance accepts: Arrow tables/batches/readers, pandas, iterables."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        if schema is not None:
            try:
                data = data.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                    ValueError) as exc:  # (a NULL for a required field: ValueError)
                raise SchemaError(f"the data does not fit the schema given: {exc}") from None
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return to_reader(pa.Table.from_batches([data]), schema)
    if type(data).__module__.startswith("pandas") and hasattr(data, "to_dict"):
        # as pylance converts it: an index that is not a plain range becomes a column
        # (``__index_level_0__``), so both libraries write the same table
        return to_reader(pa.Table.from_pandas(data, schema=schema))
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data, schema=schema)
    if isinstance(data, dict):
        return to_reader(pa.table(data), schema)
    if isinstance(data, list | tuple) and data and isinstance(data[0], dict):
        try:
            return to_reader(pa.Table.from_pylist(list(data), schema=schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaError(f"cannot convert the rows to Arrow: {exc}") from None
    if isinstance(data, Iterable):
        items = iter(data)
        if schema is None:
            first = next(items, None)
            if first is None:
                raise InvalidInputError(
                    "cannot infer a schema from an empty iterable; pass schema="
                )
            schema = first.schema

            def chained() -> Iterator[pa.RecordBatch]:
                yield first
                yield from items

            return pa.RecordBatchReader.from_batches(schema, chained())
        return pa.RecordBatchReader.from_batches(schema, items)
    raise InvalidInputError(f"cannot write data of type {type(data).__name__}")


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Reorder columns to ``target`` and check nullability; types were checked up front."""
    if batch.schema.names != target.names:
        batch = pa.RecordBatch.from_arrays([batch.column(n) for n in target.names], schema=None,
                                           names=target.names)
    for field, column in zip(target, batch.columns, strict=False):
        check_nulls(column, field, field.name)
    if batch.schema != target:
        try:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            batch = batch.cast(target)
    return batch




def _nulls_visible(array: pa.Array) -> pa.Array:
    """``array``, decoded if it is a dictionary holding NULL entries (which its
    ``null_count``, of the indices only, does not count)."""
    if pa.types.is_dictionary(array.type) and array.dictionary.null_count:
        return array.dictionary_decode()
    return array


def check_nulls(array: pa.Array, field: pa.Field, path: str) -> None:
    """SchemaError if a non-nullable field (at any depth) holds a null where its parent is valid.

    Checked here, before any file format sees the data, so every format refuses alike.
    """
    array = _nulls_visible(array)
    if not field.nullable and array.null_count:
        raise SchemaError(
            f"column {path!r} is not nullable but the data has {array.null_count} null value(s)"
        )
    t = array.type
    if pa.types.is_struct(t):
        parent_valid = array.is_valid()
        for i, child_field in enumerate(t):
            child = _nulls_visible(array.field(i))
            if not child_field.nullable and child.null_count:
                bad = pc.sum(pc.and_(child.is_null(), parent_valid)).as_py() or 0
                if bad:
                    raise SchemaError(
                        f"column {path + '.' + child_field.name!r} is not nullable but the data "
                        f"has {bad} null value(s)"
                    )
            check_nulls(child.filter(parent_valid), child_field.with_nullable(True),
                        f"{path}.{child_field.name}")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        check_nulls(array.flatten(), t.value_field, f"{path}.{t.value_field.name}")


class FragmentWriter:
    """Streams batches into data files of at most ``max_rows_per_file`` rows each.

    Produces fragments whose ids are placeholders (0); the commit assigns them.
    """

    def __init__(
        self,
        store: ObjectStore,
        schema: LanceSchema,
        *,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
        data_format: str = DEFAULT_DATA_FORMAT,
        file_prefix: str = "",
    ) -> None:
        if max_rows_per_file <= 0:
            raise InvalidInputError("max_rows_per_file must be positive")
        if data_format not in SUPPORTED_WRITE_FORMATS:
            raise UnsupportedFeatureError(
                f"{store.uri}: the table stores data files in Lance format {data_format}; "
                f"lance_sql can only write {', '.join(SUPPORTED_WRITE_FORMATS)} so far"
            )
        for field in schema.fields:
            refuse_json(field, store.uri)
        self.store = store
        self.schema = schema
        self.arrow_schema = schema.to_arrow()
        self.max_rows_per_file = max_rows_per_file
        self.data_format = data_format
        self.file_prefix = file_prefix  # lets a distributed job find every file it wrote
        self.fragments: list[Fragment] = []
        self.written_keys: list[str] = []
        self._current: tuple[Any, Any, str] | None = None  # (context, writer, name)
        self._rows_in_file = 0

    def write(self, batch: pa.RecordBatch) -> None:
        batch = conform_batch(batch, self.arrow_schema)
        start = 0
        while start < batch.num_rows:
            if self._current is None:
                self._open()
            room = self.max_rows_per_file - self._rows_in_file
            piece = batch.slice(start, room)
            assert self._current is not None
            self._current[1].write_batch(piece)
            self._rows_in_file += piece.num_rows
            start += piece.num_rows
            if self._rows_in_file >= self.max_rows_per_file:
                self._close()

    def finish(self) -> list[Fragment]:
        if self._current is not None:
            self._close()
        return self.fragments

    def abort(self) -> None:
        """Remove every file this writer produced (best effort)."""
        if self._current is not None:
            ctx = self._current[0]
            try:
                ctx.__exit__(InvalidInputError, InvalidInputError("aborted"), None)
            except Exception:  # noqa: BLE001
                pass
            self._current = None
        for key in self.written_keys:
            try:
                self.store.delete(key)
            except Exception:  # noqa: BLE001
                pass

    def _open(self) -> None:
        name = self.file_prefix + data_file_name()
        ctx = self.store.open_writer(f"data/{name}")
        sink = ctx.__enter__()
        writer = LanceFileWriter(sink, self.schema, path=f"{self.store.uri}/data/{name}",
                                 version=self.data_format)
        self._current = (ctx, writer, name)
        self._rows_in_file = 0

    def _close(self) -> None:
        assert self._current is not None
        ctx, writer, name = self._current
        self._current = None
        try:
            written = writer.finish()
        except BaseException as exc:
            ctx.__exit__(type(exc), exc, exc.__traceback__)
            raise
        ctx.__exit__(None, None, None)
        self.written_keys.append(f"data/{name}")
        data_file = DataFile(
            path=name,
            fields=tuple(written.fields),
            column_indices=tuple(written.column_indices),
            file_major_version=written.major,
            file_minor_version=written.minor,
            file_size_bytes=written.size_bytes,
        )
        self.fragments.append(Fragment(id=0, files=(data_file,), physical_rows=written.num_rows))


def write_fragments(
    store: ObjectStore,
    schema: LanceSchema,
    reader: pa.RecordBatchReader,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    data_format: str = DEFAULT_DATA_FORMAT,
) -> list[Fragment]:
    """Write all of ``reader`` as new fragments; on any error remove what was written."""
    writer = FragmentWriter(
        store, schema, max_rows_per_file=max_rows_per_file, data_format=data_format
    )
    try:
        for batch in reader:
            if batch.num_rows:
                writer.write(batch)
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def with_primary_key(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """``schema`` with ``columns`` marked as its (unenforced) primary key, in that order:
    field metadata ``lance-schema:unenforced-primary-key`` (and ``:position`` for
    composite keys), and not nullable."""
    known = set(schema.names)
    missing = [c for c in columns if c not in known]
    if missing or len(set(columns)) != len(columns):
        raise InvalidInputError(f"primary key {list(columns)}: every column must exist once; "
                                f"columns: {schema.names}")
    fields = []
    for field in schema:
        if field.name in columns:
            metadata = dict(field.metadata or {})
            metadata[PK_KEY.encode()] = b"true"
            if len(columns) > 1:
                metadata[PK_POSITION_KEY.encode()] = str(columns.index(field.name) + 1).encode()
            field = field.with_nullable(False).with_metadata(metadata)
        fields.append(field)
    return pa.schema(fields, metadata=schema.metadata)
