"""``MemWal.get({key: [value]})`` builds the one-key table in the key's type itself
(``LsmView.one_key_table``: a Python int for an int64 key, a str for a string key) instead
of letting ``pa.table`` infer one; the answer is the one an Arrow key table gets, and
anything else (other types, values, names, shapes) takes ``pa.table`` as before, with the
same answers and errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}


def _table(tmp_path: Path, key: pa.DataType) -> tuple[MemWal, object]:
    ids = list(range(50))
    keys = [f"k{i}" for i in ids] if pa.types.is_string(key) else ids
    schema = pa.schema([pa.field("id", key, nullable=False, metadata=PK),
                        pa.field("v", pa.string())])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(keys, key),
                                           "v": [f"b{i}" for i in ids]}, schema=schema), uri)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    writer.put(pa.table({"id": pa.array(keys[:5], key), "v": ["m0", "m1", "m2", "m3", "m4"]},
                        schema=schema))  # some keys' newest rows in a MemTable
    writer.delete(pa.table({"id": pa.array(keys[5:6], key)}))
    return mw, writer


def _counted(monkeypatch) -> list[int]:
    """Counts the key tables ``one_key_table`` built (None answers not counted)."""
    from lance_sql.memwal.read.planner import LsmView
    real = LsmView.one_key_table
    built = [0]

    def counting(self, keys):
        out = real(self, keys)
        built[0] += out is not None
        return out

    monkeypatch.setattr(LsmView, "one_key_table", counting)
    return built


@pytest.mark.parametrize("key", [pa.int64(), pa.string()])
def test_one_key_dict_answers_as_an_arrow_key(tmp_path: Path, monkeypatch,
                                              key: pa.DataType) -> None:
    mw, writer = _table(tmp_path, key)
    built = _counted(monkeypatch)
    values = [f"k{i}" for i in (0, 5, 7, 99)] if pa.types.is_string(key) else [0, 5, 7, 99]
    for value in values:  # MemTable, deleted, base, unknown
        got = mw.get({"id": [value]})
        assert got.equals(mw.get(pa.table({"id": pa.array([value], key)})))
        assert got.schema.field("id").type == key
        assert mw.get({"id": [value]}, ["v"]).equals(
            mw.get(pa.table({"id": pa.array([value], key)}), ["v"]))
    assert built[0] == 2 * len(values)
    assert [mw.get({"id": [v]}).column("v").to_pylist() for v in values] == [
        ["m0"], [], ["b7"], []]
    writer.close(flush_memtable=False)


def test_other_keys_take_the_inferred_table(tmp_path: Path, monkeypatch) -> None:
    mw, writer = _table(tmp_path, pa.int64())
    built = _counted(monkeypatch)
    assert mw.get({"id": (7,)}).column("v").to_pylist() == ["b7"]  # a tuple
    assert mw.get({"id": [7, 8]}).column("v").to_pylist() == ["b7", "b8"]  # two keys
    assert mw.get({"id": pa.array([7])}).column("v").to_pylist() == ["b7"]
    for other in ([True], ["x"], ["7"]):  # another kind of value: refused, as in a put
        with pytest.raises(InvalidInputError, match="another kind of value"):
            mw.get({"id": other})
    with pytest.raises(InvalidInputError, match="lack the primary-key"):
        mw.get({"key": [7]})
    assert built[0] == 0
    writer.close(flush_memtable=False)


def test_int32_key_from_a_python_int(tmp_path: Path, monkeypatch) -> None:
    mw, writer = _table(tmp_path, pa.int32())
    built = _counted(monkeypatch)
    got = mw.get({"id": [7]})  # inferred as int64, cast to the key's int32 as before
    assert got.column("v").to_pylist() == ["b7"] and got.schema.field("id").type == pa.int32()
    assert built[0] == 0
    writer.close(flush_memtable=False)
