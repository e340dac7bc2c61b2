"""``ds.scanner(nearest={...})`` / ``ds.to_table(nearest=...)``: pylance's vector search
call on a table version, answered by the exact flat search (:mod:`.flat_search`).

As pylance's scanner does, it searches the table version itself (a table with a MemWAL:
its base table; the LSM view is ``ds.nearest`` / ``mw.nearest``). pylance's semantics:
``k`` defaults to 10; a filter applies after the search (``prefilter=True``: before, so
``k`` matching rows come back when there are that many); ``limit`` / ``offset`` slice the
nearest-first result; the columns asked for come with ``_distance`` (then ``_rowid`` /
``_rowaddr`` when asked). Index tuning keys (``nprobes``, ``refine_factor``...) are taken
and change nothing: the search is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr import Expr, describe_sql, filter_rows, resolve, to_pyarrow
from lance_sql.expr import columns as expr_columns
from lance_sql.memwal.read.filter_input import parse_filter
from lance_sql.memwal.read.flat_search import table_knn_plan
from lance_sql.memwal.read.nodes import DISTANCE
from lance_sql.memwal.read.search import METRICS
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID, SYSTEM_COLUMNS

__all__ = ["NearestQuery", "NearestScanner"]

# pylance's nearest keys that tune an index search: an exact search has nothing to tune
_TUNING = frozenset({"nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor",
                     "use_index", "ef", "distance_range", "lower_bound", "upper_bound"})
QUERY_INDEX = "query_index"  # which query of a matrix ``q`` a row answers (pylance's)
_METRIC_NAMES = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}


@dataclass(frozen=True)
class NearestQuery:
    """A ``nearest={...}`` argument, checked: the vector column, the queries, ``k`` and
    the metric (l2, cosine or dot). ``q`` is one vector, or a matrix of them (``many``):
    each row is searched alone and the results are tagged with a ``query_index``."""

    column: str
    queries: tuple[Any, ...]  # each checked by the search (a list of numbers)
    k: int
    metric: str
    many: bool = False

    @classmethod
    def of(cls, nearest: Mapping[str, Any]) -> NearestQuery:
        """From pylance's dict (``column``, ``q``, ``k``, ``metric`` and tuning keys)."""
        if not isinstance(nearest, Mapping):
            raise InvalidInputError(f"nearest is a dict such as {{'column': 'v', 'q': [...], "
                                    f"'k': 10}}, got {type(nearest).__name__}")
        unknown = sorted(set(nearest) - {"column", "q", "k", "metric"} - _TUNING)
        if unknown:
            raise InvalidInputError(f"nearest: unknown keys {unknown}")
        if "column" not in nearest or "q" not in nearest:
            raise InvalidInputError("nearest needs 'column' and 'q' (the query vector)")
        column = nearest["column"]
        if not isinstance(column, str):
            raise InvalidInputError(f"nearest: 'column' is a column name, got {column!r}")
        k = nearest.get("k")
        k = 10 if k is None else k
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise InvalidInputError(f"nearest: 'k' is a positive whole number, got {k!r}")
        metric = nearest.get("metric") or "l2"
        name = _METRIC_NAMES.get(str(metric).lower())
        if name is None:
            raise InvalidInputError(f"nearest: unknown metric {metric!r}; known: "
                                    f"{', '.join(METRICS)}")
        query = nearest["q"]
        if isinstance(query, pa.Scalar):
            query = query.as_py()
        elif isinstance(query, pa.Array | pa.ChunkedArray):
            query = query.to_pylist()
        rows = _matrix_rows(query)
        if rows is not None:
            return cls(column, rows, int(k), name, many=True)
        return cls(column, (query,), int(k), name)


def _matrix_rows(query: Any) -> tuple[Any, ...] | None:
    """The rows of ``query`` when it is a matrix of query vectors (a 2-D array, or a list
    of lists), else None."""
    if isinstance(query, np.ndarray):
        return tuple(query) if query.ndim == 2 and len(query) else None
    if isinstance(query, list | tuple) and query and all(
            isinstance(row, list | tuple | np.ndarray) for row in query):
        return tuple(query)
    return None


class NearestScanner:
    """The scanner ``ds.scanner(nearest=...)`` returns: the nearest rows of one table
    version, nearest first (ties in table order), as a table or batches."""

    def __init__(self, ds: LanceDataset, nearest: NearestQuery,
                 columns: Sequence[str] | None, filter: str | Expr | pc.Expression | None,
                 *, prefilter: bool = False, limit: int | None = None,
                 offset: int | None = None, with_row_id: bool = False,
                 with_row_address: bool = False, batch_size: int | None = None) -> None:
        if columns is not None and (isinstance(columns, str | Mapping)):
            raise InvalidInputError("columns is a list of names (the dataset's scanner "
                                    "computes expressions of them after the search)")
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise InvalidInputError(f"{name} must be a whole number >= 0, got {value!r}")
        self._ds = ds
        self._nearest = nearest
        schema = ds.schema
        names = list(schema.names if columns is None else columns)
        system = [n for n, on in ((ROW_ID, with_row_id), (ROW_ADDR, with_row_address)) if on]
        asked = list(dict.fromkeys(n for n in names if n not in system))
        # the distance after the columns asked for, unless they place it themselves
        self._output = [*asked, *([] if DISTANCE in asked else [DISTANCE]), *system]
        predicate = parse_filter(filter)
        self._post: Expr | None = None
        self._prefilter = predicate if prefilter else None
        read = [n for n in self._output if n != DISTANCE]
        if predicate is not None and not prefilter:
            # a filter after the search may read the distance too
            full = pa.schema([*schema, *(pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS),
                              pa.field(DISTANCE, pa.float32())])
            self._post = resolve(predicate, full)
            read += [path[0] for path in expr_columns(self._post)
                     if path[0] not in read and path[0] != DISTANCE]
        self._read = read
        self._limit, self._offset = limit, offset or 0
        self._batch_size = batch_size or 8192
        self._many = nearest.many
        self._plans = [table_knn_plan(ds, nearest.column, query, nearest.k,
                                      metric=nearest.metric, columns=read,
                                      filter=self._prefilter)
                       for query in nearest.queries]
        if self._many:
            self._output.insert(0, QUERY_INDEX)

    @property
    def projected_schema(self) -> pa.Schema:
        schema = self._plans[0].root.schema
        index = pa.schema([pa.field(QUERY_INDEX, pa.int32(), nullable=False)])
        return pa.schema([(index if n == QUERY_INDEX else schema).field(n)
                          for n in self._output])

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._ds.schema

    def _found(self, number: int) -> pa.Table:
        """Query ``number``'s rows, post-filtered (tagged with the query when several)."""
        found = self._plans[number].to_table()
        if self._post is not None:
            found = filter_rows(found, to_pyarrow(self._post, found.schema))
        if self._many:
            found = found.add_column(0, pa.field(QUERY_INDEX, pa.int32(), nullable=False),
                                     pa.array(np.full(found.num_rows, number, np.int32)))
        return found

    def to_table(self) -> pa.Table:
        tables = [self._found(number) for number in range(len(self._plans))]
        found = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        found = found.slice(self._offset, self._limit)
        return found.select(self._output)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self.to_table().to_batches(max_chunksize=self._batch_size))

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        return self.to_table().num_rows

    def explain_plan(self, verbose: bool = False) -> str:
        """The search plan (the flat search's nodes, one search per query; the filter
        after it when it is a post-filter)."""
        lines = [plan.explain() for plan in self._plans[:1]]
        if len(self._plans) > 1:
            lines.insert(0, f"MultiQuery: {len(self._plans)} searches like this one, "
                            f"tagged {QUERY_INDEX}")
        if self._post is not None:
            lines.insert(0, f"PostFilter: {describe_sql(self._post)}")
        return "\n".join(lines) + "\n"
