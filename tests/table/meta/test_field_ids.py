"""The field-id rule without files: which id a new column takes, when a schema change
must record the table's field-id mark, and what a restore keeps of it."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from lance_sql.errors import FormatError
from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.index import IndexMetadata, encode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME
from lance_sql.format.schema import LanceSchema
from lance_sql.table.meta.field_ids import (
    MAX_FIELD_ID_CONFIG,
    has_mem_wal,
    highest_used_field_id,
    mark_to_record,
    next_field_id,
    recorded_mark,
    restored_config,
)
from lance_sql.table.txn.apply import apply_transaction
from lance_sql.table.txn.operations import Restore, Transaction

ARROW = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])  # ids 0 1 2
FULL = LanceSchema.from_arrow(ARROW)
MEM_WAL = encode_index_section([IndexMetadata(str(uuid.uuid4()), MEM_WAL_INDEX_NAME, (), 1,
                                              None)])


def _schema(*names: str) -> LanceSchema:
    return LanceSchema(tuple(f for f in FULL.fields if f.name in names))


def _manifest(schema: LanceSchema, file_ids: tuple[int, ...] = (), *, mark: int | None = None,
              mem_wal: bool = True, version: int = 5) -> Manifest:
    """A table version whose one fragment's file holds ``file_ids`` (none: no file)."""
    files = (DataFile("f.lance", file_ids, tuple(range(len(file_ids))), 2, 0),) \
        if file_ids else ()
    config = {} if mark is None else {MAX_FIELD_ID_CONFIG: str(mark)}
    return Manifest(schema=schema, fragments=(Fragment(0, files, 10),), version=version,
                    config=config, index_section=MEM_WAL if mem_wal else None)


def test_a_new_id_is_above_the_schema_the_files_the_mark_and_what_is_held() -> None:
    assert next_field_id(_manifest(FULL, (0, 1, 2))) == 3
    dropped = _schema("id", "a")
    assert next_field_id(_manifest(dropped, (0, 1, 2))) == 3  # the files still hold b
    compacted = _manifest(dropped, (0, 1))
    assert next_field_id(compacted) == 2  # what Lance alone allows
    assert next_field_id(replace(compacted, config={MAX_FIELD_ID_CONFIG: "2"})) == 3
    assert next_field_id(compacted, held=2) == 3  # a generation still holds id 2
    assert next_field_id(compacted, held=0) == 2
    nested = LanceSchema.from_arrow(pa.schema([("id", pa.int64()),
                                               ("s", pa.struct([("x", pa.int8())]))]))
    assert next_field_id(_manifest(nested)) == 3  # struct members have ids too


def test_a_drop_records_the_mark_only_when_it_lowers_the_highest_id() -> None:
    table = _manifest(FULL, (0, 1, 2))
    assert mark_to_record(table, _schema("id", "a")) == 2  # the last column
    assert mark_to_record(table, _schema("id", "b")) is None  # b (2) stays
    assert mark_to_record(replace(table, config={MAX_FIELD_ID_CONFIG: "2"}),
                          _schema("id", "a")) is None  # recorded already
    assert mark_to_record(replace(table, config={MAX_FIELD_ID_CONFIG: "1"}),
                          _schema("id", "a")) == 2
    # an id only the files hold (a column dropped before the mark existed) is kept too
    legacy = _manifest(_schema("id", "a"), (0, 1, 2))
    assert mark_to_record(legacy, _schema("id")) == 2
    assert highest_used_field_id(legacy) == 2


@pytest.mark.parametrize("text", ["x", "-2", "1.5", ""])
def test_a_mark_that_is_not_a_field_id_is_a_format_error(text: str) -> None:
    with pytest.raises(FormatError, match=MAX_FIELD_ID_CONFIG):
        recorded_mark({MAX_FIELD_ID_CONFIG: text})
    with pytest.raises(FormatError):
        next_field_id(replace(_manifest(FULL), config={MAX_FIELD_ID_CONFIG: text}))


def test_marks_read() -> None:
    assert recorded_mark({}) == -1
    assert recorded_mark({MAX_FIELD_ID_CONFIG: "7", "other": "x"}) == 7
    assert recorded_mark({MAX_FIELD_ID_CONFIG: "-1"}) == -1
    assert has_mem_wal(_manifest(FULL)) and not has_mem_wal(_manifest(FULL, mem_wal=False))


def test_a_restore_keeps_the_ids_the_table_used_since() -> None:
    """Restoring a version from before ``b`` existed takes id 2 out as a drop does: on
    a table with a MemWAL the restored config records it; without one, and when the
    restored version reaches it anyway, the config is the restored version's."""
    old = _manifest(_schema("id", "a"), (0, 1), version=2)
    now = _manifest(FULL, (0, 1, 2), version=6)
    assert restored_config(now, old) == {MAX_FIELD_ID_CONFIG: "2"}
    assert restored_config(replace(now, index_section=None), old) == {}
    assert restored_config(now, replace(old, config={MAX_FIELD_ID_CONFIG: "4", "k": "v"})) \
        == {MAX_FIELD_ID_CONFIG: "4", "k": "v"}
    assert restored_config(now, replace(old, schema=FULL)) == {}
    # the mark never goes back: a restored version with a lower one gets the newer
    lower = replace(old, config={MAX_FIELD_ID_CONFIG: "1"})
    assert restored_config(replace(now, config={MAX_FIELD_ID_CONFIG: "9"}), lower) == {
        MAX_FIELD_ID_CONFIG: "9"}
    restored = apply_transaction(now, Transaction(read_version=6, operation=Restore(2)), 7, 0,
                                 source=old)
    assert restored.config == {MAX_FIELD_ID_CONFIG: "2"} and next_field_id(restored) == 3
    assert restored.schema == old.schema
