"""The random-access byte source the data-file reader pulls from.

The reader never opens files itself (``format/`` does no I/O); the io layer hands it any
object with this shape. :class:`BytesSource` is the in-memory one, for tests and for
files that were just written to a buffer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from lance_sql.errors import FormatError


@runtime_checkable
class RandomAccessSource(Protocol):
    """Positional reads from one immutable file."""

    path: str  # only used in error messages
    size: int

    def read_at(self, offset: int, length: int) -> bytes | memoryview: ...


class BytesSource:
    """A :class:`RandomAccessSource` over bytes already in memory (zero-copy slices)."""

    def __init__(self, data: bytes | bytearray | memoryview, path: str = "<memory>") -> None:
        self.path = path
        self._data = memoryview(data).cast("B")
        self.size = len(self._data)
        self.reads = 0  # number of read_at calls, handy for tests of I/O pruning

    def read_at(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(
                f"{self.path}: read of {length} bytes at {offset} is outside the file "
                f"({self.size} bytes)"
            )
        self.reads += 1
        return self._data[offset : offset + length]
