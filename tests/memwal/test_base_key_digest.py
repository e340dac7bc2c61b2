"""The duplicate-key check of a base version settled from an earlier unique version's
digest and the new version's new fragments alone (merges, appends, deletes), and the
full check wherever that cannot settle it: each answer equal to a full read's."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import duplicates
from lance_sql.memwal.read.duplicates import add_unique_run
from lance_sql.table.runtime.cache import BASE_KEY_DIGESTS
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False, metadata=PK),
                    pa.field("s", pa.string())])


def _rows(keys: list[int], tag: str) -> pa.Table:
    return pa.table({"a": pa.array(keys, pa.int64()), "s": [f"{tag}{k}" for k in keys]},
                    schema=SCHEMA)


def _addr(fragment: int, offset: int) -> int:
    return (fragment << 32) | offset


# ---------------------------------------------------------------- add_unique_run, alone
def _run(codes: list[int], addresses: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(codes, np.int64), np.array(addresses, np.uint64)


def _all_live(hits: np.ndarray) -> np.ndarray:
    return np.ones(hits.size, bool)


def test_new_codes_become_a_sorted_run_merged_when_it_is_not_much_smaller() -> None:
    runs = (_run(list(range(0, 400, 2)), list(range(200))),)
    small = add_unique_run(runs, *_run([7, 1], [1001, 1000]), _all_live)
    assert small is not None and len(small) == 2  # 2 rows next to 200: a run of its own
    assert small[1][0].tolist() == [1, 7] and small[1][1].tolist() == [1000, 1001]
    big = add_unique_run(small, *_run(list(range(201, 320, 2)), list(range(2000, 2060))),
                         _all_live)
    assert big is not None and len(big) == 1  # 60 rows: merged with the 2, then the 200
    codes, addresses = big[0]
    assert codes.tolist() == sorted([*range(0, 400, 2), 1, 7, *range(201, 320, 2)])
    assert dict(zip(codes.tolist(), addresses.tolist(), strict=True))[7] == 1001
    assert dict(zip(codes.tolist(), addresses.tolist(), strict=True))[209] == 2004


def test_new_codes_that_repeat_each_other_are_not_settled() -> None:
    assert add_unique_run((_run([1], [1]),), *_run([4, 4], [2, 3]),
                          lambda hits: np.zeros(hits.size, bool)) is None


def test_a_hit_on_a_live_row_is_not_settled_and_on_a_deleted_one_is() -> None:
    # code 3 twice: a row deleted since, then the row that replaced it (another run)
    runs = (_run([3, 8], [_addr(0, 1), _addr(0, 2)]), _run([3], [_addr(1, 0)]))
    asked: list[list[int]] = []

    def live(deleted: set[int]):
        def check(hits: np.ndarray) -> np.ndarray:
            asked.append(sorted(hits.tolist()))
            return np.array([h not in deleted for h in hits.tolist()])
        return check

    new = _run([3], [_addr(2, 0)])
    assert add_unique_run(runs, *new, live({_addr(0, 1)})) is None
    assert asked[-1] == [_addr(0, 1), _addr(1, 0)]  # every row holding the code is asked
    merged = add_unique_run(runs, *new, live({_addr(0, 1), _addr(1, 0)}))
    assert merged is not None
    codes = np.concatenate([c for c, _ in merged])
    addresses = np.concatenate([a for _, a in merged])
    assert sorted(codes.tolist()) == [3, 3, 3, 8]
    assert sorted(addresses[codes == 3].tolist()) == sorted(
        [_addr(0, 1), _addr(1, 0), _addr(2, 0)])


# ---------------------------------------------------------------- against full reads
def _check(uri: str) -> dict[int, list[int]]:
    """The cached check of the table's latest version, equal to a full read's answer."""
    ds = lance_sql.dataset(uri)
    got = duplicates.superseded_at(ds, ("a",))
    full, _ = duplicates.full_read_superseded(ds, ("a",))
    as_lists = {f: r.tolist() for f, r in got.items()}
    assert as_lists == {f: r.tolist() for f, r in full.items()}, ds.version
    return as_lists


@pytest.mark.parametrize("seed", range(6))
def test_every_version_checked_from_the_digest_equals_a_full_read(tmp_path: Path,
                                                                 seed: int) -> None:
    """Random merges (upserts), appends of new keys and of keys held already, deletes,
    compactions, config changes and restores; after each, the cached check (from the
    digest where it can) equals a full read, and the digest did settle most of them."""
    rng = np.random.default_rng(seed)
    uri = str(tmp_path / "t.lance")
    current_runtime().cache.clear(BASE_KEY_DIGESTS.name)
    lance_sql.write_dataset(_rows(list(range(0, 200, 2)), "b"), uri, max_rows_per_file=30)
    _check(uri)
    settled, next_key = duplicates.DIGEST_CHECKS[0], 1000
    for step in range(14):
        ds = lance_sql.dataset(uri)
        kind = rng.choice(["merge", "merge", "append", "again", "delete", "compact",
                           "config", "restore"])
        if kind == "merge":
            keys = sorted(set(rng.integers(0, 300, 25).tolist()))
            ds.merge_insert("a").when_matched_update_all() \
                .when_not_matched_insert_all().execute(_rows(keys, f"m{step}_"))
        elif kind == "append":
            lance_sql.write_dataset(_rows(list(range(next_key, next_key + 7)), "n"), uri,
                                    mode="append")
            next_key += 7
        elif kind == "again":  # a key the table may hold already: plain appends allow it
            lance_sql.write_dataset(_rows(rng.integers(0, 300, 2).tolist(), f"x{step}_"),
                                    uri, mode="append")
        elif kind == "delete":
            low = int(rng.integers(0, 280))
            ds.delete(f"a >= {low} AND a < {low + 15}")
        elif kind == "compact":
            ds.compact_files(target_rows_per_fragment=64)
        elif kind == "config":
            ds.update_config({"step": str(step)})
        elif ds.version > 2:
            ds.restore(int(rng.integers(1, ds.version)))
        _check(uri)
    assert duplicates.DIGEST_CHECKS[0] > settled


def test_an_lsm_scan_after_a_merge_reads_only_the_new_fragments_keys(tmp_path: Path) -> None:
    """A merge's new version: the scan's check reads no whole key column (no full key
    read), and the view is still each key once with its newest value."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(100)), "b"), uri, max_rows_per_file=40)
    mw = MemWal.initialize(lance_sql.dataset(uri), None)
    assert mw.scanner(["a"]).to_table().num_rows == 100
    reads, settled = duplicates.KEY_READS[0], duplicates.DIGEST_CHECKS[0]
    lance_sql.dataset(uri).merge_insert("a").when_matched_update_all() \
        .when_not_matched_insert_all().execute(_rows([5, 50, 150], "m"))
    got = MemWal(lance_sql.dataset(uri)).scanner(["a", "s"]).to_table()
    values = dict(zip(got["a"].to_pylist(), got["s"].to_pylist(), strict=True))
    assert got.num_rows == 101 and values[5] == "m5" and values[150] == "m150"
    assert values[6] == "b6"
    assert (duplicates.KEY_READS[0], duplicates.DIGEST_CHECKS[0]) == (reads, settled + 1)
    # then a plain append of a key held already: found (a full read), older copy left out
    lance_sql.write_dataset(_rows([7], "again"), uri, mode="append")
    got = MemWal(lance_sql.dataset(uri)).scanner(["a", "s"]).to_table()
    values = dict(zip(got["a"].to_pylist(), got["s"].to_pylist(), strict=True))
    assert got.num_rows == 101 and values[7] == "again7"
    assert duplicates.KEY_READS[0] == reads + 1


def test_a_restore_that_brings_a_deleted_copy_back_is_found(tmp_path: Path) -> None:
    """Deleting the older copy of a repeated key makes the keys unique (settled from the
    digest); restoring the version before the delete brings the copy back: the digest
    cannot follow a deletion undone, and the full read finds the repeat again."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10)), "b"), uri)
    assert _check(uri) == {}
    lance_sql.write_dataset(_rows([5], "again"), uri, mode="append")
    assert _check(uri) == {0: [5]}
    before_delete = lance_sql.dataset(uri).version
    lance_sql.dataset(uri).delete("s = 'b5'")
    assert _check(uri) == {}
    lance_sql.dataset(uri).restore(before_delete)
    assert _check(uri) == {0: [5]}


def test_a_scan_after_cleanup_removed_the_digests_deletion_file(tmp_path: Path) -> None:
    """The digest's version had a deletion file that a cleanup of old versions removed
    since (and no cache holds it): the check falls back to a full read, no error."""
    uri = str(tmp_path / "t.lance")
    cache = current_runtime().cache
    cache.configure(deletions=1)  # deletion vectors are never kept
    try:
        lance_sql.write_dataset(_rows(list(range(100)), "b"), uri)
        MemWal.initialize(lance_sql.dataset(uri), None)
        lance_sql.dataset(uri).delete("a = 3")
        assert MemWal(lance_sql.dataset(uri)).scanner(["a"]).to_table().num_rows == 99
        for i in range(3):
            lance_sql.dataset(uri).merge_insert("a").when_matched_update_all() \
                .when_not_matched_insert_all().execute(_rows([10 + i, 1000 + i], "m"))
        lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
        reads = duplicates.KEY_READS[0]
        got = MemWal(lance_sql.dataset(uri)).scanner(["a", "s"]).to_table()
        assert got.num_rows == 102 and len(set(got["a"].to_pylist())) == 102
        assert duplicates.KEY_READS[0] == reads + 1
    finally:
        cache.configure(deletions=256 << 20)


def test_a_compaction_is_read_in_full_and_its_digest_holds_the_live_rows(
        tmp_path: Path) -> None:
    """After merges and a compaction (most rows new), the check reads the keys in full
    rather than looking every one up, and the new digest holds one entry a live row."""
    uri = str(tmp_path / "t.lance")
    current_runtime().cache.clear(BASE_KEY_DIGESTS.name)
    lance_sql.write_dataset(_rows(list(range(2000)), "b"), uri, max_rows_per_file=500)
    assert _check(uri) == {}
    for i in range(3):
        lance_sql.dataset(uri).merge_insert("a").when_matched_update_all() \
            .when_not_matched_insert_all().execute(_rows(list(range(i, 2000, 40)), f"m{i}"))
    settled = duplicates.DIGEST_CHECKS[0]
    assert _check(uri) == {}
    assert duplicates.DIGEST_CHECKS[0] == settled + 1
    lance_sql.dataset(uri).compact_files(target_rows_per_fragment=4000)
    reads = duplicates.KEY_READS[0]
    assert _check(uri) == {}
    assert duplicates.KEY_READS[0] == reads + 2  # (the check's full read, and _check's own)
    digest = current_runtime().cache.peek(BASE_KEY_DIGESTS, (uri, ("a",)))
    assert sum(c.size for c, _ in digest.runs) == 2000


def test_keys_read_out_of_order_get_a_digest_from_the_second_version_on(
        tmp_path: Path) -> None:
    """Ordering codes read out of order with their addresses costs several sorts: the
    first full read of a table in a process keeps no digest; a later version's does
    (versions keep coming), and the next one is settled from it."""
    uri = str(tmp_path / "t.lance")
    current_runtime().cache.clear(BASE_KEY_DIGESTS.name)
    keys = np.random.default_rng(5).permutation(3000).tolist()
    lance_sql.write_dataset(_rows(keys, "b"), uri, max_rows_per_file=1000)
    assert _check(uri) == {}
    slot = (uri, ("a",))
    assert not isinstance(current_runtime().cache.peek(BASE_KEY_DIGESTS, slot),
                          duplicates.KeyDigest)
    lance_sql.write_dataset(_rows([5000, 5001], "n"), uri, mode="append")
    assert _check(uri) == {}
    assert isinstance(current_runtime().cache.peek(BASE_KEY_DIGESTS, slot),
                      duplicates.KeyDigest)
    settled = duplicates.DIGEST_CHECKS[0]
    lance_sql.write_dataset(_rows([5002], "n"), uri, mode="append")
    assert _check(uri) == {}
    assert duplicates.DIGEST_CHECKS[0] == settled + 1
