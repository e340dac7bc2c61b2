"""The one door every write goes through: :class:`WriteContext`.

A write reads the newest version of a table, writes files, and commits one transaction
built on what it read. The context holds the parts of that every write path needs and
must not get wrong on its own: the store, the :class:`CommitConfig` (its handler decides
how a version is published, e.g. through an external manifest store), the version read
(found as writers must find it, through that handler, and refused when it carries writer
feature flags we do not know), and :meth:`WriteContext.commit`, which runs the commit
loop of :mod:`lance_sql.table.txn.commit` (retries, rebases over concurrent commits,
typed conflicts). :meth:`WriteContext.staging` removes the files a failed write left,
unless its version was published before the failure (then they are live).

``write_dataset``, the operations in ``ops/``, index maintenance, distributed write jobs
and MemWAL all commit through it; it is immutable, so a write that commits twice (a
compaction reserves fragment ids, then rewrites) builds both commits on the version it
read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

from lance_sql.errors import NotFoundError, RetryableConflict, VersionCleanedUpError
from lance_sql.format.datafile import DEFAULT_DATA_FORMAT
from lance_sql.format.feature_flags import check_writable
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import ManifestNaming
from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import VersionRef, latest_committed, load_manifest
from lance_sql.table.txn.commit import (
    CommitConfig,
    WinnerCheck,
    commit_transaction,
    committed_version,
)
from lance_sql.table.txn.operations import Operation, Transaction
from lance_sql.table.txn.rebase import AffectedRows


@dataclass
class Staged:
    """Files a write put in the store that no version references yet."""

    store: ObjectStore
    keys: list[str] = field(default_factory=list)
    aborts: list[Callable[[], None]] = field(default_factory=list)

    def add(self, *keys: str) -> None:
        self.keys.extend(keys)

    def on_abort(self, abort: Callable[[], None]) -> None:
        """Run ``abort`` (e.g. a fragment writer's) when the write fails."""
        self.aborts.append(abort)

    def discard(self) -> None:
        """Remove everything staged; best effort (the write failed already)."""
        for abort in self.aborts:
            try:
                abort()
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        for key in self.keys:
            try:
                self.store.delete(key)
            except Exception:  # noqa: BLE001 - a leftover file is harmless
                pass


@dataclass(frozen=True)
class WriteContext:
    """One write against one table: where, how it commits, and the version it read.

    ``base`` is the version read (None: there is no table yet); ``naming`` the table's
    manifest naming scheme (for a new table, the one it will be created with).
    """

    store: ObjectStore
    config: CommitConfig
    base: Manifest | None
    naming: ManifestNaming

    @classmethod
    def open(cls, store: ObjectStore, config: CommitConfig | None = None, *,
             naming: ManifestNaming = ManifestNaming.V2, must_exist: bool = False,
             known: tuple[VersionRef, Manifest] | None = None) -> WriteContext:
        """A context on the newest committed version of the table at ``store``.

        The newest version is the handler's record, else a listing (never the hint);
        ``known`` is a (version, manifest) the caller already holds, used when it is the
        newest. Without a table: NotFoundError if ``must_exist``, else a context that
        creates one with manifest naming ``naming``.
        """
        config = config or CommitConfig()
        ref = latest_committed(store, config.handler)
        if ref is None:
            if must_exist:
                raise NotFoundError(f"no Lance table at {store.uri}")
            return cls(store, config, None, naming)
        return cls(store, config, cls._load(store, ref, known), ref.naming)

    @classmethod
    def pinned(cls, store: ObjectStore, config: CommitConfig | None, version: int | None,
               naming: ManifestNaming) -> WriteContext:
        """A context on ``version`` (None: no table), read earlier by a distributed job;
        its commit rebases over whatever was committed since."""
        config = config or CommitConfig()
        if version is None:
            return cls(store, config, None, naming)
        ref = VersionRef(version, naming)
        if not config.handler.exists(store, ref.key, version):  # repairs a half-finished one
            raise NotFoundError(f"version {version} of {store.uri} does not exist")
        return cls(store, config, cls._load(store, ref, None), naming)

    @staticmethod
    def _load(store: ObjectStore, ref: VersionRef,
              known: tuple[VersionRef, Manifest] | None) -> Manifest:
        manifest = known[1] if known is not None and known[0] == ref else \
            load_manifest(store, ref)
        check_writable(manifest.writer_feature_flags, f"{store.uri}/{ref.key}")
        return manifest

    @property
    def table(self) -> Manifest:
        """The version read; NotFoundError when there is no table."""
        if self.base is None:
            raise NotFoundError(f"no Lance table at {self.store.uri}")
        return self.base

    @property
    def read_version(self) -> int:
        return self.base.version if self.base is not None else 0

    def commit(self, operation: Operation, *, read_version: int | None = None,
               properties: Mapping[str, str] | None = None, data_format: str | None = None,
               stable_row_ids: bool = False, affected_rows: AffectedRows | None = None,
               source: Manifest | None = None,
               check_winners: WinnerCheck | None = None) -> Manifest:
        """Commit ``operation`` on the version read; returns the manifest committed.

        Conflicts come back typed (:class:`RetryableConflict`, :class:`IncompatibleConflict`);
        see :func:`commit_transaction` for ``affected_rows``, ``source`` and
        ``check_winners``. ``data_format`` defaults to the table's (new tables: the
        default format); ``read_version`` to the version read (a Clone names its source's).
        """
        txn = Transaction(read_version=self.read_version if read_version is None
                          else read_version, operation=operation,
                          properties=dict(properties or {}))
        if data_format is None:
            data_format = self.base.data_format if self.base is not None else \
                DEFAULT_DATA_FORMAT
        return commit_transaction(
            self.store, self.base, self.naming, txn, config=self.config,
            data_format=data_format, stable_row_ids=stable_row_ids,
            affected_rows=affected_rows, source=source, check_winners=check_winners)

    def staging(self) -> AbstractContextManager[Staged]:
        """:func:`staging` in the table's store."""
        return staging(self.store)


@contextmanager
def staging(store: ObjectStore) -> Iterator[Staged]:
    """Collect what a write puts in ``store`` before its commit; on failure it is removed,
    unless the failure came after the version was published (:func:`committed_version`),
    when every file of it is live."""
    staged = Staged(store)
    try:
        yield staged
    except BaseException as exc:
        if committed_version(exc) is None:
            staged.discard()
        raise


@contextmanager
def cleanup_is_retryable() -> Iterator[None]:
    """Around a write (also a decorator): the version it read, the newest then, was
    superseded and removed by ``cleanup_old_versions`` while the write read its files.
    That is a RetryableConflict (the write may succeed on the new newest version), not a
    VersionCleanedUpError, which says a version asked for is gone for good."""
    try:
        yield
    except VersionCleanedUpError as exc:
        if exc.files_of_version is None:
            raise
        raise RetryableConflict(
            f"{exc}; this write read version {exc.files_of_version}, removed meanwhile: "
            "retry") from exc
