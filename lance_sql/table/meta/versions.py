"""Finding and loading versions: manifest listing, naming scheme, latest, tags.

The ``latest_version_hint.json`` file is only a hint: it is written after each
commit, but listing ``_versions/`` is what decides, so a stale or corrupt hint
never changes what a reader sees.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import operator
import re
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    NotFoundError,
    VersionCleanedUpError,
    VersionNotFoundError,
)
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.format.naming import (
    LATEST_HINT,
    MAX_VERSION,
    TAGS_DIR,
    VERSIONS_DIR,
    ManifestNaming,
    parse_manifest_name,
    parse_version_hint,
    tag_key,
)
from lance_sql.io.commit import CommitHandler
from lance_sql.io.store import ObjectStore
from lance_sql.table.runtime.cache import MANIFESTS
from lance_sql.table.runtime.context import current_runtime


@dataclass(frozen=True)
class VersionRef:
    """A manifest file found in ``_versions/``; ``identity``, when the probe that found
    it saw it (see :meth:`ObjectStore.identity`), tells it from a manifest of the same
    number written later (a table deleted and written again at the same place). It takes
    no part in comparisons."""

    version: int
    naming: ManifestNaming
    identity: Hashable = field(default=None, compare=False)

    @property
    def key(self) -> str:
        return self.naming.key(self.version)


def list_versions(store: ObjectStore) -> list[VersionRef]:
    """Every committed version, ascending. A mixture of naming schemes is an error.

    Each listed name is parsed once per process (:func:`_listed_ref`): a writer lists
    ``_versions/`` twice per commit (to open, and after writing its transaction file),
    and between two listings all but a few names are the same."""
    refs = [ref for ref in map(_listed_ref, store.list_dir(VERSIONS_DIR)) if ref is not None]
    # (compared by identity: hashing an Enum member runs Python code, once per version)
    v2 = list(map(operator.is_, map(_NAMING, refs), itertools.repeat(ManifestNaming.V2)))
    if any(v2) and not all(v2):
        raise FormatError(
            f"{store.uri}/{VERSIONS_DIR}: manifests use both the V1 and V2 naming schemes; "
            "the table is inconsistent"
        )
    refs.sort(key=_VERSION)
    return refs


_NAMING = operator.attrgetter("naming")
_VERSION = operator.attrgetter("version")


@functools.lru_cache(maxsize=1 << 16)
def _listed_ref(name: str) -> VersionRef | None:
    """The ref a ``_versions/`` entry names (None: no manifest). A name always means the
    same version, and a ref found by listing carries no identity, so one object serves
    every listing (bounded, thread-safe; a bad name raises each time, uncached)."""
    parsed = parse_manifest_name(name)
    return VersionRef(*parsed) if parsed is not None else None


def latest_version(store: ObjectStore, handler: CommitHandler | None = None) -> VersionRef:
    """The newest version; a handler that tracks versions itself (external manifest store)
    is asked first and repairs a half-finished commit of that version."""
    tracked = handler_latest(store, handler)
    if tracked is not None:
        return tracked
    fast = _latest_from_hint(store)
    if fast is not None:
        return fast
    refs = list_versions(store)
    if not refs:
        raise NotFoundError(f"no Lance table at {store.uri} (no manifests in {VERSIONS_DIR}/)")
    return refs[-1]


def latest_committed(store: ObjectStore, handler: CommitHandler | None = None
                     ) -> VersionRef | None:
    """The newest version as writers must see it (None for no table): the handler's own
    record, else a listing of ``_versions/``, never the hint. Probing upward from a hint
    stops at a gap that cleanup left above a kept (tagged) version, and a writer that
    trusted such an answer would re-create a removed version number."""
    tracked = handler_latest(store, handler)
    if tracked is not None:
        return tracked
    refs = list_versions(store)
    return refs[-1] if refs else None


def handler_latest(store: ObjectStore, handler: CommitHandler | None) -> VersionRef | None:
    """The newest version according to a handler that tracks versions itself, else None."""
    found = handler.latest(store) if handler is not None else None
    if found is None:
        return None
    parsed = parse_manifest_name(found[1].rpartition("/")[2])
    return VersionRef(found[0], parsed[1]) if parsed is not None else None


def _latest_from_hint(store: ObjectStore) -> VersionRef | None:
    """The latest version in O(1) store requests, or None to fall back to listing.

    Versions are committed one after another (v+1 only once v exists), so from a version
    ``h`` that exists, probing ``h+1, h+2, ...`` finds the latest. ``h`` comes from the
    hint; if the hint is missing, unreadable, or names a version that is not there, the
    caller lists ``_versions/``. A manifest of the other naming scheme right after the
    latest (a writer using the other scheme) also sends the caller to the listing,
    which reports the mixture.
    """
    hinted = read_hint(store)
    if hinted is None or hinted < 1:
        return None
    # Either scheme needs the same four names when nothing was committed since the hint
    # was written (the usual case): asked together, in one walk of _versions/.
    # (their identities come with the same system calls: the found version's is kept)
    v2, v2_next, v1, v1_next = store.identities(
        [ManifestNaming.V2.key(hinted), ManifestNaming.V2.key(hinted + 1),
         ManifestNaming.V1.key(hinted), ManifestNaming.V1.key(hinted + 1)])
    for naming, here, following in ((ManifestNaming.V2, v2, v2_next),
                                    (ManifestNaming.V1, v1, v1_next)):
        if here is not None:
            version, found = hinted, here
            if following is not None:
                version, found = hinted + 1, following
                while (newer := store.identities([naming.key(version + 1)])[0]) is not None:
                    version, found = version + 1, newer
            other = ManifestNaming.V1 if naming is ManifestNaming.V2 else ManifestNaming.V2
            if following is not None:
                mixed = any(store.exists_many([other.key(version + 1), other.key(version)]))
            else:
                mixed = (v1_next is not None or v1 is not None if naming is ManifestNaming.V2
                         else v2_next is not None or v2 is not None)
            if mixed:
                return None
            return VersionRef(version, naming, found)
    return None


def find_version(store: ObjectStore, version: int,
                 handler: CommitHandler | None = None) -> VersionRef:
    """The ref of ``version``; with ``handler``, a half-finished commit of it is repaired
    and found.

    Found in O(1) store requests when it can be, since listing ``_versions/`` costs
    O(versions): see :func:`_probe_version`. Otherwise the listing decides, as it words
    the errors (never existed, cleaned up, a mixture of schemes) and a handler may repair
    a half-finished commit."""
    probed = _probe_version(store, version)
    if probed is not None:
        return probed
    refs = list_versions(store)
    for ref in refs:
        if ref.version == version:
            return ref
    if handler is not None and refs:
        ref = VersionRef(version, refs[-1].naming)
        if handler.exists(store, ref.key, version):  # repairs a half-finished commit
            return ref
    if not refs:
        raise NotFoundError(f"no Lance table at {store.uri}")
    if 1 <= version < refs[-1].version:  # versions are numbered without gaps
        raise VersionCleanedUpError(
            f"version {version} of {store.uri} does not exist: cleanup_old_versions removed "
            f"it; versions: {_ranges(refs)}")
    raise VersionNotFoundError(
        f"version {version} of {store.uri} does not exist; versions: {_ranges(refs)}"
    )


def _probe_version(store: ObjectStore, version: int) -> VersionRef | None:
    """``version``'s ref when exactly one of its two possible names (one per naming
    scheme) exists and the latest version, found from the hint, uses the same scheme;
    else None (the caller lists). The second check finds a mixture of schemes where one
    arises, at the newest end (a writer of the other scheme committed last), as opening
    the latest version does; the listing is what reports it."""
    if not 1 <= version <= MAX_VERSION:
        return None
    v2, v1 = store.exists_many([ManifestNaming.V2.key(version), ManifestNaming.V1.key(version)])
    if v2 == v1:
        return None  # neither (the listing words the error) or both (a mixture)
    naming = ManifestNaming.V2 if v2 else ManifestNaming.V1
    latest = _latest_from_hint(store)
    if latest is None or latest.naming is not naming:
        return None
    return VersionRef(version, naming)


def load_latest(store: ObjectStore, handler: CommitHandler | None = None,
                attempts: int = 5) -> tuple[VersionRef, Manifest]:
    """The newest version and its manifest. Newer versions may come, and a cleanup remove
    the one found, between the two steps: then the newest is looked up again."""
    for attempt in range(attempts):
        ref = latest_version(store, handler)
        try:
            return ref, load_manifest(store, ref)
        except NotFoundError:
            if attempt + 1 == attempts:
                raise
    raise AssertionError("unreachable")


def version_cleaned_up(store: ObjectStore, version: int) -> bool:
    """Whether ``version`` is gone from a table that has newer ones (cleanup removed it)."""
    try:
        find_version(store, version)
    except VersionCleanedUpError:
        return True
    except NotFoundError:
        return False
    return False


def load_manifest(store: ObjectStore, ref: VersionRef) -> Manifest:
    """The manifest of ``ref``, decoded (or taken from the cache)."""
    return read_manifest(store, ref)[0]


def read_manifest(store: ObjectStore, ref: VersionRef) -> tuple[Manifest, int]:
    """The manifest of ``ref`` and the size of its bytes.

    Cached by the bytes: the same bytes always decode to the same immutable manifest, so
    the cache needs no invalidation (not even for a table re-created in place).
    """
    data = store.read(ref.key)
    return current_runtime().cache.get_or_load(
        MANIFESTS, data,
        lambda: (ManifestCodec.decode(data, f"{store.uri}/{ref.key}"), len(data)))


def load_transaction_bytes(store: ObjectStore, ref: VersionRef) -> bytes | None:
    """The transaction that produced ``ref``: inline copy first, then the .txn file."""
    key = ref.key
    data = store.read(key)
    inline = ManifestCodec.decode_transaction(data, f"{store.uri}/{key}")
    if inline is not None:
        return inline
    manifest = ManifestCodec.decode(data, f"{store.uri}/{key}", check_flags=False)
    if not manifest.transaction_file:
        return None
    try:
        return store.read(f"_transactions/{manifest.transaction_file}")
    except NotFoundError:
        return None


def read_hint(store: ObjectStore) -> int | None:
    """The version the hint names; None when it is missing or unreadable."""
    try:
        raw = store.read(LATEST_HINT)
    except NotFoundError:
        return None
    return _hint_version(bytes(raw))  # (hashable, whatever the store returned)


@functools.lru_cache(maxsize=64)
def _hint_version(raw: bytes) -> int | None:
    """The version a hint file's bytes name (None: unreadable). The same bytes give the
    same answer, so the few hints a process meets are parsed once (a strong read probes
    the hint before every point lookup)."""
    return parse_version_hint(raw)


def write_hint(store: ObjectStore, version: int, *, lower: bool = False) -> None:
    """Best effort: a failed hint write never fails a commit. The hint only moves up
    (``lower``: cleanup's repair may move it anywhere): a writer whose hint lands late,
    after newer commits and a cleanup that left a gap above a kept version, would
    otherwise name that old version to every reader probing upward from the hint."""
    try:
        if not lower and (read_hint(store) or 0) >= version:
            return
        store.put(LATEST_HINT, json.dumps({"version": version}, separators=(",", ":")).encode())
    except Exception:  # noqa: BLE001 - the hint is optional by design
        pass


def _ranges(refs: list[VersionRef]) -> str:
    return describe_versions([r.version for r in refs])


def describe_versions(versions: Sequence[int]) -> str:
    """Ascending version numbers for a message: listed when few, else their span."""
    if len(versions) <= 12:
        return ", ".join(map(str, versions))
    return f"{versions[0]}..{versions[-1]} ({len(versions)} versions)"


# -- tags -------------------------------------------------------------------------------


# A tag is the file _refs/tags/<name>.json, written through a temporary sibling whose
# name adds ~45 bytes: file systems allow 255 bytes a name.
MAX_TAG_BYTES = 200
_TAG_CHARS = re.compile(r"[A-Za-z0-9._-]+")


def check_tag_name(name: object, *, creating: bool = False) -> str:
    """``name`` if it can name a tag, else :class:`InvalidInputError`.

    Any tag must be a printable file name not starting with ``.`` (a tag pylance made is
    read whatever else its name is: all digits, or longer than we write). A tag being
    ``creating`` must also pass pylance's rules, so pylance can use every tag we write:
    ASCII letters, digits, ``.``, ``-`` and ``_``; no leading or trailing dot, no ``..``,
    no ``.lock`` suffix; and ours: at most ``MAX_TAG_BYTES`` bytes, not all digits (a
    version number). (pylance takes non-ASCII letters too but then cannot list them, so
    lance_sql refuses those.)
    """
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"a tag name must be a non-empty string, got {name!r}")
    problem = None
    if creating and not _TAG_CHARS.fullmatch(name):
        problem = "use only ASCII letters, digits, '.', '-' and '_'"
    elif "/" in name or not name.isprintable():
        problem = "it must be a printable file name"
    elif name.startswith(".") or (creating and name.endswith(".")):
        problem = "it may not begin or end with '.'"
    elif creating and ".." in name:
        problem = "it may not contain '..'"
    elif creating and name.endswith(".lock"):
        problem = "it may not end with '.lock'"
    elif creating and len(name.encode()) > MAX_TAG_BYTES:
        problem = f"it may be at most {MAX_TAG_BYTES} characters long"
    elif creating and name.isdigit():
        problem = "it would be confused with a version number"
    if problem:
        raise InvalidInputError(f"invalid tag name {name[:60]!r}: {problem}")
    return name


def read_tags(store: ObjectStore) -> dict[str, dict]:
    """Every tag of the table: name -> its JSON body."""
    tags = {}
    for name in store.list_dir(TAGS_DIR):
        if name.endswith(".json"):
            tag = name[: -len(".json")]
            tags[tag] = read_tag(store, tag)
    return dict(sorted(tags.items()))


def tag_exists(store: ObjectStore, name: str) -> bool:
    """Whether the table has a tag named ``name`` (a name no tag can have: False)."""
    try:
        check_tag_name(name)
    except InvalidInputError:
        return False
    return store.exists(tag_key(name))


def read_tag(store: ObjectStore, name: str) -> dict:
    """Tag ``name``'s JSON body (``version``, ``manifestSize``...); a NotFoundError if missing."""
    check_tag_name(name)
    key = tag_key(name)
    try:
        raw = store.read(key)
    except NotFoundError:
        raise NotFoundError(f"tag {name!r} does not exist in {store.uri}") from None
    try:
        content = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{store.uri}/{key}: corrupt tag file ({exc})") from exc
    version = content.get("version") if isinstance(content, dict) else None
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise FormatError(f"{store.uri}/{key}: corrupt tag file (no version in it: "
                          f"{version!r:.40})")
    return {
        "version": version,
        "manifest_size": content.get("manifestSize"),
        "branch": content.get("branch"),
        "created_at": content.get("createdAt"),
        "updated_at": content.get("updatedAt"),
        "metadata": content.get("metadata") or {},
    }


def write_tag(store: ObjectStore, name: str, ref: VersionRef, *, replace: bool) -> None:
    """Write tag ``name`` for ``ref``. ``replace``: move an existing tag there, keeping
    its creation time and metadata (as pylance's ``update`` does)."""
    check_tag_name(name)
    now = _rfc3339_now()
    body: dict[str, object] = {
        "branch": None,
        "version": ref.version,
        "manifestSize": store.size(ref.key),
        "createdAt": now,
        "updatedAt": now,
        "metadata": {},
    }
    key = tag_key(name)
    before = None
    if replace:
        old = read_tag(store, name)  # NotFoundError when there is none
        before = store.read(key)
        body["createdAt"] = old["created_at"] or now
        body["metadata"] = old["metadata"]
        store.put(key, json.dumps(body).encode())
    elif not store.put_if_absent(key, json.dumps(body).encode()):
        raise InvalidInputError(f"tag {name!r} already exists in {store.uri}")
    # Checked again now the tag is written: a cleanup that read the tags before keeps the
    # version only if it still saw the version after (cleanup_old_versions' two steps).
    try:
        find_version(store, ref.version)
    except NotFoundError:
        if before is None:
            store.delete(key)
        else:
            store.put(key, before)
        raise


def replace_tag_metadata(store: ObjectStore, name: str, metadata: dict[str, str]) -> None:
    """Give tag ``name`` this metadata (all of it: not merged), leaving the rest as it was,
    ``updatedAt`` too (pylance's ``replace_metadata``)."""
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise InvalidInputError("tag metadata must be a dict of strings to strings")
    check_tag_name(name)
    read_tag(store, name)  # checked: it exists and is a tag file
    content = json.loads(store.read(tag_key(name)))
    content["metadata"] = dict(metadata)
    store.put(tag_key(name), json.dumps(content).encode())


def tag_time(value: object, name: str) -> dt.datetime | None:
    """A tag's ``createdAt`` / ``updatedAt`` (RFC 3339, up to nanoseconds, as pylance
    writes them) as an aware UTC datetime, truncated to microseconds; None when absent."""
    if value is None:
        return None
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    try:
        if match is None:
            raise ValueError("not an RFC 3339 time")
        head, fraction, zone = match.groups()
        micros = (fraction or "")[1:7].ljust(6, "0")
        when = dt.datetime.fromisoformat(f"{head}.{micros}{'+00:00' if zone in 'Zz' else zone}")
    except ValueError as exc:
        raise FormatError(f"tag {name!r}: bad time {value!r:.60} ({exc})") from None
    return when.astimezone(dt.UTC)


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339_now() -> str:
    """Now, in UTC to the nanosecond, as pylance writes tag times."""
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def delete_tag(store: ObjectStore, name: str) -> None:
    """Delete tag ``name``; a NotFoundError if it does not exist."""
    check_tag_name(name)
    if not store.exists(tag_key(name)):
        raise NotFoundError(f"tag {name!r} does not exist in {store.uri}")
    store.delete(tag_key(name))


def commit_time(timestamp_ns: int) -> dt.datetime:
    """A manifest's commit time as a UTC datetime, truncated to microseconds (never
    rounded up past the commit, so it can be fed back to time travel)."""
    return _EPOCH + dt.timedelta(microseconds=timestamp_ns // 1000)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
