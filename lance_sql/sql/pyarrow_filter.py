"""The ``pyarrow.compute.Expression`` DataFusion pushes to a scan: read as a tree
(:mod:`lance_sql.table.read.arrow_filters`, shared with the Python API's pyarrow filters)
and turned into what filters the scan's rows.

The decoded tree tells the scan which columns a filter reads and which fragments it can
skip. The original pyarrow expression is what filters rows (but for floats and negated
IN lists, see :func:`rows_filter`), so decoding only ever needs to be conservative."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import LanceError, QueryError
from lance_sql.expr import Call, Expr, to_pyarrow
from lance_sql.expr import columns as expr_columns
from lance_sql.table import decode, in_list, referenced_columns

__all__ = ["as_expression", "decode", "in_list", "referenced_columns", "rows_filter"]


def as_expression(pushed: object) -> pc.Expression | None:
    """A filter DataFusion pushed, as an expression (None: no filter).

    A filter that folded to a constant arrives as a pyarrow scalar, not an expression
    (``x IN (NULL)`` is NULL): it filters as that constant does, true keeping every row,
    false and NULL none.
    """
    if pushed is None or isinstance(pushed, pc.Expression):
        return pushed
    if isinstance(pushed, pa.Scalar):
        return None if pushed.as_py() is True else pc.scalar(False)
    raise QueryError(f"DataFusion pushed a filter lance_sql cannot read: {pushed!r}")


def rows_filter(filter: pc.Expression, tree: Expr | None, schema: pa.Schema
                ) -> pc.Expression:
    """What filters a scan's rows for the ``filter`` DataFusion pushed (``tree``: it
    decoded, None if it did not).

    DataFusion pushes filters as Exact and orders floats with NaN above every number and
    equal to itself, but the pyarrow form it pushes compares them as IEEE does (NaN
    matches nothing: ``v > 74.0`` would lose the NaN rows DataFusion keeps). A filter
    that reads a float column is therefore made again from its tree by lance_sql's own
    translator, which orders floats as DataFusion does; any other filter, or one the
    translator cannot take, filters as pushed.

    So is one with an IN list under anything but AND / OR: the pushed ``is_in`` answers
    FALSE for a NULL value, where SQL's IN answers NULL, and under a NOT that FALSE keeps
    the row (``NOT (x IN (1, 2, 3, 4) AND s <> 'z')`` kept the rows whose ``x`` is NULL).
    Under AND / OR alone, FALSE and NULL drop a row alike: those filter as pushed (a
    100,000-value IN is not made again for every partition).
    """
    if tree is None or not (_negated_in_list(tree) or _reads_floats(tree, schema)):
        return filter
    try:
        return to_pyarrow(tree, schema)
    except (LanceError, RecursionError):
        return filter


def _negated_in_list(tree: Expr) -> bool:
    """Whether an IN list lies under a node other than AND / OR (a NOT, IS [NOT] NULL,
    a comparison of its truth...), where its NULL and FALSE would differ."""
    stack = [(tree, False)]
    while stack:  # (DataFusion's OR chains nest deep: no recursion)
        node, inside = stack.pop()
        if isinstance(node, Call):
            if node.op == "in" and inside:
                return True
            below = inside or node.op not in ("and", "or")
            stack.extend((a, below) for a in node.args)
    return False


def _reads_floats(tree: Expr, schema: pa.Schema) -> bool:
    for path in expr_columns(tree):
        t: pa.DataType | None = None
        fields: Any = schema
        for name in path:
            index = fields.get_field_index(name) if fields is not None else -1
            if index < 0:
                t = None
                break
            t = fields.field(index).type
            fields = t if pa.types.is_struct(t) else None
        if t is not None and pa.types.is_floating(t):
            return True
    return False


