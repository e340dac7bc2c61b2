"""The FSST encoder (``format/datafile/fsst_encode.py``), without files: every encoding
decodes back through our FSST decoder to the same strings, for random and adversarial
inputs (empty strings, the terminator byte inside strings, 255 bytes that need escapes,
all 256 byte values, long strings, tables learnt from other data), and the learnt tables
keep the format's rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.format.datafile import fsst
from lance_sql.format.datafile import fsst_encode as fe


def _arrays(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(strings) + 1, np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    return np.frombuffer(b"".join(strings), np.uint8).copy(), offsets


def _roundtrip(table: fe.SymbolTable, strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    data, offsets = _arrays(strings)
    comp, coffs = fe.encode(table, data, offsets)
    assert coffs.size == len(strings) + 1 and coffs[0] == 0 and coffs[-1] == comp.size
    assert np.all(np.diff(coffs) <= 2 * np.diff(offsets))  # at worst every byte escaped
    parsed = fsst.parse_symbol_table(table.serialize(), "test")
    out, out_offs = fsst.decompress(parsed, comp, coffs, "test")
    got = [out[a:b].tobytes() for a, b in zip(out_offs[:-1], out_offs[1:], strict=True)]
    assert got == strings
    return comp, coffs


def _check_table(table: fe.SymbolTable) -> None:
    n = table.symbols.size
    assert n <= fe.MAX_SYMBOLS and table.lengths.size == n
    assert np.all((table.lengths >= 1) & (table.lengths <= 8))
    lens = table.lengths.astype(np.int64)
    # zero padded, and no multi-byte symbol holds the terminator
    mask = fe._mask(lens)
    assert np.all(table.symbols & ~mask == 0)
    for k in range(8):
        byte = (table.symbols >> np.uint64(8 * k)) & np.uint64(0xFF)
        assert not np.any((lens > 1) & (k < lens) & (byte == table.terminator))
    # at most one symbol of 3+ bytes per hash bucket (so per 3-byte prefix), none twice
    long_ = fe.bucket(table.symbols[lens >= 3])
    assert np.unique(long_).size == long_.size
    keys = table.symbols * np.uint64(16) + lens.astype(np.uint64)  # 8-byte symbols: no
    assert np.unique(keys[lens < 8]).size == int(np.count_nonzero(lens < 8))  # overflow


def _text(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "straße", "日本", "https://", "www.", ".com"]
    return [("/".join(words[k] for k in rng.integers(0, len(words), rng.integers(0, 8)))
             + str(int(rng.integers(0, 10**6)))).encode() for _ in range(n)]


def test_text_round_trips_and_compresses() -> None:
    strings = _text(5000)
    table = fe.build_table(*_arrays(strings))
    _check_table(table)
    comp, _ = _roundtrip(table, strings)
    assert comp.size < 0.5 * sum(map(len, strings))


def test_serialized_table_layout() -> None:
    """pylance's layout: header (symbol count, terminator, encoder switch, ``FSST``), the
    symbols as 8-byte words, then their lengths; 2312 bytes in all."""
    strings = _text(500, seed=1)
    table = fe.build_table(*_arrays(strings))
    raw = table.serialize()
    assert len(raw) == fsst.TABLE_SIZE
    n = table.symbols.size
    assert raw[0] == n and raw[1] == table.terminator and raw[3] == 1 and raw[4:8] == b"TSSF"
    assert raw[8 : 8 + 8 * n] == table.symbols.astype("<u8").tobytes()
    assert raw[8 + 8 * n : 8 + 9 * n] == table.lengths.tobytes()
    assert raw[8 + 9 * n :] == bytes(fsst.TABLE_SIZE - 8 - 9 * n)


@pytest.mark.parametrize("strings", [
    [],
    [b""],
    [b"", b"", b""],
    [b"a"],
    [b"\xff" * 300, b"\xff", b"", b"\xff\xff\x00"],  # escapes, escape runs
    [bytes(range(256)) * 2, bytes(range(255, -1, -1))],  # every byte, terminator inside
    [b"\x00" * 40, b"\x00\x00abc\x00", b"abc"],  # the terminator (0 here) in the data
    [b"x" * 255] * 50 + [b"y"],  # long strings, one short
])
@pytest.mark.parametrize("few_escapes", [0, 1024])  # literals put in by mask; run by run
def test_adversarial_inputs_round_trip(strings: list[bytes], few_escapes: int,
                                       monkeypatch) -> None:
    monkeypatch.setattr(fe, "_FEW_ESCAPES", few_escapes)
    table = fe.build_table(*_arrays(strings))
    _check_table(table)
    _roundtrip(table, strings)
    other = fe.build_table(*_arrays(_text(300, seed=2)))  # a table that fits other data
    _roundtrip(other, strings)


def test_empty_table_escapes_everything() -> None:
    table = fe.SymbolTable(np.zeros(0, np.uint64), np.zeros(0, np.uint8), 0)
    strings = [b"abc", b"", b"\xff\x00"]
    comp, coffs = _roundtrip(table, strings)
    assert coffs.tolist() == [0, 6, 6, 10]
    assert comp[0::2].tolist() == [fsst.ESCAPE] * 5


def test_greedy_parse_takes_the_longest_symbol() -> None:
    syms = [b"user-", b"us", b"u", b"s", b"e", b"r", b"-", b"12", b"1", b"2"]
    vals = np.array([int.from_bytes(s, "little") for s in syms], np.uint64)
    table = fe.SymbolTable(vals, np.array([len(s) for s in syms], np.uint8), 0)
    comp, _ = _roundtrip(table, [b"user-12", b"user", b"use", b"u12"])
    # "user-" then "12" | "us" "e" "r" | "us" "e" | "u" "12"
    assert comp.tolist() == [0, 7, 1, 4, 5, 1, 4, 2, 7]


def test_blocks_and_parking_give_the_same_bytes(monkeypatch) -> None:
    """Strings of very different lengths over several blocks: finished strings parked
    and dropped later, or dropped at once (terminator in the data), encode alike."""
    rng = np.random.default_rng(4)
    strings = [b"k" * int(k) + b"-end" for k in rng.integers(0, 200, 3000)]
    table = fe.build_table(*_arrays(strings))
    small, _ = _roundtrip(table, strings)
    monkeypatch.setattr(fe, "_BLOCK", 128)
    assert np.array_equal(_roundtrip(table, strings)[0], small)
    with_term = [s + bytes([table.terminator]) for s in strings]  # no parking possible
    _roundtrip(table, with_term)


def test_long_strings_are_encoded_in_pieces(monkeypatch) -> None:
    """Strings longer than a segment are parsed piece by piece; the result still decodes
    to every string, and with long segments it is the plain greedy parse."""
    rng = np.random.default_rng(8)
    strings = [b"".join(rng.choice([b"lorem ", b"ipsum ", b"x", b"\xff"], int(k)))
               for k in rng.integers(0, 2000, 60)] + [b""]
    table = fe.build_table(*_arrays(strings))
    comp, coffs = _roundtrip(table, strings)
    monkeypatch.setattr(fe, "_SEGMENT", 7)
    _roundtrip(table, strings)
    monkeypatch.setattr(fe, "_SEGMENT", 1 << 20)
    whole, _ = _roundtrip(table, strings)
    assert comp.size <= whole.size * 1.01


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=60),
       st.lists(st.binary(min_size=1, max_size=40), max_size=30))
def test_hypothesis_round_trip(strings: list[bytes], other: list[bytes]) -> None:
    table = fe.build_table(*_arrays(strings))
    _check_table(table)
    _roundtrip(table, strings)
    _roundtrip(fe.build_table(*_arrays(other)), strings)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(alphabet="abc/.-ü0123", max_size=30), min_size=1, max_size=200))
def test_hypothesis_small_alphabet_round_trip(texts: list[str]) -> None:
    strings = [t.encode() for t in texts]
    table = fe.build_table(*_arrays(strings))
    _check_table(table)
    _roundtrip(table, strings)


def test_sample_takes_runs_across_the_page() -> None:
    strings = [b"%06d" % i for i in range(100_000)]
    data, offsets = _arrays(strings)
    smp = fe.sample(data, offsets, budget=4096, runs=4)
    assert int(smp.offsets[-1]) <= 4096 + 4 * 6
    assert smp.runs.size == 5 and smp.runs[-1] == smp.offsets.size - 1
    firsts = [smp.data[smp.offsets[a] : smp.offsets[a] + 6].tobytes() for a in smp.runs[:-1]]
    assert firsts == [b"000000", b"025000", b"050000", b"075000"]
