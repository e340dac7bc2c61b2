"""Primary-key sets and key batches for LSM reads, vectorised.

A :class:`KeySet` answers "is this key in the set?" for a whole batch at once: integer
keys by binary search over their sorted values, other keys by their 64-bit hash with every
hash match confirmed against the stored key (so a hash collision never masks a row).
:class:`KeyRows` are the key columns of every row of one source (with row addresses and
tombstone flags); from them the planner derives which row of each key is the newest.
:class:`Keys` are the keys a point lookup still has to resolve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.memwal.bloom import identity_keys, key_hash_one, key_hashes
from lance_sql.memwal.memtable import key_codes, last_of_codes
from lance_sql.numpy_arrow import array_from_numpy, numpy_of, true_mask

__all__ = ["KeyRows", "KeySet", "Keys", "last_rows_of", "latest_positions", "same_key_value"]

_DENSE_LIMIT = 1 << 26  # entries of a membership map (bytes)


def _combined(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _is_int_key(keys: Sequence[pa.Array]) -> bool:
    return len(keys) == 1 and pa.types.is_integer(keys[0].type)


class KeySet:
    """A set of primary keys (see the module docstring). Built once, probed per batch."""

    def __init__(self, keys: Sequence[pa.Array]) -> None:
        keys = [_combined(k) for k in keys]
        self.types = [k.type for k in keys]
        self.int_key = _is_int_key(keys)
        codes = key_codes(keys) if len(keys[0]) else np.zeros(0, np.int64)
        order = np.argsort(codes, kind="stable")
        self.order = order  # sorted position -> position in the arrays given
        self.codes = codes[order]
        self.keys = [] if self.int_key else [k.take(array_from_numpy(order)) for k in keys]
        # dense integer keys: a membership map, one step per probe instead of a search
        self._dense: tuple[int, np.ndarray] | None = None
        if self.int_key and self.codes.size:
            low, high = int(self.codes[0]), int(self.codes[-1])
            span = high - low + 1
            if span <= min(_DENSE_LIMIT, 32 * self.codes.size + 65536):
                present = np.zeros(span, bool)
                present[self.codes - low] = True
                self._dense = (low, present)

    def __len__(self) -> int:
        return int(self.codes.size)

    def contains(self, keys: Sequence[pa.Array], codes: np.ndarray | None = None
                 ) -> np.ndarray:
        """For each row of ``keys`` (same types as the set's), whether the set holds it.
        ``codes``: the rows' :func:`key_codes`, when the caller has them already."""
        if self._dense is not None and len(keys[0]):
            q = key_codes([_combined(k) for k in keys]) if codes is None else codes
            low, present = self._dense
            at = q - low
            inside = (at >= 0) & (at < present.size)
            out = np.zeros(q.size, bool)
            out[inside] = present[at[inside]]
            return out
        return self.find(keys, codes) >= 0

    def find(self, keys: Sequence[pa.Array] | None, codes: np.ndarray | None = None
             ) -> np.ndarray:
        """For each row of ``keys``, its position in the arrays the set was built from
        (keys are distinct there), or -1. ``keys`` may be None when ``codes`` are given
        and the set's key is one integer column (the codes decide alone)."""
        n = len(codes) if codes is not None else len(keys[0])  # type: ignore[index]
        found = np.full(n, -1, np.int64)
        if not self.codes.size or not n:
            return found
        assert keys is not None or self.int_key, "hashed keys are confirmed on the keys"
        keys = [_combined(k) for k in keys] if keys is not None else []
        q = key_codes(keys) if codes is None else codes
        pos = np.searchsorted(self.codes, q, "left")
        size = self.codes.size
        hit = self.codes[np.minimum(pos, size - 1)] == q
        hit &= pos < size
        if self.int_key:
            found[hit] = self.order[pos[hit]]
            return found
        rows = np.flatnonzero(hit)
        at = pos[rows]
        while rows.size:  # confirm hash matches; more than one round only on collisions
            equal = np.ones(rows.size, bool)
            for query, stored in zip(keys, self.keys, strict=True):
                equal &= true_mask(pc.equal(identity_keys(query.take(array_from_numpy(rows))),
                                            identity_keys(stored.take(array_from_numpy(at)))))
            found[rows[equal]] = self.order[at[equal]]
            rows, at = rows[~equal], at[~equal] + 1
            more = at < size
            rows, at = rows[more], at[more]
            more = self.codes[at] == q[rows]
            rows, at = rows[more], at[more]
        return found


def last_rows_of(held: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """For each of ``codes`` (int64 codes of one integer key column), the last row of
    ``held`` (the rows' codes) holding it, or -1: :meth:`KeySet.find` over ``held``
    backwards, without its copy and map (no sort when ``held`` is ascending already, as
    the rows of a table written in key order are)."""
    ascending = bool((held[1:] >= held[:-1]).all())
    if ascending:
        return last_of_codes(held, codes)
    order = np.argsort(held, kind="stable")  # (equal codes kept in row order)
    last = last_of_codes(held[order], codes)
    return np.where(last >= 0, order[last], -1)


def same_key_value(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> bool:
    """Whether the first values of two arrays of one key column are one key, told apart
    as :func:`~..bloom.identity_keys` does: floats by their bits at their own width (NaN
    is NaN, -0.0 is not 0.0; a float32 NaN is not widened, which would quiet a
    signalling one), where Python's ``==`` has NaN unequal to itself."""
    if pa.types.is_floating(a.type) or pa.types.is_floating(b.type):
        return bool(a.type.equals(b.type)) and \
            identity_keys(a.slice(0, 1))[0].as_py() == identity_keys(b.slice(0, 1))[0].as_py()
    return bool(a[0].as_py() == b[0].as_py())


def latest_positions(keys: Sequence[pa.Array | pa.ChunkedArray], rowaddr: np.ndarray, *,
                     nulls_equal: bool = False) -> np.ndarray:
    """Positions of the row with the highest address for every distinct key (keys told
    apart as :func:`~..bloom.identity_keys` does), in key order. A null key value is
    unequal to every other (SQL's ``=``) unless ``nulls_equal``: then nulls in one column
    are one value (a merger's generations hold no null keys: writers refuse them)."""
    n = rowaddr.size
    if n <= 1:
        return np.arange(n)
    columns = {f"k{i}": identity_keys(k) for i, k in enumerate(keys)}
    table = pa.table({**columns, "_a": array_from_numpy(rowaddr, pa.uint64()),
                      "_p": array_from_numpy(np.arange(n))})
    order = table.sort_by([(name, "ascending") for name in columns] + [("_a", "descending")])
    first = np.ones(n, bool)
    same = np.ones(n - 1, bool)
    for name in columns:
        c = order.column(name).combine_chunks()
        later, earlier = c.slice(1), c.slice(0, n - 1)
        equal = true_mask(pc.equal(later, earlier))
        if nulls_equal and c.null_count:
            equal |= true_mask(pc.and_(pc.is_null(later), pc.is_null(earlier)))
        same &= equal
    first[1:] = ~same
    return np.asarray(numpy_of(order.column("_p")))[first]


@dataclass
class KeyRows:
    """Every row's key of one source, its row address and whether it is a tombstone."""

    keys: list[pa.Array]
    rowaddr: np.ndarray          # uint64
    tombstone: np.ndarray        # bool
    _latest: np.ndarray | None = field(default=None, repr=False)
    _set: KeySet | None = field(default=None, repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.rowaddr.size)

    def latest(self) -> np.ndarray:
        """Positions of each key's newest row (the highest ``_rowaddr``)."""
        if self._latest is None:
            self._latest = latest_positions(self.keys, self.rowaddr)
        return self._latest

    def key_set(self) -> KeySet:
        """The distinct keys of the source (tombstones included: they hide older rows)."""
        if self._set is None:
            pos = array_from_numpy(self.latest())
            self._set = KeySet([k.take(pos) for k in self.keys])
        return self._set

    @property
    def nbytes(self) -> int:
        return int(sum(k.nbytes for k in self.keys) + self.rowaddr.nbytes * 3)


class Keys:
    """Keys a lookup still has to resolve: the key columns, their hash and key codes
    computed once and shared by every bloom filter and key set they meet."""

    def __init__(self, table: pa.Table | None, region: np.ndarray | None = None,
                 position: np.ndarray | None = None, *,
                 rows_of: tuple[pa.Table, np.ndarray] | None = None,
                 one: tuple[Sequence[object], Sequence[pa.DataType]] | None = None) -> None:
        """``one``: the one key's values as Python values and the key columns' types,
        as the caller already read them from ``table`` (hashed without reading them
        again)."""
        self._table = table
        self._one = one
        # a subset's rows in a table not taken yet: (that table, row numbers); see take
        self._rows_of = rows_of
        assert table is not None or rows_of is not None, "Keys need a table or rows of one"
        n = table.num_rows if table is not None else int(rows_of[1].size)  # type: ignore[index]
        # the region (index into the plan's regions) each key routes to; -1: any
        self.region = region if region is not None else np.full(n, -1, np.int64)
        # each key's row in the caller's keys table
        self.position = position if position is not None else np.arange(n)
        self._hashes: np.ndarray | None = None
        self._codes: np.ndarray | None = None

    @property
    def table(self) -> pa.Table:
        """The key columns (a subset's are taken from its origin on first use: most
        subsets only ever meet bloom filters and key codes)."""
        if self._table is None:
            assert self._rows_of is not None
            origin, rows = self._rows_of
            self._table = origin.take(array_from_numpy(rows, pa.int64()))
            self._rows_of = None
        return self._table

    @property
    def num_rows(self) -> int:
        return int(self.position.size)

    def first_column(self) -> pa.Array:
        """The first key column: of an int64 key without nulls whose codes are known (the
        values themselves), made from them without a copy, so a subset's key table is not
        taken for a search that reads one column (the base's key index)."""
        codes = self._codes
        if codes is not None:
            table = self._table if self._table is not None else \
                self._rows_of[0] if self._rows_of is not None else None
            if table is not None and table.num_columns == 1 and \
                    table.schema.field(0).type.equals(pa.int64()) and \
                    not table.column(0).null_count:
                return array_from_numpy(codes, pa.int64())
        return self.columns[0]

    @property
    def columns(self) -> list[pa.Array]:
        return [_combined(c) for c in self.table.columns]

    @property
    def hashes(self) -> np.ndarray:
        if self._hashes is None:
            one = None
            if self.num_rows == 1:  # one key: hashed in Python ints, no arrays
                given = self._one
                one = (key_hash_one(*given) if given is not None else
                       key_hash_one([c[0].as_py() for c in self.table.columns],
                                    [f.type for f in self.table.schema]))
            self._hashes = (key_hashes(self.columns) if one is None
                            else np.array([one], np.uint64))
        return self._hashes

    @property
    def codes(self) -> np.ndarray:
        if self._codes is None:
            if _is_int_key(self.columns):
                self._codes = key_codes(self.columns)
            else:
                self._codes = self.hashes.view(np.int64)
        return self._codes

    def find_in(self, key_set: KeySet) -> np.ndarray:
        """``key_set.find`` of these keys: by their codes alone when the set's key is
        one integer column and the codes are known (a subset's key columns are then
        never taken)."""
        if key_set.int_key and self._codes is not None:
            return key_set.find(None, self._codes)
        return key_set.find(self.columns, self.codes)

    def take(self, mask: np.ndarray) -> Keys:
        rows = np.flatnonzero(mask)
        if self._table is not None:
            rows_of = (self._table, rows)
        else:  # a subset of a subset: rows of the same origin
            assert self._rows_of is not None
            origin, within = self._rows_of
            rows_of = (origin, within[rows])
        out = Keys(None, self.region[rows], self.position[rows], rows_of=rows_of)
        if self._hashes is not None:
            out._hashes = self._hashes[mask]
        if self._codes is not None:
            out._codes = self._codes[mask]
        return out

    def for_region(self, region: int | None) -> Keys:
        """The keys that may live in ``region`` (all when None); a key routed to no
        region (-2) lives in none, one of unknown region (-1) in any."""
        if region is None:
            return self
        mask = (self.region == region) | (self.region == -1)
        return self if mask.all() else self.take(mask)
