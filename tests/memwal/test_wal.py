"""WAL entries: the MemTable schema, Lance-file encoding with the epoch, probing, damage."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from memwal_writer_helpers import PK, REGION, SCHEMA

from lance_sql.errors import FormatError, NotFoundError
from lance_sql.format.schema import LanceSchema
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.naming import bit_reversed
from lance_sql.memwal.wal import (
    WalLog,
    decode_entry,
    encode_entry,
    memtable_schema,
)

_names = itertools.count()
TABLE = LanceSchema.from_arrow(SCHEMA)
MEMTABLE = memtable_schema(TABLE)


def _rows(ids: list[int], dead: bool = False) -> pa.Table:
    return pa.table({"id": ids, "v": [1.5] * len(ids), "s": ["a"] * len(ids),
                     "_tombstone": [dead] * len(ids)}, schema=MEMTABLE.to_arrow())


@pytest.fixture
def store() -> MemoryStore:
    name = f"wal{next(_names)}"
    MemoryStore.reset(name)
    return MemoryStore(name)


def test_memtable_schema_keeps_field_ids_and_adds_the_tombstone() -> None:
    assert [(f.id, f.name) for f in MEMTABLE.fields] == [(0, "id"), (1, "v"), (2, "s"),
                                                         (3, "_tombstone")]
    tomb = MEMTABLE.fields[-1]
    assert tomb.logical_type == "bool" and not tomb.nullable
    assert MEMTABLE.fields[0].unenforced_primary_key
    # a non-nullable value column becomes nullable: tombstones carry only the key
    strict = LanceSchema.from_arrow(pa.schema([pa.field("k", pa.int32(), False, PK),
                                               pa.field("n", pa.int32(), False)]))
    assert memtable_schema(strict).fields[1].nullable
    assert not memtable_schema(strict).fields[0].nullable


@pytest.mark.parametrize("data_format", ["2.0", "2.2"])
def test_entry_round_trip_records_epoch_and_generation(data_format: str) -> None:
    data = encode_entry(MEMTABLE, _rows([3, 1, 2], dead=True), writer_epoch=6, generation=4,
                        data_format=data_format)
    entry = decode_entry(data, 13, "wal/13", MEMTABLE)
    assert (entry.entry_id, entry.writer_epoch, entry.generation) == (13, 6, 4)
    assert entry.rows.equals(_rows([3, 1, 2], dead=True))
    assert entry.file_version == tuple(int(x) for x in data_format.split("."))


@pytest.mark.parametrize("data_format", ["2.0", "2.2"])
def test_entry_of_several_fragments_holds_them_in_order(data_format: str) -> None:
    # a WAL flush hands over its pending fragments without concatenating them
    parts = [_rows([4, 2]), _rows([]), _rows([9], dead=True), _rows([7, 1, 3])]
    data = encode_entry(MEMTABLE, parts, writer_epoch=2, generation=1,
                        data_format=data_format)
    entry = decode_entry(data, 5, "wal/5", MEMTABLE)
    assert entry.rows.equals(pa.concat_tables(parts))
    assert encode_entry(MEMTABLE, [], writer_epoch=2, generation=1,
                        data_format=data_format) == encode_entry(
        MEMTABLE, _rows([]), writer_epoch=2, generation=1, data_format=data_format)


def test_entry_is_readable_by_pylance(tmp_path) -> None:
    import lance.file

    path = tmp_path / "entry.lance"
    path.write_bytes(encode_entry(MEMTABLE, _rows([5, 6]), writer_epoch=9, generation=1,
                                  data_format="2.2"))
    reader = lance.file.LanceFileReader(str(path))
    table = reader.read_all().to_table()
    assert table.column("id").to_pylist() == [5, 6]
    assert reader.metadata().schema.metadata[b"writer_epoch"] == b"9"


@pytest.mark.parametrize("cut", [1, 40, 200])
def test_truncated_or_corrupt_entry_names_the_file(cut: int) -> None:
    data = encode_entry(MEMTABLE, _rows([1, 2, 3]), writer_epoch=1, generation=1,
                        data_format="2.2")
    with pytest.raises(FormatError, match="wal/0001.lance"):
        decode_entry(data[:-cut], 1, "wal/0001.lance")
    garbage = bytearray(data)
    garbage[-60:-20] = b"\xff" * 40
    with pytest.raises(FormatError, match="wal/0001.lance"):
        decode_entry(bytes(garbage), 1, "wal/0001.lance")


def test_entry_without_epoch_or_with_other_columns_is_refused() -> None:
    plain = LanceSchema(MEMTABLE.fields, {})
    import io

    from lance_sql.format.datafile import LanceFileWriter

    sink = io.BytesIO()
    writer = LanceFileWriter(sink, plain, version="2.2")
    writer.write_batch(_rows([1]))
    writer.finish()
    with pytest.raises(FormatError, match="writer_epoch"):
        decode_entry(sink.getvalue(), 1, "e")
    keyless = memtable_schema(LanceSchema.from_arrow(pa.schema([pa.field("w", pa.float64())]),
                                                     first_id=10))
    data = encode_entry(keyless, pa.table({"w": [1.0], "_tombstone": [False]},
                                          schema=keyless.to_arrow()),
                        writer_epoch=1, generation=1, data_format="2.2")
    with pytest.raises(FormatError, match="no values for column 'id'"):
        decode_entry(data, 1, "e", MEMTABLE)


def test_entry_of_older_columns_reads_as_the_memtable_schema() -> None:
    """An entry written before columns were added (and its ``_tombstone`` under an id a
    new column took since) comes back in the new schema, flagged as rewritten: its file
    cannot be a generation's data file under that schema."""
    older = memtable_schema(LanceSchema.from_arrow(pa.schema([pa.field("id", pa.int64(), False,
                                                                       PK)])))
    assert older.fields[1].id == MEMTABLE.fields[1].id  # the tombstone's id is v's now
    data = encode_entry(older, pa.table({"id": [1, 2], "_tombstone": [False, True]},
                                        schema=older.to_arrow()),
                        writer_epoch=1, generation=1, data_format="2.2")
    entry = decode_entry(data, 1, "e", MEMTABLE)
    assert entry.rewritten
    assert entry.rows.schema.equals(MEMTABLE.to_arrow())
    assert entry.rows.to_pylist() == [{"id": 1, "v": None, "s": None, "_tombstone": False},
                                      {"id": 2, "v": None, "s": None, "_tombstone": True}]
    assert not decode_entry(encode_entry(MEMTABLE, _rows([3]), writer_epoch=1, generation=1,
                                         data_format="2.2"), 2, "e", MEMTABLE).rewritten


def test_log_appends_put_if_absent_and_probes_without_listing(store: MemoryStore) -> None:
    wal = WalLog(store, REGION)
    data = encode_entry(MEMTABLE, _rows([1]), writer_epoch=1, generation=1, data_format="2.2")
    for entry_id in (1, 2, 3, 5):
        assert wal.append(entry_id, data)
    assert not wal.append(2, b"other")  # taken: the first writer's bytes stay
    assert store.read(f"_mem_wal/{REGION}/wal/{bit_reversed(2)}.lance") == data
    ops: list[str] = []
    store.add_hook(lambda op, key: ops.append(op))
    assert list(wal.ids_after(0)) == [1, 2, 3]  # stops at the first gap (4)
    assert [e.entry_id for e in wal.read_after(1, MEMTABLE)] == [2, 3]
    assert "list" not in ops
    with pytest.raises(NotFoundError):
        wal.read(4)
