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
from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.format.datafile import blocks, encode_miniblock
from lance_sql.format.datafile.blocks import deflate
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
    schema = pa.schema([pa.field("s", arr.type, metadata=metadata)])
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"s": arr}, schema=schema), uri)
    (data_file,) = (tmp_path / "t.lance" / "data").glob("*.lance")
    return uri, data_file.read_bytes()


def _kind(data: bytes) -> str:
    return page_layouts(data)[0][0].mini_block_layout.value_compression.WhichOneof(
        "compression")


def _general(data: bytes) -> e21.General | None:
    layout = page_layouts(data)[0][0].mini_block_layout
    enc = layout.value_compression
    assert enc.WhichOneof("compression") in ("general", "variable")
    return enc.general if enc.WhichOneof("compression") == "general" else None


def _tokens(n: int, seed: int = 0) -> pa.Array:
    """Pairs of random hex tokens from a small set: long repeats LZ4 finds, FSST cannot."""
    rng = np.random.default_rng(seed)
    toks = np.array([rng.bytes(12).hex() for _ in range(600)])
    a, b = toks[rng.integers(0, 600, n)], toks[rng.integers(0, 600, n)]
    return pa.array([f"{x}-{y}" for x, y in zip(a, b, strict=True)])


def test_default_is_lz4_on_text_and_fsst_when_asked_and_pylance_reads_both(tmp_path):
    arr = _text(30_000)
    taken = np.array([0, 17, 29_999])
    for name, metadata, kind in [("default", None, "general"),
                                 ("fsst", {"lance-encoding:compression": "fsst"}, "fsst")]:
        uri, data = _write(tmp_path / name, arr, metadata)
        assert _kind(data) == kind
        assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
        assert lance_sql.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
        assert lance_sql.dataset(uri).take(taken).column("s").to_pylist() == \
            arr.take(pa.array(taken)).to_pylist()


@pytest.mark.parametrize("fsst_default", [False, True])
def test_lz4_is_kept_where_it_beats_fsst_and_plain_where_nothing_pays(tmp_path, monkeypatch,
                                                                      fsst_default):
    monkeypatch.setattr(encode_miniblock, "DEFAULT_FSST", fsst_default)
    if fsst_default:  # with FSST as the default, text gets it
        uri, data = _write(tmp_path / "text", _text(30_000), None)
        assert _kind(data) == "fsst"
    arr = _tokens(30_000)
    uri, data = _write(tmp_path / "tokens", arr, None)
    assert _general(data).compression.scheme == e21.COMPRESSION_ALGORITHM_LZ4
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    rng = np.random.default_rng(5)
    noise = pa.array([rng.bytes(int(k)) for k in rng.integers(10, 60, 5000)], pa.binary())
    uri, data = _write(tmp_path / "noise", noise, None)
    assert _kind(data) == "variable"
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(noise)
    uri, data = _write(tmp_path / "noise-fsst", noise, {"lance-encoding:compression": "fsst"})
    assert _kind(data) == "variable"  # asked for, FSST is still skipped where it saves little


@pytest.mark.parametrize("metadata,scheme,level", [
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
    """String chunks under LZ4 grow towards the default's 16 KiB (fewer, better compressed
    chunks; small enough that a take of one row inflates little)."""
    assert encode_miniblock.DEFAULT_CHUNK_TARGET == 16 * 1024
    arr = _tokens(50_000, seed=2)
    uri, data = _write(tmp_path, arr, None)
    assert _general(data).compression.scheme == e21.COMPRESSION_ALGORITHM_LZ4
    chunks = _chunk_count(data)
    raw = sum(len(s) + 4 for s in arr.to_pylist())
    target = encode_miniblock.DEFAULT_CHUNK_TARGET
    assert raw // target <= chunks <= raw // (target // 2) + 1
    # pylance reads every row (scan and take), and we read pylance's file of the same rows
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    rows = [0, 1, 4096, 30_000, 49_999]
    assert lance.dataset(uri).take(rows).column("s").to_pylist() == arr.take(rows).to_pylist()
    theirs = str(tmp_path / "theirs.lance")
    lance.write_dataset(pa.table({"s": arr}), theirs)
    assert lance_sql.dataset(theirs).to_table().column("s").combine_chunks().equals(arr)


def _names(n: int, seed: int = 0) -> pa.Array:
    """Pairs of 7-letter words out of 2000 (as first and last names): LZ4 saves ~6% over
    the default's chunks (512 strings, 9.7 kB), ~21% over 64 KiB ones (2048 strings)."""
    rng = np.random.default_rng(seed)
    words = np.array(["".join(w) for w in rng.choice(list("abcdefghijklmnopqrstuvwxyz"),
                                                     (2000, 7))])  # fmt: skip
    first, last = words[rng.integers(0, words.size, n)], words[rng.integers(0, words.size, n)]
    return pa.array([f"{a} {b}" for a, b in zip(first, last, strict=True)])


def test_default_falls_back_to_64_kib_chunks_before_plain_ones(tmp_path, monkeypatch):
    """Strings that LZ4 over the default's 16 KiB chunks shrinks by less than 15% are
    tried over 64 KiB chunks before being written plain; pylance reads every row."""
    arr = _names(80_000, seed=3)
    raw = sum(len(s) + 4 for s in arr.to_pylist())
    uri, data = _write(tmp_path / "fallback", arr, None)
    assert _general(data).compression.scheme == e21.COMPRESSION_ALGORITHM_LZ4
    assert _chunk_count(data) <= raw // (LZ4_CHUNK_TARGET // 2) + 1  # 64 KiB chunks
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    assert lance_sql.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    # without the fallback (the default's own chunk size alone) the same strings are
    # written plain
    monkeypatch.setattr(encode_miniblock, "LZ4_CHUNK_TARGET",
                        encode_miniblock.DEFAULT_CHUNK_TARGET)  # fmt: skip
    _, plain = _write(tmp_path / "plain", arr, None)
    assert _general(plain) is None and len(plain) > len(data)


def _chunk_count(data: bytes) -> int:
    reader, _ = open_ours(data)
    return reader._columns[0].pages[0].buffers[0][1] // 4  # one u32 of metadata a chunk


@pytest.mark.parametrize("scheme,level,target", [
    (e21.COMPRESSION_ALGORITHM_LZ4, 2, 64 * 1024),  # LZ4 HC: same block format, smaller
    (e21.COMPRESSION_ALGORITHM_ZSTD, 1, 32 * 1024),
])
def test_default_knobs_pick_the_codec_level_and_chunk_size_and_pylance_reads_every_row(
        tmp_path, monkeypatch, scheme, level, target):
    """The writer's default string compression (what bench_string_defaults.py sweeps) is
    the one its knobs name: codec, level (not recorded, as for a default) and chunk size."""
    arr = _text(60_000, seed=4)
    _, now = _write(tmp_path / "now", arr, None)
    monkeypatch.setattr(encode_miniblock, "DEFAULT_SCHEME", scheme)
    monkeypatch.setattr(encode_miniblock, "DEFAULT_LEVEL", level)
    monkeypatch.setattr(encode_miniblock, "DEFAULT_CHUNK_TARGET", target)
    uri, data = _write(tmp_path / "knobs", arr, None)
    general = _general(data)
    assert general.compression.scheme == scheme and not general.compression.HasField("level")
    assert len(data) < len(now)  # the stronger setting is really used
    raw = sum(len(s) + 4 for s in arr.to_pylist())
    assert raw // target <= _chunk_count(data) <= raw // (target // 2) + 1
    assert lance.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    assert lance_sql.dataset(uri).to_table().column("s").combine_chunks().equals(arr)
    taken = np.array([0, 5, 17, 31_000, 59_999])
    assert lance_sql.dataset(uri).take(taken).column("s").to_pylist() == \
        arr.take(pa.array(taken)).to_pylist()


def test_lz4_levels_deflate_to_the_same_block_format():
    data = bytes("".join(_text(3000, seed=6).to_pylist()), "utf8")
    fast, hc = deflate(1, data), deflate(1, data, 2)
    assert len(hc) < len(fast)
    assert bytes(blocks.inflate(1, hc, "x")) == bytes(blocks.inflate(1, fast, "x")) == data


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
# --------------------------------------------------------------------------- joined zstd
def _frames(pieces: list[bytes], prefix: bool = True) -> tuple[memoryview, list[int], list[int]]:
    bufs = [deflate(2, p, 1) if prefix else deflate(2, p, 1)[8:] for p in pieces]
    pos = np.cumsum([0] + [len(b) for b in bufs])[:-1].tolist()
    return memoryview(b"".join(bufs)), pos, [len(b) for b in bufs]


def test_inflate_many_joins_zstd_frames_like_one_by_one(monkeypatch):
    pieces = [bytes(_text(200 + i, seed=i).to_pylist()[0] * (i + 1), "utf8") for i in range(9)]
    raw, pos, sizes = _frames(pieces)
    calls = []
    inflate = blocks.inflate
    monkeypatch.setattr(blocks, "inflate", lambda *a, **k: calls.append(1) or inflate(*a, **k))
    out = blocks.inflate_many(2, raw, pos, sizes, "x")
    assert [bytes(p) for p in out] == pieces and not calls  # one joined call
    # frames without the u64 prefix (older writers) go one by one, same bytes
    raw, pos, sizes = _frames(pieces, prefix=False)
    assert [bytes(p) for p in blocks.inflate_many(2, raw, pos, sizes, "x")] == pieces
    assert len(calls) == len(pieces)


def test_inflate_many_refuses_corrupt_zstd_chunks():
    pieces = [b"abc" * 500, b"xyz" * 700, b"hello" * 90]
    raw, pos, sizes = _frames(pieces)
    lying = bytearray(raw)
    lying[pos[1] : pos[1] + 8] = (len(pieces[1]) + 5).to_bytes(8, "little")
    with pytest.raises(FormatError):  # prefix disagrees with the frame: one by one, refused
        blocks.inflate_many(2, memoryview(bytes(lying)), pos, sizes, "x")
    broken = bytearray(raw)
    broken[pos[2] + 20 : pos[2] + 30] = b"\xff" * 10
    with pytest.raises(FormatError):
        blocks.inflate_many(2, memoryview(bytes(broken)), pos, sizes, "x")
