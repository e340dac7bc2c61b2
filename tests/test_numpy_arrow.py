"""The pandas-free Arrow/numpy conversions (lance_sql/numpy_arrow.py) give exactly what
``pa.array`` / ``to_numpy`` / ``fill_null(False)`` give, on offsets, nulls, bools, every
fast-path dtype and the inputs that fall back."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_sql.numpy_arrow import array_from_numpy, numpy_of, true_mask

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]


def _values(dtype: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype == "bool":
        return rng.random(n) < 0.4
    return (rng.random(n) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 13, 1000])
def test_array_from_numpy_matches_pa_array(dtype: str, n: int) -> None:
    values = _values(dtype, n)
    mask = np.arange(n) % 3 == 1
    for m in (None, mask, np.zeros(n, bool)):
        got = array_from_numpy(values, mask=m)
        got.validate(full=True)
        assert got.equals(pa.array(values, mask=m))
        assert got.null_count == (0 if m is None else int(m.sum()))
    strided = values[::2]
    assert array_from_numpy(strided).equals(pa.array(strided))


def test_array_from_numpy_falls_back() -> None:
    assert array_from_numpy([1, None, 3]).equals(pa.array([1, None, 3]))
    ints = np.arange(5, dtype=np.int32)
    assert array_from_numpy(ints, pa.int64()).equals(pa.array(ints, pa.int64()))
    big_endian = np.arange(5, dtype=">i4")
    with pytest.raises(pa.ArrowNotImplementedError):  # as pa.array: not read as native
        array_from_numpy(big_endian)
    stamps = np.array(["2024-01-01"], "datetime64[ms]")
    assert array_from_numpy(stamps).equals(pa.array(stamps))


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_of_matches_to_numpy(dtype: str) -> None:
    arr = pa.array(_values(dtype, 300))
    for a in (arr, arr.slice(7, 101), arr.slice(300), pa.chunked_array([arr.slice(0, 5),
                                                                         arr.slice(5)]),
              pa.chunked_array([arr.slice(3)]), pa.chunked_array([], arr.type)):
        got = numpy_of(a)
        want = a.to_numpy(zero_copy_only=False) if isinstance(a, pa.Array) else a.to_numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    with_nulls = pa.array(_values(dtype, 20), mask=np.arange(20) % 4 == 0)
    np.testing.assert_array_equal(numpy_of(with_nulls),
                                  with_nulls.to_numpy(zero_copy_only=False))
    strings = pa.array(["a", None])
    assert list(numpy_of(strings)) == ["a", None]


def test_true_mask_is_fill_null_false() -> None:
    cmp = pc.greater(pa.array([1, None, 5, 2, None, 9, 0, 4, 4, 8]), 3)
    for a in (cmp, cmp.slice(1), cmp.slice(3, 5), pa.chunked_array([cmp.slice(0, 4),
                                                                     cmp.slice(4)])):
        want = np.asarray(pc.fill_null(a, False))
        np.testing.assert_array_equal(true_mask(a), want)
    assert true_mask(pa.array([], pa.bool_())).size == 0


def test_helpers_do_not_import_pandas() -> None:
    probe = ("import sys, numpy as np, pyarrow.compute as pc\n"
             "from lance_sql.numpy_arrow import array_from_numpy, numpy_of, true_mask\n"
             "a = array_from_numpy(np.arange(9), mask=np.arange(9) % 2 == 0)\n"
             "numpy_of(a.fill_null(a[1])); true_mask(pc.is_valid(a))\n"
             "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
