"""String chunk compression of our 2.2 writer: the field metadata pylance honours
(``lance-encoding:compression`` / ``-level``) is honoured the same way, and pylance reads
every choice back value for value (and our reader pylance's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from v2_helpers import open_ours, page_layouts

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.datafile.encode_miniblock import LZ4_CHUNK_TARGET, StringCompression
from lance_sql.format.pb import encodings_v2_1_pb2 as e21

lance = pytest.importorskip("lance")


def _text(n: int, seed: int = 0) -> pa.Array:
    """URL-like strings with repeats (compressible) and a few non-ASCII ones."""
    rng = np.random.default_rng(seed)
    hosts = np.array([f"host{i}.example" for i in range(300)] + ["bücher.de", "日本.jp"])
    ids = rng.integers(0, 10**6, n)
    pick = hosts[rng.integers(0, hosts.size, n)]
    return pa.array([f"https://{h}/item/{i}?ref=list" for h, i in zip(pick, ids, strict=True)])


def _write(tmp_path: Path, arr: pa.Array, metadata: dict[str, str] | None) -> tuple[str, bytes]:
    schema = pa.schema([pa.field("s", pa.string(), metadata=metadata)])
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"s": arr}, schema=schema), uri)
    (data_file,) = (tmp_path / "t.lance" / "data").glob("*.lance")
    return uri, data_file.read_bytes()


def _general(data: bytes) -> e21.General | None:
    layout = page_layouts(data)[0][0].mini_block_layout
    enc = layout.value_compression
    assert enc.WhichOneof("compression") in ("general", "variable")
    return enc.general if enc.WhichOneof("compression") == "general" else None


@pytest.mark.parametrize("metadata,scheme,level", [
    (None, e21.COMPRESSION_ALGORITHM_LZ4, None),  # the writer's choice: LZ4 pays here
    ({"lance-encoding:compression": "zstd"}, e21.COMPRESSION_ALGORITHM_ZSTD, None),
    ({"lance-encoding:compression": "ZSTD", "lance-encoding:compression-level": "9"},
     e21.COMPRESSION_ALGORITHM_ZSTD, 9),
    ({"lance-encoding:compression": "lz4"}, e21.COMPRESSION_ALGORITHM_LZ4, None),
    ({"lance-encoding:compression": "none"}, None, None),
])
def test_metadata_picks_the_string_compression_and_pylance_reads_it(tmp_path, metadata,
                                                                     scheme, level):
    arr = _text(30_000)
    uri, data = _write(tmp_path, arr, metadata)
    general = _general(data)
    if scheme is None:
        assert general is None
    else:
        assert general.compression.scheme == scheme
        assert general.compression.HasField("level") == (level is not None)
        if level is not None:
            assert general.compression.level == level
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    assert lance_sql.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    taken = np.array([0, 17, 29_999])
    assert lance_sql.dataset(uri).take(taken).column("s").to_pylist() == \
        arr.take(pa.array(taken)).to_pylist()


def test_zstd_is_smaller_than_the_default_and_none_is_largest(tmp_path):
    arr = _text(30_000, seed=1)
    sizes = {}
    for name in ("default", "zstd", "none"):
        md = None if name == "default" else {"lance-encoding:compression": name}
        sizes[name] = len(_write(tmp_path / name, arr, md)[1])
    assert sizes["zstd"] < sizes["default"] < sizes["none"]


def test_default_lz4_chunks_are_large(tmp_path):
    """String chunks under LZ4 grow towards 64 KiB (fewer, better compressed chunks)."""
    arr = _text(50_000, seed=2)
    _, data = _write(tmp_path, arr, None)
    assert _general(data).compression.scheme == e21.COMPRESSION_ALGORITHM_LZ4
    reader, _ = open_ours(data)
    chunks = reader._columns[0].pages[0].buffers[0][1] // 4  # one u32 of metadata a chunk
    raw = sum(len(s) + 4 for s in arr.to_pylist())
    assert chunks <= raw // (LZ4_CHUNK_TARGET // 2) + 1


def test_pylance_zstd_and_lz4_string_files_read_back(tmp_path):
    arr = _text(20_000, seed=3)
    for name in ("zstd", "lz4"):
        schema = pa.schema([pa.field("s", pa.string(),
                                     metadata={"lance-encoding:compression": name})])
        uri = str(tmp_path / f"{name}.lance")
        lance.write_dataset(pa.table({"s": arr}, schema=schema), uri)
        assert lance_sql.dataset(uri).to_table().column("s").combine_chunks().equals(arr)


@pytest.mark.parametrize("metadata,match", [
    ({"lance-encoding:compression": "brotli"}, "not one of"),
    ({"lance-encoding:compression": "zstd", "lance-encoding:compression-level": "x"}, "level"),
    ({"lance-encoding:compression": "zstd", "lance-encoding:compression-level": "99"},
     "level"),
])
def test_bad_compression_metadata_is_refused(tmp_path, metadata, match):
    with pytest.raises(InvalidInputError, match=match):
        _write(tmp_path, _text(100), metadata)
    assert StringCompression.from_metadata({}, "s") is None
