"""The filter an LSM read is given, as a tree: SQL text, a pyarrow expression (as a base
table's scanner takes one) or a tree already."""

from __future__ import annotations

import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError
from lance_sql.expr.arrow import Expr, parse_predicate
from lance_sql.table.read.arrow_filters import decode, known

__all__ = ["parse_filter"]


def parse_filter(filter: str | Expr | pc.Expression | None) -> Expr | None:
    """``filter`` as a tree: SQL text parsed, a pyarrow expression (as a base table's
    scanner takes it) read as its tree (:mod:`lance_sql.table.read.arrow_filters`)."""
    if filter is None:
        return None
    if isinstance(filter, str):
        return parse_predicate(filter) if filter.strip() else None
    if isinstance(filter, pc.Expression):
        tree = decode(filter)
        if tree is None or not known(tree):
            raise InvalidInputError(
                f"an LSM read's filter must be SQL text or a pyarrow expression of "
                f"comparisons, AND / OR / NOT, IN and IS NULL; got {filter}: write it as "
                "SQL")
        return tree
    if not isinstance(filter, Expr):
        raise InvalidInputError(f"a filter is SQL text or a pyarrow expression, got "
                                f"{type(filter).__name__}")
    return filter
