"""Answering a filter from BTREE and BITMAP indices: which part, for which fragments,
which rows.

A filter is split at its top-level ANDs. Conjuncts built only from ``=``, ``!=``, ``<``,
``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``IS NULL`` and ``IS NOT NULL`` on indexed
columns (against literals that are exactly values of the column's type), joined by AND /
OR / NOT, are answered by the indices; the rest is the *residual*, applied to the rows the
indices return. The tests of one column are first combined into the set of keys they
select (:mod:`.key_intervals`), so the index is asked for those keys only.

Only fragments every used index covers (its fragment bitmap) and that still exist are
answered this way; the caller scans the others with the whole filter. Indexed row
addresses of deleted rows are dropped by the reader (deletion vectors), addresses of
fragments that are gone are never read. Each leaf is tested on the index's values with
SQL's comparison semantics (:func:`lance_sql.format.btree.matches`), against literals
converted exactly to the key type, so an index answers exactly what a scan would.

An index that cannot be opened (missing, truncated, of the wrong type) makes the query
fall back to scanning with an :class:`~lance_sql.errors.IndexFallbackWarning`, unless the
caller asked for the index explicitly (``use_scalar_index=True``): then the typed error
naming the file is raised.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, IndexFallbackWarning, InvalidInputError, LanceError
from lance_sql.expr import Call, Column, Expr, Literal, describe_sql, exact_literal
from lance_sql.format.bitmap import TYPE_URL as BITMAP_TYPE_URL
from lance_sql.format.btree import (
    BATCH_SIZE,
    ROW_ADDRESS_IDS,
    TYPE_URL,
    KeyIsNull,
    KeyQuery,
    KeyRange,
    KeySet,
)
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import array_from_numpy, array_of_scalars
from lance_sql.sorted_sets import sorted_intersection, sorted_union, sorted_unique
from lance_sql.table.files.row_id_index import MISSING, row_id_index
from lance_sql.table.index.bitmap import bitmap_addresses
from lance_sql.table.index.btree import BTreeIndex
from lance_sql.table.index.key_intervals import KeyIntervals, sort_key
from lance_sql.table.runtime.cache import INDEX_SECTIONS
from lance_sql.table.runtime.context import current_runtime

_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
# A fragment where the index finds more than this share of the rows is scanned instead
# (unless the index was asked for): taking that many scattered rows is slower (measured:
# 10% of 1M rows, 57 ms taken vs 43 ms scanned; 1%, 29 vs 37 ms).
SCAN_FRACTION = 0.05
# ...and a query whose index pages would hold more than that share is not looked up at all
# when it needs more than this many pages (small indices are always worth a look).
MAX_PAGES = 64
# ...nor is one reading (nearly) every page of its one index, however small (``a != 5``,
# ``NOT (a < 100)``: measured 2-3x the scan's CPU on 200k rows, 49 pages; a query of
# several indices is left to the rule above: another index may narrow it)
WHOLE_INDEX = 0.9


@dataclass(frozen=True)
class Leaf:
    """One sargable test of one indexed column."""

    index: IndexMetadata
    field: LanceField
    query: KeyQuery
    text: str    # the test as written, for EXPLAIN


@dataclass(frozen=True)
class Both:
    """Rows all of ``parts`` match (AND)."""
    parts: tuple[IndexExpr, ...]


@dataclass(frozen=True)
class Either:
    """Rows any of ``parts`` matches (OR)."""
    parts: tuple[IndexExpr, ...]


IndexExpr = Leaf | Both | Either


@dataclass(frozen=True)
class IndexedRows:
    """The index's answer: matching row offsets per covered fragment, what they must still
    pass, and how it was found (for EXPLAIN)."""

    rows: dict[int, np.ndarray]      # fragment id -> sorted row offsets (deleted included)
    residual: Expr | None
    description: str

    def covers(self, fragment_id: int) -> bool:
        return fragment_id in self.rows


def btree_indices(manifest: Manifest) -> tuple[IndexMetadata, ...]:
    """The manifest's single-column BTREE indices (decoded once per index section)."""
    return tuple(i for i in scalar_indices(manifest) if i.type_url == TYPE_URL)


def scalar_indices(manifest: Manifest) -> tuple[IndexMetadata, ...]:
    """The manifest's single-column BTREE and BITMAP indices (decoded once per index
    section)."""
    section = manifest.index_section
    if not section:
        return ()

    def load() -> tuple[tuple[IndexMetadata, ...], int]:
        found = tuple(i for i in decode_index_section(section)
                      if i.type_url in _KINDS and len(i.fields) == 1)
        return found, len(section)

    return current_runtime().cache.get_or_load(INDEX_SECTIONS, section, load)[0]


_KINDS = {TYPE_URL: "BTree", BITMAP_TYPE_URL: "Bitmap"}  # as pylance's EXPLAIN names them


def _is_bitmap(leaf: Leaf) -> bool:
    return leaf.index.type_url == BITMAP_TYPE_URL


def plan_indexed(store: ObjectStore, manifest: Manifest, predicate: Expr | None, *,
                 fragment_ids: Iterable[int] | None = None,
                 use_index: bool | None = None) -> IndexedRows | None:
    """Rows of ``predicate`` answered by BTREE / BITMAP indices, or None (scan everything).

    ``predicate`` must be resolved against the table schema (exact column names).
    ``use_index``: None uses indices when they help and falls back with a warning when one
    is unusable; True raises instead; False never uses them.
    """
    if predicate is None or use_index is False or manifest.index_section is None:
        return None
    indices = scalar_indices(manifest)
    if not indices:
        return None
    by_field = _indices_by_column(manifest, indices)
    conjuncts = _conjuncts(predicate)
    indexed: list[_Part] = []
    rest: list[Expr] = []
    for part in conjuncts:
        sargable = _sargable(part, by_field, False)
        if sargable is None:
            rest.append(part)
        else:
            indexed.append(sargable)
    if not indexed:
        return None
    tree = _as_expr(_combine(indexed, True))
    live = {f.id for f in manifest.fragments}
    if fragment_ids is not None:
        live &= set(fragment_ids)
    used = _leaves(tree)
    covered = set(live)
    for leaf in used:
        covered &= leaf.index.fragment_ids or set()
    if not covered:
        return None
    try:
        if use_index is None:
            pages, estimate = _estimate(tree, store, manifest)
            covered_rows = sum(f.physical_rows for f in manifest.fragments if f.id in covered)
            whole = pages > 1 and _reads_whole_index(used, store, manifest)
            if (pages > MAX_PAGES or whole) and estimate > SCAN_FRACTION * covered_rows:
                return IndexedRows({}, None, f"ScalarIndexQuery: query=[{_describe(tree)}] "
                                   f"not used: up to {estimate} rows match, scanning")
        rows = _by_fragment(_evaluate(tree, store, manifest), covered, manifest, used)
    except LanceError as exc:
        if use_index:
            raise
        names = ", ".join(sorted({leaf.index.name for leaf in used}))
        warnings.warn(IndexFallbackWarning(f"{store.uri}: index {names} unusable, scanning "
                                           f"instead: {exc}"), stacklevel=3)
        return None
    residual = None
    if rest:
        residual = rest[0] if len(rest) == 1 else Call("and", tuple(rest))
    broad = set()
    if use_index is None:  # taking many scattered rows costs more than scanning them
        physical = {f.id: f.physical_rows for f in manifest.fragments}
        broad = {f for f, r in rows.items() if len(r) > SCAN_FRACTION * physical[f]}
    description = (f"ScalarIndexQuery: query=[{_describe(tree)}], "
                   f"indexed {len(covered)} of {len(live)} fragments, "
                   f"{sum(len(r) for r in rows.values())} rows"
                   + (f", refine=[{describe_sql(residual)}]" if residual is not None else "")
                   + (f", {len(broad)} fragments scanned instead (over "
                      f"{SCAN_FRACTION:.0%} of their rows match)" if broad else ""))
    kept = {f: r for f, r in rows.items() if f not in broad}
    return IndexedRows(kept, residual, description)


def key_rows(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array
             ) -> IndexedRows | None:
    """Rows whose ``column`` equals one of ``values`` (no nulls), found by a BTREE index
    on it with one search of all the values (no IN list is built): offsets per fragment
    the index covers (deleted rows included; covered fragments without a match map to
    an empty array). None when no index covers the column."""
    leaf = _key_leaf(manifest, column, values)
    if leaf is None:
        return None
    covered = {f.id for f in manifest.fragments} & (leaf.index.fragment_ids or set())
    rows = _by_fragment(_evaluate(leaf, store, manifest), covered, manifest, [leaf])
    return IndexedRows(rows, None, f"ScalarIndexQuery: query=[{_describe(leaf)}]")


def key_addresses(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array
                  ) -> np.ndarray | None:
    """:func:`key_rows` as sorted row addresses (uint64 ``fragment << 32 | offset``,
    deleted rows included), for a lookup that takes them at once: no per-fragment
    split. None when no index covers the column or the index misses a fragment of the
    manifest (the caller then scans); an address past its fragment's end is the same
    FormatError."""
    found = _key_search(store, manifest, column, values, keyed=False)
    return None if found is None else found[0]


@dataclass(frozen=True, eq=False)  # (compared as objects: it holds a dict)
class OneKeySearch:
    """:func:`key_addresses` of one key, resolved once per manifest and column (a point
    lookup repeats it with a new key each time): the index, the key's type and the
    fragments' row counts found once, each key then one page search. Same answers and
    errors as :func:`key_addresses`; made only where that finds its rows with the index
    alone (see :meth:`of`)."""

    manifest: Manifest
    column: str
    index: IndexMetadata
    key_type: pa.DataType
    fragment_rows: dict[int, int]  # fragment id -> physical rows

    @classmethod
    def of(cls, manifest: Manifest, column: str) -> OneKeySearch | None:
        """The search of ``column``'s BTREE index in ``manifest``; None when
        :func:`key_addresses` would not answer from it alone (no index, one missing a
        fragment, an older index of row ids): the caller takes that path."""
        leaf = _key_leaf(manifest, column, pa.array([], pa.null()))
        if leaf is None or (manifest.uses_stable_row_ids
                            and leaf.index.index_version < ROW_ADDRESS_IDS):
            return None
        indexed: set[int] | frozenset[int] = leaf.index.fragment_ids or set()
        if any(f.id not in indexed for f in manifest.fragments):
            return None
        return cls(manifest, column, leaf.index, leaf.field.to_scan_arrow().type,
                   {f.id: f.physical_rows for f in manifest.fragments})

    def addresses(self, store: ObjectStore, value: pa.Array) -> np.ndarray:
        """``key_addresses(store, manifest, column, value)`` of the one key ``value``."""
        if len(value) != 1:
            raise InvalidInputError(f"a search of one key was given {len(value)} keys")
        value = value if value.type.equals(self.key_type) else value.cast(self.key_type)
        index = BTreeIndex.open(store, self.manifest, self.index, self.key_type)
        ids = index.search_one(value)
        if ids.size > 1:  # a key held twice (plain appends): the general checks
            found = key_addresses(store, self.manifest, self.column, value)
            if found is None:  # (the same index answers there: never met)
                raise FormatError(f"{self.index.name}: the key index stopped answering")
            return found
        if not ids.size:
            return ids.copy()
        return _one_address(ids.copy(), self.fragment_rows.get, self.index.name)


IndexKeys: TypeAlias = "np.ndarray | pa.Array"  # an index's keys: numbers (ints), else Arrow


def keyed_addresses(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array
                    ) -> tuple[np.ndarray, IndexKeys | None] | None:
    """:func:`key_addresses` with the key of each address as the index holds it (numbers
    of the key type for an integer key, an Arrow array for a string / binary one; None
    when the index cannot give them: another key type, an older index of row ids), so a
    lookup need not read the key column of the rows again."""
    return _key_search(store, manifest, column, values, keyed=True)


def _pick(keys: IndexKeys, positions: np.ndarray) -> IndexKeys:
    """``keys`` at ``positions`` (integers), numbers or Arrow alike."""
    if isinstance(keys, np.ndarray):
        return keys[positions]
    return keys.take(array_from_numpy(positions.astype(np.int64, copy=False)))


def _key_search(store: ObjectStore, manifest: Manifest, column: str, values: pa.Array,
                keyed: bool) -> tuple[np.ndarray, IndexKeys | None] | None:
    """:func:`key_addresses` / :func:`keyed_addresses`: the addresses checked against
    the manifest's fragments, with their keys when ``keyed``."""
    leaf = _key_leaf(manifest, column, values)
    if leaf is None:
        return None
    indexed: set[int] | frozenset[int] = leaf.index.fragment_ids or set()
    if any(f.id not in indexed for f in manifest.fragments):
        return None
    keys: IndexKeys | None = None
    if keyed:
        addresses, keys = _evaluate_keyed(leaf, store, manifest)
    else:
        addresses = _evaluate(leaf, store, manifest)
    if addresses.size == 1:  # one key's row (a point lookup): checked as plain integers
        kept = _one_address(addresses, partial(_fragment_rows, manifest), leaf.index.name)
        return kept, (None if keys is None else keys[:kept.size])
    if not addresses.size:
        return addresses, keys
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    ordered = sorted(manifest.fragments, key=lambda f: f.id)
    ids = np.array([f.id for f in ordered], np.int64)
    at = np.minimum(np.searchsorted(ids, fragments), len(ids) - 1)
    known = ids[at] == fragments  # an address of a fragment no longer in the table: left out
    limit = np.where(known, np.array([f.physical_rows for f in ordered], np.int64)[at], -1)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    past = known & (offsets >= limit)
    if past.any():  # as _by_fragment reports it
        bad = int(np.flatnonzero(past)[-1])
        raise _past_end(leaf.index.name, int(offsets[bad]), int(fragments[bad]),
                        int(limit[bad]))
    if bool(known.all()):
        return addresses, keys
    kept = np.flatnonzero(known)
    return addresses[kept], (None if keys is None else _pick(keys, kept))


def _evaluate_keyed(leaf: Leaf, store: ObjectStore, manifest: Manifest
                    ) -> tuple[np.ndarray, IndexKeys | None]:
    """:func:`_evaluate` of one leaf (sorted unique addresses) with each address's key
    from the index (None: it cannot give them)."""
    if manifest.uses_stable_row_ids and leaf.index.index_version < ROW_ADDRESS_IDS:
        return _evaluate(leaf, store, manifest), None  # ids are row ids: no keys here
    index = BTreeIndex.open(store, manifest, leaf.index, leaf.field.to_scan_arrow().type)
    ids, keys = index.search_keyed(leaf.query)
    if ids.size <= 1 or bool((ids[1:] > ids[:-1]).all()):  # (unique and sorted already:
        return ids.copy(), keys  # a table written in key order; no sort)
    unique, first = np.unique(ids, return_index=True)  # an id listed twice: kept once
    return unique, (None if keys is None else _pick(keys, first))


def _one_address(addresses: np.ndarray, fragment_rows: Callable[[int], int | None],
                 index: str) -> np.ndarray:
    """:func:`key_addresses`' check of a single address (``fragment_rows``: a fragment's
    physical rows by id, None when it is not in the table): left out when its fragment
    is no longer in the table, FormatError when it lies past its fragment's end."""
    address = int(addresses[0])
    fragment, offset = address >> 32, address & 0xFFFFFFFF
    rows = fragment_rows(fragment)
    if rows is None:
        return addresses[:0]
    if offset >= rows:
        raise _past_end(index, offset, fragment, rows)
    return addresses


def _fragment_rows(manifest: Manifest, fragment: int) -> int | None:
    """The physical rows of fragment ``fragment`` of ``manifest`` (None: not there)."""
    return next((f.physical_rows for f in manifest.fragments if f.id == fragment), None)


def _past_end(index: str, offset: int, fragment: int, rows: int) -> FormatError:
    """The error of an index naming a row past its fragment's end."""
    return FormatError(f"index {index}: row {offset} of fragment {fragment} does not exist "
                       f"(it has {rows} rows); the index is corrupt")


def _key_leaf(manifest: Manifest, column: str, values: pa.Array) -> Leaf | None:
    """A search of the BTREE index on ``column`` for ``values`` (cast to the column's
    type); None when no index covers the column."""
    if manifest.index_section is None:
        return None
    found = _indices_by_column(manifest, btree_indices(manifest)).get(column)
    if found is None:
        return None
    index, field = found
    key_type = field.to_scan_arrow().type
    values = values if values.type.equals(key_type) else values.cast(key_type)
    return Leaf(index, field, KeySet(values), f"{column} IN (<{len(values)} keys>)")


def _indices_by_column(manifest: Manifest, indices: tuple[IndexMetadata, ...]
                       ) -> dict[str, tuple[IndexMetadata, LanceField]]:
    top = {f.id: f for f in manifest.schema.fields}
    out: dict[str, tuple[IndexMetadata, LanceField]] = {}
    for index in indices:
        field = top.get(index.fields[0])
        if field is None or index.fragment_ids is None:
            continue
        best = out.get(field.name)
        if best is None or len(index.fragment_ids) > len(best[0].fragment_ids or ()):
            out[field.name] = (index, field)
    return out


def _conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, Call) and expr.op == "and":
        return [c for a in expr.args for c in _conjuncts(a)]
    return [expr]


@dataclass(frozen=True)
class _Keys:
    """Keys of one indexed column a part of the filter selects, kept as intervals until
    the whole AND / OR around it is combined (see :mod:`.key_intervals`); NULL is
    selected by IS NULL alone (no comparison is TRUE of it, nor its negation)."""

    index: IndexMetadata
    field: LanceField
    keys: KeyIntervals | None
    # the test as written when it is combined with nothing (yet): asked of the index as
    # it is (intervals of thousands of IN-list keys take a while to build)
    plain: Leaf | None = None
    nulls: bool = False  # the NULL keys too (IS NULL)

    def intervals(self) -> KeyIntervals:
        """The keys as intervals (built from the test as written when that is held)."""
        if self.keys is not None:
            return self.keys
        assert self.plain is not None and not isinstance(self.plain.query, KeyIsNull)
        found = KeyIntervals.of_query(self.plain.query)
        assert found is not None  # plain only for key types with an order
        return found


_Part: TypeAlias = "IndexExpr | _Keys"


def _sargable(expr: Expr, by_field: dict[str, tuple[IndexMetadata, LanceField]],
              negated: bool) -> _Part | None:
    """``expr`` (NOT ``expr`` when ``negated``) as index searches and key intervals, or
    None when the indices cannot answer it: the comparisons of one column inside AND / OR
    / NOT are combined into its key intervals, so the index is asked for the keys the
    whole tree selects (``a >= 100 AND a < 200 OR a > 900`` reads two narrow ranges, not
    every key above 100)."""
    if not isinstance(expr, Call):
        return None
    if expr.op == "not" and len(expr.args) == 1:
        return _sargable(expr.args[0], by_field, not negated)
    if expr.op in ("and", "or"):
        parts = [_sargable(a, by_field, negated) for a in expr.args]
        if any(p is None for p in parts):
            return None
        # NOT (a AND b) = NOT a OR NOT b, and the other way round (also with NULLs)
        return _combine(parts, (expr.op == "and") != negated)  # type: ignore[arg-type]
    args = expr.args
    op = expr.op
    if op in _FLIP and len(args) == 2 and isinstance(args[1], Column) and \
            isinstance(args[0], Literal):
        args, op = (args[1], args[0]), _FLIP[op]
    if not args or not isinstance(args[0], Column) or len(args[0].path) != 1:
        return None
    found = by_field.get(args[0].path[0])
    if found is None:
        return None
    index, field = found
    key_type = field.to_scan_arrow().type
    literals = args[1:]
    if not all(isinstance(a, Literal) for a in literals):
        return None
    if op in ("is_null", "is_not_null") and not literals:
        if (op == "is_null") != negated:
            return _Keys(index, field, KeyIntervals(()), nulls=True)
        return _Keys(index, field, KeyIntervals.everything())  # every non-null key
    scalars = [exact_literal(a, key_type) for a in literals]  # type: ignore[arg-type]
    if pa.types.is_integer(key_type) and any(
            s is None and a.value is not None  # type: ignore[union-attr]
            for s, a in zip(scalars, literals, strict=True)):
        numeric = _numeric_keys(op, literals, key_type, negated)  # type: ignore[arg-type]
        return None if numeric is None else _Keys(index, field, numeric)
    keys: KeyIntervals | None = None
    query: KeyQuery | None = None
    if op in _FLIP and len(scalars) == 1 and scalars[0] is not None:
        k = scalars[0]
        if negated or op == "!=":
            keys = KeyIntervals.compare(_NEGATE[op] if negated else op, k)
        else:
            query = {"=": KeyRange(k, k), "<": KeyRange(None, k, upper_inclusive=False),
                     "<=": KeyRange(None, k), ">": KeyRange(k, None, lower_inclusive=False),
                     ">=": KeyRange(k, None)}[op]
    elif op == "between" and len(scalars) == 2 and None not in scalars:
        low, high = scalars
        if negated:  # below or above
            below, above = KeyIntervals.compare("<", low), KeyIntervals.compare(">", high)
            keys = None if below is None or above is None else below.union(above)
        else:
            query = KeyRange(low, high)
    elif op == "in" and scalars:
        has_null = any(a.value is None for a in literals)  # type: ignore[union-attr]
        present = [s for s, a in zip(scalars, literals, strict=True)
                   if a.value is not None]  # type: ignore[union-attr]
        if any(s is None for s in present):
            return None
        if (negated and has_null) or not present:  # never TRUE: x NOT IN (..., NULL),
            return _Keys(index, field, KeyIntervals(()))  # x IN (NULL)
        if negated:
            keys = KeyIntervals.points(present)
            keys = None if keys is None else keys.complement()
        else:
            query = KeySet(array_of_scalars(present, key_type))
    if keys is not None:
        return _Keys(index, field, keys)
    if query is None:
        return None
    leaf = Leaf(index, field, query, describe_sql(expr))
    return _Keys(index, field, None, leaf) if _orderable(query) else leaf


def _numeric_keys(op: str, literals: list[Literal], key_type: pa.DataType, negated: bool
                  ) -> KeyIntervals | None:
    """The keys of an integer column a comparison with numbers its type cannot hold
    exactly selects (a float, as SQL compares: in float64; an integer out of the type's
    range), as intervals of the column's type (see :meth:`KeyIntervals.numeric`); None
    when a literal is not such a number."""
    values = [a.value for a in literals]
    for a in literals:
        if a.value is None:
            continue
        if isinstance(a.value, bool) or not isinstance(a.value, int | float) or not (
                a.type is None or pa.types.is_integer(a.type) or a.type == pa.float64()):
            return None

    def compare(o: str, number: int | float) -> KeyIntervals | None:
        return KeyIntervals.numeric(o, number, key_type)

    if op in _FLIP and len(values) == 1 and values[0] is not None:
        return compare(_NEGATE[op] if negated else op, values[0])
    if op == "between" and len(values) == 2 and None not in values:
        low, high = compare(">=", values[0]), compare("<=", values[1])
        if low is None or high is None:
            return None
        inside = low.intersect(high)
        return inside.complement() if negated else inside
    if op == "in" and values:
        present = [v for v in values if v is not None]
        if (negated and len(present) < len(values)) or not present:
            return KeyIntervals(())  # never TRUE: x NOT IN (..., NULL), x IN (NULL)
        points = [compare("=", v) for v in present]
        if any(p is None for p in points):
            return None
        keys = KeyIntervals.of([i for p in points for i in p.intervals])  # type: ignore[union-attr]
        return keys.complement() if negated else keys
    return None


def _orderable(query: KeyQuery) -> bool:
    """Whether the keys of ``query`` (a range or a set) have an interval form."""
    if isinstance(query, KeySet):
        return bool(len(query.values)) and sort_key(query.values[0]) is not None
    if isinstance(query, KeyRange):
        bound = query.lower if query.lower is not None else query.upper
        return bound is not None and sort_key(bound) is not None
    return False


def _combine(parts: list[_Part], conjunction: bool) -> _Part:
    """``parts`` ANDed (``conjunction``) or ORed: the key intervals of each column
    intersected or united into one set; the rest kept as they are."""
    out: list[_Part] = []
    at: dict[str, int] = {}
    for part in parts:
        if isinstance(part, _Keys):
            seen = at.get(part.index.uuid)
            if seen is not None:
                other = out[seen]
                assert isinstance(other, _Keys)
                mine, theirs = other.intervals(), part.intervals()
                keys = mine.intersect(theirs) if conjunction else mine.union(theirs)
                nulls = (other.nulls and part.nulls) if conjunction else \
                    (other.nulls or part.nulls)
                out[seen] = _Keys(other.index, other.field, keys, nulls=nulls)
                continue
            at[part.index.uuid] = len(out)
        out.append(part)
    if len(out) == 1:
        return out[0]
    return (Both if conjunction else Either)(tuple(_as_expr(p) for p in out))


def _as_expr(part: _Part) -> IndexExpr:
    """Key intervals as searches of their index: one range per interval, one key set of
    the single keys, IS NULL for the NULLs (nothing: an empty key set)."""
    if not isinstance(part, _Keys):
        return part
    if part.plain is not None:
        return part.plain
    key_type = part.field.to_scan_arrow().type
    column = part.field.name
    queries: list[KeyQuery]
    if part.nulls and not part.intervals().intervals:
        queries = []
    else:
        queries = part.intervals().queries(key_type)
    if part.nulls:
        queries.append(KeyIsNull())
    leaves = tuple(Leaf(part.index, part.field, q, _query_text(column, q)) for q in queries)
    return leaves[0] if len(leaves) == 1 else Either(leaves)


def _query_text(column: str, query: KeyQuery) -> str:
    """A search as SQL, for EXPLAIN."""
    name = describe_sql(Column((column,)))
    if isinstance(query, KeySet):
        values = [describe_sql(Literal(v)) for v in query.values.to_pylist()]
        if len(values) > 8:
            return f"({name} IN (<{len(values)} keys>))"
        return f"({name} IN ({', '.join(values)}))" if values else "false"
    if isinstance(query, KeyIsNull):
        return f"({name} IS NULL)"
    tests = []
    if query.lower is not None:
        tests.append(f"{name} {'>=' if query.lower_inclusive else '>'} "
                     f"{describe_sql(Literal(_wall_clock(query.lower.as_py())))}")
    if query.upper is not None:
        tests.append(f"{name} {'<=' if query.upper_inclusive else '<'} "
                     f"{describe_sql(Literal(_wall_clock(query.upper.as_py())))}")
    return f"({' AND '.join(tests) or f'{name} IS NOT NULL'})"


def _wall_clock(value: object) -> object:
    """A zoned column's bound as its wall-clock time in the column's zone: a TIMESTAMP
    literal with an offset means its UTC wall-clock time (as DataFusion reads it), so
    the text names the bound as a naive literal, read in the column's zone."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=None)
    return value


def _leaves(tree: IndexExpr) -> list[Leaf]:
    if isinstance(tree, Leaf):
        return [tree]
    return [leaf for p in tree.parts for leaf in _leaves(p)]


def _evaluate(tree: IndexExpr, store: ObjectStore, manifest: Manifest) -> np.ndarray:
    """Sorted unique row addresses where ``tree`` is true (over every indexed row)."""
    if isinstance(tree, Leaf):
        if isinstance(tree.query, KeySet) and not len(tree.query.values):
            return np.empty(0, np.uint64)  # a contradiction (a > 5 AND a < 3): no rows
        key_type = tree.field.to_scan_arrow().type
        if _is_bitmap(tree):
            return bitmap_addresses(store, manifest, tree.index, key_type, tree.query)
        index = BTreeIndex.open(store, manifest, tree.index, key_type)
        ids = index.search(tree.query)
        if manifest.uses_stable_row_ids and tree.index.index_version < ROW_ADDRESS_IDS:
            # older indices of stable-row-id tables hold row ids: find their rows
            ids = row_id_index(store, manifest).lookup(ids)
            ids = ids[ids != MISSING]
        return sorted_unique(ids) if ids.size > 1 else ids.copy()  # (one id: sorted, unique)
    results = [_evaluate(p, store, manifest) for p in tree.parts]
    combine = sorted_intersection if isinstance(tree, Both) else sorted_union
    out = results[0]
    for r in results[1:]:
        out = combine(out, r)
    return out


def _estimate(tree: IndexExpr, store: ObjectStore, manifest: Manifest) -> tuple[int, int]:
    """(index pages ``tree`` would read, rows it may match at most, roughly), from the page
    bounds alone: a range matches whole pages, a key set about a row per key plus every
    further page its keys fill, IS NULL the pages' null counts."""
    if isinstance(tree, Leaf):
        if _is_bitmap(tree):  # no pages: its keys' row sets are read, each at once
            return 0, 0
        key_type = tree.field.to_scan_arrow().type
        bounds = BTreeIndex.open(store, manifest, tree.index, key_type).bounds
        pages = bounds.pages(tree.query)
        if isinstance(tree.query, KeyIsNull):
            return len(pages), int(bounds.lookup.null_counts[pages].sum())
        if isinstance(tree.query, KeySet):
            keys = len(tree.query.values)
            return len(pages), keys + max(0, len(pages) - keys) * BATCH_SIZE
        return len(pages), len(pages) * BATCH_SIZE
    parts = [_estimate(p, store, manifest) for p in tree.parts]
    rows = [r for _, r in parts]
    return sum(p for p, _ in parts), (min(rows) if isinstance(tree, Both) else sum(rows))


def _reads_whole_index(leaves: list[Leaf], store: ObjectStore, manifest: Manifest) -> bool:
    """Whether ``leaves`` all search one index of several pages and, together, read at
    least ``WHOLE_INDEX`` of its pages with a range (key sets alone keep the page-count
    rule: their pages hold their keys)."""
    if len({leaf.index.uuid for leaf in leaves}) != 1 or _is_bitmap(leaves[0]) or \
            all(isinstance(leaf.query, KeySet) for leaf in leaves):
        return False
    first = leaves[0]
    bounds = BTreeIndex.open(store, manifest, first.index,
                             first.field.to_scan_arrow().type).bounds
    total = bounds.lookup.num_pages
    read = np.unique(np.concatenate([bounds.pages(leaf.query) for leaf in leaves]))
    return total > 1 and read.size >= WHOLE_INDEX * total


def _by_fragment(addresses: np.ndarray, covered: set[int], manifest: Manifest,
                 used: list[Leaf]) -> dict[int, np.ndarray]:
    fragment_ids = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    cuts = np.flatnonzero(np.diff(fragment_ids)) + 1
    rows: dict[int, np.ndarray] = {f: np.empty(0, np.int64) for f in covered}
    physical = {f.id: f.physical_rows for f in manifest.fragments}
    starts = [0, *cuts.tolist()] if len(addresses) else []
    ends = [*cuts.tolist(), len(addresses)] if len(addresses) else []
    for start, end in zip(starts, ends, strict=True):
        frag = int(fragment_ids[start])
        if frag not in covered:
            continue
        part = offsets[start:end]
        if int(part[-1]) >= physical[frag]:
            names = ", ".join(sorted({leaf.index.name for leaf in used}))
            raise _past_end(names, int(part[-1]), frag, physical[frag])
        rows[frag] = part
    return rows


def _describe(tree: IndexExpr) -> str:
    if isinstance(tree, Leaf):
        return f"{tree.text}@{tree.index.name}({_KINDS.get(tree.index.type_url, 'BTree')})"
    joiner = " AND " if isinstance(tree, Both) else " OR "
    return "(" + joiner.join(_describe(p) for p in tree.parts) + ")"

