"""A strong-consistency LSM view kept warm between point lookups of one ``MemWal`` handle.

A strong read must see the latest base version, this process's MemTables and every
region's latest manifest. Re-reading all of that costs more than a lookup itself, so
:class:`WarmView` keeps what cannot have changed and revalidates the rest per read,
without any staleness window:

* the base table and its MemWAL index are reused while the table's latest version is
  the one they were opened at, the same manifest file (one version probe per read; any
  commit, a merge or an index refresh, opens the new version). The probe is a listing of
  ``_versions/`` while the last one found few manifests (one call, against the hint's
  read and four existence checks: ~half the time on a local disk; the same answer, a
  listing being what the hint stands in for), plus one ``stat`` of the manifest to tell
  it from one of the same number written later; else ``dataset()``'s probe from the hint,
  whose ``stat`` tells that already. On a local disk the listing is skipped while
  ``_versions/`` keeps the stamp (inode, modification and change times) it had just
  before the last probe that found the view current (the manifest's ``stat`` stays):
  every commit, hint write or collection adds, renames or removes an entry there,
  which moves the directory's times. The stamp is trusted only once settled (its times
  some 50 ms before it was taken), as git trusts its index: a change in the same clock
  tick as the one before could leave the times as they were;
* the MemTables are taken from the in-process writer registry on every read;
* the regions are listed on every read (one listing); what a listing resolves to
  (regions' spec ids and values, fixed once a region exists) is reused while the same
  names come back, and only when every region listed had a manifest;
* a region's manifest is reused while it is still the latest: version ``v`` is latest
  when ``v + 1`` does not exist and ``v`` still does (versions are written one after
  another and the garbage collector removes the oldest first, so a missing ``v + 1``
  with ``v`` present cannot hide a newer version). Two existence checks instead of
  reading the hint, probing and decoding the manifest; none while the manifest
  directory keeps the settled stamp it had before the last such check (as above).

State lives in the handle (no module-level cache); it is only ever a shortcut to the
same answer the cold path gives, which the tests check after flushes, merges, GC and
new regions. Region ids are derived from region values and region manifests are
numbered from 1, so a table deleted and written again at the same place has the same
names: when the base moves to another version, the state is kept only while the manifest
of the version it was built over is still the same file (one ``stat``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import cast

from lance_sql.errors import NotFoundError
from lance_sql.format.memwal import RegionManifest
from lance_sql.format.naming import VERSIONS_DIR
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.read.planner import LsmView
from lance_sql.memwal.region_log import RegionLog
from lance_sql.table.dataset import dataset
from lance_sql.table.meta.versions import (
    VersionRef,
    handler_latest,
    latest_version,
    list_versions,
)
from lance_sql.table.txn.commit import CommitConfig

__all__ = ["WarmState", "WarmView"]

# A warm view probes the latest version by listing _versions/ while the last listing held
# at most this many manifests (a table whose old versions are collected); above, from the
# hint (its cost does not grow with the versions kept).
LISTED_VERSIONS_MAX = 32


_UNSTAMPED = object()  # latest_manifest's stamp when the caller took none


@dataclass
class WarmState:
    """What a warm view remembers between reads (see the module docstring)."""

    # the listing's names -> what they resolved to (region, spec id, values), and the
    # settled stamp of _mem_wal/ taken before those names were listed (None: none)
    listing: tuple[tuple[str, ...], list, Hashable | None] | None = None
    # (that listing, spec id, positions of the spec's regions in it, {region values as a
    # Python tuple: position})
    routes: tuple[list, int, list[int], dict] | None = None
    manifests: dict[uuid.UUID, RegionManifest] = field(default_factory=dict)
    # region -> (the manifest remembered there, the keys of its version's successor and
    # of itself: the two names each read probes, spelt once, and the settled stamp of
    # the manifest directory taken before a probe found it latest, or None)
    _probes: dict[uuid.UUID, tuple[RegionManifest, list[str], Hashable | None]] = field(
        default_factory=dict)

    def latest_manifest(self, log: RegionLog, stamp: tuple[Hashable, bool] | None | object
                        = _UNSTAMPED) -> RegionManifest | None:
        """The region's latest manifest, reusing the one seen last when still latest: its
        manifest directory unchanged since a probe found it latest, else by a probe.
        ``stamp``: that directory's stamp as the caller just took it (default: taken
        here)."""
        known = self.manifests.get(log.region_id)
        if known is not None:
            probe = self._probes.get(log.region_id)  # one read: threads may replace it
            if probe is None or probe[0] is not known:
                paths = log.paths
                probe = (known, [paths.manifest(known.version + 1),
                                 paths.manifest(known.version)], None)
                self._probes[log.region_id] = probe
            taken = log.store.directory_stamp(log.paths.manifest_dir) \
                if stamp is _UNSTAMPED else cast("tuple[Hashable, bool] | None", stamp)
            if taken is not None and probe[2] is not None and probe[2] == taken[0]:
                return known  # no manifest written or removed there since
            following, still = log.store.exists_many(probe[1])
            if not following and still:
                if taken is not None and taken[1]:
                    self._probes[log.region_id] = (known, probe[1], taken[0])
                return known
        manifest = log.latest()
        if manifest is not None:
            self.manifests[log.region_id] = manifest
        return manifest


class WarmView:
    """Hands out strong LSM views of one table, reusing a warm one when still current."""

    def __init__(self, uri: str, commit_config: CommitConfig) -> None:
        self.uri = uri
        self.commit_config = commit_config
        self.state = WarmState()
        # the base version the state was built over: (store, its manifest's key, the
        # manifest file's identity)
        self._anchor: tuple[ObjectStore, str, Hashable] | None = None
        self._view: LsmView | None = None
        # (what the caller named the base version by, the view over it): see view_of
        self._keyed: tuple[object, LsmView] | None = None
        # manifests the last listing of _versions/ found (None: none listed yet)
        self._listed_versions: int | None = None
        # (the warm view, the stamp of _versions/ taken just before a probe found that
        # view's version the latest, settled): while _versions/ keeps that stamp, the
        # view is current without a probe (see ObjectStore.directory_stamp)
        self._current: tuple[LsmView, Hashable] | None = None

    def view(self) -> LsmView:
        """A strong view as of now: the warm one refreshed, or a new one after a commit."""
        warm = self._view
        if warm is not None:
            store = warm.base.store
            ref = handler_latest(store, self.commit_config.handler)
            stamp = None
            if ref is None:  # (a handler that tracks versions itself is asked alone)
                # _versions/ as it was when the warm view was last found current: nothing
                # was committed since (a stat instead of a listing; see the module doc),
                # and its manifest is still the file it was (not one copied over it)
                stamp, same = self._versions_stamp(store)
                current = self._current  # one read: another thread may replace it
                if stamp is not None and current is not None and current[0] is warm and \
                        current[1] == stamp[0] and same():
                    return warm.fresh()
                ref = self._listed_latest(store)
            if ref is not None and ref.version == warm.base.version and \
                    self._same_file(ref.identity):
                if stamp is not None and stamp[1]:  # taken before the probe, settled
                    self._current = (warm, stamp[0])
                return warm.fresh()
        self._keep_state_if_same_table()
        view = LsmView(dataset(self.uri, commit_config=self.commit_config),
                       consistency="strong", warm=self.state)
        self._anchor_at(view)
        self._view = view
        # reads run on fresh copies, this one too: the kept view holds no read's
        # MemTables (a closed writer's would stay in memory while the view is warm)
        return view.fresh()

    def _versions_stamp(self, store: ObjectStore
                        ) -> tuple[tuple[Hashable, bool] | None, Callable[[], bool]]:
        """(the stamp of ``_versions/``, :meth:`_same_file` to call after it): when the
        anchor's manifest lies there, its identity comes from the same walk as the
        stamp (one ``lstat`` of it instead of a walk to it)."""
        anchor = self._anchor  # one read: another thread may replace it
        prefix = VERSIONS_DIR + "/"
        if anchor is None or anchor[0] is not store or not anchor[1].startswith(prefix):
            return store.directory_stamp(VERSIONS_DIR), self._same_file
        stamp, seen = store.stamp_and_identities(VERSIONS_DIR, [anchor[1][len(prefix):]],
                                                 if_stamped=True)
        found = seen[0]
        return stamp, lambda: found is not None and found == anchor[2]

    def _same_file(self, seen: Hashable = None) -> bool:
        """Whether the manifest the state was built over (the anchor) is still the file it
        was, not one of a table written again since at the same place; ``seen``: its
        identity as a probe just saw it (None: stat it now). True without an anchor."""
        anchor = self._anchor
        if anchor is None:
            return True
        store, key, identity = anchor
        if seen is None:  # a listing saw the name only
            try:
                seen = store.identity(key)
            except NotFoundError:
                return False
        return seen is None or seen == identity

    def _listed_latest(self, store: ObjectStore) -> VersionRef | None:
        """The table's latest version in ``_versions/`` (see the module docstring; the
        caller asked the commit handler first); None: no manifest."""
        listed = self._listed_versions
        if listed is not None and listed > LISTED_VERSIONS_MAX:
            return latest_version(store)  # from the hint (the handler was asked above)
        refs = list_versions(store)
        self._listed_versions = len(refs)  # (threads may race here: either count is right)
        return refs[-1] if refs else None

    def view_of(self, base: object, open: Callable[[], LsmView | None]) -> LsmView | None:
        """A strong view over the base version the caller resolved as the latest, named by
        the object ``base`` (SQL's catalog passes the manifest it resolved; the very same
        object means the same version of the same table): the warm view refreshed when it
        was made for that object, else ``open()``'s view (None: no LSM view), kept warm."""
        keyed = self._keyed  # one read: another thread may replace it meanwhile
        if keyed is not None and keyed[0] is base:
            return keyed[1].fresh()
        self._keep_state_if_same_table()
        view = open()
        if view is None:
            return None
        self._anchor_at(view)
        self._keyed = (base, view)
        # reads run on fresh copies, the first too: the kept view holds no read's moment
        # (a closed writer's MemTables would stay in memory while the view is warm)
        return view.fresh()

    def _keep_state_if_same_table(self) -> None:
        """A new state when the base version the state was built over is gone or is
        another file now (the table was deleted and written again at the same place)."""
        if not self._same_file():
            self.state = WarmState()
            self._anchor = None

    def _anchor_at(self, view: LsmView) -> None:
        base = view.base
        try:
            self._anchor = (base.store, base.manifest_key, base.store.identity(base.manifest_key))
        except NotFoundError:
            self._anchor = None
