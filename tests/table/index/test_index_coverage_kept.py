"""Index coverage through rewrites: a rewrite of rows leaves the old fragments' index
entries valid (they only gain deletions), as pylance keeps them (every BTREE covered no
fragment after one upsert); a shallow clone's compacted index points at its own files
(it pointed at the source table's, so lance_sql scanned and pylance failed)."""

from __future__ import annotations

import warnings
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql


def _coverage(uri: str, lib) -> dict[str, list[int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (pylance's list_indices)
        listed = lib.dataset(uri).list_indices()
    return {i["name"]: sorted(i["fragment_ids"]) for i in listed}


def _indexed(uri: str, lib) -> None:
    table = pa.table({"id": pa.array(range(3000), pa.int64()),
                      "k": pa.array([i % 300 for i in range(3000)], pa.int32()),
                      "s": [f"s{i}" for i in range(3000)]})
    lance.write_dataset(table, uri, max_rows_per_file=1000)
    for column in ("id", "k", "s"):
        lib.dataset(uri).create_scalar_index(column, "BTREE")


@pytest.mark.parametrize("change", ["merge_insert", "update"])
def test_a_rewrite_of_rows_keeps_the_old_fragments_indexed(tmp_path: Path,
                                                          change: str) -> None:
    got = {}
    for lib in (lance_sql, lance):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        _indexed(uri, lib)
        ds = lib.dataset(uri)
        if change == "merge_insert":
            rows = pa.table({"id": pa.array([5, 1500, 2999], pa.int64()),
                             "k": pa.array([-1, -2, -3], pa.int32()), "s": ["a", "b", "c"]})
            ds.merge_insert("id").when_matched_update_all().execute(rows)
        else:
            ds.update({"k": "k + 1"}, where="id < 40")
        got[lib.__name__] = _coverage(uri, lib)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (an index falling back would warn)
            assert lance_sql.dataset(uri).count_rows("k = 7") == lance.dataset(uri).count_rows(
                "k = 7")
    assert got["lance_sql"] == got["lance"] == {"id_idx": [0, 1, 2], "k_idx": [0, 1, 2],
                                                "s_idx": [0, 1, 2]}
    plan = lance_sql.dataset(str(tmp_path / "lance_sql.lance")).scanner(
        filter="k = 7").explain_plan()
    assert "ScalarIndexQuery" in plan and "indexed 3 of 4 fragments" in plan


def test_a_compacted_shallow_clone_reads_its_own_index(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.lance"), str(tmp_path / "dst.lance")
    table = pa.table({"id": pa.array(range(3000), pa.int64()),
                      "k": pa.array([i % 300 for i in range(3000)], pa.int32())})
    lance_sql.write_dataset(table, src, max_rows_per_file=1000)
    lance_sql.dataset(src).create_scalar_index("k", "BTREE")
    lance_sql.dataset(src).shallow_clone(dst, lance_sql.dataset(src).version)
    lance_sql.dataset(dst).delete("id % 7 = 0")
    lance_sql.dataset(dst).optimize.compact_files(target_rows_per_fragment=5000)
    (entry,) = lance_sql.dataset(dst).list_indices()
    assert entry["base_id"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = lance_sql.dataset(dst).count_rows("k = 5")
    assert ours == lance.dataset(dst).count_rows("k = 5") == 9


@pytest.mark.parametrize("kind", ["BITMAP", "BTREE"])
def test_a_compaction_keeps_a_stable_row_id_index_covering(tmp_path: Path, kind: str) -> None:
    """On a stable-row-id table a BITMAP index holds row ids, which a compaction does not
    move: the compacted fragments stay covered (rewritten without the deleted rows), as
    pylance's compaction keeps them; lance_sql's dropped them, so queries scanned until
    optimize_indices. Each library reads the other's result the same."""
    got = {}
    for lib in (lance_sql, lance):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        table = pa.table({"id": pa.array(range(3000), pa.int64()),
                          "k": pa.array([i % 7 for i in range(3000)], pa.int64())})
        lance_sql.write_dataset(table, uri, max_rows_per_file=1000, enable_stable_row_ids=True)
        lance_sql.dataset(uri).create_scalar_index("k", kind)
        lance_sql.dataset(uri).delete("id % 2 = 0")
        lance_sql.dataset(uri).update({"k": "100"}, where="id = 3")  # (a row moved away)
        lib.dataset(uri).optimize.compact_files(target_rows_per_fragment=1500)
        got[lib.__name__] = _coverage(uri, lib)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for where in ("k = 3", "k IN (0, 100)", "k > 4"):
                want = sorted(lance.dataset(uri).to_table(
                    filter=where, use_scalar_index=False)["id"].to_pylist())
                assert sorted(lance_sql.dataset(uri).to_table(filter=where)["id"]
                              .to_pylist()) == want
                assert sorted(lance.dataset(uri).to_table(filter=where)["id"]
                              .to_pylist()) == want
    assert got["lance_sql"] == got["lance"] and got["lance"]["k_idx"] != []
    plan = lance_sql.dataset(str(tmp_path / "lance_sql.lance")).scanner(
        filter="k = 3").explain_plan()
    assert "ScalarIndexQuery" in plan
