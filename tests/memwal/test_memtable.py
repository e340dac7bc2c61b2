"""The MemTable: fragments per put, row addresses, WAL mapping, key lookups, accounting."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from memwal_writer_helpers import SCHEMA

from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.bloom import PrimaryKeyBloom
from lance_sql.memwal.memtable import MemTable, primary_key_bytes
from lance_sql.memwal.wal import memtable_schema

MEMTABLE = memtable_schema(LanceSchema.from_arrow(SCHEMA))


def _rows(ids: list[int], v: float, dead: bool = False) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids), "s": [str(v)] * len(ids),
                     "_tombstone": [dead] * len(ids)}, schema=MEMTABLE.to_arrow())


def test_fragments_addresses_and_last_write_wins() -> None:
    m = MemTable(MEMTABLE, ["id"], generation=3)
    m.insert(_rows([1, 2, 3], 1.0))
    m.insert(_rows([2, 2], 2.0))          # a repeated key inside one put: the later row wins
    m.insert(_rows([3], 0.0, dead=True))  # a delete is a row too
    table = m.to_table()
    assert table.column("_rowaddr").to_pylist() == [0, 1, 2, 1 << 32, (1 << 32) + 1, 2 << 32]
    found = m.lookup(pa.table({"id": [2, 3, 1, 99]}))
    assert found.tolist() == [(1 << 32) + 1, 2 << 32, 0, -1]
    got = m.take(found[:3])
    assert got.column("v").to_pylist() == [2.0, 0.0, 1.0]
    assert got.column("_tombstone").to_pylist() == [False, True, False]
    assert (m.num_rows, m.num_fragments, m.generation) == (6, 3, 3)


def test_take_and_lookup_touch_only_the_fragments_asked_for() -> None:
    """Rows come back in the order asked whether they live in one fragment, a few or
    many (more than the per-fragment gather handles), and taking none returns none."""
    m = MemTable(MEMTABLE, ["id"], generation=1)
    for f in range(12):
        m.insert(_rows([10 * f + i for i in range(3)], float(f)))
    assert m.take(np.zeros(0, np.int64)).num_rows == 0
    for ids in ([21, 20], [112, 2, 51, 2], [110 - 10 * f + f % 3 for f in range(12)]):
        found = m.lookup(pa.table({"id": ids}))
        assert (found >= 0).all()
        got = m.take(found)
        assert got.column("id").to_pylist() == ids
        assert got.column("v").to_pylist() == [float(i // 10) for i in ids]
    assert m.lookup(pa.table({"id": [4, 999]})).tolist() == [-1, -1]


def test_lookup_after_more_writes_sees_them() -> None:
    m = MemTable(MEMTABLE, ["id"], generation=1)
    m.insert(_rows(list(range(1000)), 1.0))
    assert m.lookup(pa.table({"id": [500]})).tolist() == [500]
    m.insert(_rows([500], 2.0))
    assert m.lookup(pa.table({"id": [500]})).tolist() == [1 << 32]


def test_lookup_by_codes_equals_lookup() -> None:
    """An integer key's codes are the keys: the same addresses as :meth:`lookup`, for
    repeated, absent and overwritten keys; another key type is refused (None)."""
    m = MemTable(MEMTABLE, ["id"], generation=1)
    m.insert(_rows(list(range(0, 3000, 3)), 1.0))
    m.insert(_rows([3, 6, 2999, 42], 2.0))
    ids = [3, 3, 4, 6, 42, 2997, 2999, -5, 1 << 40, 0]
    want = m.lookup(pa.table({"id": ids}))
    got = m.lookup_codes(np.array(ids, np.int64), pa.int64())
    assert got is not None and got.tolist() == want.tolist()
    assert (want >= 0).sum() == 7 and want[0] == want[1] == 1 << 32
    assert m.lookup_codes(np.zeros(0, np.int64), pa.int64()).size == 0
    assert m.lookup_codes(np.array(ids, np.int64), pa.int32()) is None
    assert MemTable(MEMTABLE, ["id"], generation=2).lookup_codes(
        np.array(ids, np.int64), pa.int64()).tolist() == [-1] * len(ids)


def test_lookup_by_codes_takes_each_keys_latest_row() -> None:
    """Keys written many times, within one put and across many, some puts after the
    key index was sorted: each code finds its key's latest row (the highest address),
    as :meth:`lookup` does, and nothing for keys never written."""
    m = MemTable(MEMTABLE, ["id"], generation=4)
    rng = np.random.default_rng(8)
    for put in range(12):
        m.insert(_rows(rng.integers(0, 200, 150).tolist(), float(put)))
        if put == 5:
            m.lookup_codes(np.arange(3, dtype=np.int64), pa.int64())  # index sorted here
    ids = np.arange(-3, 205, dtype=np.int64)
    got = m.lookup_codes(ids, pa.int64())
    assert got is not None
    assert got.tolist() == m.lookup(pa.table({"id": ids})).tolist()
    latest = {}
    for address, key in zip(m.to_table().column("_rowaddr").to_pylist(),
                            m.to_table().column("id").to_pylist(), strict=True):
        latest[key] = max(latest.get(key, -1), address)
    assert got.tolist() == [latest.get(k, -1) for k in ids.tolist()]


def test_lookups_within_the_first_fragments_find_each_keys_latest_row_there() -> None:
    """``upto``: a read's snapshot of the first n fragments. Each lookup (by key table,
    by codes, one key) answers as a MemTable holding only those fragments would,
    whether or not the key index was sorted after more fragments were put."""
    m = MemTable(MEMTABLE, ["id"], generation=4)
    rng = np.random.default_rng(3)
    puts = [rng.integers(0, 60, 40).tolist() for _ in range(9)]
    for put, ids in enumerate(puts):
        m.insert(_rows(ids, float(put)))
    m.lookup_codes(np.arange(3, dtype=np.int64), pa.int64())  # the index of all nine
    ids = np.arange(-2, 63, dtype=np.int64)
    for upto in range(0, 10):
        alone = MemTable(MEMTABLE, ["id"], generation=4)
        for put, written in enumerate(puts[:upto]):
            alone.insert(_rows(written, float(put)))
        want = alone.lookup(pa.table({"id": ids})).tolist()
        assert m.lookup(pa.table({"id": ids}), upto).tolist() == want
        got = m.lookup_codes(ids, pa.int64(), upto)
        assert got is not None and got.tolist() == want
        for key, address in zip(ids.tolist(), want, strict=True):
            one = m.lookup_one(pa.table({"id": [key]}), upto)
            assert (one[0] if one is not None else -1) == address
            if one is not None:
                assert one[1].column("v").to_pylist() == \
                    alone.take(np.array([address])).column("v").to_pylist()


def test_composite_string_keys_confirm_hash_matches() -> None:
    schema = memtable_schema(LanceSchema.from_arrow(pa.schema([
        pa.field("a", pa.int32(), False, {"lance-schema:unenforced-primary-key:position": "2"}),
        pa.field("b", pa.string(), False, {"lance-schema:unenforced-primary-key:position": "1"}),
        pa.field("x", pa.int64())])))
    m = MemTable(schema, ["b", "a"], generation=1)
    m.insert(pa.table({"a": [1, 1, 2], "b": ["p", "q", "p"], "x": [10, 11, 12],
                       "_tombstone": [False] * 3}, schema=schema.to_arrow()))
    m.insert(pa.table({"a": [1], "b": ["q"], "x": [21], "_tombstone": [False]},
                      schema=schema.to_arrow()))
    found = m.lookup(pa.table({"b": ["q", "p", "p", "z"], "a": [1, 2, 1, 1]}))
    assert found.tolist() == [1 << 32, 2, 0, -1]


def test_wal_mapping_and_pending_accounting() -> None:
    m = MemTable(MEMTABLE, ["id"], generation=1)
    m.insert(_rows([1], 1.0), wal_entry=11)   # replayed: 1:1, position 0
    a = m.insert(_rows([2, 3], 1.0))
    b = m.insert(_rows([4], 1.0))
    assert [f.fragment_id for f in m.take_unflushed()] == [1, 2]
    assert m.unflushed_bytes == a.nbytes + b.nbytes
    m.mark_flushed([1, 2], 12)
    assert m.wal_mapping() == {0: (11, 0), 1: (12, 0), 2: (12, 1)}
    assert m.wal_entries() == [11, 12] and m.unflushed_bytes == 0 and not m.has_unflushed()
    m.seal()
    with pytest.raises(RuntimeError):
        m.insert(_rows([5], 1.0))


def test_bloom_filter_holds_every_key() -> None:
    m = MemTable(MEMTABLE, ["id"], generation=1)
    keys = np.arange(0, 5000, 7)
    m.insert(_rows(keys.tolist(), 1.0))
    assert m.bloom.might_contain([pa.array(keys)]).all()
    same = PrimaryKeyBloom()
    same.add([pa.array(keys)])
    assert m.bloom.to_bytes() == same.to_bytes()


def test_primary_key_bytes_as_the_reference_counts() -> None:
    # pylance 14.0.2: int64 keys 8 bytes each; strings their bytes + 4 each
    assert primary_key_bytes([pa.array(list(range(30)), pa.int64())]) == 240
    assert primary_key_bytes([pa.array(["", "ab", "ü"])]) == 0 + 2 + 2 + 12
    assert primary_key_bytes([pa.array([1, 2], pa.int32()), pa.array(["x", "yz"])]) == 8 + 11

