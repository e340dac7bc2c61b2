"""Stable row ids without pylance: stamping a commit's fragments, the row-id index,
external sequences, damaged sequences and the errors around the feature."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, InvalidInputError, UnsupportedFeatureError
from lance_sql.format.fragment import ExternalFile, Fragment
from lance_sql.format.row_ids import (
    decode_row_ids,
    decode_versions,
    encode_row_ids,
    encode_versions,
)
from lance_sql.table.files.lineage import (
    INLINE_LIMIT,
    PENDING_VERSION,
    externalize,
    load_lineage,
    stamp_fragments,
    with_lineage,
)
from lance_sql.table.files.row_id_index import MISSING, RowIdIndex, row_id_index

SYSTEM = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
P = PENDING_VERSION


def _u64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.uint64)


def _frag(fid: int, n: int, **seqs) -> Fragment:
    return Fragment(fid, (), n, **seqs)


def _lineage_of(frag: Fragment) -> tuple[list[int], list[int], list[int]]:
    n = frag.physical_rows
    return (decode_row_ids(frag.row_id_sequence).tolist(),
            decode_versions(frag.created_at_version_sequence, n).tolist(),
            decode_versions(frag.last_updated_at_version_sequence, n).tolist())


def _stable_table(path, n: int = 30, per_file: int = 10):
    data = pa.table({"id": pa.array(range(n), pa.int64()), "v": [f"s{i}" for i in range(n)]})
    return lance_sql.write_dataset(data, path, enable_stable_row_ids=True,
                                   max_rows_per_file=per_file)


# ------------------------------------------------------------------ stamp_fragments
def test_stamp_gives_fresh_ids_and_the_commit_version_in_order() -> None:
    frags = (_frag(3, 4), _frag(4, 2))
    out, nxt = stamp_fragments(frags, next_row_id=100, version=7)
    assert nxt == 106
    assert _lineage_of(out[0]) == ([100, 101, 102, 103], [7] * 4, [7] * 4)
    assert _lineage_of(out[1]) == ([104, 105], [7] * 2, [7] * 2)


def test_stamp_fills_pending_ids_between_kept_ones() -> None:
    kept = with_lineage(_frag(1, 5), _u64([40, P, 2, P, 9]), _u64([3, P, 1, P, 5]),
                        _u64([P] * 5))
    fresh = _frag(2, 2)
    out, nxt = stamp_fragments((kept, fresh), next_row_id=50, version=8)
    assert _lineage_of(out[0]) == ([40, 50, 2, 51, 9], [3, 8, 1, 8, 5], [8] * 5)
    assert _lineage_of(out[1]) == ([52, 53], [8, 8], [8, 8])
    assert nxt == 54


def test_stamp_leaves_complete_fragments_alone() -> None:
    frag = with_lineage(_frag(1, 3), _u64([7, 8, 1]), _u64([1, 2, 2]), _u64([4, 4, 5]))
    out, nxt = stamp_fragments((frag,), next_row_id=10, version=9)
    assert out == (frag,) and nxt == 10
    external = replace(frag, row_id_sequence=ExternalFile("_row_ids/x.binpb", 0, 12))
    out, nxt = stamp_fragments((external,), next_row_id=10, version=9)
    assert out[0].row_id_sequence == external.row_id_sequence and nxt == 10


def test_rebase_reapplies_with_the_later_version_and_counter() -> None:
    """A rebased commit stamps the same pending fragments again, with new values."""
    pending = with_lineage(_frag(1, 3), _u64([5, P, P]), _u64([2, P, P]), None)
    first, n1 = stamp_fragments((pending,), next_row_id=20, version=4)
    second, n2 = stamp_fragments((pending,), next_row_id=23, version=5)
    assert _lineage_of(first[0]) == ([5, 20, 21], [2, 4, 4], [4, 4, 4])
    assert _lineage_of(second[0]) == ([5, 23, 24], [2, 5, 5], [5, 5, 5])
    assert (n1, n2) == (22, 25)


def test_rebase_through_commits_gives_unique_ids(tmp_path) -> None:
    """Two appends built on the same version: the loser's rows get ids after the winner's."""
    from lance_sql.table.txn.operations import Append
    from lance_sql.table.write.fragments import write_fragments

    ds = _stable_table(tmp_path / "t", n=10)
    ctx = ds.write_context()
    base = ctx.table
    frags = []
    for start in (100, 200):
        reader = pa.table({"id": pa.array(range(start, start + 3), pa.int64()),
                           "v": ["n"] * 3}).to_reader()
        frags.append(write_fragments(ds.store, base.schema, reader))
    ctx.commit(Append(tuple(frags[0])))
    ctx.commit(Append(tuple(frags[1])))  # rebases
    t = lance_sql.dataset(tmp_path / "t").to_table(columns=["id"] + SYSTEM).sort_by("id")
    assert t["id"].to_pylist() == list(range(10)) + [100, 101, 102, 200, 201, 202]
    assert t["_rowid"].to_pylist() == list(range(16))
    assert t["_row_created_at_version"].to_pylist() == [1] * 10 + [2] * 3 + [3] * 3
    assert t["_row_last_updated_at_version"].to_pylist() == [1] * 10 + [2] * 3 + [3] * 3
    assert lance_sql.dataset(tmp_path / "t").manifest.next_row_id == 16


# ------------------------------------------------------------------ RowIdIndex
def test_index_maps_every_live_id_to_its_address(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=30, per_file=10)
    ds.update({"v": "'u'"}, where="id % 7 = 0")
    ds = lance_sql.dataset(tmp_path / "t")
    ds.delete("id = 3 or id = 14 or id = 21")  # 14 and 21 were updated: their new copy goes
    ds = lance_sql.dataset(tmp_path / "t")
    truth = ds.to_table(columns=["id", "_rowid", "_rowaddr"])
    index = RowIdIndex.build(ds.store, ds.manifest)
    got = index.lookup(truth["_rowid"].to_numpy())
    assert got.tolist() == truth["_rowaddr"].to_pylist()
    assert sorted(truth["_rowid"].to_pylist()) == [i for i in range(30) if i not in (3, 14, 21)]
    # deleted, never assigned and huge ids are missing
    missing = index.lookup(_u64([3, 14, 21, 30, 10**9, 2**63]))
    assert (missing == MISSING).all()
    assert index.lookup(_u64([])).size == 0
    # the cached index is the same object for the same manifest
    assert row_id_index(ds.store, ds.manifest) is row_id_index(ds.store, ds.manifest)


def test_index_is_a_few_runs_for_fresh_data(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=100_000, per_file=25_000)
    index = RowIdIndex.build(ds.store, ds.manifest)
    assert index.num_runs == 4
    assert index.nbytes <= 4 * 3 * 8
    ids = _u64([0, 24_999, 25_000, 99_999, 100_000])
    expected = [0, 24_999, 1 << 32, (3 << 32) | 24_999, int(MISSING)]
    assert index.lookup(ids).tolist() == expected


def test_index_of_an_empty_table(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=5)
    ds.delete("true")
    ds = lance_sql.dataset(tmp_path / "t")
    index = RowIdIndex.build(ds.store, ds.manifest)
    assert index.num_runs == 0
    assert (index.lookup(_u64([0, 1])) == MISSING).all()
    assert ds.take_rows([0, 1]).num_rows == 0


def test_index_refuses_an_id_claimed_by_two_live_rows() -> None:
    with pytest.raises(FormatError, match="row id 5 belongs to more than one live row"):
        RowIdIndex(_u64([0, 5]), _u64([0, 1 << 32]), _u64([10, 3]))
    with pytest.raises(FormatError, match="row id 7"):
        RowIdIndex(_u64([7, 7]), _u64([0, 1 << 32]), _u64([1, 1]))
    RowIdIndex(_u64([5, 0]), _u64([1 << 32, 0]), _u64([3, 5]))  # adjacent is fine


# ------------------------------------------------------------------ externalize
def test_small_sequences_stay_inline(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=10)
    frag = ds.manifest.fragments[0]
    assert externalize(ds.store, frag) == (frag, [])


def test_large_sequence_goes_to_a_file_and_reads_back(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=70_000, per_file=70_000)
    frag = ds.manifest.fragments[0]
    ids = np.random.default_rng(1).permutation(70_000).astype(np.uint64)
    seq = encode_row_ids(ids)
    assert len(seq) > INLINE_LIMIT
    moved, keys = externalize(ds.store, replace(frag, row_id_sequence=seq))
    assert isinstance(moved.row_id_sequence, ExternalFile)
    assert keys == [moved.row_id_sequence.path] and keys[0].startswith("_row_ids/")
    assert (tmp_path / "t" / keys[0]).read_bytes() == seq
    lineage = load_lineage(ds.store, ds.manifest, moved)
    assert lineage.row_ids.tolist() == ids.tolist()
    assert lineage.created.tolist() == [1] * 70_000


def test_scattered_update_commits_an_external_sequence(tmp_path) -> None:
    """Committing a fragment whose ids are scattered: readers see every id."""
    from lance_sql.table.txn.operations import Update

    n = 70_000
    ds = _stable_table(tmp_path / "t", n=n, per_file=n)
    frag = ds.manifest.fragments[0]
    ids = np.random.default_rng(2).permutation(n).astype(np.uint64)
    moved, _ = externalize(ds.store, replace(frag, row_id_sequence=encode_row_ids(ids)))
    ds.write_context().commit(Update(updated_fragments=(moved,),
                                     update_mode="rewrite_columns"))
    ds = lance_sql.dataset(tmp_path / "t")
    assert isinstance(ds.manifest.fragments[0].row_id_sequence, ExternalFile)
    t = ds.to_table(columns=["id", "_rowid"])
    assert t["_rowid"].to_numpy().tolist() == ids[t["id"].to_numpy()].tolist()
    picks = ids[[5, 17, 60_000]]
    assert ds.take_rows(picks, columns=["id"])["id"].to_pylist() == [5, 17, 60_000]
    hit = ds.to_table(columns=["id"], filter=f"_rowid = {int(ids[123])}")
    assert hit["id"].to_pylist() == [123]
    # clean-up keeps the file the live version points at, and drops unreferenced ones
    ds.store.put("_row_ids/orphan.binpb", b"x")
    ds.cleanup_old_versions(retain_versions=1, delete_unverified=True)
    assert not (tmp_path / "t" / "_row_ids" / "orphan.binpb").exists()
    live = lance_sql.dataset(tmp_path / "t").manifest.fragments[0].row_id_sequence
    assert (tmp_path / "t" / live.path).stat().st_size == live.size
    again = lance_sql.dataset(tmp_path / "t").to_table(columns=["id", "_rowid"])
    assert again["_rowid"].to_numpy().tolist() == ids[again["id"].to_numpy()].tolist()


# ------------------------------------------------------------------ damaged sequences
def test_corrupt_row_ids_name_the_fragment(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=5)
    store, m = ds.store, ds.manifest
    with pytest.raises(FormatError, match="fragment 71"):
        load_lineage(store, m, _frag(71, 5, row_id_sequence=b"\xff\xff\xff\xff\x0f garbage"))
    with pytest.raises(FormatError, match=r"fragment 72.*3 ids for 5 rows"):
        load_lineage(store, m, _frag(72, 5, row_id_sequence=encode_row_ids(_u64([0, 1, 2]))))
    with pytest.raises(FormatError, match="fragment 73 has no row id sequence"):
        load_lineage(store, m, _frag(73, 5))
    good_ids = encode_row_ids(_u64(range(5)))
    with pytest.raises(FormatError, match="fragment 74.*created-at"):
        load_lineage(store, m, _frag(74, 5, row_id_sequence=good_ids,
                                     created_at_version_sequence=b"\x0a\xff\xff"))
    with pytest.raises(FormatError, match="fragment 75.*last-updated"):
        short = encode_versions(_u64([1] * 4))
        load_lineage(store, m, _frag(75, 5, row_id_sequence=good_ids,
                                     last_updated_at_version_sequence=short))


def test_truncated_external_row_ids(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=5)
    seq = encode_row_ids(_u64(range(5)))
    ds.store.put("_row_ids/short.binpb", seq[:-1])
    frag = _frag(76, 5, row_id_sequence=ExternalFile("_row_ids/short.binpb", 0, len(seq)))
    with pytest.raises(FormatError, match="truncated"):
        load_lineage(ds.store, ds.manifest, frag)


def test_damaged_sequence_in_a_table_fails_the_read(tmp_path) -> None:
    from lance_sql.table.txn.operations import Update

    ds = _stable_table(tmp_path / "t", n=20, per_file=10)
    frag = ds.manifest.fragments[1]
    bad = replace(frag, row_id_sequence=encode_row_ids(_u64(range(100, 103))))
    ds.write_context().commit(Update(updated_fragments=(bad,),
                                     update_mode="rewrite_columns"))
    ds = lance_sql.dataset(tmp_path / "t")
    with pytest.raises(FormatError, match=f"fragment {frag.id}"):
        ds.to_table(columns=["id", "_rowid"])
    with pytest.raises(FormatError, match=f"fragment {frag.id}"):
        ds.take_rows([1])


# ------------------------------------------------------------------ errors
def test_version_columns_need_stable_row_ids(tmp_path) -> None:
    data = pa.table({"id": pa.array(range(5), pa.int64())})
    ds = lance_sql.write_dataset(data, tmp_path / "t")
    for column in ("_row_created_at_version", "_row_last_updated_at_version"):
        with pytest.raises(UnsupportedFeatureError, match="stable row ids"):
            ds.to_table(columns=["id", column])
    # _rowid is the address there
    assert ds.to_table(columns=["_rowid"])["_rowid"].to_pylist() == list(range(5))


def test_stable_row_ids_cannot_be_enabled_later(tmp_path) -> None:
    data = pa.table({"id": pa.array(range(5), pa.int64())})
    lance_sql.write_dataset(data, tmp_path / "t")
    for mode in ("append", "overwrite"):
        with pytest.raises(InvalidInputError, match="created without stable row ids"):
            lance_sql.write_dataset(data, tmp_path / "t", mode=mode, enable_stable_row_ids=True)
    ds = lance_sql.dataset(tmp_path / "t")
    assert ds.version == 1 and not ds.manifest.uses_stable_row_ids


@pytest.mark.parametrize("opted_in", [False, True])
def test_writers_externalize_only_when_the_table_opts_in(tmp_path, opted_in) -> None:
    """pylance 14.0.2 cannot open tables with external row ids: writing them is opt-in."""
    from lance_sql.table.txn.operations import Update

    n = 70_000
    ds = _stable_table(tmp_path / "t", n=n, per_file=n)
    frag = ds.manifest.fragments[0]
    ids = np.random.default_rng(3).permutation(n).astype(np.uint64)
    scattered = replace(frag, row_id_sequence=encode_row_ids(ids))
    ds.write_context().commit(Update(updated_fragments=(scattered,),
                                     update_mode="rewrite_columns"))
    ds = lance_sql.dataset(tmp_path / "t")
    if opted_in:
        ds.update_config({"lance_sql.external_row_ids": "true"})
    ds.delete("id = 0")  # compaction then materialises the deletion: a rewrite
    ds.optimize.compact_files(materialize_deletions_threshold=0.0)
    ds = lance_sql.dataset(tmp_path / "t")
    (new,) = ds.manifest.fragments
    assert isinstance(new.row_id_sequence, ExternalFile) == opted_in
    t = ds.to_table(columns=["id", "_rowid"])
    assert sorted(t.column("_rowid").to_pylist()) == sorted(ids[1:].tolist())
    assert dict(zip(t.column("id").to_pylist(), t.column("_rowid").to_pylist(),
                    strict=True)) == {i: int(ids[i]) for i in range(1, n)}


def test_lineage_stays_compact_until_arrays_are_asked_for(tmp_path) -> None:
    ds = _stable_table(tmp_path / "t", n=100_000, per_file=25_000)
    runtime = lance_sql.default_runtime()
    runtime.clear("lineage_arrays", "lineage")
    RowIdIndex.build(ds.store, ds.manifest)  # ranges are the runs: no array needed
    frag = ds.manifest.fragments[1]
    lineage = load_lineage(ds.store, ds.manifest, frag)
    picked = np.array([0, 7, 24_999])
    assert lineage.ids_at(picked).tolist() == [25_000, 25_007, 49_999]
    assert lineage.nbytes < 1_000  # not 24 bytes a row
    assert runtime.stats()["lineage_arrays"].entries == 0
    assert lineage.row_ids.tolist() == list(range(25_000, 50_000))
    assert runtime.stats()["lineage_arrays"].entries == 1  # materialised once, then shared
    assert load_lineage(ds.store, ds.manifest, frag).row_ids is lineage.row_ids


def test_lineage_lookups_from_many_threads_agree(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ds = _stable_table(tmp_path / "t", n=4_000, per_file=1_000)
    ds.update({"v": "'u'"}, where="id % 3 = 0")  # explicit ids in the rewritten rows
    ds = lance_sql.dataset(tmp_path / "t")
    truth = ds.to_table(columns=["_rowid", "_rowaddr"])
    lance_sql.default_runtime().clear("lineage_arrays", "lineage")

    def check(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        for frag in ds.manifest.fragments:
            lineage = load_lineage(ds.store, ds.manifest, frag)
            rows = np.sort(rng.integers(0, frag.physical_rows, 64))
            mine = (truth["_rowaddr"].to_numpy() >> 32) == frag.id
            offsets = truth["_rowaddr"].to_numpy()[mine] & 0xFFFFFFFF
            ids = dict(zip(offsets.tolist(), truth["_rowid"].to_numpy()[mine].tolist(),
                           strict=True))
            live = [r for r in rows.tolist() if r in ids]
            if lineage.ids_at(np.array(live, np.int64)).tolist() != [ids[r] for r in live]:
                return False
            if seed % 2 and lineage.row_ids[live].tolist() != [ids[r] for r in live]:
                return False
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(check, range(32)))
