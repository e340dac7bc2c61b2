"""A column dropped, compacted away and followed by a new column that takes its field id
(pylance and lance_sql both reuse it): the feed's rows from versions before the new
column read it as NULL, never the dropped column's values."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import NotFoundError

lance = pytest.importorskip("lance")


@pytest.mark.parametrize("dropper", ["lance_sql", "pylance"])
def test_old_rows_do_not_show_a_dropped_columns_values(tmp_path: Path, dropper: str) -> None:
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "secret": [111, 222, 333]}), uri,
                            enable_stable_row_ids=True)                        # v1
    (lance if dropper == "pylance" else lance_sql).dataset(uri).drop_columns(["secret"])
    lance_sql.dataset(uri).delete("id = 1")                                    # v3
    lance_sql.dataset(uri).update({"id": "id + 10"}, "id = 2")                 # v4
    ds = lance_sql.dataset(uri)
    ds.optimize.compact_files(target_rows_per_fragment=1000)
    ds.add_columns({"e": "id * -1"})
    (old_id,) = [f.id for f in lance_sql.dataset(uri, 1).manifest.schema.fields
                 if f.name == "secret"]
    assert ds.manifest.schema.field("e").id == old_id  # the id was reused
    for mode in ("all", "net"):
        changes = ds.table_changes(3, ds.version, mode=mode).to_pylist()
        deleted = [r for r in changes if r["_change_type"] == "delete"]
        assert [(r["id"], r["e"]) for r in deleted] == [(1, None)]
        before = [r for r in changes if r["_change_type"] == "update_preimage"]
        assert all(r["e"] is None for r in before if r["_commit_version"] <= 4 or mode == "net")
        # the rows the new column's commit updated carry its values
        after = [r for r in changes if r["_change_type"] == "update_postimage"
                 and r["_commit_version"] == ds.version]
        assert after and all(r["e"] == -r["id"] for r in after)
    session = lance_sql.LanceSession()
    session.register("t", uri)
    sql = session.sql(f"SELECT id, e FROM table_changes('t', 3, {ds.version}) "
                      "WHERE _change_type = 'delete'").to_pylist()
    assert sql == [{"id": 1, "e": None}]


def test_a_window_past_the_latest_version_names_its_start(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(pa.table({"id": [1]}), uri)  # one version
    with pytest.raises(NotFoundError, match="version 99 "):
        lance_sql.dataset(uri).table_changes(99, 100)
