"""Which version a point in time means: the latest committed at or before it (time travel),
or the first committed at or after it (the start of a change window).

The one place instants are parsed from text and compared with commit times.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from lance_sql.errors import InvalidInputError, NotFoundError, VersionCleanedUpError
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import VersionRef, list_versions, load_manifest

ManifestOfRef = Callable[[VersionRef], Manifest]


def parse_instant(text: str) -> dt.datetime:
    """An ISO-8601 instant (``Z`` allowed); naive values are UTC, as manifests record."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(f"invalid timestamp {text!r}") from None
    return as_utc(value)


def as_utc(when: dt.datetime) -> dt.datetime:
    """``when`` with a time zone: naive times are UTC."""
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def commit_micros(manifest: Manifest) -> int:
    """A version's commit time in microseconds since the epoch (UTC)."""
    return manifest.timestamp_ns // 1000


def _micros(when: dt.datetime) -> int:
    return round(as_utc(when).timestamp() * 1_000_000)


def version_at(
    store: ObjectStore,
    when: dt.datetime,
    manifest_of: ManifestOfRef | None = None,
    *,
    refs: Sequence[VersionRef] | None = None,
) -> int:
    """The latest version committed at or before ``when``.

    Compared in microseconds, the precision of the timestamps users see and type,
    so the instant a version reports is inside that version. Naive times are UTC.
    ``refs``: the table's versions, when the caller has listed them already.
    """
    when = as_utc(when)
    refs = list_versions(store) if refs is None else refs
    found = _committed(store, when, manifest_of, refs, after=False)
    if not found:
        oldest = min((r.version for r in refs), default=1)
        if oldest > 1:  # versions before the oldest kept one went, with their times
            raise VersionCleanedUpError(
                f"{store.uri}: versions 1..{oldest - 1} were removed by "
                f"cleanup_old_versions, and one of them may have been current at "
                f"{when.isoformat()} (the oldest kept, {oldest}, was committed later)")
        raise NotFoundError(
            f"{store.uri} has no version committed at or before {when.isoformat()}"
        )
    version = found[-1]
    kept = {r.version for r in refs}
    later = [v for v in kept if v > version]
    if later and version + 1 not in kept:
        # versions after it were removed by cleanup: one of them may have been current
        # then (their commit times went with them), so its rows are not these
        load = manifest_of or (lambda ref: load_manifest(store, ref))
        ref = next(r for r in refs if r.version == version)
        if commit_micros(load(ref)) != _micros(when):
            raise VersionCleanedUpError(
                f"{store.uri}: versions {version + 1}..{min(later) - 1} were removed by "
                f"cleanup_old_versions, and one of them may have been current at "
                f"{when.isoformat()}; version {version} (committed before) is kept: open "
                f"it by number to read it")
    return version


def version_since(
    store: ObjectStore,
    when: dt.datetime,
    manifest_of: ManifestOfRef | None = None,
    *,
    refs: Sequence[VersionRef] | None = None,
) -> int:
    """The first version committed at or after ``when`` (see :func:`version_at`)."""
    when = as_utc(when)
    refs = list_versions(store) if refs is None else refs
    found = _committed(store, when, manifest_of, refs, after=True)
    if not found:
        latest = f" (latest is {refs[-1].version})" if refs else ""
        raise NotFoundError(f"{store.uri} has no version committed at or after "
                            f"{when.isoformat()}{latest}")
    return found[0]


def _committed(store: ObjectStore, when: dt.datetime, manifest_of: ManifestOfRef | None,
               refs: Sequence[VersionRef] | None, *, after: bool) -> list[int]:
    """Versions committed at or after (``after``) or at or before ``when``, ascending."""
    wanted = _micros(when)
    load = manifest_of or (lambda ref: load_manifest(store, ref))
    out = []
    for ref in list_versions(store) if refs is None else refs:
        micros = commit_micros(load(ref))
        if (micros >= wanted) if after else (micros <= wanted):
            out.append(ref.version)
    return out
