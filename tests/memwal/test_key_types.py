"""Primary-key types: decimal and fixed-size binary keys put, flush, read, look up and
merge like integer keys (they used to be acknowledged, then fail the writer's background
bloom refresh and every later read); types that cannot be hashed are refused up front."""

from __future__ import annotations

import decimal
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_bloom import siphash13

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.bloom import PrimaryKeyBloom, key_hashes

PK = {"lance-schema:unenforced-primary-key": "true"}
KINDS = {
    "decimal128": (pa.decimal128(12, 3), lambda i: decimal.Decimal(i) / 8),
    "decimal256": (pa.decimal256(40, 2), lambda i: decimal.Decimal(i) / 100),
    "fixed_size_binary": (pa.binary(4), lambda i: i.to_bytes(4, "little")),
}


def _rows(kind: str, ids: list[int], tag: int) -> pa.Table:
    typ, value = KINDS[kind]
    schema = pa.schema([pa.field("k", typ, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    return pa.table({"k": [value(i) for i in ids], "v": [i + tag for i in ids]}, schema=schema)


@pytest.mark.parametrize("kind", list(KINDS))
def test_keys_hash_as_their_fixed_width_bytes(kind: str) -> None:
    """The message is the null marker and the value's little-endian bytes, as for the
    other fixed-width keys (checked against the plain SipHash oracle)."""
    keys = _rows(kind, [0, 1, 2, 300], 0).column("k").combine_chunks().slice(1)
    width = keys.type.bit_width // 8
    raw = np.frombuffer(keys.buffers()[1], np.uint8).reshape(-1, width)[keys.offset:]
    assert key_hashes([keys]).tolist() == [siphash13(b"\x00" + row.tobytes()) for row in raw]
    bloom = PrimaryKeyBloom()
    bloom.add([keys])
    assert bloom.might_contain([keys]).all()


@pytest.mark.parametrize("kind", list(KINDS))
def test_writer_reads_and_merges_such_keys(tmp_path: Path, kind: str) -> None:
    base = _rows(kind, list(range(20)), 0)
    ds = lance_sql.write_dataset(base, str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(None)
    model = {r["k"]: r["v"] for r in base.to_pylist()}
    writer = mw.writer(region=uuid.uuid4(), durable_write=True)
    update = _rows(kind, list(range(10, 30)), 100)
    writer.put(update)
    model.update({r["k"]: r["v"] for r in update.to_pylist()})
    gone = _rows(kind, [1, 12], 0).select(["k"])
    writer.delete(gone)
    for k in gone.column("k").to_pylist():
        model.pop(k)
    writer.flush_memtable()
    last = _rows(kind, [3], 200)
    writer.put(last)  # in the MemTable
    model[last.column("k")[0].as_py()] = 203

    def scanned() -> dict:
        return {r["k"]: r["v"] for r in mw.scanner(["k", "v"]).to_table().to_pylist()}

    assert scanned() == model
    asked = _rows(kind, [0, 1, 3, 12, 25, 99], 0).select(["k"])
    got = {r["k"]: r["v"] for r in mw.get(asked, columns=["k", "v"]).to_pylist()}
    assert got == {k: model[k] for k in asked.column("k").to_pylist() if k in model}
    writer.close()
    mw.merge()
    assert scanned() == model
    assert {r["k"]: r["v"] for r in lance_sql.dataset(ds.uri).to_table().to_pylist()} == model


def _list_keyed(tmp_path: Path) -> lance_sql.LanceDataset:
    schema = pa.schema([pa.field("k", pa.list_(pa.int64()), nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    return lance_sql.write_dataset(pa.table({"k": [[1], [2, 3]], "v": [1, 2]}, schema=schema),
                                   str(tmp_path / "t.lance"))


def test_a_key_type_that_cannot_be_hashed_is_refused_up_front(tmp_path: Path) -> None:
    """A list key cannot go in a bloom filter: initialize_mem_wal refuses it and commits
    nothing (it used to succeed, and the first put was acknowledged before the writer's
    background thread failed)."""
    ds = _list_keyed(tmp_path)
    with pytest.raises(SchemaError, match="'k' has type list"):
        ds.initialize_mem_wal(None)
    assert lance_sql.dataset(ds.uri).version == ds.version
    assert lance_sql.dataset(ds.uri).mem_wal is None


def test_a_writer_refuses_such_a_key_before_claiming_a_region(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemWAL index set up by another tool: the writer refuses before it claims (no
    region directory, so no epoch raised and nothing to replay)."""
    ds = _list_keyed(tmp_path)
    monkeypatch.setattr(mem_wal_index, "check_key_types", lambda schema: None)
    mw = ds.initialize_mem_wal(None)
    monkeypatch.undo()
    with pytest.raises(SchemaError, match="cannot hash"):
        mw.writer(region=uuid.uuid4())
    assert mw.regions() == []
