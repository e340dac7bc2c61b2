"""Commits next to ``cleanup_old_versions``: no acknowledged commit is lost, and a version
number that cleanup freed is never written again (in-memory store, scripted interleavings).

The writer under test reads version v; others commit v+1..v+3; cleanup runs with zero
retention. The writer must then land at v+4 (after rebasing over the three) or fail with
a retryable conflict, and never re-create a removed manifest.
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import timedelta

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import RetryableConflict
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import LATEST_HINT, ManifestNaming, transaction_key
from lance_sql.io import ExternalManifestCommit, MemoryManifestStore, MemoryStore
from lance_sql.table.meta.versions import list_versions, load_manifest
from lance_sql.table.ops.cleanup import WRITER_GRACE
from lance_sql.table.txn.commit import CommitConfig, commit_transaction
from lance_sql.table.txn.operations import Append, Transaction
from lance_sql.table.write.fragments import write_fragments

_names = itertools.count()
NAMINGS = [ManifestNaming.V1, ManifestNaming.V2]


def make_table(naming: ManifestNaming, config: CommitConfig) -> tuple[str, MemoryStore]:
    name = f"cleanup_safety{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    lance_sql.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri,
                            enable_v2_manifest_paths=naming is ManifestNaming.V2,
                            commit_config=config)
    return uri, MemoryStore(name)


def append_txn(store: MemoryStore, base: Manifest, first_id: int) -> Transaction:
    data = pa.table({"id": pa.array([first_id, first_id + 1], pa.int64())})
    frags = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
        data.schema, data.to_batches()))
    return Transaction(read_version=base.version, operation=Append(tuple(frags)))


def others_commit_three(uri: str, config: CommitConfig) -> None:
    for i in range(3):
        lance_sql.write_dataset(pa.table({"id": pa.array([100 + i], pa.int64())}), uri,
                                mode="append", commit_config=config)


def ids(uri: str, config: CommitConfig) -> list[int]:
    ds = lance_sql.dataset(uri, commit_config=config)
    return sorted(ds.to_table(columns=["id"])["id"].to_pylist())


def configs() -> list[tuple[str, CommitConfig]]:
    return [("put_if_absent", CommitConfig()),
            ("external", CommitConfig(handler=ExternalManifestCommit(MemoryManifestStore())))]


@pytest.mark.parametrize("naming", NAMINGS, ids=lambda n: n.name)
@pytest.mark.parametrize("handler", ["put_if_absent", "external"])
def test_commit_over_cleaned_versions_conflicts_and_never_refills(
        naming: ManifestNaming, handler: str) -> None:
    """Cleanup ran before the commit started: the winners' transactions are gone, so the
    commit cannot be checked against them: RetryableConflict, and v+1 stays removed."""
    config = dict(configs())[handler]
    uri, store = make_table(naming, config)
    base = load_manifest(store, list_versions(store)[-1])  # v = 1
    txn = append_txn(store, base, 500)
    others_commit_three(uri, config)
    stats = lance_sql.dataset(uri, commit_config=config).cleanup_old_versions(
        older_than=timedelta(0))
    assert stats.old_versions == 3
    assert [r.version for r in list_versions(store)] == [4]
    with pytest.raises(RetryableConflict, match="removed by cleanup_old_versions"):
        commit_transaction(store, base, naming, txn, config=config)
    assert [r.version for r in list_versions(store)] == [4]  # nothing re-created
    assert ids(uri, config) == list(range(10)) + [100, 101, 102]
    # retried from the latest version, the same change lands at v+4
    again = lance_sql.write_dataset(pa.table({"id": pa.array([500], pa.int64())}), uri,
                                    mode="append", commit_config=config)
    assert again.version == 5
    assert ids(uri, config) == list(range(10)) + [100, 101, 102, 500]


@pytest.mark.parametrize("naming", NAMINGS, ids=lambda n: n.name)
@pytest.mark.parametrize("handler", ["put_if_absent", "external"])
def test_cleanup_during_a_commit_keeps_what_the_writer_needs(
        naming: ManifestNaming, handler: str) -> None:
    """The interleaving that re-created history: the writer has looked for the newest
    version (v) and is about to publish v+1; meanwhile v+1..v+3 are committed and cleanup
    removes every version but the newest. Cleanup must keep the versions the writer still
    needs (its transaction file says it read v), so the writer loses v+1, rebases over the
    three and lands at v+4 with everyone's rows."""
    config = dict(configs())[handler]
    uri, store = make_table(naming, config)
    base = load_manifest(store, list_versions(store)[-1])
    txn = append_txn(store, base, 500)
    removed: list[int] = []

    def meanwhile(op: str, key: str) -> None:
        if op in ("put", "put_if_absent") and key.startswith("_versions/") \
                and not key.endswith(".json") and not removed:
            removed.append(-1)
            store.clear_hooks()
            others_commit_three(uri, config)
            stats = lance_sql.dataset(uri, commit_config=config).cleanup_old_versions(
                older_than=timedelta(0))
            removed.append(stats.old_versions)

    store.add_hook(meanwhile)
    manifest = commit_transaction(store, base, naming, txn, config=config)
    assert removed == [-1, 1]  # only version 1, which the writer had read, went
    assert manifest.version == 5
    assert [r.version for r in list_versions(store)] == [2, 3, 4, 5]
    assert ids(uri, config) == list(range(10)) + [100, 101, 102, 500, 501]
    for version in (2, 3, 4, 5):  # every remaining version is the one committed as it
        table = lance_sql.dataset(uri, version, commit_config=config).to_table()
        assert table.num_rows == 10 + min(version - 1, 3) + (2 if version == 5 else 0)


def test_a_dead_writer_does_not_hold_cleanup_back_for_ever() -> None:
    """A transaction file that no manifest references is a writer in flight only while
    it is fresh: once older than the grace period, cleanup removes versions again."""
    config = CommitConfig()
    uri, store = make_table(ManifestNaming.V2, config)
    others_commit_three(uri, config)
    orphan = transaction_key(1, "dead-writer")
    store.put(orphan, b"")
    ds = lance_sql.dataset(uri)
    assert ds.cleanup_old_versions(older_than=timedelta(0)).old_versions == 1  # 2..4 kept
    assert [r.version for r in list_versions(store)] == [2, 3, 4]
    store.set_modified_ns(orphan, time.time_ns() - int(WRITER_GRACE.total_seconds() * 1e9) - 1)
    assert ds.cleanup_old_versions(older_than=timedelta(0)).old_versions == 2
    assert [r.version for r in list_versions(store)] == [4]


def test_a_stale_hint_over_a_gap_never_leads_a_writer_to_an_old_number() -> None:
    """Cleanup left a gap above a tagged version; the hint still names the tagged one.
    A writer must publish after the newest version, not into the gap."""
    config = CommitConfig()
    uri, store = make_table(ManifestNaming.V2, config)
    others_commit_three(uri, config)  # versions 1..4
    ds = lance_sql.dataset(uri)
    ds.tags.create("keep", 2)
    ds.cleanup_old_versions(older_than=timedelta(0),
        error_if_tagged_old_versions=False)
    assert [r.version for r in list_versions(store)] == [2, 4]
    store.put(LATEST_HINT, json.dumps({"version": 2}).encode())
    lance_sql.write_dataset(pa.table({"id": pa.array([700], pa.int64())}), uri, mode="append")
    assert [r.version for r in list_versions(store)] == [2, 4, 5]
    writer = lance_sql.dataset(uri, 4)
    writer.delete("id = 3")  # from an old handle: the delete also lands after the newest
    assert [r.version for r in list_versions(store)] == [2, 4, 5, 6]
    assert ids(uri, config) == [i for i in range(10) if i != 3] + [100, 101, 102, 700]


def test_cleanup_repairs_a_stale_hint_it_would_strand_below_a_gap() -> None:
    """A racing writer left the hint at an older version; that version is tagged, so
    cleanup keeps it and removes the versions above it: readers probing upward from the
    hint would stop at the tagged version. Cleanup points the hint at the newest."""
    config = CommitConfig()
    uri, store = make_table(ManifestNaming.V2, config)
    others_commit_three(uri, config)  # versions 1..4
    lance_sql.dataset(uri).tags.create("keep", 2)
    store.put(LATEST_HINT, json.dumps({"version": 2}).encode())
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0),
        error_if_tagged_old_versions=False)
    assert [r.version for r in list_versions(store)] == [2, 4]
    assert lance_sql.dataset(uri).version == 4
