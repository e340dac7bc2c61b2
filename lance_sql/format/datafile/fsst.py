"""FSST string decompression (the symbol tables Lance 2.1/2.2 store per page), in numpy.

A symbol table is 2312 bytes: an 8-byte little-endian header (bytes 4-7 ``b"TSSF"``, byte 3
the encoder switch, byte 2 the suffix limit, byte 1 the terminator, byte 0 the number of
symbols ``n``), then ``n`` symbols of 8 bytes and ``n`` symbol lengths. With the switch
off the strings are stored raw. Otherwise each compressed byte ``c < 255`` stands for
symbol ``c`` and ``255`` escapes the next byte, which is copied as is.

Decoding is vectorised: escapes are found from runs of 255 bytes (a run always starts on a
code, so escapes and literals alternate inside it), every input byte gets an output length
(symbol length, 0 for an escape, 1 for a literal) and at most eight masked scatters write
the symbol bytes into place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_sql.errors import FormatError

TABLE_SIZE = 8 + 256 * 8 + 256
_BLOCK = 1 << 18
_MAGIC = b"TSSF"
ESCAPE = 255


@dataclass(frozen=True)
class SymbolTable:
    enabled: bool
    lengths: np.ndarray  # (512,) uint8: codes 0..255, then 256 + b for literal byte b
    symbols: np.ndarray  # (512,) uint64: the symbol bytes, little-endian
    masks: np.ndarray  # (512,) uint64: 0x01 in each byte that belongs to the symbol

    @property
    def lengths64(self) -> np.ndarray:
        return self.lengths.astype(np.int64)


def parse_symbol_table(raw: bytes, where: str) -> SymbolTable:
    if len(raw) < 8 or raw[4:8] != _MAGIC:
        raise FormatError(f"{where}: FSST symbol table has no TSSF header")
    nsym = raw[0]
    enabled = bool(raw[3] & 1)
    need = 8 + 9 * nsym
    if len(raw) < need:
        raise FormatError(f"{where}: FSST symbol table of {len(raw)} bytes holds {nsym} symbols")
    syms = np.zeros((512, 8), np.uint8)
    lens = np.zeros(512, np.uint8)
    if nsym:
        syms[:nsym] = np.frombuffer(raw, np.uint8, 8 * nsym, 8).reshape(nsym, 8)
        lens[:nsym] = np.frombuffer(raw, np.uint8, nsym, 8 + 8 * nsym)
    if np.any(lens[:nsym] > 8) or np.any(lens[:nsym] == 0):
        raise FormatError(f"{where}: FSST symbol table has symbol lengths outside 1..8")
    syms[256:, 0] = np.arange(256, dtype=np.uint8)
    lens[256:] = 1
    lens[nsym:256] = 0  # unused codes decode to nothing (corrupt input, never written)
    lens[ESCAPE] = 0  # an escape code itself produces nothing; its literal produces 1
    masks = (np.arange(8)[None, :] < lens[:, None]).astype(np.uint8)
    return SymbolTable(
        enabled, lens, syms.view("<u8").reshape(-1).copy(), masks.view("<u8").reshape(-1).copy()
    )


def decompress(
    table: SymbolTable, data: np.ndarray, offsets: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Decode strings ``data[offsets[i]:offsets[i+1]]``; returns (bytes, int64 offsets).

    Each code is looked up as one 8-byte word (symbol bytes plus a byte mask), and a
    boolean compress of the words keeps exactly the symbol bytes, in order.
    """
    offsets = offsets.astype(np.int64, copy=False)
    start = int(offsets[0]) if offsets.size else 0
    end = int(offsets[-1]) if offsets.size else 0
    if not table.enabled:
        return data[start:end], offsets - start
    codes = data[start:end]
    n = codes.size
    if n == 0:
        return np.zeros(0, np.uint8), np.zeros(offsets.size, np.int64)
    idx: np.ndarray = codes
    esc = codes == ESCAPE
    if esc.any():
        # position inside each run of 255s: a run starts on a code, so escapes sit at even
        # positions and the literals they announce at odd ones
        run_start = esc & ~np.r_[False, esc[:-1]]
        first = np.flatnonzero(run_start)
        pos = np.arange(n) - first[np.maximum(np.cumsum(run_start.astype(np.int64)) - 1, 0)]
        escape = esc & (pos % 2 == 0)
        if escape[-1]:
            raise FormatError(f"{where}: FSST data ends with an escape byte")
        literal = np.r_[False, escape[:-1]]
        lit_pos = np.flatnonzero(literal) + start
        if lit_pos.size and np.isin(lit_pos, offsets[1:-1]).any():
            raise FormatError(f"{where}: FSST escape crosses a string boundary")
        idx = codes.astype(np.int16)
        idx[literal] += 256
    bounds = offsets - start
    new_offsets = np.empty(offsets.size, np.int64)
    parts = []
    carry = 0
    lens_table = table.lengths64
    # blocks keep the 8-byte-per-code temporaries small (and in cache)
    for a in range(0, n, _BLOCK):
        b = min(n, a + _BLOCK)
        ix = idx[a:b]
        parts.append(table.symbols[ix].view(np.uint8)[table.masks[ix].view(bool)])
        cum = np.cumsum(lens_table[ix])
        j0, j1 = np.searchsorted(bounds, [a, b], "left")
        p = bounds[j0:j1] - a
        new_offsets[j0:j1] = carry + np.where(p > 0, cum[np.maximum(p - 1, 0)], 0)
        carry += int(cum[-1])
    new_offsets[bounds >= n] = carry
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out, new_offsets
