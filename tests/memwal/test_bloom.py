"""The primary-key bloom filter: never a false "no", and pylance's exact bytes."""

from __future__ import annotations

import glob
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.memwal.bloom import (
    BLOOM_BYTES,
    PrimaryKeyBloom,
    _fixed_width_hashes,
    _key_hashes_of_bytes,
    key_hashes,
)

_M = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M


def siphash13(data: bytes) -> int:
    """A plain, one-message-at-a-time SipHash-1-3 (key 0): the oracle for the vectorised one."""
    v = [0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573]

    def rnd() -> None:
        v[0] = (v[0] + v[1]) & _M; v[1] = _rotl(v[1], 13) ^ v[0]; v[0] = _rotl(v[0], 32)  # noqa: E702
        v[2] = (v[2] + v[3]) & _M; v[3] = _rotl(v[3], 16) ^ v[2]  # noqa: E702
        v[0] = (v[0] + v[3]) & _M; v[3] = _rotl(v[3], 21) ^ v[0]  # noqa: E702
        v[2] = (v[2] + v[1]) & _M; v[1] = _rotl(v[1], 17) ^ v[2]; v[2] = _rotl(v[2], 32)  # noqa: E702

    full = len(data) // 8 * 8
    for i in range(0, full, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v[3] ^= m
        rnd()
        v[0] ^= m
    b = ((len(data) & 0xFF) << 56) | int.from_bytes(data[full:], "little")
    v[3] ^= b
    rnd()
    v[0] ^= b
    v[2] ^= 0xFF
    for _ in range(3):
        rnd()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=30)), min_size=1, max_size=40),
       st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=40,
                max_size=40))
def test_hashes_match_the_scalar_oracle(strings: list, ints: list) -> None:
    ints = ints[:len(strings)]
    got = key_hashes([pa.array(strings, pa.string()), pa.array(ints, pa.int64())])
    for s, i, h in zip(strings, ints, got.tolist(), strict=True):
        message = (b"\x01" if s is None else b"\x00" + s.encode() + b"\xff") + (
            b"\x01" if i is None else b"\x00" + struct.pack("<q", i))
        assert h == siphash13(message)


_FIXED = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
          pa.uint64(), pa.float32(), pa.float64(), pa.date32(), pa.date64(), pa.time32("s"),
          pa.timestamp("us"), pa.timestamp("ns", "UTC"), pa.duration("ms"), pa.bool_()]


@pytest.mark.parametrize("kind", _FIXED, ids=str)
def test_one_fixed_width_key_hashes_as_its_bytes(kind: pa.DataType) -> None:
    """The straight-from-values hash of one fixed-width key equals hashing its bytes
    (the layout checked against the oracle and pylance), nulls and slices included."""
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 2**63, 3000, dtype=np.int64) * rng.choice([-1, 1], 3000)
    width = max(kind.bit_width // 8, 1)
    if pa.types.is_boolean(kind):
        values = pa.array(raw % 2 == 0)
    else:
        values = pa.Array.from_buffers(kind, len(raw), [None, pa.py_buffer(
            np.ascontiguousarray(raw.view(np.uint8).reshape(-1, 8)[:, :width]).tobytes())])
    nulls = pa.array(rng.random(len(raw)) < 0.1)
    column = pc.if_else(nulls, pa.scalar(None, kind), values).slice(7)
    fast = _fixed_width_hashes(column)
    assert fast is not None
    assert np.array_equal(fast, _key_hashes_of_bytes([column]))
    assert np.array_equal(key_hashes([column]), fast)


@pytest.mark.parametrize(("kind", "fmt"), [(pa.int64(), "<q"), (pa.int32(), "<i"),
                                           (pa.uint16(), "<H"), (pa.float64(), "<d")])
def test_one_fixed_width_key_matches_the_scalar_oracle(kind: pa.DataType, fmt: str) -> None:
    values = [0, 1, None, 255, 256, 65535, 7] + ([] if fmt == "<H" else [-1, -(2**31)])
    got = key_hashes([pa.array(values, kind)])
    for v, h in zip(values, got.tolist(), strict=True):
        assert h == siphash13(b"\x01" if v is None else b"\x00" + struct.pack(fmt, v))


def test_never_a_false_no_and_few_false_yes() -> None:
    bloom = PrimaryKeyBloom()
    present = pa.array(np.arange(0, 20_000, 2, dtype=np.int64))
    bloom.add([present])
    assert bloom.might_contain([present]).all()
    absent = pa.array(np.arange(1, 20_000, 2, dtype=np.int64))
    assert bloom.might_contain([absent]).mean() < 0.05
    back = PrimaryKeyBloom.from_bytes(bloom.to_bytes(), "b")
    assert back.might_contain([present]).all()
    assert len(bloom.to_bytes()) == BLOOM_BYTES


def test_slices_and_widths_hash_as_their_values() -> None:
    arr = pa.array([5, 6, 7, None], pa.int32())
    assert (key_hashes([arr.slice(1)]) == key_hashes([arr])[1:]).all()
    words = pa.array(["a", "bc", None, ""])
    assert (key_hashes([words.slice(2)]) == key_hashes([words])[2:]).all()


def test_bad_bytes_and_types() -> None:
    with pytest.raises(FormatError, match="32768 bytes"):
        PrimaryKeyBloom.from_bytes(b"\0" * 100, "gen/bloom_filter.bin")
    with pytest.raises(InvalidInputError):
        key_hashes([pa.array([[1]])])


# --------------------------------------------------------------- the reference's bytes
def _pylance_generation(root: Path, schema: pa.Schema, batches: list[pa.Table]) -> Path:
    lance = pytest.importorskip("lance")
    lance.write_dataset(batches[0].slice(0, 0), root, schema=schema)
    lance.dataset(root).initialize_mem_wal(durable_write=True, max_memtable_rows=10_000)
    region = "11111111-2222-4333-8444-555555555555"
    writer = lance.dataset(root).mem_wal_writer(region, durable_write=True)
    for batch in batches:
        writer.put(batch)
    writer.close()  # flushes the MemTable
    (gen,) = glob.glob(str(root / "_mem_wal" / region / "*_gen_1"))
    return Path(gen)


def _pk(name: str, t: pa.DataType, position: int | None = None) -> pa.Field:
    meta = {"lance-schema:unenforced-primary-key": "true"}
    if position is not None:
        meta["lance-schema:unenforced-primary-key:position"] = str(position)
    return pa.field(name, t, nullable=False, metadata=meta)


@pytest.mark.parametrize("kind", ["int64", "string", "composite"])
def test_same_bytes_as_pylance(tmp_path: Path, kind: str) -> None:
    lance = pytest.importorskip("lance")
    if kind == "int64":
        schema = pa.schema([_pk("id", pa.int64()), pa.field("v", pa.string())])
        batch = pa.table({"id": [-(2**40), 0, 7, 2**62, 99], "v": list("abcde")},
                         schema=schema)
        key_columns = ["id"]
    elif kind == "string":
        schema = pa.schema([_pk("k", pa.string()), pa.field("v", pa.int32())])
        batch = pa.table({"k": ["", "a", "héllo", "x" * 40, "0123456"], "v": range(5)},
                         schema=schema)
        key_columns = ["k"]
    else:
        schema = pa.schema([_pk("a", pa.int32(), 2), _pk("b", pa.string(), 1),
                            pa.field("v", pa.float64())])
        batch = pa.table({"a": [1, 2, 3, -4], "b": ["x", "y", "", "zz"],
                          "v": [0.5] * 4}, schema=schema)
        key_columns = ["b", "a"]  # key position order
    gen = _pylance_generation(tmp_path / "t.lance", schema, [batch])
    rows = lance.dataset(str(gen)).to_table()
    ours = PrimaryKeyBloom()
    ours.add([rows.column(c).combine_chunks() for c in key_columns])
    assert ours.to_bytes() == (gen / "bloom_filter.bin").read_bytes()
