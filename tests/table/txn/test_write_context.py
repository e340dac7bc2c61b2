"""The write context every write path commits through: commits in the in-memory store,
rebases and typed conflicts, clean-up of staged files, and that every write path honours
the table's commit handler (external manifest store) and its writer feature flags."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    IncompatibleConflict,
    NotFoundError,
    RetryableConflict,
    UnsupportedFeatureError,
)
from lance_sql.format.fragment import BasePath
from lance_sql.format.manifest import ManifestCodec
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.schema import LanceSchema
from lance_sql.io.external import ExternalManifestCommit, MemoryManifestStore
from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.index_builder import refresh_index
from lance_sql.table.meta.versions import latest_version, list_versions
from lance_sql.table.txn.commit import CommitConfig, committed_version
from lance_sql.table.txn.operations import Append, Delete, Overwrite, UpdateConfig
from lance_sql.table.txn.writer import WriteContext
from lance_sql.table.write.fragments import with_primary_key, write_fragments
from lance_sql.table.write.jobs import (
    JobFiles,
    commit_job,
    open_for_write,
    write_job_fragments,
)

_names = itertools.count()
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
TABLE_SCHEMA = LanceSchema.from_arrow(SCHEMA)


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "v": [f"v{i}" for i in range(start, start + n)]})


def _memory() -> tuple[str, MemoryStore]:
    name = f"context{next(_names)}"
    MemoryStore.reset(name)
    return f"memory://{name}", MemoryStore(name)


def _append(ctx: WriteContext, rows: pa.Table) -> Append:
    return Append(tuple(write_fragments(ctx.store, ctx.table.schema, rows.to_reader())))


def _ids(uri: str) -> list[int]:
    return sorted(lance_sql.dataset(uri).to_table(columns=["id"])["id"].to_pylist())


# ---------------------------------------------------------------------------- commits
def test_a_context_creates_and_appends_in_the_memory_store() -> None:
    uri, store = _memory()
    ctx = WriteContext.open(store, naming=ManifestNaming.V1)
    assert ctx.base is None and ctx.read_version == 0
    with pytest.raises(NotFoundError):
        ctx.table  # noqa: B018 - the property raises
    with pytest.raises(NotFoundError):
        WriteContext.open(store, must_exist=True)
    frags = write_fragments(store, TABLE_SCHEMA, _rows(0, 5).to_reader())
    created = ctx.commit(Overwrite(tuple(frags), TABLE_SCHEMA))
    assert created.version == 1 and latest_version(store).naming is ManifestNaming.V1
    ctx = WriteContext.open(store)
    assert ctx.base == created and ctx.naming is ManifestNaming.V1  # the table's, not V2
    appended = ctx.commit(_append(ctx, _rows(5, 3)), properties={"who": "test"})
    assert appended.version == 2 and _ids(uri) == list(range(8))
    assert lance_sql.dataset(uri).versions()[-1]["operation"] == "append"


def test_a_context_rebases_over_concurrent_commits_and_stays_on_what_it_read() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 4), uri)
    ctx = WriteContext.open(store)
    lance_sql.write_dataset(_rows(10, 2), uri, mode="append")  # wins version 2
    first = ctx.commit(_append(ctx, _rows(20, 1)))
    second = ctx.commit(_append(ctx, _rows(30, 1)))  # built on version 1 again: rebases
    assert (first.version, second.version) == (3, 4)
    assert ctx.base is not None and ctx.base.version == 1  # immutable
    assert _ids(uri) == [0, 1, 2, 3, 10, 11, 20, 30]


def test_a_conflicting_commit_is_a_typed_error_and_leaves_nothing() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 4), uri)
    ctx = WriteContext.open(store)
    frags = _append(ctx, _rows(50, 2))
    lance_sql.write_dataset(_rows(7, 1), uri, mode="overwrite")  # wins version 2
    before = set(store.keys())
    with pytest.raises(IncompatibleConflict), ctx.staging() as staged:
        staged.add(*(d.key for f in frags.fragments for d in f.files))
        ctx.commit(frags)
    left = set(store.keys()) - before
    assert not any(k.startswith("_transactions/") for k in left)
    assert not any(d.key in store.keys() for f in frags.fragments for d in f.files)
    assert _ids(uri) == [7] and lance_sql.dataset(uri).version == 2


def test_two_deletes_of_one_row_one_wins_the_other_is_retryable() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 4), uri)
    ctx = WriteContext.open(store)
    frag = ctx.table.fragments[0]
    lance_sql.dataset(uri).delete("id = 1")
    with pytest.raises(RetryableConflict):
        ctx.commit(Delete((), (frag.id,), "id >= 0"))
    assert _ids(uri) == [0, 2, 3]


def test_creating_a_table_another_writer_created_first_is_incompatible() -> None:
    uri, store = _memory()
    ctx = WriteContext.open(store)
    lance_sql.write_dataset(_rows(0, 1), uri)
    frags = write_fragments(store, TABLE_SCHEMA, _rows(5, 1).to_reader())
    with pytest.raises(IncompatibleConflict, match="created the table first"):
        ctx.commit(Overwrite(tuple(frags), TABLE_SCHEMA))
    assert _ids(uri) == [0]


def test_staged_files_survive_a_failure_after_the_version_was_published() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 4), uri)
    ctx = WriteContext.open(store)
    op = _append(ctx, _rows(9, 1))
    keys = [d.key for f in op.fragments for d in f.files]

    def interrupt(op_name: str, key: str) -> None:
        if op_name == "put" and "latest_version_hint" in key:
            raise KeyboardInterrupt

    store.add_hook(interrupt)
    with pytest.raises(KeyboardInterrupt) as caught, ctx.staging() as staged:
        staged.add(*keys)
        ctx.commit(op)
    store.clear_hooks()
    assert committed_version(caught.value) == 2
    assert all(store.exists(k) for k in keys)
    assert _ids(uri) == [0, 1, 2, 3, 9]


def test_a_pinned_context_checks_the_version_exists() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 2), uri)
    naming = latest_version(store).naming
    assert WriteContext.pinned(store, None, 1, naming).table.version == 1
    assert WriteContext.pinned(store, None, None, naming).base is None
    with pytest.raises(NotFoundError):
        WriteContext.pinned(store, None, 7, naming)


# ------------------------------------------------ every write path, one commit handler
class RecordingCommit(ExternalManifestCommit):
    """An external manifest store that remembers every version published through it."""

    def __init__(self) -> None:
        super().__init__(MemoryManifestStore())
        self.published: list[tuple[str, int]] = []

    def commit(self, store: ObjectStore, key: str, version: int, data: bytes) -> bool:
        won = super().commit(store, key, version, data)
        if won:
            self.published.append((store.uri, version))
        return won


def _keyed(uri: str, config: CommitConfig) -> lance_sql.LanceDataset:
    data = _rows(0, 40).cast(with_primary_key(SCHEMA, ["id"]))
    return lance_sql.write_dataset(data, uri, max_rows_per_file=10, commit_config=config)


def _job(uri: str, config: CommitConfig | None) -> None:
    target = open_for_write(uri, SCHEMA, overwrite=False, commit_config=config)
    job = JobFiles.new("ctxjob")
    frags, _ = write_job_fragments(uri, target, job, _rows(100, 3).to_batches())
    commit_job(uri, target, job, [[f.to_proto().SerializeToString() for f in frags]],
               overwrite=False, commit_config=config)


# name -> a write on the table at uri opened with config (each commits at least once)
WRITES: dict[str, Callable[[str, CommitConfig], object]] = {
    "append": lambda uri, cfg: lance_sql.write_dataset(_rows(200, 2), uri, mode="append",
                                                       commit_config=cfg),
    "delete": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).delete("id = 3"),
    "update_rows": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).update(
        {"v": "'u'"}, where="id < 3"),
    "update_columns": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).update(
        {"v": "'c'"}, where="id = 5", update_mode="rewrite_columns"),
    "merge_insert": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    .execute(_rows(8, 4)),
    "add_columns": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).add_columns(
        {"w": "id * 2"}),
    "add_null_column": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .add_columns(pa.field("n", pa.int32())),
    "alter_rename": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .alter_columns({"path": "v", "name": "v2"}),
    "alter_cast": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .alter_columns({"path": "id", "data_type": pa.int64(), "nullable": False}),
    "compact": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).optimize
    .compact_files(target_rows_per_fragment=1000),
    "restore": lambda uri, cfg: lance_sql.dataset(uri, 1, commit_config=cfg).restore(),
    "config": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).update_config(
        {"k": "v"}),
    "metadata": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).update_metadata(
        {"k": "v"}),
    "schema_metadata": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .update_schema_metadata({"k": "v"}),
    "field_metadata": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .update_field_metadata({"v": {"k": "v"}}),
    "add_bases": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg).add_bases(
        [BasePath(id=5, path="/elsewhere")]),
    "create_index": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .create_scalar_index("id", "BTREE"),
    "optimize_indices": lambda uri, cfg: lance_sql.write_dataset(
        _rows(400, 2), uri, mode="append", commit_config=cfg).optimize.optimize_indices(),
    "commit_index_metadata": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .commit_index_metadata([]),
    "drop_index": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .drop_index("id_idx"),
    "drop_columns": lambda uri, cfg: lance_sql.dataset(uri, commit_config=cfg)
    .drop_columns(["v"]),
    "job": _job,
    "memwal_initialize": lambda uri, cfg: mem_wal_index.initialize(
        lance_sql.dataset(uri, commit_config=cfg)),
    "memwal_refresh": lambda uri, cfg: refresh_index(lance_sql.dataset(uri,
                                                                       commit_config=cfg)),
    "overwrite": lambda uri, cfg: lance_sql.write_dataset(_rows(0, 40), uri, mode="overwrite",
                                                          commit_config=cfg),
}
# Writes that need an earlier one: an index to optimise or drop, a MemWAL to refresh.
NEEDS = {"optimize_indices": "create_index", "drop_index": "create_index",
         "memwal_refresh": "memwal_initialize"}


def test_every_write_path_publishes_through_the_tables_commit_handler(tmp_path: Path) -> None:
    """A table kept in an external manifest store: every write publishes its versions
    through that store. A path that bypassed it (default put-if-absent) would leave a
    version in _versions/ the store never saw."""
    handler = RecordingCommit()
    config = CommitConfig(handler=handler)
    uri = str(tmp_path / "t.lance")
    _keyed(uri, config)
    for name, write in WRITES.items():
        before = len(handler.published)
        write(uri, config)
        assert len(handler.published) > before, f"{name} committed nothing through it"
    clone_uri = str(tmp_path / "clone.lance")
    lance_sql.dataset(uri, commit_config=config).shallow_clone(clone_uri)
    store = LocalStore(uri)
    listed = [(store.uri, r.version) for r in list_versions(store)]
    assert sorted(p for p in handler.published if p[0] == store.uri) == listed
    assert handler.manifest_store.latest(store.uri)[0] == listed[-1][1]
    clone_store = LocalStore(clone_uri)
    assert [(clone_store.uri, r.version) for r in list_versions(clone_store)] == [
        p for p in handler.published if p[0] == clone_store.uri]


# ------------------------------------------------------------- writer feature flags
def _flag_latest(uri: str) -> int:
    """Commit a copy of the latest version that needs a writer feature we do not know."""
    store = open_store(uri)
    ref = latest_version(store)
    raw = store.read(ref.key)
    manifest = ManifestCodec.decode(raw, ref.key)
    flagged = manifest.evolve(version=ref.version + 1,
                              writer_feature_flags=manifest.writer_feature_flags | 1 << 20)
    assert store.put_if_absent(ref.naming.key(ref.version + 1), ManifestCodec.encode(
        flagged, ManifestCodec.decode_transaction(raw, ref.key)))
    return ref.version + 1


def _snapshot(uri: str) -> set[str]:
    root = Path(uri)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("write", [w for w in WRITES if w not in NEEDS])
def test_every_write_path_refuses_unknown_writer_flags(tmp_path: Path, write: str) -> None:
    uri = str(tmp_path / "t.lance")
    config = CommitConfig()
    _keyed(uri, config)
    if write == "restore":
        lance_sql.write_dataset(_rows(300, 1), uri, mode="append")
    flagged = _flag_latest(uri)
    before = _snapshot(uri)
    with pytest.raises(UnsupportedFeatureError, match="writer feature"):
        WRITES[write](uri, config)
    assert latest_version(open_store(uri)).version == flagged
    assert _snapshot(uri) == before  # nothing written, or all of it removed


def test_a_commit_refuses_to_rebase_onto_a_version_with_unknown_writer_flags() -> None:
    uri, store = _memory()
    lance_sql.write_dataset(_rows(0, 4), uri)
    ctx = WriteContext.open(store)
    before = set(store.keys())
    raw = store.read(latest_version(store).key)
    flagged = ManifestCodec.decode(raw, "v1").evolve(version=2, writer_feature_flags=1 << 20)
    key = latest_version(store).naming.key(2)
    assert store.put_if_absent(key, ManifestCodec.encode(
        flagged, ManifestCodec.decode_transaction(raw, "v1")))
    with pytest.raises(UnsupportedFeatureError):
        ctx.commit(UpdateConfig())
    assert set(store.keys()) == before | {key}  # its transaction file removed too
