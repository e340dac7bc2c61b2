"""Reader/writer feature flags of a manifest.

A reader must refuse a table whose reader flags contain a bit it does not
understand; a writer likewise for writer flags. The flags a manifest carries are
derived from its contents by :func:`flags_for`.
"""

from __future__ import annotations

from lance_sql.errors import UnsupportedFeatureError

DELETION_FILES = 1
STABLE_ROW_IDS = 2
USE_V2_FORMAT_DEPRECATED = 4
TABLE_CONFIG = 8
BASE_PATHS = 16
DISABLE_TRANSACTION_FILE = 32
MIXED_FILE_VERSIONS = 256  # data files of different Lance file versions (e.g. 2.0 and 2.2)

_NAMES = {
    DELETION_FILES: "deletion files",
    STABLE_ROW_IDS: "stable row ids",
    USE_V2_FORMAT_DEPRECATED: "v2 format (deprecated)",
    TABLE_CONFIG: "table config",
    BASE_PATHS: "base paths",
    DISABLE_TRANSACTION_FILE: "no transaction file",
    MIXED_FILE_VERSIONS: "mixed data file versions",
}
KNOWN_READER_FLAGS = sum(_NAMES)
KNOWN_WRITER_FLAGS = sum(_NAMES)


def describe(flags: int) -> list[str]:
    """Human names of the set bits, unknown ones as ``unknown(bit)``."""
    out = []
    bit = 1
    while bit <= flags:
        if flags & bit:
            out.append(_NAMES.get(bit, f"unknown({bit})"))
        bit <<= 1
    return out


def _unknown(flags: int, known: int) -> list[int]:
    rest = flags & ~known
    return [1 << i for i in range(rest.bit_length()) if rest >> i & 1]


def check_readable(reader_flags: int, path: str) -> None:
    """Refuse to read a table needing reader feature flags lance_sql does not know."""
    unknown = _unknown(reader_flags, KNOWN_READER_FLAGS)
    if unknown:
        raise UnsupportedFeatureError(
            f"{path}: table needs reader feature flag(s) {unknown} that lance_sql does not "
            f"support (flags={reader_flags}); refusing to read it"
        )


def check_writable(writer_flags: int, path: str) -> None:
    """Refuse to write a table needing writer feature flags lance_sql does not know."""
    unknown = _unknown(writer_flags, KNOWN_WRITER_FLAGS)
    if unknown:
        raise UnsupportedFeatureError(
            f"{path}: table needs writer feature flag(s) {unknown} that lance_sql does not "
            f"support (flags={writer_flags}); refusing to write to it"
        )


def flags_for(
    *,
    has_deletion_files: bool,
    stable_row_ids: bool,
    has_config: bool,
    has_base_paths: bool,
    mixed_file_versions: bool = False,
) -> tuple[int, int]:
    """(reader_flags, writer_flags) for a manifest with these properties.

    ``mixed_file_versions``: some data file's version differs from the manifest's
    ``data_format`` (pylance 14 then sets 256 in both flags and requires it to read).
    """
    reader = writer = 0
    if mixed_file_versions:
        reader |= MIXED_FILE_VERSIONS
        writer |= MIXED_FILE_VERSIONS
    if has_deletion_files:
        reader |= DELETION_FILES
        writer |= DELETION_FILES
    if stable_row_ids:
        reader |= STABLE_ROW_IDS
        writer |= STABLE_ROW_IDS
    if has_config:
        writer |= TABLE_CONFIG
    if has_base_paths:
        reader |= BASE_PATHS
        writer |= BASE_PATHS
    return reader, writer
