"""Removing old versions and the files only they need.

A version is removed when it is older than ``older_than`` (and, with
``retain_versions``, not among the newest N), is not the latest, and is not tagged
(``keep_tags``). Then every file a removed version referenced — its manifest,
transaction file, and the data, deletion and index files under the table's own root —
is deleted unless a kept version references it too. Files under other base paths
(shallow-clone sources) are never touched.

No acknowledged commit is lost. A writer publishes version newest + 1 with
put-if-not-exists, so a version number that cleanup freed must never come round again.
The one window: a writer lists the versions (newest L), then others commit L+1 and
L+2, then cleanup removes L+1 before the writer's put lands on it. Writers first write
their transaction file ``_transactions/{read_version}-{uuid}.txn`` and only then list;
cleanup lists versions first and transaction files second, and keeps every version
after the read version of a transaction file no manifest references yet (a writer in
flight) unless the file is older than :data:`WRITER_GRACE` (its writer died). So the
window cannot open, and the rebase of a writer in flight finds every transaction it
needs.

Two kinds of writer need a version that is not the newest: a restore of it (its new
version references the old version's files) and a new tag on it. A restore writes its
transaction file under the name of the version before the one it restores, so the rule
above keeps that version, and a tagger writes its tag before it checks that the version
exists. Cleanup removes versions in two steps so neither can slip in between its look at
transaction files and tags and its deletes: the picked manifests are first set aside
(renamed to ``{name}.{ns}.removing``, which readers do not take for a version; ``ns``
says when), then the transaction files and tags are read again; a version one of them
now protects is put back, and only the rest, with the files only they used, is deleted.
A restore or tagger that checks after the set-aside finds no version (a typed error,
nothing committed); one that checked before is seen on the second look. A cleanup that
dies between the steps leaves its ``.removing`` manifests; the next one (after
:data:`WRITER_GRACE`) finishes their removal.

Files no manifest references at all (left by failed or in-flight writes) are only
removed with ``delete_unverified=True``: an in-flight writer's files look exactly
like that, so only the caller can know none is running. Temporaries of our own writers
(``data/.{name}.{hex}.tmp``, ...) are removed once untouched for :data:`WRITER_GRACE`,
with or without ``delete_unverified``: a running writer keeps touching its temporary,
and a published one no longer exists under that name.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from lance_sql.errors import InvalidInputError, NotFoundError, TaggedVersionError
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import decode_index_section
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.format.naming import (
    TAGS_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    parse_manifest_name,
)
from lance_sql.io.store import ObjectStore, is_temporary
from lance_sql.table.files.lineage import ROW_IDS_DIR, sequence_keys
from lance_sql.table.meta.versions import (
    VersionRef,
    list_versions,
    load_manifest,
    read_hint,
    read_tags,
    write_hint,
)

DEFAULT_OLDER_THAN = timedelta(days=14)
WRITER_GRACE = timedelta(hours=1)
"""How long a writer may go without touching its files before cleanup presumes it dead."""
_SCANNED_DIRS = ("data", "_deletions", ROW_IDS_DIR, TRANSACTIONS_DIR)
_TEMPORARY_DIRS = ("", *_SCANNED_DIRS, VERSIONS_DIR, TAGS_DIR)
SET_ASIDE = ".removing"  # suffix of a manifest cleanup is removing (see the docstring)


@dataclass(frozen=True)
class CleanupStats:
    """What a cleanup removed: bytes, old versions and files."""
    bytes_removed: int = 0
    old_versions: int = 0
    files_removed: int = 0


FragmentKeys = dict[int, tuple[Fragment, tuple[str, ...]]]
"""Each fragment's own keys (:func:`referenced_files`), by the fragment object's id (the
fragment is held too, so the id is not reused while the memo lives)."""


def referenced_files(store: ObjectStore, manifest: Manifest,
                     memo: FragmentKeys | None = None) -> set[str]:
    """Keys below the table root that ``manifest``'s version needs (its manifest aside).
    ``memo``, shared by the calls of one cleanup, gathers a fragment's keys once however
    many versions hold it (consecutive versions share almost all their fragments, the
    same decoded objects)."""
    keys = set()
    if manifest.transaction_file:
        keys.add(f"{TRANSACTIONS_DIR}/{manifest.transaction_file}")
    memo = {} if memo is None else memo
    for frag in manifest.fragments:
        found = memo.get(id(frag))
        if found is None:
            found = memo[id(frag)] = (frag, _fragment_keys(frag))
        keys.update(found[1])
    for index in decode_index_section(manifest.index_section):
        if not index.to_proto().HasField("base_id"):
            directory = f"_indices/{index.uuid}"
            keys.update(f"{directory}/{name}" for name in store.list_dir(directory))
    return keys


def _fragment_keys(frag: Fragment) -> tuple[str, ...]:
    """The keys below the table root of a fragment's data, deletion and sequence files."""
    keys = [d.key for d in frag.files if d.base_id is None]
    deletion = frag.deletion_file
    if deletion is not None and deletion.base_id is None:
        keys.append(deletion.key(frag.id))
    keys.extend(sequence_keys(frag))
    return tuple(keys)


def cleanup_old_versions(
    store: ObjectStore,
    older_than: timedelta | None = None,
    retain_versions: int | None = None,
    *,
    keep_tags: bool = True,
    delete_unverified: bool = False,
    now_ns: int | None = None,
) -> CleanupStats:
    """Remove versions older than ``older_than`` (or beyond the newest ``retain_versions``) and
    the files only they used; tagged versions stay unless ``keep_tags`` is false."""
    if older_than is None and retain_versions is None:
        older_than = DEFAULT_OLDER_THAN
    if older_than is not None and not isinstance(older_than, timedelta):
        raise InvalidInputError(f"older_than is a datetime.timedelta, got {older_than!r}")
    if retain_versions is not None and (isinstance(retain_versions, bool) or not isinstance(
            retain_versions, numbers.Integral)):
        raise InvalidInputError(f"retain_versions is a whole number, got {retain_versions!r}")
    if retain_versions is not None and retain_versions < 1:
        raise InvalidInputError("retain_versions must be positive")
    refs = list_versions(store)
    if not refs:
        raise NotFoundError(f"no Lance table at {store.uri}")
    now_ns = time.time_ns() if now_ns is None else now_ns
    cutoff = None if older_than is None else now_ns - int(older_than.total_seconds() * 1e9)
    tagged = {t["version"] for t in read_tags(store).values()}
    manifests = {ref.version: load_manifest(store, ref) for ref in refs}
    grace_cutoff = now_ns - int(WRITER_GRACE.total_seconds() * 1e9)
    in_flight = _in_flight_read_version(store, manifests.values(), grace_cutoff)
    newest = {r.version for r in refs[-(retain_versions or 1):]}
    removed = []
    for ref in refs[:-1]:
        m = manifests[ref.version]
        if ref.version in newest or (cutoff is not None and m.timestamp_ns >= cutoff):
            continue
        if in_flight is not None and ref.version > in_flight:
            continue  # a running writer may still need it to rebase
        if ref.version in tagged:
            if keep_tags:
                continue
            raise TaggedVersionError(
                f"version {ref.version} is tagged and older than the cleanup bound; nothing "
                f"was removed (delete the tag, or pass error_if_tagged_old_versions=False "
                f"to keep tagged versions and remove the others)")
        removed.append(ref)
    # each removed version's files, gathered once (sized now, doomed after the set-aside)
    memo: FragmentKeys = {}
    files = {ref.version: referenced_files(store, manifests[ref.version], memo)
             for ref in removed}
    # sizes first: a key that leads out of the root (PathEscapeError) stops cleanup
    # before anything is set aside or deleted
    sizes = _sizes(store, [k for ref in removed for k in (ref.key, *files[ref.version])])
    aside, tagged = _set_aside_and_look_again(store, removed, manifests, grace_cutoff)
    try:
        sized = _doomed(store, aside, manifests, files, memo, tagged, sizes, grace_cutoff,
                        delete_unverified)
    except BaseException:
        for ref, aside_key in aside:  # nothing deleted: every version as it was
            store.rename_if_absent(aside_key, ref.key)
        raise
    removed = [ref for ref, _ in aside]
    removed_bytes = removed_files = 0
    for key, size in sized:
        try:
            store.delete(key)
        except (NotFoundError, IsADirectoryError, PermissionError):
            continue
        removed_bytes += size
        removed_files += 1
    if removed and (read_hint(store) or 0) < refs[-1].version:
        # a stale hint naming a kept (tagged) version would now sit below a gap, and
        # readers probing upward from it would stop there
        write_hint(store, refs[-1].version)
    return CleanupStats(removed_bytes, len(removed), removed_files)


def _sizes(store: ObjectStore, keys: Iterable[str]) -> dict[str, int]:
    """The size of each of ``keys`` that exists (PathEscapeError for one leading out of
    the table's root)."""
    out = {}
    for key in dict.fromkeys(keys):
        try:
            out[key] = store.size(key)
        except (NotFoundError, IsADirectoryError, PermissionError):
            continue  # gone already, or a directory (nested index layout): left alone
    return out


def _doomed(store: ObjectStore, aside: list[tuple[VersionRef, str]],
            manifests: dict[int, Manifest], files: dict[int, set[str]], memo: FragmentKeys,
            tagged: set[int], sizes: dict[str, int], grace_cutoff: int,
            delete_unverified: bool) -> list[tuple[str, int]]:
    """(key, size) of every file to delete: the set-aside manifests, the files only they
    used (``files``: each set-aside version's :func:`referenced_files`), a dead cleanup's
    leftovers, unverified files if asked, stale temporaries."""
    removed_versions = {ref.version for ref, _ in aside}
    kept_files: set[str] = set()
    for version, m in manifests.items():
        if version not in removed_versions:
            kept_files |= referenced_files(store, m, memo)
    doomed: list[str] = []
    for ref, aside_key in aside:  # oldest first
        doomed.append(aside_key)
        doomed.extend(sorted(files[ref.version] - kept_files))
    doomed.extend(_left_by_a_dead_cleanup(store, kept_files, grace_cutoff, manifests,
                                          tagged))
    if delete_unverified:
        everything = kept_files | set(doomed)
        for directory in _SCANNED_DIRS:
            for name in store.list_dir(directory):
                key = f"{directory}/{name}"
                if key not in everything and not is_temporary(name):  # those: below
                    doomed.append(key)
        # manifests staged for an external manifest store and already copied into place
        # (one not copied yet may be the only copy of a committed version: kept)
        for name in store.list_dir(VERSIONS_DIR):
            head, sep, _ = name.rpartition(".manifest-")
            if sep and store.exists(f"{VERSIONS_DIR}/{head}.manifest"):
                doomed.append(f"{VERSIONS_DIR}/{name}")
    for directory in _TEMPORARY_DIRS:
        for name, modified in store.list_temporaries(directory):
            if modified < grace_cutoff:
                doomed.append(f"{directory}/{name}" if directory else name)
    unknown = _sizes(store, [k for k in doomed if k not in sizes])
    return [(k, sizes[k] if k in sizes else unknown[k]) for k in dict.fromkeys(doomed)
            if k in sizes or k in unknown]


def _set_aside_and_look_again(store: ObjectStore, picked: list[VersionRef],
                              manifests: dict[int, Manifest], grace_cutoff: int
                              ) -> tuple[list[tuple[VersionRef, str]], set[int]]:
    """The two steps of the module docstring: ``picked``'s manifests set aside, then those
    a transaction file or tag now protects put back. The versions to remove with the keys
    their manifests were set aside under, and the versions tagged on the second look."""
    aside = []
    for ref in picked:
        key = f"{ref.key}.{time.time_ns()}{SET_ASIDE}"
        try:
            if store.rename_if_absent(ref.key, key):
                aside.append((ref, key))
        except NotFoundError:
            continue  # removed meanwhile (another cleanup)
    in_flight = _in_flight_read_version(store, manifests.values(), grace_cutoff)
    tagged = {t["version"] for t in read_tags(store).values()}

    def protected(version: int) -> bool:
        return version in tagged or (in_flight is not None and version > in_flight)

    removed = []
    for ref, key in aside:
        if protected(ref.version):
            store.rename_if_absent(key, ref.key)  # needed after all
        else:
            removed.append((ref, key))
    return removed, tagged


@dataclass(frozen=True)
class _SetAside:
    """A manifest a cleanup set aside: its key now, its key as a version, its version,
    when it was set aside (ns), and the manifest."""

    key: str
    manifest_key: str
    version: int
    when: int
    manifest: Manifest


def _set_aside(store: ObjectStore, before: int | None = None) -> Iterator[_SetAside]:
    """Every manifest a cleanup (running or dead) has set aside, read; with ``before``,
    only those set aside before that time (ns), the others not even read (the name says
    when: a running cleanup's own manifests are many, and all of them recent)."""
    for name in store.list_dir(VERSIONS_DIR):
        manifest_name, _, when = name.removesuffix(SET_ASIDE).rpartition(".")
        parsed = parse_manifest_name(manifest_name)
        if not name.endswith(SET_ASIDE) or parsed is None or not when.isdigit():
            continue
        if before is not None and int(when) >= before:
            continue
        key = f"{VERSIONS_DIR}/{name}"
        try:
            manifest = ManifestCodec.decode(store.read(key), f"{store.uri}/{key}")
        except NotFoundError:
            continue  # put back or removed meanwhile
        yield _SetAside(key, f"{VERSIONS_DIR}/{manifest_name}", parsed[0], int(when),
                        manifest)


def set_aside_manifests(store: ObjectStore) -> list[Manifest]:
    """The manifests a cleanup has set aside (running or dead): it may still put some
    back (a tag or a writer needs them), so what those versions need must stay (the
    MemWAL collector keeps their unmerged generations)."""
    return [aside.manifest for aside in _set_aside(store)]


def _left_by_a_dead_cleanup(store: ObjectStore, kept_files: set[str], grace_cutoff: int,
                            manifests: dict[int, Manifest], tagged: set[int]) -> list[str]:
    """Manifests an earlier cleanup set aside and never finished with (it died), and the
    files only they used; one a tag or writer now needs is put back instead."""
    # (those set aside since the cutoff are a running cleanup's)
    left = [(a.key, a.manifest_key, a.version, a.manifest)
            for a in _set_aside(store, before=grace_cutoff)]
    if not left:
        return []
    # their own transaction files are no writer in flight
    every = [*manifests.values(), *(m for *_, m in left)]
    in_flight = _in_flight_read_version(store, every, grace_cutoff)
    doomed: list[str] = []
    for key, manifest_key, version, manifest in left:
        if version in tagged or (in_flight is not None and version > in_flight):
            store.rename_if_absent(key, manifest_key)
            continue
        doomed.append(key)
        doomed.extend(sorted(referenced_files(store, manifest) - kept_files))
    return doomed


def _in_flight_read_version(store: ObjectStore, manifests: Iterable[Manifest],
                            fresh_after_ns: int) -> int | None:
    """The oldest read version of a writer that may still be committing: transaction
    files no listed manifest references, touched after ``fresh_after_ns``."""
    referenced = {m.transaction_file for m in manifests}
    oldest = None
    for name in store.list_dir(TRANSACTIONS_DIR):
        head, sep, _ = name.partition("-")
        if name in referenced or not sep or not head.isdigit():
            continue
        try:
            if store.modified_ns(f"{TRANSACTIONS_DIR}/{name}") < fresh_after_ns:
                continue  # its writer died long ago
        except NotFoundError:
            continue  # committed or abandoned meanwhile
        oldest = int(head) if oldest is None else min(oldest, int(head))
    return oldest
