"""Base-table rows that newer sources hide, found through the base's primary-key index.

A base row loses to any newer source holding its key (a row or a tombstone). When the
base has a BTREE index on its (single) primary-key column, the newer sources' keys are
looked up in it (and, in fragments merged since it was built, in the in-memory keys of
:mod:`.unindexed`), giving the hidden rows' addresses directly: the base scan then leaves
them out like deleted rows (:class:`HiddenRows`), streaming every other row without
comparing keys, and needs its key column only when it is projected.

Every lookup is cached in the runtime's TableCache (kind ``base_rows_hidden``), keyed by
what makes it immutable: a flushed generation's per (base version, generation table
version); a MemTable's per (base version, MemTable, fragment), since a MemTable only ever
gets fragments appended. A new base version (a merge) or a new generation is a new key,
so nothing cached can go stale; a MemTable that grew costs a lookup of its new
fragments only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.memwal.memtable import MemFragment
from lance_sql.memwal.read.sources import BaseSource, GenerationSource, MemTableSource, Source
from lance_sql.memwal.read.unindexed import unindexed_keys
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.sorted_sets import sorted_unique
from lance_sql.table.index.planner import key_rows
from lance_sql.table.runtime.cache import BASE_ROWS_HIDDEN
from lance_sql.table.runtime.context import current_runtime

__all__ = ["HiddenRows", "hidden_base_rows"]

_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class HiddenRows:
    """Base rows to leave out: physical offsets per fragment (repeats and deleted rows
    allowed), complete for the fragments in ``covered`` (those the index covers)."""

    rows: Mapping[int, np.ndarray]
    covered: frozenset[int]

    def covers_all(self, fragment_ids: Sequence[int]) -> bool:
        return all(f in self.covered for f in fragment_ids)

    def count(self) -> int:
        """How many distinct base rows are left out (deleted ones included)."""
        return sum(int(sorted_unique(r).size) for r in self.rows.values())


class _Joined(Mapping[int, np.ndarray]):
    """Per base fragment, the rows newer sources hide: each source's found rows joined
    when the fragment is first asked for (a limited scan reads one fragment of many).
    Two threads asking at once may both join; either result is the same."""

    def __init__(self, pieces: dict[int, list[np.ndarray]]) -> None:
        self._pieces = pieces
        self._joined: dict[int, np.ndarray] = {}

    def __getitem__(self, fragment: int) -> np.ndarray:
        found = self._joined.get(fragment)
        if found is None:
            pieces = self._pieces[fragment]
            found = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            self._joined[fragment] = found
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)


class _NoIndex(Exception):
    """The base's key index cannot answer (gone, unusable)."""


def hidden_base_rows(base: BaseSource, sources: Sequence[Source]) -> HiddenRows | None:
    """The base rows any of ``sources`` (the newer ones; the base itself is skipped)
    hides, or None when the base has no usable BTREE index on its primary key."""
    if base.key_index() is None:
        return None
    ds = base.dataset
    column = base.key_columns[0]
    if pa.types.is_floating(ds.manifest.schema.to_scan_arrow().field(column).type):
        # the index matches floats by value (-0.0 finds 0.0, a NaN any NaN), where keys
        # are told apart by their bits (see bloom.identity_keys): hidden rows are found
        # without it
        return None
    cache = current_runtime().cache
    # (the commit time too: a table written again at the same place restarts at 1)
    where = (ds.store.uri, ds.version, ds.manifest.timestamp_ns)

    def lookup(values: pa.Array, asker: Hashable | None = None) -> dict[int, np.ndarray]:
        """``asker``: what ``values`` are, when they never change for it (see
        :meth:`UnindexedKeys.rows`)."""
        try:
            found = key_rows(ds.store, ds.manifest, column, values)
            if found is None:
                raise _NoIndex
            rows = found.rows
            if len(rows) < len(ds.manifest.fragments):
                # fragments merged since the index was built: their keys from the tail
                tail = unindexed_keys(ds, column, frozenset(rows))
                more = tail.rows(values, asker) if tail is not None else None
                if more is not None:
                    rows = {**rows, **more}
        except LanceError as exc:
            raise _NoIndex from exc
        return rows

    def cached(key: tuple[Hashable, ...], values: Callable[[], pa.Array]
               ) -> dict[int, np.ndarray]:
        return cache.get_or_load(BASE_ROWS_HIDDEN, (*where, *key),
                                 lambda: lookup(values(), key))

    parts: list[dict[int, np.ndarray]] = []
    try:
        for source in sources:
            if source.is_base:
                continue
            if isinstance(source, GenerationSource):
                gen = source.dataset
                parts.append(cached(("generation", gen.store.uri, gen.version),
                                    partial(_distinct_keys, source)))
            elif isinstance(source, MemTableSource):
                token = source.memtable.token
                pieces = [p for p in source.snapshot if p.rows.num_rows]
                if pieces:
                    # the pieces' rows joined once per snapshot: a MemTable of hundreds
                    # of puts would otherwise be joined again by every query
                    ids = tuple(p.fragment_id for p in pieces)
                    parts.append(cache.get_or_load(
                        BASE_ROWS_HIDDEN, (*where, "memtable-snapshot", token, ids),
                        partial(_memtable_rows, pieces, token, column, cached)))
            elif source.key_rows().num_rows:
                parts.append(lookup(_distinct_keys(source)))
        if not parts:  # no newer rows at all: none hidden, in any fragment
            return HiddenRows({}, frozenset(f.id for f in ds.manifest.fragments))
    except _NoIndex:
        return None
    covered, rows = _by_fragment(parts)
    return HiddenRows(_Joined(rows), covered)


def _by_fragment(parts: Sequence[Mapping[int, np.ndarray]]
                 ) -> tuple[frozenset[int], dict[int, list[np.ndarray]]]:
    """The fragments every part covers (the same set for one base), and per fragment the
    parts' non-empty row arrays."""
    covered = frozenset(parts[0]).intersection(*parts[1:])
    rows = {}
    for fragment in covered:
        pieces = [p[fragment] for p in parts if len(p.get(fragment, _EMPTY))]
        if pieces:
            rows[fragment] = pieces
    return covered, rows


def _memtable_rows(pieces: Sequence[MemFragment], token: Hashable, column: str,
                   cached: Callable[[tuple[Hashable, ...], Callable[[], pa.Array]],
                                    dict[int, np.ndarray]]) -> dict[int, np.ndarray]:
    """The base rows a MemTable snapshot's ``pieces`` hide, by fragment: each piece's
    (cached: a MemTable only gets pieces appended), joined."""
    parts = [cached(("memtable", token, p.fragment_id), partial(_key_column, p, column))
             for p in pieces]
    covered, rows = _by_fragment(parts)
    return {f: (np.concatenate(rows[f]) if f in rows else _EMPTY) for f in covered}


def _key_column(piece: MemFragment, column: str) -> pa.Array:
    return piece.rows.column(column).combine_chunks()


def _distinct_keys(source: Source) -> pa.Array:
    rows = source.key_rows()
    return rows.keys[0].take(array_from_numpy(rows.latest()))
