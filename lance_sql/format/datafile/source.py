"""The random-access byte source the data-file reader pulls from.

The reader never opens files itself (``format/`` does no I/O); the io layer hands it any
object with this shape. :class:`BytesSource` is the in-memory one, for tests and for
files that were just written to a buffer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

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


class SourceReads:
    """Checked positional reads of one source, as page decoders call them:
    ``reads(offset, length)``, and :meth:`ranges` for many ranges at once (a source
    with its own ``read_ranges`` reads them straight into one buffer)."""

    __slots__ = ("source",)

    def __init__(self, source: RandomAccessSource) -> None:
        self.source = source

    def __call__(self, offset: int, length: int) -> bytes | memoryview:
        data = self.source.read_at(offset, length)
        if len(data) != length:
            raise FormatError(f"{self.source.path}: short read at {offset} "
                              f"({len(data)} of {length})")
        return data

    def view(self, offset: int, length: int) -> np.ndarray | None:
        """``length`` bytes at ``offset`` as a read-only uint8 view of the source's memory
        (a mapped file), without copying them; None when the source has no such view
        (the caller then reads them)."""
        viewer = getattr(self.source, "view_range", None)
        if viewer is None:
            return None
        out = viewer(offset, length)
        if out is not None and out.size != length:
            raise FormatError(f"{self.source.path}: short read at {offset} "
                              f"({out.size} of {length})")
        return out

    def into(self, offset: int, out: np.ndarray) -> None:
        """The ``out.size`` bytes at ``offset`` written into ``out`` (a contiguous uint8
        array): straight from the file when the source can (``read_into``), else a read
        and a copy."""
        into = getattr(self.source, "read_into", None)
        if into is not None:
            into(offset, out)
        else:
            out[:] = np.frombuffer(self(offset, int(out.size)), np.uint8)

    def ranges(self, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The bytes of ranges ``[offsets[i], offsets[i] + lengths[i])`` back to back,
        as a uint8 array."""
        many = getattr(self.source, "read_ranges", None)
        if many is not None:
            out = many(offsets, lengths)
            if out.size != int(lengths.sum()):
                raise FormatError(f"{self.source.path}: short read of {len(offsets)} ranges")
            return out
        return np.frombuffer(b"".join([self(o, n) for o, n in zip(
            offsets.tolist(), lengths.tolist(), strict=True)]), np.uint8)
