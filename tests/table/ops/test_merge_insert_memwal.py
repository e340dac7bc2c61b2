"""merge_insert as the MemWAL merger uses it: tombstones delete, and merge progress is
recorded in the same commit (the spec's Background Job Expectations, Appendix 2)."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import IncompatibleConflict, SchemaError
from lance_sql.format.index import IndexMetadata, decode_index_section
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    MemWalIndexDetails,
    MergedGeneration,
    details_of,
    with_details,
)
from lance_sql.io.memory import MemoryStore
from lance_sql.table.txn.operations import CreateIndex

REGION = uuid.UUID("11111111-2222-4333-8444-555555555555")
_names = itertools.count()


def _table(uri: str) -> lance_sql.LanceDataset:
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64()),
                                           "v": [f"v{i}" for i in range(10)]}), uri)
    entry = with_details(IndexMetadata.new(MEM_WAL_INDEX_NAME, [], ds.version, None),
                         MemWalIndexDetails().encode(), ds.version)
    return ds.at_manifest(ds.write_context().commit(CreateIndex((entry,))))


def _merged(ds: lance_sql.LanceDataset) -> int:
    (entry,) = [i for i in decode_index_section(ds.manifest.index_section)
                if i.name == MEM_WAL_INDEX_NAME]
    return MemWalIndexDetails.decode(details_of(entry), "t").merged_generation(REGION)


def _generation(ids: list[int], values: list[str | None], dead: list[bool]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()),
                     "_tombstone": pa.array(dead, pa.bool_())})


def test_tombstones_delete_and_upserts_land_in_one_commit(tmp_path: Path) -> None:
    ds = _table(str(tmp_path / "t.lance"))
    before = ds.version
    stats = (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
             .when_matched_delete_if("_tombstone")
             .mark_generations_merged([MergedGeneration(REGION, 1)])
             .execute(_generation([1, 2, 50, 51], ["new1", None, "n50", None],
                                  [False, True, False, True])))
    assert stats == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 1}
    ds = lance_sql.dataset(ds.uri)
    assert ds.version == before + 1
    rows = dict(zip(*ds.to_table().sort_by("id").to_pydict().values(), strict=True))
    assert 2 not in rows and 51 not in rows and rows[1] == "new1" and rows[50] == "n50"
    assert _merged(ds) == 1
    ref = pytest.importorskip("lance").dataset(ds.uri)
    assert ref.to_table().sort_by("id") == ds.to_table().sort_by("id")
    assert any(getattr(i, "name", None) == MEM_WAL_INDEX_NAME for i in ref.describe_indices())


def test_an_empty_generation_still_records_progress(tmp_path: Path) -> None:
    ds = _table(str(tmp_path / "t.lance"))
    before = ds.version
    (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
     .mark_generations_merged([MergedGeneration(REGION, 4)])
     .execute(_generation([], [], []).drop_columns(["_tombstone"])))
    ds = lance_sql.dataset(ds.uri)
    assert ds.version == before + 1 and _merged(ds) == 4 and ds.count_rows() == 10


def test_appendix_2_racing_mergers(tmp_path: Path) -> None:
    """Merger B commits generation 6 while A is merging it: A aborts, nothing doubles."""
    name = f"merge_race{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    _table(uri)
    generation = _generation([3, 70], ["g6", "g6"], [False, False])

    def merge(dataset: lance_sql.LanceDataset) -> dict[str, int]:
        return (dataset.merge_insert("id").when_matched_update_all()
                .when_not_matched_insert_all().when_matched_delete_if("_tombstone")
                .mark_generations_merged([MergedGeneration(REGION, 6)])
                .execute(generation))

    store = MemoryStore(name)
    raced: list[dict[str, int] | None] = []

    def b_commits_first(op: str, key: str) -> None:
        if op == "put_if_absent" and "_versions/" in key and not raced:
            raced.append(None)  # B's own commit must not start a third merger
            raced[0] = merge(lance_sql.dataset(uri))

    store.add_hook(b_commits_first)
    with pytest.raises(IncompatibleConflict, match="generation 6"):
        merge(lance_sql.dataset(uri))
    store.clear_hooks()
    final = lance_sql.dataset(uri)
    assert raced[0] == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert _merged(final) == 6
    assert final.count_rows() == 11  # 70 inserted once
    assert final.count_rows("id = 70") == 1


def test_tombstones_may_hold_nulls_where_the_table_forbids_them(tmp_path: Path) -> None:
    """A MemWAL delete writes a tombstone with the key alone: its other columns are NULL
    even when the table's are not nullable; the rows written must still fit."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("g", pa.int64(), nullable=False)])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2, 3], "g": [0, 0, 0]}, schema=schema),
                                 str(tmp_path / "t.lance"))
    source = pa.table({"id": pa.array([1, 3, 9, 4], pa.int64()),
                       "g": pa.array([None, 5, None, 6], pa.int64()),
                       "_tombstone": [True, False, True, False]})
    stats = (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
             .when_matched_delete_if("_tombstone").execute(source))
    assert stats == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 1}
    got = lance_sql.dataset(ds.uri).to_table().sort_by("id")
    assert got.to_pylist() == [{"id": 2, "g": 0}, {"id": 3, "g": 5}, {"id": 4, "g": 6}]
    assert got.schema.field("g").nullable is False
    written = source.set_column(2, "_tombstone", pa.array([True, False, False, False]))
    with pytest.raises(SchemaError, match="null"):  # 9 would be written
        (lance_sql.dataset(ds.uri).merge_insert("id").when_matched_update_all()
         .when_not_matched_insert_all().when_matched_delete_if("_tombstone").execute(written))
