"""FSST string pages written by our 2.2 writer (asked for by field metadata): pylance
reads them row for row (and so do we), over nulls, empty strings, non-ASCII text, binary
values full of ``0xFF`` bytes that need escapes, long strings, several pages and several
fragments; point takes over FSST pages give what the general path gives."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import assert_same
from v2_helpers import open_ours, page_layouts, pylance_read

import lance_sql
from lance_sql.format.datafile import LanceFileWriter, point, point_pages
from lance_sql.format.schema import LanceSchema

lance = pytest.importorskip("lance")

N = 40_000
FSST = {"lance-encoding:compression": "fsst"}  # FSST is asked for: it is not the default


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.1
    hosts = np.array([f"shop{i}.example.{t}" for i in range(200) for t in ("com", "de")])
    words = np.array(["item", "cart", "bücher", "日本語", "ñandú", "search", "😀emoji"])
    ids = rng.integers(0, 10**7, n)
    url = [f"https://www.{h}/{w}/{i}" if i % 13 else ""
           for h, w, i in zip(hosts[rng.integers(0, hosts.size, n)],
                              words[rng.integers(0, words.size, n)], ids, strict=True)]
    tokens = [rng.bytes(2) + b"\xff" for _ in range(60)]  # short tokens, random order
    rare = rng.integers(0, 256, n).astype(np.uint8)  # a random byte: often escaped
    blob = [b"".join(tokens[k] for k in rng.integers(0, 60, 3 + int(i % 9))) + bytes([r])
            for i, r in zip(ids, rare, strict=True)]
    vocab = np.array("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod "
                     "tempor incididunt ut labore et dolore magna aliqua".split())
    picks = vocab[rng.integers(0, vocab.size, (n, 40))]
    long_ = [(" ".join(p) + str(i))[: 150 + int(i % 90)] for p, i in zip(picks, ids, strict=True)]
    columns = {
        "url": pa.array(url, mask=nulls),
        "blob": pa.array(blob, pa.binary()),
        "long": pa.array(long_),
        "large": pa.array(url, pa.large_string()),
    }
    return pa.table(columns, schema=pa.schema(
        [pa.field(name, col.type, metadata=FSST) for name, col in columns.items()]))


def _write(table: pa.Table, page_bytes: int = 256 * 1024) -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2",
                             page_bytes=page_bytes, max_page_bytes=4 * page_bytes)
    for batch in table.to_batches(max_chunksize=10_000):
        writer.write_batch(pa.Table.from_batches([batch]))
    writer.finish()
    return sink.getvalue()


@pytest.fixture(scope="module")
def written() -> tuple[pa.Table, bytes]:
    table = _table(N)
    return table, _write(table)


def _kinds(data: bytes) -> list[set[str]]:
    return [{p.mini_block_layout.value_compression.WhichOneof("compression") for p in col}
            for col in page_layouts(data)]


def test_pages_are_fsst_and_pylance_reads_every_row(tmp_path, written) -> None:
    table, data = written
    kinds = _kinds(data)
    assert kinds[0] == kinds[1] == kinds[2] == {"fsst"}, kinds
    assert all(len(col) > 1 for col in page_layouts(data)[:3])  # several pages each
    path = tmp_path / "f.lance"
    path.write_bytes(data)
    theirs = pylance_read(path)
    reader, cmap = open_ours(data)
    ours = pa.table(reader.read(reader.schema.fields, cmap), schema=reader.schema.to_arrow())
    for name in table.column_names:
        assert_same(theirs.column(name), table.column(name), f"pylance on {name}")
        assert_same(ours.column(name), table.column(name), f"lance_sql on {name}")


def test_escapes_are_used_and_read_back(written) -> None:
    """The binary column's first chunk holds escapes (code 255), so pylance decoded some."""
    table, data = written
    reader, cmap = open_ours(data)
    field = reader.schema.fields[1]
    column = reader._leaf_column(cmap[field.id], field, field.arrow_type)
    page = column.page(0)
    page.load()
    assert page.layout.value_compression.fsst.symbol_table[4:8] == b"TSSF"
    meta = np.frombuffer(bytes(reader._read(*page.buffers[0])), "<u4")
    count = 1 << int(meta[0] & 15)
    chunk = bytes(reader._read(page.buffers[1][0], int(((meta[0] >> 4) + 1) * 8)))
    size = int.from_bytes(chunk[2:6], "little")  # no levels: u16 0, u32 size, padding
    values = chunk[8 : 8 + size]
    offs = np.frombuffer(values, "<u4", count + 1)
    codes = values[int(offs[0]) : int(offs[-1])]
    assert offs[0] == 4 * (count + 1) and codes.count(255) > 0


def test_dataset_with_several_fragments(tmp_path) -> None:
    table = _table(30_000, seed=1)
    uri = tmp_path / "t.lance"
    lance_sql.write_dataset(table, uri, max_rows_per_file=12_000)
    files = sorted((uri / "data").glob("*.lance"))
    assert len(files) == 3
    assert all(_kinds(f.read_bytes())[0] == {"fsst"} for f in files)
    assert lance.dataset(str(uri)).to_table().equals(table)
    assert lance_sql.dataset(uri).to_table().equals(table)
    rows = np.sort(np.random.default_rng(2).choice(30_000, 100, replace=False))
    theirs = lance.dataset(str(uri)).take(rows.tolist())
    assert lance_sql.dataset(uri).take(rows).equals(theirs)


def _row_sets(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    sets = [np.array([r]) for r in (0, 1, 255, 256, 257, n // 2, n - 1)]
    sets += [np.sort(rng.choice(n, k, replace=False)) for k in (2, 8, 100, point.MAX_ROWS)]
    sets += [rng.integers(0, n, 30), np.array([9, 9, 2]), np.arange(500, 800)]
    sets.append(np.sort(rng.choice(n, 3000, replace=False)))
    return sets


def test_point_take_over_fsst_pages_matches_general_path(written, monkeypatch) -> None:
    table, data = written
    answered: list[str] = []
    take_leaf = point.take_leaf

    def counted(column, rows, **kw):
        out = take_leaf(column, rows, **kw)
        if out is not None:
            answered.append(column.where)
        return out

    monkeypatch.setattr(point, "take_leaf", counted)
    fields = open_ours(data)[0].schema.fields
    for rows in _row_sets(N):
        reader, cmap = open_ours(data)
        got = reader.take(fields, cmap, rows)
        with monkeypatch.context() as m:
            m.setattr(point, "take_leaf", lambda *a, **k: None)
            m.setattr(point_pages, "take_pages", lambda parts: None)
            general = open_ours(data)[0].take(fields, cmap, rows)
        idx = pa.array(rows.astype(np.int64))
        for field, a, b in zip(fields, got, general, strict=True):
            assert_same(a, b, f"take of {field.name} at {rows[:5]}")
            assert_same(a, table.column(field.name).take(idx), f"{field.name} at {rows[:5]}")
    names = " ".join(answered)
    for name in ("url", "blob", "long"):
        assert f"(field {name!r})" in names, name


def test_long_strings_go_full_zip_with_fsst(tmp_path) -> None:
    """Strings of 256+ bytes: full-zip entries of FSST-compressed bytes, as pylance
    writes them; both libraries read and take them back."""
    rng = np.random.default_rng(6)
    vocab = np.array("the of and to in is was for on that with as by at from".split())
    picks = vocab[rng.integers(0, vocab.size, (3000, 120))]
    text = [" ".join(p)[: 200 + int(k)] for p, k in zip(picks, rng.integers(0, 300, 3000),
                                                         strict=True)]
    for i in range(0, 3000, 500):  # a few documents longer than the encoder's pieces
        text[i] = " ".join(vocab[rng.integers(0, vocab.size, 1000 * (1 + i // 500))])
    arr = pa.array(text, mask=rng.random(3000) < 0.05)
    table = pa.table({"doc": arr}, schema=pa.schema([pa.field("doc", arr.type, metadata=FSST)]))
    data = _write(table)
    layouts = page_layouts(data)[0]
    assert {p.WhichOneof("layout") for p in layouts} == {"full_zip_layout"}
    assert {p.full_zip_layout.value_compression.WhichOneof("compression")
            for p in layouts} == {"fsst"}
    assert len(data) < 0.6 * sum(len(t) for t in text)
    path = tmp_path / "f.lance"
    path.write_bytes(data)
    assert_same(pylance_read(path).column("doc"), arr, "pylance")
    reader, cmap = open_ours(data)
    assert_same(reader.read(reader.schema.fields, cmap)[0], arr, "lance_sql")
    rows = np.array([0, 5, 1500, 1777, 2999])
    got = reader.take(reader.schema.fields, cmap, rows)[0]
    assert_same(got, arr.take(pa.array(rows)), "take")


def test_small_pages_stay_plain_or_lz4(tmp_path: Path) -> None:
    """Below 32 KiB of strings a symbol table does not pay (pylance does not build one)."""
    table = _table(500, seed=4).select(["url"])
    assert "fsst" not in _kinds(_write(table))[0]
