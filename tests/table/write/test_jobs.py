"""Distributed write jobs without an engine: workers write, one coordinator commits."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import CommitConflict, UnsupportedFeatureError
from lance_sql.format.manifest import ManifestCodec
from lance_sql.io.external import ExternalManifestCommit, SqliteManifestStore
from lance_sql.io.local import LocalStore
from lance_sql.io.uri import open_store
from lance_sql.table.meta.versions import latest_version
from lance_sql.table.txn.commit import CommitConfig
from lance_sql.table.write.jobs import JobFiles, commit_job, open_for_write, write_job_fragments


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.record_batch([ids, pa.array([f"v{i}" for i in range(start, start + n)])],
                           names=["id", "v"])


def _files(uri: str) -> set[str]:
    return {p.name for p in (Path(uri) / "data").glob("*.lance")}


def test_workers_write_and_one_commit_lands(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    target = open_for_write(uri, _batch(0, 1).schema, overwrite=False)
    assert target.version is None and target.pinned(open_store(uri)) is None  # no table yet
    job = JobFiles.new("job1")
    worker_a, _ = write_job_fragments(uri, target, job, [_batch(0, 5), _batch(5, 5)])
    worker_b, keys = write_job_fragments(uri, target, job, [_batch(10, 3)])
    assert all(k.split("/")[-1].startswith(job.prefix) for k in keys)
    manifest = commit_job(uri, target, job, [[f.to_proto().SerializeToString()
                                              for f in worker_a + worker_b]], overwrite=False)
    assert manifest.version == 1
    ds = lance_sql.dataset(uri)
    assert ds.to_table().sort_by("id")["id"].to_pylist() == list(range(13))


def test_commit_rebases_over_a_concurrent_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 4)]), uri)
    target = open_for_write(uri, _batch(0, 1).schema, overwrite=False)
    assert target.version == 1
    job = JobFiles.new("job2")
    fragments, _ = write_job_fragments(uri, target, job, [_batch(100, 2)])
    lance_sql.write_dataset(pa.Table.from_batches([_batch(50, 3)]), uri, mode="append")
    manifest = commit_job(uri, target, job, [[f.to_proto().SerializeToString()
                                              for f in fragments]], overwrite=False)
    assert manifest.version == 3
    ids = lance_sql.dataset(uri).to_table()["id"].to_pylist()
    assert sorted(ids) == [0, 1, 2, 3, 50, 51, 52, 100, 101]


def test_commit_after_a_concurrent_overwrite_fails_and_removes_the_job_files(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 4)]), uri)
    target = open_for_write(uri, _batch(0, 1).schema, overwrite=False)
    job = JobFiles.new("job3")
    fragments, _ = write_job_fragments(uri, target, job, [_batch(100, 2)])
    assert any(name.startswith(job.prefix) for name in _files(uri))
    lance_sql.write_dataset(pa.Table.from_batches([_batch(7, 1)]), uri, mode="overwrite")
    with pytest.raises(CommitConflict):
        commit_job(uri, target, job, [[f.to_proto().SerializeToString() for f in fragments]],
                   overwrite=False)
    assert not any(name.startswith(job.prefix) for name in _files(uri))
    assert lance_sql.dataset(uri).version == 2


def test_the_target_shipped_to_workers_does_not_grow_with_the_table(tmp_path: Path) -> None:
    small, large = str(tmp_path / "small.lance"), str(tmp_path / "large.lance")
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 400)]), small)
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 400)]), large, max_rows_per_file=1)
    assert len(lance_sql.dataset(large).manifest.fragments) == 400
    sizes = [len(pickle.dumps(open_for_write(u, _batch(0, 1).schema, overwrite=False)))
             for u in (small, large)]
    assert sizes[0] == sizes[1] < 4096


def test_jobs_commit_through_the_tables_commit_handler(tmp_path: Path) -> None:
    """A job on a table kept in an external manifest store publishes through that store."""
    uri = str(tmp_path / "t.lance")
    manifests = SqliteManifestStore(tmp_path / "m.db")
    config = CommitConfig(handler=ExternalManifestCommit(manifests))
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 4)]), uri, commit_config=config)
    target = open_for_write(uri, _batch(0, 1).schema, overwrite=False, commit_config=config)
    assert target.version == 1
    job = JobFiles.new("jobext")
    fragments, _ = write_job_fragments(uri, target, job, [_batch(10, 3)])
    manifest = commit_job(uri, target, job, [[f.to_proto().SerializeToString()
                                              for f in fragments]], overwrite=False,
                          commit_config=config)
    assert manifest.version == 2
    assert manifests.latest(LocalStore(uri).uri)[0] == 2
    ds = lance_sql.dataset(uri, commit_config=config)
    assert sorted(ds.to_table()["id"].to_pylist()) == [0, 1, 2, 3, 10, 11, 12]


def test_jobs_refuse_a_table_with_unknown_writer_flags(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.Table.from_batches([_batch(0, 4)]), uri)
    store = open_store(uri)
    ref = latest_version(store)
    raw = store.read(ref.key)
    manifest = ManifestCodec.decode(raw, ref.key)
    flagged = manifest.evolve(version=2,
                              writer_feature_flags=manifest.writer_feature_flags | 1 << 20)
    assert store.put_if_absent(ref.naming.key(2), ManifestCodec.encode(
        flagged, ManifestCodec.decode_transaction(raw, ref.key)))
    with pytest.raises(UnsupportedFeatureError):
        open_for_write(uri, _batch(0, 1).schema, overwrite=False)
    assert not list((Path(uri) / "data").glob("job-*"))
