"""A region's manifest versions: find the latest, commit the next, claim the region.

Versions are immutable files written put-if-absent, so of two processes committing the
same version exactly one wins. The latest version is found with existence checks
(HEAD requests on object stores) from the hint in ``version_hint.json`` upward, not with a
listing; a listing is only the fallback when the hinted version no longer exists (old
versions are garbage collected).

Writers own a region by epoch: claiming commits the next version with the epoch raised by
one; a writer whose epoch is below the latest version's has been fenced and must stop
(:class:`~lance_sql.errors.WriterFencedError`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from lance_sql.errors import FormatError, InvalidInputError, NotFoundError, WriterFencedError
from lance_sql.format.memwal import RegionManifest
from lance_sql.format.naming import parse_version_hint
from lance_sql.io.store import ObjectStore
from lance_sql.memwal.naming import RegionPaths, parse_manifest_name

__all__ = ["RegionLog"]

_MAX_CLAIM_ATTEMPTS = 100


class RegionLog:
    """The manifest versions of one region in ``store`` (rooted at the table)."""

    def __init__(self, store: ObjectStore, region_id: uuid.UUID) -> None:
        self.store = store
        self.region_id = region_id
        self.paths = RegionPaths(region_id)

    # ------------------------------------------------------------------ reading
    def load(self, version: int) -> RegionManifest:
        key = self.paths.manifest(version)
        manifest = RegionManifest.decode(self.store.read(key), f"{self.store.uri}/{key}")
        if manifest.version != version or manifest.region_id != self.region_id:
            raise FormatError(
                f"{self.store.uri}/{key}: holds version {manifest.version} of region "
                f"{manifest.region_id}, not version {version} of {self.region_id}")
        return manifest

    def _hint(self) -> int:
        try:
            raw = self.store.read(self.paths.version_hint)
        except NotFoundError:
            return 1
        # only a hint: a damaged one costs probes, never correctness
        return parse_version_hint(bytes(raw)) or 1

    def latest_version(self) -> int:
        """The newest committed version, 0 when the region has no manifest yet."""
        version = self._hint()
        if not self.store.exists(self.paths.manifest(version)):
            listed = [parse_manifest_name(n) for n in self.store.list_dir(self.paths.manifest_dir)]
            found = [v for v in listed if v is not None]
            if not found:
                return 0
            version = max(found)
        while self.store.exists(self.paths.manifest(version + 1)):
            version += 1
        return version

    def latest(self) -> RegionManifest | None:
        """The newest manifest (None: the region has none). The version found newest may
        be superseded and collected (``keep_manifests``) before it is read: the newer
        one is looked for again, as long as versions keep moving."""
        version = self.latest_version()
        while version:
            try:
                return self.load(version)
            except NotFoundError:
                newer = self.latest_version()
                if newer <= version:
                    raise
                version = newer
        return None

    def last_wal_entry(self, manifest: RegionManifest) -> int:
        """The last WAL entry that exists, probing upward from what ``manifest`` knows
        (existence checks; writers do not record every WAL flush in the manifest)."""
        last = max(manifest.wal_id_last_seen, manifest.replay_after_wal_id)
        while self.store.exists(self.paths.wal_entry(last + 1)):
            last += 1
        return last

    # ------------------------------------------------------------------ writing
    def commit(self, manifest: RegionManifest) -> bool:
        """Write ``manifest`` as its version if nobody has; False when another won."""
        if manifest.region_id != self.region_id:
            raise InvalidInputError(f"manifest of region {manifest.region_id} given to "
                                    f"{self.region_id}'s log")
        if not self.store.put_if_absent(self.paths.manifest(manifest.version),
                                        manifest.encode()):
            return False
        try:  # best effort: readers probe past a stale hint
            self.store.put(self.paths.version_hint,
                           json.dumps({"version": manifest.version}).encode())
        except OSError:
            pass
        return True

    def claim(self, region_spec_id: int = 0, region_values: bytes | None = None
              ) -> RegionManifest:
        """Become the region's writer: commit the next version with the epoch raised.

        A new region starts at version 1, epoch 1, with its spec id and region values
        (see ``RegionManifest.region_values``). Losing a race to another claimant reloads
        and tries again with a higher epoch.
        """
        for _ in range(_MAX_CLAIM_ATTEMPTS):
            current = self.latest()
            if current is None:
                claimed = RegionManifest(self.region_id, 1, region_spec_id, writer_epoch=1,
                                         region_values=region_values)
            else:
                claimed = current.evolve(version=current.version + 1,
                                         writer_epoch=current.writer_epoch + 1)
            if self.commit(claimed):
                return claimed
        raise WriterFencedError(f"region {self.region_id}: could not claim it in "
                                f"{_MAX_CLAIM_ATTEMPTS} attempts (others keep claiming it)")

    def check_epoch(self, epoch: int) -> RegionManifest:
        """The latest manifest, if ``epoch`` still owns the region; else WriterFencedError."""
        current = self.latest()
        if current is None:
            raise NotFoundError(f"region {self.region_id} has no manifest")
        if current.writer_epoch > epoch:
            raise WriterFencedError(
                f"region {self.region_id}: writer epoch {epoch} was fenced by epoch "
                f"{current.writer_epoch}")
        return current

    def update(self, change: Callable[[RegionManifest], RegionManifest], *,
               epoch: int | None = None) -> RegionManifest:
        """Commit ``change(latest)`` as the next version, retrying when a concurrent
        version slips in first.

        With ``epoch``, the writer of that epoch commits (a MemTable flush): once a newer
        epoch owns the region the writer is fenced. Without it, a background job commits
        (the index builder's hint, the garbage collector's trimming) and keeps whatever
        epoch the region has.
        """
        for _ in range(_MAX_CLAIM_ATTEMPTS):
            current = self.check_epoch(epoch) if epoch is not None else self.latest()
            if current is None:
                raise NotFoundError(f"region {self.region_id} has no manifest")
            new = change(current).evolve(region_id=self.region_id,
                                         version=current.version + 1,
                                         writer_epoch=current.writer_epoch)
            if self.commit(new):
                return new
        raise WriterFencedError(f"region {self.region_id}: could not commit in "
                                f"{_MAX_CLAIM_ATTEMPTS} attempts")
