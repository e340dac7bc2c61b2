"""What one cleanup reads: the manifests it sets aside itself are not read back (only a
dead cleanup's, set aside before the writer grace, are), and each removed version's
files are gathered once."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import VERSIONS_DIR
from lance_sql.io.local import LocalStore
from lance_sql.table.ops import cleanup
from lance_sql.table.ops.cleanup import SET_ASIDE, FragmentKeys


def _table(tmp_path: Path, versions: int) -> str:
    uri = str(tmp_path / "t.lance")
    for v in range(versions):
        lance_sql.write_dataset(pa.table({"id": pa.array([v], pa.int64())}), uri,
                                mode="create" if v == 0 else "append")
    return uri


def test_own_set_aside_manifests_are_not_read_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, 8)
    read_keys: list[str] = []
    real_read = LocalStore.read

    def read(self: LocalStore, key: str) -> bytes:
        read_keys.append(key)
        return real_read(self, key)

    gathered: list[int] = []
    real_files = cleanup.referenced_files

    def referenced_files(store: LocalStore, manifest: Manifest, *memo: FragmentKeys
                         ) -> set[str]:
        gathered.append(manifest.version)
        return real_files(store, manifest, *memo)

    monkeypatch.setattr(LocalStore, "read", read)
    monkeypatch.setattr(cleanup, "referenced_files", referenced_files)
    stats = lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert stats.old_versions == 7
    assert not [k for k in read_keys if k.endswith(SET_ASIDE)]
    assert sorted(gathered) == list(range(1, 9))  # each version once (8: the kept one)
    ds = lance_sql.dataset(uri)
    assert [v["version"] for v in ds.versions()] == [8] and ds.count_rows() == 8


def test_a_running_cleanups_set_aside_manifest_is_left_alone(tmp_path: Path) -> None:
    """Another cleanup set version 2 aside a moment ago (it may still put it back): this
    one neither reads nor removes it. (A dead cleanup's: test_cleanup_races.py.)"""
    uri = _table(tmp_path, 4)
    versions = Path(uri) / VERSIONS_DIR
    name = lance_sql.dataset(uri, version=2).manifest_key.rpartition("/")[2]
    aside = f"{name}.{time.time_ns()}{SET_ASIDE}"
    os.rename(versions / name, versions / aside)
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    left = os.listdir(versions)
    assert aside in left and [n for n in left if n.endswith(SET_ASIDE)] == [aside]
    assert lance_sql.dataset(uri).count_rows() == 4


def test_shared_fragments_are_gathered_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Version k holds fragments 0..k-1, the same decoded objects as version k-1's: each
    fragment's keys are built once in a cleanup, not once per version holding it."""
    uri = _table(tmp_path, 10)
    built: list[int] = []
    real_keys = cleanup._fragment_keys

    def fragment_keys(frag: Fragment) -> tuple[str, ...]:
        built.append(frag.id)
        return real_keys(frag)

    monkeypatch.setattr(cleanup, "_fragment_keys", fragment_keys)
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert sorted(built) == list(range(10))
