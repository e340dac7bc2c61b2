"""Float primary keys: a key is told apart by its IEEE bits, as the bloom filter hashes it
and as merge_insert matches it (pylance 14.0.2's and ours): every NaN of one bit pattern
is one key, another NaN payload is another key, and -0.0 is another key than 0.0. A
key's newest row is the same by one-key and many-key lookups, the LSM scan, SQL
``count(*)`` and in the merged base (NaN keys were never found by lookups, and each NaN
row read as a key of its own in scans, while the merge made them one). A NaN key is
routed to its region as the writer routes it (NaN is NaN, -0.0 is 0.0; routing by equal
values never found a NaN), and SQL's ``=`` on a float key is IEEE's, as on a plain
table (``-0.0 = 0.0``), where a lookup matches a key's bits."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal

PK = {"lance-schema:unenforced-primary-key": "true"}
_SCHEMA = pa.schema([pa.field("k", pa.float64(), nullable=False, metadata=PK),
                     pa.field("v", pa.int64())])
_NAN = float("nan")


def _pool(width: int) -> np.ndarray:
    """Keys whose SQL equality is not their identity, and a few plain ones."""
    bits = np.uint32 if width == 32 else np.uint64
    other_nan = (np.array([np.nan], f"f{width // 8}").view(bits) | bits(1)).view(
        f"f{width // 8}")[0]
    return np.array([0.0, -0.0, np.nan, other_nan, np.inf, -np.inf, 1.5, -2.25, 7.0],
                    f"f{width // 8}")


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)  # (a float32 widened keeps its NaN payload and sign)


def _table(keys: np.ndarray, values: list[int], t: pa.DataType) -> pa.Table:
    schema = pa.schema([pa.field("k", t, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    return pa.table({"k": pa.array(keys, t), "v": pa.array(values, pa.int64())},
                    schema=schema)


def _by_key(table: pa.Table) -> dict[bytes, int]:
    keys, values = table.column("k").to_pylist(), table.column("v").to_pylist()
    out = {_bits(k): v for k, v in zip(keys, values, strict=True)}
    assert len(out) == table.num_rows, "a key read twice"
    return out


def _check(uri: str, pool: np.ndarray, model: dict[bytes, int], t: pa.DataType) -> None:
    mw = MemWal(lance_sql.dataset(uri))
    assert _by_key(mw.scanner(["k", "v"]).to_table()) == model
    for key in pool:
        got = mw.get({"k": pa.array([key], t)}, ["k", "v"])
        want = model.get(_bits(float(key)))
        assert got.column("v").to_pylist() == ([] if want is None else [want]), key
    assert _by_key(mw.get(pa.table({"k": pa.array(pool, t)}), ["k", "v"])) == model
    session = lance_sql.connect()
    session.register("t", uri)
    count = session.sql("SELECT count(*) AS n FROM t").to_arrow_table()
    assert count.column("n").to_pylist() == [len(model)]


@pytest.mark.parametrize(("width", "indexed"), [(32, False), (64, False), (64, True)])
def test_float_keys_are_told_apart_by_their_bits(tmp_path: Path, width: int, indexed: bool
                                                 ) -> None:
    """``indexed``: the base's keys found by a BTREE index on the key (else scanned)."""
    t = pa.float32() if width == 32 else pa.float64()
    pool = _pool(width)
    rng = np.random.default_rng(width)
    uri = str(tmp_path / "t.lance")
    base = lance_sql.write_dataset(_table(pool[[0, 2, 4, 6]], [1, 2, 3, 4], t), uri)
    # plain appends do not enforce the key: the base holds NaN and 0.0 twice
    base = lance_sql.write_dataset(_table(pool[[2, 0]], [5, 6], t), uri, mode="append")
    model = {_bits(float(k)): v for k, v in zip(pool[[4, 6, 2, 0]], [3, 4, 5, 6],
                                                strict=True)}
    if indexed:
        base.create_scalar_index("k", "BTREE")
        base = lance_sql.dataset(uri)
    mw = MemWal.initialize(base, RegionSpec.bucket("k", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    value = 100
    try:
        for step in range(6):
            picks = rng.choice(pool.size, 5)
            keys = pool[picks]
            writer.put(_table(keys, list(range(value, value + 5)), t))
            for k in keys:  # (the last row of a key in one put wins)
                model[_bits(float(k))] = value
                value += 1
            gone = pool[rng.choice(pool.size, 1)]
            writer.delete(pa.table({"k": pa.array(gone, t)}))
            model.pop(_bits(float(gone[0])), None)
            if step % 2:
                writer.flush_memtable()
        _check(uri, pool, model, t)  # MemTables, generations and the base
    finally:
        writer.close()
    _check(uri, pool, model, t)  # generations and the base
    MemWal(lance_sql.dataset(uri)).merge()
    merged = lance_sql.dataset(uri).to_table()
    # (a key the base held twice is updated in both rows: merge_insert updates each match)
    rows = {(_bits(k), v) for k, v in zip(merged.column("k").to_pylist(),
                                          merged.column("v").to_pylist(), strict=True)}
    assert rows == set(model.items())
    _check(uri, pool, model, t)


def test_merge_insert_matches_float_keys_as_pylance_does(tmp_path: Path) -> None:
    """The rule is the one merge_insert keeps (the merger's writes): ours and pylance
    14.0.2's give the same table for NaN, another NaN payload, -0.0 and 0.0 keys."""
    lance = pytest.importorskip("lance")
    pool = _pool(64)
    t = pa.float64()
    base = _table(pool[[0, 2, 6]], [1, 2, 3], t)
    source = _table(pool[[1, 2, 3, 6]], [10, 20, 30, 40], t)
    got = []
    for name, write, opened in (("ours", lance_sql.write_dataset, lance_sql.dataset),
                                ("theirs", lance.write_dataset, lance.dataset)):
        uri = str(tmp_path / f"{name}.lance")
        write(base, uri)
        (opened(uri).merge_insert("k").when_matched_update_all()
         .when_not_matched_insert_all().execute(source))
        table = opened(uri).to_table()
        got.append(sorted((_bits(k), v) for k, v in zip(
            table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True)))
    assert got[0] == got[1]
    assert dict(got[0]) == {_bits(0.0): 1, _bits(-0.0): 10, _bits(float(pool[2])): 20,
                            _bits(float(pool[3])): 30, _bits(1.5): 40}


def test_float32_nans_differing_in_the_quiet_bit_are_two_keys(tmp_path: Path) -> None:
    """A one-key get compares the found key at its own width: a float32 signalling NaN
    widened to a double would become the quiet one the indexed base holds."""
    t = pa.float32()
    quiet, signalling = (pa.array(np.array([bits], np.uint32).view(np.float32), t)
                         for bits in (0x7FC00001, 0x7F800001))
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_table(quiet.to_numpy(), [1], t), uri).create_scalar_index(
        "k", "BTREE")
    MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("k", 1), durable_write=False,
                      max_wal_flush_interval_ms=3_600_000)
    mw = MemWal(lance_sql.dataset(uri))
    assert mw.get({"k": signalling}, ["k", "v"]).num_rows == 0
    assert mw.get(pa.table({"k": pa.concat_arrays([signalling, pa.array([5.0], t)])}),
                  ["k", "v"]).num_rows == 0
    assert mw.get({"k": quiet}, ["v"]).column("v").to_pylist() == [1]


@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize("newer", [-0.0, "another NaN"])
def test_a_newer_float_key_hides_only_its_own_base_row(tmp_path: Path, indexed: bool,
                                                       newer: object) -> None:
    """A MemTable's -0.0 (or NaN of another payload) hides no base row of 0.0 (or of
    the usual NaN) from a scan: with a BTREE index the index matches floats by value, so
    the rows newer keys hide are found without it."""
    t = pa.float64()
    other = -0.0 if newer == -0.0 else np.array([0x7FF8000000000001], np.uint64).view(
        np.float64)[0]
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_table(np.array([0.0, np.nan, 1.0]), [2, 3, 4], t), uri)
    if indexed:
        ds.create_scalar_index("k", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("k", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(_table(np.array([other]), [10], t))
        view = MemWal(lance_sql.dataset(uri))
        assert sorted(view.scanner(["k", "v"]).to_table().column("v").to_pylist()) == \
            [2, 3, 4, 10]
        assert view.scanner().count_rows() == 4
    finally:
        writer.close()


# NaN keys routed to their region, SQL's = on a float key


def _rows(keys: list[float], v: int | list[int]) -> pa.Table:
    values = v if isinstance(v, list) else [v] * len(keys)
    return pa.table({"k": keys, "v": values}, schema=_SCHEMA)


def _lsm(path: Path, rows: pa.Table, spec: RegionSpec) -> MemWal:
    ds = lance_sql.write_dataset(rows, str(path / "t.lance"))
    ds.create_scalar_index("k", "BTREE")
    return MemWal.initialize(lance_sql.dataset(ds.uri), spec, durable_write=False,
                             max_wal_flush_interval_ms=3_600_000)


def _values(table: pa.Table) -> list[int]:
    return sorted(table.column("v").to_pylist())


@pytest.mark.parametrize("spec", [RegionSpec.identity("k"), RegionSpec.bucket("k", 3)],
                         ids=["identity", "bucket"])
@pytest.mark.parametrize("flushed", [False, True])
def test_a_nan_key_reads_its_newest_row(tmp_path: Path, spec: RegionSpec,
                                        flushed: bool) -> None:
    mw = _lsm(tmp_path, _rows([0.0, _NAN, 1.0], [1, 2, 3]), spec)
    with mw.writer() as w:
        w.put(_rows([_NAN], 101))
        if flushed:
            w.flush_memtable()
        assert _values(mw.get(pa.table({"k": [_NAN]}))) == [101]
        assert _values(mw.get(pa.table({"k": [_NAN, 1.0]}))) == [3, 101]
        session = lance_sql.connect(str(tmp_path))
        for sql in ("SELECT v FROM t WHERE k = 'NaN'::double",
                    "SELECT v FROM t WHERE isnan(k)"):
            assert _values(session.sql(sql).to_arrow_table()) == [101], sql


@pytest.mark.parametrize("count", [12, 40])
def test_many_nan_and_other_float_keys_are_routed(tmp_path: Path, count: int) -> None:
    """Lookups of a few keys and of many (region values of floats are matched one by
    one: a join of them never matches a NaN)."""
    keys = [_NAN, *map(float, range(1, count))]
    mw = _lsm(tmp_path, _rows(keys, 0), RegionSpec.identity("k"))
    with mw.writer() as w:
        w.put(_rows(keys, 1))
        got = mw.get(pa.table({"k": keys}))
        assert got.num_rows == len(keys) and set(got.column("v").to_pylist()) == {1}
        assert any(math.isnan(k) for k in got.column("k").to_pylist())
        session = lance_sql.connect(str(tmp_path))
        listed = ", ".join(["'NaN'::double", *map(str, range(1, count))])
        rows = session.sql(f"SELECT v FROM t WHERE k IN ({listed})").to_arrow_table()
        assert rows.num_rows == len(keys) and set(rows.column("v").to_pylist()) == {1}


@pytest.mark.parametrize("where", ["k = 0", "k = -0.0", "k IN (0.0, 5.0)",
                                   "k = 0 AND v > 0", "k >= 0 AND k <= 0",
                                   "k = 'NaN'::double", "k IN (-0.0, 'NaN'::double)"])
def test_sql_compares_float_keys_as_on_a_plain_table(tmp_path: Path, where: str) -> None:
    rows = _rows([0.0, -0.0, 5.0, _NAN], [1, 2, 3, 4])
    lance_sql.write_dataset(rows, str(tmp_path / "plain.lance"))
    mw = _lsm(tmp_path, _rows([7.0], 0), RegionSpec.bucket("k", 2))
    with mw.writer() as w:
        w.put(rows)
        session = lance_sql.connect(str(tmp_path))
        expected = _values(session.sql(f"SELECT v FROM plain WHERE {where}").to_arrow_table())
        assert expected  # (the plain table's answer is the oracle: never empty here)
        got = _values(session.sql(f"SELECT v FROM t WHERE {where}").to_arrow_table())
        assert got == expected
