"""The commit loop under scripted interleavings and injected crashes (in-memory store).

Interleavings: a hook on the loser's manifest write runs the winner's whole commit first,
so every rebase / retry / incompatible case happens deterministically.

Crashes: a successful commit is recorded operation by operation; then, for every
mutating step, the same commit is repeated with the store "dying" at that step (that
operation and every later one fail, so no clean-up code can run either). Afterwards the
table must be at a valid version with all committed data, and the next writer must
commit normally.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import IncompatibleConflict, RetryableConflict
from lance_sql.format.fragment import DeletionFile
from lance_sql.format.manifest import ManifestCodec
from lance_sql.io import MemoryStore
from lance_sql.table.meta.versions import latest_version, list_versions
from lance_sql.table.txn.commit import CommitConfig, commit_transaction
from lance_sql.table.txn.operations import Transaction, Update
from lance_sql.table.write.fragments import write_fragments

_names = itertools.count()
MUTATING = {"put", "put_if_absent", "rename_if_absent", "delete"}


class Crash(Exception):
    """The process died here."""


def table(rows: int = 40, per_file: int = 10) -> tuple[str, MemoryStore]:
    name = f"faults{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    data = pa.table({"id": pa.array(range(rows), pa.int64()),
                     "s": [f"s{i}" for i in range(rows)]})
    lance_sql.write_dataset(data, uri, max_rows_per_file=per_file)
    return uri, MemoryStore(name)


def ids(uri: str, version: int | None = None) -> list[int]:
    return sorted(lance_sql.dataset(uri, version).to_table(columns=["id"])["id"].to_pylist())


def when_committing(store: MemoryStore, winner: Callable[[], object]) -> list:
    """Run ``winner`` just before the first manifest write that happens after this call."""
    fired: list = []
    started: list[bool] = []

    def hook(op: str, key: str) -> None:
        if op == "put_if_absent" and key.startswith("_versions/") and not started:
            started.append(True)
            fired.append(winner())

    store.add_hook(hook)
    return fired


# ------------------------------------------------------------------------ interleavings
def test_append_rebases_over_append() -> None:
    uri, store = table()
    when_committing(store, lambda: lance_sql.write_dataset(
        pa.table({"id": [100], "s": ["w"]}), uri, mode="append"))
    ds = lance_sql.write_dataset(pa.table({"id": [200], "s": ["l"]}), uri, mode="append")
    store.clear_hooks()
    assert ds.version == 3 and ids(uri) == list(range(40)) + [100, 200]
    frags = [f.id for f in lance_sql.dataset(uri).manifest.fragments]
    assert frags == [0, 1, 2, 3, 4, 5]


def test_delete_rebases_by_merging_deletion_vectors() -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).delete("id = 11"))
    loser.delete("id = 12 or id = 35")
    store.clear_hooks()
    assert loser.version == 3
    assert ids(uri) == [i for i in range(40) if i not in (11, 12, 35)]
    frag = lance_sql.dataset(uri).manifest.fragments[1]
    assert frag.deletion_file.num_deleted_rows == 2 and frag.deletion_file.read_version == 2
    # the merged file is the only deletion file of fragment 1 besides the winner's
    deletion_keys = [k for k in store.keys() if k.startswith(f"{store.name}/_deletions/1-")
                     or k.startswith("_deletions/1-")]
    assert len(deletion_keys) == 2
    txn = lance_sql.dataset(uri).versions()[-1]
    assert txn["operation"] == "delete"


def test_delete_of_the_same_row_is_retryable_and_leaves_nothing() -> None:
    uri, store = table()
    before = set(store.keys())
    loser = lance_sql.dataset(uri)
    fired = when_committing(store, lambda: lance_sql.dataset(uri).delete("id = 11"))
    with pytest.raises(RetryableConflict, match="both modified rows"):
        loser.delete("id = 11 or id = 12")
    store.clear_hooks()
    assert fired and loser.version == 1
    assert ids(uri) == [i for i in range(40) if i != 11]
    winner_files = {k for k in store.keys() if k not in before}
    assert all(not k.startswith("_transactions/1-") or k.endswith(".txn")
               for k in winner_files)
    assert len([k for k in winner_files if k.startswith("_deletions/")]) == 1
    assert len([k for k in winner_files if k.startswith("_transactions/")]) == 1


def test_update_against_concurrent_rewrite_is_retryable() -> None:
    """The specification's example: fragment 3 is compacted away while an update of its
    rows is being committed."""
    uri, store = table()
    ds = lance_sql.dataset(uri)
    base = ds.manifest
    moved = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
        base.schema.to_arrow(), [pa.record_batch({"id": [30], "s": ["new"]})]))
    old = base.fragments[3]
    update = Update(updated_fragments=(old.with_deletion(DeletionFile("arrow", 1, 9, 1)),),
                    new_fragments=tuple(moved), fields_modified=(1,))
    when_committing(store, lambda: lance_sql.dataset(uri).optimize.compact_files())
    with pytest.raises(RetryableConflict, match="rewrite"):
        commit_transaction(store, base, latest_version(store).naming,
                           Transaction(base.version, update), affected_rows={3: [0]})
    store.clear_hooks()
    assert ids(uri) == list(range(40))
    assert len(lance_sql.dataset(uri).manifest.fragments) == 1


def test_delete_against_concurrent_restore_is_incompatible() -> None:
    uri, store = table()
    lance_sql.write_dataset(pa.table({"id": [50, 51], "s": ["a", "b"]}), uri, mode="append")
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri, version=1).restore())
    with pytest.raises(IncompatibleConflict, match="restore"):
        loser.delete("id = 50")
    store.clear_hooks()
    assert ids(uri) == list(range(40))


def test_append_against_concurrent_overwrite_is_incompatible() -> None:
    uri, store = table()
    when_committing(store, lambda: lance_sql.write_dataset(
        pa.table({"id": [7], "s": ["o"]}), uri, mode="overwrite"))
    with pytest.raises(IncompatibleConflict, match="overwrite"):
        lance_sql.write_dataset(pa.table({"id": [8], "s": ["a"]}), uri, mode="append")
    store.clear_hooks()
    assert ids(uri) == [7]
    assert not [k for k in store.keys() if k.startswith("_transactions/2-")]


@pytest.mark.parametrize(("theirs", "outcome"), [({"other": "1"}, None),
                                                 ({"mine": "2"}, IncompatibleConflict),
                                                 ({"mine": None}, IncompatibleConflict)])
def test_concurrent_config_updates(theirs: dict, outcome: type | None) -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).update_config(theirs))
    if outcome is None:
        assert loser.update_config({"mine": "1"}) == {"mine": "1", "other": "1"}
    else:
        with pytest.raises(outcome):
            loser.update_config({"mine": "1"})
    store.clear_hooks()


def test_drop_columns_against_concurrent_add_columns_is_retryable() -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).add_columns({"x": "id + 1"}))
    with pytest.raises(RetryableConflict, match="merge"):
        loser.drop_columns(["s"])
    store.clear_hooks()
    assert lance_sql.dataset(uri).schema.names == ["id", "s", "x"]


def test_add_columns_against_concurrent_append_is_retryable_and_cleans_up() -> None:
    uri, store = table()
    before = {k for k in store.keys() if k.startswith("data/")}
    loser = lance_sql.dataset(uri)
    appended = when_committing(store, lambda: lance_sql.write_dataset(
        pa.table({"id": [99], "s": ["x"]}), uri, mode="append"))
    with pytest.raises(RetryableConflict):
        loser.add_columns({"x": "id * 2"})
    store.clear_hooks()
    new_files = {f.files[0].key for f in appended[0].manifest.fragments[-1:]}
    assert {k for k in store.keys() if k.startswith("data/")} == before | new_files


def test_winner_without_transaction_is_a_conflict() -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)

    def bare_commit() -> None:  # a writer that keeps no transaction at all
        m = replace(loser.manifest, version=2, transaction_file="")
        store.put_if_absent(latest_version(store).naming.key(2), ManifestCodec.encode(m, None))

    when_committing(store, bare_commit)
    with pytest.raises(RetryableConflict, match="no readable transaction"):
        loser.delete("id = 3")
    store.clear_hooks()


def test_bounded_retries() -> None:
    uri, store = table()
    config = CommitConfig(max_retries=3, backoff_base_s=0, backoff_max_s=0)
    loser = lance_sql.dataset(uri, commit_config=config)
    wins: list[int] = []
    busy: list[bool] = []

    def always_win(op: str, key: str) -> None:
        if op == "put_if_absent" and key.startswith("_versions/") and not busy:
            busy.append(True)
            wins.append(1)
            lance_sql.write_dataset(pa.table({"id": [1000 + len(wins)], "s": ["w"]}), uri,
                                    mode="append")
            busy.clear()

    store.add_hook(always_win)
    with pytest.raises(RetryableConflict, match="after 3 retries"):
        loser.delete("id = 1")
    store.clear_hooks()
    assert len(wins) == 4  # the first attempt and three retries each lost
    versions = lance_sql.dataset(uri).version
    assert len([k for k in store.keys() if k.startswith("_transactions/")]) == versions


def test_timeout() -> None:
    uri, store = table()
    config = CommitConfig(timeout_s=0.0)
    when_committing(store, lambda: lance_sql.write_dataset(
        pa.table({"id": [1], "s": ["w"]}), uri, mode="append"))
    with pytest.raises(RetryableConflict, match="gave up"):
        lance_sql.write_dataset(pa.table({"id": [2], "s": ["l"]}), uri, mode="append",
                                commit_config=config)
    store.clear_hooks()


# ---------------------------------------------------------------------- crash injection
def _recorded(store: MemoryStore, action: Callable[[], object]) -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = []
    store.add_hook(lambda op, key: log.append((op, key)) if op in MUTATING else None)
    action()
    store.clear_hooks()
    return log


def _crash_at(store: MemoryStore, step: int) -> None:
    count = itertools.count()
    dead: list[bool] = []

    def hook(op: str, key: str) -> None:
        if op not in MUTATING:
            return
        if dead or next(count) == step:
            dead.append(True)
            raise Crash(f"{op} {key}")

    store.add_hook(hook)


ACTIONS: dict[str, Callable[[str], object]] = {
    "append": lambda uri: lance_sql.write_dataset(pa.table({"id": [900], "s": ["n"]}), uri,
                                                  mode="append"),
    "delete": lambda uri: lance_sql.dataset(uri).delete("id = 13 or id = 25"),
    "compact": lambda uri: lance_sql.dataset(uri).optimize.compact_files(),
    "add_columns": lambda uri: lance_sql.dataset(uri).add_columns({"x": "id * 2"}),
    "overwrite": lambda uri: lance_sql.write_dataset(pa.table({"id": [1], "s": ["o"]}), uri,
                                                     mode="overwrite"),
    "restore": lambda uri: lance_sql.dataset(uri, version=1).restore(),
    "update": lambda uri: lance_sql.dataset(uri).update({"s": "'u'"}, where="id = 5"),
}
EXPECTED = {"append": list(range(40)) + [900],
            "delete": [i for i in range(40) if i not in (13, 25)],
            "compact": list(range(40)), "add_columns": list(range(40)),
            "overwrite": [1], "restore": list(range(40)), "update": list(range(40))}


def _steps(name: str) -> list[int]:
    uri, store = table()
    if name == "restore":
        lance_sql.write_dataset(pa.table({"id": [77], "s": ["r"]}), uri, mode="append")
    return list(range(len(_recorded(store, lambda: ACTIONS[name](uri)))))


CRASHES = [(name, step) for name in ACTIONS for step in _steps(name)]


@pytest.mark.parametrize(("name", "step"), CRASHES, ids=[f"{n}-{s}" for n, s in CRASHES])
def test_crash_at_every_step(name: str, step: int) -> None:
    uri, store = table()
    if name == "restore":
        lance_sql.write_dataset(pa.table({"id": [77], "s": ["r"]}), uri, mode="append")
    before_version = lance_sql.dataset(uri).version
    before = ids(uri)
    _crash_at(store, step)
    try:
        ACTIONS[name](uri)
        crashed = False
    except Crash:
        crashed = True
    except Exception as exc:  # noqa: BLE001 - clean-up after the crash failed too: still the crash
        crashed = isinstance(exc.__context__, Crash) or "Crash" in repr(exc)
    store.clear_hooks()
    ds = lance_sql.dataset(uri)
    assert crashed or ds.version > before_version  # the hint write after a commit may fail
    assert ds.version in (before_version, before_version + 1, before_version + 2)
    committed = ds.version > before_version
    if name == "compact" and ds.version == before_version + 1:
        committed = False  # only the ReserveFragments landed: same rows
    assert ids(uri) == (EXPECTED[name] if committed else before)
    for version in [r.version for r in list_versions(store)]:  # every version readable
        lance_sql.dataset(uri, version).to_table()
    # the next writer just works
    schema = ds.schema
    row = {f.name: pa.array([5000] if f.name == "id" else [None], f.type) for f in schema}
    nxt = lance_sql.write_dataset(pa.table(row, schema=schema), uri, mode="append")
    assert nxt.version == ds.version + 1
    assert ids(uri) == sorted((EXPECTED[name] if committed else before) + [5000])
    # and whatever the crash left behind can be swept
    lance_sql.dataset(uri).cleanup_old_versions(retain_versions=1, delete_unverified=True)
    assert ids(uri) == sorted((EXPECTED[name] if committed else before) + [5000])


def test_update_rebases_over_a_delete_of_other_rows() -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).delete("id = 15"))
    assert loser.update({"s": "'changed'"}, where="id = 12 or id = 30") == {
        "num_rows_updated": 2}
    store.clear_hooks()
    t = lance_sql.dataset(uri).to_table()
    assert sorted(t["id"].to_pylist()) == [i for i in range(40) if i != 15]
    assert {r["id"] for r in t.to_pylist() if r["s"] == "changed"} == {12, 30}


def test_update_of_a_concurrently_deleted_row_is_retryable() -> None:
    uri, store = table()
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).delete("id = 12"))
    with pytest.raises(RetryableConflict, match="both modified rows"):
        loser.update({"s": "'changed'"}, where="id = 12")
    store.clear_hooks()
    assert ids(uri) == [i for i in range(40) if i != 12]
