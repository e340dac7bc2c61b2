"""Metadata as the Arrow C data interface exports it: ordered (key, value) byte pairs.

pyarrow has no public accessor for two things lance_sql needs: the serialized metadata of
C++ extension types (``arrow.uuid``, ``arrow.fixed_shape_tensor``, ...), which is exactly
the ``ARROW:extension:*`` metadata pylance records, and schema metadata with repeated keys
in order (``Schema.metadata`` collapses them; the pickled form of a pyarrow expression
relies on them). Exporting through the C interface yields both.
"""

from __future__ import annotations

import ctypes
import struct

import pyarrow as pa


class _CArrowSchema(ctypes.Structure):
    """The C data interface's ``ArrowSchema`` struct."""


_CArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_CArrowSchema))),
    ("private_data", ctypes.c_void_p),
]  # fmt: skip


def c_metadata(obj: pa.DataType | pa.Field | pa.Schema) -> list[tuple[bytes, bytes]]:
    """The metadata ``obj`` exports through the C data interface, pairs in order (keys may
    repeat)."""
    c = _CArrowSchema()
    obj._export_to_c(ctypes.addressof(c))  # noqa: SLF001 - pyarrow's C data interface
    try:
        if not c.metadata:
            return []
        pairs = []
        pos = c.metadata + 4
        for _ in range(struct.unpack("<i", ctypes.string_at(c.metadata, 4))[0]):
            items = []
            for _kv in range(2):
                n = struct.unpack("<i", ctypes.string_at(pos, 4))[0]
                items.append(ctypes.string_at(pos + 4, n))
                pos += 4 + n
            pairs.append((items[0], items[1]))
        return pairs
    finally:
        if c.release:
            c.release(ctypes.byref(c))
