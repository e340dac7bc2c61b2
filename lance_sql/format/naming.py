"""Where a table keeps each kind of file, and the two manifest naming schemes.

V1 names manifests ``{version}.manifest``; V2 (the default) names them
``{u64::MAX - version:020}.manifest`` so that the lexicographically smallest name
is the newest version and "find latest" needs only the first listed name.
"""

from __future__ import annotations

import json
import uuid
from enum import Enum

from lance_sql.errors import FormatError

VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
TAGS_DIR = "_refs/tags"
LATEST_HINT = f"{VERSIONS_DIR}/latest_version_hint.json"
U64_MAX = (1 << 64) - 1


# a hint file is a few dozen bytes; one far larger is not a hint (and not parsed)
MAX_HINT_BYTES = 4096
MAX_VERSION = (1 << 63) - 1


def parse_version_hint(raw: bytes) -> int | None:
    """The version a ``{"version": n}`` hint file names, or None when it names none
    that can be a version (1 to 2^63 - 1): unreadable JSON, another shape, a float, a
    bool, an integer out of range, nesting too deep to parse. A hint only saves
    probes, so a bad one is ignored rather than refused."""
    if len(raw) > MAX_HINT_BYTES:
        return None
    try:
        found = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    version = found.get("version") if isinstance(found, dict) else None
    if type(version) is not int or not 1 <= version <= MAX_VERSION:
        return None
    return version


class ManifestNaming(Enum):
    """How manifest files are named: V1 ``{v}.manifest``, V2 ``{u64::MAX - v:020}.manifest``
    (newest first when listed)."""
    V1 = 1
    V2 = 2

    def file_name(self, version: int) -> str:
        if self is ManifestNaming.V1:
            return f"{version}.manifest"
        return f"{U64_MAX - version:020d}.manifest"

    def key(self, version: int) -> str:
        return f"{VERSIONS_DIR}/{self.file_name(version)}"


def parse_manifest_name(name: str) -> tuple[int, ManifestNaming] | None:
    """Version and scheme of a ``_versions/`` entry; None for other files."""
    stem, dot, ext = name.partition(".")
    if ext != "manifest" or not dot or not stem.isdigit():
        return None
    if len(stem) == 20:
        value = int(stem)
        if value > U64_MAX:
            raise FormatError(f"manifest name {name!r} is out of range")
        return U64_MAX - value, ManifestNaming.V2
    return int(stem), ManifestNaming.V1


def transaction_key(read_version: int, txn_uuid: str) -> str:
    """Key of the transaction file of a commit read at ``read_version``."""
    return f"{TRANSACTIONS_DIR}/{transaction_file_name(read_version, txn_uuid)}"


def transaction_file_name(read_version: int, txn_uuid: str) -> str:
    """Name of a transaction file: ``{read_version}-{uuid}.txn``."""
    return f"{read_version}-{txn_uuid}.txn"


def tag_key(name: str) -> str:
    """Key of tag ``name``'s file."""
    return f"{TAGS_DIR}/{name}.json"


def data_file_name() -> str:
    """A fresh data file name in the reference's style.

    A UUIDv4 whose first 3 bytes are spelt as 24 binary digits (so names spread
    across object-store partitions) followed by the other 13 bytes in hex.
    """
    raw = uuid.uuid4().bytes
    bits = "".join(f"{b:08b}" for b in raw[:3])
    return f"{bits}{raw[3:].hex()}.lance"
