"""An LSM view made before a merge, a cleanup of its base version and a collection of the
merged generation: it read the old base rows with no error (the generation's rows, merged
into a newer version, were nowhere in what it read). It is now a VersionCleanedUpError;
a view made after reads the new rows. A manifest that leaves out an unmerged generation
while the base version is still there is damage: a FormatError."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, VersionCleanedUpError
from lance_sql.memwal import RegionSpec
from lance_sql.memwal.region_log import RegionLog
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64())])


def _rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids),
                                                                      pa.int64())},
                    schema=SCHEMA)


def _table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10)), 0), uri)
    lance_sql.dataset(uri).initialize_mem_wal(region_spec=RegionSpec.bucket("id", 1))
    with lance_sql.dataset(uri).mem_wal.writer() as w:  # flushed when closed
        w.put(_rows([5, 1000], 7))
    return uri


def test_a_view_whose_base_version_was_cleaned_up_after_a_merge(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    mw = lance_sql.dataset(uri).mem_wal
    scan = mw.scanner(["id", "v"], filter="id IN (5, 1000)")
    view = mw.view()
    lance_sql.dataset(uri).mem_wal.merge()
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert lance_sql.dataset(uri).mem_wal.collect_garbage().generations
    current_runtime().clear()
    keys = pa.table({"id": pa.array([5, 1000], pa.int64())})
    for read in (scan.to_table, lambda: view.lookup_plan(keys, None).to_table(),
                 lambda: view.scan_plan(None, None).to_table()):
        with pytest.raises(VersionCleanedUpError, match="open the view again"):
            read()
    again = lance_sql.dataset(uri).mem_wal.scanner(["id", "v"], filter="id IN (5, 1000)")
    assert sorted(again.to_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 5, "v": 7}, {"id": 1000, "v": 7}]


def test_a_manifest_leaving_out_an_unmerged_generation_is_damage(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    ds = lance_sql.dataset(uri)
    [region] = [m.region_id for m in ds.mem_wal.regions()]
    log = RegionLog(ds.store, region)
    assert [g.generation for g in log.latest().flushed_generations] == [1]
    log.update(lambda m: m.evolve(flushed_generations=()))
    current_runtime().clear()
    with pytest.raises(FormatError, match="does not list them"):
        lance_sql.dataset(uri).mem_wal.scanner().to_table()


def test_a_plan_made_before_the_collection_reads_to_a_typed_error(tmp_path: Path) -> None:
    """The generation is opened when the plan is made, its files read when it runs: a
    merge, a cleanup and a collection in between left a bare NotFoundError (a WAL file)."""
    uri = _table(tmp_path)
    view = lance_sql.dataset(uri).mem_wal.view()
    keys = pa.table({"id": pa.array([5, 1000], pa.int64())})
    plans = [view.scan_plan(None, None), view.scan_plan(None, "v > 1"),
             view.lookup_plan(keys, None)]
    lance_sql.dataset(uri).mem_wal.merge()
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert lance_sql.dataset(uri).mem_wal.collect_garbage().generations
    current_runtime().clear()
    for plan in plans:
        with pytest.raises(VersionCleanedUpError, match="open the view again"):
            plan.to_table()
