"""The general ``MERGE INTO``: DataFusion joins target and source, picks each row's
clause and computes its new values, all in one query on the version the write starts
from; the table layer commits the result as one Update
(:func:`lance_sql.table.ops.merge_insert.apply_row_changes`).

The query (target ``t``, source ``s``, clauses 0..n-1)::

    SELECT CASE WHEN <kind 0> AND (<condition 0>) THEN 0 WHEN ... END AS clause,
           t._rowaddr, <matched>, t.k...,
           CASE WHEN clause = j THEN (<value>) END ...   -- per clause j and column set
    FROM t <join> (SELECT *, TRUE AS present FROM <source>) AS s ON t.k = s.k ...
    WHERE clause IS NOT NULL [OR <matched>]

The join is as wide as the clauses need (FULL when rows the source lacks and rows
the target lacks are both taken). A value is computed only on its clause's rows, so
an expression failing elsewhere (``1 / s.x`` where another clause takes ``x = 0``)
does not fail the statement. Matched rows no clause takes are kept only to check
the cardinality rule: a target row matched by several source rows is an error when a
WHEN MATCHED clause updates or deletes (as pylance's merge_insert has it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.sql.merge import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, Merge
from lance_sql.sql.tokens import quote_identifier
from lance_sql.table import ROW_ADDR, RowChanges

_CLAUSE = "__lance_sql_merge_clause"
_TARGET_ROW = "__lance_sql_merge_target_row"
_MATCHED = "__lance_sql_merge_matched"
_PRESENT = "__lance_sql_merge_source_row"


@dataclass(frozen=True)
class MergeQuery:
    """The general MERGE's DataFusion query and how to read its rows."""
    sql: str
    # per clause: (action, ((target column, result column), ...)) for its values
    values: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    key_columns: tuple[str, ...]   # result columns holding the target's keys
    one_match: bool                # a matched row may change: one source row per target row


def merge_query(merge: Merge) -> MergeQuery:
    """The query evaluating ``merge``, whose assignments name target columns (``*``
    expanded)."""
    t = quote_identifier(merge.target_alias)
    s = quote_identifier(merge.source_alias)
    present = f"{s}.{quote_identifier(_PRESENT)}"
    target_row = f"{t}.{ROW_ADDR}"
    matched = f"({target_row} IS NOT NULL AND {present} IS NOT NULL)"
    kind_test = {MATCHED: matched, NOT_MATCHED: f"{target_row} IS NULL",
                 NOT_MATCHED_BY_SOURCE: f"{present} IS NULL"}
    whens = []
    for j, clause in enumerate(merge.clauses):
        test = kind_test[clause.kind]
        if clause.condition is not None:
            test = f"{test} AND ({clause.condition})"
        whens.append(f"WHEN {test} THEN {j}")
    choice = f"(CASE {' '.join(whens)} END)"
    one_match = any(c.kind == MATCHED and c.action in ("update", "delete")
                    for c in merge.clauses)
    columns = [f"{choice} AS {quote_identifier(_CLAUSE)}",
               f"{target_row} AS {quote_identifier(_TARGET_ROW)}"]
    key_columns = []
    if one_match:  # which rows matched, and their keys for the error message
        columns.append(f"{matched} AS {quote_identifier(_MATCHED)}")
        for i, (target_key, _) in enumerate(merge.keys):
            key_columns.append(f"__lance_sql_merge_key_{i}")
            columns.append(f"{t}.{quote_identifier(target_key)} AS "
                           f"{quote_identifier(key_columns[-1])}")
    values = []
    for j, clause in enumerate(merge.clauses):
        named = []
        for i, (column, expression) in enumerate(clause.assignments or ()):
            name = f"__lance_sql_merge_value_{j}_{i}"
            columns.append(f"CASE WHEN {choice} = {j} THEN ({expression}) END AS "
                           f"{quote_identifier(name)}")
            named.append((column, name))
        values.append((clause.action, tuple(named)))
    kinds = {c.kind for c in merge.clauses}
    join = {(True, True): "FULL JOIN", (True, False): "RIGHT JOIN",
            (False, True): "LEFT JOIN", (False, False): "JOIN"}[
        (NOT_MATCHED in kinds, NOT_MATCHED_BY_SOURCE in kinds)]
    on = " AND ".join(f"{t}.{quote_identifier(tk)} = {s}.{quote_identifier(sk)}"
                      for tk, sk in merge.keys)
    source = (f"(SELECT *, TRUE AS {quote_identifier(_PRESENT)} FROM "
              f"{merge.source_relation()}) AS {s}")
    where = f"{choice} IS NOT NULL" + (f" OR {matched}" if one_match else "")
    sql = (f"SELECT {', '.join(columns)} FROM {quote_identifier(merge.table)} AS {t} "
           f"{join} {source} ON {on} WHERE {where}")
    return MergeQuery(sql, tuple(values), tuple(key_columns), one_match)


def row_changes(query: MergeQuery, result: pa.Table,
                conform: Callable[[pa.Table], pa.Table]) -> RowChanges:
    """What the query's ``result`` does: rows deleted, updated and inserted per clause
    (their values passed through ``conform``, which types them as the table's
    columns). A target row matched by several source rows is an InvalidInputError
    when a WHEN MATCHED clause may update or delete it, whichever clauses the pairs
    take: the rule pylance's merge_insert applies (so both paths agree), stricter than
    PostgreSQL's, which objects only to a row actually changed twice. An insert-only
    MERGE leaves matched rows alone, as merge_insert does."""
    clause = np.asarray(result.column(_CLAUSE).fill_null(-1).to_numpy(zero_copy_only=False),
                        np.int64)
    addresses = result.column(_TARGET_ROW).fill_null(0).to_numpy(zero_copy_only=False)
    addresses = np.asarray(addresses, np.uint64)
    if query.one_match:
        matched = np.asarray(result.column(_MATCHED).to_numpy(zero_copy_only=False), bool)
        ordered = np.sort(addresses[matched])  # sorted, not hashed: fast on addresses
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if len(repeated):
            first = int(np.flatnonzero(matched & (addresses == repeated[0]))[0])
            keys = [result.column(c)[first].as_py() for c in query.key_columns]
            raise InvalidInputError(
                f"MERGE: several source rows match one target row (keys {keys}); each "
                "target row may be matched by at most one source row when a WHEN "
                "MATCHED clause updates or deletes)")
    deleted, updated, inserted = [], [], []
    for j, (action, named) in enumerate(query.values):
        rows = np.flatnonzero(clause == j)
        if not len(rows) or action == "nothing":
            continue
        if action == "delete":
            deleted.append(addresses[rows])
            continue
        taken = result.select([name for _, name in named]).take(pa.array(rows))
        values = conform(taken.rename_columns([column for column, _ in named]))
        if action == "update":
            updated.append((addresses[rows], values))
        else:
            inserted.append(values)
    return RowChanges(np.concatenate(deleted) if deleted else np.zeros(0, np.uint64),
                      tuple(updated), tuple(inserted))
