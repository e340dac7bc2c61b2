"""Lance data files (file format 2.0): writer, reader and the byte source they read from."""

from lance_sql.format.datafile.reader import LanceFileReader
from lance_sql.format.datafile.source import BytesSource, RandomAccessSource
from lance_sql.format.datafile.writer import (
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_PAGE_BYTES,
    LanceFileWriter,
    WrittenFile,
)

__all__ = [
    "DEFAULT_MAX_PAGE_BYTES",
    "DEFAULT_PAGE_BYTES",
    "BytesSource",
    "LanceFileReader",
    "LanceFileWriter",
    "RandomAccessSource",
    "WrittenFile",
]
