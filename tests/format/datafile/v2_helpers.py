"""Shared helpers of the Lance 2.1/2.2 tests: pylance-written golden files and layout census.

Golden files are generated at test time with pylance (``lance.file.LanceFileWriter``) into
a temporary directory, so they always come from the installed reference version.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2

from lance_sql.format.datafile import BytesSource, LanceFileReader, container
from lance_sql.format.datafile.decode_v2_1 import column_fields
from lance_sql.format.pb import encodings_v2_1_pb2 as e21
from lance_sql.format.pb import file2_pb2


def pylance_write(path: Path, table: pa.Table, version: str, batch_rows: int | None = None,
                  **kw) -> bytes:  # fmt: skip
    """Write with pylance; several batches plus a small ``data_cache_bytes`` give many pages."""
    import lance.file

    with lance.file.LanceFileWriter(str(path), table.schema, version=version, **kw) as writer:
        if batch_rows is None:
            writer.write_batch(table)
        else:
            for batch in table.to_batches(max_chunksize=batch_rows):
                # fresh buffers: pylance 14.0.2 (2.1) panics on some sliced struct batches
                cols = [pa.concat_arrays([c, c.slice(0, 0)]) for c in batch.columns]
                writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=batch.schema))
    return path.read_bytes()


def pylance_read(path: Path) -> pa.Table:
    import lance.file

    return lance.file.LanceFileReader(str(path)).read_all().to_table()


def open_ours(data: bytes, path: str = "<memory>") -> tuple[LanceFileReader, dict[int, int]]:
    """Our reader of a standalone file plus its column map (column-owning fields in order)."""
    reader = LanceFileReader(BytesSource(data, path))
    fields = [c for f in reader.schema.fields for c in column_fields(f)]
    return reader, {f.id: i for i, f in enumerate(fields)}


def page_layouts(data: bytes) -> list[list[e21.PageLayout | str]]:
    """Per column, the parsed page layouts (or the type URL of a non-2.1 page)."""
    size = len(data)
    footer = container.parse_footer(data[-container.FOOTER_SIZE :], size, "x")
    cms = footer.column_meta_start
    region = memoryview(data[cms : size - container.FOOTER_SIZE])
    table = container.read_offset_table(
        region, footer.cmo_table_start - cms, footer.num_columns, size, "column", "x"
    )
    out = []
    for pos, length in table:
        meta = file2_pb2.ColumnMetadata()
        meta.ParseFromString(data[pos : pos + length])
        pages = []
        for page in meta.pages:
            any_msg = any_pb2.Any()
            any_msg.ParseFromString(page.encoding.direct.encoding)
            if any_msg.type_url == container.V21_PAGE_LAYOUT_URL:
                layout = e21.PageLayout()
                layout.ParseFromString(any_msg.value)
                pages.append(layout)
            else:
                pages.append(any_msg.type_url)
        out.append(pages)
    return out


def _walk_encoding(msg, counter: Counter) -> None:
    for fd, value in msg.ListFields():
        if fd.message_type is not None and fd.message_type.name == "CompressiveEncoding":
            values = value if fd.is_repeated else [value]
            for v in values:
                kind = v.WhichOneof("compression")
                if kind:
                    counter[kind] += 1
                    _walk_encoding(getattr(v, kind), counter)
        elif fd.message_type is not None:
            for v in value if fd.is_repeated else [value]:
                _walk_encoding(v, counter)


def census(data: bytes) -> Counter:
    """How often each page layout and compressive encoding occurs in a file."""
    counter: Counter = Counter()
    for pages in page_layouts(data):
        for layout in pages:
            if isinstance(layout, str):
                counter[layout] += 1
                continue
            kind = layout.WhichOneof("layout")
            counter[kind] += 1
            if kind == "mini_block_layout" and layout.mini_block_layout.HasField("dictionary"):
                counter["page_dictionary"] += 1
            _walk_encoding(getattr(layout, kind), counter)
            if kind == "blob_layout":
                inner = layout.blob_layout.inner_layout
                counter[inner.WhichOneof("layout")] += 1
                _walk_encoding(getattr(inner, inner.WhichOneof("layout")), counter)
    return counter


def random_rows(n: int, count: int, seed: int) -> np.ndarray:
    """Unsorted row offsets with repeats."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, count)


def assert_values(actual, expected, what: str = "") -> None:
    """Same type and values (nested dictionaries may differ in their dictionary arrays)."""
    if isinstance(actual, pa.ChunkedArray):
        actual = actual.combine_chunks()
    if isinstance(expected, pa.ChunkedArray):
        expected = expected.combine_chunks()
    assert actual.type == expected.type, f"{what}: type {actual.type} != {expected.type}"
    assert len(actual) == len(expected), f"{what}: length {len(actual)} != {len(expected)}"
    actual.validate(full=True)
    if not actual.equals(expected):
        a, e = actual.to_pylist(), expected.to_pylist()
        bad = [i for i, (x, y) in enumerate(zip(a, e, strict=True)) if x != y][:5]
        assert not bad, f"{what}: rows {bad} differ: {[a[i] for i in bad]} != {[e[i] for i in bad]}"
