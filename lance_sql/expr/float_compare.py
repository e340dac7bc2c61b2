"""Scalar functions comparing floats as SQL (DataFusion) does (see
:mod:`lance_sql.float_order`): Arrow's kernels cannot see a NaN's sign."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_sql.expr.udfs import scalar_function
from lance_sql.float_order import float_keys

__all__ = ["float_key_function", "negative_nan_function"]

_NO_NAN = pa.array(np.zeros(1 << 16, bool))  # sliced for batches without a NaN


def _floats(values: pa.Array) -> np.ndarray:
    return (values.fill_null(0.0) if values.null_count else values).to_numpy(
        zero_copy_only=False)


def _keys(values: pa.Array) -> pa.Array:
    mask = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    return pa.array(float_keys(_floats(values)), mask=mask)


def _negative_nans(values: pa.Array) -> pa.Array:
    x = _floats(values)
    nan = np.isnan(x)
    if not nan.any() and len(values) <= len(_NO_NAN):
        return _NO_NAN.slice(0, len(values))
    return pa.array(nan & np.signbit(x), pa.bool_())


def float_key_function(t: pa.DataType) -> str:
    """The function giving float32 / float64 values their SQL order keys."""
    out = pa.int64() if t == pa.float64() else pa.int32()
    return scalar_function(f"lance_sql_float_key_{t}", _keys, {"values": t}, out,
                           "float order key (see lance_sql.float_order)")


def negative_nan_function(t: pa.DataType) -> str:
    """The function telling which floats are NaNs with the sign bit set."""
    return scalar_function(f"lance_sql_negative_nan_{t}", _negative_nans, {"values": t},
                           pa.bool_(), "NaN with the sign bit set")
