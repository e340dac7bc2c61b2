"""The commit loop: publish a transaction as the next version, or find out why not.

1. Write the transaction file ``_transactions/{read_version}-{uuid}.txn`` (a restore of
   version v names it ``{v - 1}-...``: ``cleanup_old_versions`` then keeps v, whose files
   the restore will reference, and the restore checks that v exists only after that).
2. Find the newest committed version (the handler's record, else a listing of
   ``_versions/``; never the hint). If versions were committed since our base, read
   the transaction of every one of them and let the pure rules of
   :mod:`lance_sql.table.txn.conflicts` decide: rebuild on the newest version (after
   merging deletion vectors if the rules ask for it), or fail with
   :class:`RetryableConflict` / :class:`IncompatibleConflict`. A version among them
   that ``cleanup_old_versions`` already removed is a retryable conflict: what it
   changed is unknown; a newest version needing writer features we do not know is
   refused (UnsupportedFeatureError).
3. Build the next manifest (pure :func:`apply_transaction`: fragment ids continue from
   ``max_fragment_id``, row ids from ``next_row_id``) as newest + 1 and publish it
   through the commit handler (put-if-not-exists by default): of two writers racing
   for one version, one wins. Targeting newest + 1 (not read version + 1) is what
   keeps a version number that cleanup freed from being written a second time.
4. Retry, with jittered backoff, up to ``max_retries`` times and ``timeout_s`` seconds.

A commit that fails leaves nothing behind: its transaction files and any deletion
files a rebase wrote are removed (data files are the caller's to remove).
"""

from __future__ import annotations

import operator
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lance_sql.errors import (
    FormatError,
    IncompatibleConflict,
    NotFoundError,
    RetryableConflict,
    TableExistsError,
    UnsupportedFeatureError,
)
from lance_sql.format.datafile import DEFAULT_DATA_FORMAT
from lance_sql.format.feature_flags import check_writable
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.format.naming import ManifestNaming, transaction_key
from lance_sql.io.commit import DEFAULT_HANDLER, CommitHandler
from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import (
    VersionRef,
    find_version,
    handler_latest,
    list_versions,
    load_manifest,
    load_transaction_bytes,
    write_hint,
)
from lance_sql.table.txn.apply import apply_transaction
from lance_sql.table.txn.conflicts import (
    Compatible,
    Incompatible,
    Rebase,
    Retryable,
    rebase_state,
    resolve,
    without_stale,
)
from lance_sql.table.txn.operations import Clone, CreateIndex, Delete, Restore, Transaction, Update
from lance_sql.table.txn.rebase import AffectedRows, merge_deletions

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
    data_format: str = DEFAULT_DATA_FORMAT,
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
    except BaseException as exc:
        if loop.published is None:
            loop.clean_up()
        else:  # e.g. Ctrl-C while writing the hint: the version is live, keep its files
            setattr(exc, _COMMITTED, loop.published.version)
            exc.add_note(f"lance_sql: version {loop.published.version} of {store.uri} was "
                         "committed before this error; its files are kept")
        raise


_COMMITTED = "lance_sql_committed_version"


def committed_version(exc: BaseException) -> int | None:
    """The version a commit published before ``exc`` interrupted it (None: none was).

    A writer's clean-up after a failed commit must check this: the files of a published
    version are live, and deleting them would break the table.
    """
    return getattr(exc, _COMMITTED, None)


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
        self.published: Manifest | None = None  # set the moment our manifest is live

    def run(self, previous: Manifest | None, txn: Transaction,
            source: Manifest | None) -> Manifest:
        original = txn
        op = txn.operation
        txn_bytes = self._write_txn(txn)
        if isinstance(op, Restore):  # after the transaction file: see the module docstring
            found = load_manifest(self.store, find_version(self.store, op.version,
                                                           self.handler))
            source = found if source is None else source
        state = rebase_state(txn, previous, self.affected_rows is not None)
        self.initial = state.initial
        deadline = time.monotonic() + self.config.timeout_s
        base = previous
        lost_at = 0  # the version number we last failed to publish
        rebases = 0  # each rebase over newer versions is one retry
        while True:
            latest_ref, listed = self._latest(base, lost_at)
            if base is not None and latest_ref.version > base.version:
                if rebases == self.config.max_retries or time.monotonic() > deadline:
                    break
                rebases += 1
                decision = resolve(txn, self._winners(base, latest_ref, listed), state)
                if isinstance(decision, Retryable):
                    raise RetryableConflict(f"{self.store.uri}: {decision.reason}")
                if isinstance(decision, Incompatible):
                    raise IncompatibleConflict(f"{self.store.uri}: {decision.reason}")
                latest = self._load_latest(latest_ref)
                # a winner may have turned on a writer feature we do not know
                check_writable(latest.writer_feature_flags, f"{self.store.uri}/{latest_ref.key}")
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
                    # a winner rewrote indexed values in place: our index must not claim
                    # the fragments it changed
                    assert isinstance(txn.operation, CreateIndex)
                    txn = replace(txn, operation=without_stale(txn.operation,
                                                               decision.unindexed))
                    txn_bytes = self._write_txn(txn)
            version = self._target_version(base, txn)
            manifest = apply_transaction(
                base, txn, version, time.time_ns(),
                transaction_file=self.txn_keys[-1].split("/", 1)[1],
                data_format=self.data_format, stable_row_ids=self.stable_row_ids,
                source=source,
            )
            data = ManifestCodec.encode(manifest, txn_bytes)
            key = self.naming.key(version)
            try:
                won = self.handler.commit(self.store, key, version, data)
            except BaseException:
                if self._is_ours(key, data):  # interrupted after the manifest landed
                    self.published = manifest
                raise
            if won:
                self.published = manifest
                try:  # best effort from here: the version is committed
                    write_hint(self.store, version)
                    self._forget_superseded(original, txn)
                except Exception:  # noqa: BLE001 - a stale hint or spare file is harmless
                    pass
                return manifest
            if base is None:
                raise IncompatibleConflict(
                    f"{self.store.uri}: another writer created the table first"
                )
            self._backoff(rebases if lost_at else 0)
            lost_at = version
        raise RetryableConflict(
            f"{self.store.uri}: gave up committing {txn.operation.name} after "
            f"{self.config.max_retries} retries or {self.config.timeout_s}s; other writers "
            "keep winning"
        )

    def _is_ours(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly the manifest we tried to publish."""
        try:
            return self.store.exists(key) and self.store.read(key) == data
        except Exception:  # noqa: BLE001 - cannot tell: assume it did not land
            return False

    def _latest(self, base: Manifest | None, lost_at: int
                ) -> tuple[VersionRef, frozenset[int] | None]:
        """The newest committed version, found before every attempt (and every version
        listed, unless the handler tracks versions itself): the next version is published
        only after it, so a number that cleanup has freed is never reused."""
        listed = None
        latest = handler_latest(self.store, self.handler)
        if latest is None:
            refs = list_versions(self.store)
            listed = frozenset(map(operator.attrgetter("version"), refs))
            latest = refs[-1] if refs else None
        if base is None:
            if latest is not None:
                raise IncompatibleConflict(
                    f"{self.store.uri}: another writer created the table first")
            return VersionRef(0, self.naming), listed
        if latest is None or latest.version < base.version:
            newest = "no version" if latest is None else f"version {latest.version}"
            raise RetryableConflict(
                f"{self.store.uri}: the newest is {newest}, older than version "
                f"{base.version} that this commit read (the table was removed or "
                "re-created); retry")
        if latest.version < lost_at:  # published but not listed yet (eventual consistency)
            raise RetryableConflict(f"{self.store.uri}: version {lost_at} is taken but "
                                    "cannot be read yet; retry")
        if latest.naming is not self.naming:
            raise IncompatibleConflict(
                f"{self.store.uri}: the table's manifests changed naming scheme meanwhile")
        return latest, listed

    def _load_latest(self, ref: VersionRef) -> Manifest:
        try:
            return load_manifest(self.store, ref)
        except NotFoundError:  # superseded and cleaned up while we looked
            raise RetryableConflict(f"{self.store.uri}: version {ref.version} was removed by "
                                    "cleanup_old_versions while this commit read it; "
                                    "retry") from None

    @staticmethod
    def _target_version(base: Manifest | None, txn: Transaction) -> int:
        if isinstance(txn.operation, Clone):
            if base is not None:
                raise TableExistsError("the clone target already holds a table")
            return txn.operation.ref_version
        return (base.version if base is not None else 0) + 1

    def _write_txn(self, txn: Transaction) -> bytes:
        data = txn.encode()
        # the oldest version this commit needs, less one (see the module docstring)
        needs_after = txn.read_version
        if isinstance(txn.operation, Restore):
            needs_after = max(0, min(needs_after, txn.operation.version - 1))
        key = transaction_key(needs_after, txn.uuid)
        if self.txn_keys and self.txn_keys[-1] == key:
            key = transaction_key(needs_after, f"{txn.uuid}-{len(self.txn_keys)}")
        self.store.put(key, data)
        if self.txn_keys:  # the previous attempt's file no longer describes this commit
            self.store.delete(self.txn_keys[-1])
        self.txn_keys.append(key)
        return data

    def _winners(self, base: Manifest, latest: VersionRef, listed: frozenset[int] | None,
                 ) -> list[tuple[int, Transaction | None]]:
        """Every version after ``base`` up to ``latest`` with its transaction (None if
        unreadable). If one of them was removed by cleanup, the commit cannot prove itself
        compatible with it: a retryable conflict, never a guess."""
        winners: list[tuple[int, Transaction | None]] = []
        for version in range(base.version + 1, latest.version + 1):
            ref = VersionRef(version, self.naming)
            present = (version in listed) if listed is not None else \
                self.handler.exists(self.store, ref.key, version) and self.store.exists(ref.key)
            if not present:
                raise RetryableConflict(
                    f"{self.store.uri}: version {version}, committed after version "
                    f"{base.version} that this commit read, was removed by "
                    "cleanup_old_versions, so its changes cannot be checked against this "
                    "commit; retry")
            winners.append((version, self._read_txn(ref)))
        return winners

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
