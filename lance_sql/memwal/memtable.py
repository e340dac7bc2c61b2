"""The MemTable: a region's unflushed rows, readable the moment a put returns.

Each put (or replayed WAL entry) becomes one in-memory fragment, an Arrow table in the
MemTable schema (table columns + ``_tombstone``). Rows are addressed like Lance rows:
``_rowaddr = fragment_id << 32 | offset``, so within a MemTable a higher address is a later
write. Alongside the fragments the MemTable keeps:

* the WAL fragment mapping: fragment id -> (WAL entry id, position inside the entry);
* the primary-key bloom filter (written as the generation's ``bloom_filter.bin``);
* a primary-key index for point lookups: every row's key code (an integer key itself,
  else its 64-bit hash), sorted lazily when a lookup follows writes; candidates with an
  equal code are confirmed by comparing keys, and the highest address wins (last write
  wins);
* row and byte counts for the flush thresholds.

The key structures are brought up to date by :meth:`MemTable.refresh_index` — by a put
itself for indexed writes, otherwise by the writer's background thread — and always
before they are read (a lookup; the bloom filter when it is asked for, at a flush at the
latest), so a reader never misses a key and puts pay no hashing.

Thread safe: the writer inserts while readers look up and scan.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.bloom import PrimaryKeyBloom, identity_keys, key_hashes
from lance_sql.numpy_arrow import numpy_of

__all__ = ["ROW_ADDR", "MemFragment", "MemTable", "key_codes", "last_of_codes",
           "primary_key_bytes"]

ROW_ADDR = "_rowaddr"
_HASH_SLICE = 1 << 14  # rows hashed at once: ~120-400 bytes of temporaries per row


@dataclass(frozen=True)
class MemFragment:
    """One put (or one replayed WAL entry) and its size in memory."""

    fragment_id: int
    rows: pa.Table
    nbytes: int


def primary_key_bytes(keys: Sequence[pa.Array | pa.ChunkedArray]) -> int:
    """Bytes of the key values, counted as the reference does: the fixed width per value,
    or a variable-width value's bytes plus its 4-byte (8 for large types) offset."""
    total = 0
    for column in keys:
        t, n = column.type, len(column)
        if pa.types.is_string(t) or pa.types.is_binary(t):
            total += int(pc.sum(pc.binary_length(column)).as_py() or 0) + 4 * n
        elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            total += int(pc.sum(pc.binary_length(column)).as_py() or 0) + 8 * n
        else:
            total += (max(t.bit_width, 8) // 8) * n
    return total


class MemTable:
    """The fragments of one MemTable generation (see the module docstring)."""

    def __init__(self, schema: LanceSchema, primary_key: Sequence[str], generation: int
                 ) -> None:
        self.schema = schema
        self.arrow_schema = schema.to_arrow()
        self.primary_key = tuple(primary_key)
        self.generation = generation
        self.token = uuid.uuid4()  # this MemTable's identity, for caches of readers
        self._bloom = PrimaryKeyBloom()
        self._codes: list[np.ndarray] = []           # lookup codes of the first fragments
        # an int64 key is its own code: the codes are views of the rows (no copy)
        key_type = self.arrow_schema.field(self.primary_key[0]).type
        self._own_codes = len(self.primary_key) > 1 or not pa.types.is_int64(key_type)
        # a single integer key other than uint64: its type (see _one_code), else None
        self._int_key_type = (key_type if len(self.primary_key) == 1 and
                              pa.types.is_integer(key_type) and not pa.types.is_uint64(key_type)
                              else None)
        self._bloom_rows = 0                         # fragments already in the bloom filter
        self._index_lock = threading.Lock()          # one refresh_index at a time
        self._lock = threading.Lock()
        self._fragments: list[MemFragment] = []
        self._wal: dict[int, tuple[int, int]] = {}   # fragment id -> (WAL id, position)
        self._unflushed: list[int] = []              # fragment ids not in the WAL yet
        self._rows = 0
        self._bytes = 0
        self._unflushed_bytes = 0
        # (fragments covered, sorted hashes, their addresses); fragments only get appended,
        # so an index over the first k fragments stays right for a snapshot of k
        self._index: tuple[int, np.ndarray, np.ndarray] | None = None
        self.sealed = False

    # ------------------------------------------------------------------ writing
    def insert(self, rows: pa.Table, wal_entry: int | None = None, *,
               sealed_ok: bool = False) -> MemFragment:
        """Add ``rows`` (already in the MemTable schema) as a new fragment.

        ``wal_entry``: the rows come from that WAL entry (replay: a 1:1 mapping);
        None: they wait for the next WAL flush. ``sealed_ok``: a WAL entry may still join a
        sealed MemTable whose last WAL flush is in progress (a fenced writer's entry).
        """
        nbytes = rows.nbytes
        with self._lock:
            if self.sealed and not (sealed_ok and wal_entry is not None):
                raise RuntimeError(f"MemTable generation {self.generation} is sealed")
            fragment = MemFragment(len(self._fragments), rows, nbytes)
            self._fragments.append(fragment)
            self._rows += rows.num_rows
            self._bytes += fragment.nbytes
            if wal_entry is None:
                self._unflushed.append(fragment.fragment_id)
                self._unflushed_bytes += fragment.nbytes
            else:
                self._wal[fragment.fragment_id] = (wal_entry, 0)
        return fragment

    def _new_keys(self, done: int) -> Iterator[tuple[list[MemFragment], list[pa.Array]]]:
        """The key columns of the fragments from ``done`` on, a group of whole fragments
        of about ``_HASH_SLICE`` rows at a time: hashing and sorting allocate several
        temporaries per key, so a long backlog is worked off in bounded steps."""
        with self._lock:
            new = self._fragments[done:]
        start = 0
        while start < len(new):
            end, rows = start, 0
            while end < len(new) and (end == start or rows < _HASH_SLICE):
                rows += new[end].rows.num_rows
                end += 1
            group = new[start:end]
            yield group, [pa.concat_arrays([f.rows.column(k).combine_chunks() for f in group])
                          for k in self.primary_key]
            start = end

    def refresh_index(self, *, bloom: bool = False) -> None:
        """Bring the lookup index (and with ``bloom`` the bloom filter) up to date with
        the fragments added since, vectorised over groups of fragments."""
        with self._index_lock:
            done = len(self._codes)
            if self._own_codes:
                for group, keys in self._new_keys(done):
                    codes = key_codes(keys)
                    parts = np.split(codes, np.cumsum([f.rows.num_rows for f in group])[:-1])
                    with self._lock:
                        self._codes.extend(parts)
            else:
                with self._lock:
                    new = self._fragments[done:]
                views = [_int64_view(f.rows.column(self.primary_key[0])) for f in new]
                with self._lock:
                    self._codes.extend(views)
            if bloom:
                for group, keys in self._new_keys(self._bloom_rows):
                    total = len(keys[0])
                    # in slices: one put may be larger than a slice
                    for start in range(0, total, _HASH_SLICE):
                        self._bloom.add_hashes(key_hashes([k.slice(start, _HASH_SLICE)
                                                           for k in keys]))
                    self._bloom_rows += len(group)

    @property
    def bloom(self) -> PrimaryKeyBloom:
        """The bloom filter over every key inserted so far."""
        self.refresh_index(bloom=True)
        return self._bloom

    def _codes_of(self, count: int) -> list[np.ndarray]:
        self.refresh_index()
        with self._lock:
            return self._codes[:count]

    def take_unflushed(self) -> list[MemFragment]:
        """The fragments waiting for a WAL flush, oldest first (they stay unflushed until
        :meth:`mark_flushed`)."""
        with self._lock:
            return [self._fragments[i] for i in self._unflushed]

    def mark_flushed(self, fragment_ids: Sequence[int], wal_entry: int) -> None:
        """Record that ``fragment_ids`` (in this order) now live in WAL entry ``wal_entry``."""
        with self._lock:
            done = set(fragment_ids)
            for position, fid in enumerate(fragment_ids):
                self._wal[fid] = (wal_entry, position)
                self._unflushed_bytes -= self._fragments[fid].nbytes
            self._unflushed = [i for i in self._unflushed if i not in done]

    def seal(self) -> None:
        with self._lock:
            self.sealed = True

    # ------------------------------------------------------------------ state
    @property
    def num_rows(self) -> int:
        return self._rows

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes

    @property
    def num_fragments(self) -> int:
        return len(self._fragments)

    def has_unflushed(self) -> bool:
        with self._lock:
            return bool(self._unflushed)

    def is_flushed(self, fragment_id: int) -> bool:
        with self._lock:
            return fragment_id in self._wal

    def wal_mapping(self) -> dict[int, tuple[int, int]]:
        """Fragment id -> (WAL entry id, position in the entry)."""
        with self._lock:
            return dict(self._wal)

    def wal_entries(self) -> list[int]:
        """The WAL entries holding this MemTable's rows, ascending."""
        with self._lock:
            return sorted({entry for entry, _ in self._wal.values()})

    def flushed_addresses(self, positions: np.ndarray | None = None) -> np.ndarray:
        """For every row, in ``_rowaddr`` order, its row address in the flushed generation
        (whose fragment ``i`` is WAL entry ``wal_entries()[i]``): what an index built over
        MemTable addresses is remapped with at flush. Every fragment must be in the WAL.

        ``positions``: only the rows at these flat positions (row numbers across the
        fragments in order), in that order, written over ``positions`` itself (int64 or
        uint64) a slice at a time: a sorted index's permutation becomes its addresses
        without another row-sized array."""
        frags = self.fragments()
        mapping = self.wal_mapping()
        entry_index = {e: i for i, e in enumerate(self.wal_entries())}
        order = sorted(range(len(frags)), key=lambda i: mapping[i])  # entry, position
        starts = np.zeros(len(frags), np.int64)
        seen: dict[int, int] = {}
        for i in order:  # one step per fragment, not per row
            entry = mapping[i][0]
            starts[i] = seen.get(entry, 0)
            seen[entry] = starts[i] + frags[i].rows.num_rows
        sizes = np.array([f.rows.num_rows for f in frags], np.int64)
        gen_fragment = np.array([entry_index[mapping[i][0]] for i in range(len(frags))],
                                np.uint64)
        # row j of fragment i (flat position first_i + j) goes to
        # (gen_fragment_i << 32) + start_i + j: one per-fragment base, repeated, plus the
        # flat position, in wrapping uint64 arithmetic (the base may be "negative"); two
        # row-sized arrays, as the MemTable flush builds its index on these
        firsts = (np.cumsum(sizes) - sizes).astype(np.uint64)
        base = (gen_fragment << np.uint64(32)) + starts.astype(np.uint64) - firsts
        if positions is not None:
            out = positions.view(np.uint64)
            for start in range(0, len(out), _HASH_SLICE):
                flat = out[start:start + _HASH_SLICE]
                fragment = np.searchsorted(firsts, flat, side="right") - 1
                flat += base[fragment]  # wrapping, as above
            return out
        out = np.repeat(base, sizes)
        out += np.arange(len(out), dtype=np.uint64)
        return out

    def fragments(self) -> list[MemFragment]:
        with self._lock:
            return list(self._fragments)

    def column(self, name: str) -> pa.Array:
        """Every row's value of column ``name``, in address order."""
        frags = self.fragments()
        if not frags:
            return pa.array([], self.arrow_schema.field(name).type)
        return pa.concat_arrays([f.rows.column(name).combine_chunks() for f in frags])

    def key_columns(self) -> list[pa.Array]:
        """Every row's key columns, in address order."""
        frags = self.fragments()
        return [pa.concat_arrays([f.rows.column(k).combine_chunks() for f in frags])
                if frags else pa.array([], self.arrow_schema.field(k).type)
                for k in self.primary_key]

    # ------------------------------------------------------------------ reading
    def to_table(self, *, with_row_address: bool = True) -> pa.Table:
        """All rows (tombstones included), in write order, with ``_rowaddr``."""
        frags = self.fragments()
        if not frags:
            table = self.arrow_schema.empty_table()
        else:
            table = pa.concat_tables([f.rows for f in frags])
        if with_row_address:
            table = table.append_column(pa.field(ROW_ADDR, pa.uint64(), False),
                                        pa.array(_addresses(frags), pa.uint64()))
        return table

    def _sorted_index(self, frags: list[MemFragment]) -> tuple[np.ndarray, np.ndarray]:
        """(sorted key codes, their row addresses) over ``frags``; the rows of one code in
        address order (a stable sort of the rows in address order)."""
        with self._lock:
            index = self._index
        if index is not None and index[0] == len(frags):
            return index[1], index[2]
        per_fragment = self._codes_of(len(frags))
        hashes = (np.concatenate(per_fragment) if frags else np.zeros(0, np.int64))
        addresses = _addresses(frags)
        order = np.argsort(hashes, kind="stable")
        with self._lock:
            if self._index is None or self._index[0] < len(frags):
                self._index = (len(frags), hashes[order], addresses[order])
        return hashes[order], addresses[order]

    def lookup(self, keys: pa.Table, upto: int | None = None) -> np.ndarray:
        """For each row of ``keys`` (the key columns), the ``_rowaddr`` of the latest row
        with that key, or -1 when the MemTable has none (tombstones count as rows).
        ``upto``: among the first ``upto`` fragments only (a read's snapshot of it)."""
        frags = self.fragments()
        n = keys.num_rows
        result = np.full(n, -1, np.int64)
        if not frags or not n or upto == 0:
            return result
        # hashes cover the stored bytes, so the query must have the stored types
        query = [_typed(keys.column(k).combine_chunks(), self.arrow_schema.field(k).type)
                 for k in self.primary_key]
        q_of, cand = self._candidates(frags, key_codes(query))
        if upto is not None and upto < len(frags):
            seen = cand < np.uint64(upto << 32)
            q_of, cand = q_of[seen], cand[seen]
        if not q_of.size:
            return result
        if _exact_codes(query) and not query[0].null_count:  # its own code: no confirming
            np.maximum.at(result, q_of, cand.astype(np.int64))
            return result
        # confirm candidates by comparing the actual key values
        stored = _gather(frags, cand, self.primary_key)
        equal = np.ones(q_of.size, bool)
        for q_col, name in zip(query, self.primary_key, strict=True):
            a = identity_keys(q_col.take(pa.array(q_of)))
            b = identity_keys(stored.column(name))
            equal &= pc.fill_null(pc.equal(a, b), False).to_numpy(
                zero_copy_only=False)
        q_of, cand = q_of[equal], cand[equal].astype(np.int64)
        np.maximum.at(result, q_of, cand)
        return result

    def lookup_codes(self, codes: np.ndarray, key_type: pa.DataType,
                     upto: int | None = None) -> np.ndarray | None:
        """:meth:`lookup` of keys given by their :func:`key_codes` alone (no key table
        taken, cast or hashed: a lookup of many keys probes every region's MemTable),
        for keys of one integer column of this MemTable's key type, none null (their
        codes are then the keys themselves); None for any other key (the caller uses
        :meth:`lookup`). ``upto``: as for :meth:`lookup`."""
        if len(self.primary_key) != 1 or not pa.types.is_integer(key_type) or \
                not key_type.equals(self.arrow_schema.field(self.primary_key[0]).type):
            return None
        frags = self.fragments()
        sorted_codes, sorted_addr = self._sorted_index(frags)
        if upto is not None and upto < len(frags):
            return self._lookup_codes_upto(sorted_codes, sorted_addr, codes, upto)
        # a code's rows are in address order (a stable sort of codes in address order):
        # its latest row, the highest address, is the last of its code
        last = last_of_codes(sorted_codes, codes)
        if not sorted_addr.size:
            return last  # (all -1: nothing held)
        return np.where(last >= 0, sorted_addr[last].view(np.int64), -1)

    @staticmethod
    def _lookup_codes_upto(sorted_codes: np.ndarray, sorted_addr: np.ndarray,
                           codes: np.ndarray, upto: int) -> np.ndarray:
        """:meth:`lookup_codes` among the first ``upto`` fragments: a code's rows there
        are the first of its rows (they are in address order), so its latest is the last
        of those."""
        seen = np.zeros(sorted_addr.size + 1, np.int64)
        np.cumsum(sorted_addr < np.uint64(upto << 32), out=seen[1:])
        lo = np.searchsorted(sorted_codes, codes, "left")
        hi = np.searchsorted(sorted_codes, codes, "right")
        count = seen[hi] - seen[lo]
        last = lo + count - 1
        return np.where(count > 0, sorted_addr[np.maximum(last, 0)].view(np.int64)
                        if sorted_addr.size else -1, -1)

    def _candidates(self, frags: list[MemFragment], codes: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(query position, row address) of every row of ``frags`` whose key code equals
        one of ``codes``."""
        sorted_codes, sorted_addr = self._sorted_index(frags)
        lo = np.searchsorted(sorted_codes, codes, "left")
        hi = np.searchsorted(sorted_codes, codes, "right")
        counts = hi - lo
        q_of = np.repeat(np.arange(codes.size), counts)
        starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
        return q_of, sorted_addr[starts + np.arange(q_of.size)]

    def lookup_one(self, keys: pa.Table, upto: int | None = None
                   ) -> tuple[int, pa.Table] | None:
        """``lookup`` of a table of one key, and that row: (its ``_rowaddr``, a one-row
        slice of its fragment, every stored column), None when the MemTable has none.
        A single integer key takes two binary searches and a slice, no batch arrays;
        other keys go through :meth:`lookup`. ``upto``: as for :meth:`lookup`."""
        frags = self.fragments()
        if not frags or keys.num_rows != 1 or upto == 0:
            return None
        code = self._one_code(keys)
        if code is not None:
            sorted_codes, sorted_addr = self._sorted_index(frags)
            lo = int(sorted_codes.searchsorted(code, "left"))
            hi = int(sorted_codes.searchsorted(code, "right"))
            if upto is not None and upto < len(frags):  # its rows there come first
                hi = lo + int(np.count_nonzero(sorted_addr[lo:hi] < np.uint64(upto << 32)))
            if hi == lo:
                return None
            address = int(sorted_addr[lo] if hi == lo + 1 else sorted_addr[lo:hi].max())
        else:
            address = int(self.lookup(keys, upto)[0])
            if address < 0:
                return None
        fragment = frags[address >> 32] if (address >> 32) < len(frags) else None
        if fragment is None:  # put meanwhile: the address lies in a newer fragment
            fragment = self.fragments()[address >> 32]
        return address, fragment.rows.slice(address & 0xFFFFFFFF, 1)

    def _one_code(self, keys: pa.Table) -> int | None:
        """The :func:`key_codes` code of the one key in ``keys`` when it is a single
        non-null integer of the stored type other than uint64 (its code is then the value
        itself, read as a Python int); None otherwise (the caller computes codes)."""
        stored = self._int_key_type
        if stored is None:
            return None
        column = keys.column(self.primary_key[0])
        if column.null_count or not column.type.equals(stored):
            return None
        return column[0].as_py()

    def take(self, addresses: np.ndarray) -> pa.Table:
        """Rows by ``_rowaddr`` (addresses must exist)."""
        frags = self.fragments()
        if not frags:
            return self.arrow_schema.empty_table()
        return _gather(frags, np.asarray(addresses, np.uint64), None)


def _typed(column: pa.Array, t: pa.DataType) -> pa.Array:
    return column if column.type.equals(t) else column.cast(t)


def _exact_codes(keys: Sequence[pa.Array]) -> bool:
    """Whether :func:`key_codes` of ``keys`` is the key itself (equal codes: equal keys)."""
    return len(keys) == 1 and pa.types.is_integer(keys[0].type)


def last_of_codes(sorted_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """For each of ``codes``, the position of the last entry of ``sorted_codes``
    (ascending) equal to it, or -1."""
    if not sorted_codes.size:
        return np.full(codes.size, -1, np.int64)
    # the last of equal codes is just left of their right end (a code below every code
    # held finds the first, which is larger: never equal)
    last = np.searchsorted(sorted_codes, codes, "right")
    last -= 1
    np.maximum(last, 0, out=last)
    return np.where(sorted_codes[last] == codes, last, -1)


def key_codes(keys: Sequence[pa.Array]) -> np.ndarray:
    """Sortable codes of keys, equal for equal keys: a single integer key is its own code
    (no hashing on the write path); other keys use the bloom filter's 64-bit hash, and
    lookups confirm equal codes by comparing the keys."""
    if _exact_codes(keys):
        values = numpy_of(keys[0])
        return values.view(np.int64) if values.dtype == np.uint64 else values.astype(np.int64)
    return key_hashes(keys).view(np.int64)


def _int64_view(column: pa.ChunkedArray) -> np.ndarray:
    """The values of an int64 key column (never null), without a copy when it has one
    chunk, as a put's rows do."""
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=False)
    return column.to_numpy()


def _addresses(frags: list[MemFragment]) -> np.ndarray:
    if not frags:
        return np.zeros(0, np.uint64)
    sizes = np.array([f.rows.num_rows for f in frags], np.int64)
    ids = np.repeat(np.array([f.fragment_id for f in frags], np.uint64), sizes)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    offsets = (np.arange(int(sizes.sum()), dtype=np.int64) - starts).astype(np.uint64)
    return (ids << np.uint64(32)) | offsets


_GATHER_FRAGMENTS = 8  # above this many fragments touched, one concatenation is cheaper


def _gather(frags: list[MemFragment], addresses: np.ndarray,
            columns: Sequence[str] | None) -> pa.Table:
    """Rows at ``addresses`` (in that order), ``columns`` of them (all when None),
    taken from only the fragments they live in: a lookup touches one or a few
    fragments, and concatenating every fragment per lookup costs more than the take."""
    addresses = np.asarray(addresses).astype(np.uint64)
    fids = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    touched = np.unique(fids)

    def rows(f: MemFragment) -> pa.Table:
        return f.rows if columns is None else f.rows.select(list(columns))

    if touched.size == 0:
        return rows(frags[0]).slice(0, 0)
    if touched.size == 1:
        return rows(frags[int(touched[0])]).take(pa.array(offsets))
    if touched.size > _GATHER_FRAGMENTS:
        table = pa.concat_tables([rows(f) for f in frags])
        return table.take(pa.array(_flat_positions(frags, addresses)))
    order = np.argsort(fids, kind="stable")
    parts = [rows(frags[int(f)]).take(pa.array(offsets[order][fids[order] == f]))
             for f in touched]
    back = np.empty(order.size, np.int64)
    back[order] = np.arange(order.size)
    return pa.concat_tables(parts).take(pa.array(back))


def _flat_positions(frags: list[MemFragment], addresses: np.ndarray) -> np.ndarray:
    """Row positions in the concatenation of ``frags`` for row addresses."""
    addresses = np.asarray(addresses).astype(np.uint64)
    sizes = np.array([f.rows.num_rows for f in frags], np.int64)
    firsts = np.cumsum(sizes) - sizes
    fids = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return firsts[fids] + offsets
