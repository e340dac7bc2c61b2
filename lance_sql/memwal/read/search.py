"""Top-k search nodes: exact flat ``KNNExec`` per source and ``FilterStaleExec``.

Candidates a newer generation may also hold are stale: :class:`StaleCheck` decides it
with the newer generations' bloom filters (as the spec allows for search: a false
positive may drop a valid candidate) or, ``exact``, with their real keys. ``KNNExec``
applies the check before its top-k, so stale rows never crowd live ones out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.expr import describe_sql
from lance_sql.expr.arrow import Expr, to_pyarrow
from lance_sql.memwal.read.duplicates import superseded_base_rows
from lance_sql.memwal.read.keys import Keys
from lance_sql.memwal.read.metrics import measured
from lance_sql.memwal.read.nodes import (
    DISTANCE,
    GEN,
    REGION,
    ExecNode,
    NewestRows,
    ScanExec,
    conform,
    members,
)
from lance_sql.memwal.read.sources import BaseSource, Source, precedence
from lance_sql.table.files.reader import ROW_ADDR

__all__ = ["MAX_K", "METRICS", "FilterStaleExec", "KNNExec", "StaleCheck", "check_filter",
           "check_search_columns", "distances"]

METRICS = ("l2", "cosine", "dot")
MAX_K = 1_000_000  # the most rows one search returns (SQL's nearest() and Python alike)


def _vectors(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(positions of non-null vectors, the vectors as a float matrix)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = np.flatnonzero(np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False)))
    present = column.take(pa.array(valid))
    if not len(present):
        return valid, np.zeros((0, 0), np.float32)
    lengths = pc.list_value_length(present).to_numpy(zero_copy_only=False)
    if lengths.min() != lengths.max():
        raise InvalidInputError("vectors of different lengths cannot be compared")
    flat = present.flatten().to_numpy(zero_copy_only=False)
    return valid, np.asarray(flat, np.float64).reshape(len(present), int(lengths[0]))


def query_vector(query: Sequence[float] | np.ndarray) -> np.ndarray:
    """The query vector as float64 numbers; InvalidInputError when it is not numbers."""
    try:
        if query is None or isinstance(query, (str, bytes)):
            raise TypeError(f"got {query!r}")
        vector = np.asarray(query, np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"the query vector must be a list of numbers: {exc}") from exc
    if vector.ndim != 1:  # (a 2-D query is not several queries: refused, not flattened)
        raise InvalidInputError(f"the query vector must be a list of numbers, got "
                                f"{vector.ndim} dimensions")
    return vector


def check_search_columns(schema: pa.Schema, column: str, where: str) -> None:
    """InvalidInputError when ``schema`` (the table's columns) has no ``column``;
    SchemaError when it has a column named as the distance a search adds."""
    if column not in schema.names:
        raise InvalidInputError(f"{where} has no column {column!r}")
    if DISTANCE in schema.names:
        raise SchemaError(f"{where} has a column named {DISTANCE!r}, the name of the "
                          f"distance a search returns: rename it to search the table")


def _as_stored(query: np.ndarray, value_type: pa.DataType) -> np.ndarray:
    """The query rounded to the vectors' float type (as float64): a stored vector equal
    to the query is then at distance 0, as in pylance, which casts the query so."""
    if not pa.types.is_floating(value_type):
        return query
    with np.errstate(over="ignore"):
        return query.astype(value_type.to_pandas_dtype()).astype(np.float64)


def _check_vector_column(schema: pa.Schema, column: str) -> None:
    """InvalidInputError unless ``column`` holds vectors: lists (of a fixed size or not)
    of numbers. Checked when the search is planned, before anything is read."""
    t = schema.field(column).type
    if (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)) \
            and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)):
        return
    raise InvalidInputError(f"column {column!r} holds {t}, not vectors (lists of numbers): "
                            f"nearest() searches a vector column")


def check_filter(predicate: Expr | None, schema: pa.Schema) -> None:
    """Type-check a search's filter against the columns it may name (``schema``) when the
    search is planned: a condition whose types do not fit (a vector compared with a
    number, an integer column with ``'x'``) is an InvalidInputError before anything is
    read, not when the search runs."""
    if predicate is None:
        return
    try:
        to_pyarrow(predicate, schema)
    except InvalidInputError as exc:
        raise InvalidInputError(f"the filter {describe_sql(predicate)} does not fit the table's "
                                f"columns: {exc}") from exc


# a cosine distance this small may be rounding alone (float64 products of unit vectors)
_ROUNDING = 1e-9


def distances(matrix: np.ndarray, query: np.ndarray, metric: str) -> np.ndarray:
    """Distance of every row of ``matrix`` to ``query``: ``l2`` is the squared euclidean
    distance, ``cosine`` one minus the cosine similarity, ``dot`` one minus the inner
    product (pylance's three; smaller is closer for all). NaN where it is undefined: a
    NaN in either vector, or for cosine a zero vector."""
    if metric == "l2":
        diff = matrix - query[None, :]
        return np.einsum("ij,ij->i", diff, diff)
    if metric == "dot":
        return 1.0 - (matrix @ query)
    if metric == "cosine":
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = (matrix @ query) / norms
        # (rounding can take a vector's similarity with itself past 1: no distance < 0)
        out = 1.0 - np.where(norms > 0, np.clip(sim, -1.0, 1.0), np.nan)
        # ... or just short of it: a stored copy of the query is at 0 whatever the BLAS
        # kernel's rounding (only the few rows that close are compared element-wise)
        close = np.flatnonzero(out < _ROUNDING)
        if close.size:
            out[close[(matrix[close] == query[None, :]).all(axis=1)]] = 0.0
        return out
    raise InvalidInputError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")


class KNNExec(ExecNode):
    """The ``k`` rows of one source nearest to ``query`` in ``column`` (exact, flat),
    among rows where ``predicate`` holds, with ``_distance``; streaming, keeping only the
    best ``k`` seen so far. With ``stale``, rows it calls stale are dropped before they
    compete (so stale rows never crowd live ones out of the top ``k``).

    Distances come first: only a batch's rows no farther than the ``k`` best so far are
    checked for staleness, nearest first, in growing chunks until ``k`` of them are live
    (hashing every row's key for the bloom filters cost more than its distance). The
    result is the same as checking every row: the ``k`` nearest live rows."""

    def __init__(self, source: Source, schema: pa.Schema, column: str, query: np.ndarray,
                 k: int, metric: str = "l2", predicate: Expr | None = None,
                 stale: StaleCheck | None = None) -> None:
        if metric not in METRICS:
            raise InvalidInputError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 < k <= MAX_K:
            raise InvalidInputError(f"k must be a whole number in 1..{MAX_K}, got {k!r}")
        k = int(k)
        _check_vector_column(schema, column)
        self.source = source
        self.schema = schema
        self.column = column
        self.query = _as_stored(np.asarray(query, np.float64).reshape(-1),
                                schema.field(column).type.value_type)
        self.k = k
        self.metric = metric
        self.stale = stale
        self.scan = ScanExec(source, pa.schema([f for f in schema if f.name != DISTANCE]),
                             predicate)
        self.rows_scanned = 0  # rows with a vector, and those checked for staleness
        self.rows_checked = 0

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        best: pa.Table | None = None
        scanned, checked = self.rows_scanned, self.rows_checked
        # base rows a later base row of their key supersedes (a key appended twice) never
        # compete: the key's newest base row is its only base candidate
        older = (superseded_base_rows(self.source) if isinstance(self.source, BaseSource)
                 and self.source.key_columns else None)
        if older:
            self.metrics.add("base_rows_superseded", sum(int(r.size) for r in older.values()))
        for batch in self.scan.execute(older or None):
            valid, matrix = _vectors(batch.column(self.column))
            if not valid.size:
                continue
            if matrix.shape[1] != self.query.size:
                raise InvalidInputError(f"column {self.column!r} holds {matrix.shape[1]}-"
                                        f"dimensional vectors, the query has "
                                        f"{self.query.size}")
            self.rows_scanned += int(valid.size)
            # compared as returned (float32), so ties with the best so far stay ties;
            # (NaN and infinite values give NaN or inf distances, silently: see below)
            with np.errstate(over="ignore", invalid="ignore"):
                d = distances(matrix, self.query, self.metric).astype(np.float32)
            defined = ~np.isnan(d)  # a row without a distance is no neighbour (as pylance)
            if not defined.all():
                valid, d = valid[defined], d[defined]
                if not valid.size:
                    continue
            bound = None
            if best is not None and best.num_rows == self.k:
                bound = best.column(DISTANCE).to_numpy().max()
            chosen = self._contenders(batch, valid, d, bound)
            if not chosen.size:
                continue
            rows = pa.Table.from_batches([batch]).take(pa.array(valid[chosen]))
            rows = rows.append_column(DISTANCE, pa.array(d[chosen]))
            best = rows if best is None else pa.concat_tables([best, rows])
            if best.num_rows > self.k:
                dist = best.column(DISTANCE).to_numpy()
                top = np.argpartition(dist, self.k - 1)[:self.k]
                best = best.take(pa.array(np.sort(top)))
        self.metrics.count(rows_scanned=self.rows_scanned - scanned,
                           rows_checked_stale=self.rows_checked - checked)
        if best is not None and best.num_rows:
            yield conform(best, self.schema)

    def _contenders(self, batch: pa.RecordBatch, valid: np.ndarray, d: np.ndarray,
                    bound: np.floating | None) -> np.ndarray:
        """Positions (into ``valid``) of the batch's ``k`` nearest live rows no farther
        than ``bound`` (the farthest of the best ``k`` so far; None: fewer so far)."""
        near = np.arange(d.size) if bound is None else np.flatnonzero(d <= bound)
        if self.stale is None:
            if near.size > self.k:
                near = near[np.argpartition(d[near], self.k - 1)[:self.k]]
            return near
        order = near[np.argsort(d[near], kind="stable")]
        live: list[np.ndarray] = []
        found, start, size = 0, 0, self.k
        while found < self.k and start < order.size:
            part = order[start:start + size]
            keep = self.stale.keep(self.source, batch.take(pa.array(valid[part])))
            self.rows_checked += int(part.size)
            live.append(part[keep])
            alive = int(keep.sum())
            self.metrics.add("stale_dropped", int(part.size) - alive)
            found += alive
            start, size = start + size, size * 2
        return np.concatenate(live)[:self.k] if live else order[:0]

    def describe(self) -> str:
        return f"KNNExec: {self.source.label}, k={self.k}, metric={self.metric}"


class StaleCheck:
    """Whether candidates of a source are stale: a newer generation of their region may
    hold their key (bloom filters; base-table rows: every generation), or with ``exact``
    is not their key's newest row (the real keys, as :class:`NewestRows` decides). A
    generation's row that is not the newest of its key in that generation (the key put
    again or deleted later in it) is stale either way: that is decided by its keys."""

    def __init__(self, sources: Sequence[Source], key_columns: Sequence[str],
                 key_types: Sequence[pa.DataType], *, exact: bool = False,
                 across_regions: bool = False) -> None:
        """``across_regions``: a key may live in several regions; a candidate is stale
        when a source ordered before it in any region may hold its key (see
        :func:`.sources.newest_first`)."""
        self.across_regions = across_regions
        self.sources = list(sources)
        self.key_columns = tuple(key_columns)
        self.key_types = list(key_types)
        self.exact = exact
        self._newest: NewestRows | None = None
        self._own: dict[int, np.ndarray] = {}  # per generation: its own live newest rows

    def keep(self, source: Source, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        keys = [batch.column(k) for k in self.key_columns]
        keys = [k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k for k in keys]
        if self.exact:
            if self._newest is None:
                self._newest = NewestRows(self.sources, self.key_types,
                                          self.across_regions)
            rowaddr = np.asarray(batch.column(ROW_ADDR).to_numpy(), np.uint64)
            return self._newest.keep(source, keys, rowaddr)
        keep = np.ones(batch.num_rows, bool)
        if not source.is_base and batch.num_rows:
            # a generation may hold a key twice (put twice, or put then deleted): only its
            # newest row of the key can win, and not when it is a tombstone
            own = self._newest_in(source)
            rowaddr = np.asarray(batch.column(ROW_ADDR).to_numpy(), np.uint64)
            keep &= members(own, rowaddr) if own.size else np.zeros(rowaddr.size, bool)
        if self.across_regions and not source.is_base:
            ahead = precedence(source)
            newer = [s for s in self.sources if not s.is_base and precedence(s) < ahead]
        else:
            newer = [s for s in self.sources if not s.is_base and s.gen > source.gen
                     and (source.is_base or s.region == source.region)]
        if newer and batch.num_rows:
            hashes = Keys(pa.table(keys, names=list(self.key_columns))).hashes
            for s in newer:
                bloom = s.bloom()
                if bloom is not None:
                    keep &= ~bloom.might_contain_hashes(hashes)
        return keep

    def _newest_in(self, source: Source) -> np.ndarray:
        """The sorted addresses of ``source``'s newest row of each key, tombstones left
        out (its key columns only; a generation is small). Worked out once per plan."""
        found = self._own.get(id(source))
        if found is None:
            rows = source.key_rows()
            latest = rows.latest()
            found = np.sort(rows.rowaddr[latest[~rows.tombstone[latest]]])
            self._own[id(source)] = found
        return found


class FilterStaleExec(ExecNode):
    """Drops candidates a newer generation of their region may also hold (see
    :class:`StaleCheck`). Bloom false positives may drop a valid candidate, as the spec
    allows for search; ``exact`` checks the real keys instead (and also drops a
    generation's older rows of a key it updated twice). Candidates carry ``_gen`` and
    ``_region``, which name their source."""

    def __init__(self, child: ExecNode, check: StaleCheck) -> None:
        self.children = (child,)
        self.schema = child.schema
        self.check = check

    @measured
    def execute(self) -> Iterator[pa.RecordBatch]:
        by_origin = {(None if s.region is None else str(s.region), s.gen): s
                     for s in self.check.sources}
        for batch in self.children[0].execute():
            gens = np.asarray(batch.column(GEN).to_numpy(zero_copy_only=False), np.int64)
            regions = np.asarray(batch.column(REGION).to_pylist(), object)
            keep = np.zeros(batch.num_rows, bool)
            for (region, gen), source in by_origin.items():
                rows = (gens == gen) & (regions == region)
                if rows.any():
                    keep[rows] = self.check.keep(source, batch.filter(pa.array(rows)))
            kept = int(np.count_nonzero(keep))
            self.metrics.count(rows_in=batch.num_rows, stale_dropped=batch.num_rows - kept)
            if kept:
                yield batch.filter(pa.array(keep))

    def describe(self) -> str:
        generations = [s for s in self.check.sources if not s.is_base]
        if self.check.exact:
            return f"FilterStaleExec: exact_keys=[{len(generations)} generations]"
        names = ", ".join(f"bf[{s.label.replace('[', '][', 1)}" for s in generations)
        return f"FilterStaleExec: bloom_filters=[{names}]"
