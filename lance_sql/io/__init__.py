"""Side effects: object stores and commit primitives."""

from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore
from lance_sql.io.store import ObjectStore, RandomAccessSource, check_key, join_key
from lance_sql.io.uri import open_store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "RandomAccessSource",
    "check_key",
    "join_key",
    "open_store",
]
