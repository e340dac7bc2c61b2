"""Unit tests of the 2.1/2.2 building blocks: FastLanes, FSST, general compression, shredding."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import FormatError
from lance_sql.format.datafile import bitpacking as bp
from lance_sql.format.datafile import fsst, repdef
from lance_sql.format.datafile.blocks import deflate, inflate
from lance_sql.format.datafile.decode_v2_1 import build_field
from lance_sql.format.datafile.shred import shred
from lance_sql.format.schema import LanceSchema

_ORDER = [0, 4, 2, 6, 1, 5, 3, 7]


def _reference_unpack(words: list[int], width: int, bits: int) -> list[int]:
    """The FastLanes layout written out value by value (the facts sheet's description)."""
    lanes = 1024 // bits
    out = [0] * 1024
    for lane in range(lanes):
        stream = 0
        for w in range(width):
            stream |= words[w * lanes + lane] << (w * bits)
        for row in range(bits):
            value = (stream >> (row * width)) & ((1 << width) - 1)
            out[_ORDER[row // 8] * 16 + (row % 8) * 128 + lane] = value
    return out


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_fastlanes_matches_the_reference_layout(bits: int) -> None:
    rng = np.random.default_rng(bits)
    for width in sorted({0, 1, 3, bits // 2 + 1, bits - 1, bits}):
        top = 1 << width
        values = rng.integers(0, top, (2, 1024), dtype=np.uint64) if width else np.zeros(
            (2, 1024), np.uint64)  # fmt: skip
        values = values.astype(bp.dtype_for(bits))
        packed = bp.pack(values, width, bits)
        assert packed.shape == (2, bp.packed_words(width, bits))
        assert np.array_equal(bp.unpack(packed, width, bits), values)
        if width:
            ref = _reference_unpack([int(x) for x in packed[0]], width, bits)
            assert ref == [int(x) for x in values[0]]


def test_block_widths() -> None:
    blocks = np.zeros((5, 1024), np.uint64)
    blocks[1, 7] = 1
    blocks[2, 0] = 2**63
    blocks[3, :] = 2**64 - 1
    blocks[4, 9] = 256
    assert bp.block_widths(blocks).tolist() == [0, 1, 64, 64, 9]


def _table(symbols: list[bytes]) -> bytes:
    header = bytes([len(symbols), 0, 0, 1]) + b"TSSF"
    body = b"".join(s.ljust(8, b"\0") for s in symbols) + bytes(len(s) for s in symbols)
    return (header + body).ljust(fsst.TABLE_SIZE, b"\0")


def test_fsst_decodes_symbols_and_escapes() -> None:
    table = fsst.parse_symbol_table(_table([b"hello", b" ", b"world!!!"]), "t")
    # "hello world!!!" + "\xff" literal + "x" literal, then an empty string, then "hello"
    codes = np.array([0, 1, 2, 255, 255, 255, ord("x"), 0], np.uint8)
    offsets = np.array([0, 7, 7, 8])
    out, offs = fsst.decompress(table, codes, offsets, "t")
    strings = [bytes(out[offs[i] : offs[i + 1]]) for i in range(3)]
    assert strings == [b"hello world!!!\xffx", b"", b"hello"]


@pytest.mark.parametrize("take_min", [1 << 30, 2])
def test_fsst_odd_code_count_ending_in_a_literal(monkeypatch, take_min: int) -> None:
    """The last code alone after the pairs is an escaped byte: it adds one byte to the
    last string (two codes at a time once measured the literal as a symbol)."""
    monkeypatch.setattr(fsst, "_TAKE_MIN", take_min)
    table = fsst.parse_symbol_table(_table([b"ab", b"c"]), "t")
    codes = np.array([0, 1, 0, 255, ord("x")], np.uint8)
    out, offs = fsst.decompress(table, codes, np.array([0, 2, 5]), "t")
    assert [bytes(out[offs[i] : offs[i + 1]]) for i in range(2)] == [b"abc", b"abx"]


def test_fsst_rejects_dangling_escapes() -> None:
    table = fsst.parse_symbol_table(_table([b"ab"]), "t")
    with pytest.raises(FormatError, match="ends with an escape"):
        fsst.decompress(table, np.array([0, 255], np.uint8), np.array([0, 2]), "t")
    with pytest.raises(FormatError, match="crosses a string boundary"):
        fsst.decompress(table, np.array([255, 97], np.uint8), np.array([0, 1, 2]), "t")
    with pytest.raises(FormatError, match="TSSF"):
        fsst.parse_symbol_table(b"\0" * 16, "t")


def _fsst_reference(symbols: list[bytes], codes: bytes, offsets: list[int]) -> list[bytes]:
    out = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        s, i = bytearray(), a
        while i < b:
            if codes[i] == 255:
                s.append(codes[i + 1])
                i += 2
            else:
                s += symbols[codes[i]]
                i += 1
        out.append(bytes(s))
    return out


@pytest.mark.parametrize("ordered", [True, False])  # numpy's ordered scatter; byte planes
@pytest.mark.parametrize("take_min", [1 << 30, 2])  # one code at a time; Arrow's take
@pytest.mark.parametrize("seed", range(6))
def test_fsst_matches_reference(monkeypatch: pytest.MonkeyPatch, seed: int, ordered: bool,
                                take_min: int) -> None:
    monkeypatch.setattr(fsst, "_TAKE_MIN", take_min)
    monkeypatch.setattr(fsst, "_ORDERED", ordered)
    rng = np.random.default_rng(seed)
    nsym = int(rng.integers(1, 256))
    symbols = [rng.bytes(int(k)) for k in rng.integers(1, 9, nsym)]
    raw = bytearray(_table(symbols))
    raw[8 : 8 + 8 * nsym] = rng.bytes(8 * nsym)  # garbage after each symbol is ignored
    table = fsst.parse_symbol_table(bytes(raw), "t")
    symbols = [bytes(raw[8 + 8 * i : 8 + 8 * i + len(s)]) for i, s in enumerate(symbols)]
    strings, escape_rate = [], [0.0, 0.05, 0.5][seed % 3]
    for _ in range(int(rng.integers(1, 400))):
        codes = []
        for _ in range(int(rng.integers(0, 12))):
            if rng.random() < escape_rate:
                codes += [255, int(rng.integers(0, 256))]
            else:
                codes.append(int(rng.integers(0, min(nsym, 255))))
        strings.append(bytes(codes))
    lead = b"\x00\x01" * int(rng.integers(0, 3))  # data before the first offset is skipped
    data = np.frombuffer(lead + b"".join(strings), np.uint8)
    offsets = np.cumsum([len(lead)] + [len(s) for s in strings])
    out, offs = fsst.decompress(table, data, offsets, "t")
    got = [bytes(out[offs[i] : offs[i + 1]]) for i in range(len(strings))]
    want = _fsst_reference(symbols, bytes(data), offsets.tolist())
    assert got == want
    assert offs[0] == 0 and offs[-1] == out.size


@pytest.mark.parametrize("scheme", [1, 2])
def test_general_compression_round_trip(scheme: int) -> None:
    data = b"lance " * 1000
    assert inflate(scheme, deflate(scheme, data), "x") == data
    with pytest.raises(FormatError, match="x"):
        inflate(scheme, deflate(scheme, data)[:20], "x")


def test_zstd_raw_frame_with_content_size() -> None:
    data = b"abc" * 500
    frame = pa.Codec("zstd").compress(data, asbytes=True)  # a frame recording its size
    assert inflate(2, frame, "x") == data
    assert inflate(2, struct.pack("<Q", len(data)) + frame, "x") == data


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.lists(
    st.one_of(st.none(), st.integers(-5, 5)), max_size=3)), max_size=3)), max_size=12))
def test_shred_then_unravel_is_identity(rows) -> None:
    arr = pa.array(rows, pa.list_(pa.list_(pa.int64())))
    schema = LanceSchema.from_arrow(pa.schema([("l", arr.type)]))
    field = schema.fields[0]
    data = {}
    for leaf in shred(field, arr):
        n = leaf.rep.size if leaf.rep is not None else leaf.num_rows
        layers = repdef.unravel(leaf.rep, leaf.def_, leaf.layers, n, "x")
        data[leaf.field.id] = (layers, leaf.values)
    assert build_field(field, data, len(arr), "x").to_pylist() == rows
