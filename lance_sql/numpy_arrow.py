"""Arrow arrays from numpy arrays without pyarrow's pandas probe.

``pa.array`` asks whether its input is a pandas object, and the first such question in a
process imports pandas (~0.3-0.4 s of CPU). A Python-API scan that never touches pandas
should not pay that on its first query, so the read paths build primitive arrays from
their buffers here; anything this does not cover goes through ``pa.array``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["array_from_numpy", "array_from_python", "array_of_scalars", "empty_table",
           "numpy_of", "scalar", "scalar_from_python", "true_mask"]

_NUMPY_TYPES: dict[pa.DataType, np.dtype] = {
    pa.from_numpy_dtype(np.dtype(name)): np.dtype(name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float32", "float64")}


def _bits(flags: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def array_from_numpy(values: object, type: pa.DataType | None = None,
                     mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type, mask=mask)``, built from buffers for a 1-D numeric or bool
    numpy array.

    No copy for contiguous numeric data; other inputs, or a ``type`` that differs from the
    array's own, take ``pa.array``.
    """
    if not isinstance(values, np.ndarray) or values.ndim != 1 or (
            values.dtype.kind not in "biuf" or not values.dtype.isnative) or (
            mask is not None and (mask.shape != values.shape or mask.dtype != np.bool_)):
        return pa.array(values, type, mask=mask)
    own = pa.from_numpy_dtype(values.dtype)
    if type is not None and type != own:
        return pa.array(values, type, mask=mask)
    n = values.shape[0]
    validity = None
    null_count = 0
    if mask is not None:
        null_count = int(np.count_nonzero(mask))
        if null_count:
            validity = _bits(~mask)
    data = _bits(values) if values.dtype == np.bool_ else pa.py_buffer(
        np.ascontiguousarray(values))
    return pa.Array.from_buffers(own, n, [validity, data], null_count=null_count)


def true_mask(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array as a numpy bool array, nulls as False.

    What ``pc.fill_null(values, False).to_numpy()`` gives, without the Python scalar
    that ``fill_null`` makes (pyarrow's first scalar imports pandas).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n, offset = len(values), values.offset
    validity, data = values.buffers()[:2]

    def unpack(buf: pa.Buffer) -> np.ndarray:
        bits = np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")
        return bits[offset:offset + n].astype(bool)

    out = unpack(data) if data is not None else np.zeros(n, bool)
    if values.null_count and validity is not None:
        out &= unpack(validity)
    return out


def numpy_of(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``values.to_numpy(zero_copy_only=False)``, read from the buffers for a numeric or
    bool array without nulls (pyarrow's ``to_numpy`` imports pandas on first use).

    Numeric arrays come back as read-only views of the Arrow data, as ``to_numpy`` gives.
    """
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks != 1:
            values = values.combine_chunks()
        else:
            values = values.chunk(0)
    dtype = _NUMPY_TYPES.get(values.type)
    if values.null_count or dtype is None:
        return values.to_numpy(zero_copy_only=False)
    n, offset = len(values), values.offset
    data = values.buffers()[1]
    if dtype == np.bool_:
        if data is None:
            return np.zeros(n, bool)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
        return bits[offset:offset + n].astype(bool)
    if data is None:
        return np.zeros(n, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * dtype.itemsize)


_INT_RANGES = {t: (int(np.iinfo(d).min), int(np.iinfo(d).max))
               for t, d in _NUMPY_TYPES.items() if d.kind in "iu"}


def scalar_from_python(value: object, type: pa.DataType | None = None) -> pa.Scalar | None:
    """``pa.scalar(value, type)`` for a None, bool, int, float or str literal (what
    filters mostly hold), made from a one-row array's buffers; None when ``value`` or
    ``type`` is another kind, or the value does not fit, so that the caller's
    ``pa.scalar`` decides (and words any error)."""
    if value is None:
        if type is None:
            return None
        try:
            return pa.nulls(1, type)[0]
        except (pa.ArrowException, TypeError):
            return None
    if isinstance(value, bool):
        if type is not None and type != pa.bool_():
            return None
        return array_from_numpy(np.array([value]))[0]
    if isinstance(value, int):
        type = pa.int64() if type is None else type
        bounds = _INT_RANGES.get(type)
        if bounds is None or not bounds[0] <= value <= bounds[1]:
            return None
        return array_from_numpy(np.array([value], _NUMPY_TYPES[type]))[0]
    if isinstance(value, float):
        if type is not None and type not in (pa.float64(), pa.float32()):
            return None
        values = np.array([value], np.float64)
        if type == pa.float32():
            with np.errstate(over="ignore"):  # too large: inf, as pyarrow rounds it
                values = values.astype(np.float32)
        return array_from_numpy(values)[0]
    if isinstance(value, str) and (type is None or type == pa.string()):
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        offsets = np.array([0, len(data)], np.int32)
        return pa.StringArray.from_buffers(1, pa.py_buffer(offsets), pa.py_buffer(data))[0]
    return None


def _pandas_loaded() -> bool:
    """Once pandas is imported, pyarrow's own conversions cost nothing extra (and are
    quicker than building from buffers in Python)."""
    return "pandas" in sys.modules


def scalar(value: object, type: pa.DataType | None = None) -> pa.Scalar:
    """``pa.scalar(value, type)`` (same result, same errors), from buffers where
    :func:`scalar_from_python` can while pandas is not imported."""
    if _pandas_loaded():
        return pa.scalar(value, type)
    quick = scalar_from_python(value, type)
    return quick if quick is not None else pa.scalar(value, type)


def array_from_python(values: Sequence[object], type: pa.DataType) -> pa.Array:
    """``pa.array(values, type)`` for a list without None of ints, floats or bools into
    their numeric type, or of str into ``string``, made from buffers (pa.array probes
    for pandas on first use); other lists take ``pa.array``."""
    if _pandas_loaded():
        return pa.array(values, type)
    dtype = _NUMPY_TYPES.get(type)
    if values and dtype is not None and not any(v is None for v in values):
        try:
            with np.errstate(over="ignore"):  # float32: too large is inf, as pyarrow's
                numbers = np.array(values, dtype)
        except (OverflowError, TypeError, ValueError):
            return pa.array(values, type)  # (its error, or its conversion)
        if not all(_same_kind(v, dtype) for v in values):
            return pa.array(values, type)
        return array_from_numpy(numbers)
    if values and type == pa.string() and all(isinstance(v, str) for v in values):
        try:
            encoded = [str(v).encode("utf-8") for v in values]
        except UnicodeEncodeError:
            return pa.array(values, type)
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
        if offsets[-1] < 2**31:
            return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(
                offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded)))
    return pa.array(values, type)


def _same_kind(value: object, dtype: np.dtype) -> bool:
    """Whether numpy converts ``value`` to ``dtype`` as pyarrow does: bools into bool,
    ints (not bools) into integers, floats into floats."""
    if dtype.kind == "b":
        return isinstance(value, bool | np.bool_)
    if dtype.kind == "f":
        return isinstance(value, float | np.floating)
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def array_of_scalars(scalars: Sequence[pa.Scalar], type: pa.DataType) -> pa.Array:
    """``pa.array([s.as_py() for s in scalars], type)``: from the values' buffers
    (:func:`array_from_python`) or joined from one-row arrays when every scalar is
    already of ``type``."""
    if scalars and all(s.type.equals(type) for s in scalars) and (
            type in _NUMPY_TYPES or type == pa.string()) and all(s.is_valid for s in scalars):
        return array_from_python([s.as_py() for s in scalars], type)
    if not scalars or any(not s.type.equals(type) for s in scalars):
        return pa.array([s.as_py() for s in scalars], type)
    return pa.concat_arrays([pa.repeat(s, 1) for s in scalars])


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema.empty_table()`` (a chunk of no rows per column), from empty arrays."""
    try:
        arrays = [pa.nulls(0, f.type) for f in schema]
    except (pa.ArrowException, TypeError):
        return schema.empty_table()
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=schema)])


def first_rows(table: pa.Table, n: int) -> pa.Table:
    """The first ``n`` rows of ``table`` (all when it has fewer). ``table.slice(0, n)``
    alone is not that for a table without columns: pyarrow gives it the length asked,
    whatever its rows, and a count of it would see ``n`` rows."""
    return table.slice(0, min(n, table.num_rows))
