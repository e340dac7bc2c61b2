"""Row lineage through every write path on tables lance_sql writes (no pylance).

Each test keeps a model ``{row id: (id, v, created, last_updated)}`` and compares the
whole table (every row, sorted by ``_rowid``) with it after each step.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.io import MemoryStore

SYSTEM = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
N = 30


def _data(ids, v: str = "s") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids]})


def _create(path, n: int = N, per_file: int = 10):
    return lance_sql.write_dataset(_data(range(n)), path, enable_stable_row_ids=True,
                                   max_rows_per_file=per_file)


def _rows(path, version: int | None = None, columns=("id", "v")) -> list[tuple]:
    t = lance_sql.dataset(path, version=version).to_table(columns=list(columns) + SYSTEM)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def _as_rows(model: dict) -> list[tuple]:
    """Model {rowid: (id, v, created, updated)} -> rows (id, v, rowid, created, updated)."""
    return sorted((i, v, rid, c, u) for rid, (i, v, c, u) in model.items())


def _model(n: int = N) -> dict:
    return {i: (i, f"s{i}", 1, 1) for i in range(n)}


def _check(path, model: dict, version: int | None = None) -> None:
    assert sorted(_rows(path, version), key=lambda r: r[2]) == sorted(_as_rows(model),
                                                                      key=lambda r: r[2])


# ------------------------------------------------------------------ write paths
def test_append_rows_are_created_at_the_commit_version(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    model = _model()
    ds = lance_sql.write_dataset(_data(range(100, 105)), p, mode="append")
    assert ds.version == 2
    model.update({N + k: (100 + k, f"s{100 + k}", 2, 2) for k in range(5)})
    _check(p, model)
    _check(p, _model(), version=1)
    assert lance_sql.dataset(p).manifest.next_row_id == N + 5


@pytest.mark.parametrize("mode", ["rewrite_rows", "rewrite_columns"])
def test_update_keeps_ids_and_creation_and_bumps_last_updated(tmp_path, mode) -> None:
    p = tmp_path / "t"
    _create(p)
    lance_sql.write_dataset(_data(range(100, 105)), p, mode="append")  # v2
    model = _model()
    model.update({N + k: (100 + k, f"s{100 + k}", 2, 2) for k in range(5)})
    ds = lance_sql.dataset(p)
    hits = [i for i in list(range(N)) + list(range(100, 105)) if i % 4 == 1 or i == 102]
    assert ds.update({"v": "upper(v)"}, where="id % 4 = 1 or id = 102",
                     update_mode=mode) == {"num_rows_updated": len(hits)}
    for rid, (i, v, c, _u) in list(model.items()):
        if i in hits:
            model[rid] = (i, v.upper(), c, 3)
    _check(p, model)
    # again, on rows updated before (their copy in the update fragment) and others
    ds = lance_sql.dataset(p)
    ds.update({"v": "'x'"}, where="id = 1 or id = 2", update_mode=mode)
    for rid, (i, _v, c, _u) in list(model.items()):
        if i in (1, 2):
            model[rid] = (i, "x", c, 4)
    _check(p, model)
    assert lance_sql.dataset(p).manifest.next_row_id == N + 5  # updates take no new ids


def test_update_matching_nothing_commits_nothing(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    assert lance_sql.dataset(p).update({"v": "'x'"}, where="id < 0") == {"num_rows_updated": 0}
    _check(p, _model())


def test_delete_changes_no_versions(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    ds = lance_sql.dataset(p)
    ds.update({"v": "'u'"}, where="id < 3")  # v2
    model = _model()
    for i in range(3):
        model[i] = (i, "u", 1, 2)
    lance_sql.dataset(p).delete("id = 1 or id = 5 or id = 29")  # v3
    for i in (1, 5, 29):
        del model[i]
    _check(p, model)


def test_compaction_keeps_ids_and_both_versions(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p, n=40, per_file=5)
    model = _model(40)
    lance_sql.write_dataset(_data(range(100, 103)), p, mode="append")  # v2
    model.update({40 + k: (100 + k, f"s{100 + k}", 2, 2) for k in range(3)})
    ds = lance_sql.dataset(p)
    ds.update({"v": "'u'"}, where="id % 3 = 0")  # v3
    for rid, (i, _v, c, _u) in list(model.items()):
        if i % 3 == 0:
            model[rid] = (i, "u", c, 3)
    lance_sql.dataset(p).delete("id % 5 = 2")  # v4
    for rid, (i, *_r) in list(model.items()):
        if i % 5 == 2:
            del model[rid]
    before = _rows(p)
    ds = lance_sql.dataset(p)
    metrics = ds.optimize.compact_files(target_rows_per_fragment=1000)
    assert metrics.fragments_added == 1
    after = lance_sql.dataset(p)
    assert after.version > 4
    assert [f.deletion_file for f in after.manifest.fragments] == [None]  # materialised
    assert _rows(p) == before
    _check(p, model)
    # the index of the compacted table finds every row at its new address
    t = after.to_table(columns=["id", "_rowid", "_rowaddr"])
    got = after.take_rows(t["_rowid"].to_pylist(), columns=["id"])
    assert got["id"].to_pylist() == t["id"].to_pylist()
    # and later writes keep going from next_row_id
    lance_sql.write_dataset(_data([500]), p, mode="append")
    assert lance_sql.dataset(p).to_table(columns=["_rowid"], filter="id = 500")[
        "_rowid"].to_pylist() == [43]


def test_add_columns_with_values_bumps_every_row_null_columns_do_not(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    lance_sql.dataset(p).update({"v": "'u'"}, where="id = 4")  # v2
    lance_sql.dataset(p).delete("id = 9")  # v3
    ds = lance_sql.dataset(p)
    ds.add_columns({"w": "id * 2"})  # v4
    t = lance_sql.dataset(p).to_table(columns=["id", "w"] + SYSTEM).sort_by("_rowid")
    assert t["w"].to_pylist() == [i * 2 for i in range(N) if i != 9]
    assert t["_rowid"].to_pylist() == [i for i in range(N) if i != 9]
    assert t["_row_created_at_version"].to_pylist() == [1] * (N - 1)
    assert t["_row_last_updated_at_version"].to_pylist() == [4] * (N - 1)
    ds = lance_sql.dataset(p)
    ds.add_columns(pa.field("n", pa.int32()))  # v5: all-null column, no bump
    t2 = lance_sql.dataset(p).to_table(columns=["id", "n"] + SYSTEM).sort_by("_rowid")
    assert t2["n"].to_pylist() == [None] * (N - 1)
    assert t2.select(SYSTEM).equals(t.select(SYSTEM))
    assert lance_sql.dataset(p).version == 5


def test_drop_and_rename_columns_change_no_versions(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    lance_sql.dataset(p).update({"v": "'u'"}, where="id < 2")  # v2
    before = lance_sql.dataset(p).to_table(columns=["id"] + SYSTEM).sort_by("_rowid")
    lance_sql.dataset(p).drop_columns(["v"])
    lance_sql.dataset(p).alter_columns({"path": "id", "name": "key"})
    after = lance_sql.dataset(p).to_table(columns=["key"] + SYSTEM).sort_by("_rowid")
    assert lance_sql.dataset(p).version == 4
    assert after.rename_columns(["id"] + SYSTEM).equals(before)


# ------------------------------------------------------------------ lookups by id
def test_take_rows_by_stable_id(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    lance_sql.dataset(p).update({"v": "'u'"}, where="id = 0 or id = 1")
    lance_sql.dataset(p).delete("id = 2")
    ds = lance_sql.dataset(p)
    t = ds.take_rows([7, 0, 2, 99, 1, 7], columns=["id", "v"] + SYSTEM)
    assert t.to_pylist() == [
        {"id": 7, "v": "s7", "_rowid": 7, "_row_created_at_version": 1,
         "_row_last_updated_at_version": 1},
        {"id": 0, "v": "u", "_rowid": 0, "_row_created_at_version": 1,
         "_row_last_updated_at_version": 2},
        {"id": 1, "v": "u", "_rowid": 1, "_row_created_at_version": 1,
         "_row_last_updated_at_version": 2},
        {"id": 7, "v": "s7", "_rowid": 7, "_row_created_at_version": 1,
         "_row_last_updated_at_version": 1},
    ]
    # rowid 0 now lives in the update fragment, not at address 0
    assert ds.take_rows([0], columns=["_rowaddr"])["_rowaddr"].to_pylist()[0] >> 32 >= 3
    assert ds._take_rows([2]).num_rows == 0


def test_rowid_filters(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)
    lance_sql.dataset(p).update({"v": "'u'"}, where="id = 11")
    lance_sql.dataset(p).delete("id = 12")
    ds = lance_sql.dataset(p)
    assert ds.to_table(columns=["id", "v"], filter="_rowid = 11").to_pylist() == [
        {"id": 11, "v": "u"}]
    assert ds.to_table(columns=["id"], filter="_rowid = 12").num_rows == 0
    assert ds.to_table(columns=["id"], filter="_rowid = 1000").num_rows == 0
    assert sorted(ds.to_table(columns=["id"], filter="_rowid IN (11, 12, 13)")["id"]
                  .to_pylist()) == [11, 13]
    assert ds.to_table(columns=["id"], filter="_rowid = 13 and v = 'nope'").num_rows == 0
    assert sorted(ds.to_table(columns=["id"], filter="_rowid >= 27")["id"].to_pylist()) == [
        27, 28, 29]
    assert ds.count_rows("_rowid < 13") == 12


def test_sql_rowid_lookup_and_the_change_patterns(tmp_path) -> None:
    p = tmp_path / "t"
    _create(p)                                                        # v1: 0..29
    lance_sql.write_dataset(_data(range(100, 104)), p, mode="append")  # v2: rowids 30..33
    lance_sql.dataset(p).update({"v": "'u3'"}, where="id = 5 or id = 101")  # v3
    lance_sql.write_dataset(_data([200]), p, mode="append")           # v4: rowid 34
    lance_sql.dataset(p).update({"v": "'u5'"}, where="id = 7 or id = 200")  # v5
    session = lance_sql.connect(tmp_path)

    def q(sql: str) -> list[dict]:
        return session.sql(sql).to_arrow_table().to_pylist()

    assert q("SELECT id, v, _rowid, _row_last_updated_at_version FROM t WHERE _rowid = 5") == [
        {"id": 5, "v": "u3", "_rowid": 5, "_row_last_updated_at_version": 3}]
    assert q("SELECT id FROM t WHERE _rowid = 31") == [{"id": 101}]
    assert q("SELECT id FROM t WHERE _rowid = 99") == []
    # inserted in (1, 4]: created after 1 and up to 4
    ins = q("SELECT id FROM t WHERE _row_created_at_version > 1 "
            "AND _row_created_at_version <= 4 ORDER BY id")
    assert [r["id"] for r in ins] == [100, 101, 102, 103, 200]
    # updated in (2, 5]: existed at 2, last updated after 2 and up to 5
    upd = q("SELECT id FROM t WHERE _row_created_at_version <= 2 "
            "AND _row_last_updated_at_version > 2 AND _row_last_updated_at_version <= 5 "
            "ORDER BY id")
    assert [r["id"] for r in upd] == [5, 7, 101]
    upd = q("SELECT id FROM t WHERE _row_created_at_version <= 3 "
            "AND _row_last_updated_at_version > 3 AND _row_last_updated_at_version <= 4")
    assert upd == []


# ------------------------------------------------------------------ concurrency
def _memory_table(name: str):
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    _create(uri)
    return uri, MemoryStore(name)


def test_update_rebases_over_a_concurrent_update_of_other_rows(when_committing) -> None:
    uri, store = _memory_table("lineage_upd_upd")
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).update({"v": "'w'"}, where="id = 3"))
    assert loser.update({"v": "'l'"}, where="id = 4 or id = 25") == {"num_rows_updated": 2}
    store.clear_hooks()
    model = _model()
    model[3] = (3, "w", 1, 2)
    model[4] = (4, "l", 1, 3)
    model[25] = (25, "l", 1, 3)
    _check(uri, model)
    assert lance_sql.dataset(uri).manifest.next_row_id == N


def test_append_rebases_over_a_concurrent_append_with_fresh_ids(when_committing) -> None:
    uri, store = _memory_table("lineage_app_app")
    when_committing(store, lambda: lance_sql.write_dataset(_data([100, 101]), uri,
                                                            mode="append"))
    lance_sql.write_dataset(_data([200, 201, 202]), uri, mode="append")
    store.clear_hooks()
    model = _model()
    model[30], model[31] = (100, "s100", 2, 2), (101, "s101", 2, 2)
    model[32], model[33], model[34] = ((200 + k, f"s{200 + k}", 3, 3) for k in range(3))
    _check(uri, model)
    assert lance_sql.dataset(uri).manifest.next_row_id == 35


def test_update_rebases_over_a_concurrent_append(when_committing) -> None:
    uri, store = _memory_table("lineage_upd_app")
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.write_dataset(_data([100]), uri, mode="append"))
    loser.update({"v": "'l'"}, where="id = 0")
    store.clear_hooks()
    lance_sql.write_dataset(_data([300]), uri, mode="append")
    model = _model()
    model[0] = (0, "l", 1, 3)
    model[30] = (100, "s100", 2, 2)
    model[31] = (300, "s300", 4, 4)
    _check(uri, model)
    ids = lance_sql.dataset(uri).to_table(columns=["_rowid"])["_rowid"].to_pylist()
    assert len(ids) == len(set(ids)) == N + 2


def _upsert(uri: str, ids: list[int]) -> dict[str, int]:
    return (lance_sql.dataset(uri).merge_insert("id").when_matched_update_all()
            .when_not_matched_insert_all().execute(_data(ids)))


def test_concurrent_merge_inserts_of_the_same_new_key_do_not_both_insert_it(
        when_committing) -> None:
    from lance_sql.errors import RetryableConflict

    uri, store = _memory_table("lineage_mi_mi")
    when_committing(store, lambda: _upsert(uri, [500, 501]))
    with pytest.raises(RetryableConflict, match="inserted rows with keys"):
        _upsert(uri, [0, 501])  # the winner inserted 501 first
    store.clear_hooks()
    ids = lance_sql.dataset(uri).to_table(columns=["id"])["id"].to_pylist()
    assert ids.count(501) == 1 and ids.count(0) == 1
    assert _upsert(uri, [0, 501]) == {"num_inserted_rows": 0, "num_updated_rows": 2,
                                      "num_deleted_rows": 0}  # the retry updates both


def test_merge_insert_rebases_over_a_concurrent_insert_of_other_keys(when_committing) -> None:
    uri, store = _memory_table("lineage_mi_other")
    when_committing(store, lambda: _upsert(uri, [600]))
    assert _upsert(uri, [1, 601]) == {"num_inserted_rows": 1, "num_updated_rows": 1,
                                      "num_deleted_rows": 0}
    store.clear_hooks()
    ids = sorted(lance_sql.dataset(uri).to_table(columns=["id"])["id"].to_pylist())
    assert ids == sorted(list(range(N)) + [600, 601])
