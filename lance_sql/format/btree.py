"""Lance's scalar BTREE index, as pylance 14.0.2 lays it out (pure: tables in, tables out).

Facts measured against pylance 14.0.2 (``ds.create_scalar_index(col, "BTREE")``):

* The manifest's index section gets an entry named ``{column}_idx`` (by default) with
  ``fields = [field id]``, ``dataset_version`` = the version the index was trained on,
  the covered fragments as a roaring ``fragment_bitmap``, ``index_version = 0``,
  ``index_details`` = an empty Any of type ``/lance.table.BTreeIndexDetails``,
  ``created_at`` (ms since the epoch) and ``files`` (name and size of each file below).
* ``_indices/{uuid}/page_data.lance`` (Lance file 2.2) holds every row of the covered
  fragments, schema ``values: <key type>`` (nullable), ``ids: uint64 not null``, sorted by
  value with nulls first; equal values mostly come in row-address order, but not always
  (equal NaNs did not), so nothing may rely on it. ``ids`` are *row
  addresses* (``fragment << 32 | offset``) -- also on stable-row-id tables, where pylance
  remaps them when compaction moves rows. On such tables it writes ``index_version = 1``
  and reads an ``index_version = 0`` index as holding stable row ids (so must we).
* ``_indices/{uuid}/page_lookup.lance`` (Lance file 2.2) has one row per page of
  ``batch_size`` (4096) consecutive entries of page_data: ``min`` and ``max`` (key type;
  simply the page's first and last entry, so ``min`` is null when the page starts with
  nulls), ``null_count: uint32``, ``page_idx: uint32``; schema metadata ``batch_size`` =
  "4096" and ``range_partitioned`` = "false". Page ``i`` is rows
  ``[i * batch_size, (i + 1) * batch_size)`` of page_data.
* Floats sort by IEEE total order (NaN after +inf, a negative NaN before -inf), so a page
  holding NaN has a NaN max.
* ``optimize_indices`` commits a CreateIndex whose new entry (new uuid, same name and
  ``dataset_version``) covers the old fragments plus the new ones, with the old entry in
  ``removed_indices``: one merged index, not a delta. ``drop_index`` commits a CreateIndex
  with no new entry and the dropped one in ``removed_indices``. Deletes change nothing in
  the index (readers filter by deletion vectors).
* Compaction (Rewrite) lists ``rewritten_indices`` (old uuid -> new uuid, new details and
  files); the new index holds the moved rows at their new addresses and the bitmap
  loses the old fragments and gains the new ones. Entries of fragments that were deleted
  outright stay in the files (and the bitmap) -- readers must ignore fragments that no
  longer exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import FormatError
from lance_sql.float_order import float_key, float_keys, total_order
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.sorted_sets import sorted_unique

TYPE_URL = "/lance.table.BTreeIndexDetails"
PAGE_DATA = "page_data.lance"
PAGE_LOOKUP = "page_lookup.lance"
INDEX_FILES = (PAGE_DATA, PAGE_LOOKUP)
BATCH_SIZE = 4096
VALUES, IDS = "values", "ids"
INDEX_VERSION = 0
# On stable-row-id tables an index_version below this means ``ids`` are stable row ids;
# pylance 14.0.2 writes this version there and stores row addresses.
ROW_ADDRESS_IDS = 1


def page_data_schema(key_type: pa.DataType) -> pa.Schema:
    """Schema of a BTREE index's sorted page data: key values and row ids."""
    return pa.schema([pa.field(VALUES, key_type), pa.field(IDS, pa.uint64(), nullable=False)])


def lookup_schema(key_type: pa.DataType, batch_size: int = BATCH_SIZE) -> pa.Schema:
    """Schema of a BTREE index's page lookup: per page, its key range and null count."""
    return pa.schema(
        [pa.field("min", key_type), pa.field("max", key_type),
         pa.field("null_count", pa.uint32(), nullable=False),
         pa.field("page_idx", pa.uint32(), nullable=False)],
        metadata={"batch_size": str(batch_size), "range_partitioned": "false"},
    )


def sort_entries(values: pa.Array, ids: np.ndarray) -> pa.Table:
    """page_data's rows: (value, id) sorted by value, nulls first; floats by IEEE total
    order (NaN last, a negative NaN first, as pylance). The order of equal values is
    unspecified (readers collect the ids of a key into a set, as pylance's do)."""
    ids = np.asarray(ids, np.uint64)
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    keys = _order_keys(values)
    if keys is None and _is_bytes(values.type):
        valid = numpy_of(values.is_valid())
        present = np.flatnonzero(valid)
        order = np.concatenate([np.flatnonzero(~valid), present[bytes_order(values, present)]])
        return pa.Table.from_arrays([values.take(array_from_numpy(order)),
                                     array_from_numpy(ids[order])],
                                    schema=page_data_schema(values.type))
    if keys is None:
        arrow_order = pc.array_sort_indices(values, order="ascending", null_placement="at_start")
        return pa.Table.from_arrays(
            [values.take(arrow_order), array_from_numpy(ids[numpy_of(arrow_order)])],
            schema=page_data_schema(values.type))
    if values.null_count:
        valid = numpy_of(values.is_valid())
        present = np.flatnonzero(valid)
        order = np.concatenate([np.flatnonzero(~valid),
                                present[np.argsort(keys[present], kind="quicksort")]])
    else:
        order = np.argsort(keys, kind="quicksort")
    # one row-sized array at a time: a MemWAL flush sorts a whole MemTable's keys
    del keys
    sorted_ids = array_from_numpy(ids[order])
    del ids
    sorted_values = values.take(array_from_numpy(order))
    return pa.Table.from_arrays([sorted_values, sorted_ids],
                                schema=page_data_schema(sorted_values.type))


def _order_keys(values: pa.Array) -> np.ndarray | None:
    """Numbers sorting like the values (nulls arbitrary), or None for non-numeric keys."""
    t = values.type
    if pa.types.is_floating(t):  # IEEE total order, as pylance sorts them (readers' keys
        # merge what SQL holds equal: the zeros, NaNs of one sign; see float_keys)
        return total_order(values.fill_null(pa.scalar(0, t)).to_numpy(zero_copy_only=False))
    if pa.types.is_boolean(t):
        return numpy_of(values.fill_null(False)).view(np.uint8)
    if pa.types.is_integer(t):
        if not values.null_count:  # a view: fill_null would copy the values
            return numpy_of(values)
        return values.fill_null(pa.scalar(0, t)).to_numpy(zero_copy_only=False)
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        ints = values.view(pa.int32() if t.bit_width == 32 else pa.int64())
        return numpy_of(ints.fill_null(0))
    return None


def _is_bytes(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def bytes_order(values: pa.Array, rows: np.ndarray) -> np.ndarray:
    """How to order ``rows`` (positions of non-null entries of a string or binary array)
    byte-wise: the positions into ``rows``, sorted.

    Arrow sorts strings one comparison at a time; this sorts integers instead: first by
    each string's leading 8 bytes (big-endian, zero-padded), then, only inside groups
    still tied, by the next few bytes with the group's rank in the high bits and a
    "string ended" flag (an ended string sorts first, shorter before longer), until every
    group is resolved or holds equal strings.
    """
    n = len(rows)
    if n < 2:
        return np.arange(n)
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32)
    offsets = offsets[values.offset: values.offset + len(values) + 1].astype(np.int64)
    buffer = values.buffers()[2]
    data = np.frombuffer(buffer, np.uint8) if buffer is not None else np.empty(0, np.uint8)
    padded = np.concatenate([data, np.zeros(8, np.uint8)])
    # every 8-byte window of the data, without copying: window i starts at byte i
    windows = np.lib.stride_tricks.as_strided(padded, (len(data) + 1, 8), (1, 1),
                                              writeable=False)
    starts, lens = offsets[rows], offsets[rows + 1] - offsets[rows]
    keep = np.array([~np.uint64(0) << np.uint64(64 - 8 * k) if k else np.uint64(0)
                     for k in range(9)], np.uint64)  # the leading k bytes of a word

    def block(idx: np.ndarray, skip: int, width: int) -> np.ndarray:
        """Bytes [skip, skip+width) of strings ``idx`` as big-endian integers (0-padded)."""
        first = np.minimum(starts[idx] + skip, len(data))
        words = windows[first].view(">u8").reshape(-1).astype(np.uint64)
        words &= keep[np.clip(lens[idx] - skip, 0, 8)]
        return words >> np.uint64(64 - 8 * width)

    everyone = np.arange(n)
    # bytes every string starts with tell nothing: skip them (keys like "user-123...")
    shortest, done_before = int(lens.min()), 0
    head = block(everyone, 0, 8)
    while shortest > done_before:
        spread = np.bitwise_or.reduce(head ^ head[0])
        same = 8 if spread == 0 else (63 - int(spread).bit_length() + 1) // 8
        same = min(same, shortest - done_before)
        if same == 0:
            break
        done_before += same
        head = block(everyone, done_before, 8)
    head = (head ^ np.uint64(1 << 63)).view(np.int64)
    order = np.argsort(head, kind="quicksort")
    ordered = head[order]
    boundary = np.r_[True, ordered[1:] != ordered[:-1]]
    final = np.zeros(n, dtype=bool)
    rank_bits = n.bit_length()
    width = max(1, (62 - rank_bits) // 8)
    payload_bits = 8 * width
    skip = done_before + 8
    while True:
        starts_at = np.flatnonzero(boundary)
        sizes = np.diff(np.r_[starts_at, n])
        active = np.repeat(sizes > 1, sizes) & ~final
        if not active.any():
            return order
        rank = (np.cumsum(boundary) - 1).astype(np.int64)
        pos = np.flatnonzero(active)
        members = order[pos]
        more = lens[members] > skip
        tail = np.where(more, block(members, skip, width).astype(np.int64),
                        lens[members] - done_before)
        key = (rank[pos] << (payload_bits + 1)) | (more.astype(np.int64) << payload_bits) | tail
        o = np.argsort(key, kind="quicksort")
        order[pos] = members[o]
        key = key[o]
        boundary[pos[1:]] |= key[1:] != key[:-1]
        final[pos] = ~more[o]  # ended strings of equal length: equal, nothing left to sort
        done_before, skip = skip, skip + width


# fixed_bytes builds no array wider than this per value, nor larger than this in all
MAX_FIXED_WIDTH = 256
MAX_FIXED_BYTES = 16 << 20


def fixed_bytes(values: pa.Array) -> np.ndarray | None:
    """Non-null strings / binaries as a numpy array of fixed-width bytes (``S<w>``, the
    widest value's width, NUL-padded), which numpy sorts and searches byte-wise as Arrow
    orders them, since no value ends in a NUL byte. None when one does (padding and
    value would compare equal), or the array would be wider than ``MAX_FIXED_WIDTH`` a
    value or larger than ``MAX_FIXED_BYTES``. Built with array operations, no
    per-value Python."""
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32, n + 1,
                            values.offset * (8 if wide else 4)).astype(np.int64)
    buffer = values.buffers()[2]
    data = (np.frombuffer(buffer, np.uint8) if buffer is not None
            else np.empty(0, np.uint8))[offsets[0]:offsets[-1]]
    offsets -= offsets[0]
    lengths = np.diff(offsets)
    width = max(1, int(lengths.max())) if n else 1
    if width > MAX_FIXED_WIDTH or n * width > MAX_FIXED_BYTES:
        return None
    ends = offsets[1:][lengths > 0] - 1
    if ends.size and not data[ends].all():  # a value ending in NUL
        return None
    out = np.zeros(n * width, np.uint8)
    starts = np.arange(n, dtype=np.int64) * width
    out[np.arange(data.size, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)] = data
    return out.view(f"S{width}")


def arrow_of_fixed(fixed: np.ndarray, t: pa.DataType) -> pa.Array:
    """Strings / binaries of type ``t`` from the fixed-width bytes :func:`fixed_bytes`
    made (their padding cut off: no value ends in a NUL byte)."""
    n, width = len(fixed), fixed.dtype.itemsize
    grid = np.ascontiguousarray(fixed).view(np.uint8).reshape(n, width)
    filled = grid != 0
    # a value's length: past its last non-NUL byte
    lengths = np.where(filled.any(axis=1), width - np.argmax(filled[:, ::-1], axis=1), 0)
    data = grid[np.arange(width) < lengths[:, None]]
    wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    offsets = np.zeros(n + 1, np.int64 if wide else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def build_lookup(data: pa.Table, batch_size: int = BATCH_SIZE) -> pa.Table:
    """page_lookup's rows for sorted ``data`` (see :func:`sort_entries`)."""
    column = data.column(VALUES)
    # combine_chunks copies even a single chunk: a whole column, on a MemWAL flush's path
    values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    n = len(values)
    starts = np.arange(0, n, batch_size, dtype=np.int64)
    ends = np.minimum(starts + batch_size, n)
    valid = numpy_of(values.is_valid())
    # nulls come first, so a page's null count is how much of it lies before the first value
    first_value = int(np.argmax(valid)) if valid.any() else n
    null_counts = np.clip(first_value - starts, 0, ends - starts).astype(np.uint32)
    return pa.Table.from_arrays(
        [values.take(array_from_numpy(starts)), values.take(array_from_numpy(ends - 1)),
         array_from_numpy(null_counts, pa.uint32()),
         array_from_numpy(np.arange(len(starts), dtype=np.uint32), pa.uint32())],
        schema=lookup_schema(values.type, batch_size),
    )


@dataclass(frozen=True)
class PageLookup:
    """The decoded page_lookup: bounds of each page of a page_data of ``num_rows`` rows."""

    mins: pa.Array
    maxs: pa.Array
    null_counts: np.ndarray
    batch_size: int
    num_rows: int

    @classmethod
    def decode(cls, table: pa.Table, num_rows: int, path: str) -> PageLookup:
        meta = table.schema.metadata or {}
        if meta.get(b"range_partitioned", b"false") != b"false":
            raise FormatError(f"{path}: range-partitioned BTREE indices are not supported")
        try:
            batch_size = int(meta.get(b"batch_size", str(BATCH_SIZE).encode()))
            names = set(table.column_names)
            if not {"min", "max", "null_count", "page_idx"} <= names:
                raise ValueError(f"columns {sorted(names)}")
            pages = table.num_rows
            page_idx = numpy_of(table.column("page_idx"))
        except (ValueError, pa.ArrowException) as exc:
            raise FormatError(f"{path}: not a BTREE page lookup ({exc})") from exc
        if batch_size <= 0 or pages != -(-num_rows // batch_size) or not np.array_equal(
                page_idx, np.arange(pages)):
            raise FormatError(f"{path}: {pages} pages of {batch_size} do not match "
                              f"{num_rows} indexed rows")
        return cls(table.column("min").combine_chunks(), table.column("max").combine_chunks(),
                   numpy_of(table.column("null_count")).astype(np.int64), batch_size,
                   num_rows)

    @property
    def num_pages(self) -> int:
        return len(self.null_counts)

    def page_rows(self, page: int) -> tuple[int, int]:
        start = page * self.batch_size
        return start, min(self.batch_size, self.num_rows - start)

    def page_lengths(self) -> np.ndarray:
        starts = np.arange(self.num_pages, dtype=np.int64) * self.batch_size
        return np.minimum(self.batch_size, self.num_rows - starts)

    def null_pages(self) -> np.ndarray:
        return np.flatnonzero(self.null_counts > 0)

    def nbytes(self) -> int:
        return self.mins.nbytes + self.maxs.nbytes + self.null_counts.nbytes


# ------------------------------------------------------------------------ page selection
@dataclass(frozen=True)
class KeyRange:
    """Keys between two bounds (None: unbounded); ``=`` is a range of one key."""

    lower: pa.Scalar | None
    upper: pa.Scalar | None
    lower_inclusive: bool = True
    upper_inclusive: bool = True


@dataclass(frozen=True)
class KeySet:
    """Keys equal to one of ``values`` (an array of the key type, no nulls)."""

    values: pa.Array


@dataclass(frozen=True)
class KeyIsNull:
    """Null keys."""


KeyQuery = KeyRange | KeySet | KeyIsNull


Side = Literal["left", "right"]  # of a binary search


def _sortable_key(value: pa.Scalar) -> Any:
    """The sort key of ``value``, whose type has one (pages with ``keys`` hold such)."""
    key = sortable(value)
    assert key is not None
    return key[0]


def sortable(values: pa.Array | pa.Scalar) -> np.ndarray | None:
    """``values`` as a numpy array ordered like the index (nulls as the lowest key), or
    None for key types without such a form."""
    if isinstance(values, pa.Scalar) and values.is_valid and pa.types.is_integer(values.type):
        # one key of a point query: no one-element Arrow round trip (a hot path)
        return np.array([values.as_py()], values.type.to_pandas_dtype())
    array = values if isinstance(values, pa.Array) else pa.array([values], values.type)
    t = array.type
    if pa.types.is_floating(t):  # as SQL orders them (see lance_sql.float_order)
        keys = float_keys(numpy_of(array.fill_null(0.0) if array.null_count else array))
        if array.null_count:
            keys[numpy_of(array.is_null())] = np.iinfo(keys.dtype).min
        return keys
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if array.null_count:
            fill = False if pa.types.is_boolean(t) else np.iinfo(t.to_pandas_dtype()).min
            array = array.fill_null(pa.scalar(fill, t))
        return numpy_of(array)
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t) or \
            pa.types.is_duration(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        ints = array.view(width)
        if ints.null_count:
            ints = ints.fill_null(pa.scalar(np.iinfo(width.to_pandas_dtype()).min, width))
        return numpy_of(ints)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.array(["" if v is None else v for v in array.to_pylist()], dtype=object)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return np.array([b"" if v is None else v for v in array.to_pylist()], dtype=object)
    return None


def is_sorted(keys: np.ndarray) -> bool:
    """True when ``keys`` (:func:`sortable`'s) ascend."""
    if len(keys) < 2:
        return True
    return bool(np.all(keys[1:] >= keys[:-1]))


@dataclass(frozen=True)
class PageBounds:
    """Page bounds ready for binary search (``None`` keys: compare page by page)."""

    lookup: PageLookup
    min_keys: np.ndarray | None
    max_keys: np.ndarray | None
    # string / binary bounds as fixed-width bytes (see fixed_bytes): a set of many such
    # keys finds its pages by numpy searches, not Python comparisons (None: no such form)
    min_fixed: np.ndarray | None = None
    max_fixed: np.ndarray | None = None

    @classmethod
    def of(cls, lookup: PageLookup) -> PageBounds:
        lo, hi = sortable(lookup.mins), sortable(lookup.maxs)
        if lo is None or hi is None or not (is_sorted(lo) and is_sorted(hi)):
            return cls(lookup, None, None)
        mins, maxs = lookup.mins, lookup.maxs
        if _is_bytes(mins.type) and len(mins):
            # a null bound (a page of nulls first) as the lowest key, as sortable has it
            lowest = pa.scalar(b"", mins.type)
            lo_fixed = fixed_bytes(mins.fill_null(lowest) if mins.null_count else mins)
            hi_fixed = fixed_bytes(maxs.fill_null(lowest) if maxs.null_count else maxs)
            if lo_fixed is not None and hi_fixed is not None:
                return cls(lookup, lo, hi, lo_fixed, hi_fixed)
        return cls(lookup, lo, hi)

    def fixed_pages(self, wanted: np.ndarray) -> np.ndarray | None:
        """Pages that may hold one of ``wanted`` (string / binary keys as fixed-width
        bytes), found by numpy searches of the bounds (None: no fixed-width bounds)."""
        if self.min_fixed is None or self.max_fixed is None:
            return None
        return _ranges_union(np.searchsorted(self.max_fixed, wanted, side="left"),
                             np.searchsorted(self.min_fixed, wanted, side="right"))

    def pages(self, query: KeyQuery) -> np.ndarray:
        """Pages that may hold keys matching ``query`` (sorted page numbers)."""
        if isinstance(query, KeyIsNull):
            return self.lookup.null_pages()
        if self.min_keys is not None and self.max_keys is not None:
            return self._searched(query)
        return self._compared(query)

    def _searched(self, query: KeyRange | KeySet) -> np.ndarray:
        lo_keys, hi_keys = self.min_keys, self.max_keys
        assert lo_keys is not None and hi_keys is not None
        if isinstance(query, KeySet):
            keys = sortable(query.values)
            if keys is None:
                return self._compared(query)
            return _ranges_union(np.searchsorted(hi_keys, keys, side="left"),
                                 np.searchsorted(lo_keys, keys, side="right"))
        first, stop = 0, len(hi_keys)
        if query.lower is not None:
            key = sortable(query.lower)
            if key is None:
                return self._compared(query)
            side: Side = "left" if query.lower_inclusive else "right"
            first = int(np.searchsorted(hi_keys, key[0], side=side))
        if query.upper is not None:
            key = sortable(query.upper)
            if key is None:
                return self._compared(query)
            side = "right" if query.upper_inclusive else "left"
            stop = int(np.searchsorted(lo_keys, key[0], side=side))
        return np.arange(first, max(first, stop), dtype=np.int64)

    def _compared(self, query: KeyRange | KeySet) -> np.ndarray:
        """Page by page with Arrow comparisons: for keys without a numpy form, or bounds
        that are not in order."""
        mins, maxs = self.lookup.mins, self.lookup.maxs
        partial_nulls = numpy_of(mins.is_null()) & (
            self.lookup.null_counts < self.lookup.page_lengths())
        unknown = partial_nulls
        if pa.types.is_floating(mins.type):  # NaN sorts by total order, not SQL's
            unknown = unknown | _true(pc.is_nan(mins)) | _true(pc.is_nan(maxs))

        def in_range(lower: pa.Scalar | None, upper: pa.Scalar | None, lower_inc: bool,
                     upper_inc: bool) -> np.ndarray:
            keep = np.ones(len(mins), dtype=bool)
            if lower is not None:
                keep &= _true((pc.greater_equal if lower_inc else pc.greater)(maxs, lower))
            if upper is not None:
                below = _true((pc.less_equal if upper_inc else pc.less)(mins, upper))
                keep &= below | partial_nulls
            return keep | unknown

        if isinstance(query, KeySet):
            keep = np.zeros(len(mins), dtype=bool)
            for value in query.values:
                keep |= in_range(value, value, True, True)
        else:
            keep = in_range(query.lower, query.upper, query.lower_inclusive,
                            query.upper_inclusive)
        return np.flatnonzero(keep)


def _true(mask: pa.Array) -> np.ndarray:
    return numpy_of(mask.fill_null(False))


def _ranges_union(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Sorted unique members of the ranges ``[starts[i], stops[i])``."""
    if len(starts) == 1:  # one key's range (a point lookup): no set arithmetic
        return np.arange(int(starts[0]), max(int(starts[0]), int(stops[0])), dtype=np.int64)
    keep = stops > starts
    starts, stops = starts[keep], stops[keep]
    if not len(starts):
        return np.empty(0, np.int64)
    lengths = stops - starts
    before = np.cumsum(lengths) - lengths
    members = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)
    return sorted_unique(members)


# --------------------------------------------------------------------- matching entries
def matches(values: pa.Array, query: KeyQuery) -> np.ndarray:
    """Which ``values`` satisfy ``query``, as SQL compares them (a NULL never matches; for
    floats as lance_sql.float_order keys them: NaN equals NaN of its sign, above every
    number or (sign bit set) below, and -0.0 equals 0.0, as DataFusion and lance_sql's
    scans order them)."""
    if isinstance(query, KeyIsNull):
        return numpy_of(values.is_null())
    if pa.types.is_floating(values.type):
        return _float_matches(values, query)
    if isinstance(query, KeySet):
        return _true(pc.is_in(values, value_set=query.values, skip_nulls=True))
    keep = numpy_of(values.is_valid())
    if query.lower is not None:
        keep &= _true((pc.greater_equal if query.lower_inclusive else pc.greater)(
            values, query.lower))
    if query.upper is not None:
        keep &= _true((pc.less_equal if query.upper_inclusive else pc.less)(
            values, query.upper))
    return keep


def _float_matches(values: pa.Array, query: KeyRange | KeySet) -> np.ndarray:
    """:func:`matches` for floats, on their SQL order keys (see lance_sql.float_order)."""
    valid = numpy_of(values.is_valid())
    keys = float_keys(numpy_of(values.fill_null(0.0) if values.null_count else values))
    if isinstance(query, KeySet):
        wanted = query.values.drop_null() if query.values.null_count else query.values
        wanted_keys = float_keys(numpy_of(wanted.cast(values.type)))
        return valid & np.isin(keys, wanted_keys)
    keep = valid.copy()
    width = keys.dtype.itemsize
    if query.lower is not None:
        k = float_key(float(query.lower.as_py()), width)
        keep &= (keys >= k) if query.lower_inclusive else (keys > k)
    if query.upper is not None:
        k = float_key(float(query.upper.as_py()), width)
        keep &= (keys <= k) if query.upper_inclusive else (keys < k)
    return keep


@dataclass(frozen=True)
class SortedKeys:
    """The values of one page of page_data, ready to search: its sorted non-null keys as
    numbers when the key type has such a form, or the strings / binaries themselves when
    they ascend (binary search either way), else tested value by value. Searches give
    positions in the page; the ids there are read apart."""

    values: pa.Array
    keys: np.ndarray | None  # sortable form of values[nulls:], None: not searchable
    nulls: int
    ordered_bytes: bool = False  # values[nulls:] are strings / binaries in byte order
    dense: bool = False  # keys are integers each one above the last (keys[i] == keys[0] + i)
    # ordered strings / binaries as numpy fixed-width bytes (see fixed_bytes), for a set of
    # many keys searched in many pages with numpy; None: not built (too wide, or a value
    # ends in a NUL byte, which that form cannot tell from its padding)
    fixed: np.ndarray | None = None

    @classmethod
    def of(cls, values: pa.Array) -> SortedKeys:
        nulls = values.null_count
        if nulls and numpy_of(values.slice(0, nulls).is_valid()).any():
            return cls(values, None, nulls)  # nulls not first: test value by value
        rest = values.slice(nulls)
        if _is_bytes(rest.type):
            ordered = len(rest) < 2 or bool(pc.all(pc.less_equal(
                rest.slice(0, len(rest) - 1), rest.slice(1))).as_py())
            return cls(values, None, nulls, ordered,
                       fixed=fixed_bytes(rest) if ordered and len(rest) else None)
        keys = sortable(rest)
        if keys is not None and not is_sorted(keys):
            keys = None
        # a run of consecutive integers (e.g. an auto-increment key) is searched by
        # arithmetic: a key's position is its distance from the first
        dense = keys is not None and keys.dtype.kind in "iu" and len(keys) > 0 and \
            bool((np.diff(keys) == 1).all())
        return cls(values, keys, nulls, dense=dense)

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + sum(0 if a is None else a.nbytes
                                        for a in (self.keys, self.fixed))

    def positions(self, query: KeyQuery) -> np.ndarray:
        """Sorted positions (in the page) of the entries matching ``query`` (SQL
        semantics, as :func:`matches`)."""
        keys = self.keys
        if isinstance(query, KeyIsNull) or (keys is None and not (
                self.ordered_bytes and isinstance(query, KeyRange))):
            return np.flatnonzero(matches(self.values, query))
        if keys is None:
            assert isinstance(query, KeyRange)
            return self._positions_bytes(query)
        if isinstance(query, KeySet):
            wanted = sortable(query.values)
            if wanted is None:
                return np.flatnonzero(matches(self.values, query))
            return self.nulls + _ranges_union(np.searchsorted(keys, wanted, side="left"),
                                              np.searchsorted(keys, wanted, side="right"))
        first, stop = 0, len(keys)
        if query.lower is not None:
            side: Side = "left" if query.lower_inclusive else "right"
            first = int(np.searchsorted(keys, _sortable_key(query.lower), side=side))
        if query.upper is not None:
            side = "right" if query.upper_inclusive else "left"
            stop = int(np.searchsorted(keys, _sortable_key(query.upper), side=side))
        return np.arange(self.nulls + first, self.nulls + max(first, stop), dtype=np.int64)

    def _positions_bytes(self, query: KeyRange) -> np.ndarray:
        """A range of strings / binaries: two binary searches on the byte strings."""
        rest = self.values.slice(self.nulls)
        first, stop = 0, len(rest)
        if query.lower is not None:
            first = _bisect_bytes(rest, _as_bytes(query.lower), not query.lower_inclusive)
        if query.upper is not None:
            stop = _bisect_bytes(rest, _as_bytes(query.upper), query.upper_inclusive)
        return np.arange(self.nulls + first, self.nulls + max(first, stop), dtype=np.int64)


def _as_bytes(value: pa.Scalar) -> bytes:
    v = value.as_py()
    return v.encode() if isinstance(v, str) else bytes(v)


def _bisect_bytes(values: pa.Array, key: bytes, right: bool) -> int:
    """Where ``key`` goes in ``values`` (non-null strings / binaries in byte order): before
    its equals, or after them with ``right``; a binary search of about log2(n) probes."""
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32,
                            len(values) + 1, values.offset * (8 if wide else 4))
    data = memoryview(values.buffers()[2] or b"")
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        probe = bytes(data[int(offsets[mid]) : int(offsets[mid + 1])])
        if probe < key or (right and probe == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class SortedPage:
    """One whole page of page_data: its values ready to search and their ids."""

    entries: SortedKeys
    ids: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> SortedPage:
        return cls(SortedKeys.of(table.column(VALUES).combine_chunks()),
                   numpy_of(table.column(IDS)))

    @property
    def values(self) -> pa.Array:
        return self.entries.values

    @property
    def keys(self) -> np.ndarray | None:
        return self.entries.keys

    @property
    def nulls(self) -> int:
        return self.entries.nulls

    @property
    def nbytes(self) -> int:
        return self.entries.nbytes + self.ids.nbytes

    def select(self, query: KeyQuery) -> np.ndarray:
        """Ids of the entries matching ``query`` (SQL semantics, as :func:`matches`)."""
        return self.ids[self.entries.positions(query)]
