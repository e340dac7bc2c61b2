"""Rows of many fragments taken column by column (a lookup of many keys).

A take of 1000 row addresses spread over 10 fragments reads each fragment on its own
(:func:`~lance_sql.table.read.scan.scan_rows`): per fragment a reader, a table, its
casts, and per column its pages taken one by one. Here each data column is taken from
every fragment at once (:func:`~lance_sql.format.datafile.point_pages.take_pages`) and
the row addresses made for all fragments together, into one table. When a column or a
page does not allow that, None: the caller goes fragment by fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, LanceError
from lance_sql.format.datafile import point_pages
from lance_sql.format.datafile.reader import UNEXPECTED
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.reader import ROW_ADDR, ROW_ID, FragmentReader

if TYPE_CHECKING:
    from lance_sql.table.read.scan import ScanPlan

__all__ = ["MIN_ROWS", "take_rows"]

T = TypeVar("T")
# Logical types of strings and binary, whose chunks are the ones compressed by default.
_VARIABLE = frozenset({"string", "large_string", "binary", "large_binary"})

# Takes of fewer rows go fragment by fragment (few pages each: little to share). Measured
# (bench_lsm 10M rows, lookups of n keys, same process A/B, CPU medians of 41 rounds):
# fragment by fragment is cheaper for 2 rows (3.7 vs 4.3 ms), even at 5, and dearer
# from 6 on (8 rows 7.6 vs 6.0 ms, 32 rows 17.9 vs 9.5, 63 rows 20.6 vs 10.7).
MIN_ROWS = 5


def take_rows(store: ObjectStore, manifest: Manifest, plan: ScanPlan,
              groups: Sequence[tuple[Fragment, np.ndarray]],
              readers: Sequence[FragmentReader] | None = None) -> pa.Table | None:
    """The plan's output for ``rows`` (live, sorted physical offsets) of each fragment of
    ``groups``, fragment after fragment, as one table; None when this path does not
    apply (a filter, system columns other than row addresses, repeated rows, a column
    some fragment lacks or holds in a shape :mod:`point_pages` does not take).
    ``readers``: each group's fragment reader, when the caller keeps them (one per group,
    in order; a kept reader has found its files and checked its rows already)."""
    system = plan.system_names
    stable = manifest.uses_stable_row_ids
    if plan.filter is not None or not plan.output_fields or any(
            n != ROW_ADDR and (n != ROW_ID or stable) for n in system):
        return None  # (no output columns: rows without columns, made fragment by fragment)
    if readers is None or len(readers) != len(groups):
        readers = [FragmentReader(store, manifest, f) for f, _ in groups]
    kept = [i for i, (_, r) in enumerate(groups) if r.size]
    groups, readers = [groups[i] for i in kept], [readers[i] for i in kept]
    if not groups or any(r.size > 1 and not bool((r[1:] > r[:-1]).all()) for _, r in groups):
        return None
    fields = plan.read_fields
    # strings first: their LZ4 chunks inflate (on a helper thread, when one may be
    # used) while the other columns are taken, then the strings are finished
    order = sorted(range(len(fields)), key=lambda i: fields[i].logical_type not in _VARIABLE)
    columns = [reader.point_columns(fields) for reader in readers]  # each file opened once
    begun: dict[int, point_pages.Taking] = {}
    files = point_pages.MappedFiles()  # (each file viewed once for every column)
    arrays: list[pa.Array | None] = [None] * len(fields)
    try:
        for i in order:
            parts = []
            for held, (_, rows) in zip(columns, groups, strict=True):
                column = held[i]
                if column is None:
                    return None
                parts.append((column, rows))
            taking = _guarded(store, fields[i].name, point_pages.begin_pages, parts, files)
            if taking is None:
                return None
            begun[i] = taking
        for i in order:
            got = _guarded(store, fields[i].name, begun[i].finish)
            if got is None:
                return None
            arrays[i] = got
    finally:
        for taking in begun.values():
            taking.close()
    names = [f.name for f in fields]
    if system:
        addresses = pa.array(np.concatenate(
            [rows.astype(np.uint64) | (np.uint64(f.id) << np.uint64(32)) for f, rows in groups]))
        arrays.extend([addresses] * len(system))
        names.extend(system)
    table = pa.Table.from_arrays(arrays, names=names).select(
        list(plan.output_fields))
    schema = plan.output_schema
    for column, field in zip(table.columns, schema, strict=True):
        if not column.type.equals(field.type) or (not field.nullable and column.null_count):
            return None  # casts, or the error naming the fragment: fragment by fragment
    return pa.Table.from_arrays(table.columns, schema=schema)


def _guarded(store: ObjectStore, name: str, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` with an unexpected decoder error made a FormatError naming the
    column (a safety net: the decoders raise FormatError)."""
    try:
        return fn(*args)
    except LanceError:
        raise
    except UNEXPECTED as exc:
        raise FormatError(f"{store.uri}: column {name!r}: corrupt data: {exc}") from exc
