"""How SQL (DataFusion, and so pylance's filters) orders floats, as integers.

DataFusion compares floats by IEEE total order, except that the two zeros are equal: a
negative-sign NaN (what ``inf - inf`` gives on x86) is below ``-inf``, a NaN above
``+inf``, and a NaN equals a NaN of its sign whatever its payload. Mapping each float to
an integer key that orders so lets every comparison, sort and binary search (filters,
index pages, index lookups) be plain integer work, one rule everywhere.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["float_key", "float_keys", "total_order"]

_INT: dict[int, np.dtype] = {8: np.dtype("<i8"), 4: np.dtype("<i4"), 2: np.dtype("<i2")}


def _as_key(bits: np.ndarray, width: int) -> np.ndarray:
    # IEEE total order as integers: negative numbers count down from the sign bit
    top = np.array(np.iinfo(bits.dtype).max, bits.dtype)
    return bits ^ ((bits >> (8 * width - 1)) & top)


def total_order(values: np.ndarray) -> np.ndarray:
    """Integers ordering ``values`` (floats) by IEEE total order, every bit pattern apart
    (-0.0 before 0.0, NaNs by sign and payload): how pylance sorts index entries."""
    width = values.dtype.itemsize
    return _as_key(values.view(_INT[width]), width)


_NAN_BITS = {8: (0x7FF8000000000000, -0x0008000000000000), 4: (0x7FC00000, -0x00400000)}


def _nan_keys(width: int) -> tuple[int, int]:
    """The keys of every positive NaN and every negative one (the canonical ones')."""
    dtype = _INT[width]
    positive, negative = _NAN_BITS[width]
    return (int(_as_key(np.array([positive], dtype), width)[0]),
            int(_as_key(np.array([negative], dtype), width)[0]))


def float_keys(values: np.ndarray) -> np.ndarray:
    """Integer keys ordering ``values`` (floats) as SQL compares them (see the module)."""
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    width = values.dtype.itemsize
    with np.errstate(invalid="ignore"):  # (signalling NaNs: their keys are set below)
        normal = values + values.dtype.type(0.0)  # -0.0 + 0.0 is 0.0
    keys = total_order(normal)
    nan = np.isnan(values)
    if nan.any():
        positive, negative = _nan_keys(width)
        keys[nan] = np.where(np.signbit(values[nan]), negative, positive)
    return keys


def float_key(value: float, width: int = 8) -> int:
    """The key of one float (``width`` bytes: 8 for float64, 4 for float32)."""
    if value != value:
        sign = struct.pack("<d", value)[7] >> 7
        positive, negative = _nan_keys(width)
        return negative if sign else positive
    return int(float_keys(np.array([value], np.float64 if width == 8 else np.float32))[0])
