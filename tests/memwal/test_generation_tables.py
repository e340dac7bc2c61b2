"""A flushed generation reads the WAL files of the table it is opened from: a MemWAL table
copied (or moved) elsewhere reads its own copy of the WAL, never the original's, although the
generations' manifests record the WAL directory's absolute URI (as pylance expects)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.fragment import BasePath
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.generation_tables import relocate_wal_bases
from lance_sql.memwal.naming import RegionPaths

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _rows(ids, tag: str) -> pa.Table:
    ids = [int(i) for i in ids]
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def _manifest_with(bases: tuple[BasePath, ...]):
    ds = lance_sql.write_dataset(_rows(range(3), "x"), f"memory://{uuid.uuid4().hex}/t")
    return dataclasses.replace(ds.manifest, base_paths=bases)


# -- the pure rule --------------------------------------------------------------------------


def test_only_a_base_naming_the_regions_wal_directory_is_relocated() -> None:
    region, other = uuid.uuid4(), uuid.uuid4()
    wal = RegionPaths(region).wal_dir
    old = BasePath(0, f"/old/place/t.lance/{wal}", False)
    foreign = BasePath(1, "/elsewhere/data", False)
    other_region = BasePath(2, f"/old/place/t.lance/{RegionPaths(other).wal_dir}", False)
    root = BasePath(3, f"/old/place/t.lance/{wal}", True)  # a dataset root: not a WAL dir
    manifest = _manifest_with((old, foreign, other_region, root))
    moved = relocate_wal_bases(manifest, region, f"/new/t.lance/{wal}")
    assert moved.base_paths == (BasePath(0, f"/new/t.lance/{wal}", False), foreign,
                                other_region, root)
    assert moved.fragments == manifest.fragments and moved.version == manifest.version


def test_a_manifest_already_in_place_is_returned_as_it_is() -> None:
    region = uuid.uuid4()
    wal = f"/t.lance/{RegionPaths(region).wal_dir}"
    manifest = _manifest_with((BasePath(0, wal, False),))
    assert relocate_wal_bases(manifest, region, wal) is manifest
    assert relocate_wal_bases(manifest, region, wal + "/") is not manifest  # spelt otherwise


# -- a copied table -------------------------------------------------------------------------


def _table(root: Path) -> tuple[str, dict[int, str | None]]:
    """A MemWAL table of 2 regions: base rows, two flushed generations (updates, deletes,
    new keys) and nothing in memory; returns its URI and the model (key -> v, None: gone)."""
    uri = str(root / "t.lance")
    lance_sql.write_dataset(_rows(range(200), "b"), uri, max_rows_per_file=80)
    lance_sql.dataset(uri).create_scalar_index("id", "BTREE")
    model: dict[int, str | None] = {i: f"b{i}" for i in range(200)}
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    rng = np.random.default_rng(5)
    with mw.writer() as writer:
        for g in range(2):
            ids = rng.choice(260, 60, replace=False)
            writer.put(_rows(ids, f"g{g}-"))
            model.update({int(i): f"g{g}-{i}" for i in ids})
            gone = rng.choice(260, 8, replace=False)
            writer.delete(pa.table({"id": pa.array(gone, pa.int64())}))
            model.update(dict.fromkeys(map(int, gone)))
            writer.flush_memtable()
    return uri, model


def _expected(model: dict[int, str | None]) -> dict[int, str]:
    return {k: v for k, v in model.items() if v is not None}


def _seen(table: pa.Table) -> dict[int, str]:
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def _wal_files(uri: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(uri) for f in files
            if os.sep + "wal" + os.sep in os.path.join(d, f)]


def test_a_copied_table_reads_its_own_wal_files(tmp_path: Path) -> None:
    uri, model = _table(tmp_path / "a")
    copy = str(tmp_path / "b" / "t.lance")
    shutil.copytree(uri, copy)
    assert _wal_files(uri)
    for path in _wal_files(uri):  # the original's WAL now lies: the copy must not read it
        with open(path, "r+b") as f:
            f.write(b"\0" * min(64, os.path.getsize(path)))
    expected = _expected(model)
    mw = MemWal(lance_sql.dataset(copy))
    assert _seen(mw.scanner().to_table()) == expected
    keys = sorted(expected)[:40] + [k for k, v in model.items() if v is None][:5]
    got = mw.get({"id": pa.array(keys, pa.int64())})
    assert _seen(got) == {k: expected[k] for k in keys if k in expected}
    one = sorted(expected)[-1]
    assert _seen(mw.get({"id": [one]})) == {one: expected[one]}
    session = lance_sql.connect(str(tmp_path / "b"))
    assert _seen(session.sql("SELECT id, v FROM t").to_arrow_table()) == expected


def test_a_moved_table_reads_and_merges(tmp_path: Path) -> None:
    uri, model = _table(tmp_path / "a")
    moved = str(tmp_path / "b" / "t.lance")
    shutil.move(uri, moved)
    mw = MemWal(lance_sql.dataset(moved))
    results = mw.merge()
    assert len(results) == 4 and all(r.version is not None for r in results)  # 2 x 2 merged
    expected = _expected(model)
    assert _seen(lance_sql.dataset(moved).to_table()) == expected  # merged into the base
    assert _seen(MemWal(lance_sql.dataset(moved)).scanner().to_table()) == expected


def test_pylance_still_opens_a_generation_where_it_was_flushed(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    uri, _ = _table(tmp_path / "a")
    generations = [d for d, dirs, _ in os.walk(uri) for x in dirs
                   if x == "_versions" and "_gen_" in os.path.basename(d)]
    assert generations
    for gen in generations:
        theirs = lance.dataset(gen).to_table()
        ours = lance_sql.dataset(gen).to_table()
        assert theirs.column("id").to_pylist() == ours.column("id").to_pylist()
