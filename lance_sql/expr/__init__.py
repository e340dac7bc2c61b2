"""lance_sql.expr: filter expressions with no engine attached.

Filters arrive as SQL predicate strings (``ds.to_table(filter="x > 5")``) or from DataFusion
and Spark plans; all of them become the small frozen tree of :mod:`.model`. From there
:mod:`.parser` goes to and from SQL text, :mod:`.arrow` types the tree against a schema and
evaluates it with pyarrow, and :mod:`.bounds` finds the ranges a filter confines a column to.
The table, SQL and Spark layers all use this one package.
"""

from lance_sql.expr.arrow import (
    columns,
    exact_literal,
    filter_rows,
    filter_serially,
    fold_equalities,
    resolve,
    resolve_column,
    to_pyarrow,
    value_expression,
    value_nullable,
)
from lance_sql.expr.bounds import intersect_ranges, rowaddr_bounds
from lance_sql.expr.model import (
    ARITHMETIC,
    COMPARISONS,
    FUNCTIONS,
    OPS,
    Call,
    Column,
    Expr,
    Literal,
    col,
    lit,
    literal_type,
)
from lance_sql.expr.parser import describe_sql, parse_predicate, to_sql

__all__ = [
    "ARITHMETIC", "COMPARISONS", "FUNCTIONS", "OPS", "Call", "Column", "Expr", "Literal",
    "col", "columns", "describe_sql", "exact_literal", "filter_rows", "filter_serially",
    "fold_equalities", "intersect_ranges", "lit", "literal_type", "parse_predicate",
    "resolve", "resolve_column", "rowaddr_bounds", "to_pyarrow", "to_sql", "value_expression",
    "value_nullable",
]
