"""Opening the files of one fragment: data files, deletion vectors, row addresses.

Everything a reader of a fragment needs below the scan plan: which data file holds a
column, the open (cached) file readers, the decoded deletion vector, the physical row count
checked against the data file, and the system columns (``_rowid``, ``_rowaddr``, row
versions) computed from row offsets.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
    VersionCleanedUpError,
)
from lance_sql.format.datafile import LanceFileReader
from lance_sql.format.datafile.decode_v2_1 import LeafColumn, column_fields
from lance_sql.format.deletion import decode_deletions
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceField
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.table.files.lineage import load_lineage
from lance_sql.table.meta.versions import version_cleaned_up
from lance_sql.table.runtime.cache import DATA_FILES, DELETIONS
from lance_sql.table.runtime.context import current_runtime

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
ROW_CREATED = "_row_created_at_version"
ROW_UPDATED = "_row_last_updated_at_version"
VERSION_COLUMNS = (ROW_CREATED, ROW_UPDATED)
SYSTEM_COLUMNS = (ROW_ID, ROW_ADDR, *VERSION_COLUMNS)
# What a row carries along when rewritten (FragmentLineage's field order).
LINEAGE_COLUMNS = (ROW_ID, *VERSION_COLUMNS)
READABLE_FILE_VERSIONS = {(2, 0), (2, 1), (2, 2)}
# Row counts up to this may size arrays before the data file confirms them (8 MB of
# int64 offsets at most); see checked_rows.
UNCHECKED_ROWS = 1 << 20



def base_store(store: ObjectStore, manifest: Manifest, base_id: int | None) -> ObjectStore:
    """The store a file with ``base_id`` lives in (the table's own when None)."""
    if base_id is None:
        return store
    for base in manifest.base_paths:
        if base.id == base_id:
            try:
                return open_store(base.path)
            except InvalidInputError as exc:  # the manifest's path, not the caller's
                raise FormatError(f"{store.uri}: manifest names base path {base_id} as "
                                  f"{base.path!r}, which cannot be opened: {exc}") from exc
    raise FormatError(f"{store.uri}: manifest refers to unknown base path id {base_id}")


def data_file_key(manifest: Manifest, data_file: DataFile) -> str:
    """A data file's key in its base store: under ``data/``, except in a base path that is
    a data directory itself (``is_dataset_root`` false, e.g. a MemWAL generation's WAL)."""
    return data_file.path if in_data_directory(manifest, data_file) else data_file.key


def in_data_directory(manifest: Manifest, data_file: DataFile) -> bool:
    """Whether ``data_file`` lives in a base path that is a data directory itself."""
    return data_file.base_id is not None and any(
        b.id == data_file.base_id and not b.is_dataset_root for b in manifest.base_paths)


def open_data_file(store: ObjectStore, manifest: Manifest, data_file: DataFile) -> LanceFileReader:
    """The open reader of ``data_file`` (cached); a format lance_sql cannot read is refused."""
    version = (data_file.file_major_version, data_file.file_minor_version)
    root = base_store(store, manifest, data_file.base_id)
    key = data_file_key(manifest, data_file)
    path = f"{root.uri}/{key}"
    if version not in READABLE_FILE_VERSIONS:
        raise UnsupportedFeatureError(
            f"{path} is Lance file format {data_file.version_string}; lance_sql reads "
            "formats 2.0, 2.1 and 2.2"
        )

    def load() -> LanceFileReader:
        try:
            return LanceFileReader(root.open_source(key))
        except NotFoundError as exc:
            _raise_if_cleaned_up(store, root, manifest, path, exc)
            raise

    # shared by all scans: each holds a file descriptor and its parsed metadata. Data
    # files have unique names, except a MemWAL generation's WAL entries (numbered from 1
    # in each region, whose id is derived from its values): a table written again at
    # the same place reuses those names, so their key adds the file's identity.
    cache_key: tuple = (root.uri, key)
    if in_data_directory(manifest, data_file):
        cache_key = (root.uri, key, root.identity(key))
    return current_runtime().cache.get_or_load(DATA_FILES, cache_key, load)


def _raise_if_cleaned_up(store: ObjectStore, root: ObjectStore, manifest: Manifest, path: str,
                         exc: NotFoundError) -> None:
    """A file of ``manifest``'s version is missing from the table's own store (``root``
    is where it was looked for): VersionCleanedUpError when cleanup removed that version,
    and the file with it; else nothing (the caller lets ``exc`` through)."""
    if root is store and version_cleaned_up(store, manifest.version):
        error = VersionCleanedUpError(f"{path}: version {manifest.version} was removed by "
                                      "cleanup_old_versions, and this file with it")
        error.files_of_version = manifest.version
        raise error from exc


def checked_rows(store: ObjectStore, manifest: Manifest, fragment: Fragment, *,
                 small_ok: bool = False) -> int:
    """``fragment.physical_rows``, once it agrees with the row count in the footer of the
    fragment's first data file (opened and cached as any read would).

    Call before the count sizes anything (masks, row addresses, null columns, lineage):
    a manifest may claim 2**32 rows for a 100-row file. With ``small_ok``, claims of at
    most :data:`UNCHECKED_ROWS` are taken as they are, for callers that must not open
    data files they may never read: what such a claim sizes is small, and reading the
    rows checks the file then. A fragment without data files has nothing to check
    against; the manifest codec bounds its claim.
    """
    if not fragment.files or (small_ok and fragment.physical_rows <= UNCHECKED_ROWS):
        return fragment.physical_rows
    data_file = fragment.files[0]
    reader = open_data_file(store, manifest, data_file)
    if reader.num_rows != fragment.physical_rows:
        root = base_store(store, manifest, data_file.base_id)
        raise FormatError(
            f"{root.uri}/{data_file.key}: has {reader.num_rows} rows but fragment "
            f"{fragment.id} declares {fragment.physical_rows}"
        )
    return fragment.physical_rows


def deleted_offsets(store: ObjectStore, manifest: Manifest, fragment: Fragment) -> np.ndarray:
    """Sorted deleted row offsets of ``fragment`` (empty when it has no deletion file)."""
    deletion = fragment.deletion_file
    if deletion is None:
        return np.empty(0, dtype=np.uint32)
    root = base_store(store, manifest, deletion.base_id)
    key = deletion.key(fragment.id)
    path = f"{root.uri}/{key}"

    def load() -> np.ndarray:
        # bounds what decoding may expand
        rows = checked_rows(store, manifest, fragment, small_ok=True)
        try:
            data = root.read(key)
        except NotFoundError as exc:
            _raise_if_cleaned_up(store, root, manifest, path, exc)
            raise
        offsets = decode_deletions(deletion.kind, data, path, rows)
        # 0 means "not recorded" (old writers); otherwise counts and scans must agree
        if deletion.num_deleted_rows and len(offsets) != deletion.num_deleted_rows:
            raise FormatError(
                f"{path}: holds {len(offsets)} deleted rows but the manifest says "
                f"{deletion.num_deleted_rows}"
            )
        return offsets

    return current_runtime().cache.get_or_load(DELETIONS, (root.uri, key), load)


# The most memory a column no data file holds (read as NULLs) may take, in all and per
# row: its size comes from the schema alone (a fixed-size list's length), which a damaged
# or hostile manifest sets at will. (A row of 64 MiB is 16M floats: no real vector.)
MAX_NULL_COLUMN_BYTES = 1 << 32
MAX_NULL_ROW_BYTES = 1 << 26


def null_column(rows: int, field: LanceField, where: str) -> pa.Array:
    """``rows`` NULLs of ``field``'s type (a column the fragment has no file of); a
    FormatError naming ``where`` (the table) when they would take more than
    :data:`MAX_NULL_COLUMN_BYTES`, or a row more than :data:`MAX_NULL_ROW_BYTES`."""
    t = field.to_scan_arrow().type
    row = _row_bytes(t)
    size = rows * row
    if size > MAX_NULL_COLUMN_BYTES or row > MAX_NULL_ROW_BYTES:
        raise FormatError(f"{where}: column {field.name!r}: {rows} NULL rows of {t} would take "
                          f"{size} bytes (a fixed-size list this long is no real column)")
    return pa.nulls(rows, t)


def _row_bytes(t: pa.DataType) -> int:
    """Bytes a NULL row of ``t`` takes, at least (fixed-size children are allocated)."""
    if pa.types.is_fixed_size_list(t):
        return t.list_size * max(1, _row_bytes(t.value_type))
    if pa.types.is_struct(t):
        return sum(_row_bytes(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_fixed_size_binary(t):
        return t.byte_width
    try:
        return max(1, t.bit_width // 8)
    except ValueError:  # variable width: an offset a row
        return 8


class FragmentReader:
    """Reads rows of one fragment, columns spread over its data files."""

    def __init__(self, store: ObjectStore, manifest: Manifest, fragment: Fragment) -> None:
        self.store = store
        self.manifest = manifest
        self.fragment = fragment
        self._rows_checked = False
        # data file path -> its open reader, weakly: the runtime's bounded cache owns
        # open files, and a kept reader (see scan.FragmentReaders) must not pin them
        self._files: dict[str, weakref.ref[LanceFileReader]] = {}
        # (fields, their groups by data file with each file's column map): the last
        # fields taken, kept for the next take of the very same fields (see _file_groups)
        self._grouped: tuple[Sequence[LanceField], list[tuple[
            DataFile | None, list[int], dict[int, int] | None]]] | None = None
        # data file path -> its columns by field id (see _column_map)
        self._column_maps: dict[str, dict[int, int]] = {}
        # field id -> (data file, column index); later files win for a field id.
        self._locations: dict[int, tuple[DataFile, int]] = {}
        for data_file in fragment.files:
            for field_id, column in zip(data_file.fields, data_file.column_indices, strict=False):
                if field_id >= 0:
                    self._locations[field_id] = (data_file, column)

    def _absent(self, rows: int, field: LanceField) -> pa.Array:
        """``rows`` NULLs of a column no data file of the fragment holds (added after it
        was written); a column that takes no NULLs must be in a file."""
        where = f"{self.store.uri}: fragment {self.fragment.id}"
        if not field.nullable:
            raise FormatError(f"{where}: no data file holds column {field.name!r}, which "
                              "takes no NULLs")
        return null_column(rows, field, where)

    def data_file_of(self, field: LanceField) -> DataFile | None:
        """The data file holding ``field`` here (None: the fragment has no values for it)."""
        location = self._locations.get(field.id)
        if location is None:
            # Files of format 2.1+ store leaves only: find the field by its first leaf.
            location = next((self._locations[f.id] for f in column_fields(field)
                             if f.id in self._locations), None)
        return location[0] if location else None

    def _groups(self, fields: Sequence[LanceField]) -> list[tuple[DataFile | None, list[int]]]:
        groups: dict[str | None, tuple[DataFile | None, list[int]]] = {}
        for i, field in enumerate(fields):
            refuse_json(field, self.store.uri)
            data_file = self.data_file_of(field)
            key = data_file.path if data_file else None
            groups.setdefault(key, (data_file, []))[1].append(i)
        return list(groups.values())

    def _file_groups(self, fields: Sequence[LanceField]
                     ) -> list[tuple[DataFile | None, list[int], dict[int, int] | None]]:
        """:meth:`_groups` of ``fields`` with each data file's column map; a take of the
        very same ``fields`` object as the last (a kept plan's, see
        :data:`~lance_sql.table.read.scan.FragmentReaders`) reuses them."""
        kept = self._grouped  # one read: another thread may replace it meanwhile
        if kept is not None and kept[0] is fields:
            return kept[1]
        groups = [(data_file, indices,
                   self._column_map(data_file) if data_file is not None else None)
                  for data_file, indices in self._groups(fields)]
        self._grouped = (fields, groups)
        return groups

    def _column_map(self, data_file: DataFile) -> dict[int, int]:
        """``data_file``'s columns by field id, made once per reader: a scan reads column
        by column, and a map made per read cost columns² on wide tables."""
        known = self._column_maps.get(data_file.path)
        if known is None:
            known = {
                fid: col
                for fid, col in zip(data_file.fields, data_file.column_indices, strict=False)
                if fid >= 0
            }
            self._column_maps[data_file.path] = known  # (racing threads: the same map)
        return known

    def _parts(self, field: LanceField) -> dict[str | None, LanceField]:
        """``field`` cut into one part per data file holding some of it (key: the file's
        path, None for members no file holds): a struct's members may live in different
        files (pylance writes a member whose type changed into a new file)."""
        if field.logical_type != "struct" or not field.children:
            data_file = self.data_file_of(field)
            return {data_file.path if data_file else None: field}
        members: dict[str | None, list[LanceField]] = {}
        for child in field.children:
            for key, part in self._parts(child).items():
                members.setdefault(key, []).append(part)
        return {key: replace(field, children=tuple(kids)) for key, kids in members.items()}

    def _spread(self, fields: Sequence[LanceField]
                ) -> tuple[Sequence[LanceField], Callable[[list[pa.Array]], list[pa.Array]]]:
        """``fields`` with each struct spread over several data files replaced by its
        parts (see :meth:`_parts`), and what joins the parts' arrays back into the
        struct's; ``fields`` itself when no struct is spread (most reads)."""
        split = {i: parts for i, f in enumerate(fields) if f.logical_type == "struct"
                 and len(parts := list(self._parts(f).values())) > 1}
        if not split:
            return fields, lambda arrays: arrays
        flat: list[LanceField] = []
        spans: list[tuple[int, int]] = []
        for i, f in enumerate(fields):
            pieces = split.get(i, [f])
            spans.append((len(flat), len(pieces)))
            flat.extend(pieces)

        def join(arrays: list[pa.Array]) -> list[pa.Array]:
            return [arrays[start] if i not in split else
                    _joined(fields[i], list(zip(flat[start:start + n],
                                                arrays[start:start + n], strict=True)))
                    for i, (start, n) in enumerate(spans)]

        return flat, join

    def read(
        self, fields: Sequence[LanceField], *, offset: int = 0, length: int | None = None
    ) -> list[pa.Array]:
        """Physical rows ``[offset, offset+length)`` of ``fields`` (deleted rows included)."""
        fields, join = self._spread(fields)
        return join(self._read(fields, offset, length))

    def _read(self, fields: Sequence[LanceField], offset: int, length: int | None
              ) -> list[pa.Array]:
        self.check_rows()
        if length is None:
            length = self.fragment.physical_rows - offset
        out: list[pa.Array | None] = [None] * len(fields)
        for data_file, indices in self._groups(fields):
            wanted = [fields[i] for i in indices]
            if data_file is None:
                arrays = [self._absent(length, f) for f in wanted]
            else:
                reader = self._reader(data_file)
                arrays = reader.read(
                    wanted, self._column_map(data_file), offset=offset, length=length,
                    blob_descriptions=True,
                )
            for i, array in zip(indices, arrays, strict=False):
                out[i] = array
        return out

    def page_bounds(self, field: LanceField) -> np.ndarray | None:
        """Row boundaries of ``field``'s pages in this fragment (``0``, the end of each
        page), when its data file stores it as one 2.1+ column; else None."""
        found = self._opened(field)
        return None if found is None else found[0].page_bounds(field, found[1])

    def _opened(self, field: LanceField) -> tuple[LanceFileReader, dict[int, int]] | None:
        """The open reader of the data file holding ``field`` here (checked to hold the
        fragment's rows) and its column map; None when no data file has it."""
        data_file = self.data_file_of(field)
        if data_file is None:
            return None
        reader = self._reader(data_file)
        return reader, self._column_map(data_file)

    def take(self, fields: Sequence[LanceField], rows: np.ndarray) -> list[pa.Array]:
        return self._per_file(fields, len(rows), lambda reader, wanted, columns: reader.take(
            wanted, columns, rows, blob_descriptions=True))

    def take_row(self, fields: Sequence[LanceField], row: int) -> list[pa.Array]:
        """:meth:`take` of the one physical row ``row`` (in range), each data file's fields
        in one pass (:meth:`LanceFileReader.take_row`)."""
        return self._per_file(fields, 1, lambda reader, wanted, columns: reader.take_row(
            wanted, columns, row, blob_descriptions=True))

    def _per_file(self, fields: Sequence[LanceField], rows: int,
                  take: Callable[[LanceFileReader, list[LanceField], dict[int, int]],
                                 list[pa.Array]]) -> list[pa.Array]:
        """``fields`` taken by ``take`` from the data file of each (``rows`` NULLs for a
        field the fragment has no file of)."""
        fields, join = self._spread(fields)
        return join(self._take_each(fields, rows, take))

    def _take_each(self, fields: Sequence[LanceField], rows: int,
                   take: Callable[[LanceFileReader, list[LanceField], dict[int, int]],
                                  list[pa.Array]]) -> list[pa.Array]:
        self.check_rows()
        out: list[pa.Array | None] = [None] * len(fields)
        for data_file, indices, column_map in self._file_groups(fields):
            wanted = [fields[i] for i in indices]
            if data_file is None or column_map is None:
                arrays = [self._absent(rows, f) for f in wanted]
            else:
                reader = self._reader(data_file)
                arrays = take(reader, wanted, column_map)
            for i, array in zip(indices, arrays, strict=False):
                out[i] = array
        return out

    def point_column(self, field: LanceField) -> LeafColumn | None:
        """The leaf column of ``field`` in this fragment's data file when its rows may be
        taken through the point path (see :meth:`LanceFileReader.point_column`); None
        otherwise (absent here, a 2.0 file, a nested or blob field, ...)."""
        self.check_rows()
        refuse_json(field, self.store.uri)
        found = self._opened(field)
        return None if found is None else found[0].point_column(field, found[1])

    def leaf_pages(self, field: LanceField) -> list | None:
        """The decoders of the non-empty pages of ``field``'s column here, in row order,
        when it is a leaf read as its own type from one 2.1+ column (:meth:`point_column`);
        None otherwise (the general read path then reads it)."""
        column = self.point_column(field)
        return None if column is None else column.nonempty_pages()

    def field_columns(self, field: LanceField) -> list[tuple[LanceField, LeafColumn]] | None:
        """The leaves of ``field`` with their columns in this fragment's 2.1+ data file,
        when they are all there (see :meth:`LanceFileReader.field_columns`); None
        otherwise (the general read path then reads it)."""
        self.check_rows()
        refuse_json(field, self.store.uri)
        found = self._opened(field)
        return None if found is None else found[0].field_columns(field, found[1])

    def point_columns(self, fields: Sequence[LanceField]) -> list[LeafColumn | None]:
        """:meth:`point_column` of each of ``fields`` (a take of many rows), each data
        file opened and its column map made once for them all."""
        self.check_rows()
        out: list[LeafColumn | None] = [None] * len(fields)
        for data_file, indices, column_map in self._file_groups(fields):
            if data_file is None or column_map is None:
                continue
            reader = self._reader(data_file)
            for i in indices:
                out[i] = reader.point_column(fields[i], column_map)
        return out

    def check_rows(self) -> int:
        """The fragment's row count, checked against its first data file's footer (as
        :func:`checked_rows` does) once per reader, before it sizes anything."""
        if not self._rows_checked:
            if self.fragment.files:
                self._reader(self.fragment.files[0])  # (its footer's count checked there)
            self._rows_checked = True
        return self.fragment.physical_rows

    def _reader(self, data_file: DataFile) -> LanceFileReader:
        """The open reader of ``data_file``, checked to hold the fragment's rows. While
        it stays open, later reads of this fragment reader skip the runtime cache's
        lookup (for a MemWAL generation's file, a check of its identity on disk)."""
        ref = self._files.get(data_file.path)
        reader = ref() if ref is not None else None
        if reader is None:
            reader = open_data_file(self.store, self.manifest, data_file)
            self._check_file_rows(reader, data_file)
            self._files[data_file.path] = weakref.ref(reader)  # (racing threads: same)
        return reader

    def _check_file_rows(self, reader: LanceFileReader, data_file: DataFile) -> None:
        if reader.num_rows != self.fragment.physical_rows:
            raise FormatError(
                f"{self.store.uri}/{data_file.key}: has {reader.num_rows} rows but fragment "
                f"{self.fragment.id} declares {self.fragment.physical_rows}"
            )

    def keep_mask(self, *, small_ok: bool = False) -> np.ndarray | None:
        """Boolean mask of live rows, or None when nothing is deleted. ``small_ok``: see
        :func:`checked_rows` (for counts that, like ``count_rows()``, trust the manifest)."""
        deleted = deleted_offsets(self.store, self.manifest, self.fragment)
        if len(deleted) == 0:
            return None
        rows = (checked_rows(self.store, self.manifest, self.fragment, small_ok=True)
                if small_ok else self.check_rows())
        mask = np.ones(rows, dtype=bool)
        mask[deleted] = False
        return mask


def _joined(field: LanceField, pieces: list[tuple[LanceField, pa.Array]]) -> pa.Array:
    """One struct array of ``field`` from arrays of its parts (each a struct of some of
    its members, as read from one data file). Every part carries the struct's own
    validity; a part read from no file (all NULL) gives it only when alone."""
    if len(pieces) == 1 and len(pieces[0][0].children) == len(field.children):
        return pieces[0][1]
    children = []
    for child in field.children:
        found = [(part.children[k], array.field(k)) for part, array in pieces
                 for k, member in enumerate(part.children) if member.id == child.id]
        children.append(found[0][1] if len(found) == 1 and not child.children
                        else _joined(child, found))
    whole = next((array for _, array in pieces if array.null_count < len(array)),
                 pieces[0][1])
    mask = whole.is_null() if whole.null_count else None
    arrow_fields = [pa.field(c.name, a.type, c.nullable, c.to_arrow().metadata)
                    for c, a in zip(field.children, children, strict=True)]
    return pa.StructArray.from_arrays(children, fields=arrow_fields, mask=mask)


def live_rows(store: ObjectStore, manifest: Manifest, fragment: Fragment, start: int,
              stop: int) -> int:
    """Live rows among physical rows ``[start, stop)`` of ``fragment``, counted as
    ``count_rows()`` counts (trusting the manifest's row count, see :func:`checked_rows`)."""
    rows = stop - start
    if fragment.deletion_file is not None:
        mask = FragmentReader(store, manifest, fragment).keep_mask(small_ok=True)
        if mask is not None:
            rows = int(np.count_nonzero(mask[start:stop]))
    return rows


def row_addresses(fragment_id: int, offsets: np.ndarray) -> pa.Array:
    """Row addresses (fragment id << 32 | offset) of ``offsets`` in a fragment."""
    if len(offsets) == 1:  # a point lookup's row: its 8 bytes (a third of pa.array's cost)
        address = (fragment_id << 32) | int(offsets[0])
        return pa.Array.from_buffers(pa.uint64(), 1, [None, pa.py_buffer(
            address.to_bytes(8, "little"))])
    base = np.uint64(fragment_id) << np.uint64(32)
    addresses = offsets.astype(np.uint64)  # a copy: the caller's offsets stay as they are
    addresses |= base
    return array_from_numpy(addresses, pa.uint64())


def row_offsets(addresses: pa.Array | np.ndarray) -> np.ndarray:
    """The row offsets (low 32 bits, int64) of row addresses."""
    if isinstance(addresses, pa.Array | pa.ChunkedArray):
        addresses = addresses.to_numpy()
    return (np.asarray(addresses, np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def offsets_by_fragment(addresses: np.ndarray) -> dict[int, np.ndarray]:
    """Row addresses (uint64) as each fragment's row offsets, sorted (repeats kept);
    fragments without an address are absent."""
    addresses = np.sort(np.asarray(addresses, np.uint64))
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = row_offsets(addresses)
    cuts = np.flatnonzero(np.diff(fragments)) + 1
    return {int(f[0]): o for f, o in zip(np.split(fragments, cuts), np.split(offsets, cuts),
                                         strict=True) if f.size}


def by_fragment(manifest: Manifest, addresses: np.ndarray
                ) -> Iterator[tuple[Fragment, np.ndarray, np.ndarray]]:
    """Row addresses grouped by fragment: (fragment, its row offsets sorted, the positions
    of those addresses in ``addresses``), fragments in address order."""
    addresses = np.asarray(addresses, np.uint64)
    order = np.argsort(addresses, kind="stable")
    fragment_ids = addresses[order] >> np.uint64(32)
    bounds = np.flatnonzero(np.diff(fragment_ids)) + 1
    by_id = {f.id: f for f in manifest.fragments}
    for positions in np.split(order, bounds) if len(order) else []:
        frag_id = int(addresses[positions[0]] >> np.uint64(32))
        frag = by_id.get(frag_id)
        if frag is None:
            raise NotFoundError(f"row address refers to fragment {frag_id}, which does not exist")
        yield frag, row_offsets(addresses[positions]), positions


def system_arrays(store: ObjectStore, manifest: Manifest, fragment: Fragment,
                  rows: slice | np.ndarray, names: Sequence[str]) -> list[pa.Array]:
    """System columns ``names`` for physical ``rows`` (a slice or offsets) of a fragment.

    ``_rowid`` is the row address unless the table has stable row ids; the row
    versions exist only on such tables.
    """
    stable = manifest.uses_stable_row_ids
    out = []
    for name in names:
        if name == ROW_ADDR or (name == ROW_ID and not stable):
            if isinstance(rows, slice):  # consecutive addresses, made in one pass
                first = (fragment.id << 32) | rows.start
                out.append(array_from_numpy(np.arange(first, first + rows.stop - rows.start,
                                              dtype=np.uint64), pa.uint64()))
            else:
                out.append(row_addresses(fragment.id, rows))
            continue
        if not stable:
            raise UnsupportedFeatureError(
                f"{store.uri}: {name} exists only on tables created with stable row ids "
                "(write_dataset(..., enable_stable_row_ids=True))")
        lineage = load_lineage(store, manifest, fragment)
        values_at = {ROW_ID: lineage.ids_at, ROW_CREATED: lineage.created_at,
                     ROW_UPDATED: lineage.updated_at}[name]
        out.append(array_from_numpy(values_at(rows), pa.uint64()))
    return out


def refuse_json(field: LanceField, where: str) -> None:
    """Lance stores ``json`` columns as binary JSONB, which lance_sql does not decode yet:
    refuse them rather than hand back bytes that look like text but are not."""
    for f in field.walk():
        if f.logical_type == "json":
            raise UnsupportedFeatureError(
                f"{where}: column {f.name!r} is a Lance JSON (JSONB) column, which lance_sql "
                "cannot read or write yet"
            )
