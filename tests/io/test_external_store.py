"""External manifest store: the SQLite store, the four-step commit and the reader repair."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.io import LocalStore, MemoryStore
from lance_sql.io.external import (
    ExternalManifestCommit,
    MemoryManifestStore,
    SqliteManifestStore,
    final_key,
    is_staged,
)
from lance_sql.table.txn.commit import CommitConfig

_names = itertools.count()


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64())})


@pytest.fixture(params=["sqlite", "memory"])
def manifest_store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        return SqliteManifestStore(tmp_path / "manifests.db")
    return MemoryManifestStore()


def test_store_operations(manifest_store) -> None:
    assert manifest_store.get("t", 1) is None and manifest_store.latest("t") is None
    assert manifest_store.put_if_not_exists("t", 1, "_versions/a.manifest-x")
    assert not manifest_store.put_if_not_exists("t", 1, "_versions/b.manifest")
    assert manifest_store.put_if_not_exists("t", 2, "_versions/c.manifest")
    assert manifest_store.put_if_not_exists("other", 5, "_versions/d.manifest")
    manifest_store.put_if_exists("t", 1, "_versions/a.manifest")
    assert manifest_store.get("t", 1) == "_versions/a.manifest"
    assert manifest_store.latest("t") == (2, "_versions/c.manifest")
    with pytest.raises(lance_sql.NotFoundError):
        manifest_store.put_if_exists("t", 3, "x")
    manifest_store.delete("t")
    assert manifest_store.latest("t") is None and manifest_store.latest("other") is not None


def test_one_winner_per_version_across_threads(manifest_store) -> None:
    barrier = threading.Barrier(8)
    wins: list[int] = []

    def race(i: int) -> None:
        barrier.wait()
        if manifest_store.put_if_not_exists("t", 7, f"p{i}"):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and manifest_store.get("t", 7) == f"p{wins[0]}"


def _claim(path: str, version: int, queue) -> None:
    store = SqliteManifestStore(path)
    queue.put(store.put_if_not_exists("t", version, f"p{os.getpid()}"))


@pytest.mark.slow
def test_one_winner_per_version_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    SqliteManifestStore(path)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(path, v, queue)) for v in (1, 1, 1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = [queue.get(timeout=10) for _ in procs]
    assert sorted(results) == [False, False, True, True]


def test_table_committed_through_the_store(tmp_path: Path, manifest_store) -> None:
    uri = str(tmp_path / "t.lance")
    config = CommitConfig(handler=ExternalManifestCommit(manifest_store))
    lance_sql.write_dataset(_row(0), uri, commit_config=config)
    for i in range(1, 4):
        lance_sql.write_dataset(_row(i), uri, mode="append", commit_config=config)
    ds = lance_sql.dataset(uri, commit_config=config)
    assert ds.version == 4 and ds.count_rows() == 4
    store = LocalStore(uri)
    assert manifest_store.latest(store.uri) == (4, ds._ref.key)
    assert not [n for n in os.listdir(Path(uri) / "_versions") if "manifest-" in n]
    # a reader that knows nothing of the external store sees the same table
    assert lance_sql.dataset(uri).to_table() == ds.to_table()
    import lance

    assert lance.dataset(uri).to_table() == ds.to_table()


def test_concurrent_writers_through_sqlite(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    config = CommitConfig(handler=ExternalManifestCommit(SqliteManifestStore(tmp_path / "m.db")),
                          max_retries=100)
    lance_sql.write_dataset(_row(-1), uri, commit_config=config)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        for i in range(10):
            try:
                lance_sql.write_dataset(_row(w * 100 + i), uri, mode="append",
                                        commit_config=config)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ds = lance_sql.dataset(uri, commit_config=config)
    assert ds.version == 41 and ds.count_rows() == 41
    assert len({f.id for f in ds.manifest.fragments}) == 41


# --------------------------------------------------------------------------- crashes
MUTATING = {"put", "put_if_absent", "delete", "put_if_not_exists", "put_if_exists"}


class Crash(Exception):
    pass


def _setup() -> tuple[str, MemoryStore, MemoryManifestStore, CommitConfig]:
    name = f"ext{next(_names)}"
    MemoryStore.reset(name)
    manifests = MemoryManifestStore()
    config = CommitConfig(handler=ExternalManifestCommit(manifests))
    uri = f"memory://{name}"
    lance_sql.write_dataset(pa.table({"id": pa.array(range(5), pa.int64())}), uri,
                            commit_config=config)
    return uri, MemoryStore(name), manifests, config


def _hook_both(store: MemoryStore, manifests: MemoryManifestStore, hook) -> None:
    store.add_hook(lambda op, key: hook(op, key))
    manifests.hooks.append(lambda op, uri, version: hook(op, f"ext:{version}"))


def _append(uri: str, config: CommitConfig) -> None:
    lance_sql.write_dataset(_row(100), uri, mode="append", commit_config=config)


def _commit_steps() -> list[tuple[str, str]]:
    uri, store, manifests, config = _setup()
    log: list[tuple[str, str]] = []
    _hook_both(store, manifests, lambda op, key: log.append((op, key)) if op in MUTATING
               else None)
    _append(uri, config)
    return log


STEPS = _commit_steps()


def test_the_four_steps_happen_in_order() -> None:
    ops = [(op, key.split("/")[-1] if "/" in key else key) for op, key in STEPS]
    versions = [i for i, (op, key) in enumerate(STEPS)
                if ("_versions/" in key and "hint" not in key) or "ext:" in key]
    names = [STEPS[i][0] for i in versions]
    assert names == ["put", "put_if_not_exists", "put_if_absent", "put_if_exists", "delete"], ops
    staged = STEPS[versions[0]][1]
    assert is_staged(staged) and final_key(staged) == STEPS[versions[2]][1]


@pytest.mark.parametrize("step", range(len(STEPS)))
def test_crash_at_every_step_then_repair(step: int) -> None:
    uri, store, manifests, config = _setup()
    counter = itertools.count()
    dead: list[bool] = []

    def crash(op: str, key: str) -> None:
        if op in MUTATING and (dead or next(counter) == step):
            dead.append(True)
            raise Crash(f"{op} {key}")

    _hook_both(store, manifests, crash)
    try:
        _append(uri, config)
    except Exception:  # noqa: BLE001 - the crash, or a clean-up failing after it
        pass
    else:
        assert "hint" in STEPS[step][1]  # only the best-effort hint write may fail silently
    store.clear_hooks()
    manifests.hooks.clear()
    recorded = manifests.get(store.uri, 2)
    plain = lance_sql.dataset(uri)  # knows nothing of the external store
    if recorded is None:  # the commit point (step 2) was not reached
        assert plain.version == 1
    else:
        assert plain.version in (1, 2)  # at most one version behind
        aware = lance_sql.dataset(uri, commit_config=config)  # repairs
        assert aware.version == 2 and aware.count_rows() == 6
        assert manifests.get(store.uri, 2) == aware._ref.key
        leftovers = [k for k in store.keys() if "manifest-" in k]
        assert not leftovers or STEPS[step][0] == "delete"  # crashed removing the staged copy
        aware.cleanup_old_versions(retain_versions=2, delete_unverified=True)
        assert not [k for k in store.keys() if "manifest-" in k]
        assert lance_sql.dataset(uri).version == 2  # now plain readers see it too
    _append(uri, config)  # the next writer goes on normally
    final = lance_sql.dataset(uri, commit_config=config)
    assert final.count_rows() == (7 if recorded else 6)
    assert lance_sql.dataset(uri).version == final.version


def test_next_writer_repairs_a_half_finished_commit() -> None:
    """A writer that loses the race for version 2 to a half-finished commit finishes it."""
    uri, store, manifests, config = _setup()
    step_two = next(i for i, (op, _) in enumerate(STEPS) if op == "put_if_not_exists")
    counter = itertools.count()
    dead: list[bool] = []

    def crash(op: str, key: str) -> None:
        if op in MUTATING and (dead or next(counter) == step_two + 1):
            dead.append(True)
            raise Crash(key)

    stale = lance_sql.dataset(uri, commit_config=config)
    _hook_both(store, manifests, crash)
    with pytest.raises(Exception):  # noqa: B017
        _append(uri, config)
    store.clear_hooks()
    manifests.hooks.clear()
    assert lance_sql.dataset(uri).version == 1  # the copy never happened
    stale.delete("id = 0")  # built on version 1: loses version 2, repairs it, rebases
    assert stale.version == 3
    assert lance_sql.dataset(uri).version == 3
    assert sorted(lance_sql.dataset(uri).to_table()["id"].to_pylist()) == [1, 2, 3, 4, 100]


def test_reader_refuses_when_the_staged_manifest_is_gone() -> None:
    uri, store, manifests, config = _setup()
    manifests.put_if_not_exists(store.uri, 2, "_versions/18446744073709551613.manifest-x")
    with pytest.raises(FormatError, match="refusing"):
        lance_sql.dataset(uri, commit_config=config)
    assert lance_sql.dataset(uri).version == 1


def test_the_readme_example_imports_from_lance_sql(tmp_path: Path) -> None:
    config = lance_sql.CommitConfig(handler=lance_sql.ExternalManifestCommit(
        lance_sql.SqliteManifestStore(str(tmp_path / "m.db"))))
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"a": [1]}), uri, commit_config=config)
    lance_sql.dataset(uri, commit_config=config).delete("a = 1")
    assert lance_sql.dataset(uri).to_table().num_rows == 0  # readers without it too
    assert {"CommitConfig", "ExternalManifestCommit", "SqliteManifestStore"} <= set(
        lance_sql.__all__)
