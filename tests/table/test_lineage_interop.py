"""Stable row ids and row versions shared with pylance 14.0.2, both directions.

Every version of each table is read by both libraries and compared row for row,
``_rowid``, ``_rowaddr``, ``_row_created_at_version`` and
``_row_last_updated_at_version`` included.
"""

from __future__ import annotations

from dataclasses import replace

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.fragment import ExternalFile
from lance_sql.format.row_ids import encode_row_ids
from lance_sql.table.files.lineage import externalize
from lance_sql.table.txn.operations import Update

SYSTEM = ["_rowid", "_rowaddr", "_row_created_at_version", "_row_last_updated_at_version"]


def _data(ids, v: str = "s") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids]})


def _read(lib, path, version: int, columns: list[str]) -> pa.Table:
    t = lib.dataset(str(path), version=version).to_table(columns=columns + SYSTEM)
    return t.sort_by("_rowid")


def _same_everywhere(path, columns_by_version: dict[int, list[str]]) -> dict[int, pa.Table]:
    """Both libraries read every version identically; returns the tables."""
    out = {}
    latest = lance.dataset(str(path)).version
    assert lance_sql.dataset(path).version == latest
    assert sorted(columns_by_version) == list(range(1, latest + 1))
    for version, columns in columns_by_version.items():
        ours = _read(lance_sql, path, version, columns)
        theirs = _read(lance, path, version, columns)
        assert ours.schema == theirs.schema, f"v{version}"
        for name in theirs.column_names:
            assert ours[name].to_pylist() == theirs[name].to_pylist(), f"v{version} {name}"
        ids = ours["_rowid"].to_pylist()
        assert len(ids) == len(set(ids)), f"v{version}: duplicate row ids"
        out[version] = ours
    return out


def _versions(path) -> int:
    return lance.dataset(str(path)).version


def test_pylance_history_reads_identically(tmp_path) -> None:
    p = str(tmp_path / "t")
    cols = {}
    lance.write_dataset(_data(range(20)), p, enable_stable_row_ids=True, max_rows_per_file=8)
    cols[1] = ["id", "v"]
    lance.write_dataset(_data(range(100, 105)), p, mode="append")
    cols[2] = ["id", "v"]
    lance.dataset(p).update({"v": "'u'"}, where="id % 3 = 0 or id = 101")
    cols[3] = ["id", "v"]
    src = _data([1, 2, 3, 101, 500, 501], v="m")
    res = lance.dataset(p).merge_insert("id").when_matched_update_all() \
        .when_not_matched_insert_all().execute(src)
    assert res["num_inserted_rows"] == 2 and res["num_updated_rows"] == 4
    cols[4] = ["id", "v"]
    lance.dataset(p).delete("id = 2 or id = 7 or id = 104")
    cols[5] = ["id", "v"]
    lance.dataset(p).update({"v": "'again'"}, where="id = 3 or id = 500")
    cols[6] = ["id", "v"]
    lance.dataset(p).optimize.compact_files()
    for v in range(7, _versions(p) + 1):
        cols[v] = ["id", "v"]
    lance.dataset(p).add_columns({"w": "id * 2"})
    cols[_versions(p)] = ["id", "v", "w"]
    lance.dataset(p).add_columns(pa.field("n", pa.int32()))
    cols[_versions(p)] = ["id", "v", "w", "n"]
    tables = _same_everywhere(p, cols)
    last = tables[max(tables)]
    # sanity of what pylance wrote, so the comparison is not vacuous
    row = {r["id"]: r for r in last.to_pylist()}
    assert row[3]["_rowid"] == 3 and row[3]["_row_created_at_version"] == 1
    assert row[500]["_rowid"] == 25 and row[500]["_row_created_at_version"] == 4
    assert 2 not in row and 7 not in row
    assert {r["_row_last_updated_at_version"] for r in last.to_pylist()} == {max(tables) - 1}
    # lookups by stable id agree too
    ds, py = lance_sql.dataset(p), lance.dataset(p)
    picks = [25, 3, 2, 999, 0, 21]
    assert ds.take_rows(picks, columns=["id", "_rowid"]).to_pylist() == \
        py._take_rows(picks, columns=["id", "_rowid"]).to_pylist()
    for rid in (0, 3, 2, 25):
        assert ds.to_table(columns=["id"], filter=f"_rowid = {rid}").to_pylist() == \
            py.to_table(columns=["id"], filter=f"_rowid = {rid}").to_pylist()


def test_lance_sql_history_reads_identically_in_pylance(tmp_path) -> None:
    p = tmp_path / "t"
    cols = {}
    lance_sql.write_dataset(_data(range(20)), p, enable_stable_row_ids=True, max_rows_per_file=8)
    cols[1] = ["id", "v"]
    lance_sql.write_dataset(_data(range(100, 105)), p, mode="append")
    cols[2] = ["id", "v"]
    lance_sql.dataset(p).update({"v": "'u'"}, where="id % 3 = 0 or id = 101")
    cols[3] = ["id", "v"]
    lance_sql.dataset(p).update({"v": "upper(v)"}, where="id = 4 or id = 103",
                                update_mode="rewrite_columns")
    cols[4] = ["id", "v"]
    lance_sql.dataset(p).delete("id = 2 or id = 9 or id = 104")
    cols[5] = ["id", "v"]
    lance_sql.dataset(p).update({"v": "'again'"}, where="id = 3 or id = 100")
    cols[6] = ["id", "v"]
    lance_sql.dataset(p).optimize.compact_files()
    for v in range(7, lance_sql.dataset(p).version + 1):
        cols[v] = ["id", "v"]
    lance_sql.dataset(p).add_columns({"w": "id * 2"})
    cols[lance_sql.dataset(p).version] = ["id", "v", "w"]
    lance_sql.dataset(p).add_columns(pa.field("n", pa.int32()))
    cols[lance_sql.dataset(p).version] = ["id", "v", "w", "n"]
    lance_sql.dataset(p).drop_columns(["n"])
    cols[lance_sql.dataset(p).version] = ["id", "v", "w"]
    _same_everywhere(p, cols)
    lance.dataset(str(p)).validate()

    # pylance keeps writing: ids continue from next_row_id, updated rows keep theirs
    nxt = lance_sql.dataset(p).manifest.next_row_id
    assert nxt == 25
    pa_rows = pa.table({"id": pa.array([700, 701], pa.int64()), "v": ["p", "p"],
                        "w": pa.array([0, 0], pa.int64())})
    lance.write_dataset(pa_rows, str(p), mode="append")
    cols[_versions(p)] = ["id", "v", "w"]
    lance.dataset(str(p)).update({"v": "'py'"}, where="id = 5 or id = 700")
    cols[_versions(p)] = ["id", "v", "w"]
    tables = _same_everywhere(p, cols)
    last = {r["id"]: r for r in tables[max(tables)].to_pylist()}
    assert (last[700]["_rowid"], last[701]["_rowid"]) == (25, 26)
    assert last[5]["_rowid"] == 5 and last[5]["_row_created_at_version"] == 1
    assert last[5]["_row_last_updated_at_version"] == max(tables)
    # and we continue after pylance
    lance_sql.write_dataset(pa_rows.slice(0, 1).set_column(0, "id", pa.array([800])), p,
                            mode="append")
    got = lance_sql.dataset(p).to_table(columns=["_rowid"], filter="id = 800")
    assert got["_rowid"].to_pylist() == [27]
    assert lance.dataset(str(p)).to_table(columns=["_rowid"], filter="id = 800")[
        "_rowid"].to_pylist() == [27]


def test_large_inline_sequence_from_pylance(tmp_path) -> None:
    """pylance keeps even very large sequences inline; we read them (and compact them)."""
    p = str(tmp_path / "t")
    n = 160_000
    lance.write_dataset(pa.table({"id": pa.array(np.arange(n)), "v": pa.array(np.arange(n))}),
                        p, enable_stable_row_ids=True)
    keys = np.random.default_rng(0).permutation(n)[: n // 2]
    src = pa.table({"id": pa.array(keys), "v": pa.array(keys + 1)})
    lance.dataset(p).merge_insert("id").when_matched_update_all().execute(src)
    seqs = [f.row_id_sequence for f in lance_sql.dataset(p).manifest.fragments]
    assert max(len(s) for s in seqs) > 200 * 1024
    _same_everywhere(p, {1: ["id", "v"], 2: ["id", "v"]})
    lance_sql.dataset(p).optimize.compact_files()
    ours = _read(lance_sql, p, 3, ["id", "v"])
    theirs = _read(lance, p, 3, ["id", "v"])
    assert ours.equals(theirs)
    assert ours.drop_columns(["_rowaddr"]).equals(
        _read(lance_sql, p, 2, ["id", "v"]).drop_columns(["_rowaddr"]))


def test_external_row_ids_are_not_readable_by_pylance_14(tmp_path) -> None:
    """KNOWN INCOMPATIBILITY: pylance 14.0.2 refuses any table with an external row-id
    sequence (``ValueError: ... All fragments must have row ids``, manifest.rs:1064),
    even for a plain scan. lance_sql reads it. If pylance learns to read them, this test
    fails and should become a plain comparison."""
    p = tmp_path / "t"
    n = 70_000
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(np.arange(n))}), p,
                                 enable_stable_row_ids=True, max_rows_per_file=n)
    ids = np.random.default_rng(3).permutation(n).astype(np.uint64)
    frag = ds.manifest.fragments[0]
    moved, _ = externalize(ds.store, replace(frag, row_id_sequence=encode_row_ids(ids)))
    assert isinstance(moved.row_id_sequence, ExternalFile)
    ds.write_context().commit(Update(updated_fragments=(moved,),
                                     update_mode="rewrite_columns"))
    t = lance_sql.dataset(p).to_table(columns=["id", "_rowid"])
    assert t["_rowid"].to_numpy().tolist() == ids[t["id"].to_numpy()].tolist()
    # the version before is fine in pylance
    assert lance.dataset(str(p), version=1).count_rows() == n
    with pytest.raises(ValueError, match="All fragments must have row ids"):
        lance.dataset(str(p)).to_table(columns=["id"])


# ------------------------------------------------------------------ merge_insert
MERGES = {
    "upsert": (lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
               [1, 2, 3, 14, 30, 31]),
    "full": (lambda b: b.when_matched_update_all().when_not_matched_insert_all()
             .when_not_matched_by_source_delete(), [1, 2, 3, 10, 11, 40]),
    "update_only": (lambda b: b.when_matched_update_all(), [0, 5, 17, 99]),
    "insert_only": (lambda b: b.when_not_matched_insert_all(), [4, 50, 51, 52]),
    "matched_delete": (lambda b: b.when_matched_delete().when_not_matched_insert_all(),
                       [1, 2, 13, 60, 61]),
    "delete_some": (lambda b: b.when_matched_update_all()
                    .when_not_matched_by_source_delete("id > 12"), [1, 2, 13, 60]),
    "conditional": (lambda b: b.when_matched_update_all(condition="target.v != source.v")
                    .when_not_matched_insert_all(), [1, 2, 3, 70]),
}


@pytest.mark.parametrize("name", sorted(MERGES))
def test_merge_insert_matches_pylance_on_twin_tables(tmp_path, name) -> None:
    import shutil

    build, keys = MERGES[name]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    lance_sql.write_dataset(_data(range(20)), ours, enable_stable_row_ids=True,
                            max_rows_per_file=8)
    lance_sql.dataset(ours).update({"v": "'u'"}, where="id = 2 or id = 13")  # v2
    shutil.copytree(ours, theirs)
    src = _data(keys, v="m")
    if name == "conditional":  # id 1 and 70 unchanged vs target / new; 2 and 3 differ
        src = pa.table({"id": pa.array(keys, pa.int64()), "v": ["s1", "X", "Y", "n"]})
    got = build(lance_sql.dataset(ours).merge_insert("id")).execute(src)
    want = build(lance.dataset(str(theirs)).merge_insert("id")).execute(src)
    assert got == want
    cols = {1: ["id", "v"], 2: ["id", "v"], 3: ["id", "v"]}
    ours_t = _same_everywhere(ours, cols)[3]
    theirs_t = _same_everywhere(theirs, cols)[3]
    # same rows, ids and versions (addresses may differ: layouts are each library's own)
    a = ours_t.drop_columns(["_rowaddr"]).sort_by("id")
    b = theirs_t.drop_columns(["_rowaddr"]).sort_by("id")
    assert a.to_pylist() == b.to_pylist()
    assert lance_sql.dataset(ours).manifest.next_row_id == \
        lance_sql.dataset(theirs).manifest.next_row_id
