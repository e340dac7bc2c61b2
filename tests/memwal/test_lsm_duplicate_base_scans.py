"""LSM scans of a base table holding a key more than once (plain appends do not enforce
the key) keep each key once: the row a lookup returns, the last in the table's order,
unless a generation or MemTable holds a newer version. A model of random appends with
repeated keys, base deletions, compactions, a key index covering some fragments or none,
generations, tombstones and a MemTable: every way of scanning (Python, filtered, LIMIT,
count, SQL, split parts) against the lookups and a plain-Python expectation."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import duplicates
from lance_sql.memwal.read.split import FragmentRange, base_plan, plan_split, region_plan

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False, metadata=PK),
                    pa.field("s", pa.string())])
KEYS = 40  # keys drawn from 0..KEYS-1 (base) and 0..KEYS+9 (newer sources)


def _rows(keys: list[int], tags: list[str]) -> pa.Table:
    return pa.table({"a": pa.array(keys, pa.int64()), "s": tags}, schema=SCHEMA)


def _as_dict(table: pa.Table) -> dict[int, str]:
    keys = table["a"].to_pylist()
    assert len(keys) == len(set(keys)), f"a key scanned twice: {sorted(keys)}"
    return dict(zip(keys, table["s"].to_pylist(), strict=True))


def _base(uri: str, rng: np.random.Generator) -> list[tuple[int, str]]:
    """Random appends (keys repeat within and across them), deletions, maybe a BTREE
    index made part way (later fragments not covered) and a compaction; the model: the
    base's live rows in table order."""
    model: list[tuple[int, str]] = []
    appends = int(rng.integers(3, 6))
    index_after = int(rng.integers(0, appends + 1))  # == appends: no index
    for i in range(appends):
        keys = rng.integers(0, KEYS, int(rng.integers(1, 25))).tolist()
        tags = [f"b{i}_{j}" for j in range(len(keys))]
        lance_sql.write_dataset(_rows(keys, tags), uri, mode="create" if i == 0 else "append",
                                max_rows_per_file=int(rng.integers(3, 12)))
        model += zip(keys, tags, strict=True)
        if rng.random() < 0.4:  # delete some rows (one copy of a key, or every copy)
            gone = {t for _, t in model if rng.random() < 0.15}
            if gone:
                listed = ", ".join(f"'{t}'" for t in sorted(gone))
                lance_sql.dataset(uri).delete(f"s IN ({listed})")
                model = [(k, t) for k, t in model if t not in gone]
        if i == index_after:
            lance_sql.dataset(uri).create_scalar_index("a", "BTREE")
    if rng.random() < 0.4:  # old rows rewritten: new fragment ids, the same place
        lance_sql.dataset(uri).compact_files(target_rows_per_fragment=int(rng.integers(8, 40)))
    return model


def _newer(writer: object, rng: np.random.Generator, expected: dict[int, str]) -> None:
    """A flushed generation or two and an open MemTable: updates of base keys, new keys,
    tombstones (applied to ``expected`` in the same order)."""
    for g in range(int(rng.integers(1, 4))):
        keys = rng.integers(0, KEYS + 10, int(rng.integers(1, 8))).tolist()
        tags = [f"g{g}_{j}" for j in range(len(keys))]
        writer.put(_rows(keys, tags))  # type: ignore[attr-defined]
        expected.update(zip(keys, tags, strict=True))
        if rng.random() < 0.5:
            gone = rng.integers(0, KEYS + 10, int(rng.integers(1, 4))).tolist()
            writer.delete(pa.table({"a": pa.array(gone, pa.int64())}))  # type: ignore[attr-defined]
            for k in gone:
                expected.pop(k, None)
        if g or rng.random() < 0.7:
            writer.flush_memtable()  # type: ignore[attr-defined]


def _check_scans(mw: MemWal, expected: dict[int, str], rng: np.random.Generator) -> None:
    assert _as_dict(mw.scanner(["a", "s"]).to_table()) == expected
    everyone = pa.table({"a": pa.array(range(KEYS + 10), pa.int64())})
    assert _as_dict(mw.get(everyone, ["a", "s"])) == expected  # the lookups agree
    assert mw.scanner().count_rows() == len(expected)
    # a filter applies to each key's newest row only: an older copy that matches stays out
    for where, keep in (("s LIKE 'b%'", lambda t: t.startswith("b")),
                        ("s < 'b2'", lambda t: t < "b2"),
                        ("a >= 10 AND a < 30", None)):
        want = {k: t for k, t in expected.items()
                if (keep(t) if keep is not None else 10 <= k < 30)}
        assert _as_dict(mw.scanner(["a", "s"], where).to_table()) == want, where
    limit = int(rng.integers(1, len(expected) + 2)) if expected else 1
    limited = _as_dict(mw.scanner(["a", "s"], limit=limit).to_table())
    assert len(limited) == min(limit, len(expected))
    assert all(expected.get(k) == t for k, t in limited.items())


def _check_sql(root: Path, expected: dict[int, str]) -> None:
    session = lance_sql.connect(root)
    assert _as_dict(session.sql("SELECT a, s FROM t").to_arrow_table()) == expected
    count = session.sql("SELECT count(*) AS n FROM t").to_arrow_table()["n"].to_pylist()
    assert count == [len(expected)]
    got = session.sql("SELECT a, s FROM t WHERE s LIKE 'b%'").to_arrow_table()
    assert _as_dict(got) == {k: t for k, t in expected.items() if t.startswith("b")}
    for k in (0, 7, 21):  # a lookup through SQL names the row the scan keeps
        rows = session.sql(f"SELECT s FROM t WHERE a = {k}").to_arrow_table()["s"].to_pylist()
        assert rows == ([expected[k]] if k in expected else []), k


def _check_split(uri: str, expected: dict[int, str], pinned: bool) -> None:
    """Base parts of one fragment range each (a key's copies in different parts) and
    region parts: together each key once. ``pinned``: the base parts are handed the
    superseded rows found when the split was planned (as Spark's tasks are), else each
    finds them itself."""
    view = MemWal(lance_sql.dataset(uri)).view()  # writers closed: no MemTables
    split = plan_split(view)
    tables = []
    for f in view.base.manifest.fragments:
        ranges = [FragmentRange(f.id, 0, f.physical_rows)]
        given = split.superseded_in(ranges) if pinned else None
        tables.append(base_plan(view, ranges, split.masks, ["a", "s"],
                                superseded=given).to_table())
    for part in split.regions:
        node = region_plan(view, part, ["a", "s"])
        if node is not None:
            tables.append(node.to_table())
    assert _as_dict(pa.concat_tables(tables)) == expected


@pytest.mark.parametrize("seed", range(24))
def test_scans_keep_the_row_lookups_return(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    uri = str(tmp_path / "t.lance")
    model = _base(uri, rng)
    expected = dict(model)  # the last row of a key in table order
    spec = RegionSpec.bucket("a", 2) if seed % 2 else None
    mw = MemWal.initialize(lance_sql.dataset(uri), spec, durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    _check_scans(mw, dict(expected), rng)  # the base alone (no newer source)
    writer = mw.writer(region=None if spec is not None else uuid.uuid4())
    try:
        _newer(writer, rng, expected)
        _check_scans(mw, expected, rng)
    finally:
        writer.close()  # (its MemTable flushed: a generation the SQL and split reads see)
    _check_sql(tmp_path, expected)
    _check_split(uri, expected, pinned=seed % 3 != 0)


def test_the_duplicates_are_found_once_per_base_version(tmp_path: Path) -> None:
    """A base of unique keys: scans read its keys once (then the cached answer: nothing to
    leave out, no metric); an append of a key again makes a new version, whose scans leave
    the older copy out and say so in EXPLAIN ANALYZE."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(100)), [f"old{i}" for i in range(100)]), uri,
                            max_rows_per_file=30)
    mw = MemWal.initialize(lance_sql.dataset(uri), None)
    reads = duplicates.KEY_READS[0]
    for _ in range(3):
        scanner = mw.scanner(["a", "s"])
        assert scanner.to_table().num_rows == 100
    assert duplicates.KEY_READS[0] == reads + 1
    assert "base_rows_superseded" not in scanner.explain(analyze=True)
    lance_sql.write_dataset(_rows([42, 7], ["new42", "new7"]), uri, mode="append")
    mw = MemWal(lance_sql.dataset(uri))
    scanner = mw.scanner(["a", "s"])
    got = _as_dict(scanner.to_table())
    assert len(got) == 100 and got[42] == "new42" and got[7] == "new7" and got[8] == "old8"
    assert "base_rows_superseded=2" in scanner.explain(analyze=True)
    assert duplicates.KEY_READS[0] == reads + 2


@pytest.mark.parametrize("key_type", ["string", "composite"])
def test_hashed_keys_are_compared_as_keys(tmp_path: Path, key_type: str) -> None:
    """Keys coded by their hash (strings, composite keys): repeated ones found and the
    newest copy kept, distinct keys never merged."""
    fields = ([pa.field("k", pa.string(), nullable=False, metadata=PK)]
              if key_type == "string" else
              [pa.field("k", pa.int64(), nullable=False, metadata=PK),
               pa.field("j", pa.string(), nullable=False, metadata=PK)])
    schema = pa.schema([*fields, pa.field("s", pa.string())])

    def rows(ks: list[int], tag: str) -> pa.Table:
        key = {"k": [f"k{i}" for i in ks]} if key_type == "string" else \
            {"k": [i // 3 for i in ks], "j": [str(i % 3) for i in ks]}
        return pa.table({**key, "s": [f"{tag}{i}" for i in ks]}, schema=schema)

    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(rows(list(range(50)), "old"), uri, max_rows_per_file=20)
    lance_sql.write_dataset(rows([3, 30, 3], "new"), uri, mode="append")
    lance_sql.write_dataset(rows([31], "last"), uri, mode="append")
    mw = MemWal.initialize(lance_sql.dataset(uri), None)
    got = mw.scanner().to_table()
    assert got.num_rows == 50
    tags = sorted(got["s"].to_pylist())
    want = sorted([f"old{i}" for i in range(50) if i not in (3, 30, 31)]
                  + ["new3", "new30", "last31"])
    assert tags == want


def test_a_table_vouching_for_unique_keys_skips_the_check(tmp_path: Path) -> None:
    """With the table config key set, scans never read the keys to look for repeats (the
    owner's promise: a key appended twice then scans twice, lookups still take the newest);
    unset again, the check is back."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(20)), [f"old{i}" for i in range(20)]), uri)
    lance_sql.write_dataset(_rows([5], ["new5"]), uri, mode="append")
    ds = lance_sql.dataset(uri)
    ds.update_config({duplicates.UNIQUE_BASE_KEYS_CONFIG: "true"})
    mw = MemWal.initialize(lance_sql.dataset(uri), None)
    reads = duplicates.KEY_READS[0]
    scanned = mw.scanner(["a", "s"]).to_table()
    assert duplicates.KEY_READS[0] == reads
    assert sorted(scanned["s"].to_pylist()) == sorted([f"old{i}" for i in range(20)] + ["new5"])
    assert mw.get({"a": [5]})["s"].to_pylist() == ["new5"]
    lance_sql.dataset(uri).update_config({duplicates.UNIQUE_BASE_KEYS_CONFIG: None})
    got = _as_dict(MemWal(lance_sql.dataset(uri)).scanner(["a", "s"]).to_table())
    assert duplicates.KEY_READS[0] == reads + 1
    assert len(got) == 20 and got[5] == "new5"
