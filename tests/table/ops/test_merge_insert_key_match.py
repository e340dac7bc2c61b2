"""merge_insert's per-fragment key lookup (table/ops/key_match.py) gives exactly what the
general join gives, and what pylance's merge_insert gives.

Tables span several fragments, one of them with its keys out of order and one with
deleted rows; sources mix updates, inserts, tombstones, NULL keys and keys of deleted
rows (which match nothing and are inserted)."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.table.ops import merge_insert as merge_insert_module
from lance_sql.table.ops.key_match import KeyMatcher

KINDS = {
    "int64": (pa.int64(), lambda n: n),
    "int32": (pa.int32(), lambda n: n),
    "uint64": (pa.uint64(), lambda n: n),
    "string": (pa.string(), lambda n: f"key-{n:05d}"),
    "large_string": (pa.large_string(), lambda n: f"k{n}"),
    "timestamp": (pa.timestamp("us"), lambda n: n * 1_000_003),
    "date": (pa.date32(), lambda n: n),
}


def _keys(kind: str, numbers: list[int | None]) -> pa.Array:
    arrow_type, make = KINDS[kind]
    return pa.array([None if n is None else make(n) for n in numbers], arrow_type)


def _table(kind: str, numbers: list[int | None], tag: str) -> pa.Table:
    return pa.table({"k": _keys(kind, numbers),
                     "v": pa.array([f"{tag}{n}" for n in numbers]),
                     "w": pa.array([float(i) for i in range(len(numbers))])})


def _base(path: Path, kind: str, *, null_target_key: bool) -> None:
    """Three fragments: keys 0..99 increasing, 100..199 shuffled, 200..299 increasing
    with every fifth row deleted (and a NULL key in the last one when asked)."""
    shuffled = list(np.random.default_rng(3).permutation(np.arange(100, 200)).tolist())
    last: list[int | None] = list(range(200, 300))
    if null_target_key:
        last[7] = None
    lance_sql.write_dataset(_table(kind, list(range(100)), "a"), path,
                            enable_stable_row_ids=True)
    lance_sql.write_dataset(_table(kind, shuffled, "b"), path, mode="append")
    lance_sql.write_dataset(_table(kind, last, "c"), path, mode="append")
    fifths = ", ".join(str(float(i)) for i in range(0, 100, 5))
    lance_sql.dataset(path).delete(f"v LIKE 'c%' AND w IN ({fifths})")
    assert lance_sql.dataset(path).count_rows() == 280


def _source(kind: str) -> tuple[pa.Table, list[bool]]:
    """Updates in every fragment, keys of deleted rows, new keys, a NULL key; the flags
    mark tombstones (an existing key, a deleted one and an unknown one)."""
    numbers: list[int | None] = [3, 50, 99, 120, 150, 199, 201, 205, 299, 300, 301, None,
                                 410, 77, 210, 500]
    tombstones = [False] * 12 + [False, True, True, True]
    return _table(kind, numbers, "new"), tombstones


def _run(path: Path, source: pa.Table, tombstones: list[bool] | None) -> dict[str, int]:
    builder = (lance_sql.dataset(path).merge_insert("k").when_matched_update_all()
               .when_not_matched_insert_all())
    if tombstones is not None:
        source = source.append_column("_tomb", pa.array(tombstones))
        builder = builder.when_matched_delete_if("_tomb")
    return builder.execute(source)


def _contents(path: Path, library=lance_sql, columns=("k", "v", "w")) -> list[dict]:
    """The rows, sorted; with ``_rowid`` a rewritten row must also keep its identity."""
    rows = library.dataset(str(path)).to_table(columns=list(columns)).to_pylist()
    return sorted(rows, key=lambda r: (r["k"] is None, str(r["k"]), r["v"]))


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KeyMatcher, "build", classmethod(lambda cls, keys: None))


def _no_join(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("the general join ran")

    monkeypatch.setattr(merge_insert_module, "_target_keys", refuse)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("null_target_key", [False, True])
def test_lookup_equals_the_general_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        kind: str, null_target_key: bool) -> None:
    _base(tmp_path / "fast", kind, null_target_key=null_target_key)
    shutil.copytree(tmp_path / "fast", tmp_path / "general")
    source, tombstones = _source(kind)
    with monkeypatch.context() as patch:
        _no_join(patch)
        fast = _run(tmp_path / "fast", source, tombstones)
    with monkeypatch.context() as patch:
        _general(patch)
        general = _run(tmp_path / "general", source, tombstones)
    assert fast == general
    assert fast == {"num_inserted_rows": 5, "num_updated_rows": 8, "num_deleted_rows": 1}
    columns = ("k", "v", "w", "_rowid", "_row_created_at_version")
    assert _contents(tmp_path / "fast", columns=columns) == _contents(tmp_path / "general",
                                                                     columns=columns)


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_lookup_equals_pylance_merge_insert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            kind: str) -> None:
    _base(tmp_path / "ours", kind, null_target_key=False)
    shutil.copytree(tmp_path / "ours", tmp_path / "theirs")
    source, _ = _source(kind)
    source = source.filter(pa.array([k is not None for k in source["k"].to_pylist()]))
    with monkeypatch.context() as patch:
        _no_join(patch)
        ours = _run(tmp_path / "ours", source, None)
    theirs = (lance.dataset(str(tmp_path / "theirs")).merge_insert("k")
              .when_matched_update_all().when_not_matched_insert_all().execute(source))
    assert {k: ours[k] for k in ("num_inserted_rows", "num_updated_rows")} == {
        k: theirs[k] for k in ("num_inserted_rows", "num_updated_rows")}
    columns = ("k", "v", "w", "_rowid", "_row_created_at_version",
               "_row_last_updated_at_version")
    assert _contents(tmp_path / "ours", columns=columns) == _contents(tmp_path / "theirs", lance,
                                                                      columns=columns)


def test_composite_keys_take_the_join_and_equal_pylance(tmp_path: Path) -> None:
    base = pa.table({"a": pa.array(np.arange(300) % 7, pa.int64()),
                     "b": pa.array([f"b{i}" for i in range(300)]),
                     "v": pa.array(np.arange(300, dtype=np.float64))})
    lance_sql.write_dataset(base, tmp_path / "ours", max_rows_per_file=120)
    lance_sql.dataset(tmp_path / "ours").delete("v < 10")
    shutil.copytree(tmp_path / "ours", tmp_path / "theirs")
    source = pa.table({"a": pa.array([0, 1, 4, 3, 6], pa.int64()),  # b15, b200 match
                       "b": ["b0", "b15", "b200", "b3", "nope"],
                       "v": pa.array([-1.0, -2.0, -3.0, -4.0, -5.0])})
    ours = (lance_sql.dataset(tmp_path / "ours").merge_insert(["a", "b"])
            .when_matched_update_all().when_not_matched_insert_all().execute(source))
    theirs = (lance.dataset(str(tmp_path / "theirs")).merge_insert(["a", "b"])
              .when_matched_update_all().when_not_matched_insert_all().execute(source))
    assert ours["num_updated_rows"] == theirs["num_updated_rows"] == 2
    assert ours["num_inserted_rows"] == theirs["num_inserted_rows"] == 3

    def rows(lib):
        return sorted(lib.dataset(str(tmp_path / ("ours" if lib is lance_sql else "theirs")))
                      .to_table().to_pylist(), key=lambda r: (r["a"], r["b"], r["v"]))

    assert rows(lance_sql) == rows(lance)


def test_repeated_source_keys_take_the_join(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated key is ambiguous when it matches (an error, as pylance's) and inserted
    twice when it does not; both need the general path."""
    lance_sql.write_dataset(_table("int64", list(range(10)), "a"), tmp_path / "t")
    with pytest.raises(InvalidInputError, match="ambiguous"):
        _run(tmp_path / "t", _table("int64", [1, 1, 20], "n"), None)
    assert _run(tmp_path / "t", _table("int64", [30, 30, 2], "n"), None) == {
        "num_inserted_rows": 2, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert KeyMatcher.build(pa.array([1, 1, 20])) is None
    assert KeyMatcher.build(pa.array(["x", None, "x"])) is None
    assert KeyMatcher.build(pa.array([1.5, 2.5])) is None  # floats: the join's equality


def test_an_insert_only_merge_ignores_repeated_matched_keys_as_pylance(tmp_path: Path) -> None:
    """``when_not_matched_insert_all()`` alone (insert if absent) leaves matched rows as
    they are, so source rows repeating a matched key are no ambiguity: pylance inserts
    the unmatched rows (a repeated new key twice) where lance_sql raised 'ambiguous'."""
    data = pa.table({"id": [1, 2], "v": ["a", "b"]})
    source = pa.table({"id": [3, 3, 2, 2], "v": ["x", "y", "p", "q"]})
    counts = []
    for lib in (lance_sql, lance):
        path = str(tmp_path / lib.__name__)
        lib.write_dataset(data, path)
        counts.append(lib.dataset(path).merge_insert("id").when_not_matched_insert_all()
                      .execute(source))
    assert counts[0] == counts[1] == {"num_inserted_rows": 2, "num_updated_rows": 0,
                                      "num_deleted_rows": 0}
    ours, theirs = (lance.dataset(str(tmp_path / n)).to_table().sort_by([("id", "ascending"),
                    ("v", "ascending")]) for n in ("lance_sql", "lance"))
    assert ours.equals(theirs)
    assert ours.to_pydict() == {"id": [1, 2, 3, 3], "v": ["a", "b", "x", "y"]}
    with pytest.raises(InvalidInputError, match="ambiguous"):  # an upsert still refuses
        lance_sql.dataset(str(tmp_path / "lance_sql")).merge_insert("id") \
            .when_matched_update_all().execute(source)
    for lib, error in ((lance_sql, InvalidInputError), (lance, OSError)):
        with pytest.raises(error, match="(?i)ambiguous"):  # so does a matched delete
            lib.dataset(str(tmp_path / lib.__name__)).merge_insert("id") \
                .when_matched_delete().execute(source)


def test_matcher_sorted_and_unsorted_fragments_agree() -> None:
    rng = np.random.default_rng(11)
    source = rng.choice(1_000_000, 5000, replace=False).astype(np.int64)
    matcher = KeyMatcher.build(pa.array(source))
    assert matcher is not None
    fragment = np.arange(200_000, 400_000, dtype=np.int64)
    shuffled = rng.permutation(fragment)
    positions, rows = matcher.match(pa.array(fragment))
    expect = np.flatnonzero(np.isin(fragment, source))
    assert np.array_equal(positions, expect)
    assert np.array_equal(source[rows], fragment[positions])
    positions, rows = matcher.match(pa.array(shuffled))
    assert np.array_equal(positions, np.flatnonzero(np.isin(shuffled, source)))
    assert np.array_equal(source[rows], shuffled[positions])
    with_nulls = pa.array([int(source[0]), None, 0, int(source[1])], pa.int64())
    positions, rows = matcher.match(with_nulls)
    assert positions.tolist() == [0, 3] and rows.tolist() == [0, 1]
    hashed = KeyMatcher.build(pa.array(["b", None, "a"]))
    assert hashed is not None
    positions, rows = hashed.match(pa.array(["a", None, "c", "b", "a"]))
    assert positions.tolist() == [0, 3, 4] and rows.tolist() == [2, 0, 2]


@pytest.mark.parametrize("spread", [1, 1 << 20])  # a flag table, or a binary search
def test_matcher_dense_and_wide_key_spans_agree(spread: int) -> None:
    rng = np.random.default_rng(5)
    source = rng.choice(200_000, 3000, replace=False).astype(np.int64) * spread - 7
    matcher = KeyMatcher.build(pa.array(source))
    assert matcher is not None and (matcher.shift > 0) == (spread > 1)
    target = rng.permutation(np.arange(-50, 200_000, dtype=np.int64) * spread)
    target -= rng.integers(6, 9, len(target))  # neighbours of keys share their buckets
    target[::3] = source[rng.integers(0, len(source), len(target[::3]))]
    nulls = rng.random(len(target)) < 0.01
    positions, rows = matcher.match(pa.array(target, mask=nulls))
    expect = np.flatnonzero(np.isin(target, source) & ~nulls)
    assert np.array_equal(positions, expect)
    assert np.array_equal(source[rows], target[positions])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int8, np.int32])
def test_matcher_at_the_ends_of_integer_types(dtype: type) -> None:
    info = np.iinfo(dtype)
    source = np.array([info.min, info.min + 1, 0, info.max - 1, info.max], dtype=dtype)
    source = np.unique(source)
    matcher = KeyMatcher.build(pa.array(source[::-1]))
    assert matcher is not None
    target = np.array([info.max, 3, info.min, info.max - 2, 0, info.min + 1, 1], dtype=dtype)
    for values in (target, np.sort(target)):
        positions, rows = matcher.match(pa.array(values))
        assert np.array_equal(positions, np.flatnonzero(np.isin(values, source)))
        assert np.array_equal(source[::-1][rows], values[positions])


def test_a_key_named_twice_merges_as_pylance_merges(tmp_path: Path) -> None:
    # (the repeated name reached the join, which raised a KeyError; pylance merges)
    target = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    source = pa.table({"k": pa.array([2, 4], pa.int64()), "v": ["B", "D"]})
    results = []
    for lib, name in ((lance_sql, "o"), (lance, "p")):
        ds = lib.write_dataset(target, str(tmp_path / name))
        stats = (ds.merge_insert(["k", "k"]).when_matched_update_all()
                 .when_not_matched_insert_all().execute(source))
        results.append((stats, lib.dataset(ds.uri).to_table().sort_by("k").to_pylist()))
    assert results[0] == results[1]
    assert results[0][1] == [{"k": 1, "v": "a"}, {"k": 2, "v": "B"}, {"k": 3, "v": "c"},
                             {"k": 4, "v": "D"}]
