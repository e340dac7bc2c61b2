"""Scalar functions comparing floats as SQL (DataFusion) does (see
:mod:`lance_sql.float_order`): Arrow's kernels cannot see a NaN's sign."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_sql.expr.udfs import scalar_function
from lance_sql.float_order import float_keys
from lance_sql.numpy_arrow import array_from_numpy, numpy_of

__all__ = ["float_key_function", "negative_nan_function"]

_NO_NAN_ROWS = 1 << 16
_no_nan: list[pa.Array] = []  # all False, sliced for batches without a NaN (built once)


def _floats(values: pa.Array) -> np.ndarray:
    return numpy_of(values.fill_null(0.0) if values.null_count else values)


def _keys(values: pa.Array) -> pa.Array:
    mask = numpy_of(values.is_null()) if values.null_count else None
    return array_from_numpy(float_keys(_floats(values)), mask=mask)


def _negative_nans(values: pa.Array) -> pa.Array:
    x = _floats(values)
    nan = np.isnan(x)
    if not nan.any() and len(values) <= _NO_NAN_ROWS:
        if not _no_nan:
            _no_nan.append(array_from_numpy(np.zeros(_NO_NAN_ROWS, bool)))
        return _no_nan[0].slice(0, len(values))
    return array_from_numpy(nan & np.signbit(x))


def float_key_function(t: pa.DataType) -> str:
    """The function giving float32 / float64 values their SQL order keys."""
    out = pa.int64() if t == pa.float64() else pa.int32()
    return scalar_function(f"lance_sql_float_key_{t}", _keys, {"values": t}, out,
                           "float order key (see lance_sql.float_order)")


def negative_nan_function(t: pa.DataType) -> str:
    """The function telling which floats are NaNs with the sign bit set."""
    return scalar_function(f"lance_sql_negative_nan_{t}", _negative_nans, {"values": t},
                           pa.bool_(), "NaN with the sign bit set")
