"""BTREE index files on a store: write them, open them, search them.

An opened index keeps its page lookup (a few KB per million rows) and reads pages of
page_data on demand; both are cached process-wide (bounded, thread safe), keyed by the
index uuid, since index files never change once written.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_sql.errors import FormatError, LanceError, NotFoundError
from lance_sql.format.btree import (
    BATCH_SIZE,
    IDS,
    PAGE_DATA,
    PAGE_LOOKUP,
    VALUES,
    KeyQuery,
    KeyRange,
    KeySet,
    PageBounds,
    PageLookup,
    SortedKeys,
    SortedPage,
    arrow_of_fixed,
    build_lookup,
    fixed_bytes,
    matches,
    page_data_schema,
    sortable,
)
from lance_sql.format.datafile import (
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_PAGE_BYTES,
    LanceFileReader,
    LanceFileWriter,
)
from lance_sql.format.index import IndexMetadata
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceSchema
from lance_sql.io.store import ObjectStore
from lance_sql.numpy_arrow import array_from_numpy, numpy_of
from lance_sql.sorted_sets import sorted_unique
from lance_sql.table.files.reader import base_store
from lance_sql.table.runtime.cache import INDEX_FILES, INDEX_PAGES
from lance_sql.table.runtime.context import current_runtime

INDEX_DIR = "_indices"
# A search touching at least this many pages reads those not cached together (keys_of).
BATCH_PAGES = 8
_FEW_IDS = 16  # ids of at most this many entries found by a one-key search: read singly
# Counts of searches of many string / binary keys answered with the pages' fixed-width
# bytes (one numpy search per page, not a set test of every value of it) (tests).
BYTES_SET_SEARCHES = [0]
# Counts of integer key sets found in dense pages by arithmetic alone (_dense_found, tests).
DENSE_SET_SEARCHES = [0]


def index_key(uuid: str, name: str) -> str:
    """Key of file ``name`` of index ``uuid``."""
    return f"{INDEX_DIR}/{uuid}/{name}"


def index_store(store: ObjectStore, manifest: Manifest, meta: IndexMetadata) -> ObjectStore:
    """The store holding the files of index ``meta``."""
    return base_store(store, manifest, meta.base_id)


def write_file(store: ObjectStore, key: str, table: pa.Table,
               page_bytes: int | None = None) -> int:
    """Write ``table`` as a Lance 2.2 file (schema metadata kept); returns its size.
    ``page_bytes``: cut pages smaller than the default (less memory while encoding)."""
    schema = LanceSchema.from_arrow(table.schema)
    page, max_page = ((DEFAULT_PAGE_BYTES, DEFAULT_MAX_PAGE_BYTES) if page_bytes is None
                      else (page_bytes, page_bytes))
    with store.open_writer(key) as sink:
        writer = LanceFileWriter(sink, schema, path=f"{store.uri}/{key}", version="2.2",
                                 page_bytes=page, max_page_bytes=max_page)
        if table.num_rows:
            writer.write_batch(table)
        written = writer.finish()
    return written.size_bytes


def write_btree(store: ObjectStore, uuid: str, data: pa.Table,
                batch_size: int = BATCH_SIZE, page_bytes: int | None = None
                ) -> tuple[tuple[str, int], ...]:
    """Write sorted page data and its lookup under ``_indices/{uuid}``; (name, size) each."""
    lookup = build_lookup(data, batch_size)
    return ((PAGE_DATA, write_file(store, index_key(uuid, PAGE_DATA), data, page_bytes)),
            (PAGE_LOOKUP, write_file(store, index_key(uuid, PAGE_LOOKUP), lookup)))


def file_columns(reader: LanceFileReader) -> dict[int, int]:
    """Field id -> column of an index file (flat schemas: one column per field)."""
    return {f.id: i for i, f in enumerate(reader.schema.walk())}


def read_all(reader: LanceFileReader, offset: int = 0, length: int | None = None) -> pa.Table:
    """Rows ``[offset, offset + length)`` of every column of an index file."""
    fields = reader.schema.fields
    arrays = reader.read(fields, file_columns(reader), offset=offset, length=length)
    return pa.Table.from_arrays(arrays, schema=reader.schema.to_arrow())


@dataclass(frozen=True)
class BTreeIndex:
    """An opened BTREE index: the page bounds in memory, the pages read on demand."""

    uuid: str
    path: str
    data: LanceFileReader
    bounds: PageBounds
    key_type: pa.DataType

    @classmethod
    def open(cls, store: ObjectStore, manifest: Manifest, meta: IndexMetadata,
             key_type: pa.DataType) -> BTreeIndex:
        """Open (or take from the cache) the files of ``meta``; a missing, truncated or
        foreign file is a NotFoundError / FormatError naming it."""
        root = index_store(store, manifest, meta)
        if meta.index_version < 0:  # (what its ids are depends on it: rows or row ids)
            raise FormatError(f"{root.uri}: index {meta.name!r} has version "
                              f"{meta.index_version}, which no index has")

        def load() -> BTreeIndex:
            return cls._load(root, meta, key_type)

        return current_runtime().cache.get_or_load(
            INDEX_FILES, (root.uri, meta.uuid, str(key_type)), load)

    @classmethod
    def _load(cls, root: ObjectStore, meta: IndexMetadata, key_type: pa.DataType) -> BTreeIndex:
        data_key, lookup_key = index_key(meta.uuid, PAGE_DATA), index_key(meta.uuid, PAGE_LOOKUP)
        data = open_index_file(root, data_key)
        path = f"{root.uri}/{data_key}"
        expected = page_data_schema(key_type)
        try:
            got = data.schema.to_arrow()
        except LanceError as exc:
            raise FormatError(f"{path}: unreadable schema ({exc})") from exc
        if got.names != expected.names or got.field(IDS).type != pa.uint64() or \
                got.field(VALUES).type != key_type:
            raise FormatError(f"{path}: not BTREE page data for a {key_type} key "
                              f"(schema {got.to_string(show_schema_metadata=False)!r})")
        lookup_path = f"{root.uri}/{lookup_key}"
        lookup_reader = open_index_file(root, lookup_key)
        try:
            lookup_table = read_all(lookup_reader)
        except LanceError as exc:
            raise FormatError(f"{lookup_path}: {exc}") from exc
        if lookup_table.num_columns and lookup_table.schema.field(0).type != key_type:
            raise FormatError(f"{lookup_path}: page bounds of type "
                              f"{lookup_table.schema.field(0).type}, the key is {key_type}")
        lookup = PageLookup.decode(lookup_table, data.num_rows, lookup_path)
        return cls(meta.uuid, path, data, PageBounds.of(lookup), key_type)

    @property
    def lookup(self) -> PageLookup:
        return self.bounds.lookup

    @functools.cached_property
    def column_map(self) -> dict[int, int]:
        """Field id -> column of the page data file, found once (every search passes it;
        computing it again is the same answer, so threads may race here harmlessly)."""
        return file_columns(self.data)

    def nbytes(self) -> int:
        """Memory the index holds while open (page bounds; pages are cached apart)."""
        keys = [k for k in (self.bounds.min_keys, self.bounds.max_keys,
                            self.bounds.min_fixed, self.bounds.max_fixed) if k is not None]
        return self.lookup.nbytes() + sum(k.nbytes for k in keys)

    def page(self, page: int) -> SortedPage:
        def load() -> SortedPage:
            start, length = self.lookup.page_rows(page)
            try:
                return SortedPage.of(read_all(self.data, start, length))
            except LanceError as exc:
                raise FormatError(f"{self.path}: page {page}: {exc}") from exc

        return current_runtime().cache.get_or_load(INDEX_PAGES, (self.path, self.uuid, page),
                                                   load)

    def keys(self, page: int) -> SortedKeys:
        """The values of page ``page``, ready to search (cached; only the values are
        kept: a search reads the ids of the entries it finds apart, or finds them by
        arithmetic when the page's ids, read once with its values, are a run: IdRuns)."""
        def load() -> SortedKeys:
            start, length = self.lookup.page_rows(page)
            fields = self.data.schema.fields[:2]  # the values, and the ids (see IdRuns)
            try:
                [values, ids] = self.data.read_short(fields, self.column_map, start, length)
            except LanceError as exc:
                raise FormatError(f"{self.path}: page {page}: {exc}") from exc
            self._id_runs().note([page], [ids])
            return SortedKeys.of(values)

        return current_runtime().cache.get_or_load(
            INDEX_PAGES, (self.path, self.uuid, page, VALUES), load)

    def keys_of(self, pages: list[int]) -> list[SortedKeys]:
        """:meth:`keys` of many pages (ascending); the pages not cached are read
        together: their chunks in one read per page of page_data, decoded in one call."""
        def load(missing: list) -> list[SortedKeys]:
            runs = [self.lookup.page_rows(key[2]) for key in missing]
            starts = np.array([start for start, _ in runs], np.int64)
            stops = starts + np.array([length for _, length in runs], np.int64)
            field, id_field = self.data.schema.fields[:2]
            full = stops > starts
            values: list[pa.Array] = [pa.nulls(0, field.arrow_type)] * len(runs)
            try:
                read = self.data.read_runs(field, self.column_map, starts[full],
                                           stops[full])
                ids = self.data.read_runs(id_field, self.column_map, starts[full],
                                          stops[full])  # (see IdRuns)
            except LanceError as exc:
                raise FormatError(f"{self.path}: pages {[k[2] for k in missing]}: "
                                  f"{exc}") from exc
            for i, array in zip(np.flatnonzero(full).tolist(), read, strict=True):
                values[i] = array
            self._id_runs().note([missing[i][2] for i in np.flatnonzero(full).tolist()], ids)
            return [SortedKeys.of(v) for v in values]

        return current_runtime().cache.get_or_load_many(
            INDEX_PAGES, [(self.path, self.uuid, p, VALUES) for p in pages], load)

    def ids_at(self, rows: np.ndarray) -> np.ndarray:
        """The ids of page_data entries ``rows`` (sorted positions in the file): those of
        pages noted in :class:`IdRuns` by arithmetic, the others read; a few (a point
        query's, or a lookup of a few keys') one by one from their chunks, a run of
        consecutive entries at a time."""
        if not rows.size:
            return np.empty(0, np.uint64)
        runs = current_runtime().cache.peek(INDEX_PAGES, (self.path, self.uuid, _ID_RUNS))
        if runs is not None:
            found = runs.ids_at(rows, self.lookup.batch_size)
            if found is not None:
                out, rest = found
                if rest.size:  # entries of pages not noted runs: read as below
                    out[rest] = self._read_ids(rows[rest])
                return out
        return self._read_ids(rows)

    def _id_runs(self) -> IdRuns:
        """This index's :class:`IdRuns` (made on first use, kept in the page cache)."""
        return current_runtime().cache.get_or_load(
            INDEX_PAGES, (self.path, self.uuid, _ID_RUNS), lambda: IdRuns(self.lookup.num_pages))

    def _read_ids(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`ids_at` read from the page data's ids column."""
        if rows.size <= _FEW_IDS:
            few = self._few_ids(rows)
            if few is not None:
                return few
        try:
            [ids] = self.data.take(self.data.schema.fields[1:], self.column_map, rows)
        except LanceError as exc:
            raise FormatError(f"{self.path}: {exc}") from exc
        if ids.null_count:
            raise FormatError(f"{self.path}: null ids in the page data")
        return numpy_of(ids)

    def _few_ids(self, rows: np.ndarray) -> np.ndarray | None:
        """:meth:`ids_at` of a few entries, each run of consecutive ones read from its
        chunk (None: the column does not allow that)."""
        if rows.size == 1:  # a point lookup's entry
            runs = [(int(rows[0]), int(rows[0]) + 1)]
        else:
            ends = np.flatnonzero(np.diff(rows) != 1) + 1
            runs = [(int(run[0]), int(run[-1]) + 1)
                    for run in (np.split(rows, ends) if ends.size else [rows])]
        out: list[int] = []
        for start, stop in runs:
            try:
                few = self.data.ints_at(self.data.schema.fields[1], self.column_map,
                                        start, stop)
            except LanceError as exc:
                raise FormatError(f"{self.path}: {exc}") from exc
            if few is None:
                return None
            out.extend(few)
        if len(out) != rows.size:
            raise FormatError(f"{self.path}: {len(out)} ids read for {rows.size} entries")
        return np.array(out, np.uint64)

    def search(self, query: KeyQuery) -> np.ndarray:
        """Ids (row addresses, or row ids: see ``ROW_ADDRESS_IDS``) of the entries matching
        ``query``; only pages whose bounds allow a match are read, and only the ids of
        the entries found."""
        return self.ids_at(self._rows(query))

    def search_one(self, value: pa.Array) -> np.ndarray:
        """:meth:`search` of ``KeySet(value)``, ``value`` one valid integer key of the key
        type (a point lookup's): its one candidate page found by two scalar searches of
        the bounds, searched in the file, the entry's id read alone. Anything else (no
        numeric bounds, no page or several, a page decoded already) is :meth:`search`'s:
        the same ids."""
        query = KeySet(value)
        lo_keys, hi_keys = self.bounds.min_keys, self.bounds.max_keys
        if lo_keys is None or hi_keys is None or len(value) != 1 or value.null_count or \
                not pa.types.is_integer(self.key_type) or \
                not value.type.equals(self.key_type):
            return self.search(query)
        key = int(value[0].as_py())  # (bounds of an integer key: its own numbers)
        first = int(hi_keys.searchsorted(key, "left"))
        if int(lo_keys.searchsorted(key, "right")) != first + 1:
            return self.search(query)
        rows = self._search_one(first, query, key)
        return self.search(query) if rows is None else self.ids_at(rows)

    def search_keyed(self, query: KeyQuery) -> tuple[np.ndarray, np.ndarray | pa.Array | None]:
        """:meth:`search`, with the key of each id found (same order): numbers of the key
        type for an integer key, an Arrow array for a string / binary one (None for
        other types, or when a page's keys hold nulls there). A caller wanting the rows'
        keys takes them from here instead of reading the key column again: the entry's
        key is the key of the row it names (rows never change in place)."""
        rows, found = self._found(query)
        one = _one_integer(query, self.key_type)
        keys: np.ndarray | pa.Array | None
        if found is not None:  # the search found them with the entries
            keys = found
        elif one is not None:  # every entry found equals the one key: no page is decoded
            keys = np.full(rows.size, one, self.key_type.to_pandas_dtype())
        elif _one_bytes(query, self.key_type) is not None:  # the same, a string / binary
            keys = pa.repeat(_one_scalar(query), rows.size)
        elif _is_bytes_type(self.key_type):
            keys = self.byte_keys_at(rows)
        else:
            keys = self.keys_at(rows)
        return self.ids_at(rows), keys

    def byte_keys_at(self, rows: np.ndarray) -> pa.Array | None:
        """The keys of page_data entries ``rows`` (sorted positions) of a string / binary
        key, taken from the pages' values (cached: a search read them just now) in one
        take; None when one of them is null."""
        if not rows.size:
            return pa.array([], self.key_type)
        size = self.lookup.batch_size
        pages, inverse = np.unique(rows // size, return_inverse=True)
        listed = pages.tolist()
        loaded = (self.keys_of(listed) if len(listed) >= BATCH_PAGES
                  else [self.keys(p) for p in listed])
        lengths = np.fromiter((len(k.values) for k in loaded), np.int64, len(loaded))
        starts = np.cumsum(lengths) - lengths
        at = starts[inverse] + rows - pages[inverse] * size
        if (at >= starts[inverse] + lengths[inverse]).any():
            raise FormatError(f"{self.path}: an entry past its page's end")
        values = pa.chunked_array([k.values for k in loaded], self.key_type).take(
            array_from_numpy(at)).combine_chunks()
        return None if values.null_count else values

    def keys_at(self, rows: np.ndarray) -> np.ndarray | None:
        """The keys of page_data entries ``rows`` (sorted positions) as numbers of the key
        type (integer keys only, else None): by arithmetic in pages noted dense, else
        from the page's values (cached; a search found them there just now)."""
        if not pa.types.is_integer(self.key_type):
            return None
        dtype = np.dtype(self.key_type.to_pandas_dtype())
        out = np.empty(rows.size, dtype)
        if not rows.size:
            return out
        size = self.lookup.batch_size
        pages = rows // size
        rest = np.arange(rows.size)
        facts = current_runtime().cache.peek(INDEX_PAGES, (self.path, self.uuid, _DENSE))
        if facts is not None and facts.first is not None and facts.first.dtype == dtype:
            dense = facts.known[pages]
            at = pages[dense]
            out[dense] = facts.first[at] + (rows[dense] - at * size - facts.nulls[at]
                                            ).astype(dtype)
            rest = np.flatnonzero(~dense)
        if rest.size:  # a step per page (not per row) of the pages not noted dense
            for group in np.split(rest, np.flatnonzero(np.diff(pages[rest])) + 1):
                page = int(pages[group[0]])
                values = self.keys(page).values.take(pa.array(rows[group] - page * size))
                if values.null_count:
                    return None
                out[group] = values.to_numpy(zero_copy_only=False)
        return out

    def _rows(self, query: KeyQuery) -> np.ndarray:
        """Sorted positions in page_data of the entries matching ``query``."""
        return self._found(query)[0]

    def _found(self, query: KeyQuery) -> tuple[np.ndarray, pa.Array | np.ndarray | None]:
        """:meth:`_rows`, with the entries' keys when a search of many string / binary
        keys, or of many integer keys in dense pages, found them on the way (else None)."""
        wanted_bytes = _sorted_bytes(query, self.key_type)
        if wanted_bytes is None:
            dense = self._dense_found(query)
            if dense is not None:
                return dense
        found = None if wanted_bytes is None else self.bounds.fixed_pages(wanted_bytes)
        pages = (self.bounds.pages(query) if found is None else found).tolist()
        if len(pages) == 1:
            one = self._search_one(pages[0], query)
            if one is not None:
                return one, None
        wanted = _sorted_numbers(query) if len(pages) > 1 else None
        if wanted_bytes is not None and len(pages) > 1:
            return self._search_bytes(pages, query, wanted_bytes)
        if wanted is not None and len(pages) >= BATCH_PAGES:
            facts = current_runtime().cache.get_or_load(
                INDEX_PAGES, (self.path, self.uuid, _DENSE),
                lambda: DensePages(self.lookup.num_pages))
            known, pages = facts.split(pages, wanted.dtype)
            rows = self._search_pages(pages, query, wanted, facts)
            if known.size:  # those pages are not loaded: found by arithmetic
                rows = np.sort(np.concatenate([rows, facts.positions(
                    known, wanted, self.lookup.batch_size)]))
        else:
            rows = self._search_pages(pages, query, wanted, None)
        return rows, None

    def _dense_found(self, query: KeyQuery) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_found` of a set of many integer keys whose pages are all noted dense
        (:class:`DensePages`) and each within one page's bounds: each key's page by two
        searches of the bounds, its entry by arithmetic, the keys found with them (no
        page list, no page taken from the cache). None otherwise: the caller searches as
        usual (same rows: a key between a dense page's first and last key lies within
        that page's bounds, which no other page's bounds hold here)."""
        lo_keys, hi_keys = self.bounds.min_keys, self.bounds.max_keys
        if lo_keys is None or hi_keys is None or not isinstance(query, KeySet) or \
                len(query.values) < 2 * BATCH_PAGES or not pa.types.is_integer(self.key_type):
            return None  # (dates and times are dense too, but keys come back for integers)
        facts = current_runtime().cache.peek(INDEX_PAGES, (self.path, self.uuid, _DENSE))
        if facts is None or facts.first is None or lo_keys.dtype.kind != hi_keys.dtype.kind:
            return None
        wanted = _sorted_numbers(query)
        if wanted is None or wanted.dtype != facts.first.dtype or \
                lo_keys.dtype.kind != wanted.dtype.kind:
            return None
        first_page = np.searchsorted(hi_keys, wanted, "left")  # the first whose max >= key
        stop_page = np.searchsorted(lo_keys, wanted, "right")  # those whose min <= key: below
        span = stop_page - first_page
        if int(span.max()) > 1:
            return None  # a key within several pages' bounds: searched page by page
        held = span == 1
        page = first_page[held]
        if not page.size or not bool(facts.known[page].all()) or \
                int(np.count_nonzero(np.diff(page))) + 1 < BATCH_PAGES:
            return None  # a page not noted, or a few pages: searched as usual
        keys = wanted[held]
        distance, inside = _in_dense_page(keys, facts.first[page], facts.size[page])
        DENSE_SET_SEARCHES[0] += 1
        rows = (page * self.lookup.batch_size + facts.nulls[page] + distance)[inside]
        return rows, keys[inside]

    def _search_bytes(self, pages: list[int], query: KeyQuery, wanted: np.ndarray
                      ) -> tuple[np.ndarray, pa.Array | None]:
        """Sorted positions in page_data of the entries of ``pages`` equal to one of
        ``wanted`` (the query's string / binary keys as sorted unique fixed-width bytes),
        with their keys: each page's wanted keys found by two numpy searches of its
        fixed-width bytes, not by a set test of all its values; pages without that form
        are searched as before (no keys then)."""
        loaded = (self.keys_of(pages) if len(pages) >= BATCH_PAGES
                  else [self.keys(p) for p in pages])
        if not all(page.fixed is not None or page.nulls == len(page.values)
                   for page in loaded):
            return self._search_pages(pages, query, None, None), None
        BYTES_SET_SEARCHES[0] += 1
        size = self.lookup.batch_size
        kept = [(p, page) for p, page in zip(pages, loaded, strict=True)
                if page.fixed is not None]
        bounds = None
        lo, hi = self.bounds.min_fixed, self.bounds.max_fixed
        if lo is not None and hi is not None:  # each page's key range, without the pages
            at = np.array([p for p, _ in kept], np.int64)
            bounds = (lo[at], hi[at])
        rows, which = _select_bytes([(page, p * size) for p, page in kept], wanted, bounds)
        return rows, arrow_of_fixed(wanted[which], self.key_type)

    def _search_pages(self, pages: list[int], query: KeyQuery, wanted: np.ndarray | None,
                      facts: DensePages | None) -> np.ndarray:
        """Sorted positions in page_data of the entries of ``pages`` matching ``query``
        (``wanted``: its keys as sorted numbers, when searched as such); pages found to
        hold consecutive integers are noted in ``facts``."""
        if not pages:
            return np.empty(0, np.int64)
        found, tested, bases = [], [], []
        numeric: list[tuple[SortedKeys, int]] = []
        loaded = (self.keys_of(pages) if len(pages) >= BATCH_PAGES
                  else [self.keys(p) for p in pages])
        if facts is not None:
            facts.note(pages, loaded)
        if wanted is not None and self.bounds.min_keys is not None and all(
                page.keys is not None and page.keys.dtype.kind == wanted.dtype.kind
                for page in loaded):  # every page searched as numbers: no sorting out
            at = np.array(pages, np.int64)
            return _select_many(list(zip(loaded, (at * self.lookup.batch_size).tolist(),
                                         strict=True)), wanted,
                                self._bounds_of(at, wanted.dtype.kind))
        for p, page in zip(pages, loaded, strict=True):
            base = p * self.lookup.batch_size
            if page.keys is None and not page.ordered_bytes:
                tested.append(page)
                bases.append(base)
            elif wanted is not None and page.keys is not None and \
                    page.keys.dtype.kind == wanted.dtype.kind:
                numeric.append((page, base))  # searched below, all pages together
            else:
                found.append(base + page.positions(query))
        if numeric:
            assert wanted is not None
            found.append(_select_many(numeric, wanted))
        if len(tested) == 1:
            found.append(bases[0] + tested[0].positions(query))
        elif tested:  # one vectorised test over all of them (a set is hashed once)
            values = pa.concat_arrays([p.values for p in tested])
            rows = np.concatenate([np.arange(len(p.values), dtype=np.int64) + b
                                   for p, b in zip(tested, bases, strict=True)])
            found.append(rows[matches(values, query)])
        if not found:
            return np.empty(0, np.int64)
        return found[0] if len(found) == 1 else np.sort(np.concatenate(found))

    def _bounds_of(self, pages: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The lookup's lowest and highest key of each page of ``pages`` when they are
        numbers of ``kind`` (a page's lowest is below its first non-null key when it
        starts with nulls: a search of a few more keys there, never fewer)."""
        lo, hi = self.bounds.min_keys, self.bounds.max_keys
        if lo is None or hi is None or lo.dtype.kind != kind or hi.dtype.kind != kind:
            return None
        return lo[pages], hi[pages]

    def _search_one(self, page: int, query: KeyQuery, key: int | bytes | None = None
                    ) -> np.ndarray | None:
        """The positions in page_data of the entries of page ``page`` equal to the one
        integer, string or binary key of ``query``, found by a binary search of the
        page's values in the file (the page is not decoded) the first times the page is
        searched; None: the caller searches the decoded page (kept: a page searched often
        is likely searched more). ``key``: the query's key when the caller has it."""
        if key is None:
            key = _one_integer(query, self.key_type)
        if key is None:
            key = _one_bytes(query, self.key_type)
            if key is None:
                return None
        cache = current_runtime().cache
        if cache.peek(INDEX_PAGES, (self.path, self.uuid, page, VALUES)) is not None:
            return None  # decoded already: searched there
        searched = cache.get_or_load(INDEX_PAGES, (self.path, self.uuid, page, _SEARCHED),
                                     _Searched)
        if searched.count >= _SEARCHES_BEFORE_DECODE:
            return None  # a page asked for this often is decoded and kept
        searched.count += 1  # (a lost count under threads only delays the decode)
        start, length = self.lookup.page_rows(page)
        ends = None  # the page's first and last key, from its bounds (they place a probe)
        lo_keys, hi_keys = self.bounds.min_keys, self.bounds.max_keys
        if isinstance(key, int) and lo_keys is not None and hi_keys is not None and \
                lo_keys.dtype.kind in "iu" and hi_keys.dtype.kind in "iu":
            ends = (int(lo_keys[page]), int(hi_keys[page]))
        try:
            found = self.data.search_sorted(self.data.schema.fields[0], self.column_map,
                                            start, start + length, key, ends)
        except LanceError as exc:
            raise FormatError(f"{self.path}: page {page}: {exc}") from exc
        if found is None:
            return None
        return np.arange(found[0], found[1], dtype=np.int64)

    def entries(self) -> pa.Table:
        """Every (value, id) entry, sorted (for merging into a new index)."""
        pages = [self.page(p) for p in range(self.lookup.num_pages)]
        if not pages:
            return page_data_schema(self.key_type).empty_table()
        return pa.Table.from_arrays(
            [pa.concat_arrays([p.values for p in pages]),
             array_from_numpy(np.concatenate([p.ids for p in pages]), pa.uint64())],
            schema=page_data_schema(self.key_type))


_SEARCHED = "searched"
_DENSE = "dense"


class DensePages:
    """What decoded pages of one index showed about themselves: which hold consecutive
    integers (:attr:`SortedKeys.dense`), with their first key, key count and leading
    nulls. Facts of the immutable index file, a few bytes a page, kept in the page cache:
    a set of many keys finds its entries in those pages by arithmetic, without taking
    each page from the cache. Written under the GIL: a page's numbers before its flag."""

    def __init__(self, num_pages: int) -> None:
        self.known = np.zeros(num_pages, bool)
        self.first: np.ndarray | None = None  # of the keys' type, once a page is noted
        self.size = np.zeros(num_pages, np.int64)
        self.nulls = np.zeros(num_pages, np.int64)
        self._lock = threading.Lock()  # the first noting thread sets the keys' type

    @property
    def nbytes(self) -> int:
        return 64 + self.known.nbytes + self.size.nbytes + self.nulls.nbytes + (
            0 if self.first is None else self.first.nbytes)

    def note(self, pages: list[int], loaded: list[SortedKeys]) -> None:
        """Record the dense pages among ``pages`` (just taken from the cache)."""
        for p, keys in zip(pages, loaded, strict=True):
            if not keys.dense or self.known[p]:
                continue
            assert keys.keys is not None
            if self.first is None:
                with self._lock:
                    if self.first is None:
                        self.first = np.zeros(self.known.size, keys.keys.dtype)
            if self.first.dtype != keys.keys.dtype:
                continue
            self.first[p] = keys.keys[0]
            self.size[p] = keys.keys.size
            self.nulls[p] = keys.nulls
            self.known[p] = True

    def split(self, pages: list[int], dtype: np.dtype) -> tuple[np.ndarray, list[int]]:
        """``pages`` as (those noted dense, with keys of ``dtype``; the others)."""
        if self.first is None or self.first.dtype != dtype:
            return np.empty(0, np.int64), pages
        at = np.array(pages, np.int64)
        known = self.known[at]
        if not known.any():
            return np.empty(0, np.int64), pages
        return at[known], at[~known].tolist()

    def positions(self, pages: np.ndarray, wanted: np.ndarray, batch_size: int
                  ) -> np.ndarray:
        """Sorted positions in page_data of ``wanted`` (sorted unique numbers of the keys'
        type) in ``pages`` (ascending, noted dense)."""
        assert self.first is not None
        first = self.first[pages]
        size = self.size[pages]
        last = first + (size - 1).astype(first.dtype)
        lo = np.searchsorted(wanted, first, "left")
        counts = np.searchsorted(wanted, last, "right") - lo
        return _dense_at(lo, counts, first, size, pages * batch_size + self.nulls[pages],
                         wanted)


# Counts of ids_at calls answered (wholly or partly) by the arithmetic of IdRuns (tests).
ID_RUN_CALLS = [0]
_ID_RUNS = "id_runs"
_NO_ROWS = np.empty(0, np.int64)
_NO_ROWS.flags.writeable = False


class IdRuns:
    """Which pages of one index hold ids that count up by one from their first entry
    (a table written in key order, as a bulk load does: its rows' addresses follow the
    keys), with that first id; noted when a page is decoded (its ids are read with its
    keys, once), a few bytes a page, kept in the page cache. An id of such a page is
    then its first id plus the entry's place in the page: no chunk of the ids column is
    read (for a 1000-key lookup, ~1000 chunks). Written under the GIL: a page's first
    id before its flag."""

    def __init__(self, num_pages: int) -> None:
        self.known = np.zeros(num_pages, bool)
        self.first = np.zeros(num_pages, np.uint64)

    @property
    def nbytes(self) -> int:
        return 64 + self.known.nbytes + self.first.nbytes

    def note(self, pages: list[int], ids: list[pa.Array]) -> None:
        """Record which of ``pages`` (decoded just now) have ``ids`` (each page's, all of
        its entries) counting up by one."""
        for p, column in zip(pages, ids, strict=True):
            if p >= self.known.size or column.null_count or not len(column):
                continue
            values = numpy_of(column)
            if values.size > 1 and not bool((np.diff(values) == 1).all()):
                continue
            self.first[p] = values[0]
            self.known[p] = True

    def ids_at(self, rows: np.ndarray, batch_size: int
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids of entries ``rows`` in pages noted here, by arithmetic, and the
        positions in ``rows`` of the others (their ids left to the caller); None when
        no row's page is noted."""
        if rows.size == 1:  # a point lookup's entry: Python ints, one array made
            row = int(rows[0])
            page = row // batch_size
            if not self.known[page]:
                return None
            ID_RUN_CALLS[0] += 1
            return (np.array([int(self.first[page]) + row - page * batch_size], np.uint64),
                    _NO_ROWS)
        pages = rows // batch_size
        known = self.known[pages]
        if not known.any():
            return None
        ID_RUN_CALLS[0] += 1
        out = np.empty(rows.size, np.uint64)
        at = pages[known]
        out[known] = self.first[at] + (rows[known] - at * batch_size).astype(np.uint64)
        return out, np.flatnonzero(~known)


_SEARCHES_BEFORE_DECODE = 2


class _Searched:
    """How often a page was searched in the file (kept in the page cache, weighing next
    to nothing): after ``_SEARCHES_BEFORE_DECODE`` searches the page is decoded and kept,
    so hot keys are searched in memory while keys seen once or twice cost no decode."""

    nbytes = 64

    def __init__(self) -> None:
        self.count = 0


def _one_scalar(query: KeyQuery) -> pa.Scalar | None:
    """The key of a query for one key (``=`` or a one-key set; valid), else None."""
    if isinstance(query, KeySet):
        if len(query.values) != 1:
            return None
        value = query.values[0]
    elif isinstance(query, KeyRange) and query.lower is not None and \
            query.lower_inclusive and query.upper_inclusive and query.lower is query.upper:
        value = query.lower
    else:
        return None
    return value if value.is_valid else None


def _one_integer(query: KeyQuery, key_type: pa.DataType) -> int | None:
    """The key of a query for one integer key (``=`` or a one-key set), else None."""
    if not pa.types.is_integer(key_type):
        return None
    value = _one_scalar(query)
    if value is None or not value.type.equals(key_type):
        return None
    return int(value.as_py())


def _one_bytes(query: KeyQuery, key_type: pa.DataType) -> bytes | None:
    """The key of a query for one string / binary key, as its bytes (UTF-8 for a
    string), else None."""
    if not _is_bytes_type(key_type):
        return None
    value = _one_scalar(query)
    if value is None or not value.type.equals(key_type):
        return None
    buffer = value.as_buffer()  # the value's own bytes (no Python string)
    return b"" if buffer is None else buffer.to_pybytes()


def _sorted_numbers(query: KeyQuery) -> np.ndarray | None:
    """The keys of a set query as sorted unique numbers (None: not a numeric set)."""
    if not isinstance(query, KeySet) or len(query.values) < 2:
        return None
    keys = sortable(query.values)
    if keys is None or keys.dtype.kind not in "iufb":
        return None
    return sorted_unique(keys)


def _is_bytes_type(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _sorted_bytes(query: KeyQuery, key_type: pa.DataType) -> np.ndarray | None:
    """The non-null keys of a set query of string / binary keys as sorted unique
    fixed-width bytes (see :func:`fixed_bytes`; None: another query, or no such form)."""
    if not isinstance(query, KeySet) or len(query.values) < 2 or \
            not query.values.type.equals(key_type) or not _is_bytes_type(key_type):
        return None
    values = query.values.drop_null() if query.values.null_count else query.values
    fixed = fixed_bytes(values)
    return None if fixed is None else np.unique(fixed)


def _select_bytes(pages: list[tuple[SortedKeys, int]], wanted: np.ndarray,
                  bounds: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Positions (page base added) of the entries of ``pages`` ((page, base) in page order,
    each with its fixed-width bytes) equal to one of ``wanted`` (sorted unique fixed-width
    bytes), sorted, and the position in ``wanted`` of each one's key: which wanted keys
    fall in each page's range (``bounds``: each page's lowest and highest key from the
    index's lookup, else the pages' own first and last) found for all pages in two
    searches, then two searches of each page's own bytes for those keys (as
    :func:`_select_many` does for numbers)."""
    none = np.empty(0, np.int64)
    if not pages:
        return none, none
    if bounds is not None:  # the lookup's lowest and highest key of each page
        firsts, lasts = bounds
    else:
        firsts = np.array([page.fixed[0] for page, _ in pages])  # type: ignore[index]
        lasts = np.array([page.fixed[-1] for page, _ in pages])  # type: ignore[index]
    lo = np.searchsorted(wanted, firsts, "left").tolist()
    hi = np.searchsorted(wanted, lasts, "right").tolist()
    runs = _page_runs([(page.fixed, base + page.nulls) for page, base in pages],
                      wanted, lo, hi)
    if runs is None:
        return none, none
    start, length, which = runs
    return _run_positions(start, length), np.repeat(which, length)


def _page_runs(pages: list[tuple[np.ndarray | None, int]], wanted: np.ndarray,
               lo: list[int], hi: list[int]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The runs of entries equal to ``wanted[a:b]`` (sorted unique) in each page ``i``
    (its sorted keys, the position of its first; None: none to search), for ``a, b =
    lo[i], hi[i]``: each run's start, length and key (its position in ``wanted``), two
    searches a page; None when no page has keys to search."""
    starts, lengths, which = [], [], []
    for (keys, offset), a, b in zip(pages, lo, hi, strict=True):
        if b <= a or keys is None:
            continue
        here = wanted[a:b]
        first = keys.searchsorted(here, "left")
        starts.append(first + offset)
        lengths.append(keys.searchsorted(here, "right") - first)
        which.append(np.arange(a, b, dtype=np.int64))
    if not starts:
        return None
    return (np.concatenate(starts).astype(np.int64, copy=False),
            np.concatenate(lengths).astype(np.int64, copy=False), np.concatenate(which))


def _select_numbers(page: SortedKeys, wanted: np.ndarray) -> np.ndarray:
    """Positions of ``page``'s entries equal to one of ``wanted`` (sorted unique numbers of the
    page's key form): only the wanted keys within the page's key range are searched,
    so a set of many keys over many pages costs about one search per key."""
    keys = page.keys
    assert keys is not None
    if not len(keys):
        return np.empty(0, np.int64)
    first = int(np.searchsorted(wanted, keys[0], side="left"))
    stop = int(np.searchsorted(wanted, keys[-1], side="right"))
    if stop <= first:
        return np.empty(0, np.int64)
    here = wanted[first:stop]
    starts = np.searchsorted(keys, here, side="left")
    lengths = np.searchsorted(keys, here, side="right") - starts
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    before = np.cumsum(lengths) - lengths  # disjoint ranges: the keys are unique
    at = np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)
    return page.nulls + at


def _select_many(pages: list[tuple[SortedKeys, int]], wanted: np.ndarray,
                 bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Positions (page base added) of the entries of ``pages`` ((page, base) in page order,
    keys of ``wanted``'s kind) equal to one of ``wanted`` (sorted unique numbers), sorted.

    Which wanted keys fall in each page's key range is found for all pages in two
    searches (of ``bounds``, each page's lowest and highest key as the index's lookup
    gives them, when known; else of the pages' own first and last keys); each page then
    costs two searches of its own keys, and the matching runs are expanded once for all
    pages (a set of 1000 keys touches ~1000 pages at 10M rows).
    """
    if bounds is not None:
        firsts, lasts = bounds
    else:
        pages = [(p, b) for p, b in pages if p.keys is not None and len(p.keys)]
        if not pages:
            return np.empty(0, np.int64)
        dtype = pages[0][0].keys.dtype  # type: ignore[union-attr]
        n = len(pages)
        firsts = np.fromiter((p.keys[0] for p, _ in pages), dtype, n)  # type: ignore[index]
        lasts = np.fromiter((p.keys[-1] for p, _ in pages), dtype, n)  # type: ignore[index]
    lo = np.searchsorted(wanted, firsts, "left").tolist()
    hi = np.searchsorted(wanted, lasts, "right").tolist()
    if wanted.dtype.kind in "iu" and wanted.size and \
            int(wanted[-1]) < np.iinfo(wanted.dtype).max:
        return _select_many_ints(pages, wanted, lo, hi)
    runs = _page_runs([(page.keys, base + page.nulls) for page, base in pages],
                      wanted, lo, hi)
    if runs is None:
        return np.empty(0, np.int64)
    return _run_positions(runs[0], runs[1])


def _select_many_ints(pages: list[tuple[SortedKeys, int]], wanted: np.ndarray, lo: list[int],
                      hi: list[int]) -> np.ndarray:
    """:func:`_select_many` for integer keys (``wanted[a:b]`` within page ``i``'s key range
    for ``a, b = lo[i], hi[i]``; the largest key below the type's maximum): the run of
    key ``k`` ends where ``k + 1`` would start, so both ends of every wanted key's run
    come from one search per page (the pages are many: one numpy call each counts)."""
    both = np.empty(2 * wanted.size, wanted.dtype)
    both[0::2] = wanted
    both[1::2] = wanted + 1
    found, offsets, counts = [], [], []
    dense: list[tuple[SortedKeys, int, int, int]] = []  # searched by arithmetic below
    for (page, base), a, b in zip(pages, lo, hi, strict=True):
        if b > a:
            keys = page.keys
            assert keys is not None
            if page.dense and keys.dtype == wanted.dtype:
                dense.append((page, base, a, b))
                continue
            found.append(keys.searchsorted(both[2 * a : 2 * b]))
            offsets.append(base + page.nulls)
            counts.append(b - a)
    parts = [_dense_positions(dense, wanted)] if dense else []
    if found:
        ends = np.concatenate(found).astype(np.int64, copy=False).reshape(-1, 2)
        parts.append(_run_positions(ends[:, 0] + np.repeat(np.array(offsets, np.int64),
                                                           counts),
                                    ends[:, 1] - ends[:, 0]))
    if not parts:
        return np.empty(0, np.int64)
    return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))


def _dense_positions(pages: list[tuple[SortedKeys, int, int, int]], wanted: np.ndarray
                     ) -> np.ndarray:
    """Positions of ``wanted[a:b]`` in each ``(page, base, a, b)`` of ``pages`` (pages whose
    keys are consecutive integers of ``wanted``'s type, ascending): a key is at its
    distance from the page's first key when it lies within the page, else absent; one
    vectorised step for all pages, no search per page."""
    n = len(pages)
    starts = np.fromiter((a for _, _, a, _ in pages), np.int64, n)
    counts = np.fromiter((b for _, _, _, b in pages), np.int64, n) - starts
    firsts = np.fromiter((p.keys[0] for p, _, _, _ in pages),  # type: ignore[index]
                         wanted.dtype, n)
    sizes = np.fromiter((len(p.keys) for p, _, _, _ in pages),  # type: ignore[arg-type]
                        np.int64, n)
    offsets = np.fromiter((base + p.nulls for p, base, _, _ in pages), np.int64, n)
    return _dense_at(starts, counts, firsts, sizes, offsets, wanted)


def _dense_at(starts: np.ndarray, counts: np.ndarray, firsts: np.ndarray, sizes: np.ndarray,
              offsets: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions of ``wanted[starts[i] : starts[i] + counts[i]]`` in page ``i`` of
    consecutive integer keys from ``firsts[i]`` (``sizes[i]`` of them, the first at
    ``offsets[i]``): a key's distance from the first, when within the page."""
    keys = wanted[_run_positions(starts, counts)]
    distance, inside = _in_dense_page(keys, np.repeat(firsts, counts), np.repeat(sizes, counts))
    return (np.repeat(offsets, counts) + distance)[inside]


def _in_dense_page(keys: np.ndarray, first: np.ndarray, size: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Each key's distance (int64) from the first key of its page of ``size`` consecutive
    integers, and whether it lies within that page."""
    inside = keys >= first
    distance = np.zeros(keys.size, np.int64)
    distance[inside] = (keys[inside] - first[inside]).astype(np.int64)
    inside &= (distance >= 0) & (distance < size)  # >= 0: no wrap
    return distance, inside


def _run_positions(start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Every position of the runs ``[start[i], start[i] + length[i])``, in order (the
    runs are disjoint: the keys are unique)."""
    before = np.cumsum(length) - length
    return np.arange(int(length.sum()), dtype=np.int64) + np.repeat(start - before, length)


def open_index_file(root: ObjectStore, key: str) -> LanceFileReader:
    """Open index file ``key``: NotFoundError when missing, FormatError when unreadable."""
    try:
        return LanceFileReader(root.open_source(key))
    except NotFoundError as exc:
        raise NotFoundError(f"index file {root.uri}/{key} is missing ({exc})") from exc
    except LanceError as exc:
        raise FormatError(f"index file {root.uri}/{key}: {exc}") from exc
