"""``batched.decode_whole``: the pages of one column in several files decoded in one pass
equal the files' columns read one by one, for every leaf type the writer makes mini-block
pages of (with and without nulls, pages of differing encodings kept apart), and a page
set that cannot be decoded together is refused (None), not decoded wrong."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import ALL_KINDS, table_of, write_ours

from lance_sql.format.datafile import BytesSource, LanceFileReader
from lance_sql.format.datafile.batched import decode_whole
from lance_sql.format.datafile.miniblock import MiniBlockPage

LEAF_KINDS = [k for k in ALL_KINDS
              if not k.startswith(("list", "large_list", "struct", "dict_"))]


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
