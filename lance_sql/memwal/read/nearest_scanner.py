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
_METRIC_NAMES = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}


@dataclass(frozen=True)
class NearestQuery:
    """A ``nearest={...}`` argument, checked: the vector column, the query, ``k`` and
    the metric (l2, cosine or dot)."""

    column: str
    query: Any  # checked by the search (a list of numbers)
    k: int
    metric: str

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
        return cls(column, query, int(k), name)


class NearestScanner:
    """The scanner ``ds.scanner(nearest=...)`` returns: the nearest rows of one table
    version, nearest first (ties in table order), as a table or batches."""

    def __init__(self, ds: LanceDataset, nearest: NearestQuery,
                 columns: Sequence[str] | None, filter: str | Expr | pc.Expression | None,
                 *, prefilter: bool = False, limit: int | None = None,
                 offset: int | None = None, with_row_id: bool = False,
                 with_row_address: bool = False, batch_size: int | None = None) -> None:
        if columns is not None and (isinstance(columns, str | Mapping)):
            raise InvalidInputError("a vector search takes columns as a list of names")
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise InvalidInputError(f"{name} must be a whole number >= 0, got {value!r}")
        self._ds = ds
        self._nearest = nearest
        schema = ds.schema
        names = list(schema.names if columns is None else columns)
        system = [n for n, on in ((ROW_ID, with_row_id), (ROW_ADDR, with_row_address)) if on]
        self._output = [*dict.fromkeys(n for n in names if n not in system), DISTANCE, *system]
        predicate = parse_filter(filter)
        self._post: Expr | None = None
        self._prefilter = predicate if prefilter else None
        read = [n for n in self._output if n != DISTANCE]
        if predicate is not None and not prefilter:
            full = pa.schema([*schema, *(pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS)])
            self._post = resolve(predicate, full)
            read += [path[0] for path in expr_columns(self._post) if path[0] not in read]
        self._read = read
        self._limit, self._offset = limit, offset or 0
        self._batch_size = batch_size or 8192
        self._plan = table_knn_plan(ds, nearest.column, nearest.query, nearest.k,
                                    metric=nearest.metric, columns=read,
                                    filter=self._prefilter)

    @property
    def projected_schema(self) -> pa.Schema:
        schema = self._plan.root.schema
        return pa.schema([schema.field(n) for n in self._output])

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._ds.schema

    def to_table(self) -> pa.Table:
        found = self._plan.to_table()
        if self._post is not None:
            found = filter_rows(found, to_pyarrow(self._post, found.schema))
        found = found.slice(self._offset, self._limit)
        return found.select(self._output)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self.to_table().to_batches(max_chunksize=self._batch_size))

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        return self.to_table().num_rows

    def explain_plan(self, verbose: bool = False) -> str:
        """The search plan (the flat search's nodes; the filter after it when it is a
        post-filter)."""
        lines = [self._plan.explain()]
        if self._post is not None:
            lines.insert(0, f"PostFilter: {describe_sql(self._post)}")
        return "\n".join(lines) + "\n"
