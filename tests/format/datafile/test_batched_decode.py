"""``batched.decode_whole``: the pages of one column in several files decoded in one pass
equal the files' columns read one by one, for every leaf type the writer makes mini-block
pages of (with and without nulls, pages of differing encodings kept apart), and a page
set that cannot be decoded together is refused (None), not decoded wrong.
``batched.decode_whole_levels`` does the same for the leaf columns of lists and structs,
whose rows the field is then built from (``build_field``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, colmap, table_of, write_ours

from lance_sql.format.datafile import BytesSource, LanceFileReader
from lance_sql.format.datafile.batched import decode_whole, decode_whole_levels
from lance_sql.format.datafile.decode_v2_1 import build_field
from lance_sql.format.datafile.miniblock import MiniBlockPage

LEAF_KINDS = [k for k in ALL_KINDS
              if not k.startswith(("list", "large_list", "struct", "dict_"))]
NESTED_KINDS = [k for k in ALL_KINDS if k.startswith(("list", "large_list", "struct"))]


def _files(kind: str, version: str) -> list[tuple[LanceFileReader, object, pa.Array]]:
    """Five small files of one column of ``kind``: nulls in some only, sizes differing."""
    out = []
    for k, (rows, mode) in enumerate([(700, "none"), (300, "some"), (1024, "none"),
                                      (5, "some"), (900, "all")]):
        table = table_of([kind], rows, mode, seed=k)
        data, schema, _ = write_ours(table, version=version)
        reader = LanceFileReader(BytesSource(data, f"<file {k}>"))
        field = schema.fields[0]
        out.append((reader, field, reader.read([field], {field.id: 0})[0]))
    return out


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("kind", LEAF_KINDS)
def test_pages_of_several_files_decode_as_each_alone(kind, version) -> None:
    files = _files(kind, version)
    groups: dict[tuple, list[tuple[list[MiniBlockPage], pa.Array]]] = {}
    for reader, field, alone in files:
        column = reader.point_column(field, {field.id: 0})
        if column is None:
            pytest.skip(f"{kind} is not read as its own leaf type")
        pages = [column.page(p) for p in range(len(column.info.pages))]
        if not all(isinstance(p, MiniBlockPage) for p in pages):
            continue
        keys = {p.batch_key() for p in pages}
        if len(keys) == 1 and None not in keys:
            groups.setdefault(keys.pop(), []).append((pages, alone))
    together = [g for g in groups.values() if len(g) > 1]
    # (low-cardinality strings: dictionary pages, one dictionary each, read alone)
    assert together or kind == "string_lowcard", f"no two files of {kind} decode together"
    for members in together:
        got = decode_whole([p for pages, _ in members for p in pages])
        assert got is not None
        want = pa.concat_arrays([alone for _, alone in members])
        assert got.type == want.type
        assert got.equals(want), kind


def test_pages_of_different_encodings_are_refused() -> None:
    """Pages whose keys differ (here: one with nulls, one without) are not decoded
    together, nor pages that cannot be (a dictionary)."""
    (a, fa, _), (b, fb, _) = _files("int32", "2.2")[:2]
    pa_ = a.point_column(fa, {fa.id: 0}).page(0)
    pb_ = b.point_column(fb, {fb.id: 0}).page(0)
    assert pa_.batch_key() != pb_.batch_key()
    assert decode_whole([pa_, pb_]) is None
    table = pa.table({"s": pa.array([f"v{i % 3}" for i in range(4000)])})
    data, schema, _ = write_ours(table, version="2.2")
    reader = LanceFileReader(BytesSource(data))
    page = reader.point_column(schema.fields[0], {schema.fields[0].id: 0}).page(0)
    page.load()
    if page.dictionary is not None:
        assert page.batch_key() is None
        assert decode_whole([page, page]) is None


def test_a_corrupt_chunk_is_refused_not_decoded() -> None:
    """A chunk header claiming more bytes than its chunk holds: None (the caller reads the
    page alone, whose decoder raises the FormatError)."""
    files = _files("int64", "2.2")
    reader, field, _ = files[0]
    page = reader.point_column(field, {field.id: 0}).page(0)
    offset, size = page.chunk_span()
    raw = bytearray(page.read(offset, size))
    raw[2:4] = (0xFFFF).to_bytes(2, "little")  # the first chunk's value buffer size

    def read(at: int, length: int, original=page.read) -> bytes:
        data = bytes(original(at, length))
        if at == offset and length == size:
            return bytes(raw)
        return data

    page.read = read
    other = files[2][0].point_column(files[2][1], {files[2][1].id: 0}).page(0)
    assert page.batch_key() == other.batch_key()
    assert decode_whole([page, other]) is None
    assert np.array_equal(files[2][2].to_numpy(zero_copy_only=False),
                          decode_whole([other, other]).to_numpy(zero_copy_only=False)[:1024])


def _nested_files(kind: str, version: str) -> list[tuple[LanceFileReader, object, dict, pa.Array]]:
    """:func:`_files` of a list or struct column, with each file's column map."""
    out = []
    for k, (rows, mode) in enumerate([(700, "none"), (300, "some"), (1024, "none"),
                                      (5, "some"), (900, "all")]):
        table = table_of([kind], rows, mode, seed=k)
        data, schema, written = write_ours(table, version=version)
        reader = LanceFileReader(BytesSource(data, f"<file {k}>"))
        field, cmap = schema.fields[0], colmap(written)
        alone = reader.read([field], cmap)[0]
        assert alone.equals(table.column(0).combine_chunks())
        out.append((reader, field, cmap, alone))
    return out


def _batchable_pages(reader: LanceFileReader, field, cmap: dict
                     ) -> tuple[list, tuple | None]:
    """Per leaf column of ``field``, its non-empty pages; and the leaves' levels batch
    keys (None when some leaf's pages cannot be decoded together)."""
    columns = reader.field_columns(field, cmap)
    assert columns is not None
    per_leaf, keys = [], []
    for _, column in columns:
        pages = column.nonempty_pages()
        found = {p.batch_key(levels=True) if isinstance(p, MiniBlockPage) else None
                 for p in pages}
        per_leaf.append(pages)
        keys.append(found.pop() if len(found) == 1 else None)
    return per_leaf, None if None in keys else tuple(keys)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("kind", NESTED_KINDS)
def test_nested_pages_of_several_files_decode_as_each_alone(kind, version) -> None:
    """Every leaf column of a list or struct field decoded across files, the field built
    from them once: the files' fields read one by one, joined."""
    files = _nested_files(kind, version)
    groups: dict[tuple, list[tuple[list, pa.Array]]] = {}
    for reader, field, cmap, alone in files:
        per_leaf, key = _batchable_pages(reader, field, cmap)
        if key is not None:
            groups.setdefault(key, []).append((per_leaf, alone))
    together = [g for g in groups.values() if len(g) > 1]
    # (lists all empty or null: their items column has no mini-block pages)
    assert together or kind == "list_empty", f"no two files of {kind} decode together"
    leaves = [leaf for leaf, _ in files[0][0].field_columns(field, files[0][2])]
    for members in together:
        data = {}
        for j, leaf in enumerate(leaves):
            got = decode_whole_levels([p for per_leaf, _ in members for p in per_leaf[j]])
            assert got is not None
            data[leaf.id] = got
        want = pa.concat_arrays([alone for _, alone in members])
        built = build_field(field, data, len(want), "<files>")
        assert built.equals(want), kind


def test_list_pages_are_refused_by_the_leaf_decode() -> None:
    """A list's pages have a key only for the levels decode: the leaf decode, whose
    values are rows, refuses them."""
    reader, field, cmap, _ = _nested_files("list_int32", "2.2")[0]
    ((_, column),) = reader.field_columns(field, cmap)
    page = column.page(0)
    assert page.batch_key() is None
    assert page.batch_key(levels=True) is not None
    assert decode_whole([page, page]) is None
