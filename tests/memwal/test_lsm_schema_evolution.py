"""LSM reads after the table's schema changed under flushed generations: a generation
keeps the schema its writer had, and its columns are matched to the table's by field id,
so a renamed column reads under its new name (it read as NULL), in scans, one-key and
many-key lookups, in Python and SQL, even in a process that read it before the rename."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.memwal import RegionSpec
from lance_sql.memwal.generation_tables import named_as_table, open_generation
from lance_sql.memwal.merger import region_ids
from lance_sql.memwal.region_log import RegionLog

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("x", pa.string())])
KEYS = list(range(0, 330, 3))  # over 64: the many-key lookup path too


def _rows(ids: list[int], tag: int) -> pa.Table:
    return pa.table({"id": ids, "v": [i * 10 + tag for i in ids],
                     "x": [f"{tag}-{i}" for i in ids]}, schema=SCHEMA)


def _table(tmp_path: Path) -> tuple[str, dict[int, int]]:
    """Base keys 0..199, two flushed generations (no MemTable), and key -> v."""
    ds = lance_sql.write_dataset(_rows(list(range(200)), 0), str(tmp_path / "t.lance"))
    ds.create_scalar_index("id", "BTREE")
    mw = lance_sql.dataset(ds.uri).initialize_mem_wal(RegionSpec.bucket("id", 2))
    want = {i: i * 10 for i in range(200)}
    for ids, tag in ((list(range(100, 300)), 1), (list(range(250, 320)), 2)):
        with mw.writer() as writer:
            writer.put(_rows(ids, tag))
        want.update({i: i * 10 + tag for i in ids})
    return ds.uri, want


def _by_id(table: pa.Table, column: str) -> dict[int, object]:
    return dict(zip(table.column("id").to_pylist(), table.column(column).to_pylist(),
                    strict=True))


def _reads(root: Path, uri: str, column: str, floor: str = "0") -> list[dict[int, object]]:
    """The column per key through every read path: SQL scan, filter, IN list, point get;
    Python scan, many-key and one-key lookups."""
    session = lance_sql.connect(root)
    mw = lance_sql.dataset(uri).mem_wal
    in_list = ", ".join(map(str, KEYS))
    cols = ["id", column]
    return [
        _by_id(session.sql(f"SELECT id, {column} FROM t").to_arrow_table(), column),
        _by_id(session.sql(f"SELECT id, {column} FROM t WHERE {column} >= {floor}")
               .to_arrow_table(), column),  # (a filter naming it failed: no such column)
        _by_id(session.sql(f"SELECT id, {column} FROM t WHERE id IN ({in_list})")
               .to_arrow_table(), column),
        _by_id(session.sql(f"SELECT id, {column} FROM t WHERE id = 301").to_arrow_table(),
               column),
        _by_id(mw.scanner(cols).to_table(), column),
        _by_id(mw.get(pa.table({"id": KEYS}), columns=cols), column),
        _by_id(mw.get(pa.table({"id": [301]}), columns=cols), column),
    ]


def _expected(want: dict[int, object]) -> list[dict[int, object]]:
    picked = {k: want[k] for k in KEYS if k in want}
    return [want, want, picked, {301: want[301]}, want, picked, {301: want[301]}]


def test_a_renamed_column_reads_under_its_new_name(tmp_path: Path) -> None:
    uri, want = _table(tmp_path)
    assert _reads(tmp_path, uri, "v") == _expected(want)  # caches filled under "v"
    lance_sql.dataset(uri).alter_columns({"path": "v", "name": "v2"})
    assert _reads(tmp_path, uri, "v2") == _expected(want)


def test_a_rename_onto_a_dropped_columns_name_reads_the_renamed_values(tmp_path: Path
                                                                        ) -> None:
    """``x`` dropped, then ``v`` renamed to ``x``: the generations' old ``x`` is hidden,
    their ``v`` values read as ``x``."""
    uri, want = _table(tmp_path)
    table = lance_sql.dataset(uri)
    table.drop_columns(["x"])
    table.alter_columns({"path": "v", "name": "x"})
    assert _reads(tmp_path, uri, "x") == _expected(want)


def test_a_generation_without_renames_is_opened_as_it_is(tmp_path: Path) -> None:
    uri, _ = _table(tmp_path)
    ds = lance_sql.dataset(uri)
    region = region_ids(ds)[0]
    path = RegionLog(ds.store, region).latest().flushed_generations[0].path
    gen = open_generation(ds.uri, ds.store, region, path)
    assert named_as_table(gen, ds.manifest.schema) is gen
    ds.alter_columns({"path": "v", "name": "v2"})
    renamed = named_as_table(gen, lance_sql.dataset(uri).manifest.schema)
    assert renamed.schema.names == ["id", "v2", "x", "_tombstone"]
    assert renamed.to_table().column("v2") == gen.to_table().column("v")


def test_a_column_dropped_and_added_again_reads_null_in_older_generations(tmp_path: Path
                                                                          ) -> None:
    """``v`` dropped, then a new ``v`` added (another field id): the generations' rows,
    written before it existed, read NULL there (they read the dropped column's values),
    and filters naming it see NULL in them (not an unknown column)."""
    uri, want = _table(tmp_path)
    table = lance_sql.dataset(uri)
    table.drop_columns(["v"])
    table.add_columns({"v": "id * 0 - 1"})
    now = {k: (-1 if k < 100 else None) for k in want}  # generations hold keys 100..319
    picked = {k: now[k] for k in KEYS if k in now}
    assert _reads(tmp_path, uri, "v") == [now, {}, picked, {301: None}, now, picked,
                                          {301: None}]
    session = lance_sql.connect(tmp_path)
    counted = session.sql("SELECT count(*) AS n FROM t WHERE v IS NULL").to_arrow_table()
    assert counted["n"].to_pylist() == [220]
    assert lance_sql.dataset(uri).mem_wal.scanner(["id"], filter="v = -1").to_table() \
        .num_rows == 100


def test_a_retyped_column_reads_its_values_cast(tmp_path: Path) -> None:
    """A type change rewrites ``v`` under a new field id in its place: the generations'
    values still read, as the new type."""
    uri, want = _table(tmp_path)
    lance_sql.dataset(uri).alter_columns({"path": "v", "data_type": pa.float64()})
    cast = {k: float(v) for k, v in want.items()}
    assert _reads(tmp_path, uri, "v") == _expected(cast)


def test_a_filter_on_a_column_added_after_the_flush(tmp_path: Path) -> None:
    """A column added after the generations were flushed is NULL in their rows: a filter
    naming it selects base rows only (it failed: no such column in the generation)."""
    uri, _ = _table(tmp_path)
    lance_sql.dataset(uri).add_columns({"w": "id * 0 - 1"})
    session = lance_sql.connect(tmp_path)
    for where, n in (("w >= -5", 100), ("w IS NULL", 220), ("w IS NULL OR id < 3", 223)):
        got = session.sql(f"SELECT count(*) AS n FROM t WHERE {where}").to_arrow_table()
        assert got["n"].to_pylist() == [n], where
        rows = lance_sql.dataset(uri).mem_wal.scanner(["id", "w"], filter=where).to_table()
        assert rows.num_rows == n, where


def test_filters_on_an_added_column_with_functions_and_other_columns(tmp_path: Path
                                                                      ) -> None:
    """The generations' rows lack ``w`` and ``ws``: LIKE and functions over them see a
    typed NULL (an untyped one found no kernel), and a filter also naming a column the
    query does not select reads that column for them (it was not found)."""
    uri, want = _table(tmp_path)
    lance_sql.dataset(uri).add_columns({"w": "id * 0 - 1", "ws": "'x'"})
    session = lance_sql.connect(tmp_path)
    mw = lance_sql.dataset(uri).mem_wal
    base_only = sorted(k for k in want if k < 100)  # generations hold keys 100..319
    for where, expected in (
            ("ws LIKE 'x%'", base_only),
            ("lower(ws) = 'x'", base_only),
            ("ws = 'x' OR v = 1011", [*base_only, 101]),  # v of key 101 (generation 1)
            ("coalesce(w, 7) = 7", sorted(k for k in want if k >= 100))):
        assert sorted(mw.scanner(["id"], filter=where).to_table()["id"].to_pylist()) \
            == expected, where
        got = session.sql(f"SELECT id FROM t WHERE {where}").to_arrow_table()
        assert sorted(got["id"].to_pylist()) == expected, where


def _merged_base(uri: str, column: str) -> dict[int, object]:
    """The base table alone (no MemWAL view) after every generation was merged."""
    mw = lance_sql.dataset(uri).mem_wal
    mw.merge()
    return _by_id(lance_sql.dataset(uri).to_table(columns=["id", column]), column)


def test_an_upsert_replaces_the_whole_row_before_and_after_the_merge(tmp_path: Path
                                                                      ) -> None:
    """``w`` added after the generations were flushed: their rows were written without it,
    and an upsert replaces the whole row, so the keys they wrote read NULL there (the
    base's value is replaced) in the view, in the merged base, and in the view after
    the merge (the merger kept the base's value: reads changed when it ran)."""
    uri, want = _table(tmp_path)
    lance_sql.dataset(uri).add_columns({"w": "id * 0 + 7"})
    now = {k: (7 if k < 100 else None) for k in want}  # generations hold keys 100..319
    expected = _expected(now)
    expected[1] = {k: v for k, v in now.items() if v is not None}  # (``w >= 0``)
    assert _reads(tmp_path, uri, "w") == expected
    assert _merged_base(uri, "w") == now
    assert _reads(tmp_path, uri, "w") == expected
    assert _reads(tmp_path, uri, "v") == _expected(want)


@pytest.mark.parametrize("spelt", ["type", "name"])
def test_altering_to_its_own_type_by_the_types_name_keeps_the_field_id(tmp_path: Path,
                                                                        spelt: str) -> None:
    """pyarrow takes a type's name ("string") where a type goes: the same alteration,
    the same field id kept (a new one made the generations' values read NULL, and the
    merge wrote NULL)."""
    uri, want = _table(tmp_path)
    before = lance_sql.dataset(uri).lance_schema.field("x").id
    kind: object = pa.string() if spelt == "type" else "string"
    lance_sql.dataset(uri).alter_columns({"path": "x", "data_type": kind})
    assert lance_sql.dataset(uri).lance_schema.field("x").id == before
    values = {k: f"{v % 10}-{k}" for k, v in want.items()}
    assert _reads(tmp_path, uri, "x", "''") == _expected(values)
    assert _merged_base(uri, "x") == values
    with pytest.raises(InvalidInputError, match="not a data type"):
        lance_sql.dataset(uri).alter_columns({"path": "x", "data_type": "no-such-type"})


@pytest.mark.parametrize("column", ["v", "x"])  # x: the last column
def test_a_column_altered_to_its_own_type_reads_its_values(tmp_path: Path, column: str
                                                           ) -> None:
    """A column altered to the type it has: on a table with a MemWAL it keeps its field
    id (nothing changes; pylance refuses type changes on such a table), so generations,
    a MemTable written before and the merged base read its values. It took a new id and
    read NULL, taken for a column dropped and added again; a new id of the same type at
    the end of the schema (``x``) cannot be told from that."""
    uri, want = _table(tmp_path)
    kind = SCHEMA.field(column).type
    floor = "0" if column == "v" else "''"
    with pytest.raises(OSError, match="MemWAL"):
        lance.dataset(uri).alter_columns({"path": column, "data_type": kind})
    with lance_sql.dataset(uri).mem_wal.writer() as writer:
        more = list(range(320, 340))
        writer.put(_rows(more, 3))  # a MemTable, flushed only after the alteration
        want.update({i: i * 10 + 3 for i in more})
        values = want if column == "v" else {k: f"{v % 10}-{k}" for k, v in want.items()}
        before = lance_sql.dataset(uri).lance_schema.field(column).id
        lance_sql.dataset(uri).alter_columns({"path": column, "data_type": kind})
        assert lance_sql.dataset(uri).lance_schema.field(column).id == before
        assert _reads(tmp_path, uri, column, floor) == _expected(values)
    # the MemTable flushed as a generation
    assert _reads(tmp_path, uri, column, floor) == _expected(values)
    assert _merged_base(uri, column) == values
    assert _reads(tmp_path, uri, column, floor) == _expected(values)


def test_without_a_mem_wal_altering_to_its_own_type_takes_a_new_field_id(tmp_path: Path
                                                                         ) -> None:
    """As pylance does: the column is rewritten under a new id, in its place."""
    ids = {}
    for name, module in (("ours", lance_sql), ("pylance", lance)):
        uri = str(tmp_path / f"{name}.lance")
        module.write_dataset(_rows([1, 2], 0), uri)
        module.dataset(uri).alter_columns({"path": "x", "data_type": pa.string()})
        schema = lance_sql.dataset(uri).lance_schema
        ids[name] = [(f.name, f.id) for f in schema.fields]
        assert lance_sql.dataset(uri).to_table().column("x").to_pylist() == ["0-1", "0-2"]
    assert ids["ours"] == ids["pylance"] == [("id", 0), ("v", 1), ("x", 3)]


def test_the_last_column_dropped_and_added_again_reads_null_in_older_generations(
        tmp_path: Path) -> None:
    """``x``, the last column (the largest field id), dropped and added again: the new
    ``x`` takes an id above the dropped one's (it took that id, so the generations' old
    ``x`` values read as the new column's, and pylance read them from the base too)."""
    uri, want = _table(tmp_path)
    table = lance_sql.dataset(uri)
    table.drop_columns(["x"])
    table.add_columns({"x": "'fresh'"})
    now: dict[int, object] = {k: ("fresh" if k < 100 else None) for k in want}
    expected = _expected(now)
    expected[1] = {k: v for k, v in now.items() if v is not None}  # (``x >= ''``)
    assert _reads(tmp_path, uri, "x", "''") == expected
    assert lance.dataset(uri).to_table(filter="id < 3").column("x").to_pylist() == \
        ["fresh"] * 3
    assert _merged_base(uri, "x") == now
    assert _reads(tmp_path, uri, "x", "''") == expected


def test_a_table_with_a_mem_wal_takes_only_nullable_new_columns(tmp_path: Path) -> None:
    """A non-nullable column added under a MemWAL left the generation's rows NULL where
    NULL cannot be: every scan failed and every merge was refused. It is refused now,
    nothing committed; a nullable one is taken."""
    uri, _ = _table(tmp_path)
    version = lance_sql.dataset(uri).version

    def zeros(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array([0] * batch.num_rows, pa.int64())],
            schema=pa.schema([pa.field("z", pa.int64(), nullable=False)]))

    with pytest.raises(SchemaError, match="must be nullable"):
        lance_sql.dataset(uri).add_columns(zeros, ["id"])
    assert lance_sql.dataset(uri).version == version
    lance_sql.dataset(uri).add_columns({"z": "id * 0"})
    assert lance_sql.dataset(uri).mem_wal.scanner().to_table().num_rows > 0
