"""List functions in filters, as DataFusion (so SQL, and pylance's filters) has them:
``l[i]`` / ``array_element(l, i)`` (1-based, negative from the end, NULL out of range),
``array_has(l, x)`` (NULL for a NULL list or value) and ``cardinality(l)`` /
``array_length(l)`` (elements, as uint64), over lists, large lists and fixed-size lists.

Arrow has no kernels with these semantics (``list_element`` fails out of range), so they
are pyarrow scalar functions, registered per list type on first use and vectorised over
the lists' offsets with numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.expr.udfs import scalar_function
from lance_sql.numpy_arrow import array_from_numpy, numpy_of

__all__ = ["is_list", "list_function"]

def is_list(t: pa.DataType) -> bool:
    """Whether ``t`` is a list type these functions take."""
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _spans(lists: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each list's elements start in ``lists.values``, how many it has, and which
    lists are valid."""
    n = len(lists)
    valid = np.ones(n, bool) if lists.null_count == 0 else numpy_of(lists.is_valid())
    if pa.types.is_fixed_size_list(lists.type):
        size = lists.type.list_size
        return (np.arange(n, dtype=np.int64) + lists.offset) * size, np.full(n, size), valid
    offsets = numpy_of(lists.offsets).astype(np.int64)
    return offsets[:-1], np.diff(offsets), valid


def _ints(value: pa.Array | pa.Scalar, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An index argument as int64 values and their validity, ``n`` of them."""
    if isinstance(value, pa.Scalar):
        if not value.is_valid:
            return np.zeros(n, np.int64), np.zeros(n, bool)
        return np.full(n, int(value.as_py()), np.int64), np.ones(n, bool)
    valid = numpy_of(value.is_valid())
    return numpy_of(value.fill_null(0)).astype(np.int64), valid


def array_element(lists: pa.Array, index: pa.Array | pa.Scalar) -> pa.Array:
    starts, lengths, valid = _spans(lists)
    i, given = _ints(index, len(lists))
    pos = np.where(i > 0, i - 1, lengths + i)
    ok = valid & given & (i != 0) & (pos >= 0) & (pos < lengths)
    at = array_from_numpy(np.where(ok, starts + pos, 0).astype(np.int64), mask=~ok)
    return lists.values.take(at)


def array_has(lists: pa.Array, value: pa.Array | pa.Scalar) -> pa.Array:
    n = len(lists)
    starts, lengths, valid = _spans(lists)
    lengths = np.where(valid, lengths, 0)
    owner = np.repeat(np.arange(n), lengths)
    first = np.cumsum(lengths) - lengths
    flat = np.arange(owner.size, dtype=np.int64) + np.repeat(starts - first, lengths)
    elements = lists.values.take(array_from_numpy(flat))
    if isinstance(value, pa.Scalar):
        wanted: pa.Array | pa.Scalar = value
        known = np.full(n, value.is_valid)
    else:
        wanted = value.take(array_from_numpy(owner.astype(np.int64)))
        known = numpy_of(value.is_valid())
    if elements.type in (pa.float32(), pa.float64()):
        equal = _same_floats(elements, wanted)
    else:
        equal = numpy_of(pc.equal(elements, wanted).fill_null(False))
    found = np.bincount(owner[equal], minlength=n) > 0
    return array_from_numpy(found, mask=~(valid & known))


def _same_floats(elements: pa.Array, wanted: pa.Array | pa.Scalar) -> np.ndarray:
    """Which ``elements`` are ``wanted`` as DataFusion's ``array_has`` finds them: as
    distinct values, bit for bit (0.0 is not -0.0; a NaN finds a NaN), not by IEEE ``=``."""
    t = elements.type
    ints = np.int64 if t == pa.float64() else np.int32
    valid = numpy_of(elements.is_valid())
    bits = numpy_of(elements.fill_null(0.0)).view(ints)
    if isinstance(wanted, pa.Scalar):
        if not wanted.is_valid:
            return np.zeros(len(elements), bool)
        value = np.array([wanted.cast(t).as_py()], numpy_of(elements[:0]).dtype).view(ints)[0]
        return valid & (bits == value)
    wanted = wanted.cast(t)
    other = numpy_of(wanted.fill_null(0.0)).view(ints)
    return valid & numpy_of(wanted.is_valid()) & (bits == other)


def cardinality(lists: pa.Array) -> pa.Array:
    _, lengths, valid = _spans(lists)
    return array_from_numpy(lengths.astype(np.uint64), mask=~valid)


_KERNELS: dict[str, tuple[Callable[..., pa.Array], int]] = {
    "array_element": (array_element, 2), "array_has": (array_has, 2),
    "cardinality": (cardinality, 1),
}


def list_function(op: str, types: list[pa.DataType], out: pa.DataType) -> str:
    """The name of the scalar function ``op`` over arguments of ``types`` (a list type
    first) returning ``out``, registered on first use."""
    kernel, arity = _KERNELS[op]
    signature = "|".join(map(str, [*types, out]))
    name = f"lance_sql_{op}_{hashlib.sha1(signature.encode()).hexdigest()[:16]}"
    names = ["lists", "other"][:arity]
    return scalar_function(name, kernel, dict(zip(names, types, strict=True)), out, op)
