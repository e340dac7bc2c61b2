"""Spark writes commit through the table's write context: its commit handler (an external
manifest store) publishes every version, and unknown writer flags are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import lance_sql
from lance_sql.errors import UnsupportedFeatureError
from lance_sql.format.manifest import ManifestCodec
from lance_sql.io.external import ExternalManifestCommit, MemoryManifestStore, SqliteManifestStore
from lance_sql.io.local import LocalStore
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.spark import write_dataset
from lance_sql.table.meta.versions import latest_version, list_versions
from lance_sql.table.txn.commit import CommitConfig


class RecordingCommit(ExternalManifestCommit):
    """An external manifest store that remembers every version published through it."""

    def __init__(self) -> None:
        super().__init__(MemoryManifestStore())
        self.published: list[int] = []

    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        won = super().commit(store, key, version, data)
        if won:
            self.published.append(version)
        return won


def _frame(spark, start: int, n: int):
    return spark.range(start, start + n, numPartitions=2).selectExpr("id", "cast(id as string) v")


def test_spark_writes_publish_through_the_tables_commit_handler(spark, uri: str) -> None:
    handler = RecordingCommit()
    config = CommitConfig(handler=handler)
    write_dataset(_frame(spark, 0, 100), uri, commit_config=config)
    write_dataset(_frame(spark, 100, 10), uri, mode="append", commit_config=config)
    ds = write_dataset(_frame(spark, 0, 5), uri, mode="overwrite", commit_config=config)
    assert ds.version == 3 and ds.count_rows() == 5
    assert handler.published == [r.version for r in list_versions(LocalStore(uri))] == [1, 2, 3]
    assert handler.manifest_store.latest(LocalStore(uri).uri)[0] == 3


def test_spark_writes_refuse_unknown_writer_flags(spark, uri: str) -> None:
    lance_sql.write_dataset(_frame(spark, 0, 4).toArrow(), uri)
    store = open_store(uri)
    ref = latest_version(store)
    raw = store.read(ref.key)
    manifest = ManifestCodec.decode(raw, ref.key)
    assert store.put_if_absent(ref.naming.key(2), ManifestCodec.encode(
        manifest.evolve(version=2, writer_feature_flags=1 << 20),
        ManifestCodec.decode_transaction(raw, ref.key)))
    for write in (lambda: write_dataset(_frame(spark, 10, 3), uri, mode="append"),
                  lambda: _frame(spark, 10, 3).write.format("lance").mode("append").save(uri)):
        with pytest.raises(Exception) as caught:  # Spark may wrap it
            write()
        assert isinstance(caught.value, UnsupportedFeatureError) or \
            "writer feature" in str(caught.value)
    assert latest_version(store).version == 2
    assert not list((Path(uri) / "data").glob("job-*"))


def test_the_lance_data_source_commits_through_a_named_manifest_store(
        spark, uri: str, tmp_path: Path) -> None:
    """``df.write.format("lance")`` cannot be handed a CommitConfig object: the option names
    the table's external manifest store, and every version goes through it."""
    db = tmp_path / "manifests.db"
    _frame(spark, 0, 20).write.format("lance").option("commitConfig", f"sqlite:{db}") \
        .mode("overwrite").save(uri)
    _frame(spark, 20, 5).write.format("lance").option("commitConfig", f"sqlite:{db}") \
        .mode("append").save(uri)
    store = SqliteManifestStore(db)
    assert store.latest(LocalStore(uri).uri)[0] == 2
    config = CommitConfig(handler=ExternalManifestCommit(store))
    assert lance_sql.dataset(uri, commit_config=config).count_rows() == 25
    with pytest.raises(Exception) as caught:  # Spark may wrap it
        _frame(spark, 0, 1).write.format("lance").option("commitConfig", "no_such_module:x") \
            .mode("append").save(uri)
    assert "commitConfig" in str(caught.value)
