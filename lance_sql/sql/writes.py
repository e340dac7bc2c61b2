"""Run the session's write statements as Lance operations, one commit each.

The statements come parsed from :mod:`lance_sql.sql.statements` and
:mod:`lance_sql.sql.merge`. Queries inside them (``CREATE TABLE ... AS``, ``INSERT
... SELECT``, a MERGE source) are planned by the session like any query, so they see
one pinned version of each table, and their rows are streamed into the write (the
result is never held in memory as a whole, except a MERGE's: the source that
``merge_insert`` joins in memory, or the rows and values the general MERGE computed).

Each statement returns a one-row table saying what it did (counts, the new version).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lance_sql.errors import (
    InvalidInputError,
    NotFoundError,
    PathEscapeError,
    SchemaError,
    StatementRefusedError,
    TableExistsError,
)
from lance_sql.expr.casts import cast_like_datafusion
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import PK_KEY, PK_POSITION_KEY
from lance_sql.io.descriptors import removed
from lance_sql.memwal import index as mem_wal_index
from lance_sql.sql.merge import Merge, MergeInsertForm, check_keys_kept
from lance_sql.sql.merge_rows import merge_query, row_changes
from lance_sql.sql.statements import (
    AddColumns,
    AlterColumn,
    ColumnDef,
    CreateTable,
    CreateTag,
    DropColumns,
    DropTable,
    DropTag,
    Insert,
    RenameColumn,
    Restore,
    Statement,
    Truncate,
)
from lance_sql.sql.tokens import filter_text, quote_identifier
from lance_sql.table import (
    LanceDataset,
    RowChanges,
    apply_row_changes,
    cleanup_is_retryable,
    write_dataset,
)

if TYPE_CHECKING:
    from lance_sql.sql.session import LanceSession


def storable_type(t: pa.DataType) -> pa.DataType:
    """DataFusion's view types (``VARCHAR`` is ``string_view``) as the types Lance stores."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field.with_type(storable_type(t.value_type))
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(t.value_field.with_type(storable_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(storable_type(f.type)) for f in t])
    return t


def storable_schema(schema: pa.Schema, *, nullable: bool = False) -> pa.Schema:
    """``schema`` with types Lance cannot store mapped to ones it can (``nullable``: every
    field nullable)."""
    return pa.schema([pa.field(f.name, storable_type(f.type), nullable or f.nullable, f.metadata)
                      for f in schema])


def refuse_lsm_row_writes(ds: LanceDataset, table: str, what: str) -> None:
    """Refuse a statement writing rows straight into the base table of a MemWAL table.

    Its readers see each key's newest row across the base table and the regions'
    MemTables and generations, so a base-table write is shadowed by any newer region
    row of its key (an UPDATE or DELETE that reports rows yet shows nothing), and an
    INSERT of a key the base table holds makes it read twice. Rows go through the
    MemWAL's writers instead; a SQL session must not claim their regions (it would
    fence the streaming writer)."""
    if mem_wal_index.load(ds) is not None:
        raise StatementRefusedError(
            f"{what}: {table!r} has a MemWAL; its rows are written through the MemWAL's "
            "region writers (ds.mem_wal.writer(): put / delete), not into its base table "
            "(the LSM view would hide or duplicate what the statement wrote)")


def _without_primary_keys(schema: pa.Schema) -> pa.Schema:
    """``schema`` without primary-key field metadata: ``CREATE TABLE ... AS`` copies a
    query's columns, not its tables' constraints (as in PostgreSQL and Spark); a key
    column copied as nullable would make the new table invalid."""
    fields = []
    for field in schema:
        metadata = field.metadata
        if metadata and (PK_KEY.encode() in metadata or PK_POSITION_KEY.encode() in metadata):
            kept = {k: v for k, v in metadata.items()
                    if k not in (PK_KEY.encode(), PK_POSITION_KEY.encode())}
            field = field.with_metadata(kept) if kept else field.remove_metadata()
        fields.append(field)
    return pa.schema(fields, schema.metadata)


def _as_filter(condition: str | None) -> str | None:
    return None if condition is None else filter_text(condition)


def _one_row(**values: Any) -> pa.Table:
    columns = {}
    for name, value in values.items():
        if isinstance(value, bool):
            columns[name] = pa.array([value], pa.bool_())
        elif isinstance(value, int):
            columns[name] = pa.array([value], pa.uint64())
        else:
            columns[name] = pa.array([value], pa.string())
    return pa.table(columns)


def _target_types(rows: pa.Table, target: pa.Schema, what: str) -> pa.Table:
    """``rows`` with each column cast to the type of ``target``'s column of its name, as
    INSERT casts its values: DataFusion types ``0`` as int64 and ``[1.0, 2.0]`` as
    list<double>, where the table may hold double and fixed_size_list. A value that
    does not fit (a list of another length, text that is no number) is a SchemaError
    naming the column."""
    for i, field in enumerate(rows.schema):
        if field.name not in target.names:
            continue
        want = target.field(field.name)
        if field.type == want.type:
            continue
        rows = rows.set_column(i, field.with_type(want.type),
                               _stored(rows.column(i), want, what))
    return rows


def _stored(column: pa.Array | pa.ChunkedArray, field: pa.Field, what: str
            ) -> pa.Array | pa.ChunkedArray:
    """``column`` cast to ``field``'s type, as a write stores it; a SchemaError naming
    the column when a value does not fit."""
    try:
        return cast_like_datafusion(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"{what}: cannot store {column.type} values in column "
                          f"{field.name!r} ({field.type}): {exc}") from None


class WriteRunner:
    """Runs write statements for one session (which plans their queries)."""

    def __init__(self, session: LanceSession) -> None:
        self.session = session
        self.directory = session.directory

    def run(self, stmt: Statement | Merge) -> pa.Table:
        handler: Callable[[Any], pa.Table] = getattr(self, "_" + type(stmt).__name__.lower())
        return handler(stmt)

    # -- helpers ---------------------------------------------------------------------------
    def _batches(self, query: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The schema and streamed batches of ``query``, planned by the session."""
        df = self.session.sql(query)
        schema = df.schema()

        def stream() -> Iterator[pa.RecordBatch]:
            for item in df.execute_stream():
                yield item.to_pyarrow()

        return schema, stream()

    def _exists(self, name: str) -> bool:
        try:
            self.directory.uri(name)
        except NotFoundError:
            return self.session.schema_provider.is_external(name)
        return True

    def _types(self, columns: tuple[ColumnDef, ...], what: str) -> pa.Schema:
        """Arrow fields for SQL column definitions, typed by DataFusion's own parser."""
        select = ", ".join(f"CAST(NULL AS {c.type_sql}) AS {quote_identifier(c.name)}"
                           for c in columns)
        try:
            schema = self.session.plan_only(f"SELECT {select}")
        except Exception as exc:  # noqa: BLE001 - one message for a bad type
            raise InvalidInputError(f"{what}: unsupported column type: {exc}") from None
        keys = [c.name for c in columns if c.primary_key]
        fields = []
        for col, field in zip(columns, schema, strict=True):
            metadata = None
            if col.primary_key:
                metadata = {PK_KEY: "true"}
                if len(keys) > 1:
                    metadata[PK_POSITION_KEY] = str(keys.index(col.name) + 1)
            fields.append(pa.field(col.name, storable_type(field.type), not col.not_null,
                                   metadata))
        return pa.schema(fields)

    def _owned(self, name: str, what: str) -> str:
        """The directory of a table under the root, checked to be one; else refuse."""
        path = self.directory.under_root(name)
        if path is None:
            self.directory.uri(name)  # NotFoundError for unknown tables
            raise StatementRefusedError(
                f"{what}: table {name!r} was registered from outside the session's root; only "
                "tables under the root can be dropped or replaced")
        root = os.path.realpath(self.directory.root or "")
        if os.path.islink(path) or os.path.dirname(os.path.realpath(path)) != root:
            raise PathEscapeError(f"{what}: {path} does not resolve to a directory directly "
                                  f"under the session's root {root}")
        if not os.path.isdir(os.path.join(path, "_versions")):
            raise NotFoundError(f"{what}: {path} is not a Lance table")
        return path

    # -- CREATE TABLE ------------------------------------------------------------------------
    def _createtable(self, stmt: CreateTable) -> pa.Table:
        mode = "create"
        if self._exists(stmt.table):
            if stmt.if_not_exists:
                return _one_row(table=stmt.table, version=self.session.dataset(stmt.table)
                                .version, num_inserted_rows=0)
            if not stmt.replace:
                raise TableExistsError(f"CREATE TABLE: table {stmt.table!r} already exists "
                                        "(say IF NOT EXISTS, or CREATE OR REPLACE TABLE)")
            if self.session.schema_provider.is_external(stmt.table):
                raise StatementRefusedError(f"CREATE OR REPLACE TABLE: {stmt.table!r} is an "
                                            "external table")
            path, mode = self._owned(stmt.table, "CREATE OR REPLACE TABLE"), "overwrite"
        else:
            path = self.directory.new_table_path(stmt.table)
        if stmt.query is not None:
            query_schema, batches = self._batches(stmt.query)
            schema = _without_primary_keys(storable_schema(query_schema, nullable=True))
        else:
            schema, batches = self._types(stmt.columns, "CREATE TABLE"), iter(())
        counter = _Counter()
        reader = pa.RecordBatchReader.from_batches(schema, counter.count(
            b.cast(schema) for b in batches))
        existed = os.path.exists(path)
        try:
            ds = write_dataset(reader, path, mode=mode,
                               enable_stable_row_ids=stmt.stable_row_ids)
        except BaseException:
            if not existed:
                # write_dataset removed the files it wrote; the directories it made go too,
                # unless someone else's files are in them now (a racing CREATE of one name)
                _remove_empty_dirs(path)
            raise
        finally:
            self.session.resolver.forget(path)
        return _one_row(table=stmt.table, version=ds.version, num_inserted_rows=counter.rows)

    # -- INSERT --------------------------------------------------------------------------------
    def _insert(self, stmt: Insert) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        refuse_lsm_row_writes(ds, stmt.table, "INSERT OVERWRITE" if stmt.overwrite else "INSERT")
        target = ds.schema
        names = list(stmt.columns) if stmt.columns is not None else target.names
        known = set(target.names)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise NotFoundError(f"INSERT: table {stmt.table!r} has no column(s) {unknown}; "
                                f"columns: {target.names}")
        query_schema, batches = self._batches(stmt.query)
        if len(query_schema) != len(names):
            raise SchemaError(f"INSERT: the query gives {len(query_schema)} column(s) but "
                              f"{len(names)} are inserted into ({', '.join(names)})")
        position = {n: i for i, n in enumerate(names)}

        def conform(batch: pa.RecordBatch) -> pa.RecordBatch:
            arrays = []
            for field in target:
                if field.name not in position:
                    arrays.append(pa.nulls(batch.num_rows, field.type))
                    continue
                arrays.append(_stored(batch.column(position[field.name]), field, "INSERT"))
            return pa.RecordBatch.from_arrays(arrays, schema=target)

        counter = _Counter()
        reader = pa.RecordBatchReader.from_batches(target, counter.count(
            conform(b) for b in batches))
        mode = "overwrite" if stmt.overwrite else "append"
        new = write_dataset(reader, ds.uri, mode=mode, commit_config=ds.commit_config,
                            enable_stable_row_ids=ds.manifest.uses_stable_row_ids)
        return _one_row(num_inserted_rows=counter.rows, version=new.version)

    # -- DROP / TRUNCATE ------------------------------------------------------------------------
    def _droptable(self, stmt: DropTable) -> pa.Table:
        provider = self.session.schema_provider
        if provider.is_external(stmt.table):
            provider.deregister_table(stmt.table)
            return _one_row(table=stmt.table, dropped=True)
        try:
            self.directory.uri(stmt.table)
        except NotFoundError:
            if stmt.if_exists:
                return _one_row(table=stmt.table, dropped=False)
            raise
        path = self._owned(stmt.table, "DROP TABLE")
        self.session.resolver.forget(path)
        try:
            shutil.rmtree(path)
        finally:  # the files it removed no longer hold disk space through cached readers
            for spelling in {os.path.abspath(path), os.path.realpath(path)}:
                removed(spelling, tree=True)
        return _one_row(table=stmt.table, dropped=True)

    def _truncate(self, stmt: Truncate) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        refuse_lsm_row_writes(ds, stmt.table, "TRUNCATE")
        deleted = ds.delete("true")["num_deleted_rows"]
        return _one_row(num_deleted_rows=deleted, version=ds.version)

    # -- ALTER TABLE ------------------------------------------------------------------------------
    def _addcolumns(self, stmt: AddColumns) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        known = set(ds.schema.names)
        existing = [c.name for c in stmt.columns if c.name in known]
        if existing:
            raise InvalidInputError(f"ALTER TABLE ADD COLUMN: {stmt.table!r} already has "
                                    f"column(s) {existing}")
        ds.add_columns(self._types(stmt.columns, "ALTER TABLE ADD COLUMN"))
        return _one_row(table=stmt.table, version=ds.version)

    def _dropcolumns(self, stmt: DropColumns) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        names = list(stmt.columns)
        if stmt.if_exists:
            known = set(ds.schema.names)
            names = [n for n in names if n in known]
            if not names:
                return _one_row(table=stmt.table, version=ds.version)
        ds.drop_columns(names)
        return _one_row(table=stmt.table, version=ds.version)

    def _renamecolumn(self, stmt: RenameColumn) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        ds.alter_columns({"path": stmt.old, "name": stmt.new})
        return _one_row(table=stmt.table, version=ds.version)

    def _altercolumn(self, stmt: AlterColumn) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        if stmt.type_sql is not None:
            (field,) = self._types((ColumnDef(stmt.column, stmt.type_sql),), "ALTER COLUMN")
            ds.alter_columns({"path": stmt.column, "data_type": field.type})
        else:
            ds.alter_columns({"path": stmt.column, "nullable": stmt.nullable})
        return _one_row(table=stmt.table, version=ds.version)

    # -- tags and history ----------------------------------------------------------------------
    def _createtag(self, stmt: CreateTag) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        version = stmt.version if stmt.version is not None else ds.version
        ds.tags.create(stmt.tag, version)
        return _one_row(table=stmt.table, tag=stmt.tag, version=version)

    def _droptag(self, stmt: DropTag) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        if stmt.if_exists and stmt.tag not in ds.tags.list():
            return _one_row(table=stmt.table, tag=stmt.tag, dropped=False)
        ds.tags.delete(stmt.tag)
        return _one_row(table=stmt.table, tag=stmt.tag, dropped=True)

    def _restore(self, stmt: Restore) -> pa.Table:
        ds = self.session.dataset(stmt.table)
        restored = ds.checkout_version(stmt.version).version
        ds.restore(restored)
        return _one_row(table=stmt.table, version=ds.version, restored_version=restored)

    # -- MERGE ----------------------------------------------------------------------------------
    def _merge(self, stmt: Merge) -> pa.Table:
        ds: LanceDataset = self.session.dataset(stmt.table)
        refuse_lsm_row_writes(ds, stmt.table, "MERGE")
        target = ds.schema
        for key, _ in stmt.keys:
            if key not in target.names:
                raise NotFoundError(f"MERGE: table {stmt.table!r} has no column {key!r}")
        stmt = _bind_columns(stmt, target)
        check_keys_kept(stmt)
        form = stmt.merge_insert_form(target.names)
        if form is not None:
            MERGE_PATHS.add("merge_insert")
            return self._merge_insert(ds, form)
        MERGE_PATHS.add("general")
        return self._merge_general(ds, stmt)

    def _merge_insert(self, ds: LanceDataset, form: MergeInsertForm) -> pa.Table:
        """A MERGE pylance's merge_insert expresses, run as one (one of DO NOTHINGs only
        changes nothing and commits nothing)."""
        if not (form.update or form.delete_matched or form.insert or form.delete_by_source):
            return _one_row(num_inserted_rows=0, num_updated_rows=0, num_deleted_rows=0,
                            version=ds.version)
        source = self.session.sql(form.source_sql()).to_arrow_table()
        source = _merge_values(source, ds.schema)
        builder = ds.merge_insert([k for k, _ in form.merge.keys])
        # conditions as filter text, where "x" is a string: names in backticks
        if form.update:
            builder.when_matched_update_all(_as_filter(form.update_condition))
        if form.delete_matched:
            builder.when_matched_delete()
        if form.insert:
            builder.when_not_matched_insert_all()
        if form.delete_by_source:
            builder.when_not_matched_by_source_delete(_as_filter(form.delete_condition))
        stats = builder.execute(source)
        return _one_row(num_inserted_rows=stats["num_inserted_rows"],
                        num_updated_rows=stats["num_updated_rows"],
                        num_deleted_rows=stats["num_deleted_rows"], version=ds.version)

    @cleanup_is_retryable()
    def _merge_general(self, ds: LanceDataset, stmt: Merge) -> pa.Table:
        """Any other MERGE: DataFusion evaluates the join, the clauses and the values on
        the version the write starts from; one Update commits the result."""
        source = self.session.sql(f"SELECT * FROM {stmt.source_relation()} LIMIT 0").schema()
        query = merge_query(_expand_stars(stmt, ds.schema, source.names))
        select = self.session.pinned_query(ds.uri, query.sql)
        target = ds.schema

        def changes(base: Manifest) -> RowChanges:
            # view types (``upper(NULL)`` is a string_view) as stored: pyarrow takes no
            # rows of them, and row_changes takes each clause's rows
            result = select(base)
            result = result.cast(storable_schema(result.schema, nullable=True))
            return row_changes(query, result, lambda values: _merge_values(values, target))

        stats, manifest = apply_row_changes(ds.write_context(), changes,
                                            [k for k, _ in stmt.keys])
        version = manifest.version if manifest is not None else ds.version
        return _one_row(num_inserted_rows=stats["num_inserted_rows"],
                        num_updated_rows=stats["num_updated_rows"],
                        num_deleted_rows=stats["num_deleted_rows"], version=version)


class _PathCounts:
    """How many MERGE statements took each path (tests check the fast path is taken)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = {"merge_insert": 0, "general": 0}

    def add(self, path: str) -> None:
        with self._lock:
            self.counts[path] += 1


MERGE_PATHS = _PathCounts()


def _bind_columns(stmt: Merge, target: pa.Schema) -> Merge:
    """``stmt`` with the columns its UPDATE SET and INSERT lists name bound to the
    table's (a name as written, else as SQL folds it); an unknown one is a
    NotFoundError."""
    def bind(name: str) -> str:
        for candidate in (name, name.lower()):
            if candidate in target.names:
                return candidate
        raise NotFoundError(f"MERGE: table has no column {name!r}; columns: {target.names}")

    clauses = tuple(replace(c, assignments=tuple((bind(col), e) for col, e in c.assignments))
                    if c.assignments is not None else c for c in stmt.clauses)
    return replace(stmt, clauses=clauses)


def _expand_stars(stmt: Merge, target: pa.Schema, source: list[str]) -> Merge:
    """``stmt`` with ``UPDATE SET *`` and ``INSERT *`` spelled out: each table column
    the source has by name (a key from the source's key); a source column the table
    lacks is a SchemaError, as merge_insert has it."""
    alias = quote_identifier(stmt.source_alias)
    target_alias = quote_identifier(stmt.target_alias)
    source_keys = {s: t for t, s in stmt.keys}
    known = set(target.names)
    extra = [n for n in source if n not in known and n not in source_keys]
    keys = dict(stmt.keys)
    clauses = []
    for clause in stmt.clauses:
        if clause.assignments is None and clause.action in ("update", "insert"):
            if extra:
                raise SchemaError(f"MERGE: the source's column(s) {extra} are not in the "
                                  f"table {stmt.table!r} (UPDATE SET * / INSERT * take "
                                  "every source column)")
            values = []
            for name in target.names:
                if name in keys:  # an update keeps the key it matched (no read for it)
                    side = alias if clause.action == "insert" else target_alias
                    column = keys[name] if clause.action == "insert" else name
                    values.append((name, f"{side}.{quote_identifier(column)}"))
                elif name in source:
                    values.append((name, f"{alias}.{quote_identifier(name)}"))
            clause = replace(clause, assignments=tuple(values))
        clauses.append(clause)
    return replace(stmt, clauses=tuple(clauses))


def _merge_values(values: pa.Table, target: pa.Schema) -> pa.Table:
    """A MERGE's values typed as the table's columns, as INSERT types its values; NULL
    in a column the table keeps non-null is a SchemaError naming it."""
    values = _target_types(values.cast(storable_schema(values.schema, nullable=True)),
                           target, "MERGE")
    for name in values.column_names:
        if name in target.names and not target.field(name).nullable \
                and values.column(name).null_count:
            raise SchemaError(f"MERGE: NULL for column {name!r}, which the table does not "
                              "allow to be NULL")
    return values


class _Counter:
    """Counts the rows streaming through it."""

    def __init__(self) -> None:
        self.rows = 0

    def count(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.rows += batch.num_rows
            yield batch


def _remove_empty_dirs(path: str) -> None:
    """Remove ``path`` and the directories below it that hold no file, deepest first."""
    for directory, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty (or gone): it is kept
