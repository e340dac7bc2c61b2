"""The lazy catalog: table names -> Lance tables -> one pinned version each.

Names DataFusion asks for come in three shapes:

* ``t`` — the latest version when the query is planned;
* ``t@3``, ``t@tag``, ``t@2026-11-01T10:00:00`` — a version, a tag, or the latest
  version committed at or before a time (users may write these quoted);
* ``t@3#sys#q12`` — the session front door's canonical form: pinned version, whether
  the system columns are exposed, and the query that asked (so the session can find
  the provider it planned with).

Nothing is opened until a query names it, so tables created or committed by other
writers after the session started are seen by the next query.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import re
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datafusion.catalog import CatalogProvider, SchemaProvider, Table

from lance_sql.errors import InvalidInputError, NotFoundError, VersionCleanedUpError
from lance_sql.format.index import decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME
from lance_sql.format.naming import ManifestNaming
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.read.planner import LsmView, ReadMoment
from lance_sql.memwal.read.warm import WarmView
from lance_sql.sql.changes_provider import ChangesDataset
from lance_sql.sql.error_bridge import ErrorRegistry
from lance_sql.sql.lsm_provider import LsmTableDataset
from lance_sql.sql.nearest_provider import NearestDataset
from lance_sql.sql.provider import LanceTableDataset
from lance_sql.sql.rewrite import VersionSpec, at_spec
from lance_sql.table import (
    LSM_VIEWS,
    TABLE_VERSIONS,
    CommitConfig,
    Runtime,
    VersionRef,
    current_runtime,
    dataset,
    find_version,
    latest_version,
    read_manifest,
    read_tag,
    version_at,
)

CONSISTENCY = ("strong", "snapshot", "base")
CATALOG = "lance"
SCHEMA = "default"
SUFFIX = ".lance"
Planned = LanceTableDataset | LsmTableDataset | NearestDataset | ChangesDataset
_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")


@dataclass(frozen=True)
class TableName:
    """A parsed provider name."""

    table: str
    spec: VersionSpec | None = None
    system_columns: bool = False
    query_id: str | None = None
    travel: bool = False  # the query asked for this version (time travel)

    @classmethod
    def parse(cls, text: str) -> TableName:
        base, *flags = text.split("#")
        system = "sys" in flags
        travel = "tt" in flags
        query = next((f[1:] for f in flags if f.startswith("q")), None)
        table, at, version = base.rpartition("@")
        if not at:
            return cls(base, None, system, query, travel)
        return cls(table, at_spec(version), system, query, travel)

    def render(self) -> str:
        text = self.table
        if self.spec is not None:
            value = self.spec.value
            text += "@" + (value.isoformat() if isinstance(value, dt.datetime) else str(value))
        if self.system_columns:
            text += "#sys"
        if self.travel:
            text += "#tt"
        if self.query_id:
            text += f"#q{self.query_id}"
        return text


class TableDirectory:
    """Where each table lives: a root directory's subdirectories plus registrations."""

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root = os.fspath(root) if root is not None else None
        self._registered: dict[str, str] = {}
        self._lock = threading.Lock()
        self._listing = threading.local()  # see one_listing

    @contextlib.contextmanager
    def one_listing(self) -> Iterator[None]:
        """Within the block, this thread lists the root once: one query's many name
        lookups see one listing (the next query lists again, so it sees new tables)."""
        outer = getattr(self._listing, "found", None)
        if outer is None:
            self._listing.found = self._list()
        try:
            yield
        finally:
            if outer is None:
                self._listing.found = None

    def register(self, name: str, uri: str | os.PathLike[str]) -> None:
        if not name or "@" in name or "#" in name:
            raise InvalidInputError(f"invalid table name {name!r} (no '@' or '#' allowed)")
        with self._lock:
            self._registered[name] = os.fspath(uri)

    def names(self) -> list[str]:
        found = dict(self._discovered())
        with self._lock:
            found.update(self._registered)
        return sorted(found)

    def uri(self, name: str) -> str:
        with self._lock:
            if name in self._registered:
                return self._registered[name]
        path = self._found(name)
        if path is None:
            raise NotFoundError(
                f"unknown table {name!r}; tables: {', '.join(self.names()) or '(none)'}"
            )
        return path

    def under_root(self, name: str) -> str | None:
        """The directory of table ``name`` if it was found under the root (not registered)."""
        with self._lock:
            if name in self._registered:
                return None
        return self._found(name)

    def ambiguous(self, name: str) -> bool:
        """Whether ``name`` matches several tables ignoring case and none exactly."""
        try:
            self._found(name)
        except NotFoundError:
            return True
        return False

    def _found(self, name: str) -> str | None:
        """The directory of the table found under the root as ``name``: its exact name,
        else the one table whose name matches ignoring case (several: a NotFoundError
        naming them, as for columns)."""
        discovered = dict(self._discovered())
        if name in discovered:
            return discovered[name]
        matches = sorted(k for k in discovered if k.lower() == name.lower())
        if len(matches) > 1:
            raise NotFoundError(f"table name {name!r} is ambiguous: {', '.join(matches)} "
                                "differ only by case; quote the exact name")
        return discovered[matches[0]] if matches else None

    def new_table_path(self, name: str) -> str:
        """Where ``CREATE TABLE name`` writes: ``ROOT/name.lance``."""
        if self.root is None:
            raise InvalidInputError("this session has no root directory to create tables in")
        if not _TABLE_NAME.fullmatch(name):
            raise InvalidInputError(f"invalid table name {name!r}: use letters, digits, '_' "
                                    "and '-' (at most 128)")
        return os.path.join(self.root, name + SUFFIX)

    def _discovered(self) -> list[tuple[str, str]]:
        found = getattr(self._listing, "found", None)
        return self._list() if found is None else found

    def _list(self) -> list[tuple[str, str]]:
        if self.root is None or not os.path.isdir(self.root):
            return []
        out = []
        for entry in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, entry)
            if os.path.isdir(os.path.join(path, "_versions")):
                name = entry[: -len(SUFFIX)] if entry.endswith(SUFFIX) else entry
                if "#" in name or "@" in name:
                    continue  # SQL names use them for versions and flags (see register)
                out.append((name, path))
        return out


_RESOLVERS = itertools.count()


class VersionResolver:
    """Turns (table, spec) into a manifest; caches manifests (they are immutable) in the
    runtime's ``table_versions`` cache, under this resolver's name for the table."""

    def __init__(self, directory: TableDirectory, runtime: Runtime | None = None) -> None:
        self.directory = directory
        self.runtime = runtime or current_runtime()
        self._stores: dict[str, ObjectStore] = {}
        # what the cache keys start with: a table re-created at the same place (forget)
        # gets a new prefix, and its old entries age out unused
        self._prefixes: dict[str, tuple[int, int]] = {}
        self._namings: dict[str, ManifestNaming] = {}  # each table's manifest naming scheme
        # (table, version) -> the manifest file version_of last resolved it to
        self._resolved: dict[tuple[str, int], VersionRef] = {}
        self._id = next(_RESOLVERS)
        self._generations = itertools.count()
        self._lock = threading.Lock()

    def store(self, table: str) -> ObjectStore:
        uri = self.directory.uri(table)
        with self._lock:
            if uri not in self._stores:
                self._stores[uri] = open_store(uri)
            return self._stores[uri]

    def version_of(self, table: str, spec: VersionSpec | None) -> int:
        """The version ``spec`` names (the latest without one). The manifest file it
        resolved to is remembered when the resolution saw it (the latest version's
        probe does): :meth:`resolved_manifest` needs no ``stat`` then."""
        store = self.store(table)
        ref: VersionRef | None = None
        if spec is None:
            ref = latest_version(store)
            version = ref.version
        elif spec.kind == "version":
            version = find_version(store, int(spec.value)).version  # type: ignore[arg-type]
        elif spec.kind == "tag":
            version = read_tag(store, str(spec.value))["version"]
        else:
            assert isinstance(spec.value, dt.datetime)
            try:
                version = version_at(store, spec.value,
                                     lambda ref: self.manifest(table, ref.version))
            except VersionCleanedUpError:
                raise
            except NotFoundError:
                raise NotFoundError(
                    f"table {table!r} has no version committed at or before "
                    f"{spec.value.isoformat()}"
                ) from None
        with self._lock:  # what an earlier resolution saw of this version is old now
            if len(self._resolved) >= 4096:
                self._resolved.clear()
            if ref is not None and ref.identity is not None:
                self._resolved[store.uri, version] = ref
            else:
                self._resolved.pop((store.uri, version), None)
        return version

    def forget(self, uri: str) -> None:
        """Drop what is cached for the table at ``uri`` (it was dropped or replaced)."""
        with self._lock:
            store = self._stores.pop(uri, None)
            if store is not None:
                self._prefixes.pop(store.uri, None)
                self._namings.pop(store.uri, None)
                for key in [k for k in self._resolved if k[0] == store.uri]:
                    del self._resolved[key]

    def manifest(self, table: str, version: int) -> Manifest:
        """Version ``version`` of ``table``.

        Cached by the manifest file's identity too (one ``stat``): a table deleted and
        written again at the same place, here or by another process, numbers its
        versions from 1 again, and must not read as the table it replaced."""
        return self._manifest(table, version, None)

    def resolved_manifest(self, table: str, version: int) -> Manifest:
        """:meth:`manifest` of the version :meth:`version_of` returned last for
        ``table``, by the manifest file that resolution saw (when it saw one)."""
        store = self.store(table)
        with self._lock:
            ref = self._resolved.get((store.uri, version))
        return self._manifest(table, version, ref)

    def _manifest(self, table: str, version: int, ref: VersionRef | None) -> Manifest:
        store = self.store(table)
        with self._lock:
            prefix = self._prefixes.get(store.uri)
            if prefix is None:
                prefix = self._prefixes[store.uri] = (self._id, next(self._generations))
            naming = self._namings.get(store.uri, ManifestNaming.V2)
        if ref is not None:
            found, identity = ref, ref.identity
        else:
            found = VersionRef(version, naming)
            try:
                identity = store.identity(found.key)
            except NotFoundError:  # the other naming scheme, or no such version
                found = find_version(store, version)
                identity = store.identity(found.key)
                with self._lock:
                    self._namings[store.uri] = found.naming
        return self.runtime.cache.get_or_load(
            TABLE_VERSIONS, (*prefix, store.uri, version, identity),
            lambda: read_manifest(store, found))[0]


class LanceSchemaProvider(SchemaProvider):
    """``lance.default``: every table of a :class:`TableDirectory`, resolved lazily."""

    def __init__(self, resolver: VersionResolver, errors: ErrorRegistry,
                 consistency: str = "strong") -> None:
        if consistency not in CONSISTENCY:
            raise InvalidInputError(f"consistency must be one of {CONSISTENCY}, got "
                                    f"{consistency!r}")
        self.resolver = resolver
        self.errors = errors
        self.consistency = consistency
        self._planned: dict[str, weakref.WeakSet[Planned]] = {}
        self._others: dict[str, Any] = {}
        self._warm: dict[str, WarmView] = {}  # per table: strong LSM views kept warm
        # per (query, table, version): the moment its strong LSM reads share (while
        # the query's providers hold it)
        self._moments: weakref.WeakValueDictionary[tuple[str, str, int], ReadMoment] = \
            weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    @property  # DataFusion 55 reads a sequence property, whatever its stubs declare
    def table_names(self) -> list[str]:  # type: ignore[override]
        with self._lock:
            others = list(self._others)
        return sorted(set(self.resolver.directory.names()) | set(others))

    def table(self, name: str) -> Table | None:
        with self._lock:
            other = self._others.get(name)
        if other is not None:
            return other
        parsed = TableName.parse(name)
        if parsed.query_id is None and "#" in name:
            return None  # flags come from the front door only: "a#b" names no table
        try:
            self.resolver.directory.uri(parsed.table)
        except NotFoundError:
            return None  # DataFusion reports "table not found" itself
        dataset = self.dataset(parsed)
        if parsed.query_id:
            with self._lock:
                self._planned.setdefault(parsed.query_id, weakref.WeakSet()).add(dataset)
        return Table(dataset)

    def dataset(self, parsed: TableName) -> Planned:
        if parsed.query_id and parsed.spec is not None and parsed.spec.kind == "version":
            version = int(parsed.spec.value)  # type: ignore[arg-type]  # pinned, checked
        else:
            version = self.resolver.version_of(parsed.table, parsed.spec)
        manifest = self.resolver.resolved_manifest(parsed.table, version)
        lsm = self._lsm(parsed, version, manifest)
        if lsm is not None:
            return lsm
        return LanceTableDataset(
            parsed.table,
            self.resolver.store(parsed.table),
            manifest,
            system_columns=parsed.system_columns,
            errors=self.errors,
            query_id=parsed.query_id,
        )

    def reads_as_lsm(self, table: str, version: int) -> bool:
        """Whether ``table`` at ``version`` reads as an LSM view in this session (its
        provider then shows ``_gen`` and ``_region`` among its system columns)."""
        return self._has_mem_wal(table, version, self.resolver.resolved_manifest(table, version))

    def _has_mem_wal(self, table: str, version: int, manifest: Manifest) -> bool:
        if self.consistency == "base" or manifest.index_section is None:
            return False
        uri = self.resolver.directory.uri(table)
        indices = decode_index_section(manifest.index_section, f"{uri}: version {version}")
        # (a corrupt section is a FormatError, not a plain table)
        return any(i.name == MEM_WAL_INDEX_NAME for i in indices)

    def _lsm(self, parsed: TableName, version: int, manifest: Manifest
             ) -> LsmTableDataset | None:
        """The LSM view of a table with a MemWAL index (None: read the table itself).

        The latest version reads with the session's consistency; an older one (time
        travel) from that version's MemWAL index snapshot."""
        if not self._has_mem_wal(parsed.table, version, manifest):
            return None
        uri = self.resolver.directory.uri(parsed.table)
        # a versioned name the front door did not pin ("t@3" written by hand) travels too
        travel = parsed.travel or (parsed.spec is not None and parsed.query_id is None)
        consistency = "snapshot" if travel else self.consistency

        def open_view() -> LsmView | None:
            base = dataset(uri, version)
            if mem_wal_index.load(base) is None:
                return None
            warm = self._warm_view(uri) if consistency == "strong" else None
            return LsmView(base, consistency=consistency,
                           warm=warm.state if warm is not None else None)

        if consistency == "strong":  # the latest version: a warm view, revalidated
            view = self._warm_view(uri).view_of(manifest, open_view)
            if view is not None and parsed.query_id:
                view = self._in_query_moment(parsed.query_id, uri, version, view)
        else:  # all from that version's MemWAL index snapshot: kept per table version
            key = (uri, version, manifest.timestamp_ns)  # re-created in place: a new one
            kept = self.resolver.runtime.cache.get_or_load(LSM_VIEWS, key, open_view)
            view = kept.fresh() if kept is not None else None
        if view is None:
            return None
        return LsmTableDataset(parsed.table, view, system_columns=parsed.system_columns,
                               errors=self.errors, query_id=parsed.query_id)

    def _in_query_moment(self, query_id: str, uri: str, version: int, view: LsmView
                         ) -> LsmView:
        """``view`` reading the moment every other reference to the table in the query
        reads (:class:`ReadMoment`): the first reference's MemTables, region manifests
        and MemTable rows, so a self-join or a subquery over the same table never sees
        a key in two states while a writer of this process puts."""
        query, dot, _ = query_id.rpartition(".")  # (a reference's id: query.reference)
        if not dot:
            return view  # one read alone (a point get answered without DataFusion)
        key = (query, uri, version)
        with self._lock:
            moment = self._moments.get(key)
            if moment is None:
                self._moments[key] = view.moment
                return view
        return view.fresh(moment)

    def _warm_view(self, uri: str) -> WarmView:
        """The table's warm strong view (a strong read keyed by the manifest the resolver
        gave: a new version, or the table re-created, resolves to another object)."""
        with self._lock:
            warm = self._warm.get(uri)
            if warm is None:
                warm = self._warm[uri] = WarmView(uri, CommitConfig())
            return warm

    def add_planned(self, query_id: str, dataset: NearestDataset | ChangesDataset) -> None:
        """Count ``dataset`` (a table function's) among the providers of ``query_id``."""
        with self._lock:
            self._planned.setdefault(f"{query_id}.functions", weakref.WeakSet()).add(dataset)

    def planned(self, query_id: str) -> list[Planned]:
        """Providers created while planning ``query_id`` (and forget the query)."""
        prefix = f"{query_id}."
        with self._lock:
            keys = [k for k in self._planned if k.startswith(prefix)]
            found = [ds for k in keys for ds in self._planned.pop(k)]
        return found

    def table_exist(self, name: str) -> bool:
        if name in self._others:
            return True
        try:
            self.resolver.directory.uri(TableName.parse(name).table)
        except NotFoundError:
            return False
        return True

    def is_external(self, name: str) -> bool:
        """True for tables DataFusion registered itself (``CREATE EXTERNAL TABLE``)."""
        with self._lock:
            return name in self._others

    def register_table(self, name: str, table: Any) -> None:
        """Other tables (memory tables, views) DataFusion registers in our schema."""
        with self._lock:
            self._others[name] = table

    def deregister_table(self, name: str, cascade: bool = True) -> None:
        with self._lock:
            self._others.pop(name, None)


class LanceCatalog(CatalogProvider):
    """The ``lance`` catalog: one schema, ``default``, of Lance tables."""
    def __init__(self, schema: LanceSchemaProvider) -> None:
        self._schema = schema

    def schema_names(self) -> set[str]:
        return {SCHEMA}

    # DataFusion 55 takes a schema provider here, though its stubs say a Schema
    def schema(self, name: str) -> LanceSchemaProvider | None:  # type: ignore[override]
        return self._schema if name == SCHEMA else None
