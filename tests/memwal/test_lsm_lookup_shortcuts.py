"""Shortcuts of the one-key lookup path, each checked to be taken and to answer as the
general path does: a MemTable's scalar key code, the key table taken as given, the
latest-version hint parsed once per distinct content."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.naming import LATEST_HINT
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.memtable import MemTable
from lance_sql.memwal.wal import memtable_schema
from lance_sql.table.meta import versions
from lance_sql.table.meta.versions import latest_version, read_hint, write_hint

PK = {"lance-schema:unenforced-primary-key": "true"}


def _memtable(key: pa.DataType, keys: list) -> MemTable:
    schema = pa.schema([pa.field("id", key, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    table = MemTable(memtable_schema(LanceSchema.from_arrow(schema)), ["id"], generation=1)
    arrow = table.arrow_schema
    half = len(keys) // 2
    for part, tag in ((keys[:half], 0), (keys[half:], 1), (keys[: half // 2], 2)):
        rows = {"id": pa.array(part, key), "v": [tag] * len(part),
                "_tombstone": [False] * len(part)}
        table.insert(pa.table(rows, schema=arrow))
    return table


@pytest.mark.parametrize(("key", "fast"), [
    (pa.int64(), True), (pa.int32(), True), (pa.int8(), True), (pa.uint32(), True),
    (pa.uint64(), False), (pa.string(), False)])
def test_memtable_one_key_equals_lookup(key: pa.DataType, fast: bool) -> None:
    if pa.types.is_string(key):
        keys: list = [f"k{i}" for i in range(40)]
        probes: list = [*keys, "nope"]
    elif pa.types.is_uint64(key):
        keys = [*range(30), 2**63 + 5, 2**64 - 1]
        probes = [*keys, 2**63, 99]
    else:
        keys = list(range(-10 if pa.types.is_signed_integer(key) else 0, 40))
        probes = [*keys, 100, 127 if pa.types.is_int8(key) else 1000]
    table = _memtable(key, keys)
    for probe in probes:
        one = pa.table({"id": pa.array([probe], key)})
        assert (table._one_code(one) is not None) == fast  # the scalar code, or not
        expected = int(table.lookup(one)[0])
        found = table.lookup_one(one)
        if expected < 0:
            assert found is None
            continue
        assert found is not None
        address, row = found
        assert address == expected
        assert row.column("id").to_pylist() == [probe]
        assert row.column("v").to_pylist() == table.take(np.array([expected])).column(
            "v").to_pylist()


def test_memtable_one_key_of_another_type_is_cast(tmp_path: Path) -> None:
    table = _memtable(pa.int64(), list(range(20)))
    asked = pa.table({"id": pa.array([7], pa.int32())})
    assert table._one_code(asked) is None  # not the stored type: the general path
    found = table.lookup_one(asked)
    assert found is not None and found[0] == int(table.lookup(asked)[0])


def _table(tmp_path: Path) -> MemWal:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("v", pa.string())])
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"id": list(range(50)),
                                      "v": [f"b{i}" for i in range(50)]}, schema=schema), uri)
    return MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                             durable_write=False, max_wal_flush_interval_ms=3_600_000)


def test_typed_key_table_is_taken_as_given(tmp_path: Path) -> None:
    mw = _table(tmp_path)
    writer = mw.writer()
    try:
        writer.put(pa.table({"id": [7, 70], "v": ["m7", "m70"]}))
        view = mw.view()
        typed = pa.table({"id": pa.array([7], pa.int64())})
        assert view._lookup_keys(typed) is typed  # the shortcut
        for asked in (pa.table({"id": pa.array([7], pa.int32())}),  # cast, as before
                      pa.table({"id": pa.chunked_array([[], [7]], pa.int64())}),
                      pa.table({"v": ["x"], "id": pa.array([7], pa.int64())})):
            keys = view._lookup_keys(asked)
            assert keys is not asked
            assert keys.column_names == ["id"] and keys.column(0).type == pa.int64()
            for key in (7, 70, 8, 1000):
                asked_key = asked.set_column(asked.schema.get_field_index("id"), "id",
                                             pa.array([key], asked.schema.field("id").type))
                got = mw.get(asked_key)
                assert got.equals(mw.get({"id": [key]}))
                assert got.equals(view.lookup_plan(asked_key).to_table())
        with pytest.raises(lance_sql.errors.InvalidInputError):
            view._lookup_keys(pa.table({"id": pa.array([None], pa.int64())}))
    finally:
        for w in writer.writers:
            w.abort()


def test_hint_parsed_once_per_content(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2]}), str(tmp_path / "h.lance"))
    store = ds.store
    write_hint(store, 1)
    assert read_hint(store) == 1
    before = versions._hint_version.cache_info().hits
    assert read_hint(store) == 1
    assert versions._hint_version.cache_info().hits == before + 1  # the parse was kept
    lance_sql.dataset(ds.uri).delete("id = 1")  # a commit: version 2, hint rewritten
    assert read_hint(store) == 2
    assert latest_version(store).version == 2
    store.put(LATEST_HINT, b"not json")
    assert read_hint(store) is None
    assert latest_version(store).version == 2  # listed instead
    store.put(LATEST_HINT, b'{"version": 1}')
    assert read_hint(store) == 1
    assert latest_version(store).version == 2  # probed up from the hint
