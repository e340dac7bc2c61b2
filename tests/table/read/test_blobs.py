"""``LanceDataset.take_blobs``: lazy blob files, compared byte for byte with pylance.

Tables are written by pylance 14.0.2 at test time: blob v2 columns in format 2.2
(inline, packed, dedicated and external blobs; nulls and empties; several fragments,
stable row ids and deleted rows) and a legacy blob column in format 2.1.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    PathEscapeError,
    UnsupportedFeatureError,
)
from lance_sql.format.fragment import BasePath
from lance_sql.table.dataset import dataset
from lance_sql.table.read.blobs import BlobFile, _Locator, blob_file_name

lance = pytest.importorskip("lance")
Blob = pytest.importorskip("lance.blob").Blob

ROWS = 700
PER_FILE = 300
DELETE = "id % 17 = 3"
BLOB_COLUMNS = ("b", "p", "d", "nn")


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
            out.append(rng.bytes(int(rng.integers(1, 2000))))
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("take_blobs")
    ext = root / "ext"
    ext.mkdir()
    for k in range(3):
        (ext / f"f{k}.bin").write_bytes(bytes(range(256)) * (20 + k))
    vals = _values(ext, 3)
    plain = [v if isinstance(v, bytes | None) else b"u" * 77 for v in vals]
    schema = pa.schema([
        pa.field("id", pa.int64()),
        lance.blob_field("b"),
        lance.blob_field("p", inline_size_threshold=64, dedicated_size_threshold=100_000),
        lance.blob_field("d", inline_size_threshold=64, dedicated_size_threshold=1000),
        lance.blob_field("nn", nullable=False),
    ])  # fmt: skip
    table = pa.table({
        "id": np.arange(ROWS),
        "b": lance.blob_array(vals),
        "p": lance.blob_array(plain),
        "d": lance.blob_array(plain),
        "nn": lance.blob_array([b"" if v is None else v for v in plain]),
    }, schema=schema)  # fmt: skip
    out = {"2.2": root / "t22", "2.1": root / "t21"}
    lance.write_dataset(table, out["2.2"], max_rows_per_file=PER_FILE, enable_stable_row_ids=True,
                        allow_external_blob_outside_bases=True)
    lance.dataset(out["2.2"]).delete(DELETE)
    legacy = pa.schema([pa.field("id", pa.int64()),
                        pa.field("legacy", pa.large_binary(),
                                 metadata={"lance-encoding:blob": "true"})])
    legacy_table = pa.table({"id": np.arange(ROWS), "legacy": pa.array(plain, pa.large_binary())},
                            schema=legacy)
    lance.write_dataset(legacy_table, out["2.1"], data_storage_version="2.1",
                        max_rows_per_file=PER_FILE)
    lance.dataset(out["2.1"]).delete(DELETE)
    return out


CASES = [("2.2", c) for c in BLOB_COLUMNS] + [("2.1", "legacy")]


def _selectors(ref) -> dict[str, list[int]]:
    meta = ref.to_table(columns=[], with_row_id=True, with_row_address=True)
    return {
        "indices": list(range(ref.count_rows())),
        "ids": meta.column("_rowid").to_pylist(),
        "addresses": meta.column("_rowaddr").to_pylist(),
    }


def _same(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert (a is None) == (b is None), i
        if b is not None:
            assert a.size() == b.size(), i
            assert a.readall() == b.readall(), i


@pytest.mark.parametrize(("version", "column"), CASES)
def test_every_row_matches_pylance(tables, version: str, column: str) -> None:
    ref, ours = lance.dataset(tables[version]), dataset(tables[version])
    for kind, rows in _selectors(ref).items():
        _same(ours.take_blobs(column, **{kind: rows}), ref.take_blobs(column, **{kind: rows}))


def test_shapes_are_covered(tables) -> None:
    t = lance.dataset(tables["2.2"]).to_table()
    kinds = {c: set(t.column(c).combine_chunks().field("kind").drop_null().to_pylist())
             for c in BLOB_COLUMNS}
    assert kinds["b"] >= {0, 1, 3} and kinds["p"] >= {0, 1} and kinds["d"] == {0, 1, 2}
    assert len(lance.dataset(tables["2.2"]).get_fragments()) == 3
    assert t.column("b").null_count and t.column("nn").null_count == 0


def test_order_duplicates_and_partial_selection(tables) -> None:
    ref, ours = lance.dataset(tables["2.2"]), dataset(tables["2.2"])
    rows = [5, 0, 5, 400, 3, 1, 1]
    for column in BLOB_COLUMNS:
        _same(ours.take_blobs(column, indices=rows), ref.take_blobs(column, indices=rows))
        _same(ours.take_blobs(column, indices=pa.array(rows)), ref.take_blobs(column, indices=rows))
    assert ours.take_blobs("b", indices=[]) == []


def test_seek_and_partial_reads(tables) -> None:
    ref, ours = lance.dataset(tables["2.2"]), dataset(tables["2.2"])
    n = ref.count_rows()
    for column in ("b", "d"):
        theirs = ref.take_blobs(column, indices=list(range(n)))
        mine = ours.take_blobs(column, indices=list(range(n)))
        big = max((i for i in range(n) if theirs[i] is not None), key=lambda i: theirs[i].size())
        a, b = mine[big], theirs[big]
        size = b.size()
        assert a.readable() and a.seekable() and isinstance(a, io.RawIOBase)
        assert a.read(10) == b.read(10) and a.tell() == b.tell() == 10
        assert a.seek(size // 2) == b.seek(size // 2)
        assert a.read(1000) == b.read(1000)
        assert a.seek(-7, io.SEEK_END) == b.seek(-7, io.SEEK_END)
        assert a.read(100) == b.read(100)  # short read at the end
        assert a.read(5) == b.read(5) == b""
        assert a.seek(3) == 3 and a.seek(4, io.SEEK_CUR) == 7
        b.seek(7)
        assert a.read() == b.read()
        assert a.seek(size + 10) == size + 10 and a.read(3) == b""
        buf = bytearray(16)
        a.seek(20)
        assert a.readinto(buf) == 16 and bytes(buf) == b.read_range(20, 16)
        assert a.read_range(1, 9) == b.read_range(1, 9) and a.tell() == 36
        with pytest.raises(ValueError):
            a.seek(-1)
        with a as f:
            assert f.read(1) == b.read_range(36, 1)
        assert a.closed
        with pytest.raises(ValueError):
            a.read()


def test_selector_errors(tables) -> None:
    ours = dataset(tables["2.2"])
    with pytest.raises(NotFoundError, match="zz"):
        ours.take_blobs("zz", indices=[0])
    with pytest.raises(InvalidInputError, match="not a blob column"):
        ours.take_blobs("id", indices=[0])
    with pytest.raises(InvalidInputError):
        ours.take_blobs("b")
    with pytest.raises(InvalidInputError):
        ours.take_blobs("b", indices=[0], ids=[0])
    with pytest.raises(InvalidInputError):
        ours.take_blobs("b", indices=[10_000])


def _copy(tables, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(tables["2.2"], dst)
    return dst


def _dedicated_row(path: Path) -> tuple[int, Path]:
    """A row whose ``d`` blob is a dedicated file, and that file."""
    t = lance.dataset(path).to_table(columns=["d"], with_row_address=True)
    col = t.column("d").combine_chunks()
    i = next(i for i, v in enumerate(col.to_pylist()) if v and v["kind"] == 2)
    fragment = dataset(path).manifest.fragments[0]
    assert t.column("_rowaddr")[i].as_py() >> 32 == fragment.id
    (data_file,) = fragment.files
    stem = data_file.path.removesuffix(".lance")
    return i, path / "data" / stem / blob_file_name(col[i]["blob_id"].as_py())


def test_missing_and_truncated_blob_files(tables, tmp_path) -> None:
    path = _copy(tables, tmp_path)
    i, sidecar = _dedicated_row(path)
    ours = dataset(path)
    (blob,) = ours.take_blobs("d", indices=[i])
    data = sidecar.read_bytes()
    sidecar.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="truncated"):
        blob.read()
    sidecar.unlink()
    (blob,) = dataset(path).take_blobs("d", indices=[i])  # lazy: the error comes on read
    with pytest.raises(NotFoundError, match=sidecar.name):
        blob.read()


def test_blob_file_names() -> None:
    assert blob_file_name(1) == "1" + "0" * 31 + ".blob"
    assert blob_file_name(2) == "01" + "0" * 30 + ".blob"
    assert blob_file_name(6) == "011" + "0" * 29 + ".blob"


def test_external_uris_are_checked(tables, tmp_path) -> None:
    ds = dataset(tables["2.2"])
    manifest = ds.manifest
    manifest = replace(manifest, base_paths=(BasePath(id=7, path=str(tmp_path)),))
    field = next(f for f in manifest.schema.fields if f.name == "b")
    locator = _Locator(ds.store, manifest, field)
    with pytest.raises(UnsupportedFeatureError, match="s3"):
        locator.external("s3://bucket/a.bin", 0)
    with pytest.raises(FormatError):
        locator.external("relative/a.bin", 0)
    with pytest.raises(PathEscapeError):
        locator.external("../escape.bin", 7)
    with pytest.raises(FormatError, match="base path id 9"):
        locator.external("a.bin", 9)
    (tmp_path / "a.bin").write_bytes(b"0123456789")
    blob = BlobFile(locator.external("a.bin", 7), 4, None)
    assert blob.size() == 6 and blob.read() == b"456789"


def test_blobs_are_taken_from_the_version_they_are_located_in(tmp_path: Path,
                                                              monkeypatch) -> None:
    """Another thread's write moving the dataset object inside a take_blobs call (after it
    read the manifest, before it took the rows) must not mix the two versions."""
    import threading

    from lance_sql.table.read import blobs as blobs_module

    schema = pa.schema([pa.field("id", pa.int64()), lance.blob_field("b")])
    values = [bytes([i % 256]) * (10 + i) for i in range(50)]
    lance.write_dataset(pa.table({"id": np.arange(50), "b": lance.blob_array(values)},
                                 schema=schema), tmp_path / "t", max_rows_per_file=20)
    ds = dataset(tmp_path / "t")
    real = blobs_module._ints
    moves: list[int] = []

    def moved_meanwhile(values_):  # the selector is read inside the window
        if not moves:
            writer = threading.Thread(target=lambda: ds.drop_columns(["b"]))
            writer.start()
            writer.join()
            moves.append(ds.version)
        return real(values_)

    monkeypatch.setattr(blobs_module, "_ints", moved_meanwhile)
    files = ds.take_blobs("b", indices=[1, 2, 30])
    assert moves == [2]  # the object did move inside the call
    assert [f.readall() for f in files] == [values[1], values[2], values[30]]
    with pytest.raises(NotFoundError, match="'b' does not exist"):
        ds.take_blobs("b", indices=[1])  # the next call sees the version it moved to
