"""Schema evolution: add, drop and alter columns (Merge and Project transactions).

* ``add_columns`` writes, for every fragment, one new data file holding only the new
  columns (ids after the schema's largest), covering all physical rows (deleted ones
  too, so offsets line up), and commits a Merge listing every fragment with its new
  file. Values come from SQL expressions over existing columns, from Arrow data aligned
  with the table's rows (as ``to_table()`` returns them; a deleted row's slot repeats
  a live row's values, never read), or from a function of each fragment's batch. An
  expression or type change failing on a fragment with deleted rows is tried on its
  live rows alone (a value only a deleted row holds does not fail it, as in pylance).
  Arrow fields alone add all-NULL columns without writing anything.
* ``drop_columns`` and renames / nullability changes in ``alter_columns`` are Project
  commits: metadata only. A type change rewrites that column under a new field id (a
  Merge), as the reference does. On a table with a MemWAL, a "change" to the type the
  column has is no change (the column keeps its id, nothing is rewritten): rows in
  MemTables and flushed generations are matched to the table's columns by field id, and
  a new id of the same type, at the end of the schema, looks like a column dropped and
  added again (the reference refuses any type change on such a table).
* New ids come from :func:`~lance_sql.table.meta.field_ids.next_field_id`: above every
  id the table holds or held, and above ``held``, what the caller knows outside the
  manifest still holds (the MemWAL layer passes its unmerged generations' ids). On a
  table with a MemWAL, a drop that lowers the table's highest id first commits the
  field-id mark (an UpdateConfig) so no later column takes a dropped one's id.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import (
    IncompatibleConflict,
    InvalidInputError,
    NotFoundError,
    RetryableConflict,
    SchemaError,
)
from lance_sql.expr import parse_predicate, value_expression, value_nullable
from lance_sql.expr.casts import cast_like_datafusion
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField, LanceSchema, check_column_names
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.meta.field_ids import (
    MAX_FIELD_ID_CONFIG,
    has_mem_wal,
    mark_to_record,
    mem_wal_routing_columns,
    next_field_id,
    recorded_mark,
)
from lance_sql.table.txn.operations import Merge, Project, UpdateConfig, UpdateMap
from lance_sql.table.txn.writer import WriteContext
from lance_sql.table.write.fragments import FragmentWriter, to_reader

Values = Callable[[Fragment, ObjectStore], pa.Table]  # fragment -> its new columns
# The highest field id held outside a table version's manifest (-1: none); see next_field_id
Held = Callable[[Manifest], int]


# ---------------------------------------------------------------------------- add columns
def add_columns(ctx: WriteContext, transforms: Any, read_columns: Sequence[str] | None = None,
                reader_schema: pa.Schema | None = None, *, held: Held) -> Manifest:
    """Commit new columns from ``transforms``: SQL expressions (a mapping), a UDF over
    ``read_columns``, an Arrow schema (all-null columns), or rows aligned with the table.
    ``held(base)``: the highest field id held outside the manifest (new ids go above)."""
    base = ctx.table
    if isinstance(transforms, pa.Field):
        transforms = pa.schema([transforms])
    elif isinstance(transforms, list) and transforms and \
            all(isinstance(f, pa.Field) for f in transforms):
        transforms = pa.schema(transforms)
    if isinstance(transforms, pa.Schema):
        return _add_null_columns(ctx, transforms, held)
    if isinstance(transforms, Mapping):
        new_arrow, values = _sql_values(base, transforms)
    elif callable(transforms) and not isinstance(transforms, pa.Table | pa.RecordBatchReader):
        new_arrow, values = _udf_values(ctx.store, base, transforms, read_columns)
    else:
        new_arrow, values = _aligned_values(base, to_reader(transforms, reader_schema))
    _check_nullable_under_mem_wal(base, new_arrow)
    schema = base.schema.add_fields(new_arrow, next_field_id(base, held(base)))
    new_fields = LanceSchema(schema.fields[len(base.schema.fields):])
    fragments = _write_columns(ctx.store, base, new_fields, values)
    return _commit_merge(ctx, schema, fragments)


def _commit_merge(ctx: WriteContext, schema: LanceSchema,
                  fragments: list[tuple[Fragment, str]]) -> Manifest:
    """Commit fragments carrying new column files; a failed commit removes those files."""
    with ctx.staging() as staged:
        staged.add(*(key for _, key in fragments if key))
        return ctx.commit(Merge(tuple(f for f, _ in fragments), schema))


def _add_null_columns(ctx: WriteContext, schema: pa.Schema, held: Held) -> Manifest:
    bad = [f.name for f in schema if not f.nullable]
    if bad:
        raise SchemaError(f"columns added without data must be nullable: {bad}")
    base = ctx.table
    return ctx.commit(Merge(base.fragments,
                            base.schema.add_fields(schema, next_field_id(base, held(base)))))


def _sql_values(base: Manifest, exprs: Mapping[str, str]) -> tuple[pa.Schema, Values]:
    import pyarrow.dataset as pds  # here: it imports pandas (~0.3 s) at import time

    arrow = base.schema.to_arrow()
    compiled = {}
    nullable = {}
    for name, text in exprs.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise InvalidInputError("add_columns with a dict maps new column names to SQL")
        parsed = parse_predicate(text)
        compiled[name] = value_expression(parsed, arrow, lance_literals=True)
        nullable[name] = value_nullable(parsed, arrow)
    computed = pds.dataset(arrow.empty_table()).to_table(columns=dict(compiled)).schema
    # stored nullable only when the expression can be NULL, as pylance stores it (a
    # constant, or arithmetic of non-nullable columns, is not); under a MemWAL always
    # (rows its writers hold read NULL there, see _check_nullable_under_mem_wal)
    mem_wal = has_mem_wal(base)
    types = pa.schema([f.with_nullable(mem_wal or nullable[f.name]) for f in computed])
    needed = sorted({c for e in exprs.values() for c in _referenced(e, arrow)})

    def compute(frag: Fragment, table: pa.Table) -> pa.Table:
        try:
            return pds.dataset(table).to_table(columns=dict(compiled)).cast(types)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            # a value the expression fails on (a cast of bytes that are no UTF-8...)
            raise InvalidInputError(f"add_columns: the expressions fail on fragment "
                                    f"{frag.id}'s values: {exc}") from exc

    return types, _reading(base, needed, compute, live_on_failure=True)


def _referenced(text: str, arrow: pa.Schema) -> set[str]:
    wanted = set()
    parsed = parse_predicate(text)
    stack = [parsed]
    while stack:
        node = stack.pop()
        path = getattr(node, "path", None)
        if path is not None:
            match = next((n for n in arrow.names if n.lower() == path[0].lower()), None)
            if match is None:
                raise NotFoundError(f"no column {path[0]!r}")
            wanted.add(match if path[0] not in arrow.names else path[0])
        stack.extend(getattr(node, "args", ()))
    return wanted


_Rows = TypeVar("_Rows", pa.Table, pa.Array, pa.ChunkedArray)


def _reading(base: Manifest, names: Sequence[str],
             compute: Callable[[Fragment, pa.Table], pa.Table], *,
             live_on_failure: bool = False) -> Values:
    """Wrap ``compute`` so it receives the named columns of each fragment (every physical
    row). ``live_on_failure``: when it raises InvalidInputError on a fragment with
    deleted rows, it is given the live rows alone (a value only a deleted row holds must
    not fail the change, as in pylance; see :func:`_spread` for the deleted rows)."""
    fields = [base.schema.field(n) for n in names]

    def values(frag: Fragment, store: Any) -> pa.Table:
        reader = FragmentReader(store, base, frag)
        arrays = reader.read(fields)
        if fields:
            table = pa.Table.from_arrays(arrays, names=[f.name for f in fields])
        else:
            table = pa.table({"_": pa.nulls(frag.physical_rows)}).select([])
        try:
            return compute(frag, table)
        except InvalidInputError:
            mask = reader.keep_mask() if live_on_failure else None
            if mask is None:
                raise
        return _spread(compute(frag, table.filter(pa.array(mask))), mask)

    return values


def _spread(live: _Rows, mask: np.ndarray) -> _Rows:
    """``live`` (one row per True of ``mask``) at the positions of ``mask``: a fragment's
    values for every physical row. No read ever shows a deleted row's; it repeats the
    first live row's, which fits the column whatever its type and nullability (NULL
    when no row is live)."""
    positions = np.zeros(mask.size, dtype=np.int64)
    positions[mask] = np.arange(len(live))
    if not len(live):
        return live.take(pa.array(positions, mask=np.ones(mask.size, bool)))
    return live.take(pa.array(positions))


def _udf_values(store: ObjectStore, base: Manifest, udf: Callable,
                read_columns: Sequence[str] | None) -> tuple[pa.Schema, Values]:
    names = list(read_columns) if read_columns is not None else [f.name for f in
                                                                 base.schema.fields]

    def compute(frag: Fragment, table: pa.Table) -> pa.Table:
        result = udf(table.combine_chunks().to_batches()[0] if table.num_rows else
                     pa.RecordBatch.from_pylist([], schema=table.schema))
        if type(result).__module__.startswith("pandas"):
            result = pa.Table.from_pandas(result, preserve_index=False)
        if isinstance(result, pa.RecordBatch):
            result = pa.Table.from_batches([result])
        if not isinstance(result, pa.Table) or result.num_rows != table.num_rows:
            raise InvalidInputError("an add_columns function must return one row per input row")
        return result

    values = _reading(base, names, compute)
    probe = next((f for f in base.fragments if f.physical_rows), None)
    if probe is None:
        raise InvalidInputError("cannot infer the new columns' types from an empty table")
    schema = values(probe, store).schema
    return schema, values


def _aligned_values(base: Manifest, reader: pa.RecordBatchReader) -> tuple[pa.Schema, Values]:
    """Rows of ``reader`` belong to the table's live rows in scan order."""
    batches = iter(reader)
    pending: list[pa.Table] = []
    buffered = 0
    total = base.num_rows

    def take(n: int) -> pa.Table:
        nonlocal buffered
        while buffered < n:
            batch = next(batches, None)
            if batch is None:
                raise InvalidInputError(f"add_columns data has fewer rows than the table "
                                        f"({total})")
            pending.append(pa.Table.from_batches([batch]))
            buffered += batch.num_rows
        table = pa.concat_tables(pending) if pending else reader.schema.empty_table()
        pending[:] = [table.slice(n)]
        buffered -= n
        return table.slice(0, n)

    def values(frag: Fragment, store: Any) -> pa.Table:
        live = take(frag.num_rows)
        if frag.num_deleted_rows == 0:
            return live
        mask = FragmentReader(store, base, frag).keep_mask()
        assert mask is not None
        return _spread(live, mask)

    def finish_check() -> None:
        if buffered or next(batches, None) is not None:
            raise InvalidInputError(f"add_columns data has more rows than the table ({total})")

    values.finish_check = finish_check  # type: ignore[attr-defined]
    return reader.schema, values


def _write_columns(store: ObjectStore, base: Manifest, new_fields: LanceSchema,
                   values: Values) -> list[tuple[Fragment, str]]:
    """Every fragment with a new data file for ``new_fields``; keys written, for clean-up."""
    target = new_fields.to_arrow()
    written: list[tuple[Fragment, str]] = []
    try:
        for frag in base.fragments:
            if frag.physical_rows == 0:
                written.append((frag, ""))
                continue
            table = values(frag, store)
            if table.num_rows != frag.physical_rows:
                raise InvalidInputError(f"new column values for fragment {frag.id} have "
                                        f"{table.num_rows} rows, expected {frag.physical_rows}")
            table = table.select(target.names)
            try:
                table = table.cast(target)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise SchemaError(f"new column values do not fit {target}: {exc}") from exc
            data_file = write_columns_file(store, new_fields, table, base.data_format)
            # New values for every row are a change to every row: on tables with stable
            # row ids the commit sets their last-updated version (as the reference does).
            changed = replace(frag, files=frag.files + (data_file,))
            if base.uses_stable_row_ids:
                changed = replace(changed, last_updated_at_version_sequence=None)
            written.append((changed, data_file.key))
        check = getattr(values, "finish_check", None)
        if check is not None:
            check()
    except BaseException:
        for _, key in written:
            if key:
                store.delete(key)
        raise
    return written


def write_columns_file(store: ObjectStore, schema: LanceSchema, table: pa.Table,
                data_format: str) -> DataFile:
    """Write ``table`` (new columns of one fragment) as one data file of ``schema``."""
    writer = FragmentWriter(store, schema, max_rows_per_file=max(table.num_rows, 1),
                            data_format=data_format)
    try:
        for batch in table.to_batches():
            if batch.num_rows:
                writer.write(batch)
        (frag,) = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return frag.files[0]


# --------------------------------------------------------------------------- drop / alter
def _without(fields: Iterable[LanceField], drop: set[int]) -> tuple[LanceField, ...]:
    out = []
    for f in fields:
        if f.id in drop:
            continue
        if f.children and f.logical_type == "struct":
            kids = _without(f.children, drop)
            if not kids:
                raise InvalidInputError(f"dropping every member of struct {f.name!r}; drop "
                                        "the struct instead")
            f = replace(f, children=kids)
        out.append(f)
    return tuple(out)


def drop_columns(ctx: WriteContext, columns: Sequence[str]) -> Manifest:
    """Commit the table without ``columns`` (their data stays until compaction)."""
    if isinstance(columns, str):
        raise InvalidInputError("drop_columns takes a list of column names")
    base = ctx.table
    drop = {base.schema.field(name).id for name in columns}
    routing = mem_wal_routing_columns(base)
    for name in columns:
        _check_not_routing(routing, base.schema.field(name), "drop")
    kept = _without(base.schema.fields, drop)
    if not kept:
        raise InvalidInputError("cannot drop every column of a table")
    schema = LanceSchema(kept, base.schema.metadata)
    if not has_mem_wal(base):
        return ctx.commit(Project(schema), check_winners=_no_new_mem_wal)
    mark = mark_to_record(base, schema)
    if mark is not None:
        _record_mark(ctx, mark)
    return ctx.commit(Project(schema))


_MARK_ATTEMPTS = 5


def _record_mark(ctx: WriteContext, mark: int) -> None:
    """Commit the field-id mark ``mark`` (an UpdateConfig), unless the table records one
    as high already. Before the drop's own commit: a mark without its drop (that commit
    failing) only makes new ids higher. Two drops recording marks at once conflict on the
    config key; the loser reads the table again and records the higher of the two."""
    current = ctx
    for _ in range(_MARK_ATTEMPTS):
        if recorded_mark(current.table.config) >= mark:
            return
        update = UpdateMap.of({MAX_FIELD_ID_CONFIG: str(mark)})
        try:
            current.commit(UpdateConfig(config_updates=update))
            return
        except IncompatibleConflict:
            current = WriteContext.open(ctx.store, ctx.config, must_exist=True)
    raise RetryableConflict(f"{ctx.store.uri}: other writers kept recording the field-id "
                            "mark; retry the drop")


def _no_new_mem_wal(base: Manifest, latest: Manifest) -> None:
    """A drop read on a table without a MemWAL records no mark; if the table got one
    since (its writers may hold the dropped columns), the drop must be redone."""
    if has_mem_wal(latest):  # (installed only for a base without one)
        raise RetryableConflict("drop_columns: the table got a MemWAL meanwhile; retry the "
                                "drop")


_ALTER_KEYS = {"path", "name", "nullable", "data_type"}


def alter_columns(ctx: WriteContext, alterations: Sequence[Mapping[str, Any]],
                  *, held: Held) -> Manifest:
    """Commit renames, nullability and type changes of columns (one mapping per column).
    ``held``: as for :func:`add_columns` (a type change gives the column a new id)."""
    base = ctx.table
    schema = base.schema
    casts: dict[int, LanceField] = {}  # old field id -> replacement field (new id)
    next_id: Iterator[int] | None = None  # (asked for only when a type changes)
    for alt in alterations:
        unknown = set(alt) - _ALTER_KEYS
        if unknown or "path" not in alt:
            raise InvalidInputError(f"an alteration needs 'path' and may have name, nullable, "
                                    f"data_type; got {sorted(alt)}")
        path = alt["path"]
        field = schema.field(path)
        changed = field
        if alt.get("name") is not None:
            changed = replace(changed, name=_check_rename(schema, path, alt["name"]))
        if alt.get("nullable") is not None:
            nullable = bool(alt["nullable"])
            if not nullable and field.nullable:
                _check_no_nulls(ctx.store, base, path)
            changed = replace(changed, nullable=nullable)
        if alt.get("data_type") is not None and not (
                field.arrow_type.equals(_data_type(alt["data_type"])) and has_mem_wal(base)):
            if "." in path:
                raise InvalidInputError("only top-level columns can change type (a nested "
                                        "field changes with its column's whole type)")
            _check_not_routing(mem_wal_routing_columns(base), field, "change the type of")
            arrow = pa.field(changed.name, alt["data_type"], changed.nullable,
                             metadata=field.to_arrow().metadata)
            if next_id is None:
                next_id = itertools.count(next_field_id(base, held(base)))
            changed = LanceField.from_arrow(arrow, next_id)
            casts[changed.id] = changed
        schema = _replace_by_id(schema, field.id, changed)
    if not casts:
        return ctx.commit(Project(schema))
    return _commit_casts(ctx, schema, casts)


def _check_not_routing(routing: Mapping[int, str], field: LanceField, change: str) -> None:
    """SchemaError when ``field`` (or a field in it) is one of ``routing``, the columns
    the table's MemWAL routes rows by (see :func:`mem_wal_routing_columns`)."""
    held = next((routing[f.id] for f in field.walk() if f.id in routing), None)
    if held is not None:
        raise SchemaError(f"cannot {change} column {field.name!r}: it is {held} of the "
                          f"table's MemWAL, whose writers route rows by it (a new type "
                          f"or none would send a key's new rows to another region than "
                          f"its older ones)")


def _data_type(given: Any) -> pa.DataType:
    """An alteration's ``data_type`` as a type (pyarrow takes names such as "string")."""
    try:
        return pa.field("_", given).type
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"not a data type: {given!r}") from exc


def _check_nullable_under_mem_wal(base: Manifest, added: pa.Schema) -> None:
    """A table with a MemWAL takes only nullable new columns: rows its writers wrote
    before (generations, MemTables, WAL) have no value there and read NULL, which a
    non-nullable column cannot hold (its reads failed and its merges were refused)."""
    bad = [f.name for f in added if not f.nullable]
    if bad and has_mem_wal(base):
        raise SchemaError(f"columns added to a table with a MemWAL must be nullable (rows "
                          f"written before read NULL there): {bad}")


def _check_rename(schema: LanceSchema, path: str, name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"invalid new name {name!r} for {path!r}")
    chain = schema.path(path)  # (as the rename itself finds it: a member may hold dots)
    siblings = chain[-2].children if len(chain) > 1 else schema.fields
    if any(s.name == name for s in siblings if s is not chain[-1]):
        raise InvalidInputError(f"cannot rename {path!r} to {name!r}: the name is taken")
    if len(chain) == 1:
        check_column_names([name])
    return name


def _check_no_nulls(store: ObjectStore, base: Manifest, path: str) -> None:
    top, _, rest = path.partition(".")
    for frag in base.fragments:
        reader = FragmentReader(store, base, frag)
        (array,) = reader.read([base.schema.field(top)])
        mask = reader.keep_mask()
        if mask is not None:
            array = array.filter(pa.array(mask))
        for part in rest.split(".") if rest else ():
            array = pc.struct_field(array, part)
        if array.null_count:
            raise InvalidInputError(f"column {path!r} has NULL values; it cannot be made "
                                    "non-nullable")


def _replace_by_id(schema: LanceSchema, field_id: int, new: LanceField) -> LanceSchema:
    def walk(f: LanceField) -> LanceField:
        if f.id == field_id:
            return new
        return replace(f, children=tuple(walk(c) for c in f.children)) if f.children else f

    return LanceSchema(tuple(walk(f) for f in schema.fields), schema.metadata)


def _commit_casts(ctx: WriteContext, schema: LanceSchema,
                  casts: dict[int, LanceField]) -> Manifest:
    base = ctx.table
    olds = {new_id: next(f for f in base.schema.fields
                         if f.name == _old_name(base, schema, new_id))
            for new_id in casts}
    new_fields = LanceSchema(tuple(casts.values()))
    target = new_fields.to_arrow()

    def compute(frag: Fragment, store: Any) -> pa.Table:
        reader = FragmentReader(store, base, frag)
        arrays = reader.read([olds[i] for i in casts])
        try:
            cast = [cast_like_datafusion(a, f.type) for a, f in zip(arrays, target,
                                                                     strict=True)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            mask = reader.keep_mask()
            if mask is None:
                raise InvalidInputError(f"cannot cast column: {exc}") from exc
            # a value only deleted rows hold must not fail the cast (as in pylance): the
            # live rows are cast (see _spread for the deleted ones)
            live = pa.array(mask)
            try:
                cast = [_spread(cast_like_datafusion(a.filter(live), f.type), mask)
                        for a, f in zip(arrays, target, strict=True)]
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as again:
                raise InvalidInputError(f"cannot cast column: {again}") from again
        return pa.Table.from_arrays(cast, schema=target)

    fragments = _write_columns(ctx.store, base, new_fields, compute)
    return _commit_merge(ctx, schema, fragments)


def _old_name(base: Manifest, schema: LanceSchema, new_id: int) -> str:
    """Name in ``base`` of the top-level column now represented by ``new_id``."""
    position = next(i for i, f in enumerate(schema.fields) if f.id == new_id)
    return base.schema.fields[position].name
