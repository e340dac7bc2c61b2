"""Side effects: object stores and commit primitives."""

from lance_sql.io.commit import CommitHandler, PutIfAbsentCommit, RenameCommit
from lance_sql.io.external import (
    ExternalManifestCommit,
    ExternalManifestStore,
    MemoryManifestStore,
    SqliteManifestStore,
)
from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore
from lance_sql.io.store import ObjectStore, RandomAccessSource, check_key, join_key
from lance_sql.io.uri import open_store

__all__ = [
    "CommitHandler",
    "ExternalManifestCommit",
    "ExternalManifestStore",
    "LocalStore",
    "MemoryManifestStore",
    "MemoryStore",
    "ObjectStore",
    "PutIfAbsentCommit",
    "RandomAccessSource",
    "RenameCommit",
    "SqliteManifestStore",
    "check_key",
    "join_key",
    "open_store",
]
