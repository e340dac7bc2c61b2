"""The pandas-free Arrow/numpy conversions (lance_sql/numpy_arrow.py) give exactly what
``pa.array`` / ``to_numpy`` / ``fill_null(False)`` give, on offsets, nulls, bools, every
fast-path dtype and the inputs that fall back."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_sql import numpy_arrow
from lance_sql.numpy_arrow import (
    array_from_numpy,
    array_from_python,
    array_of_scalars,
    empty_table,
    numpy_of,
    scalar,
    scalar_from_python,
    true_mask,
)

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
             "import pyarrow as pa\n"
             "from lance_sql.numpy_arrow import *\n"
             "a = array_from_numpy(np.arange(9), mask=np.arange(9) % 2 == 0)\n"
             "numpy_of(a.fill_null(a[1])); true_mask(pc.is_valid(a))\n"
             "s = [scalar(7), scalar('x'), scalar(1.5), scalar(True), scalar(None, pa.int8())]\n"
             "array_of_scalars([s[0], s[0]], pa.int64())\n"
             "empty_table(pa.schema([('a', pa.int64())]))\n"
             "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


_TYPES = [None, pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
          pa.uint32(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_(), pa.string(),
          pa.large_string(), pa.date32(), pa.binary()]
_VALUES = [None, True, False, 0, 7, -1, 127, 128, -129, 255, 256, 2**31 - 1, 2**31,
           2**32, 2**63 - 1, 2**63, 2**64, -2**63, -2**63 - 1, 1.5, -0.0, float("nan"),
           float("inf"), 1e300, "", "x", "héllo", "\ud800", b"raw"]


def _outcome(make: Callable[[], pa.Scalar]) -> tuple[str, object]:
    try:
        got = make()
    except Exception as err:  # noqa: BLE001 - the kind of error is what is compared
        return "error", type(err)
    return "ok", got


@pytest.fixture
def no_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffer paths, as in a process that has not imported pandas."""
    monkeypatch.setattr(numpy_arrow, "_pandas_loaded", lambda: False)


@pytest.mark.parametrize("type_", _TYPES, ids=str)
def test_scalar_is_pa_scalar(type_: pa.DataType | None, no_pandas: None) -> None:
    """Same value, type and validity as ``pa.scalar`` (NaN compared as NaN), or the
    same kind of error; the quick path is taken for the plain cases."""
    quick = 0
    for value in _VALUES:
        want = _outcome(lambda v=value: pa.scalar(v, type_))
        got = _outcome(lambda v=value: scalar(v, type_))
        assert got[0] == want[0], (value, type_, got, want)
        if want[0] == "error":
            assert got[1] is want[1], (value, type_)
            continue
        g, w = got[1], want[1]
        assert isinstance(g, pa.Scalar) and isinstance(w, pa.Scalar)
        assert g.type == w.type and g.is_valid == w.is_valid, (value, type_)
        if pa.types.is_floating(w.type) and w.is_valid and np.isnan(w.as_py()):
            assert np.isnan(g.as_py())
        else:
            assert g.equals(w), (value, type_)
        quick += scalar_from_python(value, type_) is not None
    if type_ in (None, pa.int64(), pa.int8(), pa.float64(), pa.string(), pa.bool_()):
        assert quick >= 2


def test_array_of_scalars_and_empty_table() -> None:
    ints = [pa.scalar(3, pa.int32()), pa.scalar(None, pa.int32()), pa.scalar(9, pa.int32())]
    assert array_of_scalars(ints, pa.int32()).equals(pa.array([3, None, 9], pa.int32()))
    # scalars of another type: converted as pa.array converts their values
    assert array_of_scalars([pa.scalar(2), pa.scalar(5)], pa.int16()).equals(
        pa.array([2, 5], pa.int16()))
    assert array_of_scalars([], pa.string()).equals(pa.array([], pa.string()))
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), ("s", pa.string()),
                        ("l", pa.list_(pa.int32()))], metadata={"k": "v"})
    got = empty_table(schema)
    assert got.schema == schema and got.schema.metadata == schema.metadata
    assert got.num_rows == 0 and got.equals(schema.empty_table())



_LISTS = [([1, 2, 3], pa.int64()), ([1, 2**40], pa.int32()), ([True, False], pa.bool_()),
          ([1.5, 2.0], pa.float32()), ([1e300, -1e300], pa.float32()), ([1, 2], pa.float64()),
          (["a", "héllo", ""], pa.string()), ([1.5], pa.int64()), ([2**64 - 1], pa.uint64()),
          ([-1], pa.uint8()), ([1, None], pa.int64()), ([True, 1], pa.int64()),
          (["x", 1], pa.string()), (["\ud800"], pa.string()), ([], pa.int64()),
          ([1, 2], pa.date32()), ([7, 8], pa.int8())]


@pytest.mark.parametrize(("values", "type_"), _LISTS, ids=str)
def test_array_from_python_is_pa_array(values: list, type_: pa.DataType,
                                       no_pandas: None) -> None:
    want = _outcome(lambda: pa.array(values, type_))
    got = _outcome(lambda: array_from_python(values, type_))
    assert got[0] == want[0], (values, got, want)
    if want[0] == "ok":
        assert isinstance(got[1], pa.Array) and got[1].equals(want[1])
    else:
        assert got[1] is want[1]


def test_array_of_scalars_takes_the_buffers(no_pandas: None) -> None:
    scalars = [pa.scalar(v, pa.int32()) for v in range(3000)]
    assert array_of_scalars(scalars, pa.int32()).equals(pa.array(range(3000), pa.int32()))
    words = [pa.scalar(f"w{v}") for v in range(50)]
    assert array_of_scalars(words, pa.string()).equals(pa.array([f"w{v}" for v in range(50)]))
