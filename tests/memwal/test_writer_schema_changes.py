"""A writer opened before the table's schema changed keeps working: its puts and deletes
name the table's columns as they are now (renamed, dropped, added) and land under the
right field ids; names that would lose or misplace values raise SchemaError. Rows read
the same in scans, lookups and SQL, from the MemTable, once flushed, and once merged."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.memwal import RegionSpec
from lance_sql.memwal.api import RoutingWriter
from lance_sql.memwal.writer import RegionWriter

lance = pytest.importorskip("lance")

Writer = RoutingWriter | RegionWriter

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("x", pa.string())])
NEW = list(range(50, 150))  # puts after the change: 50 base keys updated, 50 inserted


_OPENED: list[Writer] = []


@pytest.fixture(autouse=True)
def _abort_writers() -> Iterator[None]:
    """A failed test leaves no writer running (a passing one closed it)."""
    yield
    while _OPENED:
        writer = _OPENED.pop()
        for region_writer in writer.writers if isinstance(writer, RoutingWriter) else [writer]:
            region_writer.abort()


def _open(tmp_path: Path, *, manual: bool = False) -> tuple[str, Writer]:
    """Base keys 0..99 and a writer opened on them (routing, or one manual region)."""
    rows = pa.table({"id": range(100), "v": [i * 10 for i in range(100)],
                     "x": [f"b{i}" for i in range(100)]}, schema=SCHEMA)
    ds = lance_sql.write_dataset(rows, str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(None if manual else RegionSpec.bucket("id", 2))
    writer = mw.writer(region=uuid.uuid4()) if manual else mw.writer()
    _OPENED.append(writer)
    return ds.uri, writer


def _reads(root: Path, uri: str, key: str, column: str) -> list[dict[int, object]]:
    """``column`` per key: Python scan, many- and one-key lookups, SQL scan and point."""
    mw = lance_sql.dataset(uri).mem_wal
    session = lance_sql.connect(root)

    def by_key(t: pa.Table) -> dict[int, object]:
        return dict(zip(t.column(key).to_pylist(), t.column(column).to_pylist(), strict=True))

    return [by_key(mw.scanner([key, column]).to_table()),
            by_key(mw.get(pa.table({key: list(range(0, 160, 2))}), columns=[key, column])),
            by_key(mw.get(pa.table({key: [120]}), columns=[key, column])),
            by_key(session.sql(f"SELECT {key}, {column} FROM t").to_arrow_table()),
            by_key(session.sql(f"SELECT {key}, {column} FROM t WHERE {key} = 120")
                   .to_arrow_table())]


def _expected(want: dict[int, object]) -> list[dict[int, object]]:
    return [want, {k: want[k] for k in range(0, 160, 2) if k in want}, {120: want[120]},
            want, {120: want[120]}]


def _check_everywhere(root: Path, uri: str, writer: Writer, key: str,
                      want: dict[str, dict[int, object]]) -> None:
    """The same rows from the MemTable, once flushed (writer closed), once merged."""
    steps: list[Callable[[], object]] = [lambda: None, writer.close,
                                         lambda: lance_sql.dataset(uri).mem_wal.merge()]
    for step in steps:
        step()
        for column, values in want.items():
            assert _reads(root, uri, key, column) == _expected(values), column
    for column, values in want.items():  # the base alone, merged
        table = lance_sql.dataset(uri).to_table(columns=[key, column])
        assert dict(zip(table.column(key).to_pylist(), table.column(column).to_pylist(),
                        strict=True)) == values, column


@pytest.mark.parametrize("manual", [False, True])
def test_puts_after_a_rename_take_the_new_names(tmp_path: Path, manual: bool) -> None:
    """``v`` renamed to ``v2`` and the key ``id`` to ``key``: puts and deletes with the
    new names land under the columns' field ids (they raised: unknown columns); the old
    names raise SchemaError naming the new ones."""
    uri, writer = _open(tmp_path, manual=manual)
    lance_sql.dataset(uri).alter_columns({"path": "v", "name": "v2"},
                                         {"path": "id", "name": "key"})
    writer.put(pa.table({"key": NEW, "v2": [i * 10 + 1 for i in NEW],
                         "x": [f"n{i}" for i in NEW]}))
    writer.delete(pa.table({"key": [60, 140], "v": [0, 0]}))  # (other columns: left out)
    with pytest.raises(SchemaError, match="'v' was renamed to 'v2'"):
        writer.put(pa.table({"key": [1], "v": [1], "x": ["old"]}))
    with pytest.raises(SchemaError, match="'id' was renamed to 'key'"):
        writer.delete(pa.table({"id": [1]}))
    with pytest.raises(SchemaError, match=r"missing \['v2'\]"):
        writer.put(pa.table({"key": [1], "x": ["no v2"]}))
    v2 = {i: i * 10 for i in range(100)} | {i: i * 10 + 1 for i in NEW}
    x = {i: f"b{i}" for i in range(100)} | {i: f"n{i}" for i in NEW}
    for gone in (60, 140):
        del v2[gone], x[gone]
    _check_everywhere(tmp_path, uri, writer, "key", {"v2": v2, "x": x})


def test_puts_after_two_columns_swapped_names_follow_the_current_names(tmp_path: Path
                                                                        ) -> None:
    """``v`` and ``x`` swapped names (``v`` is now the string column): a put's ``v`` is
    the current ``v``, whatever the writer called it."""
    uri, writer = _open(tmp_path)
    table = lance_sql.dataset(uri)
    table.alter_columns({"path": "v", "name": "tmp"})
    table.alter_columns({"path": "x", "name": "v"}, {"path": "tmp", "name": "x"})
    writer.put(pa.table({"id": NEW, "x": [i * 10 + 1 for i in NEW],
                         "v": [f"n{i}" for i in NEW]}))
    x = {i: i * 10 for i in range(100)} | {i: i * 10 + 1 for i in NEW}
    v = {i: f"b{i}" for i in range(100)} | {i: f"n{i}" for i in NEW}
    _check_everywhere(tmp_path, uri, writer, "id", {"x": x, "v": v})


def test_a_column_added_after_the_writer_opened(tmp_path: Path) -> None:
    """``w`` added: the writer cannot write it (SchemaError, not silently dropped);
    puts without it are taken, and their rows read NULL there (a whole-row upsert), in
    the view and once merged."""
    uri, writer = _open(tmp_path)
    lance_sql.dataset(uri).add_columns({"w": "id * 0 + 7"})
    with pytest.raises(SchemaError, match="'w' was added"):
        writer.put(pa.table({"id": [1], "v": [1], "x": ["a"], "w": [1]}))
    writer.put(pa.table({"id": NEW, "v": [i * 10 + 1 for i in NEW],
                         "x": [f"n{i}" for i in NEW]}))
    w = {i: 7 for i in range(100)} | {i: None for i in NEW}
    v = {i: i * 10 for i in range(100)} | {i: i * 10 + 1 for i in NEW}
    _check_everywhere(tmp_path, uri, writer, "id", {"w": w, "v": v})


def test_a_column_dropped_after_the_writer_opened(tmp_path: Path) -> None:
    """``x`` dropped: puts without it are taken; with it they raise SchemaError (its
    values would be lost)."""
    uri, writer = _open(tmp_path)
    lance_sql.dataset(uri).drop_columns(["x"])
    with pytest.raises(SchemaError, match="'x' was dropped"):
        writer.put(pa.table({"id": [1], "v": [1], "x": ["a"]}))
    writer.put(pa.table({"id": NEW, "v": [i * 10 + 1 for i in NEW]}))
    v = {i: i * 10 for i in range(100)} | {i: i * 10 + 1 for i in NEW}
    _check_everywhere(tmp_path, uri, writer, "id", {"v": v})
    assert lance_sql.dataset(uri).schema.names == ["id", "v"]


def test_a_column_dropped_and_added_again_after_the_writer_opened(tmp_path: Path) -> None:
    """``x`` dropped and a new ``x`` added: the writer's ``x`` is the old column; a put
    naming ``x`` means the new one, which it cannot write (SchemaError: it went to the
    dropped column, read as NULL); puts without it are taken."""
    uri, writer = _open(tmp_path)
    table = lance_sql.dataset(uri)
    table.drop_columns(["x"])
    table.add_columns({"x": "'fresh'"})
    with pytest.raises(SchemaError, match="'x' was added"):
        writer.put(pa.table({"id": [1], "v": [1], "x": ["a"]}))
    writer.put(pa.table({"id": NEW, "v": [i * 10 + 1 for i in NEW]}))
    x = {i: "fresh" for i in range(100)} | {i: None for i in NEW}
    _check_everywhere(tmp_path, uri, writer, "id", {"x": x})


def test_a_retyped_column_is_put_only_where_values_fit_the_writers_type(tmp_path: Path
                                                                        ) -> None:
    """``f`` float32 -> float64 after the writer opened: values the writer's float32
    holds exactly are taken; ``0.1`` would come back another number (SchemaError: open a
    new writer), as an integer out of range does."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("f", pa.float32()), pa.field("i", pa.int8())])
    ds = lance_sql.write_dataset(pa.table({"id": [1], "f": [1.0], "i": [1]}, schema=schema),
                                 str(tmp_path / "t.lance"))
    writer = ds.initialize_mem_wal(RegionSpec.bucket("id", 2)).writer()
    _OPENED.append(writer)
    lance_sql.dataset(ds.uri).alter_columns({"path": "f", "data_type": pa.float64()},
                                             {"path": "i", "data_type": pa.int64()})
    with pytest.raises(SchemaError, match="'f' changed type"):
        writer.put(pa.table({"id": [5], "f": [0.1], "i": [1]}))
    with pytest.raises(SchemaError, match="'i' changed type"):
        writer.put(pa.table({"id": [5], "f": [0.5], "i": [1000]}))
    writer.put(pa.table({"id": [6, 7], "f": [0.5, float("nan")], "i": [-3, None]}))
    got = lance_sql.dataset(ds.uri).mem_wal.scanner().to_table().sort_by("id").to_pylist()
    assert [r["id"] for r in got] == [1, 6, 7]
    assert got[1]["f"] == 0.5 and got[1]["i"] == -3 and got[2]["i"] is None


@pytest.mark.parametrize("change", ["add", "drop", "rename"])
def test_a_wal_backlog_replays_after_the_columns_changed(tmp_path: Path, change: str) -> None:
    """Acknowledged rows left in the WAL (a writer gone before its MemTable flush), then
    the table's columns change: the next writer replays them under the new columns (it
    raised FormatError, and the rows were never seen); their generation holds them in a
    data file of its own (the WAL file's columns are the old ones; the tombstone's field
    id is the new column's)."""
    uri, writer = _open(tmp_path)
    writer.put(pa.table({"id": NEW, "v": [i * 10 + 1 for i in NEW],
                         "x": [f"n{i}" for i in NEW]}))
    writer.delete(pa.table({"id": [60, 140]}))
    writer.flush()
    for region_writer in writer.writers:
        region_writer.abort()  # as a crash after the WAL flush
    table = lance_sql.dataset(uri)
    v = {i: i * 10 for i in range(100)} | {i: i * 10 + 1 for i in NEW}
    want: dict[str, dict[int, object]]
    if change == "add":
        table.add_columns(pa.field("y", pa.int32()))
        want = {"v": v, "y": dict.fromkeys(v)}
    elif change == "drop":
        table.drop_columns(["x"])
        want = {"v": v}
    else:
        table.alter_columns({"path": "x", "name": "x2"})
        want = {"v": v, "x2": {i: f"b{i}" for i in range(100)} | {i: f"n{i}" for i in NEW}}
    for gone in (60, 140):
        for values in want.values():
            del values[gone]
    mw = lance_sql.dataset(uri).mem_wal
    mw.recover(idle=dt.timedelta(0))
    again = mw.writer()
    _OPENED.append(again)
    again.put(pa.table({"id": [7], "v": [77], **({"y": [1]} if change == "add" else {}),
                        **({"x2": ["s7"]} if change == "rename" else {}),
                        **({"x": ["s7"]} if change == "add" else {})}))
    want["v"][7] = 77
    if change == "add":
        want["y"][7] = 1
    if change == "rename":
        want["x2"][7] = "s7"
    _check_everywhere(tmp_path, uri, again, "id", want)
    base = lance.dataset(uri).to_table(columns=["id", "v"])
    assert dict(zip(base.column("id").to_pylist(), base.column("v").to_pylist(),
                    strict=True)) == want["v"]
