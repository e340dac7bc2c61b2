"""Scans whose columns are struct fields (``"st.x"``) or SQL expressions
(``{"b": "id * 2"}``), as pylance's ``to_table(columns=...)`` takes them.

The scan reads the top-level columns the projections name (its filter, limit and offset
as usual) and each batch it returns is projected on the calling thread; names are kept as
given (``st.x`` stays ``st.x``), system columns asked for follow the projections.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import columns as expr_columns
from lance_sql.expr import parse_predicate, value_expression
from lance_sql.expr.arrow import project_serially
from lance_sql.expr.model import Column, Expr
from lance_sql.format.schema import split_path

__all__ = ["ProjectingScanner", "Projection", "nested_selection", "projections_of", "read_columns",
           "select_nested"]


def projections_of(columns: Sequence[str] | Mapping[str, str], schema: pa.Schema
                   ) -> dict[str, Expr] | None:
    """Output name -> expression of ``columns``, or None when they are plain column names
    (the scan reads them itself). A name with a ``.`` that is no top-level column is a
    struct field; a mapping's values are SQL expressions."""
    if isinstance(columns, Mapping):
        out: dict[str, Expr] = {}
        for name, text in columns.items():
            if not isinstance(name, str) or not isinstance(text, str):
                raise InvalidInputError("columns={name: 'SQL expression', ...} takes strings")
            out[name] = parse_predicate(text)
        return out
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        return None
    if not any("." in c and c not in schema.names for c in columns):
        return None
    return {c: Column(split_path(c)) if c not in schema.names else Column((c,))
            for c in columns}


# system columns a projection may name: the scan makes them when asked
SYSTEM = ("_rowid", "_rowaddr")


def read_columns(projections: Mapping[str, Expr], schema: pa.Schema) -> list[str]:
    """The top-level columns ``projections`` read, in the table's order, then the system
    columns they name."""
    wanted: set[str] = set()
    for expr in projections.values():
        for path in expr_columns(expr):
            if path[0] in SYSTEM and len(path) == 1:
                wanted.add(path[0])
            elif path[0] not in schema.names:
                raise NotFoundError(f"column {'.'.join(path)!r} does not exist; columns: "
                                    f"{', '.join(schema.names)}")
            else:
                wanted.add(path[0])
    return [n for n in schema.names if n in wanted] + [n for n in SYSTEM if n in wanted]


# A struct column's pruned shape: child name -> its own shape, or None for all of it.
Shape = dict[str, "Shape | None"]


def nested_selection(columns: Sequence[str], schema: pa.Schema) -> dict[str, Shape | None]:
    """Top-level column -> the part of it ``columns`` names (None: all of it), in the order
    they are first named: pylance's ``take`` keeps struct fields (``"st.x"``) nested in
    their struct (``st: struct<x>``), where its scans name them ``st.x``."""
    out: dict[str, Shape | None] = {}
    for name in columns:
        if name in schema.names or name in SYSTEM:
            out[name] = None
            continue
        top, *path = split_path(name)  # (a backquoted field may hold a '.' or a space)
        if top not in schema.names or not path:
            raise NotFoundError(f"column {name!r} does not exist; columns: "
                                f"{', '.join(schema.names)}")
        if top in out and out[top] is None:
            continue  # all of it is taken already
        shape = out.setdefault(top, {})
        arrow_type = schema.field(top).type
        for i, part in enumerate(path):
            index = arrow_type.get_field_index(part) if pa.types.is_struct(arrow_type) else -1
            if index < 0:
                raise NotFoundError(f"column {name!r} does not exist: {top}"
                                    f"{''.join('.' + p for p in path[:i])} has no field {part!r}")
            arrow_type = arrow_type.field(index).type
            assert shape is not None
            if i == len(path) - 1:
                shape[part] = None
            elif part not in shape or shape[part] is not None:
                shape = shape.setdefault(part, {})
            else:
                break  # all of that field is taken already
    return out


def select_nested(table: pa.Table, selection: Mapping[str, Shape | None]) -> pa.Table:
    """``table``'s columns cut to ``selection`` (see :func:`nested_selection`); children
    keep the schema's order."""
    arrays, fields = [], []
    for name, shape in selection.items():
        field, column = table.schema.field(name), table.column(name)
        if shape is not None:
            empty = _pruned(pa.nulls(0, field.type), shape)
            column = pa.chunked_array([_pruned(c, shape) for c in column.chunks], empty.type)
            field = pa.field(name, empty.type, field.nullable, field.metadata)
        arrays.append(column)
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _pruned(array: pa.StructArray, shape: Shape) -> pa.StructArray:
    children, fields = [], []
    for i, field in enumerate(array.type):
        if field.name not in shape:
            continue
        child = array.field(i)
        sub = shape[field.name]
        if sub is not None:
            child = _pruned(child, sub)
        children.append(child)
        fields.append(pa.field(field.name, child.type, field.nullable, field.metadata))
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


class Projection:
    """``projections`` (then the ``extra`` system columns) computed from tables of
    ``source``'s columns, as :func:`read_columns` lists them. Literals are typed as
    pylance types them in its scan projections, as in ``add_columns`` (``i8 + 1`` an int8
    that wraps, ``f32 * 2.5`` a float32): a computed column reads with the type it would
    be stored with."""

    def __init__(self, projections: Mapping[str, Expr], source: pa.Schema,
                 extra: Sequence[str] = ()) -> None:
        self.projections = dict(projections)
        self.extra = list(extra)
        self._compiled = {name: value_expression(e, source, lance_literals=True)
                          for name, e in self.projections.items()}

    def __call__(self, table: pa.Table) -> pa.Table:
        names = [*self._compiled, *self.extra]
        exprs = [*self._compiled.values(), *(pc.field(n) for n in self.extra)]
        try:
            return project_serially(table, exprs, names)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidInputError(f"cannot compute the columns asked for: {exc}") from None


class ProjectingScanner:
    """A :class:`~lance_sql.table.read.scan.Scanner` of the columns ``projections`` read,
    its batches projected to them (``extra``: system columns kept after them)."""

    def __init__(self, scanner: object, projections: Mapping[str, Expr],
                 extra: Sequence[str] = ()) -> None:
        self.scanner = scanner
        source = scanner.projected_schema  # type: ignore[attr-defined]
        self._project = Projection(projections, source, extra)
        self.projections = self._project.projections
        self.extra = self._project.extra
        self.projected_schema = self._project(source.empty_table()).schema

    def to_table(self) -> pa.Table:
        return self._project(self.scanner.to_table())  # type: ignore[attr-defined]

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self.scanner.to_batches():  # type: ignore[attr-defined]
            yield from self._project(pa.Table.from_batches([batch])).to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def to_tables(self) -> Iterator[pa.Table]:
        for table in self.scanner.to_tables():  # type: ignore[attr-defined]
            yield self._project(table)

    def count_rows(self) -> int:
        return self.scanner.count_rows()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        """The rest of the scan's API (its plan, ``explain_plan``, limit...) is the
        underlying scanner's."""
        if name.startswith("__") or name == "scanner":
            raise AttributeError(name)
        return getattr(self.scanner, name)
