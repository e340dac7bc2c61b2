"""Blob columns written by pylance, read by lance_sql as pylance's scanner returns them.

pylance 14.0.2 (verified): in format 2.2 every blob column (``lance.blob_field`` /
``lance.blob.v2``, and ``large_binary`` marked ``lance-encoding:blob``, which 2.2 rewrites to
blob v2) is stored as a full-zip page of ``variable_packed_struct`` descriptions
``{kind, position, size, blob_id, blob_uri}``; the file schema lists those fields with id -1.
``to_table``/``take`` return the descriptions (``BLOB_V2_DESCRIPTION`` with metadata
packed/blob = true), never the bytes; ``take_blobs`` returns file-like objects. In 2.1 a
legacy blob column is a blob page and ``to_table`` returns ``{position, size}``.
Tables are written at test time; every row is compared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import FormatError, LanceError, UnsupportedFeatureError
from lance_sql.format.datafile.reader import LanceFileReader
from lance_sql.format.datafile.source import BytesSource
from lance_sql.format.datafile.writer import LanceFileWriter
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import BLOB_V2_DESCRIPTION, LanceSchema

lance = pytest.importorskip("lance")
Blob = pytest.importorskip("lance.blob").Blob

ROWS = 2500
LEGACY = {"lance-encoding:blob": "true"}


def _values(ext: Path, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out: list = []
    for i in range(ROWS):
        if i % 10 == 0:
            out.append(None)
        elif i % 10 == 1:
            out.append(b"")
        elif i % 97 == 5:
            out.append(rng.bytes(70_000 + i))  # > 64 KiB: out of the data file
        elif i % 53 == 7:
            out.append((ext / f"f{i % 3}.bin").as_uri())
        elif i % 61 == 8:
            out.append(Blob.from_uri((ext / "f1.bin").as_uri(), position=i % 100, size=9 + i % 40))
        else:
            out.append(rng.bytes(int(rng.integers(1, 600))))
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("blobs")
    ext = root / "ext"
    ext.mkdir()
    for k in range(3):
        (ext / f"f{k}.bin").write_bytes(bytes(range(256)) * 20)
    vals = _values(ext, 1)
    plain = [v if isinstance(v, bytes | None) else b"u" * 77 for v in vals]
    schema = pa.schema([
        pa.field("id", pa.int64()),
        lance.blob_field("b"),
        lance.blob_field("p", inline_size_threshold=64, dedicated_size_threshold=100_000),
        lance.blob_field("nn", nullable=False),
        pa.field("legacy", pa.large_binary(), metadata=LEGACY),
    ])  # fmt: skip
    table = pa.table({
        "id": np.arange(ROWS),
        "b": lance.blob_array(vals),
        "p": lance.blob_array(plain),
        "nn": lance.blob_array([b"" if v is None else v for v in plain]),
        "legacy": pa.array(plain, pa.large_binary()),
    }, schema=schema)  # fmt: skip
    def batches(t: pa.Table) -> pa.RecordBatchReader:  # several batches: several pages
        return pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=400))

    out = {"2.2": root / "t22", "2.1": root / "t21"}
    lance.write_dataset(batches(table), out["2.2"], max_page_bytes=16 * 1024,
                        data_cache_bytes=64 * 1024, allow_external_blob_outside_bases=True)
    lance.write_dataset(batches(table.select(["id", "legacy"])), out["2.1"],
                        data_storage_version="2.1", max_page_bytes=16 * 1024,
                        data_cache_bytes=64 * 1024)  # fmt: skip
    return out


def _files(path: Path):
    """(manifest, [(reader, column map)]) of every data file, fragment order."""
    from lance_sql.table.dataset import dataset

    manifest: Manifest = dataset(str(path)).manifest
    out = []
    for frag in manifest.fragments:
        (df,) = frag.files
        data = (path / "data" / df.path).read_bytes()
        reader = LanceFileReader(BytesSource(data, str(path / "data" / df.path)))
        out.append((reader, dict(zip(df.fields, df.column_indices, strict=True))))
    return manifest, out


def _ours(path: Path, rows: np.ndarray | None = None) -> pa.Table:
    manifest, files = _files(path)
    schema = manifest.schema
    assert len(files) == 1
    reader, cmap = files[0]
    if rows is None:
        arrays = reader.read(schema.fields, cmap, blob_descriptions=True)
    else:
        arrays = reader.take(schema.fields, cmap, rows, blob_descriptions=True)
    return pa.Table.from_arrays(arrays, schema=schema.to_scan_arrow())


def _assert_tables(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema.equals(expected.schema, check_metadata=True), (got.schema, expected.schema)
    for name in expected.column_names:
        a, b = got.column(name).combine_chunks(), expected.column(name).combine_chunks()
        assert a.equals(b), name
        if pa.types.is_struct(a.type):  # children too, as pylance fills them under nulls
            for i in range(a.type.num_fields):
                assert a.field(i).equals(b.field(i)), (name, a.type.field(i).name)


@pytest.mark.parametrize("version", ["2.2", "2.1"])
def test_full_read_matches_pylance(tables, version: str) -> None:
    path = tables[version]
    _assert_tables(_ours(path), lance.dataset(path).to_table())


@pytest.mark.parametrize("version", ["2.2", "2.1"])
def test_take_matches_pylance(tables, version: str) -> None:
    path = tables[version]
    rng = np.random.default_rng(7)
    rows = np.concatenate([rng.integers(0, ROWS, 300), [0, 1, 5, ROWS - 1, 5]])
    _assert_tables(_ours(path, rows), lance.dataset(path).take(rows))


def test_shapes_are_covered(tables) -> None:
    """The 2.2 table holds every description kind, several pages, nulls and empties."""
    expected = lance.dataset(tables["2.2"]).to_table()
    kinds = set()
    for name in ("b", "p"):
        col = expected.column(name).combine_chunks()
        kinds |= set(col.field("kind").drop_null().to_pylist())
        assert col.null_count and (col.field("size").to_numpy(zero_copy_only=False) == 0).any()
    assert kinds >= {0, 1, 3}, kinds
    assert expected.schema.field("b").type == BLOB_V2_DESCRIPTION
    _, files = _files(tables["2.2"])
    reader, cmap = files[0]
    assert len(reader._columns[cmap[1]].pages) > 2  # b spans several pages


def test_scan_schema_and_file_schema(tables) -> None:
    manifest, files = _files(tables["2.2"])
    assert manifest.schema.to_scan_arrow() == lance.dataset(tables["2.2"]).to_table().schema
    # the data file's own schema: blob structs adopt their id -1 description fields
    reader, _ = files[0]
    b = next(f for f in reader.schema.fields if f.name == "b")
    assert [c.name for c in b.children] == ["kind", "position", "size", "blob_id", "blob_uri"]
    assert all(c.id < -1 for c in b.children)
    assert b.arrow_type == BLOB_V2_DESCRIPTION


def test_legacy_bytes_still_readable_without_descriptions(tables) -> None:
    """2.1 legacy blobs: without blob_descriptions the file reader returns the bytes."""
    manifest, files = _files(tables["2.1"])
    reader, cmap = files[0]
    field = manifest.schema.field("legacy")
    (got,) = reader.read([field], cmap)
    expected = lance.dataset(tables["2.1"]).take_blobs("legacy", indices=list(range(ROWS)))
    assert got.to_pylist() == [None if f is None else f.read() for f in expected]


def test_writer_refuses_blob_columns(tmp_path) -> None:
    for field in (lance.blob_field("b"), pa.field("b", pa.large_binary(), metadata=LEGACY)):
        schema = LanceSchema.from_arrow(pa.schema([field]))
        for version in ("2.0", "2.2"):
            with open(tmp_path / f"x-{version}.lance", "wb") as sink:
                with pytest.raises(UnsupportedFeatureError, match="'b'.*blob"):
                    LanceFileWriter(sink, schema, version=version)


# --------------------------------------------------------------------------- bad input
def _blob_page(tables) -> tuple[bytes, str, tuple[int, int], LanceSchema, dict[int, int]]:
    manifest, files = _files(tables["2.2"])
    reader, cmap = files[0]
    page = reader._columns[cmap[1]].pages[0]
    return (reader.source.read_at(0, reader.source.size).tobytes(), reader.path,
            page.buffers[0], manifest.schema, cmap)  # fmt: skip


def _read_b(data: bytes, path: str, schema: LanceSchema, cmap: dict[int, int]) -> pa.Array:
    reader = LanceFileReader(BytesSource(data, path))
    return reader.read([schema.field("b")], cmap)[0]


def test_truncated_blob_description_is_format_error(tables) -> None:
    data, path, (off, size), schema, cmap = _blob_page(tables)
    # cut the page data short: zero the tail, so lengths and fields run past their rows
    bad = bytearray(data)
    bad[off + size // 2 : off + size] = b"\xff" * (size - size // 2)
    with pytest.raises(FormatError, match=path):
        _read_b(bytes(bad), path, schema, cmap)


def test_mutated_blob_page_never_crashes(tables) -> None:
    data, path, (off, size), schema, cmap = _blob_page(tables)
    rng = np.random.default_rng(3)
    failures = 0
    for _ in range(150):
        bad = bytearray(data)
        for pos in rng.integers(off, off + size, int(rng.integers(1, 6))):
            bad[pos] = int(rng.integers(0, 256))
        try:
            _read_b(bytes(bad), path, schema, cmap)
        except LanceError as exc:
            assert path in str(exc)
            failures += 1
    assert failures  # some mutations must be caught


# ------------------------------------------------------------- through the table and SQL
@pytest.mark.parametrize("version", ["2.2", "2.1"])
def test_table_scan_and_take_match_pylance(tables, version: str) -> None:
    from lance_sql.table.dataset import dataset

    path = str(tables[version])
    _assert_tables(dataset(path).to_table(), lance.dataset(path).to_table())
    rows = np.array([2000, 5, 3, 0, 1, 77, 2499])
    _assert_tables(dataset(path).take(rows), lance.dataset(path).take(rows))


def test_sql_returns_blob_descriptions(tables) -> None:
    from lance_sql.sql.session import connect

    path = tables["2.2"]
    got = connect(path.parent).sql(f"SELECT id, b, nn FROM {path.name} ORDER BY id")
    expected = lance.dataset(str(path)).to_table(columns=["id", "b", "nn"])
    table = got.to_arrow_table()
    for name in ("id", "b", "nn"):
        assert table.column(name).combine_chunks().equals(
            expected.column(name).combine_chunks()), name
