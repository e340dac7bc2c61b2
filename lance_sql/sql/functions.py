"""Table functions: ``table_versions('t')`` (history), ``table_changes('t', start, end)``
(the change data feed, :mod:`lance_sql.sql.changes_provider`) and
``nearest('t', 'column', [query vector], k[, metric[, version]][, {options}])`` (top-k
over a MemWAL table's LSM view, exact distances, ``_distance``; ``version`` a number, tag
or timestamp reads the table as ``VERSION AS OF`` does, as does a versioned name
``'t@3'``; the options struct adds ``filter`` and ``exact``: see
:mod:`lance_sql.sql.nearest_provider`).

DataFusion calls a table function during planning with constant-folded literal
arguments. It must not call back into the session (DataFusion panics on
re-entrancy): ``table_versions`` is built with pyarrow and returned as an in-memory
dataset; the change feed and the search return datasets that read when the query runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
from datafusion.catalog import Table

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.memwal.index import load as load_mem_wal_index
from lance_sql.memwal.read.flat_search import table_knn_plan
from lance_sql.memwal.read.planner import LsmPlan, LsmView
from lance_sql.sql.catalog import TableName, VersionResolver
from lance_sql.sql.changes_provider import ChangesDataset
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.nearest_provider import NearestCall, NearestDataset
from lance_sql.table import (
    check_mode,
    commit_time,
    dataset,
    list_versions,
    operation_of,
    read_tags,
    resolve_window,
)

VERSIONS_SCHEMA = pa.schema(
    [
        pa.field("version", pa.uint64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("operation", pa.string()),
        pa.field("rows", pa.uint64(), nullable=False),
        pa.field("rows_added", pa.uint64(), nullable=False),
        pa.field("rows_removed", pa.uint64(), nullable=False),
        pa.field("tag", pa.string()),
    ]
)


def argument_values(args: tuple[Any, ...], function: str) -> list[Any]:
    """Python values of a table function's literal arguments."""
    values = []
    for arg in args:
        try:
            values.append(arg.python_value().as_py())
        except Exception:  # noqa: BLE001 - a column or expression instead of a literal
            raise InvalidInputError(
                f"{function}() takes literal arguments, got {arg}"
            ) from None
    return values


def table_versions(resolver: VersionResolver, table: str) -> pa.Table:
    """One row per version: when, what operation, and how many rows came and went."""
    store = resolver.store(table)
    refs = list_versions(store)
    if not refs:
        raise NotFoundError(f"no Lance table {table!r} at {store.uri}")
    tags: dict[int, list[str]] = {}
    for name, info in read_tags(store).items():
        tags.setdefault(info["version"], []).append(name)
    rows: list[dict[str, Any]] = []
    previous = None
    for ref in refs:
        manifest = resolver.manifest(table, ref.version)
        old_ids: set[int] = set() if previous is None else {f.id for f in previous.fragments}
        added = sum(f.num_rows for f in manifest.fragments if f.id not in old_ids)
        before = 0 if previous is None else previous.num_rows
        removed = max(0, before - (manifest.num_rows - added))
        rows.append(
            {
                "version": ref.version,
                "timestamp": commit_time(manifest.timestamp_ns),
                "operation": operation_of(store, ref),
                "rows": manifest.num_rows,
                "rows_added": added,
                "rows_removed": removed,
                "tag": ",".join(sorted(tags.get(ref.version, []))) or None,
            }
        )
        previous = manifest
    return pa.Table.from_pylist(rows, schema=VERSIONS_SCHEMA)


def make_table_versions(resolver: VersionResolver,
                        errors: ErrorRegistry) -> Callable[..., Table]:
    """The ``table_versions`` callable DataFusion registers; errors travel typed."""

    def table_versions_udtf(*args: Any) -> Table:
        try:
            values = argument_values(args, "table_versions")
            if len(values) != 1 or not isinstance(values[0], str):
                raise InvalidInputError("table_versions() takes one argument: the table name")
            return Table(pds.dataset(table_versions(resolver, values[0])))
        except Exception as exc:  # carried through DataFusion
            raise errors.wrap(exc) from exc

    return table_versions_udtf


def make_table_changes(resolver: VersionResolver, errors: ErrorRegistry,
                       planned: Callable[[ChangesDataset], None] | None = None
                       ) -> Callable[..., Table]:
    """The ``table_changes('t', start[, end[, mode]])`` callable: versions or timestamps,
    inclusive; mode 'all' (default) or 'net' (one change per row for the window).
    ``planned`` is told of each feed, for EXPLAIN."""

    def table_changes_udtf(*args: Any) -> Table:
        try:
            values = argument_values(args, "table_changes")
            if len(values) not in (2, 3, 4) or not isinstance(values[0], str):
                raise InvalidInputError(
                    "table_changes() takes a table name, a start, an optional end "
                    "(versions or timestamps) and an optional mode ('all' or 'net')")
            name = values[0]
            end = values[2] if len(values) >= 3 else None
            mode = values[3] if len(values) == 4 else "all"
            check_mode(mode)
            window = resolve_window(resolver.store(name), values[1], end,
                                    manifest_of=lambda v: resolver.manifest(name, v))
            found = ChangesDataset(name, window, errors, mode)
            if planned is not None:
                planned(found)
            return Table(found)
        except Exception as exc:  # carried through DataFusion
            raise errors.wrap(exc) from exc

    return table_changes_udtf


def make_nearest(resolver: VersionResolver, errors: ErrorRegistry, consistency: str,
                 planned: Callable[[NearestDataset], None] | None = None,
                 system_columns: Callable[[], tuple[str, ...]] = tuple
                 ) -> Callable[..., Table]:
    """The ``nearest('t', 'column', [vector], k[, metric[, version]][, {options}])``
    callable: the ``k`` rows of the LSM view nearest to the vector, with ``_distance``;
    options ``filter`` (applied before the top-k), ``exact``, ``metric``, ``version``.
    The latest version reads with the session's consistency; an older one (``version``,
    or a name ``'t@v'``) is base version v plus the generations its MemWAL index lists
    as unmerged, as ``VERSION AS OF`` reads it. A session of consistency "base" searches
    the base table alone, as its queries read it. The search runs with the query
    (:class:`NearestDataset`); ``planned`` is told of each one, for EXPLAIN.
    ``system_columns`` gives the system columns the query being planned shows (its
    wildcards hide them): the rows found carry them as a scan of the table would."""

    def nearest_udtf(*args: Any) -> Table:
        try:
            call = NearestCall.parse(argument_values(args, "nearest"))
            found = nearest_dataset(resolver, errors, consistency, call, system_columns())
            if planned is not None:
                planned(found)
            return Table(found)
        except Exception as exc:  # carried through DataFusion
            raise errors.wrap(exc) from exc

    return nearest_udtf


def nearest_dataset(resolver: VersionResolver, errors: ErrorRegistry, consistency: str,
                    call: NearestCall, system_columns: tuple[str, ...] = ()
                    ) -> NearestDataset:
    """The table ``call`` searches, pinned, with the search planned (not run); its rows
    carry ``system_columns`` besides the table's columns and ``_distance``."""
    parsed = TableName.parse(call.table)
    if call.version is not None:
        if parsed.spec is not None:
            raise InvalidInputError(
                f"nearest(): {call.table!r} names a version; do not give one again")
        parsed = TableName.parse(f"{parsed.table}@{call.version}")
    uri = resolver.directory.uri(parsed.table)
    if parsed.spec is None:
        base = dataset(uri)
        mode = "snapshot" if consistency == "snapshot" else "strong"
    else:  # time travel: that version's own MemWAL index snapshot
        base = dataset(uri, resolver.version_of(parsed.table, parsed.spec))
        mode = "snapshot"
    predicate = call.predicate()
    vector = np.asarray(call.vector, np.float64)
    search: Callable[[list[str] | None], LsmPlan]
    if consistency == "base" or load_mem_wal_index(base) is None:
        # a plain table, or a session reading MemWAL tables' base tables alone: one
        # source, nothing stale (exact changes nothing)
        search = functools.partial(table_knn_plan, base, call.column, vector, call.k,
                                   metric=call.metric, filter=predicate)
        schema = base.manifest.schema.to_scan_arrow()
        label = f"{parsed.table}[v={base.version}]"
    else:
        view = LsmView(base, consistency=mode)
        search = functools.partial(view.knn_plan, call.column, vector, call.k,
                                   metric=call.metric, filter=predicate, exact=call.exact)
        schema = view.arrow_schema
        label = f"{parsed.table}[v={base.version}, lsm {mode}]"
    return NearestDataset(call, lambda columns: search(columns=columns), schema, label,
                          errors, system_columns=system_columns)
