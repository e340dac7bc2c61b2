"""Queries over the change feed: which columns, which filter, and what prunes early.

A filter's conjuncts that read only the metadata columns (``_change_type``,
``_commit_version``, ``_commit_timestamp``, ``_rowid``) are applied to the planned
change rows before any data file is read; simple ones run on numpy, the rest through
pyarrow. The whole filter is applied after reading unless the metadata part was all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.expr import columns as expr_columns
from lance_sql.expr import filter_serially, parse_predicate, resolve, rowaddr_bounds, to_pyarrow
from lance_sql.expr.model import Call, Column, Expr, Literal
from lance_sql.table.changes.net import check_mode
from lance_sql.table.changes.rows import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_VERSION,
    META_COLUMNS,
    META_SCHEMA,
    ROW_ID,
    ChangeRows,
)

if TYPE_CHECKING:
    from lance_sql.table.changes.feed import ChangeWindow

__all__ = ["ChangeQuery", "metadata_filter"]


def metadata_filter(expr: Expr) -> Expr | None:
    """The top-level conjuncts of ``expr`` that read metadata columns only (None: none).

    Rows these reject are rejected by ``expr`` too, so they can go before data is read.
    """
    parts = list(expr.args) if isinstance(expr, Call) and expr.op == "and" else [expr]
    out = []
    for part in parts:
        if isinstance(part, Call) and part.op == "and":
            nested = metadata_filter(part)
            if nested is not None:
                out.append(nested)
            continue
        names = {path[0] for path in expr_columns(part)}
        if names and names <= set(META_COLUMNS) and not _has_unknown(part):
            out.append(part)
    if not out:
        return None
    return out[0] if len(out) == 1 else Call("and", tuple(out))


def _has_unknown(expr: Expr) -> bool:
    return isinstance(expr, Call) and (expr.op == "unknown" or any(map(_has_unknown, expr.args)))


@dataclass(frozen=True)
class ChangeQuery:
    """What to return: output columns, the exact filter, and what prunes before reading."""

    output: tuple[str, ...]
    filter: pc.Expression | None = None
    filter_columns: frozenset[str] = frozenset()
    prefilter: pc.Expression | None = None
    version_ranges: tuple[tuple[int, int], ...] | None = None
    # The prefilter is the whole filter: rows it keeps need no second look.
    prefilter_is_whole: bool = False
    prefilter_columns: tuple[str, ...] = META_COLUMNS  # the metadata columns it reads
    prefilter_tree: Expr | None = None  # the same, as a tree (simple ones run on numpy)
    # Net changes (one per row for the whole window, :mod:`.net`): the filter then
    # applies to the net rows, so it never narrows the versions planned.
    net: bool = False

    @classmethod
    def build(cls, schema: pa.Schema, columns: Sequence[str] | None = None,
              filter: str | Expr | None = None,
              exact: pc.Expression | None = None, mode: str = "all") -> ChangeQuery:
        """From a SQL filter string or a filter tree; ``exact`` overrides the tree's
        translation as the filter applied to rows (DataFusion's pushed expression);
        ``mode`` "all" (every change) or "net" (one per row, :mod:`.net`)."""
        net = check_mode(mode)
        if isinstance(columns, str):
            raise InvalidInputError("columns must be a list of column names")
        # a column named twice is returned once, as ``to_table`` returns it
        names = list(schema.names) if columns is None else list(dict.fromkeys(columns))
        for name in names:
            if name not in schema.names:
                raise NotFoundError(f"column {name!r} does not exist; columns: "
                                    f"{', '.join(schema.names)}")
        if isinstance(filter, str):
            filter = parse_predicate(filter) if filter.strip() else None
        if filter is None:
            return cls(tuple(names), exact, net=net)
        tree = filter
        exact_given = exact
        if exact is None:
            tree = resolve(tree, schema)
            exact = to_pyarrow(tree, schema)
        meta = metadata_filter(tree)
        prefilter = None
        if meta is not None:
            try:
                prefilter = to_pyarrow(meta, META_SCHEMA)
            except (InvalidInputError, NotFoundError):
                prefilter = None  # not ours to judge; the exact filter still applies
        ranges = rowaddr_bounds(tree, COMMIT_VERSION)
        used = frozenset(path[0] for path in expr_columns(tree))
        return cls(tuple(names), exact, used, prefilter,
                   None if ranges is None else tuple(ranges),
                   prefilter is not None and meta == tree and exact_given is None,
                   tuple(n for n in META_COLUMNS if meta is not None
                         and n in {path[0] for path in expr_columns(meta)}),
                   meta if prefilter is not None else None, net)

    @property
    def read_columns(self) -> tuple[str, ...]:
        extra = sorted(self.filter_columns - set(self.output))
        return self.output + tuple(extra)

    def versions(self, window: ChangeWindow) -> list[int]:
        """The window's versions the filter can match."""
        every = list(range(window.start, window.end + 1))
        if self.version_ranges is None or self.net:
            return every
        return [v for v in every if any(lo <= v < hi for lo, hi in self.version_ranges)]

    def prune(self, rows: ChangeRows, timestamps: Mapping[int, int]) -> ChangeRows:
        """``rows`` the metadata part of the filter keeps."""
        if self.prefilter is None or not len(rows):
            return rows
        mask = None if self.prefilter_tree is None else _metadata_mask(self.prefilter_tree, rows)
        if mask is not None:  # (all kept: the rows as they are, whose read plan is cached)
            return rows if mask.all() else rows.take(np.flatnonzero(mask))
        positions = pa.array(np.arange(len(rows), dtype=np.int64))
        try:
            table = rows.metadata(timestamps, self.prefilter_columns, encoded=True)
            kept = filter_serially(table.append_column("_pos", positions), self.prefilter)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            # an operation without a dictionary kernel: filter the plain strings
            table = rows.metadata(timestamps, self.prefilter_columns)
            kept = filter_serially(table.append_column("_pos", positions), self.prefilter)
        kept = kept.column("_pos").to_numpy()
        return rows if kept.size == len(rows) else rows.take(kept)


_NUMPY_COMPARE = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
                  ">": np.greater, ">=": np.greater_equal}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _metadata_mask(expr: Expr, rows: ChangeRows) -> np.ndarray | None:
    """``expr`` evaluated on the change rows with numpy, or None if it is not simple.

    Simple: AND / OR / NOT of comparisons and IN lists between ``_change_type`` (equality
    only), ``_commit_version`` or ``_rowid`` and integer / string literals. Metadata
    columns are never NULL, so two-valued logic is exact here.
    """
    if not isinstance(expr, Call):
        return None
    if expr.op in ("and", "or"):
        masks = [m for m in (_metadata_mask(arg, rows) for arg in expr.args) if m is not None]
        if len(masks) < len(expr.args):
            return None
        combine = np.logical_and if expr.op == "and" else np.logical_or
        return combine.reduce(masks)
    if expr.op == "not" and len(expr.args) == 1:
        inner = _metadata_mask(expr.args[0], rows)
        return None if inner is None else ~inner
    if expr.op == "in" and expr.args and isinstance(expr.args[0], Column):
        values = [v for v in expr.args[1:] if isinstance(v, Literal)]
        if len(values) < len(expr.args) - 1:
            return None
        column = expr.args[0]
        masks = [m for m in (_compare("=", column, v, rows) for v in values) if m is not None]
        if len(masks) < len(values):
            return None
        return np.logical_or.reduce(masks) if masks else np.zeros(len(rows), bool)
    if expr.op in _NUMPY_COMPARE and len(expr.args) == 2:
        left, right = expr.args
        if isinstance(left, Literal) and isinstance(right, Column):
            return _compare(_FLIPPED[expr.op], right, left, rows)
        if isinstance(left, Column) and isinstance(right, Literal):
            return _compare(expr.op, left, right, rows)
    return None


def _compare(op: str, column: Column, literal: Literal, rows: ChangeRows) -> np.ndarray | None:
    name, value = column.path, literal.value
    if name == (CHANGE_TYPE,) and isinstance(value, str) and op in ("=", "!="):
        code = CHANGE_TYPES.index(value) if value in CHANGE_TYPES else -1
        return _NUMPY_COMPARE[op](rows.kind, code)
    if name in ((COMMIT_VERSION,), (ROW_ID,)) and isinstance(value, int) \
            and not isinstance(value, bool) and 0 <= value < 1 << 64:
        values = rows.version if name == (COMMIT_VERSION,) else rows.row_id
        return _NUMPY_COMPARE[op](values, np.uint64(value))
    return None
