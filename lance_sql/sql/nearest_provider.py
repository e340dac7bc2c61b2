"""``nearest(...)`` in SQL: its arguments, and the top-k search as a DataFusion table.

The table function is called while DataFusion plans the query. It checks the arguments,
pins the table (the latest version with the session's consistency, or the version asked
for) and builds the search plan once, which validates the column, the filter and the
options and gives the result's schema. The search itself runs when the query runs: when
DataFusion asks for partitions (``get_fragments``), the plan is built again for the
columns the query reads (plus those of a ``WHERE`` DataFusion pushed, applied to the
``k`` rows found: SQL filters the function's result, the ``filter`` option filters
before the top-k), and that plan is what ``EXPLAIN`` prints beneath DataFusion's line.

A query naming a system column (``_rowid``, ``_rowaddr``, the row versions, the LSM
view's ``_gen`` / ``_region``) gets them on the rows found too, as a scan of the table
gives them (a plain table is the search's one base source: ``_gen`` -1, no region); its
wildcards hide them, as over a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import Expr, parse_predicate
from lance_sql.memwal.read.nodes import DISTANCE, GEN, REGION
from lance_sql.memwal.read.planner import LsmPlan
from lance_sql.memwal.read.search import MAX_K, METRICS
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.lsm_provider import LsmUnit
from lance_sql.sql.provider import PlannedDataset
from lance_sql.sql.pyarrow_filter import decode, referenced_columns, rows_filter
from lance_sql.sql.streams import ScanScope

OPTIONS = ("metric", "version", "filter", "exact")
USAGE = ("nearest() takes a table name, a column name, a query vector, k, an optional "
         "metric ('l2', 'cosine' or 'dot'), an optional version (a number, tag or "
         "timestamp) and, last, an optional struct of options {'filter': '<SQL "
         "condition>', 'exact': true, 'metric': ..., 'version': ...}")


@dataclass(frozen=True)
class NearestCall:
    """One call's arguments, checked."""

    table: str
    column: str
    vector: list[float]
    k: int
    metric: str = "l2"
    version: int | str | None = None
    filter: str | None = None  # a SQL condition applied before the top-k
    exact: bool = False  # stale candidates checked against real keys, not bloom filters

    @classmethod
    def parse(cls, values: list[Any]) -> NearestCall:
        """The call of the literal argument ``values``: four positional ones, an optional
        metric and version, and last an optional options struct (a Python dict)."""
        values = list(values)
        options: dict[str, Any] = {}
        if len(values) > 4 and isinstance(values[-1], dict):
            options = dict(values.pop())
        if len(values) not in (4, 5, 6):
            raise InvalidInputError(USAGE)
        if any(isinstance(v, dict | list) for v in values[4:]):
            raise InvalidInputError(f"nearest(): options go last, as one struct literal "
                                    f"{{'name': value, ...}}; {USAGE}")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InvalidInputError(f"nearest(): unknown options {unknown}; known: "
                                    f"{', '.join(OPTIONS)}")
        positional = dict(zip(("metric", "version"), values[4:], strict=False))
        twice = sorted(set(positional) & {n for n, v in options.items() if v is not None})
        if twice:
            raise InvalidInputError(f"nearest(): {', '.join(twice)} given twice (as an "
                                    "argument and as an option)")
        given = {**positional, **{n: v for n, v in options.items() if v is not None}}
        name, column, vector, k = values[:4]
        if not isinstance(name, str) or not isinstance(column, str):
            raise InvalidInputError("nearest(): the table and column are names (strings)")
        if not isinstance(vector, list) or not vector or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
            raise InvalidInputError(
                f"nearest(): the query vector is a list of numbers, got {vector!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= MAX_K:
            raise InvalidInputError(f"nearest(): k is an integer in 1..{MAX_K}, got {k!r}")
        metric = given.get("metric", "l2")
        if metric not in METRICS:
            raise InvalidInputError(f"nearest(): metric is one of {METRICS}, got {metric!r}")
        version = given.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(
                version, int | str) or (isinstance(version, int) and version < 0)
                or version == ""):
            raise InvalidInputError("nearest(): the version is a version number, a tag or "
                                    f"a timestamp, got {version!r}")
        condition = given.get("filter")
        if condition is not None and not isinstance(condition, str):
            raise InvalidInputError("nearest(): the filter is a SQL condition in a string, "
                                    f"got {condition!r}")
        exact = given.get("exact", False)
        if not isinstance(exact, bool):
            raise InvalidInputError(f"nearest(): exact is true or false, got {exact!r}")
        return cls(name, column, [float(x) for x in vector], k, metric, version,
                   condition if condition and condition.strip() else None, exact)

    def predicate(self) -> Expr | None:
        """The filter parsed (a syntax error is the caller's: InvalidInputError)."""
        if self.filter is None:
            return None
        try:
            return parse_predicate(self.filter, sql_quotes=True)
        except InvalidInputError as exc:
            raise InvalidInputError(f"nearest(): the filter {self.filter!r}: {exc}") from exc


def _system_field(name: str) -> pa.Field:
    """The field of system column ``name`` on the rows found (as a scan types it)."""
    if name == GEN:
        return pa.field(GEN, pa.int64())
    if name == REGION:
        return pa.field(REGION, pa.string())
    return pa.field(name, pa.uint64())


# builds the search plan for the given output columns (None: every column of the table)
Search = Callable[[list[str] | None], LsmPlan]


@dataclass
class PushedSearch:
    """What DataFusion asked of the search at planning, and the plan that runs."""

    columns: list[str] | None = None
    filter: str | None = None  # a WHERE DataFusion pushed: applied to the k rows found
    plan: LsmPlan | None = None


class NearestDataset(PlannedDataset):
    """One ``nearest(...)`` call: the ``k`` rows its search returns, searched when the
    query runs (one partition)."""

    def __init__(self, call: NearestCall, search: Search, data_schema: pa.Schema,
                 label: str, errors: ErrorRegistry, *, query_id: str | None = None,
                 system_columns: tuple[str, ...] = ()) -> None:
        """``search`` builds the plan; ``data_schema``: the table's columns (those a
        filter may name besides system columns); ``label`` names the table searched;
        ``system_columns``: those the rows carry after the table's (see the module)."""
        self.call = call
        self.label = label
        self.sequence = 0  # the query's calls are numbered in the order they are planned
        self._search = search
        self._data_schema = data_schema
        plan = self._plan(None)  # checks everything the search needs, gives the schema
        schema = plan.root.schema
        extra = [n for n in system_columns if n not in schema.names]
        if extra:
            schema = pa.schema([*schema, *(_system_field(n) for n in extra)])
        self._start(call.table, schema, PushedSearch(plan=plan), errors,
                    query_id=query_id, system_columns=bool(extra))

    def _plan(self, columns: list[str] | None) -> LsmPlan:
        try:
            return self._search(columns)
        except NotFoundError as exc:
            if self.call.filter is None or self.call.column not in self._data_schema.names:
                raise
            # the vector column and the output columns exist: the filter named one that
            # does not
            raise InvalidInputError(f"nearest(): the filter {self.call.filter!r}: "
                                    f"{exc}") from exc

    def _units(self, filter: pc.Expression | None, scope: ScanScope) -> list[LsmUnit]:
        wanted = self.pushed.columns if self.pushed.columns is not None \
            else list(self._schema.names)
        needed = set(wanted) | (referenced_columns(filter) if filter is not None else set())
        columns = [n for n in self._schema.names if n in needed and n != DISTANCE]
        plan = self._plan(columns)
        self.pushed.plan = plan
        residual = None if filter is None else rows_filter(filter, decode(filter),
                                                           self._schema)
        return [LsmUnit(self, plan, [*columns, DISTANCE], residual, scope)]

    def describe(self) -> str:
        """The EXPLAIN line of the call (its plan's lines go beneath it)."""
        call = self.call
        projection = ", ".join(self.pushed.columns) if self.pushed.columns is not None \
            else "*"
        return (f"NearestExec: {self.label}, column={call.column}, k={call.k}, "
                f"metric={call.metric}, exact={str(call.exact).lower()}, "
                f"filter=[{call.filter or ''}], projection=[{projection}]"
                + (f", filter on the result=[{self.pushed.filter}]"
                   if self.pushed.filter else ""))
