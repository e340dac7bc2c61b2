"""The commit loop: publish a transaction as the next version, or find out why not.

1. Write the transaction file ``_transactions/{read_version}-{uuid}.txn``.
2. Build the next manifest (pure :func:`apply_transaction`) and create its file
   with ``put_if_absent``: of two writers racing for one version, one wins.
3. On losing, read the winners' transactions and decide: rebase on top of them
   and retry, or fail with a typed conflict.

The rules in :func:`check_conflict` are the table core's conservative subset;
the transactions work replaces them with the full per-pair rule set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lance_sql.errors import IncompatibleConflict, RetryableConflict
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.format.naming import ManifestNaming, transaction_key
from lance_sql.io.store import ObjectStore
from lance_sql.table.apply import apply_transaction
from lance_sql.table.operations import Append, Delete, Overwrite, Transaction
from lance_sql.table.versions import (
    VersionRef,
    list_versions,
    load_manifest,
    load_transaction_bytes,
    write_hint,
)


@dataclass(frozen=True)
class CommitConfig:
    max_retries: int = 20
    timeout_s: float = 30.0


def commit_transaction(
    store: ObjectStore,
    previous: Manifest | None,
    naming: ManifestNaming,
    txn: Transaction,
    *,
    data_format: str = "2.0",
    stable_row_ids: bool = False,
    config: CommitConfig = CommitConfig(),
) -> Manifest:
    """Commit ``txn`` (built against ``previous``); returns the new manifest."""
    txn_bytes = txn.encode()
    txn_key = transaction_key(txn.read_version, txn.uuid)
    store.put(txn_key, txn_bytes)
    try:
        return _commit_loop(store, previous, naming, txn, txn_bytes, txn_key, data_format,
                            stable_row_ids, config)
    except BaseException:
        store.delete(txn_key)  # a commit that did not happen leaves no transaction file
        raise


def _commit_loop(
    store: ObjectStore,
    previous: Manifest | None,
    naming: ManifestNaming,
    txn: Transaction,
    txn_bytes: bytes,
    txn_key: str,
    data_format: str,
    stable_row_ids: bool,
    config: CommitConfig,
) -> Manifest:
    txn_file = txn_key.split("/", 1)[1]
    deadline = time.monotonic() + config.timeout_s
    base = previous
    for attempt in range(config.max_retries + 1):
        version = (base.version if base is not None else 0) + 1
        manifest = apply_transaction(
            base,
            txn,
            version,
            time.time_ns(),
            transaction_file=txn_file,
            data_format=data_format,
            stable_row_ids=stable_row_ids,
        )
        data = ManifestCodec.encode(manifest, txn_bytes)
        if store.put_if_absent(naming.key(version), data):
            write_hint(store, version)
            return manifest
        if attempt == config.max_retries or time.monotonic() > deadline:
            break
        base = _rebase(store, base, txn)
    raise RetryableConflict(
        f"{store.uri}: gave up committing {txn.operation.name} after "
        f"{config.max_retries} retries; other writers keep winning"
    )


def _rebase(store: ObjectStore, base: Manifest | None, txn: Transaction) -> Manifest:
    """Check every version committed since ``base`` and return the newest manifest."""
    if base is None:
        raise IncompatibleConflict(f"{store.uri}: another writer created the table first")
    newer = [r for r in list_versions(store) if r.version > base.version]
    for ref in newer:
        check_conflict(txn, _winner_operation(store, ref), ref.version, store.uri)
    return load_manifest(store, newer[-1])


def _winner_operation(store: ObjectStore, ref: VersionRef) -> object | None:
    data = load_transaction_bytes(store, ref)
    if data is None:
        return None
    try:
        return Transaction.decode(data, f"{store.uri}/{ref.key}").operation
    except Exception:  # noqa: BLE001 - an operation we cannot read counts as a conflict
        return None


def check_conflict(txn: Transaction, winner: object | None, version: int, uri: str) -> None:
    """Raise if ``txn`` cannot be rebased over ``winner`` (committed as ``version``)."""
    ours = txn.operation
    if isinstance(ours, Overwrite):
        return  # an overwrite replaces everything; what happened before does not matter
    if winner is None:
        raise RetryableConflict(
            f"{uri}: version {version} has no readable transaction; cannot prove "
            f"{ours.name} is compatible"
        )
    if isinstance(winner, Overwrite):
        raise IncompatibleConflict(
            f"{uri}: version {version} overwrote the table while this {ours.name} was running"
        )
    if isinstance(ours, Append):
        return
    if isinstance(ours, Delete) and isinstance(winner, Delete):
        touched = {f.id for f in winner.updated_fragments} | set(winner.deleted_fragment_ids)
        mine = {f.id for f in ours.updated_fragments} | set(ours.deleted_fragment_ids)
        if touched & mine:
            raise RetryableConflict(
                f"{uri}: version {version} deleted rows from fragments {sorted(touched & mine)} "
                "that this delete also changes; retry the delete"
            )
        return
    if isinstance(ours, Delete) and isinstance(winner, Append):
        return
    raise RetryableConflict(
        f"{uri}: {ours.name} conflicts with concurrent {type(winner).__name__.lower()} "
        f"at version {version}"
    )
