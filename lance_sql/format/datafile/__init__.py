"""Lance data files: writer (2.0, 2.2), reader (2.0, 2.1, 2.2) and the byte source they read.

Module map: ``container`` (footer, offset tables, column metadata, every version);
2.0: ``encode_v2_0`` / ``decode_v2_0``; 2.1+: ``decode_v2_1`` (fields from leaf columns),
``miniblock`` / ``fullzip`` (page layouts), ``compressive`` / ``sparse`` (compressive
encodings), ``bitpacking`` (FastLanes), ``fsst``, ``blocks`` (decoded data to Arrow),
``repdef`` (levels to offsets/validity); 2.2 writing: ``shred`` (Arrow to levels),
``encode_v2_2`` / ``encode_miniblock`` (page encoders), ``writer_v2_2`` (columns).
"""

from lance_sql.format.datafile.reader import LanceFileReader
from lance_sql.format.datafile.source import BytesSource, RandomAccessSource
from lance_sql.format.datafile.writer import (
    DEFAULT_DATA_FORMAT,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_PAGE_BYTES,
    LanceFileWriter,
    WrittenFile,
)

__all__ = [
    "DEFAULT_DATA_FORMAT",
    "DEFAULT_MAX_PAGE_BYTES",
    "DEFAULT_PAGE_BYTES",
    "BytesSource",
    "LanceFileReader",
    "LanceFileWriter",
    "RandomAccessSource",
    "WrittenFile",
]
