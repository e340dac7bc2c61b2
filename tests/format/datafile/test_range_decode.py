"""The one-range shortcut of mini-block pages (``MiniBlockPage._decode_range``), which scans
hit for every slice of a column without levels, against the general decoder: the same
arrays for every width, signedness, float, string and dictionary column, in our files and
pylance's (2.1, 2.2, several pages), for aligned and unaligned ranges; and bad chunk
headers are still refused."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from v2_helpers import open_ours, pylance_write

from lance_sql.errors import FormatError
from lance_sql.format.datafile import LanceFileWriter
from lance_sql.format.datafile import miniblock as mb
from lance_sql.format.schema import LanceSchema

N = 50_001
FIXED = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float32", "float64")  # fmt: skip


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(11)
    cols: dict[str, pa.Array] = {}
    for name in FIXED:
        dt = np.dtype(name)
        if dt.kind == "f":
            cols[name] = pa.array(rng.standard_normal(n).astype(dt))
        else:
            info = np.iinfo(dt)
            cols[name] = pa.array(rng.integers(info.min, info.max, n, dtype=dt, endpoint=True))
            small = rng.integers(0, 1000 if dt.itemsize > 1 else 100, n).astype(dt)
            small[rng.random(n) < 0.01] = info.max // 3  # some wider blocks
            cols[f"packed_{name}"] = pa.array(small)
    cols["sequential"] = pa.array(np.arange(n, dtype=np.int64) + 3_000_000)
    cols["with_nulls"] = pa.array(rng.integers(0, 50, n), mask=rng.random(n) < 0.2)
    cols["string"] = pa.array([f"s{v}" for v in rng.integers(0, 10**6, n)])
    cols["category"] = pa.array([f"cat_{v:02d}" for v in rng.integers(0, 16, n)])
    return pa.table(cols)


RANGES = [(0, N), (0, 1), (N - 1, 1), (1, 5000), (4096, 3 * 4096), (12_345, 33_333),
          (N - 700, 700), (1023, 2), (32_768, 16_384)]


def _ours(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2")
    for batch in table.to_batches(max_chunksize=20_000):  # several pages per column
        writer.write_batch(pa.Table.from_batches([batch]))
    writer.finish()
    return sink.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    table = _table(N)
    out = {"ours-2.2": _ours(table)}
    pytest.importorskip("lance")
    base: Path = tmp_path_factory.mktemp("range-decode")
    for version in ("2.1", "2.2"):
        out[f"pylance-{version}"] = pylance_write(base / f"{version}.lance", table, version,
                                                  batch_rows=20_000)
    return out


def _read_all(data: bytes, offset: int, length: int) -> list[pa.Array]:
    reader, colmap = open_ours(data)
    return reader.read(reader.schema.fields, colmap, offset=offset, length=length)


@pytest.mark.parametrize("name", ["ours-2.2", "pylance-2.1", "pylance-2.2"])
def test_ranges_match_the_general_decoder(files: dict[str, bytes], name: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = files[name]
    table = _table(N)
    used = []
    original = mb.MiniBlockPage._decode_range

    def counted(self: mb.MiniBlockPage, start: int, end: int):
        piece = original(self, start, end)
        used.append(piece is not None)
        return piece

    fast, general = {}, {}
    monkeypatch.setattr(mb.MiniBlockPage, "_decode_range", counted)
    for offset, length in RANGES:
        fast[offset, length] = _read_all(data, offset, length)
    assert sum(used) > 2 * len(RANGES), "the range shortcut did not run"
    monkeypatch.setattr(mb.MiniBlockPage, "_decode_range", lambda self, start, end: None)
    for offset, length in RANGES:
        general[offset, length] = _read_all(data, offset, length)
    for key, arrays in fast.items():
        for field, got, want in zip(table.schema, arrays, general[key], strict=True):
            assert got.type == want.type, field.name
            assert got.equals(want), (name, field.name, key)
            assert got.equals(table.column(field.name).slice(*key).combine_chunks()), \
                (name, field.name, key)


def _flat_file() -> tuple[bytes, int]:
    """A 2.2 file of one float64 column (flat chunks) and where its chunks start."""
    table = pa.table({"x": np.arange(10_000, dtype=np.float64)})
    data = _ours(table)
    reader, _ = open_ours(data)
    page = reader._columns[0].pages[0]
    return data, page.buffers[1][0]


def test_a_bad_chunk_header_is_refused_as_before() -> None:
    data, chunks_at = _flat_file()
    bad = bytearray(data)
    bad[chunks_at + 2 : chunks_at + 6] = (1 << 20).to_bytes(4, "little")  # value buffer size
    for offset, length in [(0, 10_000), (0, 4096), (100, 5000)]:
        with pytest.raises(FormatError):
            _read_all(bytes(bad), offset, length)
    assert _read_all(data, 0, 10_000)[0].equals(pa.array(np.arange(10_000, dtype=np.float64)))


def test_a_short_value_buffer_is_refused_as_before() -> None:
    data, chunks_at = _flat_file()
    bad = bytearray(data)
    bad[chunks_at + 2 : chunks_at + 6] = (8).to_bytes(4, "little")  # one value, not 512
    with pytest.raises(FormatError):
        _read_all(bytes(bad), 0, 10_000)
