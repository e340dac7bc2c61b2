"""A MemWAL table's LSM view as DataFusion sees it: a ``pyarrow.dataset.Dataset`` subclass.

The view (:class:`lance_sql.memwal.read.planner.LsmView`) is one stream — the newest row
of every key over the base table, its flushed generations and this process's MemTables
— so the table is one partition. At planning (``get_fragments``) the view's sources are
fixed and its plan is built from the pushed projection and filter:

* a filter that pins every primary-key column to literals (``pk = k``, ``pk IN (...)``,
  composite keys with one conjunct per column) plans as the spec's point lookup;
* otherwise the LSM scan, with the filter pushed into the planner (it prunes regions and
  is applied to each key's newest row only, never to older versions).

Filters DataFusion pushes are exact, so whatever the planner does not take (a call our
filter model cannot read) and the filter of a lookup are applied here, to the view's
rows. ``LIMIT`` stops the stream early. ``_gen``, ``_region`` and ``_rowaddr`` (within its
source) are the view's system columns; ``_rowid`` and the row-version columns are the base
table's on its rows and NULL on rows not merged into it yet (they have no row id yet).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, LanceError, QueryError
from lance_sql.expr import Call, Column, Expr, Literal, filter_serially
from lance_sql.memwal.read.nodes import conform
from lance_sql.memwal.read.planner import LsmPlan, LsmView
from lance_sql.sql.batch_export import exportable
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.provider import PlannedDataset, batch_size_for, open_scanner
from lance_sql.sql.pyarrow_filter import decode, in_list, referenced_columns, rows_filter
from lance_sql.sql.streams import ScanScope
from lance_sql.table import SYSTEM_COLUMNS

LSM_ONLY = ("_gen", "_region")
LSM_SYSTEM = (*LSM_ONLY, "_rowaddr")
BASE_SYSTEM = tuple(c for c in SYSTEM_COLUMNS if c not in LSM_SYSTEM)  # NULL if unmerged
MAX_LOOKUP_KEYS = 100_000  # key combinations a composite lookup may expand to
MAX_INLINE_KEYS = 1_000  # lookups of at most this many keys may run on the calling thread


@dataclass
class PushedLsm:
    """What DataFusion asked of the view during planning, and the plan it got."""

    columns: list[str] | None = None
    filter: str | None = None
    plan: LsmPlan | None = None
    residual: bool = False  # the pushed filter is applied here, above the plan


@dataclass(frozen=True)
class LsmUnit:
    """The one partition of an LSM read (or of a ``nearest()`` search: any plan)."""

    table: PlannedDataset
    plan: LsmPlan
    columns: list[str]        # what the plan returns (output plus residual filter columns)
    residual: pc.Expression | None
    scope: ScanScope
    lookup: bool = False  # the plan is a point lookup (reads a few keys' rows)
    limited: bool = False  # the plan stops at the query's LIMIT (see PlannedDataset._inline)

    @property
    def inline_rows(self) -> int | None:
        """A lookup reads next to nothing; a scan may read the whole view (unknown)."""
        return 0 if self.lookup else None

    def scanner(self, schema: pa.Schema | None = None, columns: list[str] | None = None,
                filter: pc.Expression | None = None, batch_size: int | None = None,
                **_: object) -> LsmScanner:
        return open_scanner(self, LsmScanner, columns, filter, batch_size)


class LsmScanner:
    """Streams the unit's plan, cast to the projected schema, stopping at the LIMIT."""

    def __init__(self, unit: LsmUnit, columns: list[str] | None,
                 filter: pc.Expression | None, batch_size: int) -> None:
        table = unit.table
        names = list(columns) if columns is not None else table.schema.names
        self.unit = unit
        self.names = names
        # as a plain scan: DataFusion's batch size, bigger or whole when that is cheaper
        self.batch_size = batch_size_for(unit.scope, table, batch_size)
        self.projected_schema = pa.schema([table.schema.field(n) for n in names])
        missing = [n for n in names if n not in unit.columns]
        if missing:  # DataFusion asked for other columns than it planned with
            raise QueryError(f"{table.name}: columns {missing} were not planned for this scan")

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.unit.scope.reading(self._batches())
        except Exception as exc:
            raise self.unit.table.errors.wrap(exc) from exc

    def _batches(self) -> Iterator[pa.RecordBatch]:
        unit = self.unit
        remaining = unit.table.limit_hint
        if remaining == 0:
            return
        stream = unit.plan.execute()
        try:
            for batch in stream:
                unit.scope.check()  # the query ended: stop reading
                if unit.residual is not None:
                    batch = filter_serially(pa.Table.from_batches([batch]), unit.residual)
                    batch = batch.combine_chunks().to_batches()[0] if batch.num_rows \
                        else None
                if batch is None or not batch.num_rows:
                    continue
                if remaining is not None:
                    batch = batch.slice(0, remaining)
                    remaining -= batch.num_rows
                size = self.batch_size
                if size is None or batch.num_rows <= size:
                    yield self._conform(batch)
                else:  # (the plan yields a base fragment's winners at once)
                    for start in range(0, batch.num_rows, size):
                        yield self._conform(batch.slice(start, size))
                if remaining == 0:
                    return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` as the projected schema (types cast)."""
        if not len(self.projected_schema):
            return batch.select([])  # count(*): no columns, the rows still counted
        return exportable(conform(batch, self.projected_schema))


class LsmTableDataset(PlannedDataset):
    """One pinned base version of a MemWAL table read as its LSM view."""

    def __init__(self, name: str, view: LsmView, *, system_columns: bool,
                 errors: ErrorRegistry, query_id: str | None = None) -> None:
        """``view``: the sources this query reads (the catalog's, warm when strong)."""
        self.view = view
        self.base = view.base
        self.consistency = view.consistency
        data = view.arrow_schema
        fields = list(data)
        if system_columns:
            fields += [pa.field("_gen", pa.int64()), pa.field("_region", pa.string()),
                       pa.field("_rowaddr", pa.uint64()),
                       *(pa.field(c, pa.uint64()) for c in BASE_SYSTEM)]
        self._start(name, pa.schema(fields), PushedLsm(), errors,
                    query_id=query_id, system_columns=system_columns)

    @property
    def label(self) -> str:
        return f"{self.name}[v={self.base.version}, lsm {self.consistency}]"

    def _units(self, filter: pc.Expression | None, scope: ScanScope) -> list[LsmUnit]:
        view = self.view
        wanted = self.pushed.columns if self.pushed.columns is not None \
            else list(self._schema.names)
        output = list(wanted)
        plan, columns, residual, lookup, limit = None, output, None, False, None
        found = _in_list_keys(filter, view) if filter is not None else None
        tree = decode(filter) if filter is not None and found is None else None
        if tree is not None:
            found = _lookup_keys(tree, view)
        keys, exact = found if found is not None else (None, False)
        if scope.inline and keys is not None and keys.num_rows > MAX_INLINE_KEYS:
            scope.want_worker()  # before planning a lookup that would run on a worker
        if keys is not None:
            # a filter that is nothing but the keys' pins selects exactly the rows the
            # lookup returns: applying it again would only cost a filter pass
            residual = None if exact else filter
            columns = output if exact else _with(output, referenced_columns(filter))
            try:
                plan = view.lookup_plan(keys, columns)
                lookup = keys.num_rows <= MAX_INLINE_KEYS
            except InvalidInputError:
                plan = None  # a literal that does not fit the key's type: scan instead
        if plan is None:
            if tree is None and filter is not None:
                tree = decode(filter)
            pushed, residual = _pushable(tree, filter)
            columns = output if residual is None else _with(output,
                                                            referenced_columns(filter))
            limit = self.limit_hint if residual is None else None
            if scope.inline and keys is None and limit is None:
                # before planning a scan that would run on a worker; a LIMIT's scan runs
                # here (it stops at the rows it returns; Ctrl-C stops it between batches)
                scope.want_worker()
            plan = view.scan_plan(columns, pushed, limit)
        self.pushed.plan = plan
        self.pushed.residual = residual is not None
        if residual is not None:
            residual = rows_filter(residual, tree if tree is not None else decode(residual),
                                   self._schema)
        return [LsmUnit(self, plan, columns, residual, scope, lookup=lookup,
                        limited=limit is not None)]


def _with(names: list[str], extra: set[str]) -> list[str]:
    return list(dict.fromkeys([*names, *sorted(extra - set(names))]))


def _conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, Call) and expr.op == "and":
        return [p for a in expr.args for p in _conjuncts(a)]
    return [expr]


def _known(expr: Expr) -> bool:
    if isinstance(expr, Call):
        return expr.op != "unknown" and all(_known(a) for a in expr.args)
    return True


def _pushable(tree: Expr | None, filter: pc.Expression | None
              ) -> tuple[Expr | None, pc.Expression | None]:
    """(what the planner applies, what is applied here): all to the planner when it reads
    the whole filter; otherwise the readable conjuncts there, the whole filter here."""
    if filter is None:
        return None, None
    if tree is not None and _known(tree):
        return tree, None
    parts = [p for p in _conjuncts(tree) if _known(p)] if tree is not None else []
    pushed = None if not parts else parts[0] if len(parts) == 1 else Call("and", tuple(parts))
    return pushed, filter


def _values(expr: Expr, column: str) -> list[Any] | None:
    """The literals ``expr`` pins ``column`` to (``=``, ``IN``, an OR of those)."""
    if not isinstance(expr, Call):
        return None
    args = expr.args
    if expr.op == "=" and len(args) == 2:
        col, lit = (args[0], args[1]) if isinstance(args[0], Column) else (args[1], args[0])
        if isinstance(col, Column) and col.path == (column,) and isinstance(lit, Literal):
            return None if lit.value is None else [lit.value]
        return None
    if expr.op == "in" and args and isinstance(args[0], Column) and args[0].path == (column,):
        if all(isinstance(a, Literal) for a in args[1:]):
            return [a.value for a in args[1:] if a.value is not None]  # type: ignore[union-attr]
        return None
    if expr.op == "or":
        out: list[Any] = []
        for part in args:
            found = _values(part, column)
            if found is None:
                return None
            out += found
        return out
    return None


def _in_list_keys(filter: pc.Expression, view: LsmView) -> tuple[pa.Table, bool] | None:
    """:func:`_lookup_keys` of a filter that is nothing but ``key IN (values)`` on a
    one-column key, the values already of the key's type and none null: the key table
    is the pushed values themselves, each once, and the filter exact (None: any other
    filter, found the general way)."""
    if len(view.key_columns) != 1:
        return None
    found = in_list(filter)
    if found is None or found[0] != view.key_columns[0]:
        return None
    values = found[1]
    key_type = view.arrow_schema.field(found[0]).type
    if not values.type.equals(key_type) or values.null_count or not len(values):
        return None
    unique = pc.unique(values)  # first occurrences, in order
    if len(unique) > MAX_LOOKUP_KEYS:
        return None
    return pa.table({found[0]: unique}), True


def _lookup_keys(tree: Expr, view: LsmView) -> tuple[pa.Table, bool] | None:
    """The key table a filter pins every primary-key column to (None: not a lookup), and
    whether the filter is exactly those pins (every conjunct used, every literal kept
    as is by the key's type: then it holds on exactly the rows of those keys). Never for
    a float key: SQL's ``=`` is IEEE's (``-0.0 = 0.0``), a lookup matches a key's bits."""
    if any(pa.types.is_floating(view.arrow_schema.field(k).type) for k in view.key_columns):
        return None
    parts = _conjuncts(tree)
    per_column: list[list[Any]] = []
    used: set[int] = set()
    for key in view.key_columns:
        found = next(((i, v) for i, p in enumerate(parts)
                      if (v := _values(p, key)) is not None), None)
        if found is None:
            return None
        used.add(found[0])
        per_column.append(list(dict.fromkeys(found[1])))
    combos = 1
    for values in per_column:
        combos *= len(values)
    if combos > MAX_LOOKUP_KEYS:
        return None
    exact = len(used) == len(parts)
    rows = list(itertools.product(*per_column)) if len(per_column) > 1 else None
    arrays = []
    for i, key in enumerate(view.key_columns):
        key_type = view.arrow_schema.field(key).type
        try:
            pinned = pa.array(per_column[i], type=key_type)
            if exact:  # each literal unchanged by the key's type (no NaN, no rounding)
                exact = pinned.to_pylist() == per_column[i]
            arrays.append(pinned if rows is None
                          else pa.array([r[i] for r in rows], type=key_type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError, LanceError):
            return None  # e.g. 2.5 for an integer key: the scan answers (exactly)
    return pa.table(dict(zip(view.key_columns, arrays, strict=True))), exact
