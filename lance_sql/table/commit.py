"""The commit loop: publish a transaction as the next version, or find out why not.

1. Write the transaction file ``_transactions/{read_version}-{uuid}.txn``.
2. Build the next manifest (pure :func:`apply_transaction`: fragment ids continue from
   ``max_fragment_id``, row ids from ``next_row_id``) and publish it through the commit
   handler (put-if-not-exists by default): of two writers racing for one version, one
   wins.
3. On losing, read the transactions of every version committed since our base (found by
   probing the versions after it, so no listing), and let the pure rules of
   :mod:`lance_sql.table.conflicts` decide: rebuild on the newest version (after
   merging deletion vectors if the rules ask for it), or fail with
   :class:`RetryableConflict` / :class:`IncompatibleConflict`.
4. Retry, with jittered backoff, up to ``max_retries`` times and ``timeout_s`` seconds.

A commit that fails leaves nothing behind: its transaction files and any deletion
files a rebase wrote are removed (data files are the caller's to remove).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lance_sql.errors import (
    FormatError,
    IncompatibleConflict,
    InvalidInputError,
    NotFoundError,
    RetryableConflict,
    UnsupportedFeatureError,
)
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.format.naming import ManifestNaming, transaction_key
from lance_sql.io.commit import DEFAULT_HANDLER, CommitHandler
from lance_sql.io.store import ObjectStore
from lance_sql.table.apply import apply_transaction
from lance_sql.table.conflicts import (
    Compatible,
    Incompatible,
    Rebase,
    Retryable,
    rebase_state,
    resolve,
    without_stale,
)
from lance_sql.table.operations import Clone, CreateIndex, Delete, Restore, Transaction, Update
from lance_sql.table.rebase import AffectedRows, merge_deletions
from lance_sql.table.versions import (
    VersionRef,
    find_version,
    load_manifest,
    load_transaction_bytes,
    write_hint,
)

# (the manifest we built on, the latest one) -> None, or raises a CommitConflict
WinnerCheck = Callable[[Manifest, Manifest], None]


@dataclass(frozen=True)
class CommitConfig:
    """How hard a commit tries: retries, a deadline, backoff, and the commit handler."""

    max_retries: int = 20
    timeout_s: float = 30.0
    backoff_base_s: float = 0.0005
    backoff_max_s: float = 0.01
    handler: CommitHandler = field(default=DEFAULT_HANDLER)


def commit_transaction(
    store: ObjectStore,
    previous: Manifest | None,
    naming: ManifestNaming,
    txn: Transaction,
    *,
    data_format: str = "2.0",
    stable_row_ids: bool = False,
    config: CommitConfig = CommitConfig(),
    affected_rows: AffectedRows | None = None,
    source: Manifest | None = None,
    check_winners: WinnerCheck | None = None,
) -> Manifest:
    """Commit ``txn`` (built against ``previous``); returns the new manifest.

    ``affected_rows`` (fragment id -> row offsets) lets a Delete/Update rebase over a
    concurrent delete of other rows of the same fragments. ``source`` is the manifest a
    Restore or Clone copies (loaded here for a Restore when not given).
    ``check_winners(base, latest)`` runs before rebasing over commits that won the race,
    for checks the transaction rules cannot make (merge_insert: did a winner insert one
    of our new keys?); it raises a CommitConflict to stop.
    """
    loop = _CommitLoop(store, naming, config, data_format, stable_row_ids, affected_rows)
    loop.check_winners = check_winners
    try:
        return loop.run(previous, txn, source)
    except BaseException:
        loop.clean_up()
        raise


class _CommitLoop:
    def __init__(self, store: ObjectStore, naming: ManifestNaming, config: CommitConfig,
                 data_format: str, stable_row_ids: bool,
                 affected_rows: AffectedRows | None) -> None:
        self.store, self.naming, self.config = store, naming, config
        self.handler = config.handler
        self.data_format, self.stable_row_ids = data_format, stable_row_ids
        self.affected_rows = affected_rows
        self.check_winners: WinnerCheck | None = None
        self.txn_keys: list[str] = []     # transaction files we wrote (last one is current)
        self.rebase_files: list[str] = []  # deletion files merged by rebases

    def run(self, previous: Manifest | None, txn: Transaction,
            source: Manifest | None) -> Manifest:
        original = txn
        op = txn.operation
        if isinstance(op, Restore) and source is None:
            source = load_manifest(self.store, find_version(self.store, op.version,
                                                            self.handler))
        txn_bytes = self._write_txn(txn)
        state = rebase_state(txn, previous, self.affected_rows is not None)
        self.initial = state.initial
        deadline = time.monotonic() + self.config.timeout_s
        base = previous
        for attempt in range(self.config.max_retries + 1):
            version = self._target_version(base, txn)
            manifest = apply_transaction(
                base, txn, version, time.time_ns(),
                transaction_file=self.txn_keys[-1].split("/", 1)[1],
                data_format=self.data_format, stable_row_ids=self.stable_row_ids,
                source=source,
            )
            data = ManifestCodec.encode(manifest, txn_bytes)
            if self.handler.commit(self.store, self.naming.key(version), version, data):
                write_hint(self.store, version)
                self._forget_superseded(original, txn)
                return manifest
            if base is None:
                raise IncompatibleConflict(
                    f"{self.store.uri}: another writer created the table first"
                )
            if attempt == self.config.max_retries or time.monotonic() > deadline:
                break
            winners, latest_ref = self._winners(base)
            decision = resolve(txn, winners, state)
            if isinstance(decision, Retryable):
                raise RetryableConflict(f"{self.store.uri}: {decision.reason}")
            if isinstance(decision, Incompatible):
                raise IncompatibleConflict(f"{self.store.uri}: {decision.reason}")
            latest = load_manifest(self.store, latest_ref)
            if self.check_winners is not None:
                self.check_winners(base, latest)
            base = latest
            if isinstance(decision, Rebase) and decision.merge_deletions:
                assert self.affected_rows is not None
                txn = merge_deletions(self.store, base, txn, decision.merge_deletions,
                                      self.affected_rows, self.rebase_files)
                txn_bytes = self._write_txn(txn)
                state = rebase_state(txn, base, True)
            if isinstance(decision, Compatible) and decision.unindexed:
                assert isinstance(txn.operation, CreateIndex)
                txn = replace(txn, operation=without_stale(txn.operation, decision.unindexed))
                txn_bytes = self._write_txn(txn)
            self._backoff(attempt)
        raise RetryableConflict(
            f"{self.store.uri}: gave up committing {txn.operation.name} after "
            f"{self.config.max_retries} retries or {self.config.timeout_s}s; other writers "
            "keep winning"
        )

    @staticmethod
    def _target_version(base: Manifest | None, txn: Transaction) -> int:
        if isinstance(txn.operation, Clone):
            if base is not None:
                raise InvalidInputError("the clone target already holds a table")
            return txn.operation.ref_version
        return (base.version if base is not None else 0) + 1

    def _write_txn(self, txn: Transaction) -> bytes:
        data = txn.encode()
        key = transaction_key(txn.read_version, txn.uuid)
        if self.txn_keys and self.txn_keys[-1] == key:
            key = transaction_key(txn.read_version, f"{txn.uuid}-{len(self.txn_keys)}")
        self.store.put(key, data)
        if self.txn_keys:  # the previous attempt's file no longer describes this commit
            self.store.delete(self.txn_keys[-1])
        self.txn_keys.append(key)
        return data

    def _winners(self, base: Manifest) -> tuple[list[tuple[int, Transaction | None]],
                                                 VersionRef]:
        """Every version after ``base`` with its transaction (None if unreadable)."""
        winners: list[tuple[int, Transaction | None]] = []
        version = base.version + 1
        while self.handler.exists(self.store, self.naming.key(version), version):
            ref = VersionRef(version, self.naming)
            winners.append((version, self._read_txn(ref)))
            version += 1
        if not winners:  # published but not visible yet (eventually consistent listing)
            raise RetryableConflict(f"{self.store.uri}: version {version} is taken but "
                                    "cannot be read yet; retry")
        return winners, VersionRef(version - 1, self.naming)

    def _read_txn(self, ref: VersionRef) -> Transaction | None:
        try:
            data = load_transaction_bytes(self.store, ref)
            if data is None:
                return None
            return Transaction.decode(data, f"{self.store.uri}/{ref.key}")
        except (FormatError, UnsupportedFeatureError, NotFoundError):
            return None

    def _backoff(self, attempt: int) -> None:
        """Jittered exponential backoff; the first retry goes straight away (most races
        are lost by a hair, and the loser has just done the rebase work)."""
        if attempt == 0:
            return
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** min(attempt, 20))
        time.sleep(random.random() * cap)

    def _forget_superseded(self, original: Transaction, final: Transaction) -> None:
        """Deletion files that a rebase replaced (the caller's, or an earlier rebase's)
        are referenced by no version: remove them."""
        if original is final or not isinstance(original.operation, Delete | Update):
            return
        assert isinstance(final.operation, Delete | Update)
        kept = {f.deletion_file.key(f.id) for f in final.operation.updated_fragments
                if f.deletion_file is not None}
        stale = set(self.rebase_files)
        for frag in original.operation.updated_fragments:
            old, initial = frag.deletion_file, self.initial.get(frag.id)
            if old is not None and old.base_id is None and (
                    initial is None or initial.deletion_file != old):
                stale.add(old.key(frag.id))  # written for this commit, not inherited
        for key in stale - kept:
            self.store.delete(key)
        self.rebase_files.clear()

    def clean_up(self) -> None:
        for key in self.txn_keys + self.rebase_files:
            try:
                self.store.delete(key)
            except Exception:  # noqa: BLE001 - best effort; the commit already failed
                pass
