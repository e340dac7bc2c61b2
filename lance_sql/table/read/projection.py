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

__all__ = ["ProjectingScanner", "projections_of"]


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
    return {c: Column(tuple(c.split("."))) if c not in schema.names else Column((c,))
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


class ProjectingScanner:
    """A :class:`~lance_sql.table.read.scan.Scanner` of the columns ``projections`` read,
    its batches projected to them (``extra``: system columns kept after them)."""

    def __init__(self, scanner: object, projections: Mapping[str, Expr],
                 extra: Sequence[str] = ()) -> None:
        self.scanner = scanner
        self.projections = dict(projections)
        self.extra = list(extra)
        source = scanner.projected_schema  # type: ignore[attr-defined]
        self._compiled = {name: value_expression(e, source)
                          for name, e in self.projections.items()}
        self.projected_schema = self._project(source.empty_table()).schema

    def _project(self, table: pa.Table) -> pa.Table:
        names = [*self._compiled, *self.extra]
        exprs = [*self._compiled.values(), *(pc.field(n) for n in self.extra)]
        try:
            return project_serially(table, exprs, names)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidInputError(f"cannot compute the columns asked for: {exc}") from None

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
