"""One column of many small fragments decoded in one pass (see
:mod:`lance_sql.format.datafile.batched`).

Reading a fragment's column costs a fixed few hundred microseconds of interpreter work
besides the decoding itself, so a table of a thousand 1,000-row fragments spent most of a
scan there. Here the pages of one column in every fragment of a batch are grouped by
their shape and encoding, each group decoded at once, and each fragment's rows handed
back as a slice of the result (no copy); a field with children (lists, structs, maps)
is built once for the batch from its leaf columns decoded so. A fragment whose column
cannot be decoded so (a 2.0 file, a dictionary, a blob, a page that does not add up)
gets None: the caller reads it the usual way, which also raises any error naming the
file.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.format.datafile.batched import decode_whole, decode_whole_levels
from lance_sql.format.datafile.decode_v2_1 import build_field, nesting_depth
from lance_sql.format.datafile.reader import UNEXPECTED
from lance_sql.format.schema import LanceField
from lance_sql.table.files.reader import FragmentReader


def whole_columns(readers: Sequence[FragmentReader], field: LanceField
                  ) -> list[pa.Array | None]:
    """All rows of ``field`` in each fragment of ``readers`` (whose row counts were
    checked), where its pages decode together with those of another fragment; None for
    the others."""
    return _decoded(readers, field)[0]


def _decoded(readers: Sequence[FragmentReader], field: LanceField
             ) -> tuple[list[pa.Array | None], pa.Array | None]:
    """:func:`whole_columns`, and the whole run's column as one array when all the
    fragments' pages decoded together in one pass (else None)."""
    if field.children:
        return _decoded_nested(readers, field)
    groups: dict[Hashable, list[_Member]] = {}
    for i, reader in enumerate(readers):
        try:
            pages = reader.leaf_pages(field)
            if not pages:
                continue
            keys = {page.batch_key() for page in pages} \
                if all(hasattr(p, "batch_key") for p in pages) else {None}
        except (LanceError, *UNEXPECTED):
            continue  # read the usual way, which raises it where it belongs
        key = keys.pop() if len(keys) == 1 else None
        if key is not None and sum(p.num_rows for p in pages) == \
                reader.fragment.physical_rows:
            groups.setdefault(key, []).append((i, pages, reader.fragment.physical_rows))
    return _hand_out(groups, len(readers), lambda members: decode_whole(
        [page for _, pages, _ in members for page in pages]))


_Member = tuple[int, Any, int]  # (reader index, its pages, its rows)


def _hand_out(groups: Mapping[Hashable, list[_Member]], count: int,
              decode: Callable[[list[_Member]], pa.Array | None]
              ) -> tuple[list[pa.Array | None], pa.Array | None]:
    """Each group of two or more of ``count`` fragments (members in the readers' order)
    decoded in one pass by ``decode`` (None: left to the usual read), and each member's
    rows handed back as a slice of the result; the result itself as the whole run's
    column when one group holds every fragment."""
    out: list[pa.Array | None] = [None] * count
    joined = None
    for members in groups.values():
        if len(members) < 2:
            continue  # nothing to share: the usual read
        decoded = decode(members)
        if decoded is None:
            continue
        if len(members) == count:
            joined = decoded
        at = 0
        for i, _, rows in members:
            out[i] = decoded.slice(at, rows)
            at += rows
    return out, joined


class WholeColumns:
    """The columns of a run of fragments (``readers``, rows checked), each decoded by
    :func:`whole_columns` when first asked for: a filtered scan whose filter leaves a
    run of fragments without matches never decodes their other columns. Used by the one
    thread reading the run."""

    def __init__(self, readers: Sequence[FragmentReader], fields: Sequence[LanceField]
                 ) -> None:
        self._readers = readers
        self._fields = {f.name: f for f in fields}
        self._columns: dict[str, list[pa.Array | None]] = {}
        self._joined: dict[str, pa.Array | None] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the fields read."""
        return tuple(self._fields)

    def column(self, name: str) -> list[pa.Array | None]:
        """``name``'s whole column in each fragment (None where not decoded together)."""
        got = self._columns.get(name)
        if got is None:
            got, self._joined[name] = _decoded(self._readers, self._fields[name])
            self._columns[name] = got
        return got

    def joined(self, name: str) -> pa.Array | None:
        """``name``'s column over the whole run as one array (its fragments' rows one
        after another), when some fragments' pages decoded together: those of an
        encoding of their own are read alone and joined in order. None when none did
        (the run's reader then goes fragment by fragment)."""
        pieces = self.column(name)
        whole = self._joined[name]
        if whole is None and any(a is not None for a in pieces):
            field = self._fields[name]
            try:
                whole = pa.concat_arrays(
                    [a if a is not None else reader.read([field])[0]
                     for a, reader in zip(pieces, self._readers, strict=True)])
            except pa.ArrowException:
                return None  # (types that do not join: fragment by fragment)
            self._joined[name] = whole
        return whole

    def of(self, i: int) -> Mapping[str, pa.Array | None]:
        """The columns of the ``i``-th fragment, by name."""
        return _FragmentColumns(self, i)


class _FragmentColumns(Mapping[str, "pa.Array | None"]):
    def __init__(self, batch: WholeColumns, i: int) -> None:
        self._batch = batch
        self._i = i

    def __getitem__(self, name: str) -> pa.Array | None:
        if name not in self._batch.names:
            raise KeyError(name)
        return self._batch.column(name)[self._i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._batch.names)

    def __len__(self) -> int:
        return len(self._batch.names)


def _decoded_nested(readers: Sequence[FragmentReader], field: LanceField
                    ) -> tuple[list[pa.Array | None], pa.Array | None]:
    """:func:`_decoded` of a field with children (lists, structs, maps, ...): each of
    its leaf columns decoded across the fragments into levels and values
    (:func:`decode_whole_levels`), the field's rows built from them once for the run."""
    groups: dict[Hashable, list[_Member]] = {}
    leaves: list[LanceField] = []
    for i, reader in enumerate(readers):
        try:
            columns = reader.field_columns(field)
            if not columns:
                continue
            rows = reader.fragment.physical_rows
            per_leaf, keys = [], []
            for _, column in columns:
                pages = column.nonempty_pages()
                found = {p.batch_key(levels=True) if hasattr(p, "batch_key") else None
                         for p in pages}
                if len(found) != 1 or sum(p.num_rows for p in pages) != rows:
                    break
                key = found.pop()
                if key is None:
                    break
                per_leaf.append(pages)
                keys.append(key)
            else:
                leaves = [leaf for leaf, _ in columns]
                groups.setdefault(tuple(keys), []).append((i, per_leaf, rows))
        except (LanceError, *UNEXPECTED):
            continue  # read the usual way, which raises it where it belongs

    def build(members: list[_Member]) -> pa.Array | None:
        data = {}
        for j, leaf in enumerate(leaves):
            got = decode_whole_levels([p for _, per_leaf, _ in members for p in per_leaf[j]])
            if got is None or len(got[0]) != nesting_depth(field, leaf):
                return None
            data[leaf.id] = got
        total = sum(rows for _, _, rows in members)
        try:
            decoded = build_field(field, data, total, "", descriptions=True)
        except (LanceError, *UNEXPECTED):
            return None
        return decoded if len(decoded) == total else None

    return _hand_out(groups, len(readers), build)
