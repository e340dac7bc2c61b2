"""Top-k search on a plain Lance table: the LSM search plan with one source.

A table without a MemWAL has nothing newer to mask rows with, so the spec's search plan
reduces to one exact ``KNNExec`` over the table, then the global sort and limit. SQL's
``nearest()`` and ``MemWalDataset.nearest`` use it for such tables. The table is that
plan's lone base source, so ``_gen`` (-1) and ``_region`` (NULL) may be asked for as on an
LSM view: a query naming them reads the same whether or not the table has a MemWAL.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import Expr, resolve
from lance_sql.expr import columns as expr_columns
from lance_sql.memwal.read.filter_input import parse_filter
from lance_sql.memwal.read.nodes import (
    DISTANCE,
    GEN,
    REGION,
    GlobalLimitExec,
    ProjectionExec,
    SortExec,
)
from lance_sql.memwal.read.planner import LsmPlan
from lance_sql.memwal.read.search import (
    KNNExec,
    check_filter,
    check_search_columns,
    query_vector,
)
from lance_sql.memwal.read.sources import BaseSource
from lance_sql.table.dataset import LanceDataset
from lance_sql.table.files.reader import SYSTEM_COLUMNS


def table_knn_plan(ds: LanceDataset, column: str, query: Sequence[float] | np.ndarray, k: int,
                   *, metric: str = "l2", columns: Sequence[str] | None = None,
                   filter: str | Expr | None = None) -> LsmPlan:
    """The ``k`` rows of ``ds`` nearest to ``query`` in ``column`` where ``filter`` holds,
    with ``_distance`` (exact distances, vectorised, streaming over the table)."""
    schema = ds.manifest.schema.to_scan_arrow()
    check_search_columns(schema, column, ds.uri)
    # the table's columns and the system columns a scan makes when named
    system = [pa.field(n, pa.uint64()) for n in SYSTEM_COLUMNS]
    system += [pa.field(GEN, pa.int64()), pa.field(REGION, pa.string())]
    full = pa.schema([*schema, *(f for f in system if f.name not in schema.names)])
    if isinstance(columns, str):
        raise InvalidInputError("columns must be a list of column names")
    output = list(schema.names if columns is None else columns)
    known = set(full.names)
    missing = [c for c in output if c not in known]
    if missing:
        raise InvalidInputError(f"{ds.uri} has no columns {missing}")
    predicate = parse_filter(filter)
    named: list[str] = []
    if predicate is not None:
        try:
            predicate = resolve(predicate, full)
        except NotFoundError as exc:  # (as a filter's type errors: the call's arguments)
            raise InvalidInputError(f"the filter names no column of {ds.uri}: {exc}") from exc
        check_filter(predicate, full)
        named = [path[0] for path in expr_columns(predicate) if path[0] in SYSTEM_COLUMNS]
    wanted = list(dict.fromkeys([*output, column, *named]))
    # float32 distances, as pylance 14's nearest search and the LSM search give them
    scan_schema = pa.schema([full.field(n) for n in wanted] + [pa.field(DISTANCE, pa.float32())])
    source = BaseSource(ds, [])
    node = KNNExec(source, scan_schema, column, query_vector(query), k, metric,
                   predicate)
    root = ProjectionExec(GlobalLimitExec(SortExec(node, DISTANCE), k), [*output, DISTANCE])
    return LsmPlan(root, [f"TableSearch: {ds.uri} v{ds.version} (no MemWAL: one source)"],
                   sources=[source])
