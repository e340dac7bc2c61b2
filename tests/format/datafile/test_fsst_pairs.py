"""FSST decoding two codes at a time (Arrow binary-view cast, blocks over threads) gives
what the one-code-at-a-time scatter and a plain Python decoder give: at every escape rate,
with empty strings, strings starting inside a pair, an odd last code (symbol or literal),
blocks of a few pairs cutting strings anywhere, several threads; and on whole files
pylance wrote (nulls, empty strings, non-ASCII text, several pages)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_v2_units import _fsst_reference as _reference
from test_v2_units import _table as _table_bytes
from v2_helpers import open_ours, page_layouts, pylance_write

from lance_sql.errors import FormatError
from lance_sql.format.datafile import fsst, parallel

lance = pytest.importorskip("lance")


def _case(seed: int, escape_rate: float, odd_tail: str | None
          ) -> tuple[list[bytes], np.ndarray, np.ndarray]:  # fmt: skip
    """Random symbols (1..8 bytes, any byte values: non-ASCII too) and strings of 0..14
    codes, a share of them escapes; ``odd_tail``: end on an odd code count, the last code
    a ``"symbol"`` or a ``"literal"``."""
    rng = np.random.default_rng(seed)
    nsym = int(rng.integers(1, 256))
    symbols = [rng.bytes(int(k)) for k in rng.integers(1, 9, nsym)]
    strings: list[bytes] = []
    for _ in range(int(rng.integers(300, 900))):
        codes: list[int] = []
        for _ in range(int(rng.integers(0, 15))):  # empty strings included
            if rng.random() < escape_rate:
                codes += [255, int(rng.integers(0, 256))]
            else:
                codes.append(int(rng.integers(0, min(nsym, 255))))
        strings.append(bytes(codes))
    total = sum(map(len, strings))
    if odd_tail is not None:
        last = [255, 0xE9] if odd_tail == "literal" else [0]
        if (total + len(last)) % 2 == 0:
            last = [0, *last]
        strings.append(bytes(last))
    data = np.frombuffer(b"".join(strings), np.uint8)
    offsets = np.cumsum([0] + [len(s) for s in strings])
    return symbols, data, offsets


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that decoded each block of pairs."""
    names: list[str] = []
    lock = threading.Lock()
    original = fsst._PairDecoder.decode

    def decode(self, k, out, at, ends):
        with lock:
            names.append(threading.current_thread().name)
        return original(self, k, out, at, ends)

    monkeypatch.setattr(fsst._PairDecoder, "decode", decode)
    monkeypatch.setattr(parallel, "threads", lambda: 3)  # threads even on one CPU
    return names


@pytest.mark.parametrize("escape_rate", [0.0, 0.01, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("odd_tail", [None, "symbol", "literal"])
@pytest.mark.parametrize("block", [1, 7, 64, 1 << 18])
def test_pairs_match_the_scatter_and_a_plain_decoder(monkeypatch, counted, escape_rate: float,
                                                     odd_tail: str | None, block: int) -> None:
    symbols, data, offsets = _case(int(escape_rate * 100) + block, escape_rate, odd_tail)
    table = fsst.parse_symbol_table(_table_bytes(symbols), "t")
    monkeypatch.setattr(fsst, "_TAKE_MIN", 1 << 40)  # the one-code-at-a-time scatter
    general = fsst.decompress(table, data, offsets, "t")
    assert not counted
    monkeypatch.setattr(fsst, "_TAKE_MIN", 2)
    monkeypatch.setattr(fsst, "_PAIR_BLOCK", block)
    out, ends = fsst.decompress(table, data, offsets, "t")
    assert len(counted) == -(-(data.size // 2) // block)  # every block went the new way
    np.testing.assert_array_equal(out, general[0])
    np.testing.assert_array_equal(ends, general[1])
    got = [bytes(out[a:b]) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    assert got == _reference(symbols, bytes(data), offsets.tolist())
    assert ends[0] == 0 and ends[-1] == out.size
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_pairs_skip_leading_bytes_and_refuse_bad_escapes(monkeypatch, counted) -> None:
    monkeypatch.setattr(fsst, "_TAKE_MIN", 2)
    monkeypatch.setattr(fsst, "_PAIR_BLOCK", 2)
    table = fsst.parse_symbol_table(_table_bytes([b"ab", b"\xc3\xa9"]), "t")
    data = np.array([7, 7, 7, 0, 1, 0, 255, 65, 1, 0], np.uint8)  # 3 bytes before the strings
    out, ends = fsst.decompress(table, data, np.array([3, 5, 5, 8, 10]), "t")
    assert [bytes(out[a:b]) for a, b in zip(ends[:-1], ends[1:], strict=True)] == [
        b"ab\xc3\xa9", b"", b"abA", b"\xc3\xa9ab"]
    assert counted
    with pytest.raises(FormatError, match="crosses a string boundary"):
        fsst.decompress(table, np.array([0, 255, 66, 0], np.uint8), np.array([0, 2, 4]), "t")
    with pytest.raises(FormatError, match="ends with an escape"):
        fsst.decompress(table, np.array([0, 1, 0, 255], np.uint8), np.array([0, 4]), "t")


def test_an_error_in_one_block_stops_the_others_and_is_raised(monkeypatch) -> None:
    monkeypatch.setattr(parallel, "threads", lambda: 3)
    seen: list[int] = []

    def work(k: int) -> int:
        if k == 5:
            raise ValueError("block 5")
        seen.append(k)
        return k * k

    with pytest.raises(ValueError, match="block 5"):
        parallel.map_parts(work, range(40))
    assert len(seen) < 40
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]
    assert parallel.map_parts(lambda k: k * k, range(40)) == [k * k for k in range(40)]


def _strings(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["item", "cart", "bücher", "日本語", "ñandú", "search", "😀emoji", "",
                      "x\u00ff\u0100y", "https://www.example.com/path?id="])
    parts = words[rng.integers(0, words.size, (n, 4))]
    text = ["".join(p) + (str(i) if i % 3 else "") for i, p in enumerate(parts)]
    nulls = rng.random(n) < 0.1
    raw = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 12, n)]
    return pa.table({"s": pa.array(text, mask=nulls), "b": pa.array(raw, pa.binary())})


def test_pylance_fsst_pages_read_the_same_both_ways(tmp_path: Path, monkeypatch,
                                                    counted) -> None:  # fmt: skip
    table = _strings(60_000, 3)
    data = pylance_write(tmp_path / "f.lance", table, "2.2", batch_rows=7_000,
                         data_cache_bytes=256 * 1024)  # fmt: skip
    layouts = page_layouts(data)
    kinds = {p.mini_block_layout.value_compression.WhichOneof("compression")
             for col in layouts for p in col}  # fmt: skip
    assert "fsst" in kinds and len(layouts[0]) > 1, (kinds, [len(c) for c in layouts])

    def read() -> pa.Table:
        reader, cmap = open_ours(data)
        return pa.table(reader.read(reader.schema.fields, cmap), schema=table.schema)

    monkeypatch.setattr(fsst, "_TAKE_MIN", 1 << 40)
    general = read()
    assert not counted
    monkeypatch.setattr(fsst, "_TAKE_MIN", 2)
    monkeypatch.setattr(fsst, "_PAIR_BLOCK", 333)
    fast = read()
    assert len(counted) > len(layouts[0])  # several blocks per page
    assert fast.equals(general) and fast.equals(table)


def test_produce_then_place_lays_results_out_in_order(monkeypatch) -> None:
    monkeypatch.setattr(parallel, "threads", lambda: 3)
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 50, 60).tolist()
    out = np.full(sum(sizes), -1)

    def produce(k: int) -> tuple[int, int]:
        return k, sizes[k]

    def place(k: int, value: int, at: int) -> None:
        assert at == sum(sizes[:k])
        out[at : at + sizes[k]] = value

    assert parallel.produce_then_place(produce, place, range(60)) == sum(sizes)
    np.testing.assert_array_equal(out, np.repeat(np.arange(60), sizes))

    def failing(k: int) -> tuple[int, int]:
        if k == 7:
            raise FormatError("block 7")
        return k, sizes[k]

    with pytest.raises(FormatError, match="block 7"):
        parallel.produce_then_place(failing, place, range(60))
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_pair_views_are_kept_per_table(monkeypatch) -> None:
    """The 65536 pair views are built once per symbol table: a second page with the same
    table reuses them, another table gets its own (and decodes by its own symbols)."""
    monkeypatch.setattr(fsst, "_TAKE_MIN", 2)
    fsst._table_views.cache_clear()
    symbols, data, offsets = _case(11, 0.1, "symbol")
    table = fsst.parse_symbol_table(_table_bytes(symbols), "t")
    first = fsst.decompress(table, data, offsets, "t")
    again = fsst.decompress(fsst.parse_symbol_table(_table_bytes(symbols), "t"), data,
                            offsets, "t")  # fmt: skip
    assert fsst._table_views.cache_info().hits == 1
    np.testing.assert_array_equal(first[0], again[0])
    other = [s[::-1] for s in symbols]
    out, ends = fsst.decompress(fsst.parse_symbol_table(_table_bytes(other), "t"), data,
                                offsets, "t")  # fmt: skip
    assert fsst._table_views.cache_info().misses == 2
    got = [bytes(out[a:b]) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    assert got == _reference(other, bytes(data), offsets.tolist())
