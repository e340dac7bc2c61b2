"""Where a region's files live, and the bit-reversed names of WAL entries and manifests.

WAL entries and region-manifest versions are named by their number's 64 bits written
least-significant bit first (entry 5 is ``1010…0``): consecutive numbers then differ in
their first characters, which spreads sequential writes across an object store's key
space instead of piling them onto one prefix.
"""

from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass

from lance_sql.errors import FormatError, InvalidInputError

__all__ = [
    "MEM_WAL_DIR", "GenerationDir", "RegionPaths", "bit_reversed", "parse_bit_reversed",
]

MEM_WAL_DIR = "_mem_wal"
MANIFEST_SUFFIX = ".binpb"
WAL_SUFFIX = ".lance"
VERSION_HINT = "version_hint.json"
_BITS = re.compile(r"^[01]{64}$")
_GENERATION = re.compile(r"^([0-9a-f]{8})_gen_([1-9][0-9]*)$")


def bit_reversed(number: int) -> str:
    """``number``'s 64 bits, least significant first, as '0'/'1' characters."""
    if not 0 <= number < 2**64:
        raise InvalidInputError(f"{number} is not an unsigned 64-bit number")
    return format(number, "064b")[::-1]


def parse_bit_reversed(stem: str) -> int | None:
    """The number a bit-reversed name stands for; None when ``stem`` is not one."""
    if not _BITS.match(stem):
        return None
    return int(stem[::-1], 2)


@dataclass(frozen=True)
class GenerationDir:
    """A flushed MemTable's directory name: ``{8 hex}_gen_{generation}``.

    The random prefix makes every flush attempt write somewhere new; only the directory
    the region manifest records is valid, others are orphans of failed flushes.
    """

    prefix: str
    generation: int

    @classmethod
    def new(cls, generation: int) -> GenerationDir:
        if generation < 1:
            raise InvalidInputError(f"generations start at 1, got {generation}")
        return cls(secrets.token_hex(4), generation)

    @classmethod
    def parse(cls, name: str) -> GenerationDir | None:
        match = _GENERATION.match(name)
        return cls(match.group(1), int(match.group(2))) if match else None

    @property
    def name(self) -> str:
        return f"{self.prefix}_gen_{self.generation}"


@dataclass(frozen=True)
class RegionPaths:
    """Keys (relative to the table root) of one region's files."""

    region_id: uuid.UUID

    @classmethod
    def parse_region_dir(cls, name: str) -> RegionPaths | None:
        try:
            parsed = uuid.UUID(name)
        except ValueError:
            return None
        return cls(parsed) if str(parsed) == name else None

    @property
    def root(self) -> str:
        return f"{MEM_WAL_DIR}/{self.region_id}"

    @property
    def manifest_dir(self) -> str:
        return f"{self.root}/manifest"

    @property
    def wal_dir(self) -> str:
        return f"{self.root}/wal"

    @property
    def version_hint(self) -> str:
        return f"{self.manifest_dir}/{VERSION_HINT}"

    def manifest(self, version: int) -> str:
        if version < 1:
            raise InvalidInputError(f"region manifest versions start at 1, got {version}")
        return f"{self.manifest_dir}/{bit_reversed(version)}{MANIFEST_SUFFIX}"

    def wal_entry(self, entry_id: int) -> str:
        if entry_id < 1:
            raise InvalidInputError(f"WAL entry ids start at 1, got {entry_id}")
        return f"{self.wal_dir}/{bit_reversed(entry_id)}{WAL_SUFFIX}"

    def generation(self, directory: GenerationDir | str) -> str:
        name = directory.name if isinstance(directory, GenerationDir) else directory
        if GenerationDir.parse(name) is None:
            raise FormatError(f"{self.root}: {name!r} is not a flushed generation directory")
        return f"{self.root}/{name}"


def parse_manifest_name(name: str) -> int | None:
    """The version of a region-manifest file name, or None for other files."""
    if not name.endswith(MANIFEST_SUFFIX):
        return None
    return parse_bit_reversed(name[: -len(MANIFEST_SUFFIX)])


def parse_wal_name(name: str) -> int | None:
    """The entry id of a WAL file name, or None for other files."""
    if not name.endswith(WAL_SUFFIX):
        return None
    return parse_bit_reversed(name[: -len(WAL_SUFFIX)])
