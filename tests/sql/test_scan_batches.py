"""Scan units read large chunks (sized by the columns' widths: each read has a fixed cost)
but hand DataFusion batches of its own batch size (operators such as a nested-loop join
check for cancellation between batches only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import lance_sql
from lance_sql.sql import provider
from lance_sql.sql.provider import CHUNK_ROWS, MAX_CHUNK_ROWS, chunk_rows
from lance_sql.table import build_scan_plan


def test_whole_units_read_at_once_in_batches_of_datafusions_size(tmp_path: Path,
                                                                 monkeypatch) -> None:
    reads: list[int] = []
    original = provider.UnitScanner._read_chunk

    def counted(self, start: int, length: int) -> pa.Table:
        reads.append(length)
        return original(self, start, length)

    monkeypatch.setattr(provider.UnitScanner, "_read_chunk", counted)
    rows = 300_000
    table = pa.table({"id": np.arange(rows), "x": np.linspace(0, 1, rows)})
    lance_sql.write_dataset(table, tmp_path / "t.lance")
    session = lance_sql.connect(tmp_path)
    for query in ["SELECT id, x FROM t", "SELECT id, x FROM t WHERE x >= 0"]:
        reads.clear()
        got = session.sql(query).to_arrow_table()
        assert sorted(reads) == [rows // 2, rows // 2], query  # each unit in one read
        sizes = [len(chunk) for chunk in got.column("id").chunks]
        assert max(sizes) <= 8192 and sum(sizes) == rows, (query, sizes)
        assert got.sort_by("id").equals(table), query


def test_chunks_are_sized_by_the_columns_widths(tmp_path: Path) -> None:
    rows = 1000
    table = pa.table({
        "id": np.arange(rows),
        "x": np.zeros(rows),
        "s": [str(i) for i in range(rows)],
        "v": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(rows * 512, np.float32)), 512),
    })
    ds = lance_sql.write_dataset(table, tmp_path / "t.lance")

    def rows_for(names: list[str], limited: bool = False) -> tuple[int, bool]:
        return chunk_rows(build_scan_plan(ds.manifest, names), limited=limited)

    assert rows_for(["x"]) == (MAX_CHUNK_ROWS, True)          # 8 bytes a row: the most rows
    assert rows_for(["id", "x", "s"]) == (16 * 2**20 // 48, False)  # strings: a guess
    assert rows_for(["v"]) == (CHUNK_ROWS, True)               # 2 KiB a row: the fewest rows
    assert rows_for(["x"], limited=True) == (CHUNK_ROWS, True)
    assert rows_for(["x", "_rowaddr"]) == (16 * 2**20 // 16, True)


def test_reads_of_long_strings_are_sized_by_what_rows_take(tmp_path: Path,
                                                           monkeypatch) -> None:
    """Variable-width columns: a first read of CHUNK_ROWS, then reads sized by the bytes
    a row took (long strings: no more rows than before; short ones: more)."""
    reads: list[int] = []
    original = provider.UnitScanner._read_chunk

    def counted(self, start: int, length: int) -> pa.Table:
        reads.append(length)
        return original(self, start, length)

    monkeypatch.setattr(provider.UnitScanner, "_read_chunk", counted)
    rows = 600_000
    for name, text in [("long", "x" * 200), ("short", "y")]:
        lance_sql.write_dataset(pa.table({"s": pa.array([text] * rows)}),
                                tmp_path / f"{name}.lance", max_rows_per_file=rows)
    session = lance_sql.connect(tmp_path)
    reads.clear()
    assert session.sql("SELECT count(s) FROM long").to_arrow_table()[0][0].as_py() == rows
    assert reads[0] == CHUNK_ROWS and max(reads) == CHUNK_ROWS and sum(reads) == rows
    reads.clear()
    assert session.sql("SELECT count(s) FROM short").to_arrow_table()[0][0].as_py() == rows
    assert reads[0] == CHUNK_ROWS and max(reads) > CHUNK_ROWS and sum(reads) == rows


def test_limit_queries_read_small_chunks(tmp_path: Path) -> None:
    rows = 300_000
    lance_sql.write_dataset(pa.table({"id": np.arange(rows)}), tmp_path / "t.lance",
                            max_rows_per_file=rows)
    session = lance_sql.connect(tmp_path)
    got = session.sql("SELECT id FROM t LIMIT 200000").to_arrow_table()
    assert got.num_rows == 200_000
    assert max(len(c) for c in got.column("id").chunks) <= CHUNK_ROWS
