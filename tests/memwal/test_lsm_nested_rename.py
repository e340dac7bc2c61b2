"""A field renamed inside a struct column (``st.a`` -> ``st.b``) keeps its field id: rows
written before the rename, still in an open writer's MemTable, in a flushed generation
not merged yet, or merged into the base, read under the table's current nested names in
scans, filters on the nested field, one-key and many-key lookups and SQL (they read NULL
there, and a filter naming the new name failed); the merger writes them under those
names (it wrote NULL), which pylance reads; an open writer takes puts under the new
names."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}


def _schema(member: str = "a", column: str = "st") -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                      pa.field(column, pa.struct([pa.field(member, pa.int64()),
                                                  pa.field("c", pa.string())]))])


def _rows(ids: list[int], tag: int, member: str = "a", column: str = "st") -> pa.Table:
    return pa.table({"id": ids, column: [{member: i * 10 + tag, "c": f"{tag}-{i}"}
                                         for i in ids]}, schema=_schema(member, column))


def _reads(uri: str, column: str) -> list[dict[int, object]]:
    """``column``.b per key through each read path: Python scan, filter on the nested
    field, one-key and many-key lookups; SQL scan, filter and point query."""
    mw = MemWal(lance_sql.dataset(uri))

    def by_id(table: pa.Table) -> dict[int, object]:
        values = (table.column("b") if "b" in table.column_names
                  else table.column(column).combine_chunks().field("b"))
        return dict(zip(table.column("id").to_pylist(), values.to_pylist(), strict=True))

    session = lance_sql.connect()
    session.register("t", uri)
    asked = list(range(0, 400, 2))
    return [
        by_id(mw.scanner(["id", column]).to_table()),
        by_id(mw.scanner(["id", column], f"{column}.b >= 1500").to_table()),
        by_id(mw.get({"id": [102]}, ["id", column])),
        by_id(mw.get(pa.table({"id": pa.array(asked, pa.int64())}), ["id", column])),
        by_id(session.sql(f"SELECT id, {column}['b'] AS b FROM t").to_arrow_table()),
        by_id(session.sql(f"SELECT id, {column}['b'] AS b FROM t WHERE {column}['b'] >= 1500")
              .to_arrow_table()),
        by_id(session.sql(f"SELECT id, {column}['b'] AS b FROM t WHERE id = 99")
              .to_arrow_table()),
    ]


def _expected(model: dict[int, int]) -> list[dict[int, object]]:
    asked = set(range(0, 400, 2))
    return [model, {k: v for k, v in model.items() if v >= 1500}, {102: model[102]},
            {k: v for k, v in model.items() if k in asked}, model,
            {k: v for k, v in model.items() if v >= 1500}, {99: model[99]}]


@pytest.mark.parametrize("also_column", [False, True])
def test_rows_written_before_a_nested_rename_read_under_the_new_name(
        tmp_path: Path, also_column: bool) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(list(range(200)), 0), uri)
    model = {i: i * 10 for i in range(200)}
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(_rows(list(range(100, 260)), 1))
        writer.flush_memtable()  # a flushed generation
        writer.put(_rows(list(range(0, 330, 3)), 2))  # stays in the MemTables
        model.update({i: i * 10 + 1 for i in range(100, 260)})
        model.update({i: i * 10 + 2 for i in range(0, 330, 3)})
        renames = [{"path": "st.a", "name": "b"}]
        if also_column:
            renames.append({"path": "st", "name": "rec"})
        lance_sql.dataset(uri).alter_columns(*renames)
        column = "rec" if also_column else "st"
        assert _reads(uri, column) == _expected(model)  # MemTable and generation
    finally:
        writer.close()
    assert _reads(uri, column) == _expected(model)  # flushed generations only
    MemWal(lance_sql.dataset(uri)).merge()
    assert _reads(uri, column) == _expected(model)  # merged
    for base in (lance_sql.dataset(uri).to_table(), lance.dataset(uri).to_table()):
        assert base.schema.field(column).type == _schema("b").field("st").type
        got = dict(zip(base.column("id").to_pylist(),
                       base.column(column).combine_chunks().field("b").to_pylist(),
                       strict=True))
        assert got == model


def test_a_writer_opened_before_a_nested_rename_takes_the_new_names(tmp_path: Path
                                                                    ) -> None:
    """Its puts name the member as the table does now (they raised an Arrow error), and
    land under the writer's own name, read back under the new one; the old name is
    refused with SchemaError (it means nothing in the table now)."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows(list(range(10)), 0), uri)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 1), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    model = {i: i * 10 for i in range(10)}
    with mw.writer() as writer:
        lance_sql.dataset(uri).alter_columns({"path": "st.a", "name": "b"})
        writer.put(_rows([3, 4, 11], 2, member="b"))
        model.update({i: i * 10 + 2 for i in (3, 4, 11)})
        with pytest.raises(SchemaError, match="renamed inside"):
            writer.put(_rows([5], 2, member="a"))
        table = MemWal(lance_sql.dataset(uri)).scanner(["id", "st"]).to_table()
        got = dict(zip(table.column("id").to_pylist(),
                       table.column("st").combine_chunks().field("b").to_pylist(),
                       strict=True))
        assert got == model
    MemWal(lance_sql.dataset(uri)).merge()
    base = lance.dataset(uri).to_table()
    assert dict(zip(base.column("id").to_pylist(),
                    base.column("st").combine_chunks().field("b").to_pylist(),
                    strict=True)) == model


def test_a_member_renamed_to_a_dropped_members_name_reads_its_own_values(tmp_path: Path
                                                                          ) -> None:
    """``st.a`` dropped, then ``st.c`` renamed to ``a``: rows written before read ``c``'s
    values under ``a`` (they read the dropped member's), open, flushed and merged."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("st", pa.struct([pa.field("a", pa.int64()),
                                                  pa.field("c", pa.int64())]))])

    def rows(ids: list[int], tag: int) -> pa.Table:
        return pa.table({"id": ids, "st": [{"a": i * 10 + tag, "c": -(i * 10 + tag)}
                                           for i in ids]}, schema=schema)

    def read(table: pa.Table) -> dict[int, object]:
        return dict(zip(table.column("id").to_pylist(),
                        table.column("st").combine_chunks().field("a").to_pylist(),
                        strict=True))

    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(rows(list(range(10)), 0), uri)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 1), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    model = {i: -(i * 10) for i in range(10)}
    writer = mw.writer()
    try:
        writer.put(rows([1, 2, 3], 1))
        writer.flush_memtable()
        writer.put(rows([3, 4, 11], 2))
        model.update({1: -11, 2: -21, 3: -32, 4: -42, 11: -112})
        lance_sql.dataset(uri).drop_columns(["st.a"])
        lance_sql.dataset(uri).alter_columns({"path": "st.c", "name": "a"})
        assert read(MemWal(lance_sql.dataset(uri)).scanner(["id", "st"]).to_table()) == model
    finally:
        writer.close()
    assert read(MemWal(lance_sql.dataset(uri)).scanner(["id", "st"]).to_table()) == model
    MemWal(lance_sql.dataset(uri)).merge()
    assert read(lance.dataset(uri).to_table()) == model


def test_a_writer_opened_before_a_nested_member_is_dropped_takes_the_new_shape(
        tmp_path: Path) -> None:
    """A put shaped as the table is after ``st.in.c`` is dropped lands (the dropped
    member NULL, as a dropped column is) and reads back; it raised an Arrow error (no
    element-wise comparison of structs) instead."""
    inner = pa.struct([pa.field("a", pa.int64()), pa.field("c", pa.int64())])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("st", pa.struct([pa.field("in", inner),
                                                  pa.field("z", pa.int64())]))])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1], "st": [{"in": {"a": 1, "c": 2}, "z": 3}]},
                                          schema=schema), uri)
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 1), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    with mw.writer() as writer:
        lance_sql.dataset(uri).drop_columns(["st.in.c"])
        now = lance_sql.dataset(uri).schema.field("st").type
        writer.put(pa.table({"id": pa.array([7], pa.int64()),
                             "st": pa.array([{"in": {"a": 70}, "z": 1}], now)}))
        got = MemWal(lance_sql.dataset(uri)).scanner(["id", "st"]).to_table().to_pylist()
        assert sorted(got, key=lambda r: r["id"]) == [
            {"id": 1, "st": {"in": {"a": 1}, "z": 3}}, {"id": 7, "st": {"in": {"a": 70}, "z": 1}}]
