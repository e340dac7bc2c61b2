"""Turn a table URI into an object store."""

from __future__ import annotations

import os

from lance_sql.errors import InvalidInputError
from lance_sql.io.local import LocalStore
from lance_sql.io.memory import MemoryStore
from lance_sql.io.store import ObjectStore


def open_store(uri: str | os.PathLike[str]) -> ObjectStore:
    """``memory://name[/prefix]`` or a local path (``file://`` accepted)."""
    text = os.fspath(uri)
    if "\x00" in text:  # (no file system takes one; os calls would raise ValueError)
        raise InvalidInputError(f"a NUL byte in the table path {text!r}")
    if text.startswith("memory://"):
        rest = text[len("memory://") :]
        name, _, prefix = rest.partition("/")
        return MemoryStore(name or "default", prefix)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise InvalidInputError(f"unsupported URI scheme {scheme!r} in {text!r}")
    return LocalStore(text)
