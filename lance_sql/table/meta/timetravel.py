"""Which version a point in time means: the latest committed at or before it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import VersionRef, list_versions, load_manifest


def parse_instant(text: str) -> dt.datetime:
    """An ISO-8601 instant (``Z`` allowed); naive values are UTC, as manifests record."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(f"invalid timestamp {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def version_at(
    store: ObjectStore,
    when: dt.datetime,
    manifest_of: Callable[[VersionRef], Manifest] | None = None,
) -> int:
    """The latest version committed at or before ``when``.

    Compared in microseconds, the precision of the timestamps users see and type,
    so the instant a version reports is inside that version. Naive times are UTC.
    """
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    wanted_us = round(when.timestamp() * 1_000_000)
    load = manifest_of or (lambda ref: load_manifest(store, ref))
    best = None
    for ref in list_versions(store):
        if load(ref).timestamp_ns // 1000 <= wanted_us:
            best = ref.version
    if best is None:
        raise NotFoundError(
            f"{store.uri} has no version committed at or before {when.isoformat()}"
        )
    return best
