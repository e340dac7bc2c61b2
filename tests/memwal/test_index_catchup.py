"""``index_catchup``: rebuilding a base-table index (``optimize_indices``) records that it
covers every merged generation, and the garbage collector waits for it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
from test_merger import SCHEMA, A, B, _flush

import lance_sql
from lance_sql.format.index import decode_index_section
from lance_sql.format.memwal import MemWalIndexDetails
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.gc import collect_garbage
from lance_sql.memwal.merger import merge


def _details(uri: str) -> MemWalIndexDetails:
    loaded = mem_wal_index.load(lance_sql.dataset(uri))
    assert loaded is not None
    return loaded[1]


def _catchup(uri: str) -> dict[str, dict]:
    return {c.index_name: {m.region_id: m.generation for m in c.caught_up}
            for c in _details(uri).index_catchup}


def _table(root: Path) -> lance_sql.LanceDataset:
    data = pa.table({"id": list(range(10)), "v": [f"base{i}" for i in range(10)]},
                    schema=SCHEMA)
    ds = lance_sql.write_dataset(data, str(root / "t.lance"))
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("v", "BTREE")
    ds.initialize_mem_wal(maintained_indexes=["id_idx"])
    return ds


def _forget_old_versions(uri: str) -> None:
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))


def test_optimize_indices_catches_up_and_gc_waits_for_it(tmp_path: Path) -> None:
    ds = _table(tmp_path)
    uri = ds.uri
    _flush(ds, A, [(1, "a1", False), (20, "a20", False)])
    _flush(ds, B, [(2, "b2", False)])
    merge(ds)
    assert _catchup(uri) == {}  # nothing rebuilt yet: no entry
    ds = lance_sql.dataset(uri)
    ds.optimize.optimize_indices()
    assert _catchup(uri) == {"id_idx": {A: 1, B: 1}, "v_idx": {A: 1, B: 1}}
    _flush(ds, A, [(3, "a3", False), (1, "", True)])
    merge(ds)
    assert _details(uri).merged_generation(A) == 2
    assert _catchup(uri)["id_idx"] == {A: 1, B: 1}  # merged, not yet indexed
    _forget_old_versions(uri)
    result = collect_garbage(lance_sql.dataset(uri))
    assert sorted(result.generations) == sorted([(A, 1), (B, 1)])  # A 2 waits for id_idx
    lance_sql.dataset(uri).optimize.optimize_indices()
    assert _catchup(uri) == {"id_idx": {A: 2, B: 1}, "v_idx": {A: 2, B: 1}}
    _forget_old_versions(uri)
    assert collect_garbage(lance_sql.dataset(uri)).generations == [(A, 2)]
    # the indices answer for the merged rows, and pylance reads the table and its index
    got = lance_sql.dataset(uri).to_table(filter="id = 20", use_scalar_index=True)
    assert got.column("v").to_pylist() == ["a20"]
    theirs = lance.dataset(uri)
    assert theirs.mem_wal_index_details() is not None
    assert theirs.to_table().sort_by("id").equals(
        lance_sql.dataset(uri).to_table().sort_by("id").cast(theirs.schema))


def test_an_index_that_misses_fragments_does_not_catch_up(tmp_path: Path) -> None:
    ds = _table(tmp_path)
    uri = ds.uri
    _flush(ds, A, [(1, "a1", False), (30, "a30", False)])
    merge(ds)
    ds = lance_sql.dataset(uri)
    (id_idx,) = [i for i in decode_index_section(ds.manifest.index_section)
                 if i.name == "id_idx"]
    live = {f.id for f in ds.manifest.fragments}
    assert not live <= set(id_idx.fragment_ids)  # the merge wrote rows it does not cover
    # an index entry claiming only the old fragments (a build racing the merge)
    ds.commit_index_metadata([id_idx.with_fragments(id_idx.fragment_ids & live)], [id_idx])
    assert _catchup(uri) == {}
    ds.optimize.optimize_indices()
    assert _catchup(uri)["id_idx"] == {A: 1}
